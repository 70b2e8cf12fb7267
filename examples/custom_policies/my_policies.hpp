#pragma once
// Three ideas of a user's own, written against normlab's policy interfaces in
// the user's own file — nothing in include/normlab is edited:
//   dyt        Dynamic Tanh (Zhu et al. 2025, "Transformers without
//              Normalization"): y = γ ⊙ tanh(a·x) + β with one learned scalar a
//              per site, replacing RMSNorm before each sub-layer and the head
//   peri_ln    Peri-LN: RMSNorm on each sub-layer's input *and* output
//              (h ← h + Norm(f(Norm(h)))) — a composition, no new code
//   gated_add  a residual rule: h ← h + g ⊙ f with a learned gate g per
//              dimension, started at the config's alpha_init (ReZero's gate,
//              per dimension, not at zero)
// Each site is written with the CPU backend's row loops (Backend::for_rows,
// Backend::column_reduce), so these run on normlab's CPU backend.
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include <normlab/normlab.hpp>

namespace my {

using normlab::Arena;
using normlab::ModelConfig;
using normlab::NormAxis;
using normlab::ParamInit;
using normlab::ParamRole;
using normlab::ParamStore;
using normlab::ScaleKind;
using normlab::StepContext;

// ------------------------------------------------------------------ DyT
// Alpha0, the initial a, is a hyperparameter of the method (the paper: 0.5 for
// non-LLM models, 0.2–0.8 for LLMs, by width). With the inputs of
// std ~0.3 that the gradient check draws, a = 0.5 leaves the attention scores so small that the q/k
// gradients sit at the finite-difference noise floor (measured: 4.9e-6
// relative); the example uses a = 1 (tanh(x) ≈ x for small x), where the check
// is well conditioned (3.6e-7).
template <double Alpha0 = 1.0>
struct dyt {
  static constexpr std::string_view name = "dyt";
  static constexpr double alpha0 = Alpha0;
  template <class T, class Backend>
  struct site {
    std::size_t a = 0, gamma = 0, beta = 0;
    T* t = nullptr;  // (rows, C) tanh(a x), kept for backward
    T* y = nullptr;  // (rows, C)
    void declare(ParamStore<T>& p, const std::string& prefix, std::string_view where, const ModelConfig& cfg) {
      const std::string stem = prefix + "dyt_" + std::string(where);
      a = p.add(stem + ".alpha", {1}, ParamRole::gain, NormAxis::none, ParamInit::constant(alpha0));
      gamma = p.add(stem + ".weight", {cfg.n_embd}, ParamRole::gain, NormAxis::none, ParamInit::constant(1));
      beta = p.add(stem + ".bias", {cfg.n_embd}, ParamRole::gain, NormAxis::none, ParamInit::constant(0));
    }
    void bind(Arena<T>& ar, std::int64_t rows, std::int64_t C) {
      t = ar.take(rows * C);
      y = ar.take(rows * C);
    }
    const T* forward(StepContext<T>& c, const T* x, std::int64_t rows, std::int64_t C) {
      const T av = c.P(a)[0];
      const T* g = c.P(gamma);
      const T* b = c.P(beta);
      Backend::for_rows(rows, C, [&](std::int64_t i) {
        for (std::int64_t j = 0; j < C; ++j) {
          const std::int64_t k = i * C + j;
          t[k] = std::tanh(av * x[k]);
          y[k] = g[j] * t[k] + b[j];
        }
      });
      return y;
    }
    // dγ += Σ dy ⊙ t; dβ += Σ dy; dz = dy ⊙ γ ⊙ (1 − t²); dx = a·dz; da += Σ dz ⊙ x.
    const T* backward(StepContext<T>& c, T* dx, const T* dy, const T* x, std::int64_t rows, std::int64_t C) {
      const T av = c.P(a)[0];
      const T* g = c.P(gamma);
      Backend::column_reduce(c.G(gamma), rows, C, [&](std::int64_t i, std::int64_t j) { return dy[i * C + j] * t[i * C + j]; });
      Backend::column_reduce(c.G(beta), rows, C, [&](std::int64_t i, std::int64_t j) { return dy[i * C + j]; });
      T* da = c.d_scale;  // (C) per-column partial sums of da, summed below in a fixed order
      Backend::fill(da, C, T(0));
      Backend::column_reduce(da, rows, C, [&](std::int64_t i, std::int64_t j) {
        const std::int64_t k = i * C + j;
        return dy[k] * g[j] * (T(1) - t[k] * t[k]) * x[k];
      });
      T acc = 0;
      for (std::int64_t j = 0; j < C; ++j) acc += da[j];
      c.G(a)[0] += acc;
      Backend::for_rows(rows, C, [&](std::int64_t i) {
        for (std::int64_t j = 0; j < C; ++j) {
          const std::int64_t k = i * C + j;
          dx[k] = dy[k] * g[j] * (T(1) - t[k] * t[k]) * av;
        }
      });
      return dx;
    }
  };
};

// Pre-norm GPT with DyT in place of every RMSNorm.
struct dyt_scheme : normlab::prenorm_rms {
  static constexpr std::string_view name = "dyt";
  using input_norm = dyt<>;
  using final_norm = dyt<>;
};

// ------------------------------------------------------------------ Peri-LN
struct peri_ln : normlab::prenorm_rms {
  static constexpr std::string_view name = "peri_ln";
  using output_norm = normlab::rms_norm;
};

// ------------------------------------------------------------------ gated_add
struct gated_add {
  static constexpr std::string_view name = "gated_add";
  static constexpr bool learned_alpha = true;  // a learned step (the policy check reads it)
  template <class T, class Backend, ScaleKind /*AlphaKind: one gate per dimension here*/>
  struct site {
    std::size_t gate = 0;
    void declare(ParamStore<T>& p, const std::string& prefix, std::string_view where, const ModelConfig& cfg) {
      gate = p.add(prefix + std::string(where) + "_gate", {cfg.n_embd}, ParamRole::alpha, NormAxis::none,
                   ParamInit::constant(cfg.alpha_init));
    }
    void bind(Arena<T>&, std::int64_t, std::int64_t) {}
    void forward(StepContext<T>& c, T* out, const T* h, const T* f, std::int64_t N, std::int64_t C) {
      const T* g = c.P(gate);
      Backend::for_rows(N, C, [&](std::int64_t i) {
        for (std::int64_t j = 0; j < C; ++j) out[i * C + j] = h[i * C + j] + g[j] * f[i * C + j];
      });
    }
    // dg += Σ dout ⊙ f; df = dout ⊙ g; dh = dout (dh may alias dout, so it is written last).
    void backward(StepContext<T>& c, T* dh, T* df, const T* dout, const T* /*out*/, const T* /*h*/, const T* f,
                  std::int64_t N, std::int64_t C) {
      const T* g = c.P(gate);
      Backend::column_reduce(c.G(gate), N, C, [&](std::int64_t i, std::int64_t j) { return dout[i * C + j] * f[i * C + j]; });
      Backend::for_rows(N, C, [&](std::int64_t i) {
        for (std::int64_t j = 0; j < C; ++j) {
          const std::int64_t k = i * C + j;
          df[k] = dout[k] * g[j];
          dh[k] = dout[k];
        }
      });
    }
  };
};

// ------------------------------------------------------------------ the variants, as normlab's driver wants them
// (name, what it isolates, default learning rate, the model type).
#define MY_VARIANT(NAME, SCHEME, RULE, LR, WHAT)                          \
  struct NAME {                                                           \
    static constexpr std::string_view name = #NAME;                       \
    static constexpr std::string_view isolates = WHAT;                    \
    static constexpr double default_lr = LR;                              \
    template <class T>                                                    \
    using model = normlab::Transformer<T, SCHEME, RULE>;                  \
  };
MY_VARIANT(gpt_dyt, dyt_scheme, normlab::residual_add, 3e-3, "DyT (γ tanh(a x) + β) in place of RMSNorm")
MY_VARIANT(gpt_periln, peri_ln, normlab::residual_add, 3e-3, "Peri-LN: RMSNorm on each sub-layer's input and output")
MY_VARIANT(gpt_gated, normlab::prenorm_rms, gated_add, 3e-3, "a learned per-dimension gate on each residual branch")
#undef MY_VARIANT

}  // namespace my
