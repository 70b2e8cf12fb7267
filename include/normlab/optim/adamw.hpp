#pragma once
// AdamW with PyTorch semantics, per-role parameter groups, global-norm clipping.
//
// Step t = 1, 2, …, for each parameter p of a group with (lr·mult, wd, ε):
//   p ← p·(1 − lr·wd)                      (decoupled decay, skipped when wd = 0)
//   m ← β₁m + (1−β₁)g ;  v ← β₂v + (1−β₂)g²
//   p ← p − (lr/(1−β₁ᵗ)) · m / (√v/√(1−β₂ᵗ) + ε)
// exactly the order of torch.optim.AdamW (foreach=False), so float64 runs agree to rounding.
#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "normlab/backend/cpu/ops.hpp"
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

template <class T>
class AdamW {
 public:
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
  aligned_vector<T>& exp_avg() { return m_; }
  aligned_vector<T>& exp_avg_sq() { return v_; }
  const aligned_vector<T>& exp_avg() const { return m_; }
  const aligned_vector<T>& exp_avg_sq() const { return v_; }
  void set_steps_taken(std::int64_t t) { t_ = t; }
  // The parameters this optimizer updates ([0, size) unless a shard); the
  // moments above are indexed from shard_begin().
  std::size_t shard_begin() const { return begin_; }
  std::size_t shard_end() const { return end_; }

  // One update of every parameter in `store` with the gradients it holds.
  void step(ParamStore<T>& store, double lr) {
    if (store.size() != total_)
      throw Error("AdamW::step: parameter store has " + std::to_string(store.size()) +
                  " values but the optimizer state was built for " + std::to_string(total_));
    ++t_;
    const double bc1 = 1.0 - std::pow(cfg_.beta1, double(t_));
    const double bc2 = 1.0 - std::pow(cfg_.beta2, double(t_));
    const T b1 = T(cfg_.beta1), b2 = T(cfg_.beta2);
    const T sqrt_bc2 = T(std::sqrt(bc2));
    for (const ParamSpec& s : store.specs()) {
      if (s.offset < begin_ || s.offset >= end_) continue;  // another rank's shard
      const GroupSettings& g = group(s.role);
      const double glr = lr * g.lr_mult;
      const T decay = T(1.0 - glr * g.weight_decay);
      const T step_size = T(glr / bc1);
      const T eps = T(g.eps);
      const bool decayed = g.weight_decay != 0.0;
      T* p = store.value(s.offset);
      const T* gr = store.grad(s.offset);
      T* m = m_.data() + (s.offset - begin_);
      T* v = v_.data() + (s.offset - begin_);
      // Chunks of Eigen arrays: vectorized sqrt/div, elementwise so any split gives the same bits.
      const std::int64_t n = static_cast<std::int64_t>(s.numel);
      constexpr std::int64_t kChunk = 1 << 14;
      const std::int64_t chunks = (n + kChunk - 1) / kChunk;
      cpu::parallel_for(chunks, chunks > 1, [&](std::int64_t c) {
        const std::int64_t i0 = c * kChunk, len = std::min(kChunk, n - i0);
        using A = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
        using CA = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
        A P(p + i0, len), M(m + i0, len), Vs(v + i0, len);
        CA Gr(gr + i0, len);
        if (decayed) P *= decay;
        M = b1 * M + (T(1) - b1) * Gr;
        Vs = b2 * Vs + (T(1) - b2) * Gr * Gr;
        P -= step_size * (M / (Vs.sqrt() / sqrt_bc2 + eps));
      });
    }
  }

 private:
  AdamWConfig cfg_;
  std::array<GroupSettings, kParamRoles> groups_{};
  std::size_t begin_ = 0, end_ = 0, total_ = 0;
  aligned_vector<T> m_, v_;
  std::int64_t t_ = 0;
};

// Global L2 norm of every gradient (accumulated in double).
template <class T>
// Fixed chunks summed in parallel, then added in chunk order: the same bits
// for any thread count (resume must be exact).
double global_grad_norm(const ParamStore<T>& store) {
  constexpr std::int64_t kChunk = 1 << 16;
  const T* g = store.grad();
  const std::int64_t n = static_cast<std::int64_t>(store.size());
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  double* part = cpu::detail::thread_scratch<double, cpu::detail::kNormPartials>(std::size_t(chunks));
  cpu::parallel_for(chunks, chunks > 1, [&](std::int64_t c) {
    double ss = 0;
    for (std::int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) ss += double(g[i]) * double(g[i]);
    part[c] = ss;
  });
  double ss = 0;
  for (std::int64_t c = 0; c < chunks; ++c) ss += part[c];
  return std::sqrt(ss);
}

// PyTorch clip_grad_norm_: scale by min(1, max_norm/(norm + 1e-6)). Returns the
// norm before clipping. max_norm <= 0 disables clipping.
template <class T>
double clip_grad_norm(ParamStore<T>& store, double max_norm) {
  const double norm = global_grad_norm(store);
  if (max_norm > 0) {
    const double coef = std::min(1.0, max_norm / (norm + 1e-6));
    if (coef < 1.0) {
      T* g = store.grad();
      const std::int64_t n = static_cast<std::int64_t>(store.size());
      cpu::parallel_for(n, n > cpu::kParallelGrain, [&](std::int64_t i) { g[i] *= T(coef); });
    }
  }
  return norm;
}

}  // namespace normlab
