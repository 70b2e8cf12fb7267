#pragma once
// The bf16 engine on CPUs with AMX (Intel Xeon since Sapphire Rapids): the same
// contract as avx512::bf16::gemm (operands rounded to bf16 with the same
// instruction, float32 accumulation, C = alpha·acc (+ C) per K-slab), on the
// tile unit's TDPBF16PS instead of vdpbf16ps. On such a Xeon vdpbf16ps issues
// at half the float32 FMA's rate, so the AVX-512 BF16 engine is slower than the
// float32 one; one TDPBF16PS does a 16 × 16 × 32 block of multiply-adds.
//
// Layout: A's block in rows of bf16 pairs (row r, pair p at Ap[r·kp16 + p]),
// B's in 16-column tiles pair-major (pair p, column j at Bp[p·16 + j]), both
// zero-padded to whole tiles (rows and columns to 32, pairs to 16). Each 32 × 32
// block of C is four accumulator tiles over the slab, stored to scratch and then
// written as alpha·acc (+ C), as the AVX-512 kernel writes its registers.
//
// The tile unit sums its pairs in an order and with roundings of its own, so its
// bits differ from the AVX-512 BF16 engine's (relative ~1e-5 where terms cancel);
// within the same float32 accumulation bounds, and, as there, a function of the
// shape and the operands only (fixed blocking, K-slabs in order).
//
// Chosen at run time where the CPU has AMX-BF16 and the kernel grants this
// process the tile state (arch_prctl); NORMLAB_NO_AMX=1 in the environment (or
// amx::enable(false)) keeps the AVX-512 BF16 engine.
#include "normlab/backend/cpu/bf16gemm_avx512.hpp"

#if defined(NORMLAB_HAVE_BF16GEMM_AVX512) && defined(__linux__) && defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <utility>

#define NORMLAB_HAVE_BF16GEMM_AMX 1
#define NORMLAB_AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))

namespace normlab::cpu::amx {

// Whether this CPU has the tile unit with BF16 and the kernel lets this
// process use it (asked once).
inline bool supported() {
  static const bool ok = [] {
    // CPUID leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE (read directly: not every
    // compiler's __builtin_cpu_supports knows the AMX names).
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!avx512::cpu_has_avx512_bf16() || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!(d & (1u << 22)) || !(d & (1u << 24))) return false;
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}
namespace detail {
inline bool enabled = [] {
  const char* off = std::getenv("NORMLAB_NO_AMX");
  return !(off && *off && *off != '0');
}();
}  // namespace detail
// Whether bf16 products run on the tile unit: supported and not turned off
// (NORMLAB_NO_AMX=1, or enable(false): the AVX-512 BF16 engine, for an A/B of
// the two). Set before products run, not while one does.
inline bool available() { return detail::enabled && supported(); }
inline void enable(bool on) { detail::enabled = on; }

inline constexpr std::int64_t kTile = 16;   // rows of a tile, words (pairs) per tile row, columns of B per tile
inline constexpr std::int64_t kBlock = 32;  // C is computed in 32 × 32 blocks: 2 × 2 accumulator tiles
// Blocking, measured on the Intel Xeon host (2 MiB L2 per core; one thread, the larger
// config's products): A's block of 1024 rows and B's of 512 columns pack B once per slab for a
// thread's half of the rows, 10% faster in all than 512 × 256 (K-slabs of 1024 were slower).
inline constexpr std::int64_t kKC = 512;    // K-slab: 256 pairs
inline constexpr std::int64_t kMC = 1024;   // rows of A packed per slab (1 MiB of words)
inline constexpr std::int64_t kNC = 512;    // columns of B packed per slab (512 KiB)
// Floats of packing space (the same scratch as the AVX-512 engines'; this needs less).
inline constexpr std::int64_t kPackWords = kNC * (kKC / 2) + kMC * (kKC / 2);
static_assert(kPackWords <= avx512::kPackFloats);

inline std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }

