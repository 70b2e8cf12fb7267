#pragma once
// The attention path's row kernels outside attention.cuh's blocked kernel: RoPE +
// QK-norm + s_qk, grouped-query kv widening and its gradient sum, and single-token
// decoding over the KV cache.
#include "normlab/backend/cuda/common.cuh"

namespace normlab::cuda::dev {

// ---------------------------------------------------------------- RoPE + QK-norm + s_qk
// One warp per (token, head) row of D values; lane handles pairs (i, i + D/2)
// for i = lane, lane + 32 (D ≤ 128).
template <class S>
__global__ void qk_fwd_kernel(bool unit_scaled, S* q, S* qh, float* qn, S* qs, const float* s_eff,
                              const float* cosv, const float* sinv, std::int64_t rows, std::int64_t T,
                              std::int64_t H, std::int64_t D, std::int64_t pos0) {
  const std::int64_t r = warp_row();
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const std::int64_t bt = r / H, hd = r % H, p = pos0 + bt % T, half = D / 2;
  S* v = q + r * D;
  float a2[2] = {0.f, 0.f}, b2[2] = {0.f, 0.f};
  float ss = 0.f;
  for (int u = 0; u < 2; ++u) {
    const std::int64_t i = lane + 32 * u;
    if (i >= half) break;
    const float c = cosv[p * half + i], sn = sinv[p * half + i];
    const float a = ld(v + i), b = ld(v + i + half);
    const float na = round_to<S>(a * c - b * sn), nb = round_to<S>(b * c + a * sn);
    st(v + i, na);
    st(v + i + half, nb);
    a2[u] = na;
    b2[u] = nb;
    ss += na * na + nb * nb;
  }
  if (!unit_scaled) return;
  const float n = sqrtf(warp_sum(ss));
  if (lane == 0) qn[r] = n;
  const float inv = 1.f / n;
  for (int u = 0; u < 2; ++u) {
    const std::int64_t i = lane + 32 * u;
    if (i >= half) break;
    const float ha = round_to<S>(a2[u] * inv), hb = round_to<S>(b2[u] * inv);
    st(qh + r * D + i, ha);
    st(qh + r * D + i + half, hb);
    st(qs + r * D + i, ha * s_eff[hd * D + i]);
    st(qs + r * D + i + half, hb * s_eff[hd * D + i + half]);
  }
}

// In place: dqh = dq ⊙ s; dx = (dqh − qh (qh·dqh)) / ‖q‖; then the inverse rotation.
template <class S>
__global__ void qk_bwd_kernel(bool unit_scaled, S* dq, const S* qh, const float* qn, const float* s_eff,
                              const float* cosv, const float* sinv, std::int64_t rows, std::int64_t T,
                              std::int64_t H, std::int64_t D) {
  const std::int64_t r = warp_row();
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const std::int64_t bt = r / H, hd = r % H, p = bt % T, half = D / 2;
  S* g = dq + r * D;
  float ga[2] = {0.f, 0.f}, gb[2] = {0.f, 0.f};
  for (int u = 0; u < 2; ++u) {
    const std::int64_t i = lane + 32 * u;
    if (i >= half) break;
    ga[u] = ld(g + i);
    gb[u] = ld(g + i + half);
  }
  if (unit_scaled) {
    float dot = 0.f;
    float ya[2] = {0.f, 0.f}, yb[2] = {0.f, 0.f};
    for (int u = 0; u < 2; ++u) {
      const std::int64_t i = lane + 32 * u;
      if (i >= half) break;
      ga[u] = round_to<S>(ga[u] * s_eff[hd * D + i]);
      gb[u] = round_to<S>(gb[u] * s_eff[hd * D + i + half]);
      ya[u] = ld(qh + r * D + i);
      yb[u] = ld(qh + r * D + i + half);
      dot += ya[u] * ga[u] + yb[u] * gb[u];
    }
    dot = warp_sum(dot);
    const float inv = 1.f / qn[r];
    for (int u = 0; u < 2; ++u) {
      ga[u] = round_to<S>((ga[u] - ya[u] * dot) * inv);
      gb[u] = round_to<S>((gb[u] - yb[u] * dot) * inv);
    }
  }
  for (int u = 0; u < 2; ++u) {
    const std::int64_t i = lane + 32 * u;
    if (i >= half) break;
    const float c = cosv[p * half + i], sn = -sinv[p * half + i];  // transpose rotation
    st(g + i, ga[u] * c - gb[u] * sn);
    st(g + i + half, gb[u] * c + ga[u] * sn);
  }
}
template <class S>
struct QkScaleTerm {  // c (dq ⊙ qh + dk ⊙ kh)
  const S *dq, *qh, *dk, *kh;
  float c;
  std::int64_t L;
  __device__ float operator()(std::int64_t i, std::int64_t j) const {
    const std::int64_t k = i * L + j;
    return c * (ld(dq + k) * ld(qh + k)) + c * (ld(dk + k) * ld(kh + k));
  }
};

// ---------------------------------------------------------------- grouped-query attention
// y (N, H·D) from x (N, Hkv·D): query head h reads kv head h / (H/Hkv).
__global__ void kv_repeat_kernel(float* y, const float* x, std::int64_t N, int H, int Hkv, int D) {
  const std::int64_t row = std::int64_t(H) * D, group = H / Hkv;
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < N * row; e += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t i = e / row, h = (e % row) / D, c = e % D;
    y[e] = x[(i * Hkv + h / group) * D + c];
  }
}
// dx (N, Hkv·D) = each group's query heads of dy summed, in head order.
__global__ void kv_group_sum_kernel(float* dx, const float* dy, std::int64_t N, int H, int Hkv, int D) {
  const std::int64_t row = std::int64_t(Hkv) * D, group = H / Hkv;
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < N * row; e += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t i = e / row, g = (e % row) / D, c = e % D;
    float acc = 0.f;
    for (std::int64_t r = 0; r < group; ++r) acc += dy[(i * H + g * group + r) * D + c];
    dx[e] = acc;
  }
}

