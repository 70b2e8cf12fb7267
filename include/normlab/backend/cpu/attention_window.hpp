#pragma once
// The causal sliding window's arithmetic, shared by the generic blocked
// attention and the AVX-512 one: query t attends to keys t−W+1 … t (W = 0: no
// window, every key ≤ t).
#include <algorithm>
#include <cstdint>

namespace normlab::cpu {

// The first key a query at position t sees.
inline std::int64_t window_first_key(std::int64_t t, std::int64_t window) {
  return window > 0 ? std::max<std::int64_t>(0, t - window + 1) : 0;
}
// The key block (of Bk rows) a query block starting at i0 starts its key loop
// from: blocks wholly before every row's window are never visited.
inline std::int64_t window_first_block(std::int64_t i0, std::int64_t window, std::int64_t Bk) {
  return window_first_key(i0, window) / Bk * Bk;
}

}  // namespace normlab::cpu