namespace detail {
using avx512::detail::low_lanes;
using avx512::detail::transpose16;

// A's rows [i0, i0+m) × K-slab [k0, k0+kn) → rows of pairs, m padded to 32, the
// pairs to kp16; op(A)(i,k) = kRowA ? A[i·lda + k] : A[k·lda + i]; A float32 or
// kept in bf16 (TA: the same words, avx512::bf16::pair_words/run_pairs).
template <bool kRowA, class TA>
NORMLAB_AMX_TARGET inline void pack_a(std::uint32_t* dst, const TA* A, std::int64_t lda, std::int64_t i0,
                                      std::int64_t m, std::int64_t k0, std::int64_t kn, std::int64_t kp16) {
  const std::int64_t rows = round_up(m, kBlock);
  if constexpr (kRowA) {
    for (std::int64_t r = 0; r < rows; ++r) {
      std::uint32_t* d = dst + r * kp16;
      const TA* s = A + (i0 + r) * lda + k0;
      for (std::int64_t k = 0; k < 2 * kp16; k += 32)
        _mm512_storeu_si512(d + k / 2, r < m && k < kn ? avx512::bf16::run_pairs(s + k, kn - k) : _mm512_setzero_si512());
    }
  } else {
    // Stored along M: rows k and k+1 of 16 columns of A give one pair of each;
    // 16 pairs of 16 rows are a 16 × 16 block of words, transposed in registers.
    for (std::int64_t r = 0; r < rows; r += kTile) {
      const __mmask16 valid = low_lanes(int(m - r));
      const TA* s = A + k0 * lda + i0 + r;
      for (std::int64_t p0 = 0; p0 < kp16; p0 += kTile) {
        __m512 x[16];
        for (int p = 0; p < 16; ++p) {
          const std::int64_t k = 2 * (p0 + p);
          x[p] = k < kn ? _mm512_castsi512_ps(avx512::bf16::pair_words(s + k * lda, k + 1 < kn ? s + (k + 1) * lda
                                                                                                : nullptr, valid))
                        : _mm512_setzero_ps();
        }
        transpose16(x);
        for (int i = 0; i < 16; ++i) _mm512_storeu_ps(reinterpret_cast<float*>(dst + (r + i) * kp16 + p0), x[i]);
      }
    }
  }
}

// B's K-slab × columns [j0, j0+n) → 16-column tiles of kp16 pairs (tile t at
// dst + t·kp16·16), n padded to 32; op(B)(k,j) = kRowB ? B[k·ldb + j] : B[j·ldb + k];
// B float32 or kept in bf16 (TB).
template <bool kRowB, class TB>
NORMLAB_AMX_TARGET inline void pack_b(std::uint32_t* dst, const TB* B, std::int64_t ldb, std::int64_t k0,
                                      std::int64_t kn, std::int64_t j0, std::int64_t n, std::int64_t kp16) {
  const std::int64_t cols = round_up(n, kBlock);
  for (std::int64_t t = 0; t < cols; t += kTile) {
    std::uint32_t* d = dst + t * kp16;
    const __mmask16 valid = low_lanes(int(n - t));
    if constexpr (kRowB) {
      for (std::int64_t p = 0; p < kp16; ++p) {
        const std::int64_t k = 2 * p;
        const TB* s = B + (k0 + k) * ldb + j0 + t;
        _mm512_store_si512(d + p * kTile, k < kn ? avx512::bf16::pair_words(s, k + 1 < kn ? s + ldb : nullptr, valid)
                                                 : _mm512_setzero_si512());
      }
    } else {
      // Stored along K: a column's 32 values are its 16 pairs; 16 columns' pairs
      // are a 16 × 16 block of words, transposed in registers.
      for (std::int64_t p0 = 0; p0 < kp16; p0 += kTile) {
        const std::int64_t k = 2 * p0;
        __m512 x[16];
        for (int j = 0; j < 16; ++j) {
          const TB* col = B + (j0 + t + j) * ldb + k0 + k;
          x[j] = t + j < n && k < kn ? _mm512_castsi512_ps(avx512::bf16::run_pairs(col, kn - k)) : _mm512_setzero_ps();
        }
        transpose16(x);
        for (int p = 0; p < 16; ++p) _mm512_store_ps(reinterpret_cast<float*>(d + (p0 + p) * kTile), x[p]);
      }
    }
  }
}

// The tile registers: 0–3 the 2 × 2 accumulators, 4–5 A's two row tiles, 6–7
// B's two column tiles; every tile 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t bytes_per_row[16] = {};
  std::uint8_t rows[16] = {};
};
NORMLAB_AMX_TARGET inline void configure_tiles() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.rows[t] = std::uint8_t(kTile);
    c.bytes_per_row[t] = std::uint16_t(kTile * 4);
  }
  _tile_loadconfig(&c);
}

