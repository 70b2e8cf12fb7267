#pragma once
// Checkpoints in safetensors: parameters under their reference names, the
// optimizer's state under optim/<state>/<name> (AdamW: exp_avg, exp_avg_sq),
// and metadata (variant, signature, model config, optimizer, step). Written atomically (temp file,
// fsync, rename) so a crash never leaves a half-written checkpoint.
#include <charconv>
#include <cmath>
#include <filesystem>
#include <span>
#include <utility>
#include <vector>
#include <map>
#include <string>

#include "normlab/core/error.hpp"
#include "normlab/core/exact.hpp"
#include "normlab/io/safetensors.hpp"
#include "normlab/model/transformer.hpp"
#include "normlab/optim/adamw.hpp"
#include "normlab/optim/any_optimizer.hpp"
#include "normlab/train/variants.hpp"

namespace normlab {

// ---- metadata readers that name the file and the key (never a raw std:: exception)

inline std::int64_t checkpoint_int(const io::SafetensorsFile& f, const std::string& key) {
  const std::string v = f.metadata_value(key);  // names the file when missing
  std::int64_t x = 0;
  const auto r = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || r.ec != std::errc() || r.ptr != v.data() + v.size())
    throw Error(f.source() + ": metadata '" + key + "' = '" + v.substr(0, 40) + "' is not an integer");
  return x;
}
inline std::uint64_t checkpoint_uint(const io::SafetensorsFile& f, const std::string& key) {
  const std::string v = f.metadata_value(key);
  std::uint64_t x = 0;
  const auto r = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || r.ec != std::errc() || r.ptr != v.data() + v.size())
    throw Error(f.source() + ": metadata '" + key + "' = '" + v.substr(0, 40) + "' is not a non-negative integer");
  return x;
}
inline double checkpoint_double(const io::SafetensorsFile& f, const std::string& key) {
  const std::string v = f.metadata_value(key);
  double x = 0;
  const auto r = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || r.ec != std::errc() || r.ptr != v.data() + v.size() || !std::isfinite(x))
    throw Error(f.source() + ": metadata '" + key + "' = '" + v.substr(0, 40) + "' is not a finite number");
  return x;
}

// Every value of a parameter or optimizer tensor must be finite: a NaN/Inf
// checkpoint would train, sample or diagnose garbage. Names the file and tensor.
template <class T>
void require_finite_tensor(std::span<const T> v, const std::string& file, const std::string& tensor) {
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(double(v[i])))
      throw Error(file + ": tensor '" + tensor + "' holds a non-finite value (" + std::to_string(double(v[i])) +
                  " at element " + std::to_string(i) + " of " + std::to_string(v.size()) +
                  "); the checkpoint cannot be used");
}

// The config fields a checkpoint records: every one that changes the function the
// model computes (integers exactly; reals as their shortest exact text).
inline const std::vector<std::pair<const char*, double ModelConfig::*>>& checkpoint_real_fields() {
  static const std::vector<std::pair<const char*, double ModelConfig::*>> f = {
      {"base_scale", &ModelConfig::base_scale},
      {"rmsnorm_eps", &ModelConfig::rmsnorm_eps},
      {"rope_base", &ModelConfig::rope_base},
      {"alpha_init", &ModelConfig::alpha_init},
      {"sqk_init", &ModelConfig::sqk_init},
      {"suv_init", &ModelConfig::suv_init},
      {"sz_init", &ModelConfig::sz_init},
      {"angpt_attn_factor_mult", &ModelConfig::angpt_attn_factor_mult},
      {"angpt_mlp_factor_mult", &ModelConfig::angpt_mlp_factor_mult}};
  return f;
}

// The model config a checkpoint was written with (to build the model that loads it).
inline ModelConfig checkpoint_config(const io::SafetensorsFile& f) {
  ModelConfig c;
  c.vocab_size = checkpoint_int(f, "vocab_size");
  c.n_embd = checkpoint_int(f, "n_embd");
  c.n_head = checkpoint_int(f, "n_head");
  c.n_layer = checkpoint_int(f, "n_layer");
  for (const auto& [key, field] : checkpoint_real_fields()) c.*field = checkpoint_double(f, key);
  return c;
}
// The context length the model was built for (anGPT's attention factor depends on
// it): "max_seq", else the training run's "run.seq", else 0 (unknown).
inline std::int64_t checkpoint_max_seq(const io::SafetensorsFile& f) {
  if (f.metadata().count("max_seq")) return checkpoint_int(f, "max_seq");
  if (f.metadata().count("run.seq")) return checkpoint_int(f, "run.seq");
  return 0;
}

// Name of the registered variant a model type is ("gpt", "ngpt", …), or its
// policy signature when it is a user-made combination.
template <class Model>
std::string variant_name_of() {
  std::string name;
  std::apply(
      [&](auto... tags) {
        ((std::is_same_v<typename decltype(tags)::template model<typename Model::scalar_type, typename Model::backend>,
                         Model>
              ? (name = std::string(decltype(tags)::name), 0)
              : 0),
         ...);
      },
      all_variants{});
  return name.empty() ? Model::variant_signature() : name;
}

