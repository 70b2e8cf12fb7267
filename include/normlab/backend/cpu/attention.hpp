#pragma once
// Causal attention on the CPU: the blocked (online-softmax) forward and backward,
// the probabilities for diagnostics, single-token decoding and grouped-query kv
// widening. Apart: the largest op family, with its own AVX-512 path.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "normlab/backend/cpu/attention_amx.hpp"
#include "normlab/backend/cpu/attention_avx512.hpp"
#include "normlab/backend/cpu/attention_window.hpp"
#include "normlab/backend/cpu/gemm.hpp"
#include "normlab/backend/cpu/primitives.hpp"

namespace normlab::cpu {

// ---------------------------------------------------------------- causal attention
// q,k,v,y: (B,T,H,dk) i.e. (B*T, C); lse: (B,H,T), the log-sum-exp of each row
// of scaled scores, which is all backward keeps besides q, k, v and y.
//
// Blocked ("flash") causal attention: per (batch, head), query blocks of
// kAttnBlock rows meet key blocks up to the diagonal with an online softmax.
// The T×T scores never exist (memory O(block²) per thread), and blocks above
// the diagonal are skipped, half the FLOPs of the dense masked product.
// Backward recomputes each score block from q, k and lse.
inline constexpr std::int64_t kAttnBlock = 64;

namespace detail {
// D = rowsum(dY ⊙ Y) of one head (T entries), what both backward paths start
// from. Under bf16 a run keeps Y in bf16 (TY = bfloat16), so every model of a
// bf16 run reads it rounded here (`rounded`: a float32 model built before bf16
// was set, the float64 oracle): one D, the same bits.
template <class T, class TY>
void head_rowsums(T* D, const T* dy, const TY* y, std::int64_t seq, std::int64_t C, std::int64_t dk, bool rounded) {
  for (std::int64_t t = 0; t < seq; ++t) {
    const T* g = dy + t * C;
    const TY* o = y + t * C;
    if constexpr (std::is_same_v<TY, bfloat16>)
      D[t] = lane_sum<T>(dk, [&](std::int64_t c) { return g[c] * T(to_float(o[c])); });
    else if (rounded)
      D[t] = lane_sum<T>(dk, [&](std::int64_t c) { return g[c] * T(bf16_method_round(double(o[c]))); });
    else
      D[t] = lane_dot(g, o, dk);
  }
}
}  // namespace detail

#if defined(NORMLAB_HAVE_ATTENTION_AVX512)
namespace detail {
// The AVX-512 path over every (batch, head) on engine E (avx512::attention_head_*).
template <class E, class TQ>
void attention_forward_heads_on(float* y, float* lse, const TQ* q, const TQ* k, const TQ* v, std::int64_t B,
                                std::int64_t seq, std::int64_t H, std::int64_t dk, float scale, std::int64_t window) {
  static_assert(avx512::kBlock == kAttnBlock);
  const std::int64_t C = H * dk;
  parallel_for(B * H, B * H * seq * seq * dk > kParallelGrain, [&](std::int64_t bh) {
    const std::int64_t b = bh / H, hd = bh % H, off = b * seq * C + hd * dk;
    float* scratch = thread_scratch<float, kAttention>(std::size_t(avx512::attention_forward_scratch<E>(seq, dk)));
    avx512::attention_head_forward<E>(y + off, lse + bh * seq, q + off, k + off, v + off, seq, C, dk, scale, scratch,
                                      window);
  });
}
template <class E, class TQ, class TY>
void attention_backward_heads_on(float* dq, float* dk_, float* dv, const float* dy, const TY* y, const float* lse,
                                 const TQ* q, const TQ* k, const TQ* v, std::int64_t B, std::int64_t seq,
                                 std::int64_t H, std::int64_t dk, float scale, std::int64_t window, bool bf16) {
  const std::int64_t C = H * dk;
  parallel_for(B * H, B * H * seq * seq * dk > kParallelGrain, [&](std::int64_t bh) {
    const std::int64_t b = bh / H, hd = bh % H, off = b * seq * C + hd * dk;
    const std::int64_t head = avx512::attention_backward_scratch<E>(seq, dk);
    float* scratch = thread_scratch<float, kAttention>(std::size_t(head + seq));
    float* D = scratch + head;
    head_rowsums(D, dy + off, y + off, seq, C, dk, bf16);
    avx512::attention_head_backward<E>(dq + off, dk_ + off, dv + off, dy + off, D, lse + bh * seq, q + off, k + off,
                                       v + off, seq, C, dk, scale, scratch, window);
  });
}

// Under Precision::bf16 (q, k, v then float32, or kept in bf16: TQ) on a bf16
// engine: the tile unit's where amx::available(), else AVX-512 BF16's; else float32's.
template <class TQ>
void attention_forward_heads(float* y, float* lse, const TQ* q, const TQ* k, const TQ* v, std::int64_t B,
                             std::int64_t seq, std::int64_t H, std::int64_t dk, float scale, std::int64_t window,
                             [[maybe_unused]] bool bf16) {
#if defined(NORMLAB_HAVE_ATTENTION_AMX)
  if (bf16 && amx::available())
    return attention_forward_heads_on<amx::AttentionTiles>(y, lse, q, k, v, B, seq, H, dk, scale, window);
#endif
#if defined(NORMLAB_HAVE_BF16GEMM_AVX512)
  if (bf16)
    return attention_forward_heads_on<avx512::detail::Packing<true>>(y, lse, q, k, v, B, seq, H, dk, scale, window);
#endif
  if constexpr (std::is_same_v<TQ, float>)
    attention_forward_heads_on<avx512::detail::Packing<false>>(y, lse, q, k, v, B, seq, H, dk, scale, window);
}
template <class TQ, class TY>
void attention_backward_heads(float* dq, float* dk_, float* dv, const float* dy, const TY* y, const float* lse,
                              const TQ* q, const TQ* k, const TQ* v, std::int64_t B, std::int64_t seq, std::int64_t H,
                              std::int64_t dk, float scale, std::int64_t window, bool bf16) {
#if defined(NORMLAB_HAVE_ATTENTION_AMX)
  if (bf16 && amx::available())
    return attention_backward_heads_on<amx::AttentionTiles>(dq, dk_, dv, dy, y, lse, q, k, v, B, seq, H, dk, scale,
                                                            window, bf16);
#endif
#if defined(NORMLAB_HAVE_BF16GEMM_AVX512)
  if (bf16)
    return attention_backward_heads_on<avx512::detail::Packing<true>>(dq, dk_, dv, dy, y, lse, q, k, v, B, seq, H,
                                                                      dk, scale, window, bf16);
#endif
  if constexpr (std::is_same_v<TQ, float>)
    attention_backward_heads_on<avx512::detail::Packing<false>>(dq, dk_, dv, dy, y, lse, q, k, v, B, seq, H, dk,
                                                                scale, window, bf16);
}
}  // namespace detail
#endif

// window > 0: causal sliding window, query t attends to keys t−W+1 … t; both
// paths skip key blocks wholly before a query block's windows. A window of at
// least T masks nothing more than causality and runs as no window.
template <class T>
void attention_forward(T* y, T* lse, const T* q, const T* k, const T* v, std::int64_t B, std::int64_t seq,
                       std::int64_t H, std::int64_t dk, T scale, std::int64_t window = 0) {
  constexpr std::int64_t Bk = kAttnBlock;
  const std::int64_t C = H * dk;
  if (window >= seq) window = 0;
#if defined(NORMLAB_HAVE_ATTENTION_AVX512)
  if constexpr (std::is_same_v<T, float>)
    return detail::attention_forward_heads(y, lse, q, k, v, B, seq, H, dk, scale, window, bf16_products_active());
#endif
  parallel_for(B * H, B * H * seq * seq * dk > kParallelGrain, [&](std::int64_t bh) {
    const std::int64_t b = bh / H, hd = bh % H, off = b * seq * C + hd * dk;
    T* S = detail::thread_scratch<T, detail::kAttention>(std::size_t(Bk * Bk + Bk * dk + 2 * Bk));
    T* O = S + Bk * Bk;  // (nq, dk) unnormalized output
    T* m = O + Bk * dk;  // running row maxima
    T* l = m + Bk;       // running row sums
    for (std::int64_t i0 = 0; i0 < seq; i0 += Bk) {
      const std::int64_t nq = std::min(Bk, seq - i0);
      std::fill_n(O, nq * dk, T(0));
      std::fill_n(m, nq, -std::numeric_limits<T>::infinity());
      std::fill_n(l, nq, T(0));
      for (std::int64_t j0 = window_first_block(i0, window, Bk); j0 < i0 + nq; j0 += Bk) {
        const std::int64_t nk = std::min({Bk, seq - j0, i0 + nq - j0});
        gemm<T, Eigen::RowMajor, Eigen::ColMajor>(nq, nk, dk, q + off + i0 * C, C, k + off + j0 * C, C, S, Bk, false,
                                                  scale);
        for (std::int64_t r = 0; r < nq; ++r) {
          const std::int64_t ncol = std::min(nk, i0 + r - j0 + 1);  // keys ≤ this query (≥ 1: j0 ≤ i0)
          const std::int64_t lo = std::max<std::int64_t>(0, window_first_key(i0 + r, window) - j0);
          if (lo >= ncol) {  // the whole block lies before this query's window
            std::fill_n(S + r * Bk, nk, T(0));
            continue;
          }
          ArrayRow<T> row(S + r * Bk + lo, ncol - lo);
          const T mx = std::max(m[r], row.maxCoeff());
          const T corr = std::exp(m[r] - mx);  // 0 on the first block (m = −∞)
          row = (row - mx).exp();
          std::fill(S + r * Bk, S + r * Bk + lo, T(0));
          std::fill(S + r * Bk + ncol, S + r * Bk + nk, T(0));
          l[r] = l[r] * corr + row.sum();
          if (corr != T(1)) ArrayRow<T>(O + r * dk, dk) *= corr;
          m[r] = mx;
        }
        gemm<T, Eigen::RowMajor, Eigen::RowMajor>(nq, dk, nk, S, Bk, v + off + j0 * C, C, O, dk, true);
      }
      for (std::int64_t r = 0; r < nq; ++r) {
        const T inv = T(1) / l[r];
        T* yr = y + off + (i0 + r) * C;
        for (std::int64_t c = 0; c < dk; ++c) yr[c] = O[r * dk + c] * inv;
        lse[bh * seq + i0 + r] = m[r] + std::log(l[r]);
      }
    }
  });
}

// With P = softmax(scale·QKᵀ) recomputed per block from lse and D = rowsum(dY ⊙ Y):
// dS = P ⊙ (dY Vᵀ − D); dq = scale dS K; dk = scale dSᵀ Q; dv = Pᵀ dY.
template <class T>
void attention_backward(T* dq, T* dk_, T* dv, const T* dy, const T* y, const T* lse, const T* q, const T* k,
                        const T* v, std::int64_t B, std::int64_t seq, std::int64_t H, std::int64_t dk, T scale,
                        std::int64_t window = 0) {
  constexpr std::int64_t Bk = kAttnBlock;
  const std::int64_t C = H * dk;
  if (window >= seq) window = 0;
  // Both paths start a head with D = rowsum(dY ⊙ Y); the generic one also zeroes
  // the head's columns of dq, dk, dv (it accumulates into them; the AVX-512
  // path writes each row block with its first product instead).
#if defined(NORMLAB_HAVE_ATTENTION_AVX512)
  if constexpr (std::is_same_v<T, float>)
    return detail::attention_backward_heads(dq, dk_, dv, dy, y, lse, q, k, v, B, seq, H, dk, scale, window,
                                            bf16_products_active());
#endif
  const bool rounded = std::is_same_v<T, float> ? bf16_products_active() : matmul_precision() == Precision::bf16;
  parallel_for(B * H, B * H * seq * seq * dk > kParallelGrain, [&](std::int64_t bh) {
    const std::int64_t b = bh / H, hd = bh % H, off = b * seq * C + hd * dk;
    T* Pm = detail::thread_scratch<T, detail::kAttention>(std::size_t(2 * Bk * Bk + seq));
    T* dS = Pm + Bk * Bk;
    T* D = dS + Bk * Bk;
    detail::head_rowsums(D, dy + off, y + off, seq, C, dk, rounded);
    for (std::int64_t t = 0; t < seq; ++t) {
      std::fill_n(dq + off + t * C, dk, T(0));
      std::fill_n(dk_ + off + t * C, dk, T(0));
      std::fill_n(dv + off + t * C, dk, T(0));
    }
    for (std::int64_t i0 = 0; i0 < seq; i0 += Bk) {
      const std::int64_t nq = std::min(Bk, seq - i0);
      const T* Qi = q + off + i0 * C;
      const T* dYi = dy + off + i0 * C;
      for (std::int64_t j0 = window_first_block(i0, window, Bk); j0 < i0 + nq; j0 += Bk) {
        const std::int64_t nk = std::min({Bk, seq - j0, i0 + nq - j0});
        const T* Kj = k + off + j0 * C;
        const T* Vj = v + off + j0 * C;
        gemm<T, Eigen::RowMajor, Eigen::ColMajor>(nq, nk, dk, Qi, C, Kj, C, Pm, Bk, false, scale);
        gemm<T, Eigen::RowMajor, Eigen::ColMajor>(nq, nk, dk, dYi, C, Vj, C, dS, Bk, false);
        for (std::int64_t r = 0; r < nq; ++r) {
          const std::int64_t ncol = std::min(nk, i0 + r - j0 + 1);
          const std::int64_t lo = std::min(ncol, std::max<std::int64_t>(0, window_first_key(i0 + r, window) - j0));
          ArrayRow<T> p(Pm + r * Bk + lo, ncol - lo), ds(dS + r * Bk + lo, ncol - lo);
          p = (p - lse[bh * seq + i0 + r]).exp();
          ds = scale * p * (ds - D[i0 + r]);
          std::fill(Pm + r * Bk, Pm + r * Bk + lo, T(0));
          std::fill(dS + r * Bk, dS + r * Bk + lo, T(0));
          std::fill(Pm + r * Bk + ncol, Pm + r * Bk + nk, T(0));
          std::fill(dS + r * Bk + ncol, dS + r * Bk + nk, T(0));
        }
        gemm<T, Eigen::ColMajor, Eigen::RowMajor>(nk, dk, nq, Pm, Bk, dYi, C, dv + off + j0 * C, C, true);
        gemm<T, Eigen::RowMajor, Eigen::RowMajor>(nq, dk, nk, dS, Bk, Kj, C, dq + off + i0 * C, C, true);
        gemm<T, Eigen::ColMajor, Eigen::RowMajor>(nk, dk, nq, dS, Bk, Qi, C, dk_ + off + j0 * C, C, true);
      }
    }
  });
}

#if defined(NORMLAB_HAVE_ATTENTION_AVX512) && defined(NORMLAB_HAVE_BF16GEMM_AVX512)
// The same with q, k, v kept in bf16 (a bf16 run whose q/k site's backward
// reads neither): only while products run in bf16 (bf16_stored_operands()), on
// the bf16 engine, whose panels they fill with the words packing their float32
// values gives: the same bits.
inline void attention_forward(float* y, float* lse, const bfloat16* q, const bfloat16* k, const bfloat16* v,
                              std::int64_t B, std::int64_t seq, std::int64_t H, std::int64_t dk, float scale,
                              std::int64_t window = 0) {
  detail::attention_forward_heads(y, lse, q, k, v, B, seq, H, dk, scale, window >= seq ? 0 : window, true);
}
// ... and with attention's output y kept in bf16 too, or alone (a bf16 run
// keeps it so): D reads the stored y, as every model of a bf16 run does.
template <class TY, class TQ>
  requires(std::is_same_v<TY, bfloat16> || std::is_same_v<TQ, bfloat16>) &&
          (std::is_same_v<TY, float> || std::is_same_v<TY, bfloat16>) &&
          (std::is_same_v<TQ, float> || std::is_same_v<TQ, bfloat16>)
void attention_backward(float* dq, float* dk_, float* dv, const float* dy, const TY* y, const float* lse, const TQ* q,
                        const TQ* k, const TQ* v, std::int64_t B, std::int64_t seq, std::int64_t H, std::int64_t dk,
                        float scale, std::int64_t window = 0) {
  detail::attention_backward_heads(dq, dk_, dv, dy, y, lse, q, k, v, B, seq, H, dk, scale, window >= seq ? 0 : window,
                                   true);
}
#endif

// The probabilities themselves, (B,H,T,T) with zeros outside the mask, from
// q, k and the lse of a forward pass: for diagnostics and tests only.
template <class T>
void attention_probs(T* P, const T* lse, const T* q, const T* k, std::int64_t B, std::int64_t seq, std::int64_t H,
                     std::int64_t dk, T scale, std::int64_t window = 0) {
  const std::int64_t C = H * dk;
  parallel_for(B * H, B * H * seq * seq * dk > kParallelGrain, [&](std::int64_t bh) {
    const std::int64_t b = bh / H, hd = bh % H, off = b * seq * C + hd * dk;
    for (std::int64_t t = 0; t < seq; ++t) {
      T* row = P + (bh * seq + t) * seq;
      for (std::int64_t s = 0; s < seq; ++s) {
        if (s > t || s < window_first_key(t, window)) {
          row[s] = T(0);
          continue;
        }
        T dot = 0;
        for (std::int64_t c = 0; c < dk; ++c) dot += q[off + t * C + c] * k[off + s * C + c];
        row[s] = std::exp(scale * dot - lse[bh * seq + t]);
      }
    }
  });
}

// One query (1,H,dk) against cached keys/values (S,H,dk) for positions 0..S−1:
// incremental decoding. y (1,H,dk); p: scratch (S).
template <class T>
void attention_decode(T* y, T* p, const T* q, const T* kc, const T* vc, std::int64_t S, std::int64_t H,
                      std::int64_t dk, T scale) {
  const std::int64_t C = H * dk;
  for (std::int64_t hd = 0; hd < H; ++hd) {
    T mx = -std::numeric_limits<T>::infinity();
    for (std::int64_t s = 0; s < S; ++s) {
      T dot = 0;
      for (std::int64_t i = 0; i < dk; ++i) dot += q[hd * dk + i] * kc[s * C + hd * dk + i];
      p[s] = dot * scale;
      mx = std::max(mx, p[s]);
    }
    T sum = 0;
    for (std::int64_t s = 0; s < S; ++s) sum += (p[s] = std::exp(p[s] - mx));
    for (std::int64_t i = 0; i < dk; ++i) y[hd * dk + i] = 0;
    for (std::int64_t s = 0; s < S; ++s) {
      const T w = p[s] / sum;
      for (std::int64_t i = 0; i < dk; ++i) y[hd * dk + i] += w * vc[s * C + hd * dk + i];
    }
  }
}

// ---------------------------------------------------------------- grouped-query attention
// Grouped-query attention runs the attention kernels on key/value rows widened
// to every query head: x (N, Hkv·dk) -> y (N, H·dk), query head h reading
// kv head h / (H/Hkv); the backward sums each group's gradients back.
template <class T>
void kv_repeat(T* y, const T* x, std::int64_t N, std::int64_t H, std::int64_t Hkv, std::int64_t dk) {
  const std::int64_t group = H / Hkv;
  parallel_for(N, N * H * dk > kParallelGrain, [&](std::int64_t i) {
    for (std::int64_t h = 0; h < H; ++h)
      std::copy_n(x + (i * Hkv + h / group) * dk, dk, y + (i * H + h) * dk);
  });
}
template <class T>
void kv_group_sum(T* dx, const T* dy, std::int64_t N, std::int64_t H, std::int64_t Hkv, std::int64_t dk) {
  const std::int64_t group = H / Hkv;
  parallel_for(N, N * H * dk > kParallelGrain, [&](std::int64_t i) {
    for (std::int64_t g = 0; g < Hkv; ++g) {
      T* out = dx + (i * Hkv + g) * dk;
      std::copy_n(dy + (i * H + g * group) * dk, dk, out);
      for (std::int64_t r = 1; r < group; ++r) {
        const T* in = dy + (i * H + g * group + r) * dk;
        for (std::int64_t c = 0; c < dk; ++c) out[c] += in[c];
      }
    }
  });
}

}  // namespace normlab::cpu
