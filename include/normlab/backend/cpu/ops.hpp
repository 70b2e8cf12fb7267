#pragma once
// CPU backend: the row-wise and GEMM primitives of the model, on Eigen + OpenMP.
//
// Conventions (as in llm.c):
//  * every buffer is row-major; N = rows (B*T tokens), C = d, F = 4d;
//  * weights use PyTorch's Linear layout W[out, in], y = x Wᵀ;
//  * parameter gradients accumulate (+=); activation gradients are written (=);
//  * reductions over rows into a parameter gradient go through column_reduce so
//    results do not depend on the thread count (resume must be bit-exact).
#include <Eigen/Core>

// cpu::gemm drives Eigen's own GEBP product kernels (gebp_kernel, gemm_pack_lhs/rhs,
// their 3.4 signatures); with Eigen 3.3 it would not compile or would misbehave.
static_assert(EIGEN_VERSION_AT_LEAST(3, 4, 0),
              "normlab: the CPU backend needs Eigen 3.4 or later (its GEMM uses Eigen 3.4's product kernels)");
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef NORMLAB_HAVE_OPENBLAS
#include <cblas.h>
#endif
#if defined(__AVX__)
#include <immintrin.h>
#endif
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "normlab/backend/cpu/attention_avx512.hpp"
#include "normlab/backend/cpu/attention_window.hpp"
#include "normlab/backend/cpu/sgemm_avx512.hpp"
#include "normlab/core/aligned.hpp"
#include "normlab/core/pointwise.hpp"

namespace normlab::cpu {

// Below this many elements of work a parallel region costs more than it saves
// (a fork/join is a few microseconds; tiny models would spend most time there).
inline constexpr std::int64_t kParallelGrain = 1 << 15;

inline int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}
inline bool in_parallel() {
#ifdef _OPENMP
  return omp_in_parallel() != 0;
#else
  return false;
#endif
}

// body(i) for i in [0, n), split statically over the OpenMP team when
// `parallel` holds. Serial work never enters an OpenMP region: a region with
// if(false), or one nested in another, still builds a one-thread team, which
// libgomp allocates and frees every time (a step must not allocate).
template <class Body>
void parallel_for(std::int64_t n, bool parallel, Body&& body) {
  if (parallel && n > 1 && max_threads() > 1 && !in_parallel()) {
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) body(i);
  } else {
    for (std::int64_t i = 0; i < n; ++i) body(i);
  }
}

// out[j] += Σ_i term(i, j) over rows i = 0..N−1, for every column j < L.
// Columns go in blocks of 64: each block walks the rows in order reading 64
// contiguous values per row (cache-friendly, unlike a strided walk down one
// column), and every column's sum is still taken over i = 0, 1, … in order,
// so the result does not depend on the thread count (resume must be exact).
template <class T, class Term>
void column_reduce(T* out, std::int64_t N, std::int64_t L, Term&& term) {
  constexpr std::int64_t kBlock = 64;
  const std::int64_t blocks = (L + kBlock - 1) / kBlock;
  parallel_for(blocks, N * L > kParallelGrain, [&](std::int64_t b) {
    const std::int64_t j0 = b * kBlock, j1 = std::min(L, j0 + kBlock);
    T acc[kBlock] = {};
    for (std::int64_t i = 0; i < N; ++i)
      for (std::int64_t j = j0; j < j1; ++j) acc[j - j0] += term(i, j);
    for (std::int64_t j = j0; j < j1; ++j) out[j] += acc[j - j0];
  });
}

