#pragma once
// The bf16 engine behind cpu::gemm's float32 products when the precision is
// bf16: operands rounded to bf16 (round to nearest, ties to even) once, while
// they are packed, and multiplied with AVX-512 BF16's vdpbf16ps into float32
// accumulators; C stays float32. The products of two bf16 values are exact in
// float32, so the only errors beyond float32 accumulation are the operands'
// roundings (relative 2^-8 each: 8 significant bits) and subnormal operands,
// which the BF16 instructions read as zero.
//
// The same blocking and micro-tile as the float32 engine (sgemm_avx512.hpp:
// K-slabs of kKC, A's rows in 14-row panels, B's columns in 32-column panels,
// a 14 × 32 tile in 28 zmm accumulators), with K taken in pairs: vdpbf16ps
// multiplies 16 lanes of bf16 pairs (k, k+1) and adds both products to one
// float32 lane, so a packed panel holds, per pair of k, 32-bit words whose low
// half is row/column k's bf16 and high half k+1's (zero past K). Per pair of k
// the kernel loads two vectors of B, broadcasts 14 words of A and issues 28
// vdpbf16ps: twice the multiply-adds of the float32 kernel's FMAs per
// instruction.
//
// Compiled wherever the float32 AVX-512 engine is, with the BF16 instructions
// enabled per function (target attribute), and run only where the CPU has
// them (cpu_has_avx512_bf16, checked at run time): a build for any AVX-512
// machine runs on one without BF16 and keeps the float32 engine there.
// Like the float32 engine, the result depends only on the shape and the
// operands (fixed blocking, K-slabs in order), never on the thread count.
#include "normlab/backend/cpu/sgemm_avx512.hpp"

#if defined(NORMLAB_HAVE_SGEMM_AVX512)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "normlab/core/precision.hpp"

#define NORMLAB_HAVE_BF16GEMM_AVX512 1
#define NORMLAB_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace normlab::cpu::avx512 {

// Whether this CPU executes AVX-512 BF16 (vdpbf16ps, vcvtne2ps2bf16).
inline bool cpu_has_avx512_bf16() {
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
}

namespace bf16 {

// 32 floats (lo: k..k+15 of one row, hi: k+16..k+31) → 16 words of bf16 pairs
// in memory order: word j holds elements 2j (low half) and 2j+1 (high half).
NORMLAB_BF16_TARGET inline __m512i pairs_along(__m512 lo, __m512 hi) {
  return _mm512_castps_si512(reinterpret_cast<__m512>(_mm512_cvtne2ps_pbh(hi, lo)));
}

// Two rows (lo: element k of 16 columns, hi: element k+1 of the same columns)
// → 16 words, word j = (lo[j], hi[j]): the pair of column j.
NORMLAB_BF16_TARGET inline __m512i pairs_across(__m512 lo, __m512 hi) {
  const __m512i both = pairs_along(lo, hi);  // lo's 16 bf16, then hi's 16
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7,
                                              22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(interleave, both);
}

// The first n (clamped to 0..32) of 32 halfword lanes.
inline __mmask32 bf16_lanes(int n) {
  return n >= 32 ? __mmask32(0xffffffffu) : n <= 0 ? __mmask32(0) : __mmask32((1u << n) - 1u);
}

// dst[i] = src[i] rounded to bf16 with the packing's instruction
// (vcvtneps2bf16: nearest even; subnormals read as zero), so a value stored
// this way packs to the bits its float32 original would.
NORMLAB_BF16_TARGET inline void round_to_bf16(bfloat16* dst, const float* src, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    _mm512_storeu_si512(dst + i, pairs_along(_mm512_loadu_ps(src + i), _mm512_loadu_ps(src + i + 16)));
  if (i < n) {
    const int r = int(n - i);
    const __m512i w = pairs_along(_mm512_maskz_loadu_ps(detail::low_lanes(r), src + i),
                                  _mm512_maskz_loadu_ps(detail::low_lanes(r - 16), src + i + 16));
    _mm512_mask_storeu_epi16(dst + i, bf16_lanes(r), w);
  }
}

// x[i] = x[i] rounded to bf16 as round_to_bf16 rounds it, widened back.
NORMLAB_BF16_TARGET inline void round_in_place(float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; i += 32) {
    const int r = int(std::min<std::int64_t>(32, n - i));
    const __mmask16 lo = detail::low_lanes(r), hi = detail::low_lanes(r - 16);
    const __m512i w = pairs_along(_mm512_maskz_loadu_ps(lo, x + i), _mm512_maskz_loadu_ps(hi, x + i + 16));
    const __m512i a = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(w)), 16);
    const __m512i b = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(w, 1)), 16);
    _mm512_mask_storeu_ps(x + i, lo, _mm512_castsi512_ps(a));
    _mm512_mask_storeu_ps(x + i + 16, hi, _mm512_castsi512_ps(b));
  }
}

