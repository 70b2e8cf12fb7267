#pragma once
// Muon (Jordan et al. 2024; the public reference, muon.py): momentum, then the
// update orthogonalized by a Newton–Schulz iteration, for the 2-D hidden
// matrices; AdamW for everything else (the embedding and the head, which touch
// the vocabulary, gains, scales and α). Which is which comes from each
// parameter's role and ParamSpec::vocabulary, never from its name.
//
// A hidden matrix W (r, c) with gradient g, at step t:
//   m ← βm + (1−β)g ;   u ← (1−β)g + βm  (Nesterov)  or  u ← m
//   X ← u / (‖u‖_F + 1e-7);  s times:  A = X Xᵀ,  B = bA + cA²,  X ← aX + BX
//       (a, b, c) = (3.4445, −4.7750, 2.0315); a tall X (r > c) iterates on
//       A = XᵀX, X ← aX + XB, which is the reference's transpose-iterate-transpose
//   W ← W·(1 − lr·wd) − lr·√max(1, r/c)·X
// The reference runs the iteration in bfloat16; here it runs in T (float32, or
// float64 as the oracle), its products in bf16 when the run's are
// (Precision::bf16: the backend's GEMMs). The quintic's coefficients do not converge to exactly
// orthogonal: the singular values of X end in a band around 1 (about
// [0.68, 1.13] after 5 steps; tests/test_optim.cpp checks it).
//
// lr for the hidden matrices is --muon-lr (0.02, the reference's default) and
// follows the schedule's shape: at each step it is lr(step)·muon_lr/peak_lr.
// State: momentum_buffer (Muon's momentum for hidden matrices, AdamW's first
// moment for the rest) and exp_avg_sq (AdamW's second moment; zero and unused
// on the hidden matrices, so every state tensor covers the whole shard).
// The iteration's GEMMs, scalings and sums are the backend's ops, so the same
// code runs where the model runs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

#include "normlab/backend/concept.hpp"
#include "normlab/optim/optimizer.hpp"

namespace normlab {

struct MuonConfig {
  double momentum = 0.95;
  std::int64_t ns_steps = 5;
  bool nesterov = true;
  double lr_ratio = 1.0;  // hidden matrices' rate ÷ the schedule's rate (--muon-lr / --lr)
  double weight_decay = 0.0;
  // AdamW for the rest.
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
};

// Whether Muon orthogonalizes this tensor's update: a 2-D weight that is not
// on the vocabulary side (embedding, head).
inline bool muon_hidden_matrix(const ParamSpec& s) {
  return s.role == ParamRole::matrix && s.shape.size() == 2 && !s.vocabulary;
}

template <class T, class Backend = cpu_backend>
class Muon : public OptimizerShard<T> {
 public:
  using scalar_type = T;
  using backend = Backend;
  static constexpr std::string_view name = "muon";
  static constexpr double kA = 3.4445, kB = -4.7750, kC = 2.0315;

  Muon(const ParamStore<T>& store, MuonConfig cfg) : Muon(store, cfg, 0, store.size()) {}
  Muon(const ParamStore<T>& store, MuonConfig cfg, std::size_t begin, std::size_t end)
      : OptimizerShard<T>(store, begin, end, "Muon"), cfg_(cfg) {
    require_beta(cfg.momentum, "--momentum");
    if (cfg.ns_steps < 1 || cfg.ns_steps > 100)
      throw Error("--ns-steps must be in [1, 100], got " + std::to_string(cfg.ns_steps));
    require_positive(cfg.lr_ratio, "--muon-lr");
    require_non_negative(cfg.weight_decay, "--weight-decay");
    require_beta(cfg.beta1, "--beta1");
    require_beta(cfg.beta2, "--beta2");
    require_positive(cfg.eps, "--eps");
    m_.assign(end - begin, T(0));
    v_.assign(end - begin, T(0));
    this->set_eps(cfg.eps);
    this->group(ParamRole::matrix).weight_decay = cfg.weight_decay;
    std::size_t widest = 0, square = 0;
    for (const ParamSpec& s : store.specs())
      if (this->owns(s) && muon_hidden_matrix(s)) {
        const auto k = std::size_t(std::min(s.shape[0], s.shape[1]));
        widest = std::max(widest, s.numel);
        square = std::max(square, k * k);
      }
    x_.assign(widest, T(0));
    y_.assign(widest, T(0));
    a_.assign(square, T(0));
    b_.assign(square, T(0));
  }
  Muon(const ParamStore<T>& store, const OptimizerOptions& o, std::size_t begin, std::size_t end)
      : Muon(store, config_from(o), begin, end) {}
  static MuonConfig config_from(const OptimizerOptions& o) {
    const double peak_lr = o.peak_lr;
    MuonConfig c;
    c.momentum = o.momentum;
    c.ns_steps = o.ns_steps;
    c.nesterov = o.nesterov;
    require_positive(o.muon_lr, "--muon-lr");
    require_positive(peak_lr, "--lr");
    c.lr_ratio = o.muon_lr / peak_lr;
    c.weight_decay = o.weight_decay;
    c.beta1 = o.beta1.value_or(c.beta1);
    c.beta2 = o.beta2.value_or(c.beta2);
    c.eps = o.eps;
    return c;
  }

