#pragma once
// What every CPU op builds on: OpenMP loops that never allocate, sums whose order
// does not depend on the thread count, Eigen maps of raw buffers and per-thread
// scratch. Apart from the ops so each op family includes only what it uses.
#include <Eigen/Core>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX__)
#include <immintrin.h>
#endif
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "normlab/core/aligned.hpp"

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

// body(i, thread) for i in [0, n) over a team of `team` threads (≥ 2, at most
// the default team), handed out dynamically: independent tasks of unequal size.
template <class Body>
void parallel_tasks(std::int64_t n, int team, Body&& body) {
#ifdef _OPENMP
  // The default team size when it is asked for: libgomp keeps that team.
  if (team >= max_threads()) {
#pragma omp parallel
    {
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t i = 0; i < n; ++i) body(i, omp_get_thread_num());
    }
  } else {
#pragma omp parallel num_threads(team)
    {
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t i = 0; i < n; ++i) body(i, omp_get_thread_num());
    }
  }
#else
  (void)team;
  for (std::int64_t i = 0; i < n; ++i) body(i, 0);
#endif
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
// dot that tail took most of lane_dot's time (perf, BM_QkNormRope; docs/perf.md).
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
// fused kernel and its unfused parts still agree bit for bit (docs/perf.md).
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
  kBf16Operands = 9,  // a float64 product's operands rounded to bf16 (gemm.hpp: the bf16 method's oracle)
  kWidened = 10,      // a row of an activation stored in bf16, widened to float32 (mlp.hpp)
  kActRow = 11,       // an activation's (or a norm's) row before it is stored in bf16 (mlp.hpp, norms.hpp)
};
template <class T, int Slot>
T* thread_scratch(std::size_t n) {
  thread_local aligned_vector<T> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

// n floats of scratch slot Slot, starting where element `at` of a 64-byte
// aligned float32 buffer (a model's arena) sits relative to 64 bytes. Eigen's
// evaluation of a row expression depends on where its operands sit (which
// elements go in packets), so a row computed or widened here gets the bits it
// would get in place.
template <int Slot>
float* scratch_row_like(std::int64_t n, std::int64_t at) {
  constexpr std::int64_t kLine = 64 / sizeof(float);
  return thread_scratch<float, Slot>(std::size_t(n + kLine)) + at % kLine;
}

}  // namespace detail

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

}  // namespace normlab::cpu
