#pragma once
// Whole-model gradient check: the hand-written backward of a model type
// against central finite differences of its loss, in float64.
//
// Used by the test suite and by `normlab-gradcheck`. The probe model is small
// (every code path, dk = 8, odd T) and its non-matrix parameters are moved off
// their initial values so every term of their gradients is exercised.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "normlab/backend/cpu/backend.hpp"
#include "normlab/model/transformer.hpp"

namespace normlab {

// d loss / d x[e] by central differences for each entry index e; x is restored.
// Step h = 1e-6: truncation O(h²) ≈ 1e-12, rounding ≈ 1e-16/h = 1e-10 of O(1) gradients.
template <class Vec, class Loss>
std::vector<double> central_differences(Vec& x, const std::vector<std::size_t>& entries, Loss&& loss,
                                        double h = 1e-6) {
  std::vector<double> g(entries.size());
  for (std::size_t n = 0; n < entries.size(); ++n) {
    const std::size_t e = entries[n];
    const double x0 = x[e];
    x[e] = x0 + h;
    const double lp = loss();
    x[e] = x0 - h;
    const double lm = loss();
    x[e] = x0;
    g[n] = (lp - lm) / (2 * h);
  }
  return g;
}

struct TensorGradError {
  std::string name;
  std::size_t entries_checked = 0;
  double rel_error = 0;  // ‖analytic − numeric‖ / ‖numeric‖ over the checked entries (vanishing: see below)
  bool vanishing = false;  // the numeric gradient is zero within its rounding
};

// The shape a gradient check runs at: the model's config and the batch. The
// default is the probe every built-in variant is checked at (every code path,
// dk = 8, odd T); a policy that acts only at some shape (a window shorter than
// T, grouped kv heads, another d_ff) is checked by passing that shape.
struct GradcheckShape {
  ModelConfig config = [] {
    ModelConfig mc;
    mc.vocab_size = 11;
    mc.n_embd = 16;
    mc.n_head = 2;
    mc.n_layer = 2;
    return mc;
  }();
  std::int64_t batch = 2;
  std::int64_t seq = 5;
};

// samples_per_tensor = 0 checks every entry.
template <class Model>
std::vector<TensorGradError> check_model_gradients(std::uint64_t seed, const GradcheckShape& shape,
                                                   std::size_t samples_per_tensor = 0) {
  static_assert(std::is_same_v<typename Model::scalar_type, double>, "gradient checks run in float64");
  ModelConfig mc = shape.config;
  // GPT's reference init (std 0.02) makes the q/k gradients ~1e-5 of the loss,
  // where the finite difference's rounding alone (≈1e-10 absolute) is 1e-5
  // relative; a larger init exercises the same code with well-scaled gradients.
  if constexpr (!keeps_unit_hidden<typename Model::scheme>) mc.base_scale = 0.3;
  // Likewise α = 0.05 scales every gradient inside the sub-layers by ~1/20,
  // down to that rounding floor (measured: 4e-7 on W_proj); 0.3 lifts them.
  if constexpr (rule_learns_alpha<typename Model::residual>()) mc.alpha_init = 0.3;
  const std::int64_t B = shape.batch, T = shape.seq;
  Model model(mc, B, T);
  model.init(seed);
  auto& store = model.params();
  std::mt19937_64 rng(seed + 1);
  std::uniform_real_distribution<double> u(0.7, 1.3);
  // Vectors (gains, scales, α, biases) off their init, so each is checked away
  // from a special point; zero-initialised ones (biases) to small values of either sign.
  for (const ParamSpec& s : store.specs())
    if (s.role != ParamRole::matrix)
      for (std::size_t i = 0; i < s.numel; ++i) {
        double& v = store.value(s.offset)[i];
        v = v == 0 ? 0.2 * (u(rng) - 1.0) : v * u(rng);
      }
  std::vector<std::int64_t> idx(B * T), tgt(B * T);
  for (std::int64_t i = 0; i < B * T; ++i) {
    idx[i] = (i * 3 + 1) % mc.vocab_size;
    tgt[i] = (i * 7 + 2) % mc.vocab_size;
  }
  model.forward(idx.data(), tgt.data(), B, T);
  model.backward();
  const std::vector<double> analytic(store.grads().begin(), store.grads().end());
  auto& x = store.values();
  auto loss = [&] { return model.forward(idx.data(), tgt.data(), B, T); };

  std::vector<TensorGradError> out;
  for (const ParamSpec& s : store.specs()) {
    std::vector<std::size_t> entries(s.numel);
    for (std::size_t i = 0; i < s.numel; ++i) entries[i] = s.offset + i;
    if (samples_per_tensor > 0 && entries.size() > samples_per_tensor) {
      std::shuffle(entries.begin(), entries.end(), rng);
      entries.resize(samples_per_tensor);
    }
    const std::vector<double> numeric = central_differences(x, entries, loss);
    double num = 0, den = 0, an = 0;
    for (std::size_t n = 0; n < entries.size(); ++n) {
      const double a = analytic[entries[n]];
      num += (a - numeric[n]) * (a - numeric[n]);
      den += numeric[n] * numeric[n];
      an += a * a;
    }
    // A gradient that is zero by symmetry (a key bias: softmax ignores a shift
    // every key shares) leaves the finite difference only its rounding (measured
    // ≈3e-10 an entry): below a floor of 1e-8 an entry the tensor is "vanishing"
    // and its error is ‖analytic‖ over that floor (the analytic must be zero too).
    const double floor = 1e-8 * std::sqrt(double(entries.size()));
    const bool vanishing = std::sqrt(den) < floor;
    out.push_back({s.name, entries.size(), vanishing ? std::sqrt(an) / floor : std::sqrt(num / den), vanishing});
  }
  return out;
}

template <class Model>
std::vector<TensorGradError> check_model_gradients(std::uint64_t seed, std::size_t samples_per_tensor = 0) {
  return check_model_gradients<Model>(seed, GradcheckShape{}, samples_per_tensor);
}

}  // namespace normlab
