#pragma once
// Causal attention of one (batch, head) in float32 on normlab's AVX-512
// kernels, to bring attention toward the GEMM's ceiling (docs/perf.md).
//
// The same blocked ("flash") algorithm as cpu::attention_forward/backward: query
// blocks of kBlock rows meet key blocks up to the diagonal with an online
// softmax; backward recomputes each score block from q, k and lse. What changes
// is how the 64 × 64 × dk block products run: the operands that every block
// pair reuses (K and V of the head, Q and dY of the query block) are packed
// once into micro-kernel panels, and each block product is a handful of 8 × 32
// micro-tiles (sgemm_avx512.hpp; 32 × 32 tile blocks on AMX) with no per-call
// packing of the big operands;
// only the probabilities P and dS, new for each block pair, are packed. Generic
// small GEMMs (OpenBLAS's) spent ~40% of attention's time re-packing K and V.
//
// A causal sliding window (query t sees keys t−W+1 … t) skips the key blocks
// wholly before a query block's windows and masks the rest row by row.
//
// Serial: the caller (cpu::attention_*) runs heads in parallel and owns the
// scratch, so the bits do not depend on the thread count. The float64 path
// (the oracle) keeps the generic code.
//
// The engine (E) of the block products is a template parameter: float32
// (Packing<false>), or a bf16 engine, AVX-512 BF16's (Packing<true>,
// bf16gemm_avx512.hpp) or the tile unit's (amx::AttentionTiles,
// attention_amx.hpp): Q, K, V, dY, P and dS rounded to bf16 as they are packed,
// float32 accumulation; the softmax, its statistics and every output stay
// float32. A packed panel then holds pairs of k per 32-bit word, so every depth
// and offset along k is counted in words (E::words); the diagonal's depth cuts
// fall on whole pairs.
#include "normlab/backend/cpu/attention_window.hpp"
#include "normlab/backend/cpu/bf16gemm_avx512.hpp"
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

// The block products of one (query block, key block) pair on 8 × 32
// micro-tiles, for an engine E (its words and tile). On a diagonal pair
// (query block = key block; relative key c visible to relative query r iff
// c ≤ r) they skip what the causal mask discards: at T = 256 four of the ten
// block pairs are diagonal, and a plain tile product of each would compute
// ~40% that the mask then throws away (docs/perf.md). Off the diagonal they are
// plain tile products.
template <class E>
struct MicroTileProducts {
  // S = alpha·Ap·Bp. Diagonal: micro-tiles whose every column lies past every row
  // are skipped; those scores are masked out and never read.
  static void score_product(std::int64_t nm, std::int64_t nn, std::int64_t kn, const float* Ap, const float* Bp,
                            std::int64_t bstride, float* C, std::int64_t ldc, float alpha, bool diagonal) {
    for (std::int64_t p = 0; p < nm; p += kAttnMR) {
      const int mv = int(std::min<std::int64_t>(kAttnMR, nm - p));
      const std::int64_t columns = diagonal ? std::min(nn, p + mv) : nn;
      for (std::int64_t q = 0; q < columns; q += kNR)
        E::template tile<kAttnMR>(kn, Ap + p * E::words(kn), Bp + q * E::words(bstride), C + p * ldc + q, ldc,
                                  alpha, false, mv, int(std::min<std::int64_t>(kNR, nn - q)));
    }
  }
  // C = Ap·Bp (+ C when add), A being P or dS (the A of O += P V and dq += dS K).
  // Diagonal: A(row, k) = 0 unless k ≤ row, so row panel p stops at depth p + 8.
  // Only zero products are left out, ones that came last: the sums keep their values.
  static void lower_product(std::int64_t nm, std::int64_t nn, std::int64_t kn, const float* Ap, const float* Bp,
                            std::int64_t bstride, float* C, std::int64_t ldc, bool add, bool diagonal) {
    for (std::int64_t p = 0; p < nm; p += kAttnMR) {
      const int mv = int(std::min<std::int64_t>(kAttnMR, nm - p));
      const std::int64_t depth = diagonal ? std::min<std::int64_t>(kn, p + kAttnMR) : kn;
      for (std::int64_t q = 0; q < nn; q += kNR)
        E::template tile<kAttnMR>(depth, Ap + p * E::words(kn), Bp + q * E::words(bstride), C + p * ldc + q, ldc,
                                  1.0f, add, mv, int(std::min<std::int64_t>(kNR, nn - q)));
    }
  }
  // C = Ap·Bp (+ C when add), A being Pᵀ or dSᵀ (the A of dv += Pᵀ dY and
  // dk += dSᵀ Q). Diagonal: A(row, k) = 0 unless k ≥ row, so row panel p starts at
  // depth p. The products left out are zeros that came first: the sums keep their values.
  static void upper_product(std::int64_t nm, std::int64_t nn, std::int64_t kn, const float* Ap, const float* Bp,
                            std::int64_t bstride, float* C, std::int64_t ldc, bool add, bool diagonal) {
    for (std::int64_t p = 0; p < nm; p += kAttnMR) {
      const int mv = int(std::min<std::int64_t>(kAttnMR, nm - p));
      // k0 = kn: a product of depth 0, zeros (written when !add)
      const std::int64_t k0 = diagonal ? std::min(p, kn) : 0;
      for (std::int64_t q = 0; q < nn; q += kNR)
        E::template tile<kAttnMR>(kn - k0, Ap + p * E::words(kn) + E::words(k0) * kAttnMR,
                                  Bp + q * E::words(bstride) + E::words(k0) * kNR, C + p * ldc + q, ldc, 1.0f, add,
                                  mv, int(std::min<std::int64_t>(kNR, nn - q)));
    }
  }
};

