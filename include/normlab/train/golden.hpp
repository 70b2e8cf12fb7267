#pragma once
// Golden check: replay a reference run stored in a safetensors file (produced
// by the authors' PyTorch implementation, see tests/data/golden/README.md) and
// compare every tensor it holds. All sizes and hyperparameters come from the
// file's metadata; nothing is hard-coded.
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "normlab/core/error.hpp"
#include "normlab/io/safetensors.hpp"
#include "normlab/model/transformer.hpp"
#include "normlab/optim/adamw.hpp"
#include "normlab/train/checkpoint.hpp"
#include "normlab/train/step.hpp"
#include "normlab/train/variants.hpp"

namespace normlab {

struct GoldenRow {
  std::string name;
  double rel_error = 0;
  double tolerance = 0;
  bool ok() const { return rel_error <= tolerance; }  // NaN fails
};

struct GoldenReport {
  std::string variant;
  std::vector<GoldenRow> rows;
  std::size_t failures() const {
    std::size_t n = 0;
    for (const auto& r : rows) n += r.ok() ? 0 : 1;
    return n;
  }
  bool pass() const { return !rows.empty() && failures() == 0; }
};

// Thrown when the file names a variant normlab does not implement (the CLI exits 2).
struct UnsupportedVariant : Error {
  using Error::Error;
};

// ‖ours − ref‖₂ / ‖ref‖₂ (absolute ‖ours‖ when the reference is all zeros).
inline double relative_error(const std::vector<double>& ours, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = ours[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

struct GoldenTolerance {
  double values;  // logits, loss, gradients, grad norms
  double params;  // parameters after optimizer steps
};
template <class T>
constexpr GoldenTolerance golden_tolerance() {
  // float64 must agree to rounding; float32 per the golden README (Adam
  // magnifies the rounding of tiny gradients in the parameters).
  if constexpr (std::is_same_v<T, double>) return {1e-9, 1e-9};
  else return {1e-5, 5e-4};
}

namespace detail {

inline std::int64_t meta_int(const io::SafetensorsFile& f, const std::string& key) {
  const std::string v = f.metadata_value(key);
  try {
    std::size_t pos = 0;
    const long long x = std::stoll(v, &pos);
    if (pos != v.size()) throw std::invalid_argument(v);
    return x;
  } catch (const std::exception&) {
    throw Error(f.source() + ": metadata '" + key + "' = '" + v + "' is not an integer");
  }
}
inline double meta_double(const io::SafetensorsFile& f, const std::string& key) {
  const std::string v = f.metadata_value(key);
  try {
    std::size_t pos = 0;
    const double x = std::stod(v, &pos);
    if (pos != v.size()) throw std::invalid_argument(v);
    return x;
  } catch (const std::exception&) {
    throw Error(f.source() + ": metadata '" + key + "' = '" + v + "' is not a number");
  }
}

// `tol`: the replay's bars (golden_tolerance<T>() unless a caller holds another
// path, e.g. a GPU's float32 sums in another order, to its own stated bar).
template <class Model>
GoldenReport run_golden_model(const io::SafetensorsFile& f, const std::string& variant,
                              GoldenTolerance tol = golden_tolerance<typename Model::scalar_type>()) {
  using T = typename Model::scalar_type;
  using Backend = typename Model::backend;
  ModelConfig mc;
  mc.vocab_size = meta_int(f, "vocab_size");
  mc.n_embd = meta_int(f, "n_embd");
  mc.n_head = meta_int(f, "n_head");
  mc.n_layer = meta_int(f, "n_layer");
  mc.base_scale = meta_double(f, "base_scale");
  mc.rmsnorm_eps = meta_double(f, "rmsnorm_eps");
  const std::int64_t B = meta_int(f, "batch"), seq = meta_int(f, "seq_len"), steps = meta_int(f, "steps");
  const double lr = meta_double(f, "lr"), grad_clip = meta_double(f, "grad_clip");
  const std::string sched = f.metadata_value("lr_schedule");
  if (sched != "constant")
    throw Error(f.source() + ": lr_schedule '" + sched + "' is not supported by the golden check (constant only)");
  const std::string rope = f.metadata_value("rope");
  if (rope != "neox_rotate_half_base10000")
    throw Error(f.source() + ": rope '" + rope + "' is not supported (expected neox_rotate_half_base10000)");
  AdamWConfig oc;
  oc.beta1 = meta_double(f, "beta1");
  oc.beta2 = meta_double(f, "beta2");
  oc.eps = meta_double(f, "adam_eps");
  oc.weight_decay = meta_double(f, "weight_decay");

  Model model(mc, B, seq);
  auto& store = model.params();
  for (const ParamSpec& s : store.specs()) {
    f.read_into<T>("init/" + s.name, s.shape, std::span<T>(store.value(s.offset), s.numel));
    require_finite_tensor<T>(std::span<const T>(store.value(s.offset), s.numel), f.source(), "init/" + s.name);
  }
  model.upload_params();  // the step runs on the backend's copy (the same memory on the CPU)
  AdamW<T, Backend> opt(store, oc);
  const std::int64_t n_params = static_cast<std::int64_t>(store.size());
  std::vector<T> logits_host;

  GoldenReport rep;
  rep.variant = variant;
  auto compare = [&](const std::string& name, const T* ours, std::size_t n, double t) {
    const std::vector<double> ref = f.read<double>(name);
    if (ref.size() != n)
      throw Error(f.source() + ": tensor '" + name + "' has " + std::to_string(ref.size()) +
                  " elements, the model produced " + std::to_string(n));
    std::vector<double> o(ours, ours + n);
    rep.rows.push_back({name, relative_error(o, ref), t});
  };
  std::vector<std::int64_t> idx(static_cast<std::size_t>(B * seq)), tgt(idx.size());
  for (std::int64_t s = 0; s < steps; ++s) {
    const std::string p = "step" + std::to_string(s) + "/";
    f.read_into<std::int64_t>(p + "idx", {B, seq}, std::span<std::int64_t>(idx));
    f.read_into<std::int64_t>(p + "targets", {B, seq}, std::span<std::int64_t>(tgt));
    const double loss = model.forward(idx.data(), tgt.data(), B, seq);
    const T loss_t = T(loss);
    if (f.contains(p + "loss")) compare(p + "loss", &loss_t, 1, tol.values);
    if (f.contains(p + "logits")) {
      const std::size_t n = static_cast<std::size_t>(B * seq * mc.vocab_size);
      const T* lg = model.logits();
      if constexpr (!Backend::host_memory) {
        logits_host.resize(n);
        Backend::download(logits_host.data(), lg, std::int64_t(n));
        lg = logits_host.data();
      }
      compare(p + "logits", lg, n, tol.values);
    }
    model.backward();
    model.download_grads();
    for (const ParamSpec& ps : store.specs())
      if (f.contains(p + "grad/" + ps.name)) compare(p + "grad/" + ps.name, store.grad(ps.offset), ps.numel, tol.values);
    const double gn = clip_grad_norm<Backend>(model.param_grads(), n_params, grad_clip);
    const T gn_t = T(gn);
    if (f.contains(p + "grad_norm")) compare(p + "grad_norm", &gn_t, 1, tol.values);
    opt.step(store, model.param_values(), model.param_grads(), lr);
    model.apply_constraint();
    model.download_params();
    for (const ParamSpec& ps : store.specs())
      if (f.contains(p + "param/" + ps.name)) compare(p + "param/" + ps.name, store.value(ps.offset), ps.numel, tol.params);
  }
  return rep;
}

}  // namespace detail

// The variants the authors' reference implementation produces golden files for.
using golden_variants = std::tuple<variants::gpt, variants::ngpt>;

// Runs the check in float64 (`dtype` "f64") or float32 ("f32").
inline GoldenReport run_golden(const io::SafetensorsFile& f, const std::string& dtype) {
  const std::string variant = f.metadata_value("variant");
  if (dtype != "f64" && dtype != "f32") throw Error("--dtype must be f64 or f32, got '" + dtype + "'");
  GoldenReport rep;
  bool found = false;
  std::apply(
      [&](auto... tags) {
        (
            [&] {
              using Tag = decltype(tags);
              if (found || Tag::name != variant) return;
              found = true;
              if (dtype == "f64")
                rep = detail::run_golden_model<typename Tag::template model<double>>(f, variant);
              else
                rep = detail::run_golden_model<typename Tag::template model<float>>(f, variant);
            }(),
            ...);
      },
      golden_variants{});
  if (!found)
    throw UnsupportedVariant(f.source() + ": variant '" + variant +
                             "' is not implemented by the golden check (reference variants: gpt, ngpt)");
  return rep;
}

}  // namespace normlab
