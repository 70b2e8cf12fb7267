#pragma once
// The MLP's gated activation, act (N, F) from uv (N, 2F) = x W_fcᵀ = [u | g]:
//   swiglu              act = u ⊙ silu(g)
//   scaled_swiglu<K>    nGPT: [u | g] ⊙ s_uv·√d first (s_uv learned, K its kind)
// site<T, Backend>: forward(ctx, act, uv, N, F); backward(ctx, duv, dact, uv, N, F).
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

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
    void backward(StepContext<T>&, T* duv, const T* dact, const T* uv, std::int64_t N, std::int64_t F) {
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
      suv.declare(p, prefix + "suv", 8 * cfg.n_embd, 1.0);
    }
    static double k_const(const StepContext<T>& c) { return c.cfg->suv_init * std::sqrt(double(c.cfg->n_embd)); }
    void forward(StepContext<T>& c, T* act, const T* uv, std::int64_t N, std::int64_t F) {
      suv.template effective<Backend>(c, k_const(c), 2 * F, c.scale_tmp);
      Backend::scaled_swiglu_forward(act, uv, c.scale_tmp, N, F);
    }
    void backward(StepContext<T>& c, T* duv, const T* dact, const T* uv, std::int64_t N, std::int64_t F) {
      suv.template effective<Backend>(c, k_const(c), 2 * F, c.scale_tmp);
      Backend::fill(c.d_scale, 2 * F, T(0));
      Backend::scaled_swiglu_backward(duv, c.d_scale, dact, uv, c.scale_tmp, N, F, T(k_const(c)));
      suv.template fold_grad<Backend>(c, c.d_scale, 2 * F);
    }
  };
};

}  // namespace normlab