// An engine of the head kernels below: how its operands are packed (A in
// panels of kAttnMR rows, B in panels of kNR columns, k-major), where a
// column or a depth starts in a packed B, the block products, and begin/end
// around a head (nothing to set up here). float32 values (one word per k), or
// bf16 pairs (one word per two k); buffers stay float* (the scratch's type).
template <bool kBf16>
struct Packing : MicroTileProducts<Packing<kBf16>> {
  static std::int64_t words(std::int64_t depth) { return depth; }
  // Floats of a packed A of rows × depth, and of a packed B of columns × depth
  // (the float32 layout: enough for bf16 pairs too).
  static std::int64_t a_floats(std::int64_t rows, std::int64_t depth) { return round_to(rows, kAttnMR) * depth; }
  static std::int64_t b_floats(std::int64_t cols, std::int64_t depth) { return round_to(cols, kNR) * depth; }
  // A packed B of the given depth from column j0 (a multiple of kNR), and from depth k0.
  static const float* b_column(const float* Bp, std::int64_t j0, std::int64_t depth) {
    return Bp + j0 * Packing::words(depth);
  }
  static const float* b_depth(const float* Bp, std::int64_t k0) { return Bp + Packing::words(k0) * kNR; }
  static void begin() {}
  static void end() {}
  template <bool kRowA>
  static void pack_a(float* d, const float* A, std::int64_t lda, std::int64_t i0, std::int64_t m, std::int64_t k0,
                     std::int64_t kn) {
    detail::pack_a<kRowA, kAttnMR>(d, A, lda, i0, m, k0, kn);
  }
  template <bool kRowB>
  static void pack_b(float* d, const float* B, std::int64_t ldb, std::int64_t k0, std::int64_t kn, std::int64_t j0,
                     std::int64_t n) {
    detail::pack_b<kRowB>(d, B, ldb, k0, kn, j0, n);
  }
  template <int MR>
  static void tile(std::int64_t kn, const float* Ap, const float* Bp, float* C, std::int64_t ldc, float alpha,
                   bool add, int mv, int nv) {
    detail::tile<MR>(kn, Ap, Bp, C, ldc, alpha, add, mv, nv);
  }
};
#if defined(NORMLAB_HAVE_BF16GEMM_AVX512)
template <>
struct Packing<true> : MicroTileProducts<Packing<true>> {
  static std::int64_t words(std::int64_t depth) { return (depth + 1) / 2; }
  static std::int64_t a_floats(std::int64_t rows, std::int64_t depth) { return round_to(rows, kAttnMR) * depth; }
  static std::int64_t b_floats(std::int64_t cols, std::int64_t depth) { return round_to(cols, kNR) * depth; }
  static const float* b_column(const float* Bp, std::int64_t j0, std::int64_t depth) { return Bp + j0 * words(depth); }
  static const float* b_depth(const float* Bp, std::int64_t k0) { return Bp + words(k0) * kNR; }
  static void begin() {}
  static void end() {}
  static std::uint32_t* as_words(float* p) { return reinterpret_cast<std::uint32_t*>(p); }
  static const std::uint32_t* as_words(const float* p) { return reinterpret_cast<const std::uint32_t*>(p); }
  // From float32 or from bf16 (q, k, v kept so): the same words.
  template <bool kRowA, class TA>
  static void pack_a(float* d, const TA* A, std::int64_t lda, std::int64_t i0, std::int64_t m, std::int64_t k0,
                     std::int64_t kn) {
    bf16::pack_a<kRowA, kAttnMR>(as_words(d), A, lda, i0, m, k0, kn);
  }
  template <bool kRowB, class TB>
  static void pack_b(float* d, const TB* B, std::int64_t ldb, std::int64_t k0, std::int64_t kn, std::int64_t j0,
                     std::int64_t n) {
    bf16::pack_b<kRowB>(as_words(d), B, ldb, k0, kn, j0, n);
  }
  template <int MR>
  static void tile(std::int64_t kn, const float* Ap, const float* Bp, float* C, std::int64_t ldc, float alpha,
                   bool add, int mv, int nv) {
    if (mv == MR && nv == kNR)
      bf16::micro_kernel<true, MR>(words(kn), as_words(Ap), as_words(Bp), C, ldc, alpha, add, mv, nv);
    else
      bf16::partial_tile<MR>(words(kn), as_words(Ap), as_words(Bp), C, ldc, alpha, add, mv, nv);
  }
};
#endif

