#pragma once
// Row-wise fused kernels: embedding, RMSNorm, residual rules, RoPE + QK-norm,
// scaled SwiGLU, per-column scales and cross-entropy. One warp per row unless
// stated; each formula is the CPU backend's (backend/cpu/ops.hpp,
// nn/residual.hpp), in float32 whatever the storage.
#include "normlab/backend/cuda/common.cuh"

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

// ---------------------------------------------------------------- residual rules
__device__ __forceinline__ float nu_of(float a) { return 1.f / sqrtf((1.f - a) * (1.f - a) + a * a); }

template <class S>
__global__ void residual_elementwise_fwd(ResidualKind kind, S* out, const S* h, const S* f, const float* alpha,
                                         std::int64_t N, std::int64_t C) {
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < N * C; e += std::int64_t(gridDim.x) * blockDim.x) {
    const float hv = ld(h + e), fv = ld(f + e);
    float o;
    if (kind == ResidualKind::add) {
      o = hv + fv;
    } else {
      const float a = alpha[e % C];
      o = hv + a * (fv - hv);
      if (kind == ResidualKind::lerp_nu) o = nu_of(a) * o;
    }
    st(out + e, o);
  }
}

// ‖h_i‖ and ‖f_i‖ of one row, summed by the warp (every lane gets both).
template <class S>
__device__ __forceinline__ void warp_row_norms(const S* hi, const S* fi, std::int64_t C, int lane, float& nh,
                                               float& nf) {
  float sh = 0.f, sf = 0.f;
  for (std::int64_t j = lane; j < C; j += 32) {
    const float a = ld(hi + j), b = ld(fi + j);
    sh += a * a;
    sf += b * b;
  }
  nh = sqrtf(warp_sum(sh));
  nf = sqrtf(warp_sum(sf));
}

// nGPT: A = h/‖h‖, Bf = f/‖f‖, z = A + α(Bf − A), out = z/‖z‖. A and Bf are
// recomputed from h and f in backward instead of being stored.
template <class S>
__global__ void lerp_retract_fwd_kernel(S* out, const S* h, const S* f, const float* alpha, float* nh_, float* nf_,
                                        float* nz_, std::int64_t N, std::int64_t C) {
  const std::int64_t row = warp_row();
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const S* hi = h + row * C;
  const S* fi = f + row * C;
  float nh, nf;
  warp_row_norms(hi, fi, C, lane, nh, nf);
  float sz = 0.f;
  for (std::int64_t j = lane; j < C; j += 32) {
    const float A = ld(hi + j) / nh, B = ld(fi + j) / nf;
    const float z = A + alpha[j] * (B - A);
    sz += z * z;
  }
  const float nz = sqrtf(warp_sum(sz));
  if (lane == 0) {
    nh_[row] = nh;
    nf_[row] = nf;
    nz_[row] = nz;
  }
  S* o = out + row * C;
  for (std::int64_t j = lane; j < C; j += 32) {
    const float A = ld(hi + j) / nh, B = ld(fi + j) / nf;
    st(o + j, (A + alpha[j] * (B - A)) / nz);
  }
}

// rowdot[i] = out_i · dout_i
template <class S>
__global__ void rowdot_kernel(float* rowdot, const S* a, const S* b, std::int64_t N, std::int64_t C) {
  const std::int64_t row = warp_row();
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  float d = 0.f;
  for (std::int64_t j = lane; j < C; j += 32) d += ld(a + row * C + j) * ld(b + row * C + j);
  d = warp_sum(d);
  if (lane == 0) rowdot[row] = d;
}

// dα_j = Σ_i dz_ij (Bf_ij − A_ij), dz = (dout − out (out·dout)) / ‖z‖
template <class S>
struct RetractAlphaTerm {
  const S *dout, *out, *h, *f;
  const float *dot, *nh, *nf, *nz;
  std::int64_t L;
  __device__ float operator()(std::int64_t i, std::int64_t j) const {
    const std::int64_t k = i * L + j;
    const float dz = (ld(dout + k) - ld(out + k) * dot[i]) / nz[i];
    return dz * (ld(f + k) / nf[i] - ld(h + k) / nh[i]);
  }
};

