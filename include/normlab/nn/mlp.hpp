#pragma once
// The MLP's activation, act (N, F) from uv = x W_fcᵀ. F = cfg.ff_dim().
// Gated (uv (N, 2F) = [u | g], W_fc (2F, C)):
//   swiglu              act = u ⊙ silu(g)
//   scaled_swiglu<K>    nGPT: [u | g] ⊙ s_uv·√d first (s_uv learned, K its kind)
// Plain (`static constexpr bool gated = false`: uv (N, F), W_fc (F, C)):
//   relu2               act = relu(u)²          (Primer; modded-nanoGPT)
//   gelu_tanh           act = GELU(u), tanh form (GPT-2)
//   gelu_erf            act = GELU(u) = u·Φ(u)   (BERT, PyTorch's default)
// site<T, Backend>: forward(ctx, act, uv, N, F); backward(ctx, duv, dact, uv, N, F).
// A type without `gated` is gated (as every activation was before plain ones).
// Optionally backward(ctx, duv, dact, const bfloat16* uv, N, F): uv stored in
// bf16, which a bf16 model then does (the built-ins, where the backend reads it);
// forward(ctx, bfloat16* act, bfloat16* uv_kept, uv, N, F): act and uv
// stored in bf16 in the same pass (else the model rounds them after forward);
// and backward(ctx, bfloat16* duv, dact, const bfloat16* uv, N, F): the
// gradient at uv, which products alone read, written in bf16 as well.
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "normlab/core/pointwise.hpp"
#include "normlab/core/precision.hpp"
#include "normlab/nn/context.hpp"
#include "normlab/nn/params.hpp"
#include "normlab/nn/scale.hpp"

namespace normlab {

struct swiglu {
  static constexpr std::string_view name = "swiglu";
  template <class T, class Backend>
  struct site {
    void declare(ParamStore<T>&, const std::string&, const ModelConfig&) {}
    void forward(StepContext<T>&, T* act, const T* uv, std::int64_t N, std::int64_t F) {
      Backend::swiglu_forward(act, uv, N, F);
    }
    void forward(StepContext<T>&, bfloat16* act, bfloat16* uv_kept, const T* uv, std::int64_t N, std::int64_t F)
      requires requires(bfloat16* h, const T* x, std::int64_t n) { Backend::swiglu_forward(h, h, x, n, n); }
    {
      Backend::swiglu_forward(act, uv_kept, uv, N, F);
    }
    void backward(StepContext<T>&, T* duv, const T* dact, const T* uv, std::int64_t N, std::int64_t F) {
      Backend::swiglu_backward(duv, dact, uv, N, F);
    }
    template <class D>
    void backward(StepContext<T>&, D* duv, const T* dact, const bfloat16* uv, std::int64_t N, std::int64_t F)
      requires requires(D* d, const T* a, const bfloat16* x, std::int64_t n) { Backend::swiglu_backward(d, a, x, n, n); }
    {
      Backend::swiglu_backward(duv, dact, uv, N, F);
    }
  };
};

// s_uv (2F, stored 1, effective × suv_init·√d): the paper's s_u and s_ν in one
// vector, so the pre-activation has unit variance for unit-norm rows of W_fc.
template <ScaleKind K = ScaleKind::vector>
struct scaled_swiglu {
  static constexpr std::string_view name = "scaled_swiglu";
  template <class T, class Backend>
  struct site {
    ScaleParam<T, K> suv;
    void declare(ParamStore<T>& p, const std::string& prefix, const ModelConfig& cfg) {
      suv.declare(p, prefix + "suv", 2 * cfg.ff_dim(), 1.0);
    }
    static double k_const(const StepContext<T>& c) { return c.cfg->suv_init * std::sqrt(double(c.cfg->n_embd)); }
    void forward(StepContext<T>& c, T* act, const T* uv, std::int64_t N, std::int64_t F) {
      suv.template effective<Backend>(c, k_const(c), 2 * F, c.scale_tmp);
      Backend::scaled_swiglu_forward(act, uv, c.scale_tmp, N, F);
    }
    void forward(StepContext<T>& c, bfloat16* act, bfloat16* uv_kept, const T* uv, std::int64_t N, std::int64_t F)
      requires requires(bfloat16* h, const T* x, std::int64_t n) { Backend::scaled_swiglu_forward(h, h, x, x, n, n); }
    {
      suv.template effective<Backend>(c, k_const(c), 2 * F, c.scale_tmp);
      Backend::scaled_swiglu_forward(act, uv_kept, uv, c.scale_tmp, N, F);
    }
    template <class D, class U>
    void backward(StepContext<T>& c, D* duv, const T* dact, const U* uv, std::int64_t N, std::int64_t F)
      requires requires(D* d, T* t, const T* a, const U* x, std::int64_t n, T k) {
        Backend::scaled_swiglu_backward(d, t, a, x, a, n, n, k);
      }
    {
      suv.template effective<Backend>(c, k_const(c), 2 * F, c.scale_tmp);
      Backend::fill(c.d_scale, 2 * F, T(0));
      Backend::scaled_swiglu_backward(duv, c.d_scale, dact, uv, c.scale_tmp, N, F, T(k_const(c)));
      suv.template fold_grad<Backend>(c, c.d_scale, 2 * F);
    }
  };
};

// Whether the activation reads [u | g] (2F wide) or u alone (F wide).
template <class A>
constexpr bool activation_gated() {
  if constexpr (requires { A::gated; }) return bool(A::gated);
  else return true;
}

// The plain activations: one elementwise function and its derivative, run by
// the backend's `pointwise_forward/backward` (no parameters).

template <Pointwise Fn, const char* Name>
struct plain_activation {
  static constexpr std::string_view name = Name;
  static constexpr bool gated = false;
  template <class T, class Backend>
  struct site {
    void declare(ParamStore<T>&, const std::string&, const ModelConfig&) {}
    void forward(StepContext<T>&, T* act, const T* u, std::int64_t N, std::int64_t F) {
      Backend::pointwise_forward(Fn, act, u, N * F);
    }
    void forward(StepContext<T>&, bfloat16* act, bfloat16* u_kept, const T* u, std::int64_t N, std::int64_t F)
      requires requires(bfloat16* h, const T* x, std::int64_t n) { Backend::pointwise_forward(Fn, h, h, x, n); }
    {
      Backend::pointwise_forward(Fn, act, u_kept, u, N * F);
    }
    template <class D, class U>
    void backward(StepContext<T>&, D* du, const T* dact, const U* u, std::int64_t N, std::int64_t F)
      requires requires(D* d, const T* a, const U* x, std::int64_t n) { Backend::pointwise_backward(Fn, d, a, x, n); }
    {
      Backend::pointwise_backward(Fn, du, dact, u, N * F);
    }
  };
};
namespace detail {
inline constexpr char relu2_name[] = "relu2";
inline constexpr char gelu_tanh_name[] = "gelu_tanh";
inline constexpr char gelu_erf_name[] = "gelu_erf";
}  // namespace detail
using relu2 = plain_activation<Pointwise::relu2, detail::relu2_name>;
using gelu_tanh = plain_activation<Pointwise::gelu_tanh, detail::gelu_tanh_name>;
using gelu_erf = plain_activation<Pointwise::gelu_erf, detail::gelu_erf_name>;

}  // namespace normlab
