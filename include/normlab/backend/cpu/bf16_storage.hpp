#pragma once
// Activations kept in bf16 between forward and backward: rounding a float32
// buffer to bf16 words (as the products' packing rounds it, so a stored value
// packs to its float32 original's bits), rounding in place (the bf16 method on a
// model that keeps float32 buffers, and the float64 oracle's), and widening
// back for a float32 reader. Each a pass over contiguous memory, in chunks.
#include <algorithm>
#include <bit>
#include <cstdint>

#include "normlab/backend/cpu/bf16gemm_avx512.hpp"
#include "normlab/backend/cpu/primitives.hpp"
#include "normlab/core/precision.hpp"

namespace normlab::cpu {

namespace detail {
// f(begin, count) over [0, n) in chunks of 16 Ki values, in parallel past one chunk.
template <class F>
void for_bf16_chunks(std::int64_t n, F&& f) {
  constexpr std::int64_t kChunk = 1 << 14;
  parallel_for((n + kChunk - 1) / kChunk, n > kChunk,
               [&](std::int64_t c) { f(c * kChunk, std::min(kChunk, n - c * kChunk)); });
}
}  // namespace detail

#if defined(NORMLAB_HAVE_BF16GEMM_AVX512)
// dst = src rounded to bf16 (the packing's instruction).
inline void round_to_bf16(bfloat16* dst, const float* src, std::int64_t n) {
  detail::for_bf16_chunks(n, [&](std::int64_t b, std::int64_t m) { avx512::bf16::round_to_bf16(dst + b, src + b, m); });
}

// x rounded to bf16 in place, as round_to_bf16 rounds it.
inline void round_to_bf16_in_place(float* x, std::int64_t n) {
  detail::for_bf16_chunks(n, [&](std::int64_t b, std::int64_t m) { avx512::bf16::round_in_place(x + b, m); });
}
#endif

// The float64 oracle's rounding of the same (bf16_method_round, as
// gemm_bf16_operands rounds a product's operands).
inline void round_to_bf16_in_place(double* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = bf16_method_round(x[i]);
}

// dst = src widened exactly (a bf16 word is the top half of its float).
inline void widen_bf16(float* dst, const bfloat16* src, std::int64_t n) {
  detail::for_bf16_chunks(n, [&](std::int64_t b, std::int64_t m) {
    for (std::int64_t i = b; i < b + m; ++i) dst[i] = to_float(src[i]);
  });
}

}  // namespace normlab::cpu
