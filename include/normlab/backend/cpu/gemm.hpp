#pragma once
// cpu::gemm, the one matrix product every CPU op calls (its engines per scalar
// type and their threading), and the linear layers on it. Apart because the
// choice of engine and the split of C over threads are one concern.
#include <Eigen/Core>

// cpu::gemm drives Eigen's own GEBP product kernels (gebp_kernel, gemm_pack_lhs/rhs,
// their 3.4 signatures); with Eigen 3.3 it would not compile or would misbehave.
static_assert(EIGEN_VERSION_AT_LEAST(3, 4, 0),
              "normlab: the CPU backend needs Eigen 3.4 or later (its GEMM uses Eigen 3.4's product kernels)");
#ifdef NORMLAB_HAVE_OPENBLAS
#include <cblas.h>
#endif
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "normlab/backend/cpu/bf16gemm_amx.hpp"
#include "normlab/backend/cpu/bf16gemm_avx512.hpp"
#include "normlab/backend/cpu/primitives.hpp"
#include "normlab/backend/cpu/sgemm_avx512.hpp"
#include "normlab/core/precision.hpp"

namespace normlab::cpu {

// C(M,N) (row-major, leading dimension ldc) = alpha·op(A)(M,K)·op(B)(K,N) + beta_one·C,
// where A/B are read row- or column-major (LhsOrder/RhsOrder) with leading
// dimensions lda/ldb. Eigen's packing routines and GEBP micro-kernels do the
// arithmetic; the loop around them is ours, for three reasons:
//  - no heap allocation: the packing buffers are grow-only scratch (Eigen's
//    own product allocates them on every call);
//  - the shared operand B is packed once per K-slab, by both threads together,
//    and read by both (splitting C's rows and calling Eigen's sequential
//    product per thread packed all of B in every thread);
//  - C's rows go in fixed chunks handed out dynamically, each zeroed by the
//    thread that computes it: a thread on a slower (or busier) core takes fewer
//    chunks instead of making the other wait, and no serial zero-fill.
// Every element of C is summed over the same K-slabs in the same order by the
// same micro-kernel whichever thread computes its chunk, so the result has the
// same bits for any thread count. Inside an OpenMP region (attention's
// per-head loops) it runs on the calling thread with its own buffers.
namespace detail {
template <class T, int LhsOrder, int RhsOrder>
struct GemmKernels {
  // Eigen computes column-major results: our row-major C(M,N) is its Cᵀ(N,M) =
  // op(B)ᵀ·op(A)ᵀ, so Eigen's lhs is our B (storage order flipped) and its rhs our A.
  static constexpr int kLhsOrder = RhsOrder == Eigen::RowMajor ? Eigen::ColMajor : Eigen::RowMajor;
  static constexpr int kRhsOrder = LhsOrder == Eigen::RowMajor ? Eigen::ColMajor : Eigen::RowMajor;
  using Traits = Eigen::internal::gebp_traits<T, T>;
  using LhsMapper = Eigen::internal::const_blas_data_mapper<T, Eigen::Index, kLhsOrder>;
  using RhsMapper = Eigen::internal::const_blas_data_mapper<T, Eigen::Index, kRhsOrder>;
  using ResMapper = Eigen::internal::blas_data_mapper<T, Eigen::Index, Eigen::ColMajor, Eigen::Unaligned, 1>;
  using PackLhs = Eigen::internal::gemm_pack_lhs<T, Eigen::Index, LhsMapper, Traits::mr, Traits::LhsProgress,
                                                 typename Traits::LhsPacket4Packing, kLhsOrder>;
  using PackRhs = Eigen::internal::gemm_pack_rhs<T, Eigen::Index, RhsMapper, Traits::nr, kRhsOrder>;
  using Gebp = Eigen::internal::gebp_kernel<T, T, Eigen::Index, ResMapper, Traits::mr, Traits::nr, false, false>;
};
}  // namespace detail

namespace detail {
template <class T, int LhsOrder, int RhsOrder>
void eigen_gemm(std::int64_t M, std::int64_t N, std::int64_t K, const T* A, std::int64_t lda, const T* B,
                std::int64_t ldb, T* C, std::int64_t ldc, bool accumulate, T alpha) {
  if (M <= 0 || N <= 0) return;
  using G = detail::GemmKernels<T, LhsOrder, RhsOrder>;
  constexpr std::int64_t mr = G::Traits::mr;
  if (K <= 0) {
    if (!accumulate)
      for (std::int64_t i = 0; i < M; ++i) std::fill_n(C + i * ldc, N, T(0));
    return;
  }
  // Blocking of the whole problem (thread-count independent): Eigen's "rows"
  // are our N, its "cols" our M, its depth our K.
  Eigen::Index kc = K, mc = N, nc = M;
  Eigen::internal::computeProductBlockingSizes<T, T>(kc, mc, nc, Eigen::Index(1));
  mc = std::max<Eigen::Index>(mr, mc / mr * mr);  // B's row blocks start on micro-panel boundaries
  // C's rows in chunks of a multiple of 16 (whole micro-panels), about 32 of them.
  const std::int64_t chunk = std::clamp<std::int64_t>((M / 32 + 15) / 16 * 16, 16, 256);
  const std::int64_t chunks = (M + chunk - 1) / chunk;
  const std::int64_t kslabs = (K + kc - 1) / kc;
  typename G::LhsMapper lhs(B, ldb);
  typename G::RhsMapper rhs(A, lda);
  typename G::ResMapper res(C, ldc);
  // One K-slab of B, packed whole (N × kc), shared by the threads; A's chunk per thread.
  const std::size_t sizeB = std::size_t(N) * std::size_t(kc);
  const std::size_t sizeA = std::size_t(chunk) * std::size_t(kc);
  const bool parallel = !in_parallel() && max_threads() > 1 && double(M) * double(N) * double(K) >= double(1 << 18) && chunks > 1;
  T* packedB = parallel ? detail::thread_scratch<T, detail::kGemmShared>(sizeB) : nullptr;

  auto pack_b_rows = [&](T* dst, std::int64_t k0, std::int64_t kn, std::int64_t r0, std::int64_t rn) {
    typename G::PackLhs pack;
    pack(dst + r0 * kn, lhs.getSubMapper(r0, k0), kn, rn);
  };
  auto compute_chunk = [&](const T* packed, T* packA, std::int64_t k0, std::int64_t kn, std::int64_t c) {
    const std::int64_t j0 = c * chunk, jn = std::min(chunk, M - j0);
    if (k0 == 0 && !accumulate)
      for (std::int64_t i = j0; i < j0 + jn; ++i) std::fill_n(C + i * ldc, N, T(0));
    typename G::PackRhs pack;
    pack(packA, rhs.getSubMapper(k0, j0), kn, jn);
    typename G::Gebp gebp;
    for (std::int64_t i2 = 0; i2 < N; i2 += mc) {
      const std::int64_t in = std::min<std::int64_t>(mc, N - i2);
      gebp(res.getSubMapper(i2, j0), packed + i2 * kn, packA, in, kn, jn, alpha);
    }
  };

  if (!parallel) {
    // B's slab, then A's chunk from the next 64-byte boundary.
    const std::size_t offsetA = (sizeB + 15) / 16 * 16;
    T* scratch = detail::thread_scratch<T, detail::kGemmPack>(offsetA + sizeA);
    T* packA = scratch + offsetA;
    for (std::int64_t s = 0; s < kslabs; ++s) {
      const std::int64_t k0 = s * kc, kn = std::min<std::int64_t>(kc, K - k0);
      pack_b_rows(scratch, k0, kn, 0, N);
      for (std::int64_t c = 0; c < chunks; ++c) compute_chunk(scratch, packA, k0, kn, c);
    }
    return;
  }
  // B's packing split in row blocks of whole micro-panels.
  const std::int64_t bblock = std::max<std::int64_t>(mr, (N / 8 + mr - 1) / mr * mr);
  const std::int64_t bblocks = (N + bblock - 1) / bblock;
#pragma omp parallel
  {
    T* packA = detail::thread_scratch<T, detail::kGemmPack>(sizeA);
    for (std::int64_t s = 0; s < kslabs; ++s) {
      const std::int64_t k0 = s * kc, kn = std::min<std::int64_t>(kc, K - k0);
#pragma omp for schedule(static)
      for (std::int64_t b = 0; b < bblocks; ++b)
        pack_b_rows(packedB, k0, kn, b * bblock, std::min(bblock, N - b * bblock));
      // (implicit barrier: the slab is packed before anyone reads it)
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t c = 0; c < chunks; ++c) compute_chunk(packedB, packA, k0, kn, c);
      // (implicit barrier: nobody still reads the slab when the next one is packed)
    }
  }
}

}  // namespace detail

