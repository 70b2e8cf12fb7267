#pragma once
// Optimizer kernels: the global gradient norm (fixed reduction tree, in
// double) and AdamW fused with the weight constraint and the storage copy, one
// pass per tensor. AdamW follows optim/adamw.hpp operation for operation
// (PyTorch order); the constraint follows nn/constraint.hpp on the master copy.
#include "normlab/backend/cuda/common.cuh"

namespace normlab::cuda::dev {

__global__ void sumsq_partial_kernel(double* partial, const float* x, std::int64_t n) {
  __shared__ double sm[256];
  double acc = 0;
  for (std::int64_t i = std::int64_t(blockIdx.x) * 256 + threadIdx.x; i < n; i += std::int64_t(k::kSumSqBlocks) * 256)
    acc += double(x[i]) * double(x[i]);
  const double s = block_sum(acc, sm);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}
__global__ void sumsq_final_kernel(double* out, const double* partial) {
  __shared__ double sm[k::kSumSqBlocks];
  const double s = block_sum(partial[threadIdx.x], sm);
  if (threadIdx.x == 0) out[0] = s;
}

// x ← c·x (the clipping coefficient applied to the gradients in place, as the CPU's clip_grad_norm).
__global__ void scale_inplace_kernel(float* x, float c, std::int64_t n) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    x[i] *= c;
}

// Lion (optim/lion.hpp), in the CPU backend's expression order.
__global__ void lion_kernel(float* p, float* m, const float* g, std::int64_t n, float decay, bool decayed, float lr,
                            float b1, float b2) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    const float gv = g[i], mv = m[i];
    const float c = b1 * mv + (1.f - b1) * gv;
    const float sgn = c > 0.f ? 1.f : (c < 0.f ? -1.f : 0.f);
    float pv = p[i];
    if (decayed) pv *= decay;
    p[i] = pv - lr * sgn;
    m[i] = b2 * mv + (1.f - b2) * gv;
  }
}
// Muon's momentum and update direction (optim/muon.hpp).
__global__ void muon_momentum_kernel(float* u, float* m, const float* g, std::int64_t n, float b, bool nesterov) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    const float gv = g[i];
    const float mv = b * m[i] + (1.f - b) * gv;
    m[i] = mv;
    u[i] = nesterov ? (1.f - b) * gv + b * mv : mv;
  }
}

// Muon's quintic, completed: B(k,k) ← c·B + b·A + a·I (B holds A²), the CPU's expression order.
__global__ void muon_quintic_kernel(float* B, const float* A, std::int64_t k, float a, float b, float c) {
  const std::int64_t n = k * k;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    const float v = c * B[i] + b * A[i];
    B[i] = i / k == i % k ? v + a : v;
  }
}

// Muon's update of a hidden matrix: p ← decay·p + step·u (the CPU's expression).
__global__ void muon_apply_kernel(float* p, const float* u, std::int64_t n, float decay, float step) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    p[i] = decay * p[i] + step * u[i];
}

// p, m, v updated in place; returns the new p. Same expression order as the CPU's Eigen arrays.
__device__ __forceinline__ float adam_one(float* p, float* m, float* v, const float* g, std::int64_t i,
                                          const k::AdamHyper& hp) {
  float pv = p[i];
  if (!hp.update) return pv;
  const float gv = g[i] * hp.grad_scale;
  if (hp.decayed) pv *= hp.decay;
  const float mv = hp.beta1 * m[i] + (1.f - hp.beta1) * gv;
  const float vv = hp.beta2 * v[i] + (1.f - hp.beta2) * gv * gv;
  pv -= hp.step_size * (mv / (sqrtf(vv) / hp.sqrt_bc2 + hp.eps));
  m[i] = mv;
  v[i] = vv;
  return pv;
}
__device__ __forceinline__ float constraint_factor(float norm, ConstraintKind kind) {
  if (kind == ConstraintKind::unit_norm) return 1.f / norm;
  return norm > 1.f ? 1.f / norm : 1.f;  // bounded: only shrink
}

template <class S>
__global__ void adam_flat_kernel(float* p, float* m, float* v, const float* g, S* copy, std::int64_t n, k::AdamHyper hp) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    const float pv = adam_one(p, m, v, g, i, hp);
    p[i] = pv;
    if (copy) st(copy + i, pv);
  }
}

// One block (256 threads) per row: update, row norm, scale, copy. Each thread
// rescales exactly the elements it updated, so the second pass reads its own writes.
template <class S>
__global__ void adam_rows_kernel(float* p, float* m, float* v, const float* g, S* copy, std::int64_t L,
                                 ConstraintKind kind, k::AdamHyper hp) {
  __shared__ float sm[256];
  const std::int64_t base = std::int64_t(blockIdx.x) * L;
  float ss = 0.f;
  for (std::int64_t j = threadIdx.x; j < L; j += 256) {
    const float pv = adam_one(p, m, v, g, base + j, hp);
    p[base + j] = pv;
    ss += pv * pv;
  }
  const float f = constraint_factor(sqrtf(block_sum(ss, sm)), kind);
  for (std::int64_t j = threadIdx.x; j < L; j += 256) {
    const float pv = p[base + j] * f;
    p[base + j] = pv;
    if (copy) st(copy + base + j, pv);
  }
}

// Blocks of 32 columns × 8 row lanes: update, column norms (lanes added in
// order), scale, copy.
template <class S>
__global__ void adam_cols_kernel(float* p, float* m, float* v, const float* g, S* copy, std::int64_t R,
                                 std::int64_t L, ConstraintKind kind, k::AdamHyper hp) {
  __shared__ float sm[8][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const std::int64_t j = std::int64_t(blockIdx.x) * 32 + tx;
  float ss = 0.f;
  if (j < L)
    for (std::int64_t i = ty; i < R; i += 8) {
      const float pv = adam_one(p, m, v, g, i * L + j, hp);
      p[i * L + j] = pv;
      ss += pv * pv;
    }
  sm[ty][tx] = ss;
  __syncthreads();
  if (ty == 0) {
    float s = 0.f;
    for (int y = 0; y < 8; ++y) s += sm[y][tx];
    sm[0][tx] = constraint_factor(sqrtf(s), kind);
  }
  __syncthreads();
  const float f = sm[0][tx];
  if (j < L)
    for (std::int64_t i = ty; i < R; i += 8) {
      const float pv = p[i * L + j] * f;
      p[i * L + j] = pv;
      if (copy) st(copy + i * L + j, pv);
    }
}

}  // namespace normlab::cuda::dev
