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
#include "normlab/train/checkpoint_meta.hpp"
#include "normlab/io/safetensors.hpp"
#include "normlab/model/transformer.hpp"
#include "normlab/optim/adamw.hpp"
#include "normlab/optim/any_optimizer.hpp"
#include "normlab/train/variants.hpp"

namespace normlab {

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
  for (const auto& [key, value] : checkpoint_shape_fields(c)) w.set_metadata(key, std::to_string(value));
  w.set_metadata("positions", positions_name(c.positions));
  w.set_metadata("architecture", Model::architecture());
  w.set_metadata("scalar", sizeof(T) == 4 ? "float32" : "float64");
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
  // Attention's and the MLP's shapes; a checkpoint written before they were
  // recorded holds the classic ones (multi-head, 4C, full causal).
  const ModelConfig classic = [&] {
    ModelConfig k = c;
    k.n_kv_heads = k.d_ff = k.attn_window = k.n_positions = 0;
    k.bias = false;
    return k;
  }();
  const auto classic_fields = checkpoint_shape_fields(classic);
  const auto model_fields = checkpoint_shape_fields(c);
  for (std::size_t i = 0; i < model_fields.size(); ++i) {
    const auto& [key, v] = model_fields[i];
    const std::string got = f.metadata().count(key) ? f.metadata_value(key) : std::to_string(classic_fields[i].second);
    if (got != std::to_string(v))
      throw Error(f.source() + ": checkpoint has " + key + " = " + got + ", the model has " + std::to_string(v) +
                  (f.metadata().count(key) ? "" : " (the checkpoint predates the field: it holds the classic shape)"));
  }
  {
    const std::string got = f.metadata().count("positions") ? f.metadata_value("positions") : std::string("rope");
    if (got != positions_name(c.positions))
      throw Error(f.source() + ": checkpoint has positions = " + got + ", the model has " +
                  positions_name(c.positions) +
                  (f.metadata().count("positions") ? "" : " (the checkpoint predates the field: it holds RoPE)"));
  }
  if (f.metadata().count("architecture") && f.metadata_value("architecture") != Model::architecture())
    throw Error(f.source() + ": checkpoint's policies are " + f.metadata_value("architecture") + ", the model's " +
                Model::architecture());
  // The real-valued config: a model built with another eps, RoPE base, scale
  // init or anGPT multiplier computes another function from the same weights.
  for (const auto& [key, field] : checkpoint_real_fields()) {
    if (const auto legacy = checkpoint_real_legacy(key); !f.metadata().count(key) && legacy) {
      if (*legacy != c.*field)
        throw Error(f.source() + ": checkpoint has no " + key + " (written before it existed: " +
                    exact_string(*legacy) + "), the model has " + exact_string(c.*field));
      continue;
    }
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
  // After the variant and shape: a checkpoint of another model is named as such,
  // not by the optimizer settings its variant defaults to.
  if (opt) check_checkpoint_optimizer(f, *opt);
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