  std::vector<StateTensor<T>> state() { return {{"momentum_buffer", m_.data()}, {"exp_avg_sq", v_.data()}}; }
  Hyperparameters hyperparameters() const {
    return {{"momentum", exact_string(cfg_.momentum)},
            {"ns_steps", std::to_string(cfg_.ns_steps)},
            {"nesterov", cfg_.nesterov ? "1" : "0"},
            {"lr_ratio", exact_string(cfg_.lr_ratio)},
            {"weight_decay", exact_string(cfg_.weight_decay)},
            {"beta1", exact_string(cfg_.beta1)},
            {"beta2", exact_string(cfg_.beta2)},
            {"eps", exact_string(cfg_.eps)}};
  }

  void step(ParamStore<T>& store, double lr) { step(store, store.value(), store.grad(), lr); }
  void step(const ParamStore<T>& store, T* values, const T* grads, double lr) {
    this->begin_step(store);
    const double t = double(this->steps_taken());
    const double bc1 = 1.0 - std::pow(cfg_.beta1, t), bc2 = 1.0 - std::pow(cfg_.beta2, t);
    const std::size_t b0 = this->shard_begin();
    for (const ParamSpec& s : store.specs()) {
      if (!this->owns(s)) continue;
      const GroupSettings& g = this->group(s.role);
      T* p = values + s.offset;
      T* m = m_.data() + (s.offset - b0);
      const auto n = static_cast<std::int64_t>(s.numel);
      if (!muon_hidden_matrix(s)) {
        const double glr = lr * g.lr_mult;
        Backend::adamw_update(p, m, v_.data() + (s.offset - b0), grads + s.offset, n, 1.0 - glr * g.weight_decay,
                              g.weight_decay != 0.0, glr / bc1, cfg_.beta1, cfg_.beta2, g.eps, std::sqrt(bc2));
        continue;
      }
      const double glr = lr * g.lr_mult * cfg_.lr_ratio;
      const std::int64_t r = s.shape[0], c = s.shape[1];
      Backend::muon_momentum(x_.data(), m, grads + s.offset, n, cfg_.momentum, cfg_.nesterov);
      orthogonalize(x_.data(), r, c);
      if (g.weight_decay != 0.0) Backend::scale(p, n, T(1.0 - glr * g.weight_decay));
      const double shape_scale = std::sqrt(std::max(1.0, double(r) / double(c)));
      Backend::scale(x_.data(), n, T(-glr * shape_scale));
      Backend::add_into(p, x_.data(), n);
    }
  }

  // X (r, c) ← its Newton–Schulz orthogonalization, in place (scratch of this optimizer).
  void orthogonalize(T* X, std::int64_t r, std::int64_t c) {
    const std::int64_t n = r * c, k = std::min(r, c);
    const double norm = std::sqrt(Backend::sum_squares(X, n));
    Backend::scale(X, n, T(1.0 / (norm + 1e-7)));
    T* A = a_.data();
    T* B = b_.data();
    T* Y = y_.data();
    const bool tall = r > c;
    for (std::int64_t i = 0; i < cfg_.ns_steps; ++i) {
      if (tall) {  // A = XᵀX (c, c): the weight gradient's product, which accumulates
        Backend::fill(A, k * k, T(0));
        Backend::linear_backward(static_cast<T*>(nullptr), A, X, X, static_cast<const T*>(nullptr), r, c, c, T(1));
      } else {  // A = X Xᵀ (r, r)
        Backend::linear_forward(A, X, X, r, c, r, false, T(1));
      }
      Backend::linear_forward(B, A, A, k, k, k, false, T(kC));  // c·A Aᵀ = c·A² (A is symmetric)
      Backend::scale(A, k * k, T(kB));
      Backend::add_into(B, A, k * k);  // B = bA + cA²
      if (tall)  // Y = X Bᵀ = X B
        Backend::linear_forward(Y, X, B, r, c, c, false, T(1));
      else  // Y = B X: the input gradient's product, dX = dY W
        Backend::linear_backward(Y, static_cast<T*>(nullptr), B, static_cast<const T*>(nullptr), X, r, c, r, T(1));
      Backend::scale(X, n, T(kA));
      Backend::add_into(X, Y, n);  // X = aX + (BX or XB)
    }
  }

 private:
  MuonConfig cfg_;
  typename Backend::template vector<T> m_, v_, x_, y_, a_, b_;
};

}  // namespace normlab