// dh = Nᵀ(A, dz ⊙ (1−α)), df = Nᵀ(Bf, dz ⊙ α). dh may alias dout: each lane
// reads and writes only its own elements, and writes them last.
template <class S>
__global__ void lerp_retract_bwd_kernel(S* dh, S* df, const S* dout, const S* out, const S* h, const S* f,
                                        const float* alpha, const float* nh_, const float* nf_, const float* nz_,
                                        const float* rowdot, std::int64_t N, std::int64_t C) {
  const std::int64_t row = warp_row();
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const std::int64_t base = row * C;
  const float inz = 1.f / nz_[row], d = rowdot[row], nh = nh_[row], nf = nf_[row];
  float sA = 0.f, sB = 0.f;
  for (std::int64_t j = lane; j < C; j += 32) {
    const float dz = (ld(dout + base + j) - ld(out + base + j) * d) * inz;
    const float A = ld(h + base + j) / nh, B = ld(f + base + j) / nf;
    sA += A * dz * (1.f - alpha[j]);
    sB += B * dz * alpha[j];
  }
  sA = warp_sum(sA);
  sB = warp_sum(sB);
  const float inh = 1.f / nh, inf = 1.f / nf;
  for (std::int64_t j = lane; j < C; j += 32) {
    const float dz = (ld(dout + base + j) - ld(out + base + j) * d) * inz;
    const float A = ld(h + base + j) / nh, B = ld(f + base + j) / nf;
    st(df + base + j, (dz * alpha[j] - B * sB) * inf);
    st(dh + base + j, (dz * (1.f - alpha[j]) - A * sA) * inh);  // last: may alias dout
  }
}

template <class S>
struct LerpAlphaTerm {  // dout ⊙ (f − h)
  const S *dout, *h, *f;
  std::int64_t L;
  __device__ float operator()(std::int64_t i, std::int64_t j) const {
    const std::int64_t k = i * L + j;
    return ld(dout + k) * (ld(f + k) - ld(h + k));
  }
};
template <class S>
struct NuAlphaTerm {  // dout ⊙ (ν (f − h) + ν'(α) z), ν' = −(2α − 1)ν³
  const S *dout, *h, *f;
  const float* alpha;
  std::int64_t L;
  __device__ float operator()(std::int64_t i, std::int64_t j) const {
    const std::int64_t k = i * L + j;
    const float a = alpha[j], v = nu_of(a), dv = -(2.f * a - 1.f) * v * v * v;
    const float hv = ld(h + k), fv = ld(f + k);
    const float z = hv + a * (fv - hv);
    return ld(dout + k) * (v * (fv - hv) + dv * z);
  }
};
// lerp / lerp_nu: df = g α, dh = g (1 − α) with g = dout (× ν(α) for lerp_nu); dh may alias dout.
template <class S>
__global__ void lerp_bwd_kernel(bool nu, S* dh, S* df, const S* dout, const float* alpha, std::int64_t N,
                                std::int64_t C) {
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < N * C; e += std::int64_t(gridDim.x) * blockDim.x) {
    const float a = alpha[e % C];
    const float g = nu ? ld(dout + e) * nu_of(a) : ld(dout + e);
    st(df + e, g * a);
    st(dh + e, g * (1.f - a));
  }
}

