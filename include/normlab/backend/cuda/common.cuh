#pragma once
// Device helpers shared by the kernels: storage loads/stores (float math for
// every storage type), deterministic warp/block reductions, and the two-stage
// column reduction that every parameter-gradient sum over rows goes through.
#ifndef __CUDACC__
#error "normlab/backend/cuda/*.cuh are device code: compile them with nvcc (include impl.cuh from one .cu file)"
#endif
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "normlab/backend/cuda/check.hpp"
#include "normlab/backend/cuda/kernels.hpp"

namespace normlab::cuda::dev {

using bf16 = __nv_bfloat16;
inline constexpr unsigned kFull = 0xffffffffu;
inline constexpr int kRowWarps = 8;  // rows per block of the warp-per-row kernels (256 threads)

__device__ __forceinline__ float ld(const float* p) { return *p; }
__device__ __forceinline__ float ld(const bf16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void st(float* p, float v) { *p = v; }
__device__ __forceinline__ void st(bf16* p, float v) { *p = __float2bfloat16(v); }
// v as it reads back after a round trip through storage S (the value a separate pass would see).
template <class S>
__device__ __forceinline__ float round_to(float v) {
  if constexpr (sizeof(S) == 2) return __bfloat162float(__float2bfloat16(v));
  else return v;
}

// Butterfly reductions: every lane adds the same two operands at every level
// (addition commutes), so all lanes hold the same bits at the end.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

// Sum over the block (blockDim.x a power of two ≤ 1024) in a fixed tree; every thread gets the result.
template <class T>
__device__ T block_sum(T v, T* sm) {
  const int tid = threadIdx.x;
  sm[tid] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) sm[tid] += sm[tid + s];
    __syncthreads();
  }
  const T r = sm[0];
  __syncthreads();
  return r;
}

// Rows handled by the warp-per-row kernels: row = blockIdx.x·8 + warp.
__device__ __forceinline__ std::int64_t warp_row() {
  return std::int64_t(blockIdx.x) * kRowWarps + threadIdx.x / 32;
}
inline unsigned row_blocks(std::int64_t rows) { return unsigned((rows + kRowWarps - 1) / kRowWarps); }
// Grid of a grid-stride elementwise loop over n items, 256 threads a block.
inline unsigned flat_blocks(std::int64_t n) {
  const std::int64_t b = (n + 255) / 256;
  return unsigned(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

// ---- deterministic column reduction: out[j] (+)= Σ_i term(i, j)
// Stage 1: block (32 columns × 8 row lanes) per (column tile, chunk of 256 rows);
// each thread sums its rows in order, the 8 lanes are added in order.
// Stage 2: each column adds its chunks in order. The shape depends only on
// (N, L), never on timing, so the result is the same bits every run.
template <class Term>
__global__ void colreduce_partial(float* partial, std::int64_t N, std::int64_t L, Term term) {
  __shared__ float sm[8][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const std::int64_t j = std::int64_t(blockIdx.x) * 32 + tx;
  const std::int64_t i0 = std::int64_t(blockIdx.y) * kColReduceRows;
  const std::int64_t i1 = (i0 + kColReduceRows < N) ? i0 + kColReduceRows : N;
  float acc = 0.f;
  if (j < L)
    for (std::int64_t i = i0 + ty; i < i1; i += 8) acc += term(i, j);
  sm[ty][tx] = acc;
  __syncthreads();
  if (ty == 0 && j < L) {
    float s = 0.f;
    for (int y = 0; y < 8; ++y) s += sm[y][tx];
    partial[std::int64_t(blockIdx.y) * L + j] = s;
  }
}

__global__ void colreduce_final(float* out, const float* partial, std::int64_t chunks, std::int64_t L,
                                       bool accumulate) {
  const std::int64_t j = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= L) return;
  float s = 0.f;
  for (std::int64_t c = 0; c < chunks; ++c) s += partial[c * L + j];
  out[j] = accumulate ? out[j] + s : s;
}

// partial: colreduce_chunks(N) × L floats of scratch.
template <class Term>
void colreduce(float* out, bool accumulate, Term term, std::int64_t N, std::int64_t L, float* partial,
               cudaStream_t s) {
  const std::int64_t chunks = colreduce_chunks(N);
  check_grid_y(chunks, "colreduce", "a column reduction over " + std::to_string(N) + " rows");
  const dim3 grid(unsigned((L + 31) / 32), unsigned(chunks));
  colreduce_partial<Term><<<grid, dim3(32, 8), 0, s>>>(partial, N, L, term);
  NORMLAB_CUDA_CHECK_LAUNCH();
  colreduce_final<<<unsigned((L + 255) / 256), 256, 0, s>>>(out, partial, chunks, L, accumulate);
  NORMLAB_CUDA_CHECK_LAUNCH();
}

// Runs f(S{}) with S = float or bf16 for the runtime storage type.
template <class S>
struct Tag {
  using type = S;
};
template <class F>
void dispatch(Dtype dt, F&& f) {
  if (dt == Dtype::f32) f(Tag<float>{});
  else f(Tag<bf16>{});
}

}  // namespace normlab::cuda::dev
