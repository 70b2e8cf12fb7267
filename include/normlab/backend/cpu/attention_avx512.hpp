#pragma once
// Causal attention of one (batch, head) in float32 on normlab's AVX-512
// kernels (issue 18: attention toward the GEMM ceiling; docs/perf.md change 23).
//
// The same blocked ("flash") algorithm as cpu::attention_forward/backward: query
// blocks of kBlock rows meet key blocks up to the diagonal with an online
// softmax; backward recomputes each score block from q, k and lse. What changes
// is how the 64 × 64 × dk block products run: the operands that every block
// pair reuses (K and V of the head, Q and dY of the query block) are packed
// once into micro-kernel panels, and each block product is a handful of 8 × 32
// micro-tiles (sgemm_avx512.hpp) with no per-call packing of the big operands;
// only the probabilities P and dS, new for each block pair, are packed. Generic
// small GEMMs (OpenBLAS's) spent ~40% of attention's time re-packing K and V.
//
// Serial: the caller (cpu::attention_*) runs heads in parallel and owns the
// scratch, so the bits do not depend on the thread count. The float64 path
// (the oracle) keeps the generic code.
#include "normlab/backend/cpu/sgemm_avx512.hpp"

#if defined(NORMLAB_HAVE_SGEMM_AVX512)
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#define NORMLAB_HAVE_ATTENTION_AVX512 1