// ---- SLERP (nn/residual.hpp's slerp; the CPU's backend/cpu/residual.hpp):
// A = N(h), Bf = N(f), θ = 2·atan2(‖A − Bf‖, ‖A + Bf‖) clamped to π − 1e-4,
// z = g(1−α, θ) A + g(α, θ) Bf with g(β, θ) = sin(βθ)/sin θ, out = N(z).
// Below θ = 1e-3 the coefficients come from their Taylor series (the LERP
// limit). Backward recomputes A, Bf and the coefficients from h, f and the
// saved row norms and angle instead of storing six (N, C) coefficient rows.
inline constexpr float kSlerpMaxTheta = 3.14159265358979323846f - 1e-4f;
inline constexpr float kSlerpSeriesTheta = 1e-3f;
struct SlerpCoef {
  float g, gth, gb;  // g(β,θ), (∂g/∂θ)/sin θ, θ cos(βθ)/sin θ
};
__device__ __forceinline__ SlerpCoef slerp_coef(float b, float th) {
  if (th < kSlerpSeriesTheta) {
    const float t2 = th * th, b2 = b * b;
    return {b * (1.f + (1.f - b2) * t2 / 6.f), b * (1.f - b2) / 3.f + b * (1.f - b2) * (4.f - b2) * t2 / 30.f,
            1.f + (1.f - 3.f * b2) * t2 / 6.f};
  }
  const float s = sinf(th), co = cosf(th), sb = sinf(b * th), cb = cosf(b * th);
  const float inv_s = 1.f / s;
  return {sb * inv_s, (b * cb * s - sb * co) * inv_s * inv_s * inv_s, th * cb * inv_s};
}
template <class S>
__global__ void slerp_fwd_kernel(S* out, const S* h, const S* f, const float* alpha, k::ResidualCache c,
                                 std::int64_t N, std::int64_t C) {
  const std::int64_t row = warp_row();
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const S* hi = h + row * C;
  const S* fi = f + row * C;
  float nh, nf;
  warp_row_norms(hi, fi, C, lane, nh, nf);
  float sm = 0.f, sp = 0.f;
  for (std::int64_t j = lane; j < C; j += 32) {
    const float A = ld(hi + j) / nh, B = ld(fi + j) / nf;
    sm += (A - B) * (A - B);
    sp += (A + B) * (A + B);
  }
  float th = 2.f * atan2f(sqrtf(warp_sum(sm)), sqrtf(warp_sum(sp)));
  const bool clamp = th > kSlerpMaxTheta;
  if (clamp) th = kSlerpMaxTheta;
  float sz = 0.f;
  for (std::int64_t j = lane; j < C; j += 32) {
    const float A = ld(hi + j) / nh, B = ld(fi + j) / nf, a = alpha[j];
    const float z = slerp_coef(1.f - a, th).g * A + slerp_coef(a, th).g * B;
    sz += z * z;
  }
  const float nz = sqrtf(warp_sum(sz));
  if (lane == 0) {
    c.nh[row] = nh;
    c.nf[row] = nf;
    c.nz[row] = nz;
    c.th[row] = th;
    c.clamped[row] = clamp ? 1.f : 0.f;
  }
  S* o = out + row * C;
  for (std::int64_t j = lane; j < C; j += 32) {
    const float A = ld(hi + j) / nh, B = ld(fi + j) / nf, a = alpha[j];
    st(o + j, (slerp_coef(1.f - a, th).g * A + slerp_coef(a, th).g * B) / nz);
  }
}
// dα_j = Σ_i dz_ij (−g_β(1−α_j, θ_i) A_ij + g_β(α_j, θ_i) Bf_ij)
template <class S>
struct SlerpAlphaTerm {
  const S *dout, *out, *h, *f;
  const float *alpha, *dot;
  k::ResidualCache c;
  std::int64_t L;
  __device__ float operator()(std::int64_t i, std::int64_t j) const {
    const std::int64_t e = i * L + j;
    const float dz = (ld(dout + e) - ld(out + e) * dot[i]) / c.nz[i];
    const float A = ld(h + e) / c.nh[i], B = ld(f + e) / c.nf[i], a = alpha[j], th = c.th[i];
    return dz * (-slerp_coef(1.f - a, th).gb * A + slerp_coef(a, th).gb * B);
  }
};
// dz = Nᵀ(out, dout); du = −Σ dz ⊙ (P_θ A + Q_θ Bf) (0 at the clamp);
// dA = dz P + du Bf, dBf = dz Q + du A, then through the two row norms. dh may alias dout.
template <class S>
__global__ void slerp_bwd_kernel(S* dh, S* df, const S* dout, const S* out, const S* h, const S* f,
                                 const float* alpha, k::ResidualCache c, const float* rowdot, std::int64_t N,
                                 std::int64_t C) {
  const std::int64_t row = warp_row();
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const std::int64_t base = row * C;
  const float inz = 1.f / c.nz[row], d = rowdot[row], nh = c.nh[row], nf = c.nf[row], th = c.th[row];
  float du = 0.f;
  if (c.clamped[row] == 0.f) {
    for (std::int64_t j = lane; j < C; j += 32) {
      const float dz = (ld(dout + base + j) - ld(out + base + j) * d) * inz;
      const float A = ld(h + base + j) / nh, B = ld(f + base + j) / nf, a = alpha[j];
      du -= dz * (slerp_coef(1.f - a, th).gth * A + slerp_coef(a, th).gth * B);
    }
    du = warp_sum(du);
  }
  float sA = 0.f, sB = 0.f;
  for (std::int64_t j = lane; j < C; j += 32) {
    const float dz = (ld(dout + base + j) - ld(out + base + j) * d) * inz;
    const float A = ld(h + base + j) / nh, B = ld(f + base + j) / nf, a = alpha[j];
    sA += A * (dz * slerp_coef(1.f - a, th).g + du * B);
    sB += B * (dz * slerp_coef(a, th).g + du * A);
  }
  sA = warp_sum(sA);
  sB = warp_sum(sB);
  for (std::int64_t j = lane; j < C; j += 32) {
    const float dz = (ld(dout + base + j) - ld(out + base + j) * d) * inz;
    const float A = ld(h + base + j) / nh, B = ld(f + base + j) / nf, a = alpha[j];
    const float dA = dz * slerp_coef(1.f - a, th).g + du * B;
    const float dB = dz * slerp_coef(a, th).g + du * A;
    st(df + base + j, (dB - B * sB) / nf);
    st(dh + base + j, (dA - A * sA) / nh);  // last: may alias dout
  }
}

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