// ---------------------------------------------------------------- decoding
// One block (128 threads) per head: scores of the S cached keys, softmax, and
// the weighted sum of the cached values. p: (H, S) scratch.
__global__ void attention_decode_kernel(float* y, float* p, const float* q, const float* kc, const float* vc,
                                        std::int64_t S, std::int64_t H, std::int64_t D, float scale) {
  __shared__ float sm[128];
  const std::int64_t h = blockIdx.x;
  const int tid = threadIdx.x;
  const float* qh = q + h * D;
  float* ph = p + h * S;
  float m = -INFINITY;
  for (std::int64_t j = tid; j < S; j += 128) {
    const float* kj = kc + (j * H + h) * D;
    float sc = 0.f;
    for (std::int64_t d = 0; d < D; ++d) sc += qh[d] * kj[d];
    sc *= scale;
    ph[j] = sc;
    m = fmaxf(m, sc);
  }
  sm[tid] = m;
  __syncthreads();
  for (int w = 64; w > 0; w >>= 1) {
    if (tid < w) sm[tid] = fmaxf(sm[tid], sm[tid + w]);
    __syncthreads();
  }
  const float M = sm[0];
  __syncthreads();
  float sum = 0.f;
  for (std::int64_t j = tid; j < S; j += 128) {
    const float e = expf(ph[j] - M);
    ph[j] = e;
    sum += e;
  }
  sum = block_sum(sum, sm);  // its barriers also publish every ph[j]
  for (std::int64_t d = tid; d < D; d += 128) {
    float acc = 0.f;
    for (std::int64_t j = 0; j < S; ++j) acc += ph[j] * vc[(j * H + h) * D + d];
    y[h * D + d] = acc / sum;
  }
}

}  // namespace normlab::cuda::dev
