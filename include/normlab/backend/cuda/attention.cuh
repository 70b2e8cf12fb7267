#pragma once
// Causal attention in the flash style: online softmax, only the per-row
// log-sum-exp is kept; backward recomputes the probabilities. No (T,T) matrix
// is ever in memory. Float32 math on CUDA cores (a first, exact version; see
// docs/cuda.md for the tensor-core version still to come).
//
// Layout: q, k, v, y (B,T,H,D) = (B*T, C) rows; lse, dsum (B,H,T).
// W > 0: causal sliding window, query t sees keys t−W+1 … t (W = 0: all ≤ t);
// tiles wholly before a warp's window are skipped by that warp.
// Blocks of 8 warps: in forward and dQ each warp owns one query row and the
// block shares 32-key tiles of K and V in shared memory; in dK/dV each warp
// owns one key row and the block shares 32-query tiles. Within a tile, lane j
// computes the score of key (or query) j in full, then the warp combines.
// dQ and dK/dV are separate kernels, so no gradient is accumulated with
// atomics (deterministic).
#include "normlab/backend/cuda/common.cuh"

namespace normlab::cuda::dev {

inline constexpr int kAttWarps = 8;
inline constexpr int kAttTile = 32;
inline constexpr int kAttMaxD = 128;

template <class S>
__global__ void __launch_bounds__(kAttWarps * 32)
    attention_fwd_kernel(S* y, float* lse, const S* q, const S* k, const S* v, int T, int H, int D, float scale,
                         int W) {
  extern __shared__ float smem[];
  const int DP = D + 1;  // odd row stride: lanes reading different rows hit different banks
  float* Ks = smem;                  // [32][DP]
  float* Vs = Ks + kAttTile * DP;    // [32][DP]
  float* Qs = Vs + kAttTile * DP;    // [8][D]
  const int bh = blockIdx.y, b = bh / H, h = bh % H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t0 = blockIdx.x * kAttWarps, t = t0 + warp;
  const std::int64_t C = std::int64_t(H) * D;
  auto row = [&](int tt) { return (std::int64_t(b) * T + tt) * C + std::int64_t(h) * D; };
  if (t < T)
    for (int i = lane; i < D; i += 32) Qs[warp * D + i] = ld(q + row(t) + i);
  const int tmax = min(T - 1, t0 + kAttWarps - 1);
  const int ntiles = tmax / kAttTile + 1;
  const int first_tile = W > 0 ? max(0, t0 - W + 1) / kAttTile : 0;
  const int lo = W > 0 ? t - W + 1 : 0;  // this warp's first key
  float m = -INFINITY, l = 0.f, acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int kt = first_tile; kt < ntiles; ++kt) {
    __syncthreads();
    for (int e = threadIdx.x; e < kAttTile * D; e += kAttWarps * 32) {
      const int jj = e / D, i = e % D, s = kt * kAttTile + jj;
      Ks[jj * DP + i] = s < T ? ld(k + row(s) + i) : 0.f;
      Vs[jj * DP + i] = s < T ? ld(v + row(s) + i) : 0.f;
    }
    __syncthreads();
    if (t < T && kt * kAttTile <= t && kt * kAttTile + kAttTile - 1 >= lo) {  // warp-uniform
      const int s = kt * kAttTile + lane;
      const bool valid = s <= t && s >= lo;
      float sc = -INFINITY;
      if (valid) {
        float d = 0.f;
        for (int i = 0; i < D; ++i) d += Qs[warp * D + i] * Ks[lane * DP + i];
        sc = d * scale;
      }
      const float m_new = fmaxf(m, warp_max(sc));  // finite: the tile holds a key in [lo, t]
      const float p = valid ? expf(sc - m_new) : 0.f;
      const float corr = expf(m - m_new);  // 0 on the first tile (m = −inf)
      l = l * corr + warp_sum(p);
      for (int r = 0; r < 4; ++r) acc[r] *= corr;
      for (int jj = 0; jj < kAttTile; ++jj) {
        const float pj = __shfl_sync(kFull, p, jj);
        for (int r = 0; r < 4; ++r) {
          const int i = lane + 32 * r;
          if (i < D) acc[r] += pj * Vs[jj * DP + i];
        }
      }
      m = m_new;
    }
  }
  if (t < T) {
    const float inv = 1.f / l;
    for (int r = 0; r < 4; ++r) {
      const int i = lane + 32 * r;
      if (i < D) st(y + row(t) + i, acc[r] * inv);
    }
    if (lane == 0) lse[std::int64_t(bh) * T + t] = m + logf(l);
  }
}

