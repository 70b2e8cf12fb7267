#pragma once
// Attention's block products on the tile unit (AMX-BF16): an engine for
// avx512::attention_head_forward/backward beside the float32 and AVX-512 BF16
// ones (attention_avx512.hpp), for bf16 runs on CPUs with AMX. On such a Xeon
// vdpbf16ps issues at half the float32 FMA's rate, so attention's 64 × 64 × dk
// block products on it were no faster than in float32; one TDPBF16PS does a
// 16 × 16 × 32 block.
//
// The operands are packed as the AMX GEMM packs them (bf16gemm_amx.hpp): A in
// rows of bf16 pairs, rows padded to 32 and pairs to 16; B in 16-column tiles,
// pair-major, columns padded to 32. A product runs in 32 × 32 blocks of C, so
// the causal cuts of a diagonal block pair fall on 32 rows (16 pairs): a block
// of scores wholly right of the diagonal is skipped (never read), and P's and
// dS's zero triangles are left out of the depth. What is left out is zeros: the
// sums keep their values.
//
// Bits: the tile unit's own summation order, so they differ from the AVX-512
// BF16 engine's within the same float32 accumulation bounds (as the AMX GEMM's
// do), and depend only on the shapes and operands.
#include "normlab/backend/cpu/bf16gemm_amx.hpp"

#if defined(NORMLAB_HAVE_BF16GEMM_AMX)
#include <algorithm>
#include <cstdint>
#include <utility>

#define NORMLAB_HAVE_ATTENTION_AMX 1

namespace normlab::cpu::amx {

struct AttentionTiles {
  using Pairs = std::pair<std::int64_t, std::int64_t>;
  // Words (bf16 pairs) of one packed row or column of the given depth: padded to whole tiles.
  static std::int64_t words(std::int64_t depth) { return round_up((depth + 1) / 2, kTile); }
  static std::int64_t a_floats(std::int64_t rows, std::int64_t depth) { return round_up(rows, kBlock) * words(depth); }
  static std::int64_t b_floats(std::int64_t cols, std::int64_t depth) { return round_up(cols, kBlock) * words(depth); }
  // Column j0 (a multiple of 32) of a packed B of the given depth; depth k0 (a multiple of 32).
  static const float* b_column(const float* Bp, std::int64_t j0, std::int64_t depth) { return Bp + j0 * words(depth); }
  static const float* b_depth(const float* Bp, std::int64_t k0) { return Bp + k0 / 2 * kTile; }
  // The tile registers are set up once per head and released after it.
  NORMLAB_AMX_TARGET static void begin() { detail::configure_tiles(); }
  NORMLAB_AMX_TARGET static void end() { _tile_release(); }

  template <bool kRowA, class TA>
  static void pack_a(float* d, const TA* A, std::int64_t lda, std::int64_t i0, std::int64_t m, std::int64_t k0,
                     std::int64_t kn) {
    detail::pack_a<kRowA>(as_words(d), A, lda, i0, m, k0, kn, words(kn));
  }
  template <bool kRowB, class TB>
  static void pack_b(float* d, const TB* B, std::int64_t ldb, std::int64_t k0, std::int64_t kn, std::int64_t j0,
                     std::int64_t n) {
    detail::pack_b<kRowB>(as_words(d), B, ldb, k0, kn, j0, n, words(kn));
  }

  // S = alpha·A·B, A packed at depth kn, B at depth bstride. Diagonal: the
  // blocks of columns wholly right of a block of rows are skipped.
  NORMLAB_AMX_TARGET static void score_product(std::int64_t nm, std::int64_t nn, std::int64_t kn, const float* Ap,
                                               const float* Bp, std::int64_t bstride, float* C, std::int64_t ldc,
                                               float alpha, bool diagonal) {
    const std::int64_t kp = words(kn);
    detail::block_product(
        nm, nn, as_words(Ap), kp, as_words(Bp), words(bstride), C, ldc, alpha, false,
        [kp](std::int64_t) { return Pairs(0, kp); },
        [nn, diagonal](std::int64_t r) { return diagonal ? std::min(nn, r + kBlock) : nn; });
  }
  // C = A·B (+ C when add), A being P or dS: on the diagonal, rows from r stop at depth r + 32.
  NORMLAB_AMX_TARGET static void lower_product(std::int64_t nm, std::int64_t nn, std::int64_t kn, const float* Ap,
                                               const float* Bp, std::int64_t bstride, float* C, std::int64_t ldc,
                                               bool add, bool diagonal) {
    const std::int64_t kp = words(kn);
    detail::block_product(
        nm, nn, as_words(Ap), kp, as_words(Bp), words(bstride), C, ldc, 1.0f, add,
        [kp, diagonal](std::int64_t r) { return Pairs(0, diagonal ? std::min(kp, (r + kBlock) / 2) : kp); },
        [nn](std::int64_t) { return nn; });
  }
  // C = A·B (+ C when add), A being Pᵀ or dSᵀ: on the diagonal, rows from r start at depth r.
  NORMLAB_AMX_TARGET static void upper_product(std::int64_t nm, std::int64_t nn, std::int64_t kn, const float* Ap,
                                               const float* Bp, std::int64_t bstride, float* C, std::int64_t ldc,
                                               bool add, bool diagonal) {
    const std::int64_t kp = words(kn);
    detail::block_product(
        nm, nn, as_words(Ap), kp, as_words(Bp), words(bstride), C, ldc, 1.0f, add,
        [kp, diagonal](std::int64_t r) { return Pairs(diagonal ? std::min(kp, r / 2) : 0, kp); },
        [nn](std::int64_t) { return nn; });
  }

 private:
  static std::uint32_t* as_words(float* p) { return reinterpret_cast<std::uint32_t*>(p); }
  static const std::uint32_t* as_words(const float* p) { return reinterpret_cast<const std::uint32_t*>(p); }
};

}  // namespace normlab::cpu::amx
#endif
