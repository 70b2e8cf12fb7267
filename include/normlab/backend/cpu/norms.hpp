#pragma once
// The row-wise normalisations and what rides on them: RMSNorm, row L2 norms,
// RoPE, the fused RoPE + unit-norm + s_qk pass, per-column scales. Apart from
// attention and the MLP: these are one pass over each row (or column) each.
#include <cmath>
#include <cstdint>

#include "normlab/backend/cpu/bf16gemm_avx512.hpp"
#include "normlab/backend/cpu/primitives.hpp"

namespace normlab::cpu {

// ---------------------------------------------------------------- RMSNorm
// y = x / sqrt(mean(x²) + eps) ⊙ w ; rstd(N) saved for backward. y may alias x:
// a row's sum of squares is taken before any of it is written.
namespace detail {
// One row: y = x r ⊙ w, returning r.
template <class T>
T rmsnorm_row(T* y, const T* x, const T* w, std::int64_t C, T eps) {
  const T ss = lane_dot(x, x, C);
  const T r = T(1) / std::sqrt(ss / T(C) + eps);
  for (std::int64_t c = 0; c < C; ++c) y[c] = x[c] * r * w[c];
  return r;
}
}  // namespace detail
template <class T>
void rmsnorm_forward(T* y, T* rstd, const T* x, const T* w, std::int64_t N, std::int64_t C, T eps) {
  parallel_for(N, N * C > kParallelGrain,
               [&](std::int64_t i) { rstd[i] = detail::rmsnorm_row(y + i * C, x + i * C, w, C, eps); });
}
#if defined(NORMLAB_HAVE_BF16GEMM_AVX512)
// The same with y kept in bf16 (a bf16 run's input norms, whose output only
// products read): each row computed as above into scratch where the float32
// row would sit, then rounded as round_to_bf16 (and packing) round it.
inline void rmsnorm_forward(bfloat16* y, float* rstd, const float* x, const float* w, std::int64_t N, std::int64_t C,
                            float eps) {
  parallel_for(N, N * C > kParallelGrain, [&](std::int64_t i) {
    float* row = detail::scratch_row_like<detail::kActRow>(C, i * C);
    rstd[i] = detail::rmsnorm_row(row, x + i * C, w, C, eps);
    avx512::bf16::round_to_bf16(y + i * C, row, C);
  });
}
#endif

// dx = r (dy⊙w) − x r³/C Σ(dy⊙w⊙x);  dw += Σ_rows dy ⊙ x r
namespace detail {
inline float widened(bfloat16 v) { return to_float(v); }
template <class T>
T widened(T v) {
  return v;
}
// x of type X: T, or bfloat16 read widened (the same arithmetic on the rounded values).
template <class T, class X>
void rmsnorm_backward(T* dx, T* dw, const T* dy, const X* x, const T* w, const T* rstd, std::int64_t N,
                      std::int64_t C) {
  parallel_for(N, N * C > kParallelGrain, [&](std::int64_t i) {
    const X* xi = x + i * C;
    const T* gi = dy + i * C;
    const T r = rstd[i];
    const T dot = lane_sum<T>(C, [&](std::int64_t c) { return gi[c] * w[c] * T(widened(xi[c])); });
    const T k = r * r * r * dot / T(C);
    T* di = dx + i * C;
    for (std::int64_t c = 0; c < C; ++c) di[c] = r * gi[c] * w[c] - k * T(widened(xi[c]));
  });
  column_reduce(dw, N, C,
                [&](std::int64_t i, std::int64_t c) { return dy[i * C + c] * T(widened(x[i * C + c])) * rstd[i]; });
}
}  // namespace detail
template <class T>
void rmsnorm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, std::int64_t N,
                      std::int64_t C) {
  detail::rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C);
}
// x kept in bf16.
inline void rmsnorm_backward(float* dx, float* dw, const float* dy, const bfloat16* x, const float* w,
                             const float* rstd, std::int64_t N, std::int64_t C) {
  detail::rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C);
}

