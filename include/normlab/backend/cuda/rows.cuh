#pragma once
// Row-wise fused kernels: conversions and per-column scales, embedding, RMSNorm,
// LayerNorm and cross-entropy here; the residual rules (residual.cuh), RoPE +
// QK-norm, grouped-query kv and decoding (attention_rows.cuh) and the MLP's
// activations (activations.cuh) in headers of their own, included here. One warp
// per row unless stated; each formula is the CPU backend's (backend/cpu/ops.hpp,
// nn/residual.hpp), in float32 whatever the storage.
#include "normlab/backend/cuda/activations.cuh"
#include "normlab/backend/cuda/attention_rows.cuh"
#include "normlab/backend/cuda/common.cuh"
#include "normlab/backend/cuda/residual.cuh"

namespace normlab::cuda::dev {

// ---------------------------------------------------------------- conversions, scales
template <class S>
__global__ void to_storage_kernel(S* dst, const float* src, std::int64_t n) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    st(dst + i, src[i]);
}
template <class S>
__global__ void to_float_kernel(float* dst, const S* src, std::int64_t n) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    dst[i] = ld(src + i);
}
__global__ void effective_scale_kernel(float* out, const float* p, double k, std::int64_t n, bool absolute,
                                       bool scalar) {
  const std::int64_t c = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= n) return;
  const double x = double(p[scalar ? 0 : c]) * k;
  out[c] = float(absolute ? fabs(x) : x);
}
// One block of 256: each thread sums its strided elements in order, then a fixed tree.
__global__ void fold_scalar_kernel(float* g, const float* d, std::int64_t n) {
  __shared__ float sm[256];
  float acc = 0.f;
  for (std::int64_t j = threadIdx.x; j < n; j += 256) acc += d[j];
  const float total = block_sum(acc, sm);
  if (threadIdx.x == 0) g[0] += total;
}
__global__ void alpha_grad_scalar_kernel(float* g, float* d_scale, const float* dalpha, const float* p, double k,
                                         std::int64_t n) {
  __shared__ float sm[256];
  const double x = double(p[0]) * k;
  const double sgn = x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);
  float acc = 0.f;
  for (std::int64_t j = threadIdx.x; j < n; j += 256) {
    const float v = float(double(dalpha[j]) * sgn * k);
    d_scale[j] = v;
    acc += v;
  }
  const float total = block_sum(acc, sm);
  if (threadIdx.x == 0) g[0] += total;
}
__global__ void fill_kernel(float* x, float value, std::int64_t n) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    x[i] = value;
}
__global__ void add_into_kernel(float* dst, const float* src, std::int64_t n) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    dst[i] += src[i];
}
__global__ void scale_columns_kernel(float* y, const float* x, const float* sc, std::int64_t N, std::int64_t L) {
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < N * L; e += std::int64_t(gridDim.x) * blockDim.x)
    y[e] = x[e] * sc[e % L];
}
struct ColumnDotTerm {  // c · dy ⊙ x
  const float *dy, *x;
  float c;
  std::int64_t L;
  __device__ float operator()(std::int64_t i, std::int64_t j) const { return c * (dy[i * L + j] * x[i * L + j]); }
};
__global__ void alpha_grad_kernel(float* g, const float* dalpha, const float* p, double k, std::int64_t n) {
  const std::int64_t c = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= n) return;
  const double x = double(p[c]) * k;
  const double sgn = x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);
  g[c] += float(double(dalpha[c]) * sgn * k);
}

// ---------------------------------------------------------------- embedding
template <class S>
__global__ void embedding_fwd_kernel(S* out, const std::int32_t* idx, const S* wte, std::int64_t N, std::int64_t C) {
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < N * C; e += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t i = e / C, c = e % C;
    out[e] = wte[std::int64_t(idx[i]) * C + c];
  }
}
// grid (n_uniq, ceil(C/128)): one block per distinct token, its positions in order.
template <class S>
__global__ void embedding_bwd_kernel(float* dwte, const std::int32_t* uniq, const std::int32_t* starts,
                                     const std::int32_t* order, const S* dout, std::int64_t C) {
  const std::int64_t u = blockIdx.x;
  const std::int64_t c = std::int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float acc = 0.f;
  for (std::int32_t k = starts[u]; k < starts[u + 1]; ++k) acc += ld(dout + std::int64_t(order[k]) * C + c);
  dwte[std::int64_t(uniq[u]) * C + c] += acc;
}

