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

// x rounded up to a whole multiple of m.
inline std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }

// A piece's length: len in 2 to 8 pieces of about 512, rounded up to whole multiples of `quantum`.
inline std::int64_t piece_step(std::int64_t len, std::int64_t quantum) {
  const std::int64_t pieces = std::clamp<std::int64_t>(len / 512, 2, 8);
  return round_up((len + pieces - 1) / pieces, quantum);
}

// A large product's C in fixed pieces along its longer side, handed out dynamically to the OpenMP
// team: a thread on a slower (or busier) core takes fewer. The pieces depend on the shape only and
// each is one serial product: the same bits for any thread count. Each packs the other operand
// again (a few % of the work in pieces of ≥ 512 rows; the bf16 engines' team product packs it once).
// Pieces are whole micro-tiles of the engine's kernel (AVX-512's 14 × 32). piece(split_rows, first, count).
template <class Piece>
void for_each_piece(std::int64_t M, std::int64_t N, Piece&& piece) {
  const bool split_rows = M >= N;
  const std::int64_t len = split_rows ? M : N;
#if defined(NORMLAB_HAVE_SGEMM_AVX512)
  const std::int64_t step = piece_step(len, split_rows ? avx512::kMR : avx512::kNR);
#else
  const std::int64_t step = piece_step(len, 16);
#endif
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

#if defined(NORMLAB_HAVE_BF16GEMM_AVX512)
// A large bf16 product over the team, where packing is not quick beside the products: the team packs
// the shared operand's K-slab once, in parts (min(M, N) × a slab's pairs), not once per piece; C's pieces
// along the longer side (as for_each_piece's), handed out dynamically, read it with the engine's
// serial arithmetic: one serial product's bits for any thread count. `step` and `part` are whole
// panels of the engine; pack_part(shared, k0, kn, first, count) packs a part of the shared operand's
// slab, slab(shared, k0, kn, first, count, pack) computes a piece of C over it.
template <class PackPart, class Slab>
void team_shared_product(std::int64_t len, std::int64_t width, std::int64_t K, std::int64_t kc, std::int64_t step,
                         std::int64_t part, std::size_t shared_words, PackPart&& pack_part, Slab&& slab) {
  const std::int64_t count = (len + step - 1) / step, parts = (width + part - 1) / part;
  auto* shared = reinterpret_cast<std::uint32_t*>(thread_scratch<float, kGemmShared>(shared_words));
#pragma omp parallel
  {
    float* pack = thread_scratch<float, kSgemmPack>(std::size_t(avx512::kPackFloats));
    for (std::int64_t k0 = 0; k0 < K; k0 += kc) {
      const std::int64_t kn = std::min(kc, K - k0);
#pragma omp for schedule(static)
      for (std::int64_t q = 0; q < parts; ++q) pack_part(shared, k0, kn, q * part, std::min(part, width - q * part));
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t p = 0; p < count; ++p) slab(shared, k0, kn, p * step, std::min(step, len - p * step), pack);
    }
  }
}