namespace detail {
// lane_sum's last step: acc[j] += acc[j + w] for w = 8, 4, 2, 1, returning acc[0].
template <class T>
T halving_sum16(T* acc) {
  for (std::int64_t w = 8; w > 0; w /= 2)
    for (std::int64_t j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}
// The same additions in registers (an addition is commutative, so lo + hi is
// acc[j] + acc[j + w]: the same bits). GCC compiles the loop above as written,
// a store and a reload per step with a loop around them: for a head's 64-long
// dot that tail took most of lane_dot's time (perf, BM_QkNormRope; docs/perf.md,
// change 29).
#if defined(__AVX__)
inline float halving_sum16(float* acc) {
  const __m256 s8 = _mm256_add_ps(_mm256_loadu_ps(acc), _mm256_loadu_ps(acc + 8));  // w = 8
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}
inline double halving_sum16(double* acc) {
  const __m256d lo = _mm256_add_pd(_mm256_loadu_pd(acc), _mm256_loadu_pd(acc + 8));       // w = 8, j < 4
  const __m256d hi = _mm256_add_pd(_mm256_loadu_pd(acc + 4), _mm256_loadu_pd(acc + 12));  // w = 8, 4 ≤ j < 8
  const __m256d s4 = _mm256_add_pd(lo, hi);
  const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
}
#endif
}  // namespace detail

// Σ_{c<n} term(c) in 16 interleaved partial sums (sum j takes c ≡ j mod 16), then
// the partials added pairwise. A plain `s += …` loop is one serial chain of
// float additions that the compiler may not reorder (4 cycles an element here);
// 16 independent sums vectorize without reassociation flags, and the order
// depends on n alone: not on alignment, the thread count or the caller, so a
// fused kernel and its unfused parts still agree bit for bit (docs/perf.md,
// change 20).
template <class T, class Term>
T lane_sum(std::int64_t n, Term&& term) {
  constexpr std::int64_t kLanes = 16;
  T acc[kLanes] = {};
  std::int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (std::int64_t j = 0; j < kLanes; ++j) acc[j] += term(c + j);
  for (std::int64_t j = 0; c + j < n; ++j) acc[j] += term(c + j);
  return detail::halving_sum16(acc);
}
template <class T>
T lane_dot(const T* a, const T* b, std::int64_t n) {
  return lane_sum<T>(n, [&](std::int64_t c) { return a[c] * b[c]; });
}

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using MapMat = Eigen::Map<RowMat<T>>;
template <class T>
using CMapMat = Eigen::Map<const RowMat<T>>;
template <class T>
using StridedMap = Eigen::Map<RowMat<T>, 0, Eigen::OuterStride<>>;
template <class T>
using CStridedMap = Eigen::Map<const RowMat<T>, 0, Eigen::OuterStride<>>;
template <class T>
using ArrayRow = Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>>;
template <class T>
using CArrayRow = Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>>;

// Rows per chunk of the fused kernels that also reduce over rows: each chunk is
// summed in order into its own partial and the partials are added in chunk
// order, so the sums do not depend on the thread count.
inline constexpr std::int64_t kRowChunk = 128;

// ---------------------------------------------------------------- scratch
namespace detail {
// Per-thread scratch that only grows: once a kernel has run at a given size,
// its temporary storage costs no allocation (a steady-state step allocates
// nothing; tests/test_noalloc.cpp). Each (type, slot) pair is its own buffer,
// so a kernel may use one slot while a GEMM it calls uses another.
enum ScratchSlot : int {
  kGemmPack = 0,
  kAttention = 1,
  kRowLoss = 2,
  kColumnPartials = 3,
  kNormPartials = 4,
  kResidualCoef = 5,
  kGemmShared = 6,  // the calling thread's buffer for a GEMM operand both threads read
  kSgemmPack = 7,   // the AVX-512 SGEMM's packed panels (sgemm_avx512.hpp)
  kResidualRow = 8, // a residual rule's per-row terms, recomputed inside a row loop (residual.hpp)
};
template <class T, int Slot>
T* thread_scratch(std::size_t n) {
  thread_local aligned_vector<T> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

}  // namespace detail

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

// The float32 engine, fastest first (docs/perf.md, changes 17 and 22): normlab's
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
}  // namespace detail
#endif

template <class T, int LhsOrder, int RhsOrder>
void gemm(std::int64_t M, std::int64_t N, std::int64_t K, const T* A, std::int64_t lda, const T* B, std::int64_t ldb,
          T* C, std::int64_t ldc, bool accumulate, T alpha = T(1)) {
#ifdef NORMLAB_SERIAL_SGEMM
  // Empty products (nothing to do, or C = 0 when K = 0) take the Eigen path's handling below.
  if constexpr (std::is_same_v<T, float>) {
    if (M > 0 && N > 0 && K > 0) {
      // Inside a region (attention's per-head loops) the calling thread does it all.
      if (in_parallel())
        return detail::serial_sgemm<LhsOrder, RhsOrder>(M, N, K, A, lda, B, ldb, C, ldc, accumulate, alpha);
      // Small products (≤ 2^18 multiply-adds, OpenBLAS's own threading threshold): one call.
      if (double(M) * double(N) * double(K) <= double(1 << 18))
        return detail::serial_sgemm<LhsOrder, RhsOrder>(M, N, K, A, lda, B, ldb, C, ldc, accumulate, alpha);
      // Otherwise C goes in fixed pieces along its longer side, handed out
      // dynamically to the OpenMP team: a thread on a slower (or busier) core takes
      // fewer. The pieces depend on the shape only (one thread runs the same pieces
      // in turn) and each is one serial product, so C has the same bits for any
      // thread count. Each piece packs the other operand again: pieces of ≥ 512
      // rows (or columns) where the shape allows keep that to a few % of the work.
      // Pieces are whole micro-tiles of the engine's kernel where it has them (the
      // AVX-512 kernel's 14 × 32: a 128-row piece would compute 140 rows).
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
      auto piece = [&](std::int64_t p) {
        const std::int64_t b = p * step, n = std::min(step, len - b);
        if (split_rows) {
          const float* Ap = LhsOrder == Eigen::RowMajor ? A + b * lda : A + b;
          detail::serial_sgemm<LhsOrder, RhsOrder>(n, N, K, Ap, lda, B, ldb, C + b * ldc, ldc, accumulate, alpha);
        } else {
          const float* Bp = RhsOrder == Eigen::RowMajor ? B + b : B + b * ldb;
          detail::serial_sgemm<LhsOrder, RhsOrder>(M, n, K, A, lda, Bp, ldb, C + b, ldc, accumulate, alpha);
        }
      };
      if (max_threads() == 1) {
        for (std::int64_t p = 0; p < count; ++p) piece(p);  // the same pieces, in turn
      } else {
#pragma omp parallel
        {
          // Every thread of the team sets up its packing scratch, piece or no
          // piece: with pieces handed out dynamically, a thread that got none in
          // the warm-up steps (descheduled on a busy host) allocated it in a
          // later step (test_noalloc failed 16 times in 100 beside two busy
          // processes).
          detail::reserve_serial_sgemm_scratch();
#pragma omp for schedule(dynamic, 1)
          for (std::int64_t p = 0; p < count; ++p) piece(p);
        }
      }
      return;
    }
  }
#endif
  detail::eigen_gemm<T, LhsOrder, RhsOrder>(M, N, K, A, lda, B, ldb, C, ldc, accumulate, alpha);
}

// out(L) += scale · Σ_rows, with body(i, partial) adding row i's terms into
// `partial` (an L-long row). Rows go in fixed chunks of kRowChunk, each summed
// in order into its own partial, and the partials are added in chunk order:
// contiguous row-wise work, and a result that does not depend on the thread
// count (resume must be exact). The fused kernels that also reduce into a
// parameter gradient go through here.
template <class T, class Body>
void row_chunk_reduce(T* out, std::int64_t N, std::int64_t L, bool parallel, Body&& body, T scale = T(1)) {
  const std::int64_t chunks = (N + kRowChunk - 1) / kRowChunk;
  T* part = detail::thread_scratch<T, detail::kColumnPartials>(std::size_t(chunks * L));
  parallel_for(chunks, parallel, [&](std::int64_t ch) {
    ArrayRow<T> partial(part + ch * L, L);
    partial.setZero();
    for (std::int64_t i = ch * kRowChunk; i < std::min(N, (ch + 1) * kRowChunk); ++i) body(i, partial);
  });
  ArrayRow<T> o(out, L);
  for (std::int64_t ch = 0; ch < chunks; ++ch) o += scale * CArrayRow<T>(part + ch * L, L);
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

// ---------------------------------------------------------------- embedding
// out(N,C) = wte[idx]
template <class T>
void embedding_forward(T* out, const std::int64_t* idx, const T* wte, std::int64_t N, std::int64_t C) {
  parallel_for(N, N * C > kParallelGrain, [&](std::int64_t i) { std::copy_n(wte + idx[i] * C, C, out + i * C); });
}

// dwte[idx] += dout. Repeated tokens must add in a fixed order: threads split
// the columns, and each walks the tokens in order (the same bits as serial).
template <class T>
void embedding_backward(T* dwte, const std::int64_t* idx, const T* dout, std::int64_t N, std::int64_t C) {
  constexpr std::int64_t kBlock = 64;
  const std::int64_t blocks = (C + kBlock - 1) / kBlock;
  parallel_for(blocks, N * C > kParallelGrain, [&](std::int64_t b) {
    const std::int64_t c0 = b * kBlock, c1 = std::min(C, c0 + kBlock);
    for (std::int64_t i = 0; i < N; ++i) {
      T* row = dwte + idx[i] * C;
      const T* g = dout + i * C;
      for (std::int64_t c = c0; c < c1; ++c) row[c] += g[c];
    }
  });
}

// ---------------------------------------------------------------- RMSNorm
// y = x / sqrt(mean(x²) + eps) ⊙ w ; rstd(N) saved for backward
template <class T>
void rmsnorm_forward(T* y, T* rstd, const T* x, const T* w, std::int64_t N, std::int64_t C, T eps) {
  parallel_for(N, N * C > kParallelGrain, [&](std::int64_t i) {
    const T* xi = x + i * C;
    const T ss = lane_dot(xi, xi, C);
    const T r = T(1) / std::sqrt(ss / T(C) + eps);
    rstd[i] = r;
    T* yi = y + i * C;
    for (std::int64_t c = 0; c < C; ++c) yi[c] = xi[c] * r * w[c];
  });
}

// dx = r (dy⊙w) − x r³/C Σ(dy⊙w⊙x);  dw += Σ_rows dy ⊙ x r
template <class T>
void rmsnorm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, std::int64_t N,
                      std::int64_t C) {
  parallel_for(N, N * C > kParallelGrain, [&](std::int64_t i) {
    const T* xi = x + i * C;
    const T* gi = dy + i * C;
    const T r = rstd[i];
    const T dot = lane_sum<T>(C, [&](std::int64_t c) { return gi[c] * w[c] * xi[c]; });
    const T k = r * r * r * dot / T(C);
    T* di = dx + i * C;
    for (std::int64_t c = 0; c < C; ++c) di[c] = r * gi[c] * w[c] - k * xi[c];
  });
  column_reduce(dw, N, C, [&](std::int64_t i, std::int64_t c) { return dy[i * C + c] * x[i * C + c] * rstd[i]; });
}

// ---------------------------------------------------------------- row L2 normalisation
// Rows of length L (a token's d, or one head's dk): y = x/‖x‖, norm saved. No epsilon, as the reference.
template <class T>
void l2norm_rows_forward(T* y, T* norm, const T* x, std::int64_t rows, std::int64_t L) {
  parallel_for(rows, rows * L > kParallelGrain, [&](std::int64_t i) {
    const T* xi = x + i * L;
    const T n = std::sqrt(lane_dot(xi, xi, L));
    norm[i] = n;
    const T inv = T(1) / n;
    T* yi = y + i * L;
    for (std::int64_t c = 0; c < L; ++c) yi[c] = xi[c] * inv;
  });
}

// dx = (dy − y (y·dy)) / ‖x‖ ; dx may alias dy
template <class T>
void l2norm_rows_backward(T* dx, const T* dy, const T* y, const T* norm, std::int64_t rows, std::int64_t L) {
  parallel_for(rows, rows * L > kParallelGrain, [&](std::int64_t i) {
    const T* yi = y + i * L;
    const T* gi = dy + i * L;
    const T dot = lane_dot(yi, gi, L);
    const T inv = T(1) / norm[i];
    T* di = dx + i * L;
    for (std::int64_t c = 0; c < L; ++c) di[c] = (gi[c] - yi[c] * dot) * inv;
  });
}

// ---------------------------------------------------------------- RoPE (rotate-half)
// Table (T, dk/2) of cos and sin of p·θᵢ, θᵢ = base^(−2i/dk), computed in double.
template <class T>
void rope_table(T* cosv, T* sinv, std::int64_t Tn, std::int64_t dk, double base = 10000.0) {
  const std::int64_t h = dk / 2;
  for (std::int64_t p = 0; p < Tn; ++p)
    for (std::int64_t i = 0; i < h; ++i) {
      const double theta = std::pow(base, -2.0 * double(i) / double(dk));
      cosv[p * h + i] = T(std::cos(double(p) * theta));
      sinv[p * h + i] = T(std::sin(double(p) * theta));
    }
}

// One head's vector v (2h) rotated in place by the angles of one position:
// pairs (i, i+h); sgn = −1 applies the transpose rotation (the backward).
template <class T>
inline void rotate_half(T* v, const T* cosp, const T* sinp, std::int64_t h, T sgn) {
  for (std::int64_t i = 0; i < h; ++i) {
    const T c = cosp[i], s = sgn * sinp[i];
    const T a = v[i], b = v[i + h];
    v[i] = a * c - b * s;
    v[i + h] = b * c + a * s;
  }
}

// In place on x (B,T,H,dk), positions pos0 … pos0+T−1. inverse=true applies the
// transpose rotation (the backward).
template <class T>
void rope_apply(T* x, const T* cosv, const T* sinv, std::int64_t B, std::int64_t Tn, std::int64_t H,
                std::int64_t dk, bool inverse, std::int64_t pos0 = 0) {
  const std::int64_t h = dk / 2;
  const T sgn = inverse ? T(-1) : T(1);
  parallel_for(B * Tn, B * Tn * H * dk > kParallelGrain, [&](std::int64_t bt) {
    const std::int64_t p = pos0 + bt % Tn;  // pos0: first position (incremental decoding)
    for (std::int64_t hd = 0; hd < H; ++hd) {
      rotate_half(x + (bt * H + hd) * dk, cosv + p * h, sinv + p * h, h, sgn);
    }
  });
}

// ---------------------------------------------------------------- fused QK path (nGPT)
// Per token row (C = H·dk) at position pos0 + t: RoPE in place on x (x keeps
// the rotated values), then per head xh = x/‖x‖ (norm saved) and xs = xh ⊙ s.
// One pass over the row instead of three (rope_apply, l2norm_rows_forward,
// scale_columns), with the same arithmetic.
template <class T>
void rope_l2norm_scale_forward(T* x, T* xh, T* norm, T* xs, const T* s, const T* cosv, const T* sinv,
                               std::int64_t B, std::int64_t Tn, std::int64_t H, std::int64_t dk,
                               std::int64_t pos0 = 0) {
  const std::int64_t C = H * dk, h = dk / 2;
  parallel_for(B * Tn, B * Tn * C > kParallelGrain, [&](std::int64_t bt) {
    const std::int64_t p = pos0 + bt % Tn;
    for (std::int64_t hd = 0; hd < H; ++hd) {
      const std::int64_t o = bt * C + hd * dk;
      T* v = x + o;
      rotate_half(v, cosv + p * h, sinv + p * h, h, T(1));
      const T n = std::sqrt(lane_dot(v, v, dk));
      norm[bt * H + hd] = n;
      const T inv = T(1) / n;
      for (std::int64_t c = 0; c < dk; ++c) {
        xh[o + c] = v[c] * inv;
        xs[o + c] = xh[o + c] * s[hd * dk + c];
      }
    }
  });
}

// Backward of rope_l2norm_scale_forward, in place on dx (in: d xs; out: d x
// before RoPE), with ds += c · Σ_rows dxs ⊙ xh (c: the scale's
// re-parameterisation constant; summed by row_chunk_reduce).
template <class T>
void rope_l2norm_scale_backward(T* dx, T* ds, const T* xh, const T* norm, const T* s, const T* cosv,
                                const T* sinv, std::int64_t B, std::int64_t Tn, std::int64_t H, std::int64_t dk,
                                T c) {
  const std::int64_t N = B * Tn, C = H * dk, h = dk / 2;
  CArrayRow<T> sc(s, C);
  row_chunk_reduce(ds, N, C, N * C > kParallelGrain, [&](std::int64_t i, ArrayRow<T>& partial) {
    T* g = dx + i * C;
    const T* y = xh + i * C;
    ArrayRow<T> gr(g, C);
    partial += gr * CArrayRow<T>(y, C);
    gr *= sc;
    const std::int64_t p = i % Tn;
    for (std::int64_t hd = 0; hd < H; ++hd) {
      T* gh = g + hd * dk;
      const T* yh = y + hd * dk;
      const T dot = lane_dot(yh, gh, dk);
      const T inv = T(1) / norm[i * H + hd];
      for (std::int64_t k = 0; k < dk; ++k) gh[k] = (gh[k] - yh[k] * dot) * inv;
      rotate_half(gh, cosv + p * h, sinv + p * h, h, T(-1));
    }
  }, c);
}

// ---------------------------------------------------------------- causal attention
// q,k,v,y: (B,T,H,dk) i.e. (B*T, C); lse: (B,H,T), the log-sum-exp of each row
// of scaled scores, which is all backward keeps besides q, k, v and y.
//
// Blocked ("flash") causal attention: per (batch, head), query blocks of
// kAttnBlock rows meet key blocks up to the diagonal with an online softmax.
// The T×T scores never exist (memory O(block²) per thread), and blocks above
// the diagonal are skipped, half the FLOPs of the dense masked product.
// Backward recomputes each score block from q, k and lse.
inline constexpr std::int64_t kAttnBlock = 64;

// window > 0: causal sliding window, query t attends to keys t−W+1 … t; both
// paths skip key blocks wholly before a query block's windows. A window of at
// least T masks nothing more than causality and runs as no window.
template <class T>
void attention_forward(T* y, T* lse, const T* q, const T* k, const T* v, std::int64_t B, std::int64_t Tn,
                       std::int64_t H, std::int64_t dk, T scale, std::int64_t window = 0) {
  constexpr std::int64_t Bk = kAttnBlock;
  const std::int64_t C = H * dk;
  if (window >= Tn) window = 0;
#if defined(NORMLAB_HAVE_ATTENTION_AVX512)
  if constexpr (std::is_same_v<T, float>) {
    static_assert(avx512::kBlock == kAttnBlock);
    parallel_for(B * H, B * H * Tn * Tn * dk > kParallelGrain, [&](std::int64_t bh) {
      const std::int64_t b = bh / H, hd = bh % H, off = b * Tn * C + hd * dk;
      float* scratch =
          detail::thread_scratch<float, detail::kAttention>(std::size_t(avx512::attention_forward_scratch(Tn, dk)));
      avx512::attention_head_forward(y + off, lse + bh * Tn, q + off, k + off, v + off, Tn, C, dk, scale, scratch,
                                     window);
    });
    return;
  }
#endif
  parallel_for(B * H, B * H * Tn * Tn * dk > kParallelGrain, [&](std::int64_t bh) {
    const std::int64_t b = bh / H, hd = bh % H, off = b * Tn * C + hd * dk;
    T* S = detail::thread_scratch<T, detail::kAttention>(std::size_t(Bk * Bk + Bk * dk + 2 * Bk));
    T* O = S + Bk * Bk;  // (nq, dk) unnormalized output
    T* m = O + Bk * dk;  // running row maxima
    T* l = m + Bk;       // running row sums
    for (std::int64_t i0 = 0; i0 < Tn; i0 += Bk) {
      const std::int64_t nq = std::min(Bk, Tn - i0);
      std::fill_n(O, nq * dk, T(0));
      std::fill_n(m, nq, -std::numeric_limits<T>::infinity());
      std::fill_n(l, nq, T(0));
      for (std::int64_t j0 = window_first_block(i0, window, Bk); j0 < i0 + nq; j0 += Bk) {
        const std::int64_t nk = std::min({Bk, Tn - j0, i0 + nq - j0});
        gemm<T, Eigen::RowMajor, Eigen::ColMajor>(nq, nk, dk, q + off + i0 * C, C, k + off + j0 * C, C, S, Bk, false,
                                                  scale);
        for (std::int64_t r = 0; r < nq; ++r) {
          const std::int64_t ncol = std::min(nk, i0 + r - j0 + 1);  // keys ≤ this query (≥ 1: j0 ≤ i0)
          const std::int64_t lo = std::max<std::int64_t>(0, window_first_key(i0 + r, window) - j0);
          if (lo >= ncol) {  // the whole block lies before this query's window
            std::fill_n(S + r * Bk, nk, T(0));
            continue;
          }
          ArrayRow<T> row(S + r * Bk + lo, ncol - lo);
          const T mx = std::max(m[r], row.maxCoeff());
          const T corr = std::exp(m[r] - mx);  // 0 on the first block (m = −∞)
          row = (row - mx).exp();
          std::fill(S + r * Bk, S + r * Bk + lo, T(0));
          std::fill(S + r * Bk + ncol, S + r * Bk + nk, T(0));
          l[r] = l[r] * corr + row.sum();
          if (corr != T(1)) ArrayRow<T>(O + r * dk, dk) *= corr;
          m[r] = mx;
        }
        gemm<T, Eigen::RowMajor, Eigen::RowMajor>(nq, dk, nk, S, Bk, v + off + j0 * C, C, O, dk, true);
      }
      for (std::int64_t r = 0; r < nq; ++r) {
        const T inv = T(1) / l[r];
        T* yr = y + off + (i0 + r) * C;
        for (std::int64_t c = 0; c < dk; ++c) yr[c] = O[r * dk + c] * inv;
        lse[bh * Tn + i0 + r] = m[r] + std::log(l[r]);
      }
    }
  });
}

// With P = softmax(scale·QKᵀ) recomputed per block from lse and D = rowsum(dY ⊙ Y):
// dS = P ⊙ (dY Vᵀ − D); dq = scale dS K; dk = scale dSᵀ Q; dv = Pᵀ dY.
template <class T>
void attention_backward(T* dq, T* dk_, T* dv, const T* dy, const T* y, const T* lse, const T* q, const T* k,
                        const T* v, std::int64_t B, std::int64_t Tn, std::int64_t H, std::int64_t dk, T scale,
                        std::int64_t window = 0) {
  constexpr std::int64_t Bk = kAttnBlock;
  const std::int64_t C = H * dk;
  if (window >= Tn) window = 0;
  // Both paths start a head with D = rowsum(dY ⊙ Y); the generic one also zeroes
  // the head's columns of dq, dk, dv (it accumulates into them; the AVX-512
  // path writes each row block with its first product instead).
  auto head_rowsums = [&](T* D, std::int64_t off) {
    for (std::int64_t t = 0; t < Tn; ++t) D[t] = lane_dot(dy + off + t * C, y + off + t * C, dk);
  };
#if defined(NORMLAB_HAVE_ATTENTION_AVX512)
  if constexpr (std::is_same_v<T, float>) {
    parallel_for(B * H, B * H * Tn * Tn * dk > kParallelGrain, [&](std::int64_t bh) {
      const std::int64_t b = bh / H, hd = bh % H, off = b * Tn * C + hd * dk;
      const std::int64_t head = avx512::attention_backward_scratch(Tn, dk);
      float* scratch = detail::thread_scratch<float, detail::kAttention>(std::size_t(head + Tn));
      float* D = scratch + head;
      head_rowsums(D, off);
      avx512::attention_head_backward(dq + off, dk_ + off, dv + off, dy + off, D, lse + bh * Tn, q + off, k + off,
                                      v + off, Tn, C, dk, scale, scratch, window);
    });
    return;
  }
#endif
  parallel_for(B * H, B * H * Tn * Tn * dk > kParallelGrain, [&](std::int64_t bh) {
    const std::int64_t b = bh / H, hd = bh % H, off = b * Tn * C + hd * dk;
    T* Pm = detail::thread_scratch<T, detail::kAttention>(std::size_t(2 * Bk * Bk + Tn));
    T* dS = Pm + Bk * Bk;
    T* D = dS + Bk * Bk;
    head_rowsums(D, off);
    for (std::int64_t t = 0; t < Tn; ++t) {
      std::fill_n(dq + off + t * C, dk, T(0));
      std::fill_n(dk_ + off + t * C, dk, T(0));
      std::fill_n(dv + off + t * C, dk, T(0));
    }
    for (std::int64_t i0 = 0; i0 < Tn; i0 += Bk) {
      const std::int64_t nq = std::min(Bk, Tn - i0);
      const T* Qi = q + off + i0 * C;
      const T* dYi = dy + off + i0 * C;
      for (std::int64_t j0 = window_first_block(i0, window, Bk); j0 < i0 + nq; j0 += Bk) {
        const std::int64_t nk = std::min({Bk, Tn - j0, i0 + nq - j0});
        const T* Kj = k + off + j0 * C;
        const T* Vj = v + off + j0 * C;
        gemm<T, Eigen::RowMajor, Eigen::ColMajor>(nq, nk, dk, Qi, C, Kj, C, Pm, Bk, false, scale);
        gemm<T, Eigen::RowMajor, Eigen::ColMajor>(nq, nk, dk, dYi, C, Vj, C, dS, Bk, false);
        for (std::int64_t r = 0; r < nq; ++r) {
          const std::int64_t ncol = std::min(nk, i0 + r - j0 + 1);
          const std::int64_t lo = std::min(ncol, std::max<std::int64_t>(0, window_first_key(i0 + r, window) - j0));
          ArrayRow<T> p(Pm + r * Bk + lo, ncol - lo), ds(dS + r * Bk + lo, ncol - lo);
          p = (p - lse[bh * Tn + i0 + r]).exp();
          ds = scale * p * (ds - D[i0 + r]);
          std::fill(Pm + r * Bk, Pm + r * Bk + lo, T(0));
          std::fill(dS + r * Bk, dS + r * Bk + lo, T(0));
          std::fill(Pm + r * Bk + ncol, Pm + r * Bk + nk, T(0));
          std::fill(dS + r * Bk + ncol, dS + r * Bk + nk, T(0));
        }
        gemm<T, Eigen::ColMajor, Eigen::RowMajor>(nk, dk, nq, Pm, Bk, dYi, C, dv + off + j0 * C, C, true);
        gemm<T, Eigen::RowMajor, Eigen::RowMajor>(nq, dk, nk, dS, Bk, Kj, C, dq + off + i0 * C, C, true);
        gemm<T, Eigen::ColMajor, Eigen::RowMajor>(nk, dk, nq, dS, Bk, Qi, C, dk_ + off + j0 * C, C, true);
      }
    }
  });
}

// The probabilities themselves, (B,H,T,T) with zeros outside the mask, from
// q, k and the lse of a forward pass: for diagnostics and tests only.
template <class T>
void attention_probs(T* P, const T* lse, const T* q, const T* k, std::int64_t B, std::int64_t Tn, std::int64_t H,
                     std::int64_t dk, T scale, std::int64_t window = 0) {
  const std::int64_t C = H * dk;
  parallel_for(B * H, B * H * Tn * Tn * dk > kParallelGrain, [&](std::int64_t bh) {
    const std::int64_t b = bh / H, hd = bh % H, off = b * Tn * C + hd * dk;
    for (std::int64_t t = 0; t < Tn; ++t) {
      T* row = P + (bh * Tn + t) * Tn;
      for (std::int64_t s = 0; s < Tn; ++s) {
        if (s > t || s < window_first_key(t, window)) {
          row[s] = T(0);
          continue;
        }
        T dot = 0;
        for (std::int64_t c = 0; c < dk; ++c) dot += q[off + t * C + c] * k[off + s * C + c];
        row[s] = std::exp(scale * dot - lse[bh * Tn + t]);
      }
    }
  });
}

// One query (1,H,dk) against cached keys/values (S,H,dk) for positions 0..S−1:
// incremental decoding. y (1,H,dk); p: scratch (S).
template <class T>
void attention_decode(T* y, T* p, const T* q, const T* kc, const T* vc, std::int64_t S, std::int64_t H,
                      std::int64_t dk, T scale) {
  const std::int64_t C = H * dk;
  for (std::int64_t hd = 0; hd < H; ++hd) {
    T mx = -std::numeric_limits<T>::infinity();
    for (std::int64_t s = 0; s < S; ++s) {
      T dot = 0;
      for (std::int64_t i = 0; i < dk; ++i) dot += q[hd * dk + i] * kc[s * C + hd * dk + i];
      p[s] = dot * scale;
      mx = std::max(mx, p[s]);
    }
    T sum = 0;
    for (std::int64_t s = 0; s < S; ++s) sum += (p[s] = std::exp(p[s] - mx));
    for (std::int64_t i = 0; i < dk; ++i) y[hd * dk + i] = 0;
    for (std::int64_t s = 0; s < S; ++s) {
      const T w = p[s] / sum;
      for (std::int64_t i = 0; i < dk; ++i) y[hd * dk + i] += w * vc[s * C + hd * dk + i];
    }
  }
}

// ---------------------------------------------------------------- grouped-query attention
// Grouped-query attention runs the attention kernels on key/value rows widened
// to every query head: x (N, Hkv·dk) -> y (N, H·dk), query head h reading
// kv head h / (H/Hkv); the backward sums each group's gradients back.
template <class T>
void kv_repeat(T* y, const T* x, std::int64_t N, std::int64_t H, std::int64_t Hkv, std::int64_t dk) {
  const std::int64_t group = H / Hkv;
  parallel_for(N, N * H * dk > kParallelGrain, [&](std::int64_t i) {
    for (std::int64_t h = 0; h < H; ++h)
      std::copy_n(x + (i * Hkv + h / group) * dk, dk, y + (i * H + h) * dk);
  });
}
template <class T>
void kv_group_sum(T* dx, const T* dy, std::int64_t N, std::int64_t H, std::int64_t Hkv, std::int64_t dk) {
  const std::int64_t group = H / Hkv;
  parallel_for(N, N * H * dk > kParallelGrain, [&](std::int64_t i) {
    for (std::int64_t g = 0; g < Hkv; ++g) {
      T* out = dx + (i * Hkv + g) * dk;
      std::copy_n(dy + (i * H + g * group) * dk, dk, out);
      for (std::int64_t r = 1; r < group; ++r) {
        const T* in = dy + (i * H + g * group + r) * dk;
        for (std::int64_t c = 0; c < dk; ++c) out[c] += in[c];
      }
    }
  });
}

// ---------------------------------------------------------------- plain activations
// act = f(u) elementwise over n values, and du = f'(u) ⊙ dact (Pointwise names f).
template <class T>
inline T pointwise_value(Pointwise fn, T u) {
  switch (fn) {
    case Pointwise::relu2: return u > T(0) ? u * u : T(0);
    case Pointwise::gelu_tanh: {
      const T c = T(0.7978845608028654), a = T(0.044715);  // √(2/π)
      return T(0.5) * u * (T(1) + std::tanh(c * (u + a * u * u * u)));
    }
    case Pointwise::gelu_erf: return T(0.5) * u * (T(1) + std::erf(u * T(0.7071067811865476)));
  }
  return T(0);
}
template <class T>
inline T pointwise_derivative(Pointwise fn, T u) {
  switch (fn) {
    case Pointwise::relu2: return u > T(0) ? T(2) * u : T(0);
    case Pointwise::gelu_tanh: {
      const T c = T(0.7978845608028654), a = T(0.044715);
      const T th = std::tanh(c * (u + a * u * u * u));
      return T(0.5) * (T(1) + th) + T(0.5) * u * (T(1) - th * th) * c * (T(1) + T(3) * a * u * u);
    }
    case Pointwise::gelu_erf: {
      const T pdf = std::exp(T(-0.5) * u * u) * T(0.3989422804014327);  // 1/√(2π)
      return T(0.5) * (T(1) + std::erf(u * T(0.7071067811865476))) + u * pdf;
    }
  }
  return T(0);
}
// The chunk loops below switch once per chunk, not per value, and write each
// function as Eigen array expressions, so relu² and GELU (tanh) run on
// vectors (Eigen's tanh is vectorized for float; for double it calls
// std::tanh per value, as pointwise_value does). GELU (erf) stays a scalar
// loop: Eigen's core has no vectorized erf.
template <class T>
void pointwise_forward(Pointwise fn, T* act, const T* u, std::int64_t n) {
  constexpr std::int64_t chunk = 4096;
  parallel_for((n + chunk - 1) / chunk, n > kParallelGrain, [&](std::int64_t c) {
    const std::int64_t b = c * chunk, m = std::min(n, b + chunk) - b;
    CArrayRow<T> x(u + b, m);
    ArrayRow<T> y(act + b, m);
    switch (fn) {
      case Pointwise::relu2: y = (x > T(0)).select(x * x, T(0)); break;
      case Pointwise::gelu_tanh: {
        const T k = T(0.7978845608028654), a = T(0.044715);  // √(2/π)
        y = T(0.5) * x * (T(1) + (k * (x + a * x * x * x)).tanh());
        break;
      }
      case Pointwise::gelu_erf:
        for (std::int64_t i = 0; i < m; ++i) y[i] = pointwise_value(fn, x[i]);
        break;
    }
  });
}
template <class T>
void pointwise_backward(Pointwise fn, T* du, const T* dact, const T* u, std::int64_t n) {
  constexpr std::int64_t chunk = 4096;
  parallel_for((n + chunk - 1) / chunk, n > kParallelGrain, [&](std::int64_t c) {
    const std::int64_t b = c * chunk, m = std::min(n, b + chunk) - b;
    CArrayRow<T> x(u + b, m), d(dact + b, m);
    ArrayRow<T> g(du + b, m);
    switch (fn) {
      case Pointwise::relu2: g = (x > T(0)).select(T(2) * x, T(0)) * d; break;
      case Pointwise::gelu_tanh: {
        const T k = T(0.7978845608028654), a = T(0.044715);
        g = (k * (x + a * x * x * x)).tanh();  // th, then the derivative over it
        g = (T(0.5) * (T(1) + g) + T(0.5) * x * (T(1) - g * g) * k * (T(1) + T(3) * a * x * x)) * d;
        break;
      }
      case Pointwise::gelu_erf:
        for (std::int64_t i = 0; i < m; ++i) g[i] = pointwise_derivative(fn, x[i]) * d[i];
        break;
    }
  });
}

// ---------------------------------------------------------------- SwiGLU
// uv (N, 2F) = [u | g]; act (N,F) = u ⊙ silu(g)
template <class T>
inline T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// Row-wise with Eigen arrays so exp() is vectorized (the scalar loop was
// exp-bound at ~4 GB/s; docs/perf.md).
template <class T>
void swiglu_forward(T* act, const T* uv, std::int64_t N, std::int64_t F) {
  parallel_for(N, N * F > kParallelGrain, [&](std::int64_t i) {
    CArrayRow<T> u(uv + i * 2 * F, F), g(uv + i * 2 * F + F, F);
    ArrayRow<T>(act + i * F, F) = u * g / (T(1) + (-g).exp());
  });
}

namespace detail {
// The SwiGLU backward rows below run as one loop over Eigen's packets where
// every row starts on a packet boundary, instead of three to seven array
// statements each walking the row: at F = 1024 the scaled kernel's rows (u, g,
// dact, du, dg, s and the 2F partial: 36 KiB) overflowed L1 between statements
// (docs/perf.md change 28). The loop applies the same packet operations
// (pmul, padd, psub, pdiv, pexp) to the same operands in the same order as the
// Eigen expressions it replaces, which evaluate a packet at a time from the
// first element when their destination is packet-aligned and the length a
// whole number of packets: the bits are the same. Elsewhere the Eigen
// expressions run as before.
template <class T>
using Packet = typename Eigen::internal::packet_traits<T>::type;
template <class T>
inline constexpr std::int64_t kPacketSize = Eigen::internal::unpacket_traits<Packet<T>>::size;

template <class T>
bool packet_rows(std::int64_t F, const void* p) {
  constexpr std::uintptr_t align = sizeof(Packet<T>);
  return F % kPacketSize<T> == 0 && reinterpret_cast<std::uintptr_t>(p) % align == 0;
}

// dx_u = da ⊙ x_g ⊙ σ(x_g), dx_g = da ⊙ x_u ⊙ σ(x_g) ⊙ (1 + x_g (1 − σ(x_g))) for one
// packet; x_u = u ⊙ su and x_g = g ⊙ sg are formed by the caller (plain SwiGLU
// passes u and g themselves).
template <class P>
inline void swiglu_packet_grads(const P& da, const P& xu, const P& xg, P& dxu, P& dxg) {
  using namespace Eigen::internal;
  const P one = pset1<P>(1);
  const P sig = pdiv(one, padd(one, pexp(pnegate(xg))));
  dxu = pmul(pmul(da, xg), sig);
  dxg = pmul(pmul(pmul(da, xu), sig), padd(one, pmul(xg, psub(one, sig))));
}
}  // namespace detail

// du = dact ⊙ silu(g); dg = dact ⊙ u ⊙ σ(g)(1 + g(1 − σ(g)))
template <class T>
void swiglu_backward(T* duv, const T* dact, const T* uv, std::int64_t N, std::int64_t F) {
  using P = detail::Packet<T>;
  constexpr std::int64_t W = detail::kPacketSize<T>;
  const bool packets = detail::packet_rows<T>(F, duv);
  parallel_for(N, N * F > kParallelGrain, [&](std::int64_t i) {
    if (packets) {
      using namespace Eigen::internal;
      const T *u = uv + i * 2 * F, *g = u + F, *da = dact + i * F;
      T *du = duv + i * 2 * F, *dg = du + F;
      for (std::int64_t j = 0; j < F; j += W) {
        P dxu, dxg;
        detail::swiglu_packet_grads(ploadu<P>(da + j), ploadu<P>(u + j), ploadu<P>(g + j), dxu, dxg);
        pstore(du + j, dxu);
        pstore(dg + j, dxg);
      }
      return;
    }
    CArrayRow<T> u(uv + i * 2 * F, F), g(uv + i * 2 * F + F, F), da(dact + i * F, F);
    // σ(g) goes through the dg half of the output (no temporary): each
    // element of it is read before it is overwritten.
    ArrayRow<T> du(duv + i * 2 * F, F), dg(duv + i * 2 * F + F, F);
    dg = T(1) / (T(1) + (-g).exp());
    du = da * g * dg;
    dg = da * u * dg * (T(1) + g * (T(1) - dg));
  });
}

// Scaled SwiGLU (nGPT): x = uv ⊙ s with s (2F) = [s_u | s_g]; act = x_u ⊙ silu(x_g).
// One pass, the scaled pre-activation is never stored.
template <class T>
void scaled_swiglu_forward(T* act, const T* uv, const T* s, std::int64_t N, std::int64_t F) {
  CArrayRow<T> su(s, F), sg(s + F, F);
  parallel_for(N, N * F > kParallelGrain, [&](std::int64_t i) {
    CArrayRow<T> u(uv + i * 2 * F, F), g(uv + i * 2 * F + F, F);
    ArrayRow<T>(act + i * F, F) = (u * su) * (g * sg) / (T(1) + (-(g * sg)).exp());
  });
}

// Backward of scaled_swiglu_forward in one pass: duv = dx ⊙ s and
// ds += c · Σ_rows dx ⊙ uv, with dx the gradient at the scaled pre-activation
// (c: the scale's re-parameterisation constant). The s_uv sum goes by row
// chunks (row_chunk_reduce): a column-blocked walk over a 2F-wide matrix
// misses the TLB on every row.
template <class T>
void scaled_swiglu_backward(T* duv, T* ds, const T* dact, const T* uv, const T* s, std::int64_t N, std::int64_t F,
                            T c) {
  using P = detail::Packet<T>;
  constexpr std::int64_t W = detail::kPacketSize<T>;
  // row_chunk_reduce's partials are packet-aligned rows of 2F when F is whole packets.
  const bool packets = detail::packet_rows<T>(F, duv);
  CArrayRow<T> su(s, F), sg(s + F, F);
  row_chunk_reduce(ds, N, 2 * F, N * F > kParallelGrain, [&](std::int64_t i, ArrayRow<T>& partial) {
    if (packets && detail::packet_rows<T>(F, partial.data())) {
      using namespace Eigen::internal;
      const T *u = uv + i * 2 * F, *g = u + F, *da = dact + i * F;
      T *du = duv + i * 2 * F, *dg = du + F, *pu = partial.data(), *pg = pu + F;
      for (std::int64_t j = 0; j < F; j += W) {
        const P uj = ploadu<P>(u + j), gj = ploadu<P>(g + j), suj = ploadu<P>(s + j), sgj = ploadu<P>(s + F + j);
        P dxu, dxg;
        detail::swiglu_packet_grads(ploadu<P>(da + j), pmul(uj, suj), pmul(gj, sgj), dxu, dxg);
        pstore(pu + j, padd(pload<P>(pu + j), pmul(dxu, uj)));
        pstore(pg + j, padd(pload<P>(pg + j), pmul(dxg, gj)));
        pstore(du + j, pmul(dxu, suj));
        pstore(dg + j, pmul(dxg, sgj));
      }
      return;
    }
    CArrayRow<T> u(uv + i * 2 * F, F), g(uv + i * 2 * F + F, F), da(dact + i * F, F);
    ArrayRow<T> du(duv + i * 2 * F, F), dg(duv + i * 2 * F + F, F);
    dg = T(1) / (T(1) + (-(g * sg)).exp());                      // σ(x_g), parked in dg
    du = da * (g * sg) * dg;                                     // d x_u = da ⊙ silu(x_g)
    dg = da * (u * su) * dg * (T(1) + (g * sg) * (T(1) - dg));  // d x_g
    partial.head(F) += du * u;
    partial.tail(F) += dg * g;
    du *= su;
    dg *= sg;
  }, c);
}

// ---------------------------------------------------------------- per-column scale
// y(N,L) = x ⊙ s (s broadcast over rows); y may alias x.
template <class T>
void scale_columns(T* y, const T* x, const T* s, std::int64_t N, std::int64_t L) {
  parallel_for(N, N * L > kParallelGrain, [&](std::int64_t i) {
    for (std::int64_t j = 0; j < L; ++j) y[i * L + j] = x[i * L + j] * s[j];
  });
}

// ds(L) += c · Σ_rows dy ⊙ x  (deterministic, see column_reduce)
template <class T>
void column_dot_accumulate(T* ds, const T* dy, const T* x, std::int64_t N, std::int64_t L, T c = T(1)) {
  column_reduce(ds, N, L, [&](std::int64_t i, std::int64_t j) { return c * (dy[i * L + j] * x[i * L + j]); });
}

// ds(L) += Σ_rows dy ⊙ (a − b)
template <class T>
void column_dot_accumulate_diff(T* ds, const T* dy, const T* a, const T* b, std::int64_t N, std::int64_t L) {
  column_reduce(ds, N, L, [&](std::int64_t i, std::int64_t j) {
    const std::int64_t k = i * L + j;
    return dy[k] * (a[k] - b[k]);
  });
}

// ---------------------------------------------------------------- cross-entropy
// Mean over N rows. Returns the loss (accumulated in double); if dlogits is not
// null writes d loss / d logits = (softmax − onehot)/N. dlogits may alias logits.
template <class T>
double cross_entropy(T* dlogits, const T* logits, const std::int64_t* targets, std::int64_t N, std::int64_t V) {
  double* row_loss = detail::thread_scratch<double, detail::kRowLoss>(static_cast<std::size_t>(N));
  parallel_for(N, N * V > kParallelGrain, [&](std::int64_t i) {
    const T* l = logits + i * V;
    CArrayRow<T> row(l, V);
    const T mx = row.maxCoeff();
    const T lse = mx + std::log((row - mx).exp().sum());
    row_loss[i] = double(lse - l[targets[i]]);
    if (dlogits) {
      const T invN = T(1) / T(N);
      ArrayRow<T>(dlogits + i * V, V) = (row - lse).exp() * invN;
      dlogits[i * V + targets[i]] -= invN;
    }
  });
  double total = 0;
  for (std::int64_t i = 0; i < N; ++i) total += row_loss[i];
  return total / double(N);
}

}  // namespace normlab::cpu

#ifdef NORMLAB_PREBUILT_CPU_OPS
// Compiled once in the normlab_cpu_ops library (src/cpu_ops.cpp).
#include "normlab/backend/cpu/op_instances.hpp"
namespace normlab::cpu {
NORMLAB_CPU_OP_INSTANCES(extern, float)
NORMLAB_CPU_OP_INSTANCES(extern, double)
}  // namespace normlab::cpu
#endif
