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
//    for its model and its sampler (variant_entry<Tag, Backend>(),
//    model_adapter.hpp, where the model types are).
//  * OptimizerMenu<Backend>: the optimizers --optimizer may name
//    (optimizer_menu<Backend, List>()).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "normlab/io/safetensors.hpp"
#include "normlab/nn/config.hpp"
#include "normlab/nn/params.hpp"
#include "normlab/optim/any_optimizer.hpp"
#include "normlab/app/run_options.hpp"

namespace normlab {

template <class Backend>
class ModelHandle {
 public:
  using backend = Backend;
  using scalar_type = float;
  using optimizer = AnyOptimizer<float, Backend>;

  virtual ~ModelHandle() = default;
  virtual double forward(const std::int64_t* idx, const std::int64_t* targets, std::int64_t B, std::int64_t seq) = 0;
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

template <class Backend>
struct VariantEntry {
  std::string_view name, isolates;
  double default_lr = 0;
  std::string_view default_lr_source;               // where default_lr comes from, for the run's header
  void (*apply_defaults)(TrainOptions&) = nullptr;  // the papers' warmup and weight decay
  void (*configure)(ModelConfig&) = nullptr;        // the variant's own architecture (kv heads, d_ff, window), if any
  bool learns_alpha = false;         // its residual rule has a learned step α (--alpha-init)
  bool approximate_factors = false;  // its output factors are anGPT's (--angpt-attn-factor, --angpt-mlp-factor)
  bool nu_scaled_residual = false;   // its residual rule scales by ν(α) (--angpt-residual-factor)
  RunMemory (*plan_memory)(const ModelConfig&, const TrainOptions&) = nullptr;
  std::unique_ptr<ModelHandle<Backend>> (*make)(const ModelConfig&, std::int64_t batch, std::int64_t seq) = nullptr;
  std::string (*sample)(const SampleOptions&) = nullptr;  // on the CPU, from a checkpoint
};

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