// dsum[b,h,t] = Σ_i dy ⊙ y over the head's D values (= Σ_s P_ts dP_ts).
template <class S>
__global__ void attention_dsum_kernel(float* dsum, const S* dy, const S* y, std::int64_t rows, int T, int H, int D) {
  const std::int64_t r = warp_row();  // r = (b*T + t)*H + h
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  float d = 0.f;
  for (int i = lane; i < D; i += 32) d += ld(dy + r * D + i) * ld(y + r * D + i);
  d = warp_sum(d);
  const std::int64_t bt = r / H, h = r % H, b = bt / T, t = bt % T;
  if (lane == 0) dsum[(b * H + h) * T + t] = d;
}

// dQ_t = scale Σ_s P_ts (dP_ts − dsum_t) K_s, dP_ts = dY_t · V_s.
template <class S>
__global__ void __launch_bounds__(kAttWarps * 32)
    attention_dq_kernel(S* dq, const S* dy, const S* q, const S* k, const S* v, const float* lse, const float* dsum,
                        int T, int H, int D, float scale, int W) {
  extern __shared__ float smem[];
  const int DP = D + 1;
  float* Ks = smem;
  float* Vs = Ks + kAttTile * DP;
  float* Qs = Vs + kAttTile * DP;  // [8][D]
  float* Gs = Qs + kAttWarps * D;  // [8][D] dY rows
  const int bh = blockIdx.y, b = bh / H, h = bh % H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t0 = blockIdx.x * kAttWarps, t = t0 + warp;
  const std::int64_t C = std::int64_t(H) * D;
  auto row = [&](int tt) { return (std::int64_t(b) * T + tt) * C + std::int64_t(h) * D; };
  float lse_t = 0.f, ds_t = 0.f;
  if (t < T) {
    for (int i = lane; i < D; i += 32) {
      Qs[warp * D + i] = ld(q + row(t) + i);
      Gs[warp * D + i] = ld(dy + row(t) + i);
    }
    lse_t = lse[std::int64_t(bh) * T + t];
    ds_t = dsum[std::int64_t(bh) * T + t];
  }
  const int tmax = min(T - 1, t0 + kAttWarps - 1);
  const int ntiles = tmax / kAttTile + 1;
  const int first_tile = W > 0 ? max(0, t0 - W + 1) / kAttTile : 0;
  const int lo = W > 0 ? t - W + 1 : 0;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int kt = first_tile; kt < ntiles; ++kt) {
    __syncthreads();
    for (int e = threadIdx.x; e < kAttTile * D; e += kAttWarps * 32) {
      const int jj = e / D, i = e % D, s = kt * kAttTile + jj;
      Ks[jj * DP + i] = s < T ? ld(k + row(s) + i) : 0.f;
      Vs[jj * DP + i] = s < T ? ld(v + row(s) + i) : 0.f;
    }
    __syncthreads();
    if (t < T && kt * kAttTile <= t) {
      const int s = kt * kAttTile + lane;
      float ds = 0.f;
      if (s <= t && s >= lo) {
        float sc = 0.f, dp = 0.f;
        for (int i = 0; i < D; ++i) {
          sc += Qs[warp * D + i] * Ks[lane * DP + i];
          dp += Gs[warp * D + i] * Vs[lane * DP + i];
        }
        const float p = expf(sc * scale - lse_t);
        ds = p * (dp - ds_t);
      }
      for (int jj = 0; jj < kAttTile; ++jj) {
        const float dj = __shfl_sync(kFull, ds, jj);
        for (int r = 0; r < 4; ++r) {
          const int i = lane + 32 * r;
          if (i < D) acc[r] += dj * Ks[jj * DP + i];
        }
      }
    }
  }
  if (t < T)
    for (int r = 0; r < 4; ++r) {
      const int i = lane + 32 * r;
      if (i < D) st(dq + row(t) + i, acc[r] * scale);
    }
}