// The float32 engine, fastest first (measured: docs/perf.md): normlab's
// own AVX-512 kernels where the build targets AVX-512F, else OpenBLAS's (its
// OpenMP build, when CMake found it), else Eigen's. float64 always stays on
// Eigen's kernels: the oracle shares no code with the fast path's GEMM.
#if defined(NORMLAB_HAVE_SGEMM_AVX512)
#define NORMLAB_SERIAL_SGEMM 1
inline constexpr const char* kFloatGemmEngine = "normlab's AVX-512 kernels, normlab's threading";
#elif defined(NORMLAB_HAVE_OPENBLAS)
#define NORMLAB_SERIAL_SGEMM 1
inline constexpr const char* kFloatGemmEngine = "OpenBLAS kernels, normlab's threading";
#else
inline constexpr const char* kFloatGemmEngine = "Eigen kernels, normlab's threading";
#endif

// The precision of float32 products, for the whole process (as PyTorch's
// set_float32_matmul_precision): set once before training, not while a product
// runs. bf16 takes effect where the bf16 engine exists and the CPU runs it
// (bf16gemm_avx512.hpp); elsewhere products stay float32 and
// float_gemm_engine() says so. A float64 model under bf16 rounds its products'
// operands to bf16 and multiplies them in float64 (any CPU): the oracle of the
// bf16 method, against which the bf16 engine is tested.
namespace detail {
inline Precision requested_precision = Precision::fp32;
inline bool bf16_products = false;
}  // namespace detail

