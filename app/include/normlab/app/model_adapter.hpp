#pragma once
// A model type behind the driver's ModelHandle, and a variant tag as the
// driver's VariantEntry: the only part of a trainer that knows its model.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>

#include "normlab/nn/policies.hpp"
#include "normlab/train/checkpoint.hpp"
#include "normlab/app/model_handle.hpp"
#include "normlab/app/run_options.hpp"
#include "normlab/app/sampling.hpp"
#include "normlab/train/variants.hpp"

namespace normlab {

// The papers' defaults: GPT warms up and decays its matrices; nGPT and anGPT
// use neither warmup nor weight decay.
template <class Model>
void apply_variant_defaults(TrainOptions& o) {
  constexpr bool normalized = keeps_unit_hidden<typename Model::scheme>;
  if (o.warmup < 0) o.warmup = normalized ? 0 : o.steps / 10;
  if (o.weight_decay < 0) o.weight_decay = normalized ? 0.0 : 0.1;
}

namespace detail {
template <class Tag, class Tuple>
struct tag_in;
template <class Tag, class... Tags>
struct tag_in<Tag, std::tuple<Tags...>> : std::bool_constant<(std::is_same_v<Tag, Tags> || ...)> {};
}  // namespace detail
// Whether a tag is one of normlab's own variants (variants.hpp).
template <class Tag>
inline constexpr bool is_builtin_variant = detail::tag_in<Tag, all_variants>::value;

template <class Model>
class ModelAdapter final : public ModelHandle<typename Model::backend> {
  using Base = ModelHandle<typename Model::backend>;

 public:
  static_assert(std::is_same_v<typename Model::scalar_type, float>, "the training driver trains float32 models");
  ModelAdapter(const ModelConfig& mc, std::int64_t batch, std::int64_t seq) : m_(mc, batch, seq) {}
  double forward(const std::int64_t* idx, const std::int64_t* targets, std::int64_t B, std::int64_t seq) override {
    return m_.forward(idx, targets, B, seq);
  }
  ParamStore<float>& params() override { return m_.params(); }
  const ParamStore<float>& params() const override { return m_.params(); }
  float* param_values() override { return m_.param_values(); }
  float* param_grads() override { return m_.param_grads(); }
  void init(std::uint64_t seed) override { m_.init(seed); }
  void apply_constraint() override { m_.apply_constraint(); }
  void download_params() override { m_.download_params(); }
  void save(const std::filesystem::path& path, const typename Base::optimizer* opt,
            const std::map<std::string, std::string>& metadata) const override {
    save_checkpoint(path, m_, opt, metadata);
  }
  void load(const io::SafetensorsFile& f, typename Base::optimizer* opt) override { load_checkpoint(f, m_, opt); }
  Model& model() { return m_; }

 private:
  void backward_reporting(bool accumulate, const std::function<void(std::size_t)>* ready) override {
    if (ready) m_.backward(accumulate, *ready);
    else m_.backward(accumulate);
  }
  Model m_;
};

template <class Tag, class Backend>
VariantEntry<Backend> variant_entry() {
  using Model = model_of<Tag, float, Backend>;
  VariantEntry<Backend> e;
  e.name = Tag::name;
  e.isolates = Tag::isolates;
  e.default_lr = Tag::default_lr;
  if constexpr (requires { Tag::default_lr_source; }) e.default_lr_source = Tag::default_lr_source;
  else if constexpr (is_builtin_variant<Tag>) e.default_lr_source = variants::kDefaultLrSource;
  else e.default_lr_source = "the variant tag's default_lr";
  e.apply_defaults = &apply_variant_defaults<Model>;
  if constexpr (requires(ModelConfig& mc) { Tag::configure(mc); }) e.configure = &Tag::configure;
  e.learns_alpha = rule_learns_alpha<typename Model::residual>();
  e.approximate_factors = Model::scheme::output_factors::approximate;
  e.nu_scaled_residual = rule_nu_scaled<typename Model::residual>();
  e.plan_memory = &plan_run_memory<Model>;
  e.make = +[](const ModelConfig& mc, std::int64_t batch, std::int64_t seq) -> std::unique_ptr<ModelHandle<Backend>> {
    return std::make_unique<ModelAdapter<Model>>(mc, batch, seq);
  };
  e.sample = &run_sampling<Tag>;
  return e;
}

}  // namespace normlab
