#pragma once
// What multiplies the LM head's output: nothing (GPT) or nGPT's learned s_z.
// site<T, Backend>: forward(ctx, raw, N, V) returns the logits;
// backward(ctx, dlogits, raw, N, V) turns d loss/d logits into d loss/d raw in place.
#include <cstdint>
#include <string>
#include <string_view>

#include "normlab/nn/context.hpp"
#include "normlab/nn/params.hpp"
#include "normlab/nn/scale.hpp"

namespace normlab {

struct no_logit_scale {
  static constexpr std::string_view name = "none";
  template <class T, class Backend>
  struct site {
    void declare(ParamStore<T>&, const ModelConfig&) {}
    void bind(Arena<T>&, std::int64_t, std::int64_t) {}
    const T* forward(StepContext<T>&, const T* raw, std::int64_t, std::int64_t) { return raw; }
    void backward(StepContext<T>&, T*, const T*, std::int64_t, std::int64_t) {}
  };
};

// logits = raw ⊙ s_z, s_z (V, stored base_scale, effective × sz_init/base_scale).
template <ScaleKind K = ScaleKind::vector>
struct scaled_logits {
  static constexpr std::string_view name = "sz";
  template <class T, class Backend>
  struct site {
    ScaleParam<T, K> sz;
    T* eff = nullptr;     // (V) effective s_z of the last forward
    T* logits = nullptr;  // (N, V)
    void declare(ParamStore<T>& p, const ModelConfig& cfg) { sz.declare(p, "sz", cfg.vocab_size, cfg.base_scale); }
    void bind(Arena<T>& ar, std::int64_t N, std::int64_t V) {
      logits = ar.take(N * V);
      eff = ar.take(V);
    }
    static double k_const(const StepContext<T>& c) { return c.cfg->sz_init / c.cfg->base_scale; }
    const T* forward(StepContext<T>& c, const T* raw, std::int64_t N, std::int64_t V) {
      sz.template effective<Backend>(c, k_const(c), V, eff);
      Backend::scale_columns(logits, raw, eff, N, V);
      return logits;
    }
    void backward(StepContext<T>& c, T* dlogits, const T* raw, std::int64_t N, std::int64_t V) {
      Backend::fill(c.d_scale, V, T(0));
      Backend::column_dot_accumulate(c.d_scale, dlogits, raw, N, V, T(k_const(c)));
      sz.template fold_grad<Backend>(c, c.d_scale, V);
      Backend::scale_columns(dlogits, dlogits, eff, N, V);
    }
  };
};

}  // namespace normlab