// One head's scratch, carved from one 64-byte-aligned buffer: every region
// starts on a 16-float boundary (the packed B operands are read with aligned
// loads). The size the caller allocates and the offsets the kernels use come
// from the same walk, so they cannot disagree.
struct ScratchCarver {
  float* base;
  std::int64_t used = 0;
  float* take(std::int64_t n) {
    float* r = base ? base + used : nullptr;
    used += round16(n);
    return r;
  }
};
}  // namespace detail

namespace detail {
// The forward's scratch regions for one head on engine E (scratch == nullptr: sizes only).
template <class E>
struct ForwardScratch {
  float *Kc, *Vr, *Qa, *S, *Pa, *O, *m, *l;
  std::int64_t floats;
  ForwardScratch(float* scratch, std::int64_t seq, std::int64_t dk) {
    ScratchCarver c{scratch};
    Kc = c.take(E::b_floats(seq, dk));        // Kᵀ as B of S = Q Kᵀ
    Vr = c.take(E::b_floats(dk, seq));        // V as B of O += P V: depth seq
    Qa = c.take(E::a_floats(kBlock, dk));     // the query block as A of S
    S = c.take(kBlock * kBlock);              // scores, then probabilities (nq × kBlock)
    Pa = c.take(E::a_floats(kBlock, kBlock)); // P as A of O += P V
    O = c.take(kBlock * dk);    // unnormalized output (nq × dk)
    m = c.take(kBlock);         // running row maxima
    l = c.take(kBlock);         // running row sums
    floats = c.used;
  }
};
}  // namespace detail

// Floats of scratch one head needs on engine E (64-byte aligned base).
template <class E = detail::Packing<false>>
std::int64_t attention_forward_scratch(std::int64_t seq, std::int64_t dk) {
  return detail::ForwardScratch<E>(nullptr, seq, dk).floats;
}

