#pragma once
// normlab's own float32 GEMM for AVX-512: the fastest engine behind cpu::gemm,
// chosen by measurement (docs/perf.md).
//
// One serial product C(M,N) = alpha·op(A)·op(B) (+ C), row-major C, each
// operand read row- or column-major, in the classic blocked form: for each
// K-slab of kKC, A's block of kMC rows is packed into panels of kMR = 14 rows
// (k-major), then for each block of kNC columns B's slab is packed into panels
// of kNR = 32 columns (k-major), and a 14 × 32 micro-kernel keeps its C tile in
// 28 zmm accumulators while it walks the slab (per k: two vector loads of B,
// 14 broadcasts of A, 28 FMAs). On this project's Zen 4 host the micro-kernel
// alone runs at the cores' FMA peak from L1/L2; packing is vectorized (16 × 16
// register transposes for the operands stored along K) so it stays at a few %
// of a product.
//
// Why not a library's: OpenBLAS's Cooperlake SGEMM reaches ~83% of a core's
// FMA peak here, oneDNN's ~95% but it allocates its packing buffers on every
// call (a step must allocate nothing); this one is 3–21% faster than OpenBLAS
// at the step's shapes and within 2–15% of oneDNN (ahead on some), with
// buffers the caller owns (see cpu::gemm).
//
// The result depends only on the shape and the operands: the blocking is a
// constant, every element is summed over the same K-slabs in the same order.
// The caller (cpu::gemm) runs one such product per piece of C on one thread, so
// the bits do not depend on the thread count either.
//
// Only compiled where the build targets AVX-512F; elsewhere cpu::gemm keeps
// OpenBLAS's kernels (or Eigen's). Defining NORMLAB_NO_AVX512_SGEMM keeps them
// on an AVX-512 build too (for an A/B of the two engines, docs/perf.md).
#if defined(__AVX512F__) && !defined(NORMLAB_NO_AVX512_SGEMM)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#define NORMLAB_HAVE_SGEMM_AVX512 1