// The model's live values (and the optimizer's state) are read where they are:
// host arrays on the CPU; on a backend with its own memory, copied to the host
// first. The file is the same either way, so checkpoints move between backends.
// The optimizer (any normlab::Optimizer, or null) is recorded by name with its
// hyperparameters and step count; its state tensors as optim/<state>/<parameter>.
template <class Model, class Opt>
void save_checkpoint(const std::filesystem::path& path, const Model& model, const Opt* opt,
                     const std::map<std::string, std::string>& extra_metadata = {}) {
  using T = typename Model::scalar_type;
  using Backend = typename Model::backend;
  io::SafetensorsWriter w;
  const ModelConfig& c = model.config();
  w.set_metadata("format", "normlab-checkpoint-1");
  w.set_metadata("variant", variant_name_of<Model>());
  w.set_metadata("signature", Model::variant_signature());
  w.set_metadata("vocab_size", std::to_string(c.vocab_size));
  w.set_metadata("n_embd", std::to_string(c.n_embd));
  w.set_metadata("n_head", std::to_string(c.n_head));
  w.set_metadata("n_layer", std::to_string(c.n_layer));
  for (const auto& [key, field] : checkpoint_real_fields()) w.set_metadata(key, exact_string(c.*field));
  w.set_metadata("max_seq", std::to_string(model.max_seq()));
  w.set_metadata("attn_output_factor", exact_string(model.attn_output_factor()));
  w.set_metadata("mlp_output_factor", exact_string(model.mlp_output_factor()));
  for (const auto& [k, v] : extra_metadata) w.set_metadata(k, v);
  const auto& store = model.params();
  const std::int64_t n = static_cast<std::int64_t>(store.size());
  std::vector<StateTensor<T>> state;
  if (opt) {
    if (opt->shard_begin() != 0 || opt->shard_end() != store.size())
      throw Error("save_checkpoint: the optimizer holds a ZeRO shard; gather its state into a whole optimizer first");
    state = const_cast<Opt*>(opt)->state();  // read only: state() hands out the buffers
  }
  const T* values = store.value();
  std::vector<const T*> slots;
  for (const auto& st : state) slots.push_back(st.data);
  std::vector<T> host;  // device values and state: (1 + slots, n) on the host
  if constexpr (!Backend::host_memory) {
    host.resize(std::size_t(n) * (1 + state.size()));
    Backend::download(host.data(), model.param_values(), n);
    values = host.data();
    for (std::size_t k = 0; k < state.size(); ++k) {
      Backend::download(host.data() + std::size_t(n) * (k + 1), state[k].data, n);
      slots[k] = host.data() + std::size_t(n) * (k + 1);
    }
  }
  for (const ParamSpec& s : store.specs()) {
    w.add<T>(s.name, s.shape, std::span<const T>(values + s.offset, s.numel));
    for (std::size_t k = 0; k < state.size(); ++k)
      w.add<T>("optim/" + state[k].name + "/" + s.name, s.shape, std::span<const T>(slots[k] + s.offset, s.numel));
  }
  if (opt) {
    w.set_metadata("optim_steps", std::to_string(opt->steps_taken()));
    w.set_metadata("optimizer", optimizer_name_of(*opt));
    for (const auto& [k, v] : opt->hyperparameters()) w.set_metadata("optim." + k, v);
  }
  w.write_atomic(path);
}

// The optimizer a checkpoint's state belongs to: its "optimizer" metadata, or
// "adamw" for a checkpoint written before normlab recorded it (AdamW was then
// the only optimizer).
inline std::string checkpoint_optimizer(const io::SafetensorsFile& f) {
  return f.metadata().count("optimizer") ? f.metadata_value("optimizer") : std::string("adamw");
}

// Refuses to resume an optimizer from another optimizer's state, or with other
// hyperparameters than it was saved with (naming both).
template <class Opt>
void check_checkpoint_optimizer(const io::SafetensorsFile& f, const Opt& opt) {
  const std::string want = optimizer_name_of(opt), got = checkpoint_optimizer(f);
  if (got != want)
    throw Error(f.source() + ": checkpoint holds the state of optimizer '" + got + "', this run's optimizer is '" +
                want + "' (resume with --optimizer " + got + ", or start a new run)");
  // Before the optimizer was recorded, AdamW always ran with these.
  const std::map<std::string, std::string> legacy = {{"beta1", "0.9"}, {"beta2", "0.95"}, {"eps", "1e-08"}};
  const bool recorded = f.metadata().count("optimizer") > 0;
  for (const auto& [k, v] : opt.hyperparameters()) {
    const std::string key = "optim." + k;
    std::string had;
    if (f.metadata().count(key)) had = f.metadata_value(key);
    else if (!recorded && legacy.count(k)) had = legacy.at(k);
    else if (!recorded) continue;  // e.g. weight_decay: the driver checks run.weight_decay
    else throw Error(f.source() + ": checkpoint of optimizer '" + got + "' lacks its hyperparameter " + k);
    if (had != v)
      throw Error(f.source() + ": checkpoint's optimizer has " + k + " = " + had + ", this run's has " + v);
  }
}