// Whether this build and this CPU run float32 products in bf16.
inline bool bf16_engine_available() {
#if defined(NORMLAB_HAVE_BF16GEMM_AVX512)
  return avx512::cpu_has_avx512_bf16();
#else
  return false;
#endif
}
inline void set_matmul_precision(Precision p) {
  detail::requested_precision = p;
  detail::bf16_products = p == Precision::bf16 && bf16_engine_available();
}
inline Precision matmul_precision() { return detail::requested_precision; }
// Whether float32 products actually run in bf16 now.
inline bool bf16_products_active() { return detail::bf16_products; }
// The float32 products' engine as it runs now, for run headers.
inline const char* float_gemm_engine() {
  if (detail::bf16_products) {
#if defined(NORMLAB_HAVE_BF16GEMM_AMX)
    if (amx::available()) return "normlab's AMX-BF16 kernels (bf16 operands, float32 accumulation), normlab's threading";
#endif
    return "normlab's AVX-512 BF16 kernels (bf16 operands, float32 accumulation), normlab's threading";
  }
  if (detail::requested_precision == Precision::bf16)
    return bf16_engine_available() ? kFloatGemmEngine
                                   : "bf16 requested, but this CPU or build has no AVX-512 BF16: float32 products on the float32 engine";
  return kFloatGemmEngine;
}