// ---------------------------------------------------------------- row L2 normalisation
// Rows of length L (a token's d, or one head's dk): y = x/‖x‖, norm saved. No epsilon, as the reference.
template <class T>
void l2norm_rows_forward(T* y, T* norm, const T* x, std::int64_t rows, std::int64_t L) {
  parallel_for(rows, rows * L > kParallelGrain, [&](std::int64_t i) {
    const T* xi = x + i * L;
    const T n = std::sqrt(lane_dot(xi, xi, L));
    norm[i] = n;
    const T inv = T(1) / n;
    T* yi = y + i * L;
    for (std::int64_t c = 0; c < L; ++c) yi[c] = xi[c] * inv;
  });
}

// dx = (dy − y (y·dy)) / ‖x‖ ; dx may alias dy
template <class T>
void l2norm_rows_backward(T* dx, const T* dy, const T* y, const T* norm, std::int64_t rows, std::int64_t L) {
  parallel_for(rows, rows * L > kParallelGrain, [&](std::int64_t i) {
    const T* yi = y + i * L;
    const T* gi = dy + i * L;
    const T dot = lane_dot(yi, gi, L);
    const T inv = T(1) / norm[i];
    T* di = dx + i * L;
    for (std::int64_t c = 0; c < L; ++c) di[c] = (gi[c] - yi[c] * dot) * inv;
  });
}

// ---------------------------------------------------------------- RoPE (rotate-half)
// Table (T, dk/2) of cos and sin of p·θᵢ, θᵢ = base^(−2i/dk), computed in double.
template <class T>
void rope_table(T* cosv, T* sinv, std::int64_t seq, std::int64_t dk, double base = 10000.0) {
  const std::int64_t h = dk / 2;
  for (std::int64_t p = 0; p < seq; ++p)
    for (std::int64_t i = 0; i < h; ++i) {
      const double theta = std::pow(base, -2.0 * double(i) / double(dk));
      cosv[p * h + i] = T(std::cos(double(p) * theta));
      sinv[p * h + i] = T(std::sin(double(p) * theta));
    }
}

// One head's vector v (2h) rotated in place by the angles of one position:
// pairs (i, i+h); sgn = −1 applies the transpose rotation (the backward).
template <class T>
inline void rotate_half(T* v, const T* cosp, const T* sinp, std::int64_t h, T sgn) {
  for (std::int64_t i = 0; i < h; ++i) {
    const T c = cosp[i], s = sgn * sinp[i];
    const T a = v[i], b = v[i + h];
    v[i] = a * c - b * s;
    v[i + h] = b * c + a * s;
  }
}

// In place on x (B,T,H,dk), positions pos0 … pos0+T−1. inverse=true applies the
// transpose rotation (the backward).
template <class T>
void rope_apply(T* x, const T* cosv, const T* sinv, std::int64_t B, std::int64_t seq, std::int64_t H,
                std::int64_t dk, bool inverse, std::int64_t pos0 = 0) {
  const std::int64_t h = dk / 2;
  const T sgn = inverse ? T(-1) : T(1);
  parallel_for(B * seq, B * seq * H * dk > kParallelGrain, [&](std::int64_t bt) {
    const std::int64_t p = pos0 + bt % seq;  // pos0: first position (incremental decoding)
    for (std::int64_t hd = 0; hd < H; ++hd) {
      rotate_half(x + (bt * H + hd) * dk, cosv + p * h, sinv + p * h, h, sgn);
    }
  });
}

