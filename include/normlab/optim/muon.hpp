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
// The reference runs the iteration in bfloat16. Here X, A and B are held in T
// (float32, or float64 as the oracle) and the products run in ns_precision:
// bf16 by default (operands rounded to bf16, float32 accumulation: the
// reference's precision for the products, slightly better for the sums, on the
// backend's bf16 engine; where the CPU has none they run in float32), or fp32;
// whatever the run's own --precision. A float64 model under bf16 rounds the
// operands likewise (the oracle). XXᵀ and A² are symmetric: the backend's gram
// computes half of each where it has one. The quintic's coefficients do not converge to exactly
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
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "normlab/backend/concept.hpp"
#include "normlab/core/precision.hpp"
#include "normlab/optim/optimizer.hpp"

namespace normlab {

struct MuonConfig {
  double momentum = 0.95;
  std::int64_t ns_steps = 5;
  bool nesterov = true;
  Precision ns_precision = Precision::bf16;  // the iteration's products (the reference's bf16)
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
    // The hidden matrices, costliest iteration first (r·c·min(r, c)), so that
    // the backend's workers, handing them out in this order, finish together.
    for (std::size_t i = 0; i < store.specs().size(); ++i) {
      const ParamSpec& s = store.specs()[i];
      if (!this->owns(s) || !muon_hidden_matrix(s)) continue;
      hidden_.push_back(i);
      const auto k = std::size_t(std::min(s.shape[0], s.shape[1]));
      widest_ = std::max(widest_, s.numel);
      square_ = std::max(square_, k * k);
    }
    auto cost = [&](std::size_t i) {
      const ParamSpec& s = store.specs()[i];
      return double(s.numel) * double(std::min(s.shape[0], s.shape[1]));
    };
    std::stable_sort(hidden_.begin(), hidden_.end(), [&](std::size_t a, std::size_t b) { return cost(a) > cost(b); });
    if constexpr (kTasks) workers_ = std::max(1, std::min<int>(Backend::task_workers(), int(hidden_.size())));
    x_.assign(widest_ * std::size_t(workers_), T(0));
    y_.assign(widest_ * std::size_t(workers_), T(0));
    a_.assign(square_ * std::size_t(workers_), T(0));
    b_.assign(square_ * std::size_t(workers_), T(0));
  }
  Muon(const ParamStore<T>& store, const OptimizerOptions& o, std::size_t begin, std::size_t end)
      : Muon(store, config_from(o), begin, end) {}
  static MuonConfig config_from(const OptimizerOptions& o) {
    const double peak_lr = o.peak_lr;
    MuonConfig c;
    c.momentum = o.momentum;
    c.ns_steps = o.ns_steps;
    c.nesterov = o.nesterov;
    c.ns_precision = o.ns_precision;
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
            {"ns_precision", std::string(precision_name(cfg_.ns_precision))},
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
      if (!this->owns(s) || muon_hidden_matrix(s)) continue;
      const GroupSettings& g = this->group(s.role);
      const double glr = lr * g.lr_mult;
      Backend::adamw_update(values + s.offset, m_.data() + (s.offset - b0), v_.data() + (s.offset - b0),
                            grads + s.offset, static_cast<std::int64_t>(s.numel), 1.0 - glr * g.weight_decay,
                            g.weight_decay != 0.0, glr / bc1, cfg_.beta1, cfg_.beta2, g.eps, std::sqrt(bc2));
    }
    // The hidden matrices are independent: the backend may run several at once
    // (one worker each, its own scratch). Each matrix's arithmetic is the same
    // on any worker, so the result does not depend on how they are spread.
    const IterationPrecision products(cfg_.ns_precision);
    auto one = [&](std::int64_t task, int worker) {
      const ParamSpec& s = store.specs()[hidden_[std::size_t(task)]];
      const GroupSettings& g = this->group(s.role);
      T* p = values + s.offset;
      T* X = x_.data() + std::size_t(worker) * widest_;
      const auto n = static_cast<std::int64_t>(s.numel);
      const double glr = lr * g.lr_mult * cfg_.lr_ratio;
      const std::int64_t r = s.shape[0], c = s.shape[1];
      Backend::muon_momentum(X, m_.data() + (s.offset - b0), grads + s.offset, n, cfg_.momentum, cfg_.nesterov);
      const T* O = iterate(X, r, c, worker);
      const double shape_scale = std::sqrt(std::max(1.0, double(r) / double(c)));
      Backend::muon_apply(p, O, n, 1.0 - glr * g.weight_decay, -glr * shape_scale);
    };
    const auto tasks = static_cast<std::int64_t>(hidden_.size());
    if constexpr (kTasks) {
      Backend::run_tasks(tasks, workers_, one);
    } else {
      for (std::int64_t i = 0; i < tasks; ++i) one(i, 0);
    }
  }

  // X (r, c) ← its Newton–Schulz orthogonalization, in place (scratch of this optimizer).
  // Each step X ← (aI + bA + cA²)X, the polynomial applied as one matrix: two
  // symmetric products and one general one, X and the scratch Y swapping roles.
  void orthogonalize(T* X, std::int64_t r, std::int64_t c) {
    const T* O = iterate(X, r, c, 0);
    if (O != X) Backend::copy(X, O, r * c);
  }

 private:
  // The iteration on X (overwritten), its result in X or in the worker's scratch:
  // where it ends is returned. Every product at alpha = 1: a tile's bits then do
  // not depend on how the product is split (cpu::gram), so neither does the
  // result on the worker count.
  const T* iterate(T* X, std::int64_t r, std::int64_t c, int worker) {
    const std::int64_t n = r * c, k = std::min(r, c);
    const double norm = std::sqrt(Backend::sum_squares(X, n));
    Backend::scale(X, n, T(1.0 / (norm + 1e-7)));
    T* A = a_.data() + std::size_t(worker) * square_;
    T* B = b_.data() + std::size_t(worker) * square_;
    T* cur = X;
    T* next = y_.data() + std::size_t(worker) * widest_;
    const bool tall = r > c;
    for (std::int64_t i = 0; i < cfg_.ns_steps; ++i) {
      gram(A, cur, k, std::max(r, c), tall, T(1));  // A = XᵀX (c, c) if tall, else X Xᵀ (r, r)
      gram(B, A, k, k, false, T(1));                 // A Aᵀ = A² (A is symmetric)
      Backend::muon_quintic(B, A, k, kA, kB, kC);    // B = aI + bA + cA²
      if (tall)  // X B (Bᵀ = B)
        Backend::linear_forward(next, cur, B, r, c, c, false, T(1));
      else  // B X: the input gradient's product, dX = dY W
        Backend::linear_backward(next, static_cast<T*>(nullptr), B, static_cast<const T*>(nullptr), cur, r, c, r,
                                 T(1));
      std::swap(cur, next);
    }
    return cur;
  }

  static constexpr bool kTasks = requires(std::int64_t n, int w, void (*fn)(std::int64_t, int)) {
    { Backend::task_workers() } -> std::convertible_to<int>;
    Backend::run_tasks(n, w, fn);
  };
  static constexpr bool kPrecisionSwitch = requires(Precision p) {
    { Backend::precision() } -> std::same_as<Precision>;
    Backend::set_precision(p);
  };
  // The backend's products in `p` while it lives, then the run's precision again.
  struct IterationPrecision {
    Precision run = Precision::fp32;
    explicit IterationPrecision(Precision p) {
      if constexpr (kPrecisionSwitch) {
        run = Backend::precision();
        Backend::set_precision(p);
      }
    }
    ~IterationPrecision() {
      if constexpr (kPrecisionSwitch) Backend::set_precision(run);
    }
    IterationPrecision(const IterationPrecision&) = delete;
    IterationPrecision& operator=(const IterationPrecision&) = delete;
  };

  // C(n,n) = alpha·X Xᵀ (X (n,m)) or, transposed, alpha·XᵀX (X (m,n)).
  static void gram(T* C, const T* X, std::int64_t n, std::int64_t m, bool transposed, T alpha) {
    if constexpr (requires { Backend::gram(C, X, n, m, transposed, alpha); }) {
      Backend::gram(C, X, n, m, transposed, alpha);
    } else if (transposed) {  // the weight gradient's product, which accumulates
      Backend::fill(C, n * n, T(0));
      Backend::linear_backward(static_cast<T*>(nullptr), C, X, X, static_cast<const T*>(nullptr), m, n, n, alpha);
    } else {
      Backend::linear_forward(C, X, X, n, m, n, false, alpha);
    }
  }

  MuonConfig cfg_;
  std::vector<std::size_t> hidden_;  // indices into the store's specs
  std::size_t widest_ = 0, square_ = 0;
  int workers_ = 1;
  typename Backend::template vector<T> m_, v_, x_, y_, a_, b_;  // x_ … b_: one slice per worker
};

}  // namespace normlab