// C tile (mv ≤ MR rows × nv ≤ 32 columns) = alpha · Ap·Bp (+ C when add), with
// Ap: kp × MR words (Ap[p·MR + r]) and Bp: kp × 32 words (64-byte aligned),
// kp the slab's pairs of k.
// Only the first Rows rows of the panel are computed (Rows ≤ MR, the panel's
// stride MR), as in the float32 engine's kernel.
template <bool kFull, int MR = kMR, int Rows = MR>
NORMLAB_BF16_TARGET inline void micro_kernel(std::int64_t kp, const std::uint32_t* __restrict Ap,
                                             const std::uint32_t* __restrict Bp, float* C, std::int64_t ldc,
                                             float alpha, bool add, int mv, int nv) {
  static_assert(Rows <= MR && (!kFull || Rows == MR));
  __m512 c0[Rows], c1[Rows];
#pragma GCC unroll 14
  for (int r = 0; r < Rows; ++r) c0[r] = c1[r] = _mm512_setzero_ps();
  if (add)
    for (int r = 0; r < mv; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(C + r * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(C + r * ldc + kNR - 1), _MM_HINT_T0);
    }
  for (std::int64_t p = 0; p < kp; ++p) {
    const __m512bh b0 = reinterpret_cast<__m512bh>(_mm512_load_si512(Bp));
    const __m512bh b1 = reinterpret_cast<__m512bh>(_mm512_load_si512(Bp + 16));
    _mm_prefetch(reinterpret_cast<const char*>(Bp + 8 * kNR), _MM_HINT_T0);
#pragma GCC unroll 14
    for (int r = 0; r < Rows; ++r) {
      // The panel's words live in float scratch: read through a may-alias load.
      const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi32(_mm_cvtsi128_si32(_mm_loadu_si32(Ap + r))));
      c0[r] = _mm512_dpbf16_ps(c0[r], a, b0);
      c1[r] = _mm512_dpbf16_ps(c1[r], a, b1);
    }
    Ap += MR;
    Bp += kNR;
  }
  const __m512 va = _mm512_set1_ps(alpha);
  if constexpr (kFull) {
#pragma GCC unroll 14
    for (int r = 0; r < MR; ++r) {
      float* c = C + r * ldc;
      __m512 x0 = _mm512_mul_ps(va, c0[r]), x1 = _mm512_mul_ps(va, c1[r]);
      if (add) {
        x0 = _mm512_add_ps(_mm512_loadu_ps(c), x0);
        x1 = _mm512_add_ps(_mm512_loadu_ps(c + 16), x1);
      }
      _mm512_storeu_ps(c, x0);
      _mm512_storeu_ps(c + 16, x1);
    }
  } else {
    const __mmask16 m0 = detail::low_lanes(nv), m1 = detail::low_lanes(nv - 16);
    for (int r = 0; r < Rows && r < mv; ++r) {
      float* c = C + r * ldc;
      __m512 x0 = _mm512_mul_ps(va, c0[r]), x1 = _mm512_mul_ps(va, c1[r]);
      if (add) {
        x0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, c), x0);
        x1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, c + 16), x1);
      }
      _mm512_mask_storeu_ps(c, m0, x0);
      _mm512_mask_storeu_ps(c + 16, m1, x1);
    }
  }
}

