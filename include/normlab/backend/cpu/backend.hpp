#pragma once
// cpu_backend: the CPU as a type a model is parameterised over,
// Transformer<T, Scheme, Residual, cpu_backend>. It supplies memory (host
// arrays, the bump arena) and the leaf ops a block's policies call; every op is
// one of backend/cpu/ops.hpp (blocked attention, fused row kernels, OpenMP; float32
// GEMMs on normlab's own AVX-512 kernels, backend/cpu/sgemm_avx512.hpp, with
// OpenBLAS's serial kernels for small products and builds without AVX-512; float64
// GEMMs on Eigen's). Policies call `Backend::op(...)`, never `cpu::op`, so a
// second backend is a second type with the same members, not a second model.
// A backend lacking an op a policy needs fails to compile at that call.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "normlab/backend/cpu/ops.hpp"
#include "normlab/backend/cpu/residual.hpp"
#include "normlab/backend/residual_math.hpp"
#include "normlab/core/aligned.hpp"
#include "normlab/tensor/tensor.hpp"

namespace normlab {

struct cpu_backend {
  static constexpr std::string_view name = "cpu";
  // Memory. The model's buffers are host arrays: parameters live in the
  // ParamStore itself, and uploads/downloads are copies (no other memory).
  static constexpr bool host_memory = true;
  template <class T>
  using vector = aligned_vector<T>;
  template <class T>
  static void upload(T* dst, const T* src, std::int64_t n) {
    if (dst != src) std::copy_n(src, n, dst);
  }
  template <class T>
  static void download(T* dst, const T* src, std::int64_t n) {
    if (dst != src) std::copy_n(src, n, dst);
  }
  // Work issued so far is done when each op returns.
  static void synchronize() {}
  // The arithmetic of float32 products (core/precision.hpp), for the process:
  // bf16 runs them on the AVX-512 BF16 engine where the CPU has it, else they
  // stay float32 and precision_engine() says so. float64 products under bf16
  // round their operands to bf16 (the bf16 method's oracle, any CPU).
  static void set_precision(Precision p) { cpu::set_matmul_precision(p); }
  static Precision precision() { return cpu::matmul_precision(); }
  static std::string precision_engine() {
    return std::string(precision_name(cpu::matmul_precision())) + " (" + cpu::float_gemm_engine() + ")";
  }
  // Every shape the config allows runs on the CPU kernels.
  static void check_model_limits(std::int64_t /*max_batch*/, std::int64_t /*max_seq*/, std::int64_t /*heads*/,
                                 std::int64_t /*n_embd*/, std::int64_t /*head_dim*/) {}
  // The built-in residual rules' math (ResidualMath), backend/cpu/residual.hpp.
  template <ResidualMath M, class T>
  using residual_kernels = cpu::ResidualKernels<M, T>;