// y, lse of one head: q, k, v, y point at the head's first row (row stride C);
// lse at the head's T entries. window > 0: query t sees keys t−W+1 … t only;
// the scores left of a row's window are zeroed like those right of the
// diagonal, so the block products keep their shapes and add exact zeros.
// E: the engine of the block products (detail::Packing<false>: float32;
// Packing<true>: AVX-512 BF16; amx::AttentionTiles: the tile unit). On a bf16
// engine q, k and v may be kept in bf16 (TQ), read only as packed.
template <class E = detail::Packing<false>, class TQ = float>
void attention_head_forward(float* y, float* lse, const TQ* q, const TQ* k, const TQ* v, std::int64_t seq,
                            std::int64_t C, std::int64_t dk, float scale, float* scratch, std::int64_t window = 0) {
  using detail::Row;
  constexpr std::int64_t Bk = kBlock;
  const detail::ForwardScratch<E> w(scratch, seq, dk);
  float *Kc = w.Kc, *Vr = w.Vr, *Qa = w.Qa, *S = w.S, *Pa = w.Pa, *O = w.O, *m = w.m, *l = w.l;
  E::begin();
  E::template pack_b<false>(Kc, k, C, 0, dk, 0, seq);
  E::template pack_b<true>(Vr, v, C, 0, seq, 0, dk);
  for (std::int64_t i0 = 0; i0 < seq; i0 += Bk) {
    const std::int64_t nq = std::min(Bk, seq - i0);
    E::template pack_a<true>(Qa, q, C, i0, nq, 0, dk);
    std::fill_n(O, nq * dk, 0.0f);
    std::fill_n(m, nq, -std::numeric_limits<float>::infinity());
    std::fill_n(l, nq, 0.0f);
    for (std::int64_t j0 = window_first_block(i0, window, Bk); j0 < i0 + nq; j0 += Bk) {
      const std::int64_t nk = std::min({Bk, seq - j0, i0 + nq - j0});
      const bool diagonal = j0 == i0;
      E::score_product(nq, nk, dk, Qa, E::b_column(Kc, j0, dk), dk, S, Bk, scale, diagonal);
      // The online softmax exactly as the generic path writes it (Eigen's vectorized exp).
      for (std::int64_t r = 0; r < nq; ++r) {
        const std::int64_t ncol = std::min(nk, i0 + r - j0 + 1);  // keys ≤ this query (≥ 1: j0 ≤ i0)
        const std::int64_t lo = std::max<std::int64_t>(0, window_first_key(i0 + r, window) - j0);
        if (lo >= ncol) {  // the whole block lies before this query's window
          std::fill_n(S + r * Bk, nk, 0.0f);
          continue;
        }
        std::fill_n(S + r * Bk, lo, 0.0f);
        Row row(S + r * Bk + lo, ncol - lo);
        const float mx = std::max(m[r], row.maxCoeff());
        // exp(m − mx), without a libm call where its value is known: 0 on the
        // first block (m = −∞), 1 when the maximum stayed (a scalar expf per row
        // and block was ~7% of the forward at T = 256).
        const float corr = m[r] == mx ? 1.0f : m[r] == -std::numeric_limits<float>::infinity() ? 0.0f
                                                                                              : std::exp(m[r] - mx);
        row = (row - mx).exp();
        std::fill(S + r * Bk + ncol, S + r * Bk + nk, 0.0f);
        l[r] = l[r] * corr + row.sum();
        if (corr != 1.0f) Row(O + r * dk, dk) *= corr;
        m[r] = mx;
      }
      E::template pack_a<true>(Pa, S, Bk, 0, nq, 0, nk);
      E::lower_product(nq, dk, nk, Pa, E::b_depth(Vr, j0), seq, O, dk, true, diagonal);
    }
    for (std::int64_t r = 0; r < nq; ++r) {
      const float inv = 1.0f / l[r];
      float* yr = y + (i0 + r) * C;
      for (std::int64_t c = 0; c < dk; ++c) yr[c] = O[r * dk + c] * inv;
      lse[i0 + r] = m[r] + std::log(l[r]);
    }
  }
  E::end();
}

namespace detail {
// The backward's scratch regions for one head on engine E (scratch == nullptr: sizes only).
template <class E>
struct BackwardScratch {
  float *Kc, *Vc, *Kr, *Qa, *Ya, *Qr, *Yr, *P, *dS, *Pt, *dSa, *dSt;
  std::int64_t floats;
  BackwardScratch(float* scratch, std::int64_t seq, std::int64_t dk) {
    ScratchCarver c{scratch};
    Kc = c.take(E::b_floats(seq, dk));         // Kᵀ as B of S = Q Kᵀ
    Vc = c.take(E::b_floats(seq, dk));         // Vᵀ as B of dY Vᵀ
    Kr = c.take(E::b_floats(dk, seq));         // K as B of dq += dS K: depth seq
    Qa = c.take(E::a_floats(kBlock, dk));      // the query block as A of S
    Ya = c.take(E::a_floats(kBlock, dk));      // dY block as A of dY Vᵀ
    Qr = c.take(E::b_floats(dk, kBlock));      // the query block as B of dk += dSᵀ Q: depth nq
    Yr = c.take(E::b_floats(dk, kBlock));      // dY block as B of dv += Pᵀ dY
    P = c.take(kBlock * kBlock);               // probabilities (nq × kBlock)
    dS = c.take(kBlock * kBlock);              // dY Vᵀ, then dS (nq × kBlock)
    Pt = c.take(E::a_floats(kBlock, kBlock));  // Pᵀ as A
    dSa = c.take(E::a_floats(kBlock, kBlock)); // dS as A
    dSt = c.take(E::a_floats(kBlock, kBlock)); // dSᵀ as A
    floats = c.used;
  }
};
}  // namespace detail

template <class E = detail::Packing<false>>
std::int64_t attention_backward_scratch(std::int64_t seq, std::int64_t dk) {
  return detail::BackwardScratch<E>(nullptr, seq, dk).floats;
}

