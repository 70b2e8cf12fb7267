#pragma once
// What the training driver needs of a variant, behind one type per backend, so
// the driver (data, loop, checkpoints' bookkeeping, data parallelism, CLI) is
// compiled once per backend and communicator instead of once per variant: a
// variant's own program compiles only its model and this thin adapter.
//
//  * ModelHandle<Backend>: the model's step (forward, backward, parameters,
//    constraint) and its checkpoint I/O, as virtual calls. A step makes a few
//    of them; next to the step's GEMMs they cost nothing measurable.
//  * VariantEntry<Backend>: a variant's name, defaults, memory plan, a factory
//    for its model and its sampler (variant_entry<Tag, Backend>()).
//  * OptimizerMenu<Backend>: the optimizers --optimizer may name
//    (optimizer_menu<Backend, List>()).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "normlab/optim/any_optimizer.hpp"
#include "normlab/train/checkpoint.hpp"
#include "normlab/train/run_options.hpp"
#include "normlab/train/sampling.hpp"
#include "normlab/train/variants.hpp"

namespace normlab {

template <class Backend>
class ModelHandle {
 public:
  using backend = Backend;
  using scalar_type = float;
  using optimizer = AnyOptimizer<float, Backend>;

  virtual ~ModelHandle() = default;
  virtual double forward(const std::int64_t* idx, const std::int64_t* targets, std::int64_t B, std::int64_t Tn) = 0;
  void backward(bool accumulate = false) { backward_reporting(accumulate, nullptr); }
  // `ready(from)`: gradients [from, size) are final (Transformer::backward).
  template <class Ready>
  void backward(bool accumulate, Ready&& ready) {
    const std::function<void(std::size_t)> f = std::forward<Ready>(ready);
    backward_reporting(accumulate, &f);
  }
  virtual ParamStore<float>& params() = 0;
  virtual const ParamStore<float>& params() const = 0;
  virtual float* param_values() = 0;
  virtual float* param_grads() = 0;
  virtual void init(std::uint64_t seed) = 0;
  virtual void apply_constraint() = 0;
  virtual void download_params() = 0;
  virtual void save(const std::filesystem::path& path, const optimizer* opt,
                    const std::map<std::string, std::string>& metadata) const = 0;
  virtual void load(const io::SafetensorsFile& f, optimizer* opt) = 0;

 protected:
  virtual void backward_reporting(bool accumulate, const std::function<void(std::size_t)>* ready) = 0;
};

template <class Model>
class ModelAdapter final : public ModelHandle<typename Model::backend> {
  using Base = ModelHandle<typename Model::backend>;

 public:
  static_assert(std::is_same_v<typename Model::scalar_type, float>, "the training driver trains float32 models");
  ModelAdapter(const ModelConfig& mc, std::int64_t batch, std::int64_t seq) : m_(mc, batch, seq) {}
  double forward(const std::int64_t* idx, const std::int64_t* targets, std::int64_t B, std::int64_t Tn) override {
    return m_.forward(idx, targets, B, Tn);
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

template <class Backend>
struct VariantEntry {
  std::string_view name, isolates;
  double default_lr = 0;
  void (*apply_defaults)(TrainOptions&) = nullptr;  // the papers' warmup and weight decay
  RunMemory (*plan_memory)(const ModelConfig&, const TrainOptions&) = nullptr;
  std::unique_ptr<ModelHandle<Backend>> (*make)(const ModelConfig&, std::int64_t batch, std::int64_t seq) = nullptr;
  std::string (*sample)(const SampleOptions&) = nullptr;  // on the CPU, from a checkpoint
};

template <class Tag, class Backend>
VariantEntry<Backend> variant_entry() {
  using Model = model_of<Tag, float, Backend>;
  VariantEntry<Backend> e;
  e.name = Tag::name;
  e.isolates = Tag::isolates;
  e.default_lr = Tag::default_lr;
  e.apply_defaults = &apply_variant_defaults<Model>;
  e.plan_memory = &plan_run_memory<Model>;
  e.make = +[](const ModelConfig& mc, std::int64_t batch, std::int64_t seq) -> std::unique_ptr<ModelHandle<Backend>> {
    return std::make_unique<ModelAdapter<Model>>(mc, batch, seq);
  };
  e.sample = &run_sampling<Tag>;
  return e;
}

template <class Backend>
struct OptimizerMenu {
  std::string names;          // every one, for messages
  std::string extra_names;    // those beyond the built-ins, for --help
  bool (*has)(std::string_view) = nullptr;
  AnyOptimizer<float, Backend> (*make)(const ParamStore<float>&, const OptimizerOptions&, std::size_t begin,
                                       std::size_t end) = nullptr;
};

// Not inline: a build with the precompiled driver declares the built-in menu
// extern (driver.hpp) and takes it from the library.
template <class Backend, class List>
OptimizerMenu<Backend> optimizer_menu() {
  OptimizerMenu<Backend> m;
  m.names = detail::optimizer_names<float, Backend>(List{});
  const std::string builtins = detail::optimizer_names<float, Backend>(builtin_optimizers{});
  m.extra_names = m.names.size() > builtins.size() ? m.names.substr(builtins.size() + 2) : "";
  m.has = +[](std::string_view n) { return has_optimizer_named<float, Backend>(List{}, n); };
  m.make = +[](const ParamStore<float>& store, const OptimizerOptions& o, std::size_t begin, std::size_t end) {
    return make_optimizer_named<float, Backend>(List{}, store, o, begin, end);
  };
  return m;
}

}  // namespace normlab
