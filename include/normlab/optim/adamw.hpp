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

#include "normlab/backend/cpu/backend.hpp"
#include "normlab/core/error.hpp"
#include "normlab/nn/params.hpp"

namespace normlab {

struct GroupSettings {
  double lr_mult = 1.0;
  double weight_decay = 0.0;
  double eps = 1e-8;
};

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;  // applied to the matrix group only (2-D tensors), as PyTorch practice
};

template <class T, class Backend = cpu_backend>
class AdamW {
 public:
  using moments = typename Backend::template vector<T>;

  AdamW(const ParamStore<T>& store, AdamWConfig cfg) : AdamW(store, cfg, 0, store.size()) {}
  // A shard (ZeRO-1): moments only for the parameters in [begin, end) of the
  // store, whose bounds fall between tensors; step() updates those tensors only.
  AdamW(const ParamStore<T>& store, AdamWConfig cfg, std::size_t begin, std::size_t end)
      : cfg_(cfg), begin_(begin), end_(end), total_(store.size()) {
    if (begin > end || end > store.size())
      throw Error("AdamW: shard [" + std::to_string(begin) + ", " + std::to_string(end) + ") outside the " +
                  std::to_string(store.size()) + " parameters");
    for (const ParamSpec& s : store.specs()) {
      const std::size_t a = s.offset, b = s.offset + s.numel;
      if ((a < begin && b > begin) || (a < end && b > end))
        throw Error("AdamW: shard [" + std::to_string(begin) + ", " + std::to_string(end) + ") cuts tensor " + s.name);
    }
    m_.assign(end - begin, T(0));
    v_.assign(end - begin, T(0));
    for (auto& g : groups_) g.eps = cfg.eps;
    group(ParamRole::matrix).weight_decay = cfg.weight_decay;
  }

  GroupSettings& group(ParamRole r) { return groups_[static_cast<int>(r)]; }
  const GroupSettings& group(ParamRole r) const { return groups_[static_cast<int>(r)]; }
  std::int64_t steps_taken() const { return t_; }
  moments& exp_avg() { return m_; }
  moments& exp_avg_sq() { return v_; }
  const moments& exp_avg() const { return m_; }
  const moments& exp_avg_sq() const { return v_; }
  void set_steps_taken(std::int64_t t) { t_ = t; }
  // The parameters this optimizer updates ([0, size) unless a shard); the
  // moments above are indexed from shard_begin().
  std::size_t shard_begin() const { return begin_; }
  std::size_t shard_end() const { return end_; }

  // One update of every parameter in `store` with the gradients it holds.
  void step(ParamStore<T>& store, double lr) { step(store, store.value(), store.grad(), lr); }
  // The same on the live parameters of a model whose backend has its own
  // memory: values/grads in the store's layout (Transformer::param_values()).
  void step(const ParamStore<T>& store, T* values, const T* grads, double lr) {
    if (store.size() != total_)
      throw Error("AdamW::step: parameter store has " + std::to_string(store.size()) +
                  " values but the optimizer state was built for " + std::to_string(total_));
    ++t_;
    const double bc1 = 1.0 - std::pow(cfg_.beta1, double(t_));
    const double bc2 = 1.0 - std::pow(cfg_.beta2, double(t_));
    for (const ParamSpec& s : store.specs()) {
      if (s.offset < begin_ || s.offset >= end_) continue;  // another rank's shard
      const GroupSettings& g = group(s.role);
      const double glr = lr * g.lr_mult;
      Backend::adamw_update(values + s.offset, m_.data() + (s.offset - begin_), v_.data() + (s.offset - begin_),
                            grads + s.offset, static_cast<std::int64_t>(s.numel), 1.0 - glr * g.weight_decay,
                            g.weight_decay != 0.0, glr / bc1, cfg_.beta1, cfg_.beta2, g.eps, std::sqrt(bc2));
    }
  }

 private:
  AdamWConfig cfg_;
  std::array<GroupSettings, kParamRoles> groups_{};
  std::size_t begin_ = 0, end_ = 0, total_ = 0;
  moments m_, v_;
  std::int64_t t_ = 0;
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