#if defined(NORMLAB_HAVE_BF16GEMM_AVX512)
namespace detail {
// One bf16 product on the calling thread: on the tile unit where the CPU has one
// (bf16gemm_amx.hpp), else with AVX-512 BF16; packing into this thread's scratch.
template <bool kRowA, bool kRowB, class TA, class TB>
void serial_bf16_gemm(std::int64_t M, std::int64_t N, std::int64_t K, const TA* A, std::int64_t lda, const TB* B,
                      std::int64_t ldb, float* C, std::int64_t ldc, bool accumulate, float alpha) {
  float* pack = thread_scratch<float, kSgemmPack>(std::size_t(avx512::kPackFloats));
#if defined(NORMLAB_HAVE_BF16GEMM_AMX)
  if (amx::available())
    return amx::gemm<kRowA, kRowB, TA, TB>(M, N, K, A, lda, B, ldb, C, ldc, accumulate, alpha, pack);
#endif
  avx512::bf16::gemm<kRowA, kRowB, TA, TB>(M, N, K, A, lda, B, ldb, C, ldc, accumulate, alpha, pack);
}
}  // namespace detail
#endif

#ifdef NORMLAB_SERIAL_SGEMM
namespace detail {
#ifdef NORMLAB_HAVE_OPENBLAS
// One single-threaded OpenBLAS product. Called inside an OpenMP region it never
// threads itself (OpenBLAS's OpenMP build checks omp_in_parallel), so it neither
// allocates (its threaded driver mallocs a job array per call) nor changes its
// K-blocking with the thread count (its threaded and serial drivers split K
// differently, so their bits differ).
template <int LhsOrder, int RhsOrder>
void openblas_sgemm(std::int64_t M, std::int64_t N, std::int64_t K, const float* A, std::int64_t lda, const float* B,
                    std::int64_t ldb, float* C, std::int64_t ldc, float beta, float alpha) {
  cblas_sgemm(CblasRowMajor, LhsOrder == Eigen::RowMajor ? CblasNoTrans : CblasTrans,
              RhsOrder == Eigen::RowMajor ? CblasNoTrans : CblasTrans, blasint(M), blasint(N), blasint(K), alpha, A,
              blasint(lda), B, blasint(ldb), beta, C, blasint(ldc));
}
#endif

// The calling thread's scratch for serial_sgemm, allocated now if it is not yet.
inline void reserve_serial_sgemm_scratch() {
#if defined(NORMLAB_HAVE_SGEMM_AVX512)
  thread_scratch<float, kSgemmPack>(std::size_t(avx512::kPackFloats));
#endif
}

// One serial float32 product on the calling thread with the build's engine;
// M, N, K > 0. The AVX-512 kernels pack into this thread's grow-only scratch.
template <int LhsOrder, int RhsOrder>
void serial_sgemm(std::int64_t M, std::int64_t N, std::int64_t K, const float* A, std::int64_t lda, const float* B,
                  std::int64_t ldb, float* C, std::int64_t ldc, bool accumulate, float alpha) {
#if defined(NORMLAB_HAVE_SGEMM_AVX512)
#if defined(NORMLAB_HAVE_BF16GEMM_AVX512)
  // In bf16 every product, small ones too, rounds its operands the same way (gram's pieces come here).
  if (bf16_products)
    return serial_bf16_gemm<LhsOrder == Eigen::RowMajor, RhsOrder == Eigen::RowMajor>(M, N, K, A, lda, B, ldb, C, ldc,
                                                                                     accumulate, alpha);
#endif
#ifdef NORMLAB_HAVE_OPENBLAS
  // Small products (a tiny model's layers, 64 × 64 × 64 blocks): OpenBLAS's
  // small-matrix kernels skip packing, which would be ~10% of such a product
  // here (measured: the generic attention's forward 1.12× slower at T = 256 with
  // its blocks on the packing kernels; float32 attention now has its own path,
  // attention_avx512.hpp).
  if (double(M) * double(N) * double(K) <= double(1 << 18))
    return openblas_sgemm<LhsOrder, RhsOrder>(M, N, K, A, lda, B, ldb, C, ldc, accumulate ? 1.0f : 0.0f, alpha);
#endif
  float* pack = thread_scratch<float, kSgemmPack>(std::size_t(avx512::kPackFloats));
  avx512::sgemm<LhsOrder == Eigen::RowMajor, RhsOrder == Eigen::RowMajor>(M, N, K, A, lda, B, ldb, C, ldc, accumulate,
                                                                          alpha, pack);
#else
  openblas_sgemm<LhsOrder, RhsOrder>(M, N, K, A, lda, B, ldb, C, ldc, accumulate ? 1.0f : 0.0f, alpha);
#endif
}

// A large product's C in fixed pieces along its longer side, handed out dynamically to the OpenMP
// team: a thread on a slower (or busier) core takes fewer. The pieces depend on the shape only and
// each is one serial product: the same bits for any thread count. Each packs the other operand
// again (a few % of the work in pieces of ≥ 512 rows; the tile unit's team product packs it once).
// Pieces are whole micro-tiles of the engine's kernel (AVX-512's 14 × 32). piece(split_rows, first, count).
template <class Piece>
void for_each_piece(std::int64_t M, std::int64_t N, Piece&& piece) {
  const bool split_rows = M >= N;
  const std::int64_t len = split_rows ? M : N;
  const std::int64_t pieces = std::clamp<std::int64_t>(len / 512, 2, 8);
#if defined(NORMLAB_HAVE_SGEMM_AVX512)
  const std::int64_t quantum = split_rows ? avx512::kMR : avx512::kNR;
#else
  const std::int64_t quantum = 16;
#endif
  const std::int64_t step = ((len + pieces - 1) / pieces + quantum - 1) / quantum * quantum;
  const std::int64_t count = (len + step - 1) / step;
  auto one = [&](std::int64_t p) {
    const std::int64_t b = p * step;
    piece(split_rows, b, std::min(step, len - b));
  };
  if (max_threads() == 1) {
    for (std::int64_t p = 0; p < count; ++p) one(p);  // the same pieces, in turn
  } else {
#pragma omp parallel
    {
      // Every thread of the team sets up its packing scratch, piece or no
      // piece: with pieces handed out dynamically, a thread that got none in
      // the warm-up steps (descheduled on a busy host) allocated it in a
      // later step (test_noalloc failed 16 times in 100 beside two busy
      // processes).
      reserve_serial_sgemm_scratch();
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t p = 0; p < count; ++p) one(p);
    }
  }
}