// C (mm × nn, ldc) = alpha·A·B (+ C when add), in 32 × 32 blocks. A: rows of
// pairs a_kp words apart; B: 16-column tiles, column c's pair p at
// Bp[c·b_kp + p·16]. A block of rows from r sums the pairs [first, last) =
// pairs(r) (multiples of 16) and covers the columns below columns(r): the
// whole depth and width for a plain product, less where attention's causal
// blocks know the rest is zero or unread. The pairs left out change no sum.
template <class Pairs, class Columns>
NORMLAB_AMX_TARGET inline void block_product(std::int64_t mm, std::int64_t nn, const std::uint32_t* Ap,
                                             std::int64_t a_kp, const std::uint32_t* Bp, std::int64_t b_kp, float* C,
                                             std::int64_t ldc, float alpha, bool add, Pairs pairs, Columns columns) {
  alignas(64) float acc[kBlock * kBlock];
  const __m512 va = _mm512_set1_ps(alpha);
  const long a_stride = long(a_kp * 4), b_stride = long(kTile * 4);
  for (std::int64_t r = 0; r < mm; r += kBlock) {
    const std::uint32_t* a0 = Ap + r * a_kp;
    const std::uint32_t* a1 = a0 + kTile * a_kp;
    const auto [first, last] = pairs(r);
    const std::int64_t width = columns(r);
    for (std::int64_t c = 0; c < width; c += kBlock) {
      const std::uint32_t* b0 = Bp + c * b_kp;
      const std::uint32_t* b1 = b0 + kTile * b_kp;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (std::int64_t p = first; p < last; p += kTile) {
        _tile_loadd(4, a0 + p, a_stride);
        _tile_loadd(5, a1 + p, a_stride);
        _tile_loadd(6, b0 + p * kTile, b_stride);
        _tile_loadd(7, b1 + p * kTile, b_stride);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      constexpr long kAccStride = kBlock * 4;
      _tile_stored(0, acc, kAccStride);
      _tile_stored(1, acc + kTile, kAccStride);
      _tile_stored(2, acc + kTile * kBlock, kAccStride);
      _tile_stored(3, acc + kTile * kBlock + kTile, kAccStride);
      const int rows = int(std::min(kBlock, mm - r)), cols = int(std::min(kBlock, nn - c));
      const __mmask16 m0 = low_lanes(cols), m1 = low_lanes(cols - 16);
      for (int i = 0; i < rows; ++i) {
        float* o = C + (r + i) * ldc + c;
        __m512 x0 = _mm512_mul_ps(va, _mm512_load_ps(acc + i * kBlock));
        __m512 x1 = _mm512_mul_ps(va, _mm512_load_ps(acc + i * kBlock + kTile));
        if (add) {
          x0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, o), x0);
          x1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, o + kTile), x1);
        }
        _mm512_mask_storeu_ps(o, m0, x0);
        _mm512_mask_storeu_ps(o + kTile, m1, x1);
      }
    }
  }
}
// C = alpha·A·B (+ C when add) over the whole depth and width; both packed at kp pairs.
NORMLAB_AMX_TARGET inline void full_product(std::int64_t mm, std::int64_t nn, const std::uint32_t* Ap,
                                            const std::uint32_t* Bp, std::int64_t kp, float* C, std::int64_t ldc,
                                            float alpha, bool add) {
  block_product(
      mm, nn, Ap, kp, Bp, kp, C, ldc, alpha, add,
      [kp](std::int64_t) { return std::pair<std::int64_t, std::int64_t>(0, kp); }, [nn](std::int64_t) { return nn; });
}
}  // namespace detail

// The pairs one K-slab of kn values packs to (a whole number of tiles).
inline std::int64_t slab_pairs(std::int64_t kn) { return round_up((kn + 1) / 2, kTile); }