// ---------------------------------------------------------------- RMSNorm
template <class S>
__global__ void rmsnorm_fwd_kernel(S* y, float* rstd, const S* x, const float* w, std::int64_t N, std::int64_t C,
                                   float eps) {
  const std::int64_t row = warp_row();
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const S* xi = x + row * C;
  float ss = 0.f;
  for (std::int64_t c = lane; c < C; c += 32) {
    const float v = ld(xi + c);
    ss += v * v;
  }
  ss = warp_sum(ss);
  const float r = 1.f / sqrtf(ss / float(C) + eps);
  if (lane == 0) rstd[row] = r;
  for (std::int64_t c = lane; c < C; c += 32) st(y + row * C + c, ld(xi + c) * r * w[c]);
}

template <class S>
__global__ void rmsnorm_bwd_kernel(S* dx, const S* dy, const S* x, const float* w, const float* rstd, std::int64_t N,
                                   std::int64_t C, bool accumulate) {
  const std::int64_t row = warp_row();
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const S* xi = x + row * C;
  const S* gi = dy + row * C;
  const float r = rstd[row];
  float dot = 0.f;
  for (std::int64_t c = lane; c < C; c += 32) dot += ld(gi + c) * w[c] * ld(xi + c);
  dot = warp_sum(dot);
  const float k = r * r * r * dot / float(C);
  S* di = dx + row * C;
  for (std::int64_t c = lane; c < C; c += 32) {
    const float v = r * ld(gi + c) * w[c] - k * ld(xi + c);
    st(di + c, accumulate ? ld(di + c) + v : v);
  }
}
template <class S>
struct RmsDwTerm {
  const S* dy;
  const S* x;
  const float* rstd;
  std::int64_t L;
  __device__ float operator()(std::int64_t i, std::int64_t j) const {
    return ld(dy + i * L + j) * ld(x + i * L + j) * rstd[i];
  }
};

// ---------------------------------------------------------------- LayerNorm
// y = (x − μ) r ⊙ w + b, r = 1/√(mean((x − μ)²) + ε) (b may be null), two
// passes over the row as the CPU backend's; mean and rstd kept for backward.
template <class S>
__global__ void layernorm_fwd_kernel(S* y, float* mean, float* rstd, const S* x, const float* w, const float* b,
                                     std::int64_t N, std::int64_t C, float eps) {
  const std::int64_t row = warp_row();
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const S* xi = x + row * C;
  float sum = 0.f;
  for (std::int64_t c = lane; c < C; c += 32) sum += ld(xi + c);
  const float mu = warp_sum(sum) / float(C);
  float ss = 0.f;
  for (std::int64_t c = lane; c < C; c += 32) {
    const float d = ld(xi + c) - mu;
    ss += d * d;
  }
  const float r = 1.f / sqrtf(warp_sum(ss) / float(C) + eps);
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = r;
  }
  for (std::int64_t c = lane; c < C; c += 32) st(y + row * C + c, (ld(xi + c) - mu) * r * w[c] + (b ? b[c] : 0.f));
}
// With x̂ = (x − μ) r and g = dy ⊙ w: dx = r (g − mean(g) − x̂ mean(g ⊙ x̂)).
template <class S>
__global__ void layernorm_bwd_kernel(S* dx, const S* dy, const S* x, const float* w, const float* mean,
                                     const float* rstd, std::int64_t N, std::int64_t C) {
  const std::int64_t row = warp_row();
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const S* xi = x + row * C;
  const S* gi = dy + row * C;
  const float mu = mean[row], r = rstd[row];
  float sg = 0.f, sgx = 0.f;
  for (std::int64_t c = lane; c < C; c += 32) {
    const float g = ld(gi + c) * w[c];
    sg += g;
    sgx += g * ((ld(xi + c) - mu) * r);
  }
  const float mg = warp_sum(sg) / float(C), mgx = warp_sum(sgx) / float(C);
  for (std::int64_t c = lane; c < C; c += 32)
    st(dx + row * C + c, r * (ld(gi + c) * w[c] - mg - (ld(xi + c) - mu) * r * mgx));
}
template <class S>
struct LnDwTerm {  // dy ⊙ x̂
  const S* dy;
  const S* x;
  const float* mean;
  const float* rstd;
  std::int64_t L;
  __device__ float operator()(std::int64_t i, std::int64_t j) const {
    return ld(dy + i * L + j) * ((ld(x + i * L + j) - mean[i]) * rstd[i]);
  }
};
template <class S>
struct RowsTerm {  // dy itself: a bias's gradient
  const S* dy;
  std::int64_t L;
  __device__ float operator()(std::int64_t i, std::int64_t j) const { return ld(dy + i * L + j); }
};