#if defined(NORMLAB_HAVE_BF16GEMM_AMX)
// A large bf16 product on the tile unit, where packing is not quick beside the products: the team packs
// the shared operand's K-slab once, in parts (min(M, N) × 256 pairs at most), not once per piece; C's
// pieces (as for_each_piece's, on 32-row blocks), handed out dynamically, read it with amx::gemm's
// arithmetic: one serial product's bits for any thread count. Then every bf16 product's dispatch.
template <bool kRowA, bool kRowB, class TA, class TB>
void amx_shared_gemm(std::int64_t M, std::int64_t N, std::int64_t K, const TA* A, std::int64_t lda, const TB* B,
                     std::int64_t ldb, float* C, std::int64_t ldc, bool accumulate, float alpha) {
  const bool split_rows = M >= N;
  const std::int64_t len = split_rows ? M : N, width = split_rows ? N : M;
  const std::int64_t pieces = std::clamp<std::int64_t>(len / 512, 2, 8);
  const std::int64_t step = amx::round_up((len + pieces - 1) / pieces, amx::kBlock);
  const std::int64_t count = (len + step - 1) / step;
  const std::int64_t part = amx::round_up((width + 7) / 8, amx::kBlock);
  const std::int64_t parts = (width + part - 1) / part;
  auto* shared = reinterpret_cast<std::uint32_t*>(thread_scratch<float, kGemmShared>(
      std::size_t(amx::round_up(width, amx::kBlock) * amx::slab_pairs(std::min(K, amx::kKC)))));
#pragma omp parallel
  {
    float* pack = thread_scratch<float, kSgemmPack>(std::size_t(avx512::kPackFloats));
    for (std::int64_t k0 = 0; k0 < K; k0 += amx::kKC) {
      const std::int64_t kn = std::min(amx::kKC, K - k0), kp = amx::slab_pairs(kn);
#pragma omp for schedule(static)
      for (std::int64_t q = 0; q < parts; ++q) {
        const std::int64_t b = q * part, n = std::min(part, width - b);
        if (split_rows)
          amx::detail::pack_b<kRowB>(shared + b * kp, B, ldb, k0, kn, b, n, kp);
        else
          amx::detail::pack_a<kRowA>(shared + b * kp, A, lda, b, n, k0, kn, kp);
      }
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t p = 0; p < count; ++p) {
        const std::int64_t b = p * step, n = std::min(step, len - b);
        if (split_rows)
          amx::gemm_slab_rows<kRowA>(b, n, N, k0, kn, A, lda, shared, C, ldc, accumulate || k0 > 0, alpha, pack);
        else
          amx::gemm_slab_columns<kRowB>(b, n, M, k0, kn, shared, B, ldb, C, ldc, accumulate || k0 > 0, alpha, pack);
      }
    }
  }
}
#endif

