#pragma once
// A checkpoint's metadata, read with errors that name the file and the key: the
// integers and reals it records, the model config it was written with, its
// context length and its optimizer. Nothing here knows a model type, so the
// training driver reads checkpoints without compiling any model.
#include <charconv>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "normlab/core/error.hpp"
#include "normlab/io/safetensors.hpp"
#include "normlab/nn/config.hpp"
#include "normlab/optim/any_optimizer.hpp"

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
      {"angpt_mlp_factor_mult", &ModelConfig::angpt_mlp_factor_mult},
      {"angpt_residual_factor_mult", &ModelConfig::angpt_residual_factor_mult}};
  return f;
}

// A real field added after checkpoints existed: absent from an older checkpoint,
// whose model computed with this value.
inline std::optional<double> checkpoint_real_legacy(std::string_view key) {
  if (key == "angpt_residual_factor_mult") return 1.0;
  return std::nullopt;
}

// The integer shape fields beyond the four classic ones, resolved (0 → the
// default each stands for), in the order checkpoints write them.
inline std::vector<std::pair<const char*, std::int64_t>> checkpoint_shape_fields(const ModelConfig& c) {
  return {{"n_kv_heads", c.kv_heads()}, {"d_ff", c.ff_dim()}, {"attn_window", c.attn_window},
          {"n_positions", c.n_positions}, {"bias", c.bias ? 1 : 0}};
}

// The model config a checkpoint was written with (to build the model that loads it).
inline ModelConfig checkpoint_config(const io::SafetensorsFile& f) {
  ModelConfig c;
  c.vocab_size = checkpoint_int(f, "vocab_size");
  c.n_embd = checkpoint_int(f, "n_embd");
  c.n_head = checkpoint_int(f, "n_head");
  c.n_layer = checkpoint_int(f, "n_layer");
  // Absent in checkpoints written before they existed: 0, the classic shape.
  if (f.metadata().count("n_kv_heads")) c.n_kv_heads = checkpoint_int(f, "n_kv_heads");
  if (f.metadata().count("d_ff")) c.d_ff = checkpoint_int(f, "d_ff");
  if (f.metadata().count("attn_window")) c.attn_window = checkpoint_int(f, "attn_window");
  if (f.metadata().count("n_positions")) c.n_positions = checkpoint_int(f, "n_positions");
  if (f.metadata().count("bias")) c.bias = checkpoint_int(f, "bias") != 0;
  if (f.metadata().count("positions") && !parse_positions(f.metadata_value("positions"), c.positions))
    throw Error(f.source() + ": checkpoint's positions '" + f.metadata_value("positions") +
                "' is none of rope, none, learned");
  for (const auto& [key, field] : checkpoint_real_fields()) {
    const auto legacy = checkpoint_real_legacy(key);
    c.*field = !f.metadata().count(key) && legacy ? *legacy : checkpoint_double(f, key);
  }
  return c;
}
// The context length the model was built for (anGPT's attention factor depends on
// it): "max_seq", else the training run's "run.seq", else 0 (unknown).
inline std::int64_t checkpoint_max_seq(const io::SafetensorsFile& f) {
  if (f.metadata().count("max_seq")) return checkpoint_int(f, "max_seq");
  if (f.metadata().count("run.seq")) return checkpoint_int(f, "run.seq");
  return 0;
}

// The optimizer a checkpoint's state belongs to: its "optimizer" metadata, or
// "adamw" for a checkpoint written before normlab recorded it (AdamW was then
// the only optimizer).
inline std::string checkpoint_optimizer(const io::SafetensorsFile& f) {
  return f.metadata().count("optimizer") ? f.metadata_value("optimizer") : std::string("adamw");
}

// The trainers' flag behind a built-in optimizer's hyperparameter, for a refusal
// that says what to change ("" for a user's own).
inline std::string optimizer_flag_hint(const std::string& k) {
  static const std::map<std::string, std::string> flags = {
      {"beta1", "--beta1"},         {"beta2", "--beta2"},       {"eps", "--eps"},
      {"weight_decay", "--weight-decay"}, {"momentum", "--momentum"}, {"ns_steps", "--ns-steps"},
      {"nesterov", "--nesterov"},   {"ns_precision", "--ns-precision"}, {"lr_ratio", "--muon-lr ÷ --lr"}};
  const auto it = flags.find(k);
  return it == flags.end() ? std::string() : " (" + it->second + ")";
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
      throw Error(f.source() + ": checkpoint's optimizer has " + k + " = " + had + ", this run's has " + v +
                  optimizer_flag_hint(k));
  }
}

}  // namespace normlab