// Loads parameters (and optimizer state when `opt` is given) into `model`.
// A checkpoint of another variant or shape is refused with an error naming both.
// Into the host store (and, on a backend with its own memory, up to the device after).
template <class Model, class Opt>
void load_checkpoint(const io::SafetensorsFile& f, Model& model, Opt* opt) {
  using T = typename Model::scalar_type;
  using Backend = typename Model::backend;
  if (opt && (opt->shard_begin() != 0 || opt->shard_end() != model.params().size()))
    throw Error(f.source() + ": load_checkpoint needs a whole optimizer, not a ZeRO shard (load into a whole "
                "optimizer, then copy the shard)");
  if (opt) check_checkpoint_optimizer(f, *opt);
  const std::string want = variant_name_of<Model>();
  const std::string got = f.metadata().count("variant") ? f.metadata_value("variant") : "<none>";
  const std::string got_sig = f.metadata().count("signature") ? f.metadata_value("signature") : "<none>";
  if (got != want || got_sig != Model::variant_signature())
    throw Error(f.source() + ": checkpoint of variant '" + got + "' (" + got_sig + ") cannot be loaded into a '" +
                want + "' model (" + Model::variant_signature() + ")");
  const ModelConfig& c = model.config();
  auto check = [&](const char* key, std::int64_t v) {
    if (f.metadata_value(key) != std::to_string(v))
      throw Error(f.source() + ": checkpoint has " + key + " = " + f.metadata_value(key) + ", the model has " +
                  std::to_string(v));
  };
  check("vocab_size", c.vocab_size);
  check("n_embd", c.n_embd);
  check("n_head", c.n_head);
  check("n_layer", c.n_layer);
  // The real-valued config: a model built with another eps, RoPE base, scale
  // init or anGPT multiplier computes another function from the same weights.
  for (const auto& [key, field] : checkpoint_real_fields()) {
    if (!f.metadata().count(key))
      throw Error(f.source() + ": checkpoint lacks metadata '" + key +
                  "' (written before normlab recorded the whole model config), so it cannot be checked "
                  "against this model");
    if (f.metadata_value(key) != exact_string(c.*field))
      throw Error(f.source() + ": checkpoint has " + key + " = " + f.metadata_value(key) + ", the model has " +
                  exact_string(c.*field));
  }
  // anGPT's attention factor is derived for a context length (docs/angpt.md).
  for (const auto& [key, value] : {std::pair<const char*, double>{"attn_output_factor", model.attn_output_factor()},
                                   std::pair<const char*, double>{"mlp_output_factor", model.mlp_output_factor()}}) {
    if (!f.metadata().count(key)) throw Error(f.source() + ": checkpoint lacks metadata '" + key + "'");
    if (f.metadata_value(key) != exact_string(value))
      throw Error(f.source() + ": checkpoint has " + key + " = " + f.metadata_value(key) +
                  " (derived for a context of " + std::to_string(checkpoint_max_seq(f)) +
                  " tokens), the model has " + exact_string(value) + " (context " +
                  std::to_string(model.max_seq()) + "); build the model for the checkpoint's max_seq");
  }
  auto& store = model.params();
  const std::int64_t n = static_cast<std::int64_t>(store.size());
  std::vector<StateTensor<T>> state;
  if (opt) state = opt->state();
  std::vector<T*> slots;
  for (const auto& st : state) slots.push_back(st.data);
  std::vector<T> host;  // the state on the host before it goes to the device
  if constexpr (!Backend::host_memory) {
    host.resize(std::size_t(n) * state.size());
    for (std::size_t k = 0; k < state.size(); ++k) slots[k] = host.data() + std::size_t(n) * k;
  }
  for (const ParamSpec& s : store.specs()) {
    f.read_into<T>(s.name, s.shape, std::span<T>(store.value(s.offset), s.numel));
    require_finite_tensor<T>(std::span<const T>(store.value(s.offset), s.numel), f.source(), s.name);
    for (std::size_t k = 0; k < state.size(); ++k) {
      const std::string sn = "optim/" + state[k].name + "/" + s.name;
      f.read_into<T>(sn, s.shape, std::span<T>(slots[k] + s.offset, s.numel));
      require_finite_tensor<T>(std::span<const T>(slots[k] + s.offset, s.numel), f.source(), sn);
    }
  }
  model.upload_params();
  if (opt) {
    if constexpr (!Backend::host_memory)
      for (std::size_t k = 0; k < state.size(); ++k) Backend::upload(state[k].data, slots[k], n);
    opt->set_steps_taken(checkpoint_int(f, "optim_steps"));
  }
}

// A model's parameters only (sampling, evaluation): no optimizer state is read.
template <class Model>
void load_checkpoint(const io::SafetensorsFile& f, Model& model) {
  load_checkpoint(f, model, static_cast<AdamW<typename Model::scalar_type, typename Model::backend>*>(nullptr));
}

}  // namespace normlab