#if defined(NORMLAB_HAVE_BF16GEMM_AVX512)
// Every bf16 product (M, N, K > 0; operands float32 or kept in bf16): serial in a region or when small.
template <bool kRowA, bool kRowB, class TA, class TB>
void bf16_product(std::int64_t M, std::int64_t N, std::int64_t K, const TA* A, std::int64_t lda, const TB* B,
                  std::int64_t ldb, float* C, std::int64_t ldc, bool accumulate, float alpha) {
  if (in_parallel() || double(M) * double(N) * double(K) <= double(1 << 18))
    return serial_bf16_gemm<kRowA, kRowB, TA, TB>(M, N, K, A, lda, B, ldb, C, ldc, accumulate, alpha);
#if defined(NORMLAB_HAVE_BF16GEMM_AMX)
  if (amx::available()) return amx_shared_gemm<kRowA, kRowB>(M, N, K, A, lda, B, ldb, C, ldc, accumulate, alpha);
#endif
  for_each_piece(M, N, [&](bool split_rows, std::int64_t b, std::int64_t n) {
    if (split_rows)
      serial_bf16_gemm<kRowA, kRowB, TA, TB>(n, N, K, kRowA ? A + b * lda : A + b, lda, B, ldb, C + b * ldc, ldc,
                                             accumulate, alpha);
    else
      serial_bf16_gemm<kRowA, kRowB, TA, TB>(M, n, K, A, lda, kRowB ? B + b : B + b * ldb, ldb, C + b, ldc,
                                             accumulate, alpha);
  });
}
#endif
}  // namespace detail
#endif

namespace detail {
// The float64 oracle of the bf16 method: op(A) and op(B) rounded to bf16
// (bf16_method_round), then multiplied in float64. Copies into grow-only
// scratch, same layout with the leading dimension tightened.
template <int LhsOrder, int RhsOrder>
void gemm_bf16_operands(std::int64_t M, std::int64_t N, std::int64_t K, const double* A, std::int64_t lda,
                        const double* B, std::int64_t ldb, double* C, std::int64_t ldc, bool accumulate,
                        double alpha) {
  const bool rowA = LhsOrder == Eigen::RowMajor, rowB = RhsOrder == Eigen::RowMajor;
  const std::int64_t a_rows = rowA ? M : K, a_cols = rowA ? K : M, b_rows = rowB ? K : N, b_cols = rowB ? N : K;
  double* a = thread_scratch<double, kBf16Operands>(std::size_t(a_rows * a_cols + b_rows * b_cols));
  double* b = a + a_rows * a_cols;
  auto round_copy = [](double* dst, const double* src, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < cols; ++j) dst[i * cols + j] = bf16_method_round(src[i * ld + j]);
  };
  round_copy(a, A, a_rows, a_cols, lda);
  round_copy(b, B, b_rows, b_cols, ldb);
  eigen_gemm<double, LhsOrder, RhsOrder>(M, N, K, a, a_cols, b, b_cols, C, ldc, accumulate, alpha);
}
}  // namespace detail

