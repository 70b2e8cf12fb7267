#pragma once
// AdamW with PyTorch semantics, per-role parameter groups, global-norm clipping.
//
// Step t = 1, 2, …, for each parameter p of a group with (lr·mult, wd, ε):
//   p ← p·(1 − lr·wd)                      (decoupled decay, skipped when wd = 0)
//   m ← β₁m + (1−β₁)g ;  v ← β₂v + (1−β₂)g²
//   p ← p − (lr/(1−β₁ᵗ)) · m / (√v/√(1−β₂ᵗ) + ε)
// exactly the order of torch.optim.AdamW (foreach=False), so float64 runs agree to rounding.
// The update of each tensor, the global norm and the clipping are the
// Backend's ops (adamw_update, sum_squares, scale): host loops on the CPU,
// kernels on a GPU, where the moments then live too.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "normlab/backend/concept.hpp"
#include "normlab/core/error.hpp"
#include "normlab/nn/params.hpp"
#include "normlab/optim/optimizer.hpp"

namespace normlab {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;  // applied to the matrix group only (2-D tensors), as PyTorch practice
};

template <class T, class Backend = cpu_backend>
class AdamW : public OptimizerShard<T> {
 public:
  using scalar_type = T;
  using backend = Backend;
  using moments = typename Backend::template vector<T>;
  static constexpr std::string_view name = "adamw";

  AdamW(const ParamStore<T>& store, AdamWConfig cfg) : AdamW(store, cfg, 0, store.size()) {}
  // A shard (ZeRO-1): moments only for the parameters in [begin, end) of the
  // store, whose bounds fall between tensors; step() updates those tensors only.
  AdamW(const ParamStore<T>& store, AdamWConfig cfg, std::size_t begin, std::size_t end)
      : OptimizerShard<T>(store, begin, end, "AdamW"), cfg_(cfg) {
    m_.assign(end - begin, T(0));
    v_.assign(end - begin, T(0));
    this->set_eps(cfg.eps);
    this->group(ParamRole::matrix).weight_decay = cfg.weight_decay;
  }
  // From a trainer's flags (--beta1, --beta2, --eps, --weight-decay).
  AdamW(const ParamStore<T>& store, const OptimizerOptions& o, std::size_t begin, std::size_t end)
      : AdamW(store, config_from(o), begin, end) {}
  static AdamWConfig config_from(const OptimizerOptions& o) {
    AdamWConfig c;
    c.beta1 = o.beta1.value_or(c.beta1);
    c.beta2 = o.beta2.value_or(c.beta2);
    c.eps = o.eps;
    c.weight_decay = o.weight_decay;
    require_beta(c.beta1, "--beta1");
    require_beta(c.beta2, "--beta2");
    require_positive(c.eps, "--eps");
    require_non_negative(c.weight_decay, "--weight-decay");
    return c;
  }

  moments& exp_avg() { return m_; }
  moments& exp_avg_sq() { return v_; }
  const moments& exp_avg() const { return m_; }
  const moments& exp_avg_sq() const { return v_; }
  std::vector<StateTensor<T>> state() { return {{"exp_avg", m_.data()}, {"exp_avg_sq", v_.data()}}; }
  Hyperparameters hyperparameters() const {
    return {{"beta1", exact_string(cfg_.beta1)}, {"beta2", exact_string(cfg_.beta2)}, {"eps", exact_string(cfg_.eps)},
            {"weight_decay", exact_string(cfg_.weight_decay)}};
  }

  // One update of every parameter in `store` with the gradients it holds.
  void step(ParamStore<T>& store, double lr) { step(store, store.value(), store.grad(), lr); }
  // The same on the live parameters of a model whose backend has its own
  // memory: values/grads in the store's layout (Transformer::param_values()).
  void step(const ParamStore<T>& store, T* values, const T* grads, double lr) {
    this->begin_step(store);
    const double t = double(this->steps_taken());
    const double bc1 = 1.0 - std::pow(cfg_.beta1, t);
    const double bc2 = 1.0 - std::pow(cfg_.beta2, t);
    const std::size_t b0 = this->shard_begin();
    for (const ParamSpec& s : store.specs()) {
      if (!this->owns(s)) continue;  // another rank's shard
      const GroupSettings& g = this->group(s.role);
      const double glr = lr * g.lr_mult;
      Backend::adamw_update(values + s.offset, m_.data() + (s.offset - b0), v_.data() + (s.offset - b0),
                            grads + s.offset, static_cast<std::int64_t>(s.numel), 1.0 - glr * g.weight_decay,
                            g.weight_decay != 0.0, glr / bc1, cfg_.beta1, cfg_.beta2, g.eps, std::sqrt(bc2));
    }
  }

 private:
  AdamWConfig cfg_;
  moments m_, v_;
};

// Global L2 norm of n gradients in the Backend's memory (accumulated in double,
// the same bits for any thread count: resume must be exact).
template <class Backend, class T>
double global_grad_norm(const T* g, std::int64_t n) {
  return std::sqrt(Backend::sum_squares(g, n));
}
template <class T>
double global_grad_norm(const ParamStore<T>& store) {
  return global_grad_norm<cpu_backend>(store.grad(), static_cast<std::int64_t>(store.size()));
}

// PyTorch clip_grad_norm_: scale by min(1, max_norm/(norm + 1e-6)). Returns the
// norm before clipping. max_norm <= 0 disables clipping.
template <class Backend, class T>
double clip_grad_norm(T* g, std::int64_t n, double max_norm) {
  const double norm = global_grad_norm<Backend>(g, n);
  if (max_norm > 0) {
    const double coef = std::min(1.0, max_norm / (norm + 1e-6));
    if (coef < 1.0) Backend::scale(g, n, T(coef));
  }
  return norm;
}
template <class T>
double clip_grad_norm(ParamStore<T>& store, double max_norm) {
  return clip_grad_norm<cpu_backend>(store.grad(), static_cast<std::int64_t>(store.size()), max_norm);
}

}  // namespace normlab