namespace normlab::cpu::avx512 {

inline constexpr std::int64_t kBlock = 64;  // query and key rows per block
inline constexpr int kAttnMR = 8;           // micro-tile rows: 64-row blocks without padded rows

namespace detail {
using Row = Eigen::Map<Eigen::Array<float, 1, Eigen::Dynamic>>;
inline std::int64_t round16(std::int64_t n) { return (n + 15) / 16 * 16; }
inline std::int64_t round_to(std::int64_t n, std::int64_t q) { return (n + q - 1) / q * q; }

// C(nm × nn, ldc) = alpha·Ap·Bp (+ C when add): Ap packed in MR-row panels of
// depth kn (panel of row p at Ap + p·kn); Bp in 32-column panels whose column j
// starts at Bp + j·bstride (bstride = kn for a packed slab, or the depth of a
// longer packed operand when Bp points into it).
inline void block_product(std::int64_t nm, std::int64_t nn, std::int64_t kn, const float* Ap, const float* Bp,
                          std::int64_t bstride, float* C, std::int64_t ldc, float alpha, bool add) {
  for (std::int64_t p = 0; p < nm; p += kAttnMR) {
    const int mv = int(std::min<std::int64_t>(kAttnMR, nm - p));
    for (std::int64_t q = 0; q < nn; q += kNR) {
      const int nv = int(std::min<std::int64_t>(kNR, nn - q));
      if (mv == kAttnMR && nv == kNR)
        micro_kernel<true, kAttnMR>(kn, Ap + p * kn, Bp + q * bstride, C + p * ldc + q, ldc, alpha, add, mv, nv);
      else
        micro_kernel<false, kAttnMR>(kn, Ap + p * kn, Bp + q * bstride, C + p * ldc + q, ldc, alpha, add, mv, nv);
    }
  }
}
}  // namespace detail

// Floats of scratch one head needs (64-byte aligned base).
inline std::int64_t attention_forward_scratch(std::int64_t Tn, std::int64_t dk) {
  using detail::round16;
  const std::int64_t tk = detail::round_to(Tn, kNR), dkr = detail::round_to(dk, kNR);
  return round16(tk * dk) + round16(dkr * Tn) + round16(kBlock * dk) + round16(kBlock * kBlock) +
         round16(kBlock * kBlock) + round16(kBlock * dk) + 2 * round16(kBlock);
}

// y, lse of one head: q, k, v, y point at the head's first row (row stride C);
// lse at the head's T entries.
inline void attention_head_forward(float* y, float* lse, const float* q, const float* k, const float* v,
                                   std::int64_t Tn, std::int64_t C, std::int64_t dk, float scale, float* scratch) {
  using detail::round16, detail::Row;
  constexpr std::int64_t Bk = kBlock;
  const std::int64_t tk = detail::round_to(Tn, kNR), dkr = detail::round_to(dk, kNR);
  float* Kc = scratch;                    // Kᵀ as B of S = Q Kᵀ: key j's column at Kc + j·dk
  float* Vr = Kc + round16(tk * dk);      // V as B of O += P V: depth Tn
  float* Qa = Vr + round16(dkr * Tn);     // the query block as A of S
  float* S = Qa + round16(Bk * dk);       // scores, then probabilities (nq × Bk)
  float* Pa = S + round16(Bk * Bk);       // P as A of O += P V
  float* O = Pa + round16(Bk * Bk);       // unnormalized output (nq × dk)
  float* m = O + round16(Bk * dk);        // running row maxima
  float* l = m + round16(Bk);             // running row sums
  detail::pack_b<false>(Kc, k, C, 0, dk, 0, Tn);
  detail::pack_b<true>(Vr, v, C, 0, Tn, 0, dk);
  for (std::int64_t i0 = 0; i0 < Tn; i0 += Bk) {
    const std::int64_t nq = std::min(Bk, Tn - i0);
    detail::pack_a<true, kAttnMR>(Qa, q, C, i0, nq, 0, dk);
    std::fill_n(O, nq * dk, 0.0f);
    std::fill_n(m, nq, -std::numeric_limits<float>::infinity());
    std::fill_n(l, nq, 0.0f);
    for (std::int64_t j0 = 0; j0 < i0 + nq; j0 += Bk) {
      const std::int64_t nk = std::min({Bk, Tn - j0, i0 + nq - j0});
      detail::block_product(nq, nk, dk, Qa, Kc + j0 * dk, dk, S, Bk, scale, false);
      // The online softmax exactly as the generic path writes it (Eigen's vectorized exp).
      for (std::int64_t r = 0; r < nq; ++r) {
        const std::int64_t ncol = std::min(nk, i0 + r - j0 + 1);  // keys ≤ this query (≥ 1: j0 ≤ i0)
        Row row(S + r * Bk, ncol);
        const float mx = std::max(m[r], row.maxCoeff());
        const float corr = std::exp(m[r] - mx);  // 0 on the first block (m = −∞)
        row = (row - mx).exp();
        std::fill(S + r * Bk + ncol, S + r * Bk + nk, 0.0f);
        l[r] = l[r] * corr + row.sum();
        if (corr != 1.0f) Row(O + r * dk, dk) *= corr;
        m[r] = mx;
      }
      detail::pack_a<true, kAttnMR>(Pa, S, Bk, 0, nq, 0, nk);
      detail::block_product(nq, dk, nk, Pa, Vr + j0 * kNR, Tn, O, dk, 1.0f, true);
    }
    for (std::int64_t r = 0; r < nq; ++r) {
      const float inv = 1.0f / l[r];
      float* yr = y + (i0 + r) * C;
      for (std::int64_t c = 0; c < dk; ++c) yr[c] = O[r * dk + c] * inv;
      lse[i0 + r] = m[r] + std::log(l[r]);
    }
  }
}

inline std::int64_t attention_backward_scratch(std::int64_t Tn, std::int64_t dk) {
  using detail::round16;
  const std::int64_t tk = detail::round_to(Tn, kNR), dkr = detail::round_to(dk, kNR);
  return 2 * round16(tk * dk) + round16(dkr * Tn) + 2 * round16(kBlock * dk) + 2 * round16(dkr * kBlock) +
         5 * round16(kBlock * kBlock);
}

// dq, dk, dv of one head, accumulated (+=) into rows of stride C that the caller
// zeroed; D: the head's rowsum(dY ⊙ Y), T entries. With P recomputed from lse:
// dS = scale·P ⊙ (dY Vᵀ − D); dq += dS K; dk += dSᵀ Q; dv += Pᵀ dY.
inline void attention_head_backward(float* dq, float* dk_, float* dv, const float* dy, const float* D,
                                    const float* lse, const float* q, const float* k, const float* v, std::int64_t Tn,
                                    std::int64_t C, std::int64_t dk, float scale, float* scratch) {
  using detail::round16, detail::Row;
  constexpr std::int64_t Bk = kBlock;
  const std::int64_t tk = detail::round_to(Tn, kNR), dkr = detail::round_to(dk, kNR);
  float* Kc = scratch;                  // Kᵀ as B of S = Q Kᵀ
  float* Vc = Kc + round16(tk * dk);    // Vᵀ as B of dY Vᵀ
  float* Kr = Vc + round16(tk * dk);    // K as B of dq += dS K: depth Tn
  float* Qa = Kr + round16(dkr * Tn);   // the query block as A of S
  float* Ya = Qa + round16(Bk * dk);    // dY block as A of dY Vᵀ
  float* Qr = Ya + round16(Bk * dk);    // the query block as B of dk += dSᵀ Q: depth nq
  float* Yr = Qr + round16(dkr * Bk);   // dY block as B of dv += Pᵀ dY
  float* P = Yr + round16(dkr * Bk);    // probabilities (nq × Bk)
  float* dS = P + round16(Bk * Bk);     // dY Vᵀ, then dS (nq × Bk)
  float* Pt = dS + round16(Bk * Bk);    // Pᵀ as A
  float* dSa = Pt + round16(Bk * Bk);   // dS as A
  float* dSt = dSa + round16(Bk * Bk);  // dSᵀ as A
  detail::pack_b<false>(Kc, k, C, 0, dk, 0, Tn);
  detail::pack_b<false>(Vc, v, C, 0, dk, 0, Tn);
  detail::pack_b<true>(Kr, k, C, 0, Tn, 0, dk);
  for (std::int64_t i0 = 0; i0 < Tn; i0 += Bk) {
    const std::int64_t nq = std::min(Bk, Tn - i0);
    detail::pack_a<true, kAttnMR>(Qa, q, C, i0, nq, 0, dk);
    detail::pack_a<true, kAttnMR>(Ya, dy, C, i0, nq, 0, dk);
    detail::pack_b<true>(Qr, q, C, i0, nq, 0, dk);
    detail::pack_b<true>(Yr, dy, C, i0, nq, 0, dk);
    for (std::int64_t j0 = 0; j0 < i0 + nq; j0 += Bk) {
      const std::int64_t nk = std::min({Bk, Tn - j0, i0 + nq - j0});
      detail::block_product(nq, nk, dk, Qa, Kc + j0 * dk, dk, P, Bk, scale, false);
      detail::block_product(nq, nk, dk, Ya, Vc + j0 * dk, dk, dS, Bk, 1.0f, false);
      for (std::int64_t r = 0; r < nq; ++r) {
        const std::int64_t ncol = std::min(nk, i0 + r - j0 + 1);
        Row p(P + r * Bk, ncol), ds(dS + r * Bk, ncol);
        p = (p - lse[i0 + r]).exp();
        ds = scale * p * (ds - D[i0 + r]);
        std::fill(P + r * Bk + ncol, P + r * Bk + nk, 0.0f);
        std::fill(dS + r * Bk + ncol, dS + r * Bk + nk, 0.0f);
      }
      detail::pack_a<false, kAttnMR>(Pt, P, Bk, 0, nk, 0, nq);
      detail::block_product(nk, dk, nq, Pt, Yr, nq, dv + j0 * C, C, 1.0f, true);
      detail::pack_a<true, kAttnMR>(dSa, dS, Bk, 0, nq, 0, nk);
      detail::block_product(nq, dk, nk, dSa, Kr + j0 * kNR, Tn, dq + i0 * C, C, 1.0f, true);
      detail::pack_a<false, kAttnMR>(dSt, dS, Bk, 0, nk, 0, nq);
      detail::block_product(nk, dk, nq, dSt, Qr, nq, dk_ + j0 * C, C, 1.0f, true);
    }
  }
}

}  // namespace normlab::cpu::avx512
#endif  // NORMLAB_HAVE_SGEMM_AVX512