template <class T, int LhsOrder, int RhsOrder>
void gemm(std::int64_t M, std::int64_t N, std::int64_t K, const T* A, std::int64_t lda, const T* B, std::int64_t ldb,
          T* C, std::int64_t ldc, bool accumulate, T alpha = T(1)) {
  // A float64 model under bf16 is the oracle of the bf16 method (every CPU, any build).
  if constexpr (std::is_same_v<T, double>)
    if (detail::requested_precision == Precision::bf16 && M > 0 && N > 0 && K > 0)
      return detail::gemm_bf16_operands<LhsOrder, RhsOrder>(M, N, K, A, lda, B, ldb, C, ldc, accumulate, alpha);
#ifdef NORMLAB_SERIAL_SGEMM
  // Empty products (nothing to do, or C = 0 when K = 0) take the Eigen path's handling below.
  if constexpr (std::is_same_v<T, float>) {
    if (M > 0 && N > 0 && K > 0) {
#if defined(NORMLAB_HAVE_BF16GEMM_AVX512)
      if (detail::bf16_products)
        return detail::bf16_product<LhsOrder == Eigen::RowMajor, RhsOrder == Eigen::RowMajor, float, float>(
            M, N, K, A, lda, B, ldb, C, ldc, accumulate, alpha);
#endif
      // Inside a region (attention's per-head loops) the calling thread does it all.
      if (in_parallel())
        return detail::serial_sgemm<LhsOrder, RhsOrder>(M, N, K, A, lda, B, ldb, C, ldc, accumulate, alpha);
      // Small products (≤ 2^18 multiply-adds, OpenBLAS's own threading threshold): one call.
      if (double(M) * double(N) * double(K) <= double(1 << 18))
        return detail::serial_sgemm<LhsOrder, RhsOrder>(M, N, K, A, lda, B, ldb, C, ldc, accumulate, alpha);
      detail::for_each_piece(M, N, [&](bool split_rows, std::int64_t b, std::int64_t n) {
        if (split_rows) {
          const float* Ap = LhsOrder == Eigen::RowMajor ? A + b * lda : A + b;
          detail::serial_sgemm<LhsOrder, RhsOrder>(n, N, K, Ap, lda, B, ldb, C + b * ldc, ldc, accumulate, alpha);
        } else {
          const float* Bp = RhsOrder == Eigen::RowMajor ? B + b : B + b * ldb;
          detail::serial_sgemm<LhsOrder, RhsOrder>(M, n, K, A, lda, Bp, ldb, C + b, ldc, accumulate, alpha);
        }
      });
      return;
    }
  }
#endif
  detail::eigen_gemm<T, LhsOrder, RhsOrder>(M, N, K, A, lda, B, ldb, C, ldc, accumulate, alpha);
}

#if defined(NORMLAB_HAVE_BF16GEMM_AVX512)
// Whether products can read operands stored in bf16 now: only while float32
// products run in bf16, whose engine rounds the float32 operand as it packs.
inline bool bf16_stored_operands() { return detail::bf16_products; }

// gemm's bf16 product with operand A or B (TA, TB) stored in bf16, rounded with round_to_bf16: gemm's
// path on the float32 values (detail::bf16_product), packed to the same words: the same bits. Only while
// bf16_stored_operands(); the layouts the engines pack from bf16 (A either way, B row-major).
template <int LhsOrder, int RhsOrder, class TA, class TB>
void gemm_bf16_stored(std::int64_t M, std::int64_t N, std::int64_t K, const TA* A, std::int64_t lda, const TB* B,
                      std::int64_t ldb, float* C, std::int64_t ldc, bool accumulate, float alpha = 1.0f) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!accumulate)
      for (std::int64_t i = 0; i < M; ++i) std::fill_n(C + i * ldc, N, 0.0f);
    return;
  }
  detail::bf16_product<LhsOrder == Eigen::RowMajor, RhsOrder == Eigen::RowMajor, TA, TB>(M, N, K, A, lda, B, ldb, C,
                                                                                       ldc, accumulate, alpha);
}