// vpermt2w's word indices that interleave two rows of 32 bf16 (the second
// source's words are 32..63) into 16 pair words each: columns 0..15, 16..31.
struct InterleaveIndex {
  alignas(64) std::uint16_t w[2][32];
  constexpr InterleaveIndex() : w{} {
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 32; ++i) w[h][i] = std::uint16_t(16 * h + i / 2 + (i % 2 ? 32 : 0));
  }
};
inline constexpr InterleaveIndex kInterleaveRows{};

// Pair words from either kind of source: a float32 operand, rounded here, or
// one kept in bf16 (rounded by round_to_bf16 with the same instruction), so a
// panel holds the same bits either way and each packing is one loop.
//   pair_words(lo, hi, valid): rows k and k+1 of 16 columns (masked; hi null
//     past the slab) as 16 words, k's halfword low, k+1's high;
//   run_pairs(s, left): 32 consecutive values along K (zero from `left` on) as
//     their 16 pair words.
NORMLAB_BF16_TARGET inline __m512i pair_words(const float* lo, const float* hi, __mmask16 valid) {
  return pairs_across(_mm512_maskz_loadu_ps(valid, lo), hi ? _mm512_maskz_loadu_ps(valid, hi) : _mm512_setzero_ps());
}
NORMLAB_BF16_TARGET inline __m512i pair_words(const bfloat16* lo, const bfloat16* hi, __mmask16 valid) {
  const __m512i l = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(valid, lo));
  const __m512i h = hi ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(valid, hi)) : _mm512_setzero_si512();
  return _mm512_or_si512(l, _mm512_slli_epi32(h, 16));
}
NORMLAB_BF16_TARGET inline __m512i run_pairs(const float* s, std::int64_t left) {
  return pairs_along(_mm512_maskz_loadu_ps(detail::low_lanes(int(std::min<std::int64_t>(left, 32))), s),
                     _mm512_maskz_loadu_ps(detail::low_lanes(int(std::min<std::int64_t>(left, 32)) - 16), s + 16));
}
NORMLAB_BF16_TARGET inline __m512i run_pairs(const bfloat16* s, std::int64_t left) {
  return _mm512_maskz_loadu_epi16(bf16_lanes(int(std::min<std::int64_t>(left, 32))), s);
}