namespace normlab::cpu::avx512 {

inline constexpr int kMR = 14;               // rows of C per micro-tile: one broadcast each
inline constexpr int kNR = 32;               // columns of C per micro-tile: two zmm
// Blocking, measured on this project's Zen 4 (32 KiB L1d, 1 MiB L2 per core):
// K-slabs of 512 write C once for K ≤ 512 (with slabs of 256 the larger config's
// 2048 × 4096 × 512 product wrote and re-read its 32 MiB C: 182 against 193
// GFLOP/s); blocks of 256 columns keep B's slab at 512 KiB in L2.
inline constexpr std::int64_t kKC = 512;       // K-slab: A's 14 × 512 panel (28 KiB) in L1
inline constexpr std::int64_t kMC = 37 * kMR;  // rows of A packed per slab: a 512-row piece in one block
inline constexpr std::int64_t kNC = 256;       // columns of B packed at a time: 512 × 256 (512 KiB) in L2

// Floats of packing space one product needs: B's block first (64-byte aligned
// stores), then A's.
inline constexpr std::int64_t kPackBFloats = kKC * kNC;
inline constexpr std::int64_t kPackFloats = kPackBFloats + kMC * kKC;

namespace detail {

inline __mmask16 low_lanes(int n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// C tile (mv ≤ MR rows × nv ≤ 32 columns) = alpha · Ap·Bp (+ C when add), with
// Ap: kn × MR (Ap[k·MR + r]) and Bp: kn × 32 (Bp[k·32 + c], 64-byte aligned).
// MR = 14 for the GEMMs; attention's 64-row blocks use MR = 8 (no padded rows).
// Only the first Rows rows of the panel are computed (Rows ≤ MR; the panel's
// stride stays MR): a partial tile runs as few rows as it keeps, rounded up to
// an even count (partial_tile), each row's sums in the same order as in a whole
// tile, so the same bits.
template <bool kFull, int MR = kMR, int Rows = MR>
inline void micro_kernel(std::int64_t kn, const float* __restrict Ap, const float* __restrict Bp, float* C,
                         std::int64_t ldc, float alpha, bool add, int mv, int nv) {
  static_assert(Rows <= MR && (!kFull || Rows == MR));
  __m512 c0[Rows], c1[Rows];
#pragma GCC unroll 14
  for (int r = 0; r < Rows; ++r) c0[r] = c1[r] = _mm512_setzero_ps();
  // The tile's C rows are read after the loop: start fetching them now, or each
  // row's miss would stall the epilogue (measured: −10% at K = 2048).
  if (add)
    for (int r = 0; r < mv; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(C + r * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(C + r * ldc + kNR - 1), _MM_HINT_T0);
    }
  for (std::int64_t k = 0; k < kn; ++k) {
    const __m512 b0 = _mm512_load_ps(Bp), b1 = _mm512_load_ps(Bp + 16);
    _mm_prefetch(reinterpret_cast<const char*>(Bp + 8 * kNR), _MM_HINT_T0);
#pragma GCC unroll 14
    for (int r = 0; r < Rows; ++r) {
      const __m512 a = _mm512_set1_ps(Ap[r]);
      c0[r] = _mm512_fmadd_ps(a, b0, c0[r]);
      c1[r] = _mm512_fmadd_ps(a, b1, c1[r]);
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
    const __mmask16 m0 = low_lanes(nv), m1 = low_lanes(nv - 16);
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

// r[i] holds row i of a 16 × 16 block; afterwards r[j] holds column j.
// Three stages: 32-bit interleave within 128-bit lanes, 64-bit interleave,
// then 128-bit lane shuffles.
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  __m512 u[16];
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
    u[4 * i + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int j = 0; j < 4; ++j) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88), v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xDD);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xDD);
    r[j] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
    r[4 + j] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    r[12 + j] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
  }
}

// A's rows [i0, i0+m) × K-slab [k0, k0+kn) into panels of MR rows, k-major
// (panel of row p at dst + p·kn), zero rows past m.
// A(i,k) = kRowA ? A[i·lda + k] : A[k·lda + i].
template <bool kRowA, int MR = kMR>
inline void pack_a(float* dst, const float* A, std::int64_t lda, std::int64_t i0, std::int64_t m, std::int64_t k0,
                   std::int64_t kn) {
  const __mmask16 panel = low_lanes(MR);
  if constexpr (kRowA) {
    // Stored along K: 16 × 16 blocks transposed in registers.
    for (std::int64_t p = 0; p < m; p += MR) {
      const int mv = int(std::min<std::int64_t>(MR, m - p));
      const float* s = A + (i0 + p) * lda + k0;
      float* d = dst + p * kn;
      std::int64_t k = 0;
      for (; k + 16 <= kn; k += 16) {
        __m512 r[16];
        for (int i = 0; i < 16; ++i) r[i] = i < mv ? _mm512_loadu_ps(s + i * lda + k) : _mm512_setzero_ps();
        transpose16(r);
        for (int j = 0; j < 16; ++j) _mm512_mask_storeu_ps(d + (k + j) * MR, panel, r[j]);
      }
      for (; k < kn; ++k)
        for (int i = 0; i < MR; ++i) d[k * MR + i] = i < mv ? s[i * lda + k] : 0.0f;
    }
  } else {
    // Stored along M: MR contiguous floats per panel and k. Eight rows of A at a
    // time into every panel: a panel at a time walks K with a stride of lda, a
    // row at a time scatters into all 37 panels at once (both ~3× slower, measured).
    constexpr std::int64_t kRows = 8;
    for (std::int64_t kb = 0; kb < kn; kb += kRows) {
      const std::int64_t ke = std::min(kn, kb + kRows);
      for (std::int64_t p = 0; p < m; p += MR) {
        const __mmask16 rows = low_lanes(int(std::min<std::int64_t>(MR, m - p)));
        const float* s = A + k0 * lda + i0 + p;
        float* d = dst + p * kn;
        for (std::int64_t k = kb; k < ke; ++k)
          _mm512_mask_storeu_ps(d + k * MR, panel, _mm512_maskz_loadu_ps(rows, s + k * lda));
      }
    }
  }
}

// B's K-slab [k0, k0+kn) × columns [j0, j0+n) into panels of 32 columns,
// k-major, zero columns past n. B(k,j) = kRowB ? B[k·ldb + j] : B[j·ldb + k].
template <bool kRowB>
inline void pack_b(float* dst, const float* B, std::int64_t ldb, std::int64_t k0, std::int64_t kn, std::int64_t j0,
                   std::int64_t n) {
  if constexpr (kRowB) {
    // Stored along N: each row k of the slab read once, contiguously, into every
    // panel (a panel at a time walks K with a stride of ldb: 2% of a step).
    for (std::int64_t k = 0; k < kn; ++k) {
      const float* s = B + (k0 + k) * ldb + j0;
      for (std::int64_t q = 0; q < n; q += kNR) {
        const int nv = int(std::min<std::int64_t>(kNR, n - q));
        float* d = dst + q * kn + k * kNR;
        _mm512_store_ps(d, _mm512_maskz_loadu_ps(low_lanes(nv), s + q));
        _mm512_store_ps(d + 16, _mm512_maskz_loadu_ps(low_lanes(nv - 16), s + q + 16));
      }
    }
  } else {
    // Stored along K: 16 × 16 blocks transposed in registers.
    for (std::int64_t q = 0; q < n; q += kNR) {
      const int nv = int(std::min<std::int64_t>(kNR, n - q));
      const float* s = B + (j0 + q) * ldb + k0;
      float* d = dst + q * kn;
      for (int h = 0; h < 2; ++h) {
        std::int64_t k = 0;
        for (; k + 16 <= kn; k += 16) {
          __m512 r[16];
          for (int i = 0; i < 16; ++i)
            r[i] = 16 * h + i < nv ? _mm512_loadu_ps(s + (16 * h + i) * ldb + k) : _mm512_setzero_ps();
          transpose16(r);
          for (int j = 0; j < 16; ++j) _mm512_store_ps(d + (k + j) * kNR + 16 * h, r[j]);
        }
        for (; k < kn; ++k)
          for (int i = 0; i < 16; ++i) d[k * kNR + 16 * h + i] = 16 * h + i < nv ? s[(16 * h + i) * ldb + k] : 0.0f;
      }
    }
  }
}

// A partial tile computes the rows it keeps, rounded up to an even count: the
// 4-row tail of a 256-row operand costs 4/14 of a whole tile's multiply-adds,
// not all of them.
template <int MR, int Rows = 2>
inline void partial_tile(std::int64_t kn, const float* Ap, const float* Bp, float* C, std::int64_t ldc, float alpha,
                         bool add, int mv, int nv) {
  if constexpr (Rows >= MR)
    micro_kernel<false, MR>(kn, Ap, Bp, C, ldc, alpha, add, mv, nv);
  else if (mv <= Rows)
    micro_kernel<false, MR, Rows>(kn, Ap, Bp, C, ldc, alpha, add, mv, nv);
  else
    partial_tile<MR, Rows + 2>(kn, Ap, Bp, C, ldc, alpha, add, mv, nv);
}

// One micro-tile (mv ≤ MR rows × nv ≤ 32 columns of it kept) over depth kn: the
// unmasked kernel when the tile is whole.
template <int MR>
inline void tile(std::int64_t kn, const float* Ap, const float* Bp, float* C, std::int64_t ldc, float alpha, bool add,
                 int mv, int nv) {
  if (mv == MR && nv == kNR)
    micro_kernel<true, MR>(kn, Ap, Bp, C, ldc, alpha, add, mv, nv);
  else
    partial_tile<MR>(kn, Ap, Bp, C, ldc, alpha, add, mv, nv);
}

// C(nm × nn, ldc) = alpha·Ap·Bp (+ C when add), tile by tile: Ap packed in
// MR-row panels of depth kn (panel of row p at Ap + p·kn); Bp in 32-column panels,
// the panel of column j at Bp + j·bstride (bstride = kn for a packed slab, or the
// depth of a longer packed operand when Bp points into it, as attention's do).
template <int MR>
inline void tile_product(std::int64_t nm, std::int64_t nn, std::int64_t kn, const float* Ap, const float* Bp,
                         std::int64_t bstride, float* C, std::int64_t ldc, float alpha, bool add) {
  for (std::int64_t p = 0; p < nm; p += MR) {
    const int mv = int(std::min<std::int64_t>(MR, nm - p));
    for (std::int64_t q = 0; q < nn; q += kNR)
      tile<MR>(kn, Ap + p * kn, Bp + q * bstride, C + p * ldc + q, ldc, alpha, add, mv,
               int(std::min<std::int64_t>(kNR, nn - q)));
  }
}

}  // namespace detail