#endif

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

// ---------------------------------------------------------------- GEMMs
// Y(N,out) = X(N,in) Wᵀ  (or += when accumulate). Wᵀ is W read column-major: no transposed copy.
// alpha scales the product (anGPT's constant output factors ride on the GEMM).
template <class T>
void linear_forward(T* Y, const T* X, const T* W, std::int64_t N, std::int64_t in, std::int64_t out,
                    bool accumulate = false, T alpha = T(1)) {
  gemm<T, Eigen::RowMajor, Eigen::ColMajor>(N, out, in, X, in, W, in, Y, out, accumulate, alpha);
}

// dX(N,in) = alpha dY(N,out) W(out,in);  dW(out,in) += alpha dYᵀ X  (dYᵀ: dY read column-major);
// the backward of linear_forward with the same alpha.
template <class T>
void linear_backward(T* dX, T* dW, const T* dY, const T* X, const T* W, std::int64_t N, std::int64_t in,
                     std::int64_t out, T alpha = T(1)) {
  if (dX) gemm<T, Eigen::RowMajor, Eigen::RowMajor>(N, in, out, dY, out, W, in, dX, in, false, alpha);
  if (dW) gemm<T, Eigen::ColMajor, Eigen::RowMajor>(out, in, N, dY, out, X, in, dW, in, true, alpha);
}

#if defined(NORMLAB_HAVE_BF16GEMM_AVX512)
// The same with X stored in bf16 (bf16_stored_operands() only): the bits of
// the float32 X it was rounded from.
inline void linear_forward(float* Y, const bfloat16* X, const float* W, std::int64_t N, std::int64_t in,
                           std::int64_t out, bool accumulate = false, float alpha = 1.0f) {
  gemm_bf16_stored<Eigen::RowMajor, Eigen::ColMajor>(N, out, in, X, in, W, in, Y, out, accumulate, alpha);
}
inline void linear_backward(float* dX, float* dW, const float* dY, const bfloat16* X, const float* W, std::int64_t N,
                            std::int64_t in, std::int64_t out, float alpha = 1.0f) {
  if (dX) gemm<float, Eigen::RowMajor, Eigen::RowMajor>(N, in, out, dY, out, W, in, dX, in, false, alpha);
  if (dW) gemm_bf16_stored<Eigen::ColMajor, Eigen::RowMajor>(out, in, N, dY, out, X, in, dW, in, true, alpha);
}
// ... and with dY stored in bf16 too (a bf16 run's d_uv), X either way.
namespace detail {
template <class TX>
void linear_backward_bf16_dy(float* dX, float* dW, const bfloat16* dY, const TX* X, const float* W, std::int64_t N,
                             std::int64_t in, std::int64_t out, float alpha) {
  if (dX) gemm_bf16_stored<Eigen::RowMajor, Eigen::RowMajor>(N, in, out, dY, out, W, in, dX, in, false, alpha);
  if (dW) gemm_bf16_stored<Eigen::ColMajor, Eigen::RowMajor>(out, in, N, dY, out, X, in, dW, in, true, alpha);
}
}  // namespace detail
inline void linear_backward(float* dX, float* dW, const bfloat16* dY, const float* X, const float* W, std::int64_t N,
                            std::int64_t in, std::int64_t out, float alpha = 1.0f) {
  detail::linear_backward_bf16_dy(dX, dW, dY, X, W, N, in, out, alpha);
}
inline void linear_backward(float* dX, float* dW, const bfloat16* dY, const bfloat16* X, const float* W,
                            std::int64_t N, std::int64_t in, std::int64_t out, float alpha = 1.0f) {
  detail::linear_backward_bf16_dy(dX, dW, dY, X, W, N, in, out, alpha);
}
#endif

}  // namespace normlab::cpu