// A's rows [i0, i0+m) × K-slab [k0, k0+kn) → panels of MR rows of bf16 pairs,
// pair-major (panel of row p at dst + p·kp, kp = ⌈kn/2⌉), zero past m and kn.
// A(i,k) = kRowA ? A[i·lda + k] : A[k·lda + i]; A float32 or kept in bf16 (TA).
template <bool kRowA, int MR = kMR, class TA>
NORMLAB_BF16_TARGET inline void pack_a(std::uint32_t* dst, const TA* A, std::int64_t lda, std::int64_t i0,
                                       std::int64_t m, std::int64_t k0, std::int64_t kn) {
  const std::int64_t kp = (kn + 1) / 2;
  const __mmask16 panel = detail::low_lanes(MR);
  if constexpr (kRowA) {
    // Stored along K: 32 values of a row are 16 pairs; 16 rows' pairs are a
    // 16 × 16 block of words, transposed in registers.
    for (std::int64_t p = 0; p < m; p += MR) {
      const int mv = int(std::min<std::int64_t>(MR, m - p));
      const TA* s = A + (i0 + p) * lda + k0;
      std::uint32_t* d = dst + p * kp;
      for (std::int64_t k = 0; k < kn; k += 32) {
        __m512 r[16];
        for (int i = 0; i < 16; ++i)
          r[i] = i < mv ? _mm512_castsi512_ps(run_pairs(s + i * lda + k, kn - k)) : _mm512_setzero_ps();
        detail::transpose16(r);
        const int pairs = int(std::min<std::int64_t>(16, kp - k / 2));
        for (int j = 0; j < pairs; ++j)
          _mm512_mask_storeu_epi32(d + (k / 2 + j) * MR, panel, _mm512_castps_si512(r[j]));
      }
    }
  } else {
    // Stored along M: rows k and k+1 of the slab interleaved into one panel
    // word per row of A; eight pairs at a time into every panel (as the float32
    // packing does, for the same locality reason).
    constexpr std::int64_t kPairs = 8;
    for (std::int64_t qb = 0; qb < kp; qb += kPairs) {
      const std::int64_t qe = std::min(kp, qb + kPairs);
      for (std::int64_t p = 0; p < m; p += MR) {
        const __mmask16 rows = detail::low_lanes(int(std::min<std::int64_t>(MR, m - p)));
        const TA* s = A + k0 * lda + i0 + p;
        std::uint32_t* d = dst + p * kp;
        for (std::int64_t q = qb; q < qe; ++q)
          _mm512_mask_storeu_epi32(d + q * MR, panel,
                                   pair_words(s + 2 * q * lda, 2 * q + 1 < kn ? s + (2 * q + 1) * lda : nullptr, rows));
      }
    }
  }
}

// B's K-slab [k0, k0+kn) × columns [j0, j0+n) → panels of 32 columns of bf16
// pairs, pair-major (panel of column q at dst + q·kp), zero past n and kn.
// B(k,j) = kRowB ? B[k·ldb + j] : B[j·ldb + k]; B float32 or kept in bf16 (TB).
template <bool kRowB, class TB>
NORMLAB_BF16_TARGET inline void pack_b(std::uint32_t* dst, const TB* B, std::int64_t ldb, std::int64_t k0,
                                       std::int64_t kn, std::int64_t j0, std::int64_t n) {
  const std::int64_t kp = (kn + 1) / 2;
  if constexpr (kRowB) {
    // Stored along N: rows k and k+1 read once, contiguously, into every panel.
    // From bf16, a whole panel's two rows interleave with one two-source word
    // permute per 16 pairs (halfword 2i from row k, 2i+1 from row k+1: the
    // words pair_words makes), instead of widening and shifting each half.
    [[maybe_unused]] __m512i first_half, second_half;
    if constexpr (std::is_same_v<TB, bfloat16>) {
      first_half = _mm512_load_si512(kInterleaveRows.w[0]);
      second_half = _mm512_load_si512(kInterleaveRows.w[1]);
    }
    for (std::int64_t q = 0; q < kp; ++q) {
      const TB* s0 = B + (k0 + 2 * q) * ldb + j0;
      const TB* s1 = 2 * q + 1 < kn ? s0 + ldb : nullptr;
      for (std::int64_t c = 0; c < n; c += kNR) {
        const int nv = int(std::min<std::int64_t>(kNR, n - c));
        std::uint32_t* d = dst + c * kp + q * kNR;
        if constexpr (std::is_same_v<TB, bfloat16>) {
          if (nv == kNR && s1) {
            const __m512i lo = _mm512_loadu_si512(s0 + c), hi = _mm512_loadu_si512(s1 + c);
            _mm512_store_si512(d, _mm512_permutex2var_epi16(lo, first_half, hi));
            _mm512_store_si512(d + 16, _mm512_permutex2var_epi16(lo, second_half, hi));
            continue;
          }
        }
        for (int h = 0; h < 2; ++h)
          _mm512_store_si512(d + 16 * h, pair_words(s0 + c + 16 * h, s1 ? s1 + c + 16 * h : nullptr,
                                                    detail::low_lanes(nv - 16 * h)));
      }
    }
  } else {
    // Stored along K: a column's 32 values are 16 pairs; 16 columns' pairs are
    // a 16 × 16 block of words, transposed in registers.
    for (std::int64_t c = 0; c < n; c += kNR) {
      const int nv = int(std::min<std::int64_t>(kNR, n - c));
      const TB* s = B + (j0 + c) * ldb + k0;
      std::uint32_t* d = dst + c * kp;
      for (int h = 0; h < 2; ++h) {
        for (std::int64_t k = 0; k < kn; k += 32) {
          __m512 r[16];
          for (int i = 0; i < 16; ++i)
            r[i] = 16 * h + i < nv ? _mm512_castsi512_ps(run_pairs(s + (16 * h + i) * ldb + k, kn - k))
                                   : _mm512_setzero_ps();
          detail::transpose16(r);
          const int pairs = int(std::min<std::int64_t>(16, kp - k / 2));
          for (int j = 0; j < pairs; ++j) _mm512_store_si512(d + (k / 2 + j) * kNR + 16 * h, _mm512_castps_si512(r[j]));
        }
      }
    }
  }
}