// Per-column scale: returns c·dy⊙x for the reduction and writes dy⊙s in place
// (each element is visited exactly once by the column reduction).
template <class S>
struct ScaleInplaceTerm {
  S* d;
  const S* x;
  const float* s;
  float c;
  std::int64_t L;
  __device__ float operator()(std::int64_t i, std::int64_t j) const {
    const std::int64_t k = i * L + j;
    const float g = ld(d + k);
    st(d + k, g * s[j]);
    return c * (g * ld(x + k));
  }
};

// ---------------------------------------------------------------- cross-entropy (+ s_z)
// One block per row. Pass 1: online max and Σexp per thread, combined in a
// fixed tree. Pass 2: writes (softmax − onehot)/N. Probabilities are never stored.
inline constexpr int kCeThreads = 512;
__device__ __forceinline__ void lse_combine(float& m, float& s, float m2, float s2) {
  if (m2 == -INFINITY) return;
  if (m == -INFINITY) {
    m = m2;
    s = s2;
    return;
  }
  const float M = fmaxf(m, m2);
  s = s * expf(m - M) + s2 * expf(m2 - M);
  m = M;
}
template <class S>
__global__ void __launch_bounds__(kCeThreads) cross_entropy_kernel(S* dlogits, float* row_loss, const S* raw,
                                                                   const float* sz, const std::int32_t* targets,
                                                                   std::int64_t N, std::int64_t V) {
  __shared__ float sm_m[kCeThreads], sm_s[kCeThreads];
  const std::int64_t row = blockIdx.x;
  const int tid = threadIdx.x;
  const S* x = raw + row * V;
  auto logit = [&](std::int64_t j) { return sz ? round_to<S>(ld(x + j) * sz[j]) : ld(x + j); };
  float m = -INFINITY, s = 0.f;
  for (std::int64_t j = tid; j < V; j += kCeThreads) lse_combine(m, s, logit(j), 1.f);
  sm_m[tid] = m;
  sm_s[tid] = s;
  __syncthreads();
  for (int w = kCeThreads / 2; w > 0; w >>= 1) {
    if (tid < w) {
      float a = sm_m[tid], b = sm_s[tid];
      lse_combine(a, b, sm_m[tid + w], sm_s[tid + w]);
      sm_m[tid] = a;
      sm_s[tid] = b;
    }
    __syncthreads();
  }
  const float lse = sm_m[0] + logf(sm_s[0]);
  const std::int64_t t = targets[row];
  if (tid == 0) row_loss[row] = lse - logit(t);
  if (dlogits == nullptr) return;  // the loss only (evaluation)
  const float invN = 1.f / float(N);
  S* d = dlogits + row * V;
  for (std::int64_t j = tid; j < V; j += kCeThreads) {
    const float p = expf(logit(j) - lse) * invN;
    st(d + j, j == t ? p - invN : p);
  }
}

}  // namespace normlab::cuda::dev