// C(M,N) (row-major, ldc) = alpha · op(A)·op(B), plus C when `add`; on the
// calling thread. op(A)(i,k) = kRowA ? A[i·lda + k] : A[k·lda + i];
// op(B)(k,j) = kRowB ? B[k·ldb + j] : B[j·ldb + k]. `pack`: kPackFloats floats,
// 64-byte aligned, owned by the caller (nothing is allocated here).
// M, N, K > 0.
template <bool kRowA, bool kRowB>
void sgemm(std::int64_t M, std::int64_t N, std::int64_t K, const float* A, std::int64_t lda, const float* B,
           std::int64_t ldb, float* C, std::int64_t ldc, bool add, float alpha, float* pack) {
  float* packB = pack;
  float* packA = pack + kPackBFloats;
  // Every element of C gets its K-slabs in increasing order whatever the loop
  // order around them: A's block is packed once per slab and block of rows
  // (one block for the ≤ 518-row pieces cpu::gemm hands out), B's once per slab
  // when it fits one block of columns, else per block of rows and columns.
  const bool one_b_block = N <= kNC;
  for (std::int64_t k0 = 0; k0 < K; k0 += kKC) {
    const std::int64_t kn = std::min(kKC, K - k0);
    const bool add_slab = add || k0 > 0;
    if (one_b_block) detail::pack_b<kRowB>(packB, B, ldb, k0, kn, 0, N);
    for (std::int64_t i0 = 0; i0 < M; i0 += kMC) {
      const std::int64_t mm = std::min(kMC, M - i0);
      detail::pack_a<kRowA>(packA, A, lda, i0, mm, k0, kn);
      for (std::int64_t j0 = 0; j0 < N; j0 += kNC) {
        const std::int64_t nn = std::min(kNC, N - j0);
        if (!one_b_block) detail::pack_b<kRowB>(packB, B, ldb, k0, kn, j0, nn);
        detail::tile_product<kMR>(mm, nn, kn, packA, packB, kn, C + i0 * ldc + j0, ldc, alpha, add_slab);
      }
    }
  }
}

}  // namespace normlab::cpu::avx512
#endif  // __AVX512F__ && !NORMLAB_NO_AVX512_SGEMM
