#pragma once
// Normalization sites: what turns the residual stream into a sub-layer's input
// (input_norm), a sub-layer's output before it joins the stream (output_norm,
// Peri-LN), and the last hidden state into the LM head's input (final_norm).
// Each is a type whose `site<T, Backend>` declares its parameters, saves what
// backward needs, and runs forward/backward:
//   const T* forward(ctx, x, rows, C)            returns y (its own buffer, or x)
//   const T* backward(ctx, scratch, dy, x, rows, C)
//       returns dx: written into scratch (rows × C), or dy itself for the identity
// `where` names the site in parameter names ("att", "mlp", "f", "att_out", …).
// Optional, for a site whose output only products read (its backward reads x
// and its own statistics, never y): a bf16 run then keeps y in bf16, half the
// bytes and the same products (the model calls these instead of bind/forward):
//   void bind_bf16(arena, rows, C)
//   const bfloat16* forward_bf16(ctx, x, rows, C)   y rounded as packing rounds it
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "normlab/core/precision.hpp"
#include "normlab/nn/context.hpp"
#include "normlab/nn/params.hpp"

namespace normlab {

// No normalization: the sub-layer sees the stream itself.
struct no_norm {
  static constexpr std::string_view name = "none";
  template <class T, class Backend>
  struct site {
    void declare(ParamStore<T>&, const std::string& /*prefix*/, std::string_view /*where*/, const ModelConfig&) {}
    void bind(Arena<T>&, std::int64_t /*rows*/, std::int64_t /*C*/) {}
    const T* forward(StepContext<T>&, const T* x, std::int64_t, std::int64_t) { return x; }
    const T* backward(StepContext<T>&, T* /*scratch*/, const T* dy, const T* /*x*/, std::int64_t, std::int64_t) {
      return dy;
    }
  };
};

template <class Norm>
inline constexpr bool is_identity_norm = std::is_same_v<Norm, no_norm>;

// RMSNorm with a learned gain (initialised to 1), ε from the config: the
// reference's "<prefix>rmsnorm_<where>.weight".
struct rms_norm {
  static constexpr std::string_view name = "rmsnorm";
  template <class T, class Backend>
  struct site {
    std::size_t gain = 0;
    T* y = nullptr;            // (rows, C)
    bfloat16* y16 = nullptr;   // (rows, C) y kept in bf16 instead (bind_bf16)
    T* rstd = nullptr;         // (rows)
    static constexpr bool kBf16Output = requires(bfloat16* h, T* t, const T* x, std::int64_t n, T e) {
      Backend::rmsnorm_forward(h, t, x, x, n, n, e);
    };
    void declare(ParamStore<T>& p, const std::string& prefix, std::string_view where, const ModelConfig& cfg) {
      gain = p.add(prefix + "rmsnorm_" + std::string(where) + ".weight", {cfg.n_embd}, ParamRole::gain,
                   NormAxis::none, ParamInit::constant(1));
    }
    void bind(Arena<T>& ar, std::int64_t rows, std::int64_t C) {
      y = ar.take(rows * C);
      rstd = ar.take(rows);
    }
    const T* forward(StepContext<T>& c, const T* x, std::int64_t rows, std::int64_t C) {
      Backend::rmsnorm_forward(y, rstd, x, c.P(gain), rows, C, T(c.cfg->rmsnorm_eps));
      return y;
    }
    // Backward reads x and rstd only: y may be kept in bf16.
    void bind_bf16(Arena<T>& ar, std::int64_t rows, std::int64_t C)
      requires kBf16Output
    {
      y16 = ar.take_bf16(rows * C);
      rstd = ar.take(rows);
    }
    const bfloat16* forward_bf16(StepContext<T>& c, const T* x, std::int64_t rows, std::int64_t C)
      requires kBf16Output
    {
      Backend::rmsnorm_forward(y16, rstd, x, c.P(gain), rows, C, T(c.cfg->rmsnorm_eps));
      return y16;
    }
    const T* backward(StepContext<T>& c, T* scratch, const T* dy, const T* x, std::int64_t rows, std::int64_t C) {
      Backend::rmsnorm_backward(scratch, c.G(gain), dy, x, c.P(gain), rstd, rows, C);
      return scratch;
    }
  };
};

// LayerNorm (GPT-2's): mean-subtracting, a learned gain (initialised to 1)
// and, with Bias, a learned bias (initialised to 0); ε from the config's
// rmsnorm_eps (GPT-2 uses 1e-5). "<prefix>layernorm_<where>.weight" / ".bias".
// Biases are vectors: ParamRole::gain (no weight decay, AdamW under Muon).
template <bool Bias>
struct layer_norm_with {
  static constexpr std::string_view name = Bias ? "layernorm" : "layernorm_nobias";
  template <class T, class Backend>
  struct site {
    static_assert(requires(T* y, const T* x, std::int64_t n, T e) {
      Backend::layernorm_forward(y, y, y, x, x, x, n, n, e);
      Backend::layernorm_backward(y, y, y, x, x, x, x, x, n, n);
    }, "normlab: layer_norm needs Backend::layernorm_forward(y, mean, rstd, x, w, b, N, C, eps) and "
       "layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, N, C); this backend lacks them "
       "(docs/extending.md, 'adding an op to your backend')");
    std::size_t gain = 0, bias = 0;
    T* y = nullptr;     // (rows, C)
    T* mean = nullptr;  // (rows)
    T* rstd = nullptr;  // (rows)
    void declare(ParamStore<T>& p, const std::string& prefix, std::string_view where, const ModelConfig& cfg) {
      const std::string base = prefix + "layernorm_" + std::string(where);
      gain = p.add(base + ".weight", {cfg.n_embd}, ParamRole::gain, NormAxis::none, ParamInit::constant(1));
      if constexpr (Bias)
        bias = p.add(base + ".bias", {cfg.n_embd}, ParamRole::gain, NormAxis::none, ParamInit::constant(0));
    }
    void bind(Arena<T>& ar, std::int64_t rows, std::int64_t C) {
      y = ar.take(rows * C);
      mean = ar.take(rows);
      rstd = ar.take(rows);
    }
    const T* forward(StepContext<T>& c, const T* x, std::int64_t rows, std::int64_t C) {
      Backend::layernorm_forward(y, mean, rstd, x, c.P(gain), Bias ? c.P(bias) : static_cast<const T*>(nullptr), rows,
                                 C, T(c.cfg->rmsnorm_eps));
      return y;
    }
    const T* backward(StepContext<T>& c, T* scratch, const T* dy, const T* x, std::int64_t rows, std::int64_t C) {
      Backend::layernorm_backward(scratch, c.G(gain), Bias ? c.G(bias) : static_cast<T*>(nullptr), dy, x, c.P(gain),
                                  mean, rstd, rows, C);
      return scratch;
    }
  };
};
using layer_norm = layer_norm_with<true>;
using layer_norm_nobias = layer_norm_with<false>;

}  // namespace normlab