// On AVX-512 BF16: C's pieces on the kernel's 14-row or 32-column panels, the shared operand's parts on
// its own panels (B's 32 columns, A's 14 rows).
template <bool kRowA, bool kRowB, class TA, class TB>
void avx512_bf16_shared_gemm(std::int64_t M, std::int64_t N, std::int64_t K, const TA* A, std::int64_t lda,
                             const TB* B, std::int64_t ldb, float* C, std::int64_t ldc, bool accumulate, float alpha) {
  namespace e = avx512::bf16;
  const bool rows = M >= N;
  const std::int64_t len = rows ? M : N, width = rows ? N : M, kp = e::slab_pairs(std::min(K, avx512::kKC));
  const std::int64_t step = piece_step(len, rows ? avx512::kMR : avx512::kNR);
  const std::int64_t part_quantum = rows ? avx512::kNR : avx512::kMR;
  const std::int64_t part = round_up((width + 7) / 8, part_quantum);
  const std::size_t words = std::size_t(round_up(width, part_quantum) * kp);
  team_shared_product(
      len, width, K, avx512::kKC, step, part, words,
      [&](std::uint32_t* shared, std::int64_t k0, std::int64_t kn, std::int64_t b, std::int64_t n) {
        std::uint32_t* dst = shared + b * e::slab_pairs(kn);
        if (rows)
          e::pack_b<kRowB>(dst, B, ldb, k0, kn, b, n);
        else
          e::pack_a<kRowA>(dst, A, lda, b, n, k0, kn);
      },
      [&](const std::uint32_t* shared, std::int64_t k0, std::int64_t kn, std::int64_t b, std::int64_t n, float* pack) {
        if (rows)
          e::gemm_slab_rows<kRowA>(b, n, N, k0, kn, A, lda, shared, C, ldc, accumulate || k0 > 0, alpha, pack);
        else
          e::gemm_slab_columns<kRowB>(b, n, M, k0, kn, shared, B, ldb, C, ldc, accumulate || k0 > 0, alpha, pack);
      });
}
#endif

#if defined(NORMLAB_HAVE_BF16GEMM_AMX)
// The same on the tile unit, where packing is not quick beside the products at any size: pieces and
// parts on its 32-row (or column) blocks.
template <bool kRowA, bool kRowB, class TA, class TB>
void amx_shared_gemm(std::int64_t M, std::int64_t N, std::int64_t K, const TA* A, std::int64_t lda, const TB* B,
                     std::int64_t ldb, float* C, std::int64_t ldc, bool accumulate, float alpha) {
  const bool rows = M >= N;
  const std::int64_t len = rows ? M : N, width = rows ? N : M;
  const std::int64_t step = piece_step(len, amx::kBlock);
  const std::int64_t part = round_up((width + 7) / 8, amx::kBlock);
  const std::size_t words = std::size_t(round_up(width, amx::kBlock) * amx::slab_pairs(std::min(K, amx::kKC)));
  team_shared_product(
      len, width, K, amx::kKC, step, part, words,
      [&](std::uint32_t* shared, std::int64_t k0, std::int64_t kn, std::int64_t b, std::int64_t n) {
        const std::int64_t kp = amx::slab_pairs(kn);
        if (rows)
          amx::detail::pack_b<kRowB>(shared + b * kp, B, ldb, k0, kn, b, n, kp);
        else
          amx::detail::pack_a<kRowA>(shared + b * kp, A, lda, b, n, k0, kn, kp);
      },
      [&](const std::uint32_t* shared, std::int64_t k0, std::int64_t kn, std::int64_t b, std::int64_t n, float* pack) {
        if (rows)
          amx::gemm_slab_rows<kRowA>(b, n, N, k0, kn, A, lda, shared, C, ldc, accumulate || k0 > 0, alpha, pack);
        else
          amx::gemm_slab_columns<kRowB>(b, n, M, k0, kn, shared, B, ldb, C, ldc, accumulate || k0 > 0, alpha, pack);
      });
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
  // On AVX-512 BF16 the team's shared packing pays only where the pieces are many (each thread
  // packed the other operand 3 or 4 times). Measured on an AMD EPYC Zen 5, 2 threads, medians of 4–5
  // alternations (a noisy host: ±10%): 2048 × 4096 × 512 (8 pieces) 0.82× and 0.86× the time,
  // 4096 × 512 × 2048 0.90× and 1.02×; 4 pieces 0.91–1.07×; 2 pieces up to 1.32× (256 × 256 × 2048:
  // the slab read from the other core's cache, where each thread's own copy stayed in its L2).
  if (std::max(M, N) >= 6 * 512)
    return avx512_bf16_shared_gemm<kRowA, kRowB>(M, N, K, A, lda, B, ldb, C, ldc, accumulate, alpha);
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