// ---------------------------------------------------------------- fused QK path (nGPT)
// Per token row (C = H·dk) at position pos0 + t: RoPE in place on x, then per
// head xh = x/‖x‖ (norm saved) and xs = xh ⊙ s (x keeps the rotated values
// unless xs is x).
// One pass over the row instead of three (rope_apply, l2norm_rows_forward,
// scale_columns), with the same arithmetic. xs may alias x: each value is read
// before its scaled unit value is written over it.
template <class T>
void rope_l2norm_scale_forward(T* x, T* xh, T* norm, T* xs, const T* s, const T* cosv, const T* sinv,
                               std::int64_t B, std::int64_t seq, std::int64_t H, std::int64_t dk,
                               std::int64_t pos0 = 0) {
  const std::int64_t C = H * dk, h = dk / 2;
  parallel_for(B * seq, B * seq * C > kParallelGrain, [&](std::int64_t bt) {
    const std::int64_t p = pos0 + bt % seq;
    for (std::int64_t hd = 0; hd < H; ++hd) {
      const std::int64_t o = bt * C + hd * dk;
      T* v = x + o;
      rotate_half(v, cosv + p * h, sinv + p * h, h, T(1));
      const T n = std::sqrt(lane_dot(v, v, dk));
      norm[bt * H + hd] = n;
      const T inv = T(1) / n;
      for (std::int64_t c = 0; c < dk; ++c) {
        xh[o + c] = v[c] * inv;
        xs[o + c] = xh[o + c] * s[hd * dk + c];
      }
    }
  });
}

// Backward of rope_l2norm_scale_forward, in place on dx (in: d xs; out: d x
// before RoPE), with ds += c · Σ_rows dxs ⊙ xh (c: the scale's
// re-parameterisation constant; summed by row_chunk_reduce).
template <class T>
void rope_l2norm_scale_backward(T* dx, T* ds, const T* xh, const T* norm, const T* s, const T* cosv,
                                const T* sinv, std::int64_t B, std::int64_t seq, std::int64_t H, std::int64_t dk,
                                T c) {
  const std::int64_t N = B * seq, C = H * dk, h = dk / 2;
  CArrayRow<T> sc(s, C);
  row_chunk_reduce(ds, N, C, N * C > kParallelGrain, [&](std::int64_t i, ArrayRow<T>& partial) {
    T* g = dx + i * C;
    const T* y = xh + i * C;
    ArrayRow<T> gr(g, C);
    partial += gr * CArrayRow<T>(y, C);
    gr *= sc;
    const std::int64_t p = i % seq;
    for (std::int64_t hd = 0; hd < H; ++hd) {
      T* gh = g + hd * dk;
      const T* yh = y + hd * dk;
      const T dot = lane_dot(yh, gh, dk);
      const T inv = T(1) / norm[i * H + hd];
      for (std::int64_t k = 0; k < dk; ++k) gh[k] = (gh[k] - yh[k] * dot) * inv;
      rotate_half(gh, cosv + p * h, sinv + p * h, h, T(-1));
    }
  }, c);
}

// ---------------------------------------------------------------- per-column scale
// y(N,L) = x ⊙ s (s broadcast over rows); y may alias x.
template <class T>
void scale_columns(T* y, const T* x, const T* s, std::int64_t N, std::int64_t L) {
  parallel_for(N, N * L > kParallelGrain, [&](std::int64_t i) {
    for (std::int64_t j = 0; j < L; ++j) y[i * L + j] = x[i * L + j] * s[j];
  });
}

// ds(L) += c · Σ_rows dy ⊙ x  (deterministic, see column_reduce)
template <class T>
void column_dot_accumulate(T* ds, const T* dy, const T* x, std::int64_t N, std::int64_t L, T c = T(1)) {
  column_reduce(ds, N, L, [&](std::int64_t i, std::int64_t j) { return c * (dy[i * L + j] * x[i * L + j]); });
}

// ds(L) += Σ_rows dy ⊙ (a − b)
template <class T>
void column_dot_accumulate_diff(T* ds, const T* dy, const T* a, const T* b, std::int64_t N, std::int64_t L) {
  column_reduce(ds, N, L, [&](std::int64_t i, std::int64_t j) {
    const std::int64_t k = i * L + j;
    return dy[k] * (a[k] - b[k]);
  });
}

}  // namespace normlab::cpu
