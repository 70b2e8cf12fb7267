#pragma once
// The built-in residual rules' kernels (add, lerp, lerp_nu, lerp_retract, slerp):
// forward, backward and their dα terms. Apart: the rules are one family, the
// CUDA side of backend/cpu/residual.hpp.
#include "normlab/backend/cuda/common.cuh"

namespace normlab::cuda::dev {

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

}  // namespace normlab::cuda::dev