// dK_s = scale Σ_{t≥s} dS_ts Q_t, dV_s = Σ_{t≥s} P_ts dY_t.
template <class S>
__global__ void __launch_bounds__(kAttWarps * 32)
    attention_dkv_kernel(S* dk, S* dv, const S* dy, const S* q, const S* k, const S* v, const float* lse,
                         const float* dsum, int T, int H, int D, float scale, int W) {
  extern __shared__ float smem[];
  const int DP = D + 1;
  float* Qt = smem;                  // [32][DP] query tile
  float* Gt = Qt + kAttTile * DP;    // [32][DP] dY tile
  float* Lt = Gt + kAttTile * DP;    // [32] lse
  float* Dt = Lt + kAttTile;         // [32] dsum
  float* Ks = Dt + kAttTile;         // [8][D]
  float* Vs = Ks + kAttWarps * D;    // [8][D]
  const int bh = blockIdx.y, b = bh / H, h = bh % H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int s0 = blockIdx.x * kAttWarps, s = s0 + warp;
  const std::int64_t C = std::int64_t(H) * D;
  auto row = [&](int tt) { return (std::int64_t(b) * T + tt) * C + std::int64_t(h) * D; };
  if (s < T)
    for (int i = lane; i < D; i += 32) {
      Ks[warp * D + i] = ld(k + row(s) + i);
      Vs[warp * D + i] = ld(v + row(s) + i);
    }
  // Queries that see key s: s … s+W−1 under a window (all t ≥ s without).
  const int first = s0 / kAttTile,
            last = (W > 0 ? min(T - 1, s0 + kAttWarps - 1 + W - 1) : T - 1) / kAttTile;
  float ak[4] = {0.f, 0.f, 0.f, 0.f}, av[4] = {0.f, 0.f, 0.f, 0.f};
  for (int qt = first; qt <= last; ++qt) {
    __syncthreads();
    for (int e = threadIdx.x; e < kAttTile * D; e += kAttWarps * 32) {
      const int jj = e / D, i = e % D, tt = qt * kAttTile + jj;
      Qt[jj * DP + i] = tt < T ? ld(q + row(tt) + i) : 0.f;
      Gt[jj * DP + i] = tt < T ? ld(dy + row(tt) + i) : 0.f;
    }
    if (threadIdx.x < kAttTile) {
      const int tt = qt * kAttTile + threadIdx.x;
      Lt[threadIdx.x] = tt < T ? lse[std::int64_t(bh) * T + tt] : 0.f;
      Dt[threadIdx.x] = tt < T ? dsum[std::int64_t(bh) * T + tt] : 0.f;
    }
    __syncthreads();
    if (s < T && qt * kAttTile + kAttTile - 1 >= s) {  // warp-uniform: the tile reaches t ≥ s
      const int t = qt * kAttTile + lane;
      float p = 0.f, ds = 0.f;
      if (t >= s && t < T && (W == 0 || t < s + W)) {
        float sc = 0.f, dp = 0.f;
        for (int i = 0; i < D; ++i) {
          sc += Qt[lane * DP + i] * Ks[warp * D + i];
          dp += Gt[lane * DP + i] * Vs[warp * D + i];
        }
        p = expf(sc * scale - Lt[lane]);
        ds = p * (dp - Dt[lane]);
      }
      for (int jj = 0; jj < kAttTile; ++jj) {
        const float pj = __shfl_sync(kFull, p, jj), dj = __shfl_sync(kFull, ds, jj);
        for (int r = 0; r < 4; ++r) {
          const int i = lane + 32 * r;
          if (i < D) {
            av[r] += pj * Gt[jj * DP + i];
            ak[r] += dj * Qt[jj * DP + i];
          }
        }
      }
    }
  }
  if (s < T)
    for (int r = 0; r < 4; ++r) {
      const int i = lane + 32 * r;
      if (i < D) {
        st(dk + row(s) + i, ak[r] * scale);
        st(dv + row(s) + i, av[r]);
      }
    }
}

inline std::size_t attention_fwd_smem(int D) { return sizeof(float) * (2 * kAttTile * (D + 1) + kAttWarps * D); }
inline std::size_t attention_dq_smem(int D) { return sizeof(float) * (2 * kAttTile * (D + 1) + 2 * kAttWarps * D); }
inline std::size_t attention_dkv_smem(int D) {
  return sizeof(float) * (2 * kAttTile * (D + 1) + 2 * kAttTile + 2 * kAttWarps * D);
}

}  // namespace normlab::cuda::dev
