#pragma once
// cpu::gram, a matrix times its own transpose (Muon's Newton–Schulz products):
// only the upper block triangle computed on normlab's own kernels, then mirrored.
// Apart from gemm.hpp because which products may skip half their tiles, and still
// give the full product's bits, is its own question.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "normlab/backend/cpu/gemm.hpp"

namespace normlab::cpu {

// C(n,n) = alpha·G with G the Gram matrix X Xᵀ (X (n,k) row-major) or, when
// `transposed`, XᵀX (X (k,n) row-major). G is symmetric, so the float32 engine
// computes its upper block triangle only, in column panels of kGramPanel (each
// panel the rows down to its diagonal block, largest panels first, handed out
// dynamically), then mirrors it: (1 + kGramPanel/n)/2 of the full product's
// multiply-adds. Element (i, j) is the dot product of the same two rows in the
// same order as in the full product, and (j, i) the same products commuted, so C
// has the full product's bits (its upper triangle's, mirrored, on the engines
// that sum (i, j) and (j, i) differently) in either precision at alpha = 1 (with another
// alpha and K past one slab, a tile's epilogue may fuse alpha·sum + C where
// another's does not: one rounding). float64 (the oracle), the OpenBLAS and Eigen
// engines and short products (k < n on one thread, k < 2n on several, or k ≤ 64)
// run the full product.
inline constexpr std::int64_t kGramPanel = 64;
namespace detail {
// C(n,n)'s lower triangle from its upper, in tiles (both sides stay in cache).
template <class T>
void mirror_upper(T* C, std::int64_t n) {
  constexpr std::int64_t kTile = 32;
  for (std::int64_t i0 = 0; i0 < n; i0 += kTile)
    for (std::int64_t j0 = 0; j0 <= i0; j0 += kTile)
      for (std::int64_t i = i0; i < std::min(n, i0 + kTile); ++i)
        for (std::int64_t j = j0; j < std::min(i, j0 + kTile); ++j) C[i * n + j] = C[j * n + i];
}
}  // namespace detail
template <class T>
void gram(T* C, const T* X, std::int64_t n, std::int64_t k, bool transposed, T alpha = T(1)) {
  // Only on normlab's own kernels, whose tiles do not move with the split: OpenBLAS
  // blocks a panel otherwise than the whole product, so the bits would differ.
#if defined(NORMLAB_HAVE_SGEMM_AVX512)
  if constexpr (std::is_same_v<T, float>) {
    // Panels above OpenBLAS's small-product threshold, so that they run on the
    // same kernel as the full product would; and only where they pay (measured,
    // AMD EPYC Zen 5, n = 256): on one thread from k = n on (k = 256: 28% faster
    // in float32, 22% in bf16); over two threads, whose four panels balance less
    // well than the full product's halves, from k = 2n (k = 768, 1024: 23–24% in
    // float32, 7–10% in bf16; k = 256 level, or slower in bf16).
    const bool serial = max_threads() == 1 || in_parallel();
    if (n >= 2 * kGramPanel && k >= (serial ? n : 2 * n) &&
        double(kGramPanel * kGramPanel) * double(k) > double(1 << 18)) {
      const std::int64_t panels = (n + kGramPanel - 1) / kGramPanel;
      auto panel = [&](std::int64_t j) {  // C[0, j0 + w) × [j0, j0 + w)
        const std::int64_t j0 = j * kGramPanel, w = std::min(kGramPanel, n - j0), rows = j0 + w;
        if (transposed)  // op(A)(i, l) = X[l][i], op(B)(l, c) = X[l][j0 + c]
          detail::serial_sgemm<Eigen::ColMajor, Eigen::RowMajor>(rows, w, k, X, n, X + j0, n, C + j0, n, false, alpha);
        else  // op(A)(i, l) = X[i][l], op(B)(l, c) = X[j0 + c][l]
          detail::serial_sgemm<Eigen::RowMajor, Eigen::ColMajor>(rows, w, k, X, k, X + j0 * k, k, C + j0, n, false,
                                                                 alpha);
      };
      if (serial) {
        for (std::int64_t q = 0; q < panels; ++q) panel(panels - 1 - q);
      } else {
#pragma omp parallel
        {
          detail::reserve_serial_sgemm_scratch();
#pragma omp for schedule(dynamic, 1)
          for (std::int64_t q = 0; q < panels; ++q) panel(panels - 1 - q);
        }
      }
      detail::mirror_upper(C, n);
      return;
    }
  }
#endif
  if (transposed)
    gemm<T, Eigen::ColMajor, Eigen::RowMajor>(n, n, k, X, n, X, n, C, n, false, alpha);
  else
    gemm<T, Eigen::RowMajor, Eigen::ColMajor>(n, n, k, X, k, X, k, C, n, false, alpha);
  // Other engines need not sum (i, j) and (j, i) alike: C is symmetric exactly all the same.
  detail::mirror_upper(C, n);
}

}  // namespace normlab::cpu