  // The leaf ops: each the CPU kernel of the same name and signature
  // (backend/cpu/ops.hpp).
  // Linear layers Y = α X Wᵀ and their two gradients (backend/cpu/ops.hpp).
  template <class T>
  static void linear_forward(T* Y, const T* X, const T* W, std::int64_t N, std::int64_t in, std::int64_t out,
                             bool accumulate = false, T alpha = T(1)) {
    cpu::linear_forward(Y, X, W, N, in, out, accumulate, alpha);
  }
  template <class T>
  static void linear_backward(T* dX, T* dW, const T* dY, const T* X, const T* W, std::int64_t N,
                              std::int64_t in, std::int64_t out, T alpha = T(1)) {
    cpu::linear_backward(dX, dW, dY, X, W, N, in, out, alpha);
  }
#if defined(NORMLAB_HAVE_BF16GEMM_AVX512)
  // Activations stored in bf16 (optional members): a model keeps an activation
  // that only products read in bf16 when stores_bf16() holds as it is built
  // (float32 products running in bf16), rounded by round_to_bf16 and read by
  // the two overloads below, which give the bits of the float32 values.
  static bool stores_bf16() { return cpu::bf16_stored_operands(); }
  static void round_to_bf16(bfloat16* dst, const float* src, std::int64_t n) { cpu::round_to_bf16(dst, src, n); }
  static void linear_forward(float* Y, const bfloat16* X, const float* W, std::int64_t N, std::int64_t in,
                             std::int64_t out, bool accumulate = false, float alpha = 1.0f) {
    cpu::linear_forward(Y, X, W, N, in, out, accumulate, alpha);
  }
  static void linear_backward(float* dX, float* dW, const float* dY, const bfloat16* X, const float* W,
                              std::int64_t N, std::int64_t in, std::int64_t out, float alpha = 1.0f) {
    cpu::linear_backward(dX, dW, dY, X, W, N, in, out, alpha);
  }
  // dY stored in bf16 as well (the activation's backward wrote it so, d_uv).
  static void linear_backward(float* dX, float* dW, const bfloat16* dY, const float* X, const float* W,
                              std::int64_t N, std::int64_t in, std::int64_t out, float alpha = 1.0f) {
    cpu::linear_backward(dX, dW, dY, X, W, N, in, out, alpha);
  }
  static void linear_backward(float* dX, float* dW, const bfloat16* dY, const bfloat16* X, const float* W,
                              std::int64_t N, std::int64_t in, std::int64_t out, float alpha = 1.0f) {
    cpu::linear_backward(dX, dW, dY, X, W, N, in, out, alpha);
  }
  // The bf16 method keeps the activation's saved input uv in bf16: stored so
  // (the activations' backward read it, widened), or rounded in place in a
  // float32 buffer (a model built before bf16 was set), or, float64, by the oracle.
  static void round_to_bf16_in_place(float* x, std::int64_t n) { cpu::round_to_bf16_in_place(x, n); }
  static void round_to_bf16_in_place(double* x, std::int64_t n) { cpu::round_to_bf16_in_place(x, n); }
  // Values kept in bf16, widened exactly for a float32 reader (a residual
  // rule's backward reading the branch output a bf16 run kept so, a q/k site's
  // its saved q, k).
  static void widen_bf16(float* dst, const bfloat16* src, std::int64_t n) { cpu::widen_bf16(dst, src, n); }
  // RMSNorm's backward reading its input x kept in bf16 (QK-norm's rotated q, k
  // in a bf16 run): the float32 kernel's arithmetic on x widened.
  static void rmsnorm_backward(float* dx, float* dw, const float* dy, const bfloat16* x, const float* w,
                               const float* rstd, std::int64_t N, std::int64_t C) {
    cpu::rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C);
  }
  // The activations' backward reading uv so, writing the gradient at uv in
  // float32 or, where products alone read it (d_uv), in bf16: D.
  template <class D>
    requires(std::is_same_v<D, float> || std::is_same_v<D, bfloat16>)
  static void swiglu_backward(D* duv, const float* dact, const bfloat16* uv, std::int64_t N, std::int64_t F) {
    cpu::swiglu_backward(duv, dact, uv, N, F);
  }
  template <class D>
    requires(std::is_same_v<D, float> || std::is_same_v<D, bfloat16>)
  static void scaled_swiglu_backward(D* duv, float* ds, const float* dact, const bfloat16* uv, const float* s,
                                     std::int64_t N, std::int64_t F, float c) {
    cpu::scaled_swiglu_backward(duv, ds, dact, uv, s, N, F, c);
  }
  template <class D>
    requires(std::is_same_v<D, float> || std::is_same_v<D, bfloat16>)
  static void pointwise_backward(Pointwise fn, D* du, const float* dact, const bfloat16* u, std::int64_t n) {
    cpu::pointwise_backward(fn, du, dact, u, n);
  }
  // Attention reading q, k, v kept in bf16 (products alone read them there).
  static void attention_forward(float* y, float* lse, const bfloat16* q, const bfloat16* k, const bfloat16* v,
                                std::int64_t B, std::int64_t seq, std::int64_t H, std::int64_t dk, float scale,
                                std::int64_t window = 0) {
    cpu::attention_forward(y, lse, q, k, v, B, seq, H, dk, scale, window);
  }
  // ... and its output y kept in bf16 (q, k, v kept in bf16 or not).
  template <class TY, class TQ>
    requires(std::is_same_v<TY, bfloat16> || std::is_same_v<TQ, bfloat16>)
  static void attention_backward(float* dq, float* dk_, float* dv, const float* dy, const TY* y, const float* lse,
                                 const TQ* q, const TQ* k, const TQ* v, std::int64_t B, std::int64_t seq,
                                 std::int64_t H, std::int64_t dk, float scale, std::int64_t window = 0) {
    cpu::attention_backward(dq, dk_, dv, dy, y, lse, q, k, v, B, seq, H, dk, scale, window);
  }
  // RMSNorm keeping its output in bf16 (a bf16 run's input norms: products alone read it).
  static void rmsnorm_forward(bfloat16* y, float* rstd, const float* x, const float* w, std::int64_t N,
                              std::int64_t C, float eps) {
    cpu::rmsnorm_forward(y, rstd, x, w, N, C, eps);
  }
  // The activations' forwards that keep act and their input in bf16 (one pass).
  static void pointwise_forward(Pointwise fn, bfloat16* act, bfloat16* u_kept, const float* u, std::int64_t n) {
    cpu::pointwise_forward(fn, act, u_kept, u, n);
  }
  static void swiglu_forward(bfloat16* act, bfloat16* uv_kept, const float* uv, std::int64_t N, std::int64_t F) {
    cpu::swiglu_forward(act, uv_kept, uv, N, F);
  }
  static void scaled_swiglu_forward(bfloat16* act, bfloat16* uv_kept, const float* uv, const float* s, std::int64_t N,
                                    std::int64_t F) {
    cpu::scaled_swiglu_forward(act, uv_kept, uv, s, N, F);
  }
#endif
  // C(n,n) = α X Xᵀ (X (n,k)) or, transposed, α XᵀX (X (k,n)): a symmetric
  // product, half of it computed (Muon's Newton–Schulz iteration; optional: a
  // backend without it runs linear_forward).
  template <class T>
  static void gram(T* C, const T* X, std::int64_t n, std::int64_t k, bool transposed, T alpha = T(1)) {
    cpu::gram(C, X, n, k, transposed, alpha);
  }
  template <class T>
  static void embedding_forward(T* out, const std::int64_t* idx, const T* wte, std::int64_t N, std::int64_t C) {
    cpu::embedding_forward(out, idx, wte, N, C);
  }
  template <class T>
  static void embedding_backward(T* dwte, const std::int64_t* idx, const T* dout, std::int64_t N,
                                 std::int64_t C) {
    cpu::embedding_backward(dwte, idx, dout, N, C);
  }
  // Row norms: RMSNorm with gain.
  template <class T>
  static void rmsnorm_forward(T* y, T* rstd, const T* x, const T* w, std::int64_t N, std::int64_t C, T eps) {
    cpu::rmsnorm_forward(y, rstd, x, w, N, C, eps);
  }
  template <class T>
  static void rmsnorm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd,
                               std::int64_t N, std::int64_t C) {
    cpu::rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C);
  }
  // RoPE, and RoPE + per-head unit norm + s_qk in one fused pass.
  template <class T>
  static void rope_apply(T* x, const T* cosv, const T* sinv, std::int64_t B, std::int64_t seq, std::int64_t H,
                         std::int64_t dk, bool inverse, std::int64_t pos0 = 0) {
    cpu::rope_apply(x, cosv, sinv, B, seq, H, dk, inverse, pos0);
  }
  template <class T>
  static void rope_l2norm_scale_forward(T* x, T* xh, T* norm, T* xs, const T* s, const T* cosv, const T* sinv,
                                        std::int64_t B, std::int64_t seq, std::int64_t H, std::int64_t dk,
                                        std::int64_t pos0 = 0) {
    cpu::rope_l2norm_scale_forward(x, xh, norm, xs, s, cosv, sinv, B, seq, H, dk, pos0);
  }
  template <class T>
  static void rope_l2norm_scale_backward(T* dx, T* ds, const T* xh, const T* norm, const T* s, const T* cosv,
                                         const T* sinv, std::int64_t B, std::int64_t seq, std::int64_t H,
                                         std::int64_t dk, T c) {
    cpu::rope_l2norm_scale_backward(dx, ds, xh, norm, s, cosv, sinv, B, seq, H, dk, c);
  }
  // Causal attention (blocked, online softmax) and single-token decoding.
  template <class T>
  static void attention_forward(T* y, T* lse, const T* q, const T* k, const T* v, std::int64_t B,
                                std::int64_t seq, std::int64_t H, std::int64_t dk, T scale,
                                std::int64_t window = 0) {
    cpu::attention_forward(y, lse, q, k, v, B, seq, H, dk, scale, window);
  }
  template <class T>
  static void attention_backward(T* dq, T* dk_, T* dv, const T* dy, const T* y, const T* lse, const T* q,
                                 const T* k, const T* v, std::int64_t B, std::int64_t seq, std::int64_t H,
                                 std::int64_t dk, T scale, std::int64_t window = 0) {
    cpu::attention_backward(dq, dk_, dv, dy, y, lse, q, k, v, B, seq, H, dk, scale, window);
  }
  template <class T>
  static void attention_decode(T* y, T* p, const T* q, const T* kc, const T* vc, std::int64_t S,
                               std::int64_t H, std::int64_t dk, T scale) {
    cpu::attention_decode(y, p, q, kc, vc, S, H, dk, scale);
  }
  template <class T>
  static void attention_probs(T* P, const T* lse, const T* q, const T* k, std::int64_t B, std::int64_t seq,
                              std::int64_t H, std::int64_t dk, T scale, std::int64_t window = 0) {
    cpu::attention_probs(P, lse, q, k, B, seq, H, dk, scale, window);
  }
  // Grouped-query attention: kv rows widened to every query head, and back.
  template <class T>
  static void kv_repeat(T* y, const T* x, std::int64_t N, std::int64_t H, std::int64_t Hkv, std::int64_t dk) {
    cpu::kv_repeat(y, x, N, H, Hkv, dk);
  }
  template <class T>
  static void kv_group_sum(T* dx, const T* dy, std::int64_t N, std::int64_t H, std::int64_t Hkv,
                           std::int64_t dk) {
    cpu::kv_group_sum(dx, dy, N, H, Hkv, dk);
  }
  // Plain (ungated) MLP activations, elementwise.
  template <class T>
  static void pointwise_forward(Pointwise fn, T* act, const T* u, std::int64_t n) {
    cpu::pointwise_forward(fn, act, u, n);
  }
  template <class T>
  static void pointwise_backward(Pointwise fn, T* du, const T* dact, const T* u, std::int64_t n) {
    cpu::pointwise_backward(fn, du, dact, u, n);
  }
  // MLP activations.
  template <class T>
  static void swiglu_forward(T* act, const T* uv, std::int64_t N, std::int64_t F) {
    cpu::swiglu_forward(act, uv, N, F);
  }
  template <class T>
  static void swiglu_backward(T* duv, const T* dact, const T* uv, std::int64_t N, std::int64_t F) {
    cpu::swiglu_backward(duv, dact, uv, N, F);
  }
  template <class T>
  static void scaled_swiglu_forward(T* act, const T* uv, const T* s, std::int64_t N, std::int64_t F) {
    cpu::scaled_swiglu_forward(act, uv, s, N, F);
  }
  template <class T>
  static void scaled_swiglu_backward(T* duv, T* ds, const T* dact, const T* uv, const T* s, std::int64_t N,
                                     std::int64_t F, T c) {
    cpu::scaled_swiglu_backward(duv, ds, dact, uv, s, N, F, c);
  }
  // Per-column scales and their gradients (deterministic column sums).
  template <class T>
  static void scale_columns(T* y, const T* x, const T* s, std::int64_t N, std::int64_t L) {
    cpu::scale_columns(y, x, s, N, L);
  }
  template <class T>
  static void column_dot_accumulate(T* ds, const T* dy, const T* x, std::int64_t N, std::int64_t L,
                                    T c = T(1)) {
    cpu::column_dot_accumulate(ds, dy, x, N, L, c);
  }

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
  // Linear layers' biases: y(N,M) += b broadcast over rows; db(M) += Σ_rows dy
  // (deterministic column sums). A backend without them gets the same from
  // linear_forward/linear_backward on a column of ones (model/transformer.hpp).
  template <class T>
  static void add_bias(T* y, const T* b, std::int64_t N, std::int64_t M) {
    cpu::parallel_for(N, N * M > cpu::kParallelGrain, [&](std::int64_t i) {
      T* yi = y + i * M;
      for (std::int64_t j = 0; j < M; ++j) yi[j] += b[j];
    });
  }
  template <class T>
  static void bias_backward(T* db, const T* dy, std::int64_t N, std::int64_t M) {
    cpu::column_reduce(db, N, M, [&](std::int64_t i, std::int64_t j) { return dy[i * M + j]; });
  }
  // LayerNorm over rows of C: y = (x − μ) r ⊙ w + b, r = 1/√(mean((x − μ)²) + ε);
  // mean and rstd (N) saved for backward; b may be null (no bias).
  template <class T>
  static void layernorm_forward(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, std::int64_t N,
                                std::int64_t C, T eps) {
    cpu::parallel_for(N, N * C > cpu::kParallelGrain, [&](std::int64_t i) {
      const T* xi = x + i * C;
      const T mu = cpu::lane_sum<T>(C, [&](std::int64_t c) { return xi[c]; }) / T(C);
      const T var = cpu::lane_sum<T>(C, [&](std::int64_t c) { return (xi[c] - mu) * (xi[c] - mu); }) / T(C);
      const T r = T(1) / std::sqrt(var + eps);
      mean[i] = mu;
      rstd[i] = r;
      T* yi = y + i * C;
      for (std::int64_t c = 0; c < C; ++c) yi[c] = (xi[c] - mu) * r * w[c] + (b ? b[c] : T(0));
    });
  }
  // x̂ = (x − μ) r, g = dy ⊙ w:  dx = r (g − mean(g) − x̂ mean(g ⊙ x̂));
  // dw += Σ_rows dy ⊙ x̂;  db += Σ_rows dy (when db is not null).
  template <class T>
  static void layernorm_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean,
                                 const T* rstd, std::int64_t N, std::int64_t C) {
    cpu::parallel_for(N, N * C > cpu::kParallelGrain, [&](std::int64_t i) {
      const T* xi = x + i * C;
      const T* gi = dy + i * C;
      const T mu = mean[i], r = rstd[i];
      const T mg = cpu::lane_sum<T>(C, [&](std::int64_t c) { return gi[c] * w[c]; }) / T(C);
      const T mgx = cpu::lane_sum<T>(C, [&](std::int64_t c) { return gi[c] * w[c] * ((xi[c] - mu) * r); }) / T(C);
      T* di = dx + i * C;
      for (std::int64_t c = 0; c < C; ++c) di[c] = r * (gi[c] * w[c] - mg - (xi[c] - mu) * r * mgx);
    });
    cpu::column_reduce(dw, N, C, [&](std::int64_t i, std::int64_t c) {
      return dy[i * C + c] * ((x[i * C + c] - mean[i]) * rstd[i]);
    });
    if (db) bias_backward(db, dy, N, C);
  }
  // RoPE tables (max_seq, D/2) for the model's positions.
  template <class T>
  static void rope_table(T* cosv, T* sinv, std::int64_t seq, std::int64_t dk, double base) {
    cpu::rope_table(cosv, sinv, seq, dk, base);
  }
  // A learned scale's effective values, out(n) = stored × k in double, |·| when
  // `absolute` (α), broadcast from p[0] when `scalar`.
  template <class T>
  static void effective_scale(T* out, const T* p, double k, std::int64_t n, bool scalar, bool absolute) {
    for (std::int64_t j = 0; j < n; ++j) {
      const double x = double(p[scalar ? 0 : j]) * k;
      out[j] = T(absolute ? std::abs(x) : x);
    }
  }
  // g += d (vector) or g[0] += Σ d in order (scalar): the gradient of an expanded scale.
  template <class T>
  static void fold_scale_grad(T* g, const T* d, std::int64_t n, bool scalar) {
    if (scalar) {
      T acc = 0;
      for (std::int64_t j = 0; j < n; ++j) acc += d[j];
      g[0] += acc;
    } else {
      for (std::int64_t j = 0; j < n; ++j) g[j] += d[j];
    }
  }
  // dα → the stored α: d|p k|/dp = sign(p k)·k (0 at 0, as torch.abs), into
  // d_scale (C), then folded into g as fold_scale_grad.
  template <class T>
  static void alpha_grad_to_stored(T* g, T* d_scale, const T* dalpha, const T* p, double k, std::int64_t C,
                                   bool scalar) {
    for (std::int64_t j = 0; j < C; ++j) {
      const double x = double(p[scalar ? 0 : j]) * k;
      const double sgn = x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);
      d_scale[j] = T(double(dalpha[j]) * sgn * k);
    }
    fold_scale_grad(g, d_scale, C, scalar);
  }
  // ---- weight constraint (nn/constraint.hpp) on one matrix W (R, L): its rows
  // (or columns) to norm 1, or only those above 1 shrunk. Row norms per row;
  // column norms by a row-order walk (cache-friendly, independent of the thread
  // count), then one scaling pass.
  template <class T>
  static void constrain_matrix(T* W, std::int64_t R, std::int64_t L, bool rows, bool shrink_only) {
    auto factor = [&](T norm) { return shrink_only ? (norm > T(1) ? T(1) / norm : T(1)) : T(1) / norm; };
    if (rows) {
      cpu::parallel_for(R, R * L > cpu::kParallelGrain, [&](std::int64_t i) {
        const T f = factor(std::sqrt(cpu::lane_dot(W + i * L, W + i * L, L)));
        for (std::int64_t j = 0; j < L; ++j) W[i * L + j] *= f;
      });
    } else {
      T* f = cpu::detail::thread_scratch<T, cpu::detail::kNormPartials>(std::size_t(L));
      std::fill_n(f, L, T(0));
      cpu::column_reduce(f, R, L, [&](std::int64_t i, std::int64_t j) { return W[i * L + j] * W[i * L + j]; });
      for (std::int64_t j = 0; j < L; ++j) f[j] = factor(std::sqrt(f[j]));
      cpu::parallel_for(R, R * L > cpu::kParallelGrain, [&](std::int64_t i) {
        for (std::int64_t j = 0; j < L; ++j) W[i * L + j] *= f[j];
      });
    }
  }

  // ---- optimizer (optim/adamw.hpp)
  // One AdamW update of n values in PyTorch's order. Chunks of Eigen arrays:
  // vectorized sqrt/div, elementwise, so any split gives the same bits.
  template <class T>
  static void adamw_update(T* p, T* m, T* v, const T* g, std::int64_t n, double decay_, bool decayed,
                           double step_size_, double beta1, double beta2, double eps_, double sqrt_bc2_) {
    const T decay = T(decay_), step_size = T(step_size_), b1 = T(beta1), b2 = T(beta2), eps = T(eps_);
    const T sqrt_bc2 = T(sqrt_bc2_);
    constexpr std::int64_t kChunk = 1 << 14;
    const std::int64_t chunks = (n + kChunk - 1) / kChunk;
    cpu::parallel_for(chunks, chunks > 1, [&](std::int64_t c) {
      const std::int64_t i0 = c * kChunk, len = std::min(kChunk, n - i0);
      using A = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
      using CA = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
      A P(p + i0, len), M(m + i0, len), Vs(v + i0, len);
      CA Gr(g + i0, len);
      if (decayed) P *= decay;
      M = b1 * M + (T(1) - b1) * Gr;
      Vs = b2 * Vs + (T(1) - b2) * Gr * Gr;
      P -= step_size * (M / (Vs.sqrt() / sqrt_bc2 + eps));
    });
  }
  // One Lion update of n values (optim/lion.hpp): c = β₁m + (1−β₁)g,
  // p ← p·decay − lr·sign(c), m ← β₂m + (1−β₂)g. Elementwise: any split, same bits.
  template <class T>
  static void lion_update(T* p, T* m, const T* g, std::int64_t n, double decay_, bool decayed, double lr_,
                          double beta1, double beta2) {
    const T decay = T(decay_), lr = T(lr_), b1 = T(beta1), b2 = T(beta2);
    cpu::parallel_for(n, n > cpu::kParallelGrain, [&](std::int64_t i) {
      const T c = b1 * m[i] + (T(1) - b1) * g[i];
      const T sgn = c > T(0) ? T(1) : (c < T(0) ? T(-1) : T(0));
      T pv = p[i];
      if (decayed) pv *= decay;
      p[i] = pv - lr * sgn;
      m[i] = b2 * m[i] + (T(1) - b2) * g[i];
    });
  }
  // Muon's momentum (optim/muon.hpp): m ← βm + (1−β)g, then the update
  // direction u = (1−β)g + βm (Nesterov) or u = m.
  template <class T>
  static void muon_momentum(T* u, T* m, const T* g, std::int64_t n, double beta_, bool nesterov) {
    const T b = T(beta_);
    cpu::parallel_for(n, n > cpu::kParallelGrain, [&](std::int64_t i) {
      const T mv = b * m[i] + (T(1) - b) * g[i];
      m[i] = mv;
      u[i] = nesterov ? (T(1) - b) * g[i] + b * mv : mv;
    });
  }
  // Muon's quintic, completed (optim/muon.hpp): B(k,k) ← c·B + b·A + a·I, where
  // B holds A²: the matrix that maps X to aX + bAX + cA²X in one product.
  template <class T>
  static void muon_quintic(T* B, const T* A, std::int64_t k, double a_, double b_, double c_) {
    const T a = T(a_), b = T(b_), c = T(c_);
    cpu::parallel_for(k, k * k > cpu::kParallelGrain, [&](std::int64_t i) {
      T* Bi = B + i * k;
      const T* Ai = A + i * k;
      for (std::int64_t j = 0; j < k; ++j) Bi[j] = c * Bi[j] + b * Ai[j];
      Bi[i] += a;
    });
  }
  // Muon's update of a hidden matrix: p ← decay·p + step·u.
  template <class T>
  static void muon_apply(T* p, const T* u, std::int64_t n, double decay_, double step_) {
    const T decay = T(decay_), step = T(step_);
    cpu::parallel_for(n, n > cpu::kParallelGrain, [&](std::int64_t i) { p[i] = decay * p[i] + step * u[i]; });
  }
  // Independent tasks (Muon's matrices) over the OpenMP team, handed out
  // dynamically in the order given: fn(task, worker), worker < min(workers,
  // the team). Inside, every op runs on the calling thread (cpu::gemm and the
  // row kernels do not open a region within one). Only where the float32
  // engine is normlab's own: OpenBLAS's and Eigen's bits depend on how a
  // product is split (whole on a thread of a region, in pieces outside one),
  // so there the tasks run one after another with threaded products and the
  // result still does not depend on the thread count.
  static int task_workers() {
#if defined(NORMLAB_HAVE_SGEMM_AVX512)
    return cpu::max_threads();
#else
    return 1;
#endif
  }
  template <class F>
  static void run_tasks(std::int64_t n, int workers, F&& fn) {
    const int team = std::min(workers, cpu::max_threads());
    if (team <= 1 || n <= 1 || cpu::in_parallel()) {
      for (std::int64_t i = 0; i < n; ++i) fn(i, 0);
      return;
    }
    cpu::parallel_tasks(n, team, fn);
  }
  // Σ x² in double: fixed chunks summed in parallel (each in cpu::lane_sum's
  // fixed order), then added in chunk order (the same bits for any thread count).
  template <class T>
  static double sum_squares(const T* x, std::int64_t n) {
    constexpr std::int64_t kChunk = 1 << 16;
    const std::int64_t chunks = (n + kChunk - 1) / kChunk;
    double* part = cpu::detail::thread_scratch<double, cpu::detail::kNormPartials>(std::size_t(chunks));
    cpu::parallel_for(chunks, chunks > 1, [&](std::int64_t c) {
      const T* xc = x + c * kChunk;
      part[c] = cpu::lane_sum<double>(std::min(kChunk, n - c * kChunk),
                                      [&](std::int64_t i) { return double(xc[i]) * double(xc[i]); });
    });
    double ss = 0;
    for (std::int64_t c = 0; c < chunks; ++c) ss += part[c];
    return ss;
  }
  // x ← c·x (the clipping coefficient).
  template <class T>
  static void scale(T* x, std::int64_t n, T c) {
    cpu::parallel_for(n, n > cpu::kParallelGrain, [&](std::int64_t i) { x[i] *= c; });
  }
  template <class T>
  static void fill(T* dst, std::int64_t n, T value) {
    // In parallel chunks: zeroing millions of gradients is a memory-bound pass worth every core.
    constexpr std::int64_t kChunk = 1 << 16;
    cpu::parallel_for((n + kChunk - 1) / kChunk, n > 2 * kChunk, [&](std::int64_t c) {
      std::fill_n(dst + c * kChunk, std::min(kChunk, n - c * kChunk), value);
    });
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