// A partial tile computes the rows it keeps, rounded up to an even count (as
// the float32 engine's partial_tile).
template <int MR, int Rows = 2>
NORMLAB_BF16_TARGET inline void partial_tile(std::int64_t kp, const std::uint32_t* Ap, const std::uint32_t* Bp,
                                             float* C, std::int64_t ldc, float alpha, bool add, int mv, int nv) {
  if constexpr (Rows >= MR)
    micro_kernel<false, MR>(kp, Ap, Bp, C, ldc, alpha, add, mv, nv);
  else if (mv <= Rows)
    micro_kernel<false, MR, Rows>(kp, Ap, Bp, C, ldc, alpha, add, mv, nv);
  else
    partial_tile<MR, Rows + 2>(kp, Ap, Bp, C, ldc, alpha, add, mv, nv);
}

template <int MR>
NORMLAB_BF16_TARGET inline void tile_product(std::int64_t nm, std::int64_t nn, std::int64_t kp, const std::uint32_t* Ap,
                                             const std::uint32_t* Bp, float* C, std::int64_t ldc, float alpha,
                                             bool add) {
  for (std::int64_t p = 0; p < nm; p += MR) {
    const int mv = int(std::min<std::int64_t>(MR, nm - p));
    for (std::int64_t q = 0; q < nn; q += kNR) {
      const int nv = int(std::min<std::int64_t>(kNR, nn - q));
      if (mv == MR && nv == kNR)
        micro_kernel<true, MR>(kp, Ap + p * kp, Bp + q * kp, C + p * ldc + q, ldc, alpha, add, mv, nv);
      else
        partial_tile<MR>(kp, Ap + p * kp, Bp + q * kp, C + p * ldc + q, ldc, alpha, add, mv, nv);
    }
  }
}

// A K-slab's pairs of k: a packed panel's stride.
inline std::int64_t slab_pairs(std::int64_t kn) { return (kn + 1) / 2; }