// dq, dk, dv of one head, written into rows of stride C; D: the head's
// rowsum(dY ⊙ Y), T entries. With P recomputed from lse:
// dS = scale·P ⊙ (dY Vᵀ − D); dq += dS K; dk += dSᵀ Q; dv += Pᵀ dY.
// window and E as in the forward.
template <class E = detail::Packing<false>, class TQ = float>
void attention_head_backward(float* dq, float* dk_, float* dv, const float* dy, const float* D, const float* lse,
                             const TQ* q, const TQ* k, const TQ* v, std::int64_t seq, std::int64_t C,
                             std::int64_t dk, float scale, float* scratch, std::int64_t window = 0) {
  using detail::Row;
  constexpr std::int64_t Bk = kBlock;
  const detail::BackwardScratch<E> w(scratch, seq, dk);
  float *Kc = w.Kc, *Vc = w.Vc, *Kr = w.Kr, *Qa = w.Qa, *Ya = w.Ya, *Qr = w.Qr, *Yr = w.Yr, *P = w.P, *dS = w.dS,
        *Pt = w.Pt, *dSa = w.dSa, *dSt = w.dSt;
  E::begin();
  E::template pack_b<false>(Kc, k, C, 0, dk, 0, seq);
  E::template pack_b<false>(Vc, v, C, 0, dk, 0, seq);
  E::template pack_b<true>(Kr, k, C, 0, seq, 0, dk);
  for (std::int64_t i0 = 0; i0 < seq; i0 += Bk) {
    const std::int64_t nq = std::min(Bk, seq - i0);
    E::template pack_a<true>(Qa, q, C, i0, nq, 0, dk);
    E::template pack_a<true>(Ya, dy, C, i0, nq, 0, dk);
    E::template pack_b<true>(Qr, q, C, i0, nq, 0, dk);
    E::template pack_b<true>(Yr, dy, C, i0, nq, 0, dk);
    const std::int64_t j_first = window_first_block(i0, window, Bk);
    for (std::int64_t j0 = j_first; j0 < i0 + nq; j0 += Bk) {
      const std::int64_t nk = std::min({Bk, seq - j0, i0 + nq - j0});
      const bool diagonal = j0 == i0;
      E::score_product(nq, nk, dk, Qa, E::b_column(Kc, j0, dk), dk, P, Bk, scale, diagonal);
      E::score_product(nq, nk, dk, Ya, E::b_column(Vc, j0, dk), dk, dS, Bk, 1.0f, diagonal);
      for (std::int64_t r = 0; r < nq; ++r) {
        const std::int64_t ncol = std::min(nk, i0 + r - j0 + 1);
        const std::int64_t lo = std::min(ncol, std::max<std::int64_t>(0, window_first_key(i0 + r, window) - j0));
        std::fill_n(P + r * Bk, lo, 0.0f);
        std::fill_n(dS + r * Bk, lo, 0.0f);
        Row p(P + r * Bk + lo, ncol - lo), ds(dS + r * Bk + lo, ncol - lo);
        p = (p - lse[i0 + r]).exp();
        ds = scale * p * (ds - D[i0 + r]);
        std::fill(P + r * Bk + ncol, P + r * Bk + nk, 0.0f);
        std::fill(dS + r * Bk + ncol, dS + r * Bk + nk, 0.0f);
      }
      E::template pack_a<false>(Pt, P, Bk, 0, nk, 0, nq);
      E::template pack_a<true>(dSa, dS, Bk, 0, nq, 0, nk);
      E::template pack_a<false>(dSt, dS, Bk, 0, nk, 0, nq);
      // Each output row block is written by its first product and added to by the
      // rest: dq's block i0 first meets key block j_first (0 without a window),
      // and key block j0 first meets query block j0 (its diagonal: every query
      // block visits its own), so nothing is zeroed beforehand.
      const bool add_dkv = !diagonal, add_dq = j0 > j_first;
      E::upper_product(nk, dk, nq, Pt, Yr, nq, dv + j0 * C, C, add_dkv, diagonal);
      E::lower_product(nq, dk, nk, dSa, E::b_depth(Kr, j0), seq, dq + i0 * C, C, add_dq, diagonal);
      E::upper_product(nk, dk, nq, dSt, Qr, nq, dk_ + j0 * C, C, add_dkv, diagonal);
    }
  }
  E::end();
}

}  // namespace normlab::cpu::avx512
#endif  // NORMLAB_HAVE_SGEMM_AVX512
