#pragma once
// The MLP's activation kernels: plain pointwise ones (relu², GELU) and SwiGLU,
// scaled or not. Apart: the elementwise math of the block's second half.
#include "normlab/backend/cuda/common.cuh"

namespace normlab::cuda::dev {

// ---------------------------------------------------------------- plain activations (core/pointwise.hpp's order)
__device__ __forceinline__ float pointwise_value(int fn, float u) {
  if (fn == 0) return u > 0.f ? u * u : 0.f;
  if (fn == 1) return 0.5f * u * (1.f + tanhf(0.7978845608028654f * (u + 0.044715f * u * u * u)));
  return 0.5f * u * (1.f + erff(u * 0.7071067811865476f));
}
__device__ __forceinline__ float pointwise_derivative(int fn, float u) {
  if (fn == 0) return u > 0.f ? 2.f * u : 0.f;
  if (fn == 1) {
    const float c = 0.7978845608028654f, a = 0.044715f, th = tanhf(c * (u + a * u * u * u));
    return 0.5f * (1.f + th) + 0.5f * u * (1.f - th * th) * c * (1.f + 3.f * a * u * u);
  }
  return 0.5f * (1.f + erff(u * 0.7071067811865476f)) + u * expf(-0.5f * u * u) * 0.3989422804014327f;
}
__global__ void pointwise_fwd_kernel(float* act, const float* u, std::int64_t n, int fn) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    act[i] = pointwise_value(fn, u[i]);
}
__global__ void pointwise_bwd_kernel(float* du, const float* dact, const float* u, std::int64_t n, int fn) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    du[i] = pointwise_derivative(fn, u[i]) * dact[i];
}

// ---------------------------------------------------------------- scaled SwiGLU
template <class S>
__global__ void swiglu_fwd_kernel(S* act, const S* uv, const float* s, std::int64_t N, std::int64_t F) {
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < N * F; e += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t i = e / F, j = e % F;
    float u = ld(uv + i * 2 * F + j), g = ld(uv + i * 2 * F + F + j);
    if (s) {
      u = round_to<S>(u * s[j]);
      g = round_to<S>(g * s[F + j]);
    }
    st(act + e, u * g / (1.f + expf(-g)));
  }
}
// du = dact ⊙ silu(g); dg = dact ⊙ u ⊙ σ(g)(1 + g(1 − σ(g))), u and g scaled when s is given.
template <class S>
__global__ void swiglu_bwd_kernel(S* duv, const S* dact, const S* uv, const float* s, std::int64_t N, std::int64_t F) {
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < N * F; e += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t i = e / F, j = e % F;
    float u = ld(uv + i * 2 * F + j), g = ld(uv + i * 2 * F + F + j);
    if (s) {
      u = round_to<S>(u * s[j]);
      g = round_to<S>(g * s[F + j]);
    }
    const float da = ld(dact + e);
    const float sg = 1.f / (1.f + expf(-g));
    st(duv + i * 2 * F + j, da * g * sg);
    st(duv + i * 2 * F + F + j, da * u * sg * (1.f + g * (1.f - sg)));
  }
}

}  // namespace normlab::cuda::dev