// One K-slab [k0, k0+kn) of gemm's product for C's rows [i0, i0+m), with
// op(B)'s slab already packed whole (pack_b over its N columns, column c at
// packedB + c·slab_pairs(kn)): what gemm computes for those rows and that slab,
// the same bits. add: C += (the first slab of a product that does not
// accumulate: false). pack: this thread's packing scratch (avx512::kPackFloats),
// for A's rows here and for B's columns in gemm_slab_columns.
template <bool kRowA, class TA>
NORMLAB_AMX_TARGET void gemm_slab_rows(std::int64_t i0, std::int64_t m, std::int64_t N, std::int64_t k0,
                                       std::int64_t kn, const TA* A, std::int64_t lda, const std::uint32_t* packedB,
                                       float* C, std::int64_t ldc, bool add, float alpha, float* pack) {
  auto* packA = reinterpret_cast<std::uint32_t*>(pack);
  const std::int64_t kp = slab_pairs(kn);
  detail::configure_tiles();
  for (std::int64_t i = i0; i < i0 + m; i += kMC) {
    const std::int64_t mm = std::min(kMC, i0 + m - i);
    detail::pack_a<kRowA>(packA, A, lda, i, mm, k0, kn, kp);
    for (std::int64_t j0 = 0; j0 < N; j0 += kNC)
      detail::full_product(mm, std::min(kNC, N - j0), packA, packedB + j0 * kp, kp, C + i * ldc + j0, ldc, alpha, add);
  }
  _tile_release();
}
// The same for C's columns [j0, j0+n), with op(A)'s slab packed whole (pack_a
// over its M rows, row r at packedA + r·slab_pairs(kn)).
template <bool kRowB, class TB>
NORMLAB_AMX_TARGET void gemm_slab_columns(std::int64_t j0, std::int64_t n, std::int64_t M, std::int64_t k0,
                                          std::int64_t kn, const std::uint32_t* packedA, const TB* B,
                                          std::int64_t ldb, float* C, std::int64_t ldc, bool add, float alpha,
                                          float* pack) {
  auto* packB = reinterpret_cast<std::uint32_t*>(pack);
  const std::int64_t kp = slab_pairs(kn);
  detail::configure_tiles();
  for (std::int64_t j = j0; j < j0 + n; j += kNC) {
    const std::int64_t nn = std::min(kNC, j0 + n - j);
    detail::pack_b<kRowB>(packB, B, ldb, k0, kn, j, nn, kp);
    for (std::int64_t i = 0; i < M; i += kMC)
      detail::full_product(std::min(kMC, M - i), nn, packedA + i * kp, packB, kp, C + i * ldc + j, ldc, alpha, add);
  }
  _tile_release();
}

// C(M,N) (row-major, ldc) = alpha · op(A)·op(B) with both operands rounded to
// bf16, plus C when `add`: avx512::bf16::gemm's contract (operand conventions,
// `pack` scratch of avx512::kPackFloats floats, 64-byte aligned; M, N, K > 0),
// on the tile unit. Only where available().
template <bool kRowA, bool kRowB, class TA = float, class TB = float>
NORMLAB_AMX_TARGET void gemm(std::int64_t M, std::int64_t N, std::int64_t K, const TA* A, std::int64_t lda,
                             const TB* B, std::int64_t ldb, float* C, std::int64_t ldc, bool add, float alpha,
                             float* pack) {
  auto* packB = reinterpret_cast<std::uint32_t*>(pack);
  auto* packA = packB + kNC * (kKC / 2);
  detail::configure_tiles();
  const bool one_b_block = N <= kNC;
  for (std::int64_t k0 = 0; k0 < K; k0 += kKC) {
    const std::int64_t kn = std::min(kKC, K - k0), kp16 = slab_pairs(kn);
    const bool add_slab = add || k0 > 0;
    if (one_b_block) detail::pack_b<kRowB>(packB, B, ldb, k0, kn, 0, N, kp16);
    for (std::int64_t i0 = 0; i0 < M; i0 += kMC) {
      const std::int64_t mm = std::min(kMC, M - i0);
      detail::pack_a<kRowA>(packA, A, lda, i0, mm, k0, kn, kp16);
      for (std::int64_t j0 = 0; j0 < N; j0 += kNC) {
        const std::int64_t nn = std::min(kNC, N - j0);
        if (!one_b_block) detail::pack_b<kRowB>(packB, B, ldb, k0, kn, j0, nn, kp16);
        detail::full_product(mm, nn, packA, packB, kp16, C + i0 * ldc + j0, ldc, alpha, add_slab);
      }
    }
  }
  _tile_release();
}

}  // namespace normlab::cpu::amx
#endif
