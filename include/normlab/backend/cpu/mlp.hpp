#pragma once
// The MLP's activations: plain pointwise ones (relu², GELU) and SwiGLU, plain and
// scaled (nGPT), with their backward passes over Eigen packets. Apart: the
// elementwise math of the block's second half.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "normlab/backend/cpu/bf16gemm_avx512.hpp"
#include "normlab/backend/cpu/primitives.hpp"
#include "normlab/core/pointwise.hpp"
#include "normlab/core/precision.hpp"

namespace normlab::cpu {

// The backward kernels below read their saved input U either as it is (U = T)
// or stored in bf16 (U = bfloat16), one row (or chunk) at a time widened
// exactly into this thread's scratch where element `at` of the float32 buffer
// would sit (scratch_row_like): the float32 kernel's bits on the rounded values.
namespace detail {
template <class T>
inline const T* widened(const T* x, std::int64_t, std::int64_t) {
  return x;
}
inline const float* widened(const bfloat16* x, std::int64_t n, std::int64_t at) {
  float* w = scratch_row_like<kWidened>(n, at);
  for (std::int64_t i = 0; i < n; ++i) w[i] = to_float(x[i]);
  return w;
}
// ... and write their gradient D either into its own buffer (D = T) or, kept
// in bf16, first into scratch where the float32 row would sit (the same bits),
// then rounded into place as round_to_bf16 rounds it (narrow).
template <class T>
inline T* output_row(T* d, std::int64_t, std::int64_t at) {
  return d + at;
}
template <class T>
inline void narrow(T*, const T*, std::int64_t) {}
#if defined(NORMLAB_HAVE_BF16GEMM_AVX512)
inline float* output_row(bfloat16*, std::int64_t n, std::int64_t at) { return scratch_row_like<kActRow>(n, at); }
inline void narrow(bfloat16* dst, const float* row, std::int64_t n) { avx512::bf16::round_to_bf16(dst, row, n); }
#endif
}  // namespace detail

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
namespace detail {
template <class T>
void pointwise_chunk(Pointwise fn, T* act, const T* u, std::int64_t m) {
  CArrayRow<T> x(u, m);
  ArrayRow<T> y(act, m);
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
}
}  // namespace detail
template <class T>
void pointwise_forward(Pointwise fn, T* act, const T* u, std::int64_t n) {
  constexpr std::int64_t chunk = 4096;
  parallel_for((n + chunk - 1) / chunk, n > kParallelGrain, [&](std::int64_t c) {
    const std::int64_t b = c * chunk;
    detail::pointwise_chunk(fn, act + b, u + b, std::min(n, b + chunk) - b);
  });
}
template <class T, class U = T, class D = T>
void pointwise_backward(Pointwise fn, D* du, const T* dact, const U* u, std::int64_t n) {
  constexpr std::int64_t chunk = 4096;
  parallel_for((n + chunk - 1) / chunk, n > kParallelGrain, [&](std::int64_t c) {
    const std::int64_t b = c * chunk, m = std::min(n, b + chunk) - b;
    CArrayRow<T> x(detail::widened(u + b, m, b), m), d(dact + b, m);
    ArrayRow<T> g(detail::output_row(du, m, b), m);
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
    detail::narrow(du + b, g.data(), m);
  });
}

// ---------------------------------------------------------------- SwiGLU
// uv (N, 2F) = [u | g]; act (N,F) = u ⊙ silu(g)
template <class T>
inline T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// Row-wise with Eigen arrays so exp() is vectorized (a scalar loop is
// exp-bound at ~4 GB/s; docs/perf.md).
namespace detail {
template <class T>
void swiglu_row(T* act, const T* uv, std::int64_t F) {
  CArrayRow<T> u(uv, F), g(uv + F, F);
  ArrayRow<T>(act, F) = u * g / (T(1) + (-g).exp());
}
}  // namespace detail
template <class T>
void swiglu_forward(T* act, const T* uv, std::int64_t N, std::int64_t F) {
  parallel_for(N, N * F > kParallelGrain,
               [&](std::int64_t i) { detail::swiglu_row(act + i * F, uv + i * 2 * F, F); });
}

namespace detail {
// The SwiGLU backward rows below run as one loop over Eigen's packets where
// every row starts on a packet boundary, instead of three to seven array
// statements each walking the row: at F = 1024 the scaled kernel's rows (u, g,
// dact, du, dg, s and the 2F partial: 36 KiB) overflow L1 between statements
// (docs/perf.md). The loop applies the same packet operations
// (pmul, padd, psub, pdiv, pexp) to the same operands in the same order as the
// Eigen expressions of the fallback, which evaluate a packet at a time from the
// first element when their destination is packet-aligned and the length a
// whole number of packets: the bits are the same. Elsewhere (rows off a packet
// boundary, F not a whole number of packets) those Eigen expressions run.
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
template <class T, class U = T, class D = T>
void swiglu_backward(D* duv, const T* dact, const U* uv, std::int64_t N, std::int64_t F) {
  using P = detail::Packet<T>;
  constexpr std::int64_t W = detail::kPacketSize<T>;
  const bool packets = detail::packet_rows<T>(F, duv);
  parallel_for(N, N * F > kParallelGrain, [&](std::int64_t i) {
    const T* row = detail::widened(uv + i * 2 * F, 2 * F, i * 2 * F);
    T* out = detail::output_row(duv, 2 * F, i * 2 * F);
    if (packets) {
      using namespace Eigen::internal;
      const T *u = row, *g = u + F, *da = dact + i * F;
      T *du = out, *dg = du + F;
      for (std::int64_t j = 0; j < F; j += W) {
        P dxu, dxg;
        detail::swiglu_packet_grads(ploadu<P>(da + j), ploadu<P>(u + j), ploadu<P>(g + j), dxu, dxg);
        pstore(du + j, dxu);
        pstore(dg + j, dxg);
      }
    } else {
      CArrayRow<T> u(row, F), g(row + F, F), da(dact + i * F, F);
      // σ(g) goes through the dg half of the output (no temporary): each
      // element of it is read before it is overwritten.
      ArrayRow<T> du(out, F), dg(out + F, F);
      dg = T(1) / (T(1) + (-g).exp());
      du = da * g * dg;
      dg = da * u * dg * (T(1) + g * (T(1) - dg));
    }
    detail::narrow(duv + i * 2 * F, out, 2 * F);
  });
}

// Scaled SwiGLU (nGPT): x = uv ⊙ s with s (2F) = [s_u | s_g]; act = x_u ⊙ silu(x_g).
// One pass, the scaled pre-activation is never stored.
namespace detail {
template <class T>
void scaled_swiglu_row(T* act, const T* uv, const T* s, std::int64_t F) {
  CArrayRow<T> su(s, F), sg(s + F, F), u(uv, F), g(uv + F, F);
  ArrayRow<T>(act, F) = (u * su) * (g * sg) / (T(1) + (-(g * sg)).exp());
}
}  // namespace detail
template <class T>
void scaled_swiglu_forward(T* act, const T* uv, const T* s, std::int64_t N, std::int64_t F) {
  parallel_for(N, N * F > kParallelGrain,
               [&](std::int64_t i) { detail::scaled_swiglu_row(act + i * F, uv + i * 2 * F, s, F); });
}

#if defined(NORMLAB_HAVE_BF16GEMM_AVX512)
// The forwards of a bf16 model that keeps act and the activation's input in
// bf16: each row (chunk) computed as above into scratch that sits where the
// float32 act buffer's row would (scratch_row_like: the same bits), then act
// and the input rounded as round_to_bf16 rounds them, while both are in cache.
inline void pointwise_forward(Pointwise fn, bfloat16* act, bfloat16* u_kept, const float* u, std::int64_t n) {
  constexpr std::int64_t chunk = 4096;
  parallel_for((n + chunk - 1) / chunk, n > kParallelGrain, [&](std::int64_t c) {
    const std::int64_t b = c * chunk, m = std::min(n, b + chunk) - b;
    float* y = detail::scratch_row_like<detail::kActRow>(m, b);
    detail::pointwise_chunk(fn, y, u + b, m);
    avx512::bf16::round_to_bf16(act + b, y, m);
    avx512::bf16::round_to_bf16(u_kept + b, u + b, m);
  });
}
inline void swiglu_forward(bfloat16* act, bfloat16* uv_kept, const float* uv, std::int64_t N, std::int64_t F) {
  parallel_for(N, N * F > kParallelGrain, [&](std::int64_t i) {
    float* y = detail::scratch_row_like<detail::kActRow>(F, i * F);
    detail::swiglu_row(y, uv + i * 2 * F, F);
    avx512::bf16::round_to_bf16(act + i * F, y, F);
    avx512::bf16::round_to_bf16(uv_kept + i * 2 * F, uv + i * 2 * F, 2 * F);
  });
}
inline void scaled_swiglu_forward(bfloat16* act, bfloat16* uv_kept, const float* uv, const float* s, std::int64_t N,
                                  std::int64_t F) {
  parallel_for(N, N * F > kParallelGrain, [&](std::int64_t i) {
    float* y = detail::scratch_row_like<detail::kActRow>(F, i * F);
    detail::scaled_swiglu_row(y, uv + i * 2 * F, s, F);
    avx512::bf16::round_to_bf16(act + i * F, y, F);
    avx512::bf16::round_to_bf16(uv_kept + i * 2 * F, uv + i * 2 * F, 2 * F);
  });
}
#endif

// Backward of scaled_swiglu_forward in one pass: duv = dx ⊙ s and
// ds += c · Σ_rows dx ⊙ uv, with dx the gradient at the scaled pre-activation
// (c: the scale's re-parameterisation constant). The s_uv sum goes by row
// chunks (row_chunk_reduce): a column-blocked walk over a 2F-wide matrix
// misses the TLB on every row.
template <class T, class U = T, class D = T>
void scaled_swiglu_backward(D* duv, T* ds, const T* dact, const U* uv, const T* s, std::int64_t N, std::int64_t F,
                            T c) {
  using P = detail::Packet<T>;
  constexpr std::int64_t W = detail::kPacketSize<T>;
  // row_chunk_reduce's partials are packet-aligned rows of 2F when F is whole packets.
  const bool packets = detail::packet_rows<T>(F, duv);
  CArrayRow<T> su(s, F), sg(s + F, F);
  row_chunk_reduce(ds, N, 2 * F, N * F > kParallelGrain, [&](std::int64_t i, ArrayRow<T>& partial) {
    const T* row = detail::widened(uv + i * 2 * F, 2 * F, i * 2 * F);
    T* out = detail::output_row(duv, 2 * F, i * 2 * F);
    if (packets && detail::packet_rows<T>(F, partial.data())) {
      using namespace Eigen::internal;
      const T *u = row, *g = u + F, *da = dact + i * F;
      T *du = out, *dg = du + F, *pu = partial.data(), *pg = pu + F;
      for (std::int64_t j = 0; j < F; j += W) {
        const P uj = ploadu<P>(u + j), gj = ploadu<P>(g + j), suj = ploadu<P>(s + j), sgj = ploadu<P>(s + F + j);
        P dxu, dxg;
        detail::swiglu_packet_grads(ploadu<P>(da + j), pmul(uj, suj), pmul(gj, sgj), dxu, dxg);
        pstore(pu + j, padd(pload<P>(pu + j), pmul(dxu, uj)));
        pstore(pg + j, padd(pload<P>(pg + j), pmul(dxg, gj)));
        pstore(du + j, pmul(dxu, suj));
        pstore(dg + j, pmul(dxg, sgj));
      }
    } else {
      CArrayRow<T> u(row, F), g(row + F, F), da(dact + i * F, F);
      ArrayRow<T> du(out, F), dg(out + F, F);
      dg = T(1) / (T(1) + (-(g * sg)).exp());                      // σ(x_g), parked in dg
      du = da * (g * sg) * dg;                                     // d x_u = da ⊙ silu(x_g)
      dg = da * (u * su) * dg * (T(1) + (g * sg) * (T(1) - dg));  // d x_g
      partial.head(F) += du * u;
      partial.tail(F) += dg * g;
      du *= su;
      dg *= sg;
    }
    detail::narrow(duv + i * 2 * F, out, 2 * F);
  }, c);
}

}  // namespace normlab::cpu
