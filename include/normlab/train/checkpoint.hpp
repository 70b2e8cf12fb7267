#pragma once
// Checkpoints in safetensors: parameters under their reference names, AdamW
// state under optim/exp_avg/<name> and optim/exp_avg_sq/<name>, and metadata
// (variant, signature, model config, step). Written atomically (temp file,
// fsync, rename) so a crash never leaves a half-written checkpoint.
#include <charconv>
#include <filesystem>
#include <map>
#include <string>

#include "normlab/core/error.hpp"
#include "normlab/io/safetensors.hpp"
#include "normlab/model/transformer.hpp"
#include "normlab/optim/adamw.hpp"
#include "normlab/train/variants.hpp"

namespace normlab {

// Shortest text that reads back to the same double.
inline std::string exact_string(double x) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

// Name of the registered variant a model type is ("gpt", "ngpt", …), or its
// policy signature when it is a user-made combination.
template <class Model>
std::string variant_name_of() {
  std::string name;
  std::apply(
      [&](auto... tags) {
        ((std::is_same_v<typename decltype(tags)::template model<typename Model::scalar_type>, Model>
              ? (name = std::string(decltype(tags)::name), 0)
              : 0),
         ...);
      },
      all_variants{});
  return name.empty() ? Model::variant_signature() : name;
}

template <class Model, class T = typename Model::scalar_type>
void save_checkpoint(const std::filesystem::path& path, const Model& model, const AdamW<T>* opt,
                     const std::map<std::string, std::string>& extra_metadata = {}) {
  io::SafetensorsWriter w;
  const ModelConfig& c = model.config();
  w.set_metadata("format", "normlab-checkpoint-1");
  w.set_metadata("variant", variant_name_of<Model>());
  w.set_metadata("signature", Model::variant_signature());
  w.set_metadata("vocab_size", std::to_string(c.vocab_size));
  w.set_metadata("n_embd", std::to_string(c.n_embd));
  w.set_metadata("n_head", std::to_string(c.n_head));
  w.set_metadata("n_layer", std::to_string(c.n_layer));
  w.set_metadata("base_scale", exact_string(c.base_scale));
  w.set_metadata("rmsnorm_eps", exact_string(c.rmsnorm_eps));
  for (const auto& [k, v] : extra_metadata) w.set_metadata(k, v);
  const auto& store = model.params();
  for (const ParamSpec& s : store.specs()) {
    w.add<T>(s.name, s.shape, std::span<const T>(store.value(s.offset), s.numel));
    if (opt) {
      w.add<T>("optim/exp_avg/" + s.name, s.shape, std::span<const T>(opt->exp_avg().data() + s.offset, s.numel));
      w.add<T>("optim/exp_avg_sq/" + s.name, s.shape,
               std::span<const T>(opt->exp_avg_sq().data() + s.offset, s.numel));
    }
  }
  if (opt) w.set_metadata("optim_steps", std::to_string(opt->steps_taken()));
  w.write_atomic(path);
}

// Loads parameters (and optimizer state when `opt` is given) into `model`.
// A checkpoint of another variant or shape is refused with an error naming both.
template <class Model, class T = typename Model::scalar_type>
void load_checkpoint(const io::SafetensorsFile& f, Model& model, AdamW<T>* opt) {
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
  auto& store = model.params();
  for (const ParamSpec& s : store.specs()) {
    f.read_into<T>(s.name, s.shape, std::span<T>(store.value(s.offset), s.numel));
    if (opt) {
      f.read_into<T>("optim/exp_avg/" + s.name, s.shape, std::span<T>(opt->exp_avg().data() + s.offset, s.numel));
      f.read_into<T>("optim/exp_avg_sq/" + s.name, s.shape,
                     std::span<T>(opt->exp_avg_sq().data() + s.offset, s.numel));
    }
  }
  if (opt) opt->set_steps_taken(std::stoll(f.metadata_value("optim_steps")));
}

}  // namespace normlab