// One piece of a product whose shared operand the team packed (gemm.hpp:
// avx512_bf16_shared_gemm): C's rows [i0, i0+m) over op(B)'s K-slab [k0, k0+kn)
// packed whole (pack_b over its N columns, column c at packedB + c·kp), A's rows
// packed here per kMC block into `pack` (kPackFloats floats). gemm's arithmetic
// on the same kernel, tile for tile: the same bits.
template <bool kRowA, class TA>
NORMLAB_BF16_TARGET void gemm_slab_rows(std::int64_t i0, std::int64_t m, std::int64_t N, std::int64_t k0,
                                        std::int64_t kn, const TA* A, std::int64_t lda, const std::uint32_t* packedB,
                                        float* C, std::int64_t ldc, bool add, float alpha, float* pack) {
  auto* packA = reinterpret_cast<std::uint32_t*>(pack + kPackBFloats);
  const std::int64_t kp = slab_pairs(kn);
  for (std::int64_t i = i0; i < i0 + m; i += kMC) {
    const std::int64_t mm = std::min(kMC, i0 + m - i);
    pack_a<kRowA>(packA, A, lda, i, mm, k0, kn);
    for (std::int64_t j0 = 0; j0 < N; j0 += kNC)
      tile_product<kMR>(mm, std::min(kNC, N - j0), kp, packA, packedB + j0 * kp, C + i * ldc + j0, ldc, alpha, add);
  }
}
// The same for C's columns [j0, j0+n), with op(A)'s slab packed whole (pack_a
// over its M rows, row r at packedA + r·kp).
template <bool kRowB, class TB>
NORMLAB_BF16_TARGET void gemm_slab_columns(std::int64_t j0, std::int64_t n, std::int64_t M, std::int64_t k0,
                                           std::int64_t kn, const std::uint32_t* packedA, const TB* B,
                                           std::int64_t ldb, float* C, std::int64_t ldc, bool add, float alpha,
                                           float* pack) {
  auto* packB = reinterpret_cast<std::uint32_t*>(pack);
  const std::int64_t kp = slab_pairs(kn);
  for (std::int64_t j = j0; j < j0 + n; j += kNC) {
    const std::int64_t nn = std::min(kNC, j0 + n - j);
    pack_b<kRowB>(packB, B, ldb, k0, kn, j, nn);
    for (std::int64_t i = 0; i < M; i += kMC)
      tile_product<kMR>(std::min(kMC, M - i), nn, kp, packedA + i * kp, packB, C + i * ldc + j, ldc, alpha, add);
  }
}

// C(M,N) (row-major, ldc) = alpha · op(A)·op(B) with both operands rounded to
// bf16, plus C when `add`; on the calling thread; the operands' conventions as
// avx512::sgemm's. `pack`: kPackFloats floats of 64-byte aligned scratch (the
// float32 engine's: bf16 pairs take the same bytes per pair of k as one float
// per k takes in half of it). M, N, K > 0; only where cpu_has_avx512_bf16().
// Either operand may be stored in bf16 already (TA, TB = bfloat16, where a
// pack_a/pack_b exists for its layout): the same panels, so the same bits.
template <bool kRowA, bool kRowB, class TA = float, class TB = float>
NORMLAB_BF16_TARGET void gemm(std::int64_t M, std::int64_t N, std::int64_t K, const TA* A, std::int64_t lda,
                              const TB* B, std::int64_t ldb, float* C, std::int64_t ldc, bool add, float alpha,
                              float* pack) {
  auto* packB = reinterpret_cast<std::uint32_t*>(pack);
  auto* packA = reinterpret_cast<std::uint32_t*>(pack + kPackBFloats);
  const bool one_b_block = N <= kNC;
  for (std::int64_t k0 = 0; k0 < K; k0 += kKC) {
    const std::int64_t kn = std::min(kKC, K - k0), kp = (kn + 1) / 2;
    const bool add_slab = add || k0 > 0;
    if (one_b_block) pack_b<kRowB>(packB, B, ldb, k0, kn, 0, N);
    for (std::int64_t i0 = 0; i0 < M; i0 += kMC) {
      const std::int64_t mm = std::min(kMC, M - i0);
      pack_a<kRowA>(packA, A, lda, i0, mm, k0, kn);
      for (std::int64_t j0 = 0; j0 < N; j0 += kNC) {
        const std::int64_t nn = std::min(kNC, N - j0);
        if (!one_b_block) pack_b<kRowB>(packB, B, ldb, k0, kn, j0, nn);
        tile_product<kMR>(mm, nn, kp, packA, packB, C + i0 * ldc + j0, ldc, alpha, add_slab);
      }
    }
  }
}

}  // namespace bf16
}  // namespace normlab::cpu::avx512
#endif  // NORMLAB_HAVE_SGEMM_AVX512
