#pragma once
// cpu_backend: the CPU as a type a model is parameterised over,
// Transformer<T, Scheme, Residual, cpu_backend>. It supplies memory (host
// arrays, the bump arena) and the leaf ops a block's policies call; every op is
// one of backend/cpu/ops.hpp (Eigen GEBP GEMMs, blocked attention, fused row
// kernels, OpenMP). Policies call `Backend::op(...)`, never `cpu::op`, so a
// second backend is a second type with the same members, not a second model.
// A backend lacking an op a policy needs fails to compile at that call.
#include <algorithm>
#include <cstdint>
#include <string_view>
#include <utility>

#include "normlab/backend/cpu/ops.hpp"
#include "normlab/tensor/tensor.hpp"

namespace normlab {

struct cpu_backend {
  static constexpr std::string_view name = "cpu";
  template <class T>
  using arena = Arena<T>;

#define NORMLAB_CPU_LEAF(op)                     \
  template <class... A>                          \
  static void op(A&&... a) {                     \
    cpu::op(std::forward<A>(a)...);              \
  }
  // Linear layers Y = α X Wᵀ and their two gradients (backend/cpu/ops.hpp).
  NORMLAB_CPU_LEAF(linear_forward)
  NORMLAB_CPU_LEAF(linear_backward)
  NORMLAB_CPU_LEAF(embedding_forward)
  NORMLAB_CPU_LEAF(embedding_backward)
  // Row norms: RMSNorm with gain.
  NORMLAB_CPU_LEAF(rmsnorm_forward)
  NORMLAB_CPU_LEAF(rmsnorm_backward)
  // RoPE, and RoPE + per-head unit norm + s_qk in one fused pass.
  NORMLAB_CPU_LEAF(rope_apply)
  NORMLAB_CPU_LEAF(rope_l2norm_scale_forward)
  NORMLAB_CPU_LEAF(rope_l2norm_scale_backward)
  // Causal attention (blocked, online softmax) and single-token decoding.
  NORMLAB_CPU_LEAF(attention_forward)
  NORMLAB_CPU_LEAF(attention_backward)
  NORMLAB_CPU_LEAF(attention_decode)
  NORMLAB_CPU_LEAF(attention_probs)
  // MLP activations.
  NORMLAB_CPU_LEAF(swiglu_forward)
  NORMLAB_CPU_LEAF(swiglu_backward)
  NORMLAB_CPU_LEAF(scaled_swiglu_forward)
  NORMLAB_CPU_LEAF(scaled_swiglu_backward)
  // Per-column scales and their gradients (deterministic column sums).
  NORMLAB_CPU_LEAF(scale_columns)
  NORMLAB_CPU_LEAF(column_dot_accumulate)
#undef NORMLAB_CPU_LEAF

  // Mean cross-entropy over N rows; writes d loss/d logits when dlogits is not null.
  template <class T>
  static double cross_entropy(T* dlogits, const T* logits, const std::int64_t* targets, std::int64_t N,
                              std::int64_t V) {
    return cpu::cross_entropy<T>(dlogits, logits, targets, N, V);
  }
  // dst += src, elementwise (the residual stream's gradient).
  template <class T>
  static void add_into(T* dst, const T* src, std::int64_t n) {
    cpu::parallel_for(n, n > cpu::kParallelGrain, [&](std::int64_t i) { dst[i] += src[i]; });
  }
  template <class T>
  static void fill(T* dst, std::int64_t n, T value) {
    std::fill_n(dst, n, value);
  }
  template <class T>
  static void copy(T* dst, const T* src, std::int64_t n) {
    std::copy_n(src, n, dst);
  }
  // Rows of a user's elementwise or row-wise policy: f(i) for i in [0, rows),
  // in parallel where the work is worth it. On this backend f runs on the host.
  template <class F>
  static void for_rows(std::int64_t rows, std::int64_t cols, F&& f) {
    cpu::parallel_for(rows, rows * cols > cpu::kParallelGrain, std::forward<F>(f));
  }
  // Column sums into a parameter gradient, independent of the thread count:
  // out(L) += Σ_rows term(i, j) in row order (cpu::column_reduce).
  template <class T, class Term>
  static void column_reduce(T* out, std::int64_t N, std::int64_t L, Term&& term) {
    cpu::column_reduce(out, N, L, std::forward<Term>(term));
  }
};

}  // namespace normlab
