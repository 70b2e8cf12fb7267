#pragma once
// Residual rules: how a sub-layer's output f joins the residual stream h.
//   residual_add:  out = h + f
//   lerp:          out = h + α ⊙ (f − h)
//   lerp_nu:       out = ν(α) ⊙ (h + α ⊙ (f − h)),  ν(α) = 1/√((1−α)² + α²)
//   lerp_retract:  A = N(h), Bf = N(f), z = A + α ⊙ (Bf − A), out = N(z)
//   slerp:         A = N(h), Bf = N(f), θ = ∠(A, Bf),
//                  z = g(1−α, θ) ⊙ A + g(α, θ) ⊙ Bf with g(β, θ) = sin(βθ)/sin θ, out = N(z)
// α here is the *effective* per-dimension step (already |stored × constant|);
// the rule's site owns the stored parameter and maps dα back to it.
//
// A residual rule is a type with a name, three facts the block's policy check
// reads (learned_alpha, retracts: its output lies on the unit sphere,
// nu_scaled), and `site<T, Backend, AlphaKind>`:
//   declare(params, prefix, where, cfg)   where = "attn" | "mlp"
//   bind(arena, N, C)                    what backward needs
//   forward(ctx, out, h, f, N, C)
//   backward(ctx, dh, df, dout, out, h, f, N, C)   dh may alias dout
// The built-in rules share residual_site below and name their math (`math`,
// a ResidualMath), which each backend implements (the CPU's in
// backend/cpu/residual.hpp); a user's rule writes its own site.
// Optional: `static constexpr bool backward_reads_branch = false` where the
// site's backward never reads f (residual_add): a block whose output norms are
// the identity then keeps no branch output for backward (f passed as null).
#include <cmath>
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>

#include "normlab/backend/residual_math.hpp"
#include "normlab/nn/context.hpp"
#include "normlab/nn/params.hpp"
#include "normlab/nn/scale.hpp"
#include "normlab/tensor/tensor.hpp"

namespace normlab {

template <class>
inline constexpr bool dependent_false = false;

template <class Rule, class T, class Backend, ScaleKind AlphaKind>
struct residual_site;

// ------------------------------------------------------------------ the rules
struct residual_add {  // h ← h + f
  static constexpr std::string_view name = "add";
  static constexpr bool learned_alpha = false;
  static constexpr bool retracts = false;  // output lies on the unit sphere
  static constexpr bool nu_scaled = false;
  static constexpr ResidualMath math = ResidualMath::add;
  static constexpr bool backward_reads_branch = false;  // dh = df = dout
  template <class T, class Backend, ScaleKind AlphaKind = ScaleKind::vector>
  using site = residual_site<residual_add, T, Backend, AlphaKind>;
};
struct lerp {  // h ← h + |α| ⊙ (f − h)
  static constexpr std::string_view name = "lerp";
  static constexpr bool learned_alpha = true;
  static constexpr bool retracts = false;
  static constexpr bool nu_scaled = false;
  static constexpr ResidualMath math = ResidualMath::lerp;
  template <class T, class Backend, ScaleKind AlphaKind = ScaleKind::vector>
  using site = residual_site<lerp, T, Backend, AlphaKind>;
};
struct lerp_nu {  // h ← ν(α) ⊙ (h + |α| ⊙ (f − h)), ν(α) = 1/√((1−α)² + α²)
  static constexpr std::string_view name = "lerp_nu";
  static constexpr bool learned_alpha = true;
  static constexpr bool retracts = false;
  static constexpr bool nu_scaled = true;
  static constexpr ResidualMath math = ResidualMath::lerp_nu;
  template <class T, class Backend, ScaleKind AlphaKind = ScaleKind::vector>
  using site = residual_site<lerp_nu, T, Backend, AlphaKind>;
};
struct lerp_retract {  // h ← N(N(h) + |α| ⊙ (N(f) − N(h)))
  static constexpr std::string_view name = "lerp_retract";
  static constexpr bool learned_alpha = true;
  static constexpr bool retracts = true;
  static constexpr bool nu_scaled = false;
  static constexpr ResidualMath math = ResidualMath::lerp_retract;
  template <class T, class Backend, ScaleKind AlphaKind = ScaleKind::vector>
  using site = residual_site<lerp_retract, T, Backend, AlphaKind>;
};
struct slerp {  // h ← N(sin((1−α)θ)/sin θ ⊙ N(h) + sin(αθ)/sin θ ⊙ N(f)), θ = ∠(h, f)
  static constexpr std::string_view name = "slerp";
  static constexpr bool learned_alpha = true;
  static constexpr bool retracts = true;
  static constexpr bool nu_scaled = false;
  static constexpr ResidualMath math = ResidualMath::slerp;
  template <class T, class Backend, ScaleKind AlphaKind = ScaleKind::vector>
  using site = residual_site<slerp, T, Backend, AlphaKind>;
};

// The facts are optional in a user's rule (absent = false).
template <class R>
consteval bool rule_learns_alpha() {
  if constexpr (requires { R::learned_alpha; }) return R::learned_alpha;
  else return false;
}
template <class R>
consteval bool rule_retracts() {
  if constexpr (requires { R::retracts; }) return R::retracts;
  else return false;
}
template <class R>
consteval bool rule_nu_scaled() {
  if constexpr (requires { R::nu_scaled; }) return R::nu_scaled;
  else return false;
}

// Stands in for a backend when a concept only names a site type.
struct concept_probe_backend {};

template <class R>
concept ResidualRule = requires {
  { R::name } -> std::convertible_to<std::string_view>;
  typename R::template site<float, concept_probe_backend, ScaleKind::vector>;
};

// A learned residual step α: stored × alpha_init/base_scale, used as |·|
// (initialised to base_scale, so effective α starts at alpha_init), one value
// per dimension or one learned scalar.
template <class T, ScaleKind K>
struct ResidualStep {
  static_assert(K != ScaleKind::fixed, "normlab: a residual step α is learned (vector or scalar), not fixed");
  std::size_t offset = 0;
  void declare(ParamStore<T>& p, std::string name, const ModelConfig& cfg) {
    offset = p.add(std::move(name), {K == ScaleKind::scalar ? 1 : cfg.n_embd}, ParamRole::alpha, NormAxis::none,
                   ParamInit::constant(cfg.base_scale));
  }
  static double k_const(const StepContext<T>& c) { return c.cfg->alpha_init / c.cfg->base_scale; }
  // out(C) = |stored × k| (broadcast for a scalar α).
  template <class Backend>
  void effective(const StepContext<T>& c, T* out) const {
    Backend::effective_scale(out, c.P(offset), k_const(c), c.C(), K == ScaleKind::scalar, /*absolute=*/true);
  }
  // dα (effective, per dimension) → the stored parameter: d|p k|/dp = sign(p k)·k
  // (0 at 0, as torch.abs); d_scale is scratch of length C.
  template <class Backend>
  void grad_to_stored(const StepContext<T>& c, const T* dalpha, T* d_scale) const {
    Backend::alpha_grad_to_stored(c.G(offset), d_scale, dalpha, c.P(offset), k_const(c), c.C(),
                                  K == ScaleKind::scalar);
  }
};

// ------------------------------------------------------------------ the built-in rules' site
// α (if the rule learns one, named "<prefix><where>_alpha") and the rule's cache;
// the math is the backend's kernels for Rule::math.
template <class Rule, class T, class Backend, ScaleKind AlphaKind>
struct residual_site {
  using Ops = typename Backend::template residual_kernels<Rule::math, T>;
  typename Ops::Cache cache;
  ResidualStep<T, AlphaKind> alpha;

  void declare(ParamStore<T>& p, const std::string& prefix, std::string_view where, const ModelConfig& cfg) {
    if constexpr (Rule::learned_alpha) alpha.declare(p, prefix + std::string(where) + "_alpha", cfg);
  }
  void bind(Arena<T>& ar, std::int64_t N, std::int64_t C) { cache.bind(ar, N, C); }
  // A ν-scaled rule's ν(α) times ModelConfig::angpt_residual_factor_mult (anGPT's
  // 0.5x/2x ablation; 1 runs nothing extra). The output is linear in ν, and the
  // kernels' backward reads h, f and dout, not the output, so the multiplier
  // scales the output and then dh, df and dα.
  static double nu_mult(const StepContext<T>& c) {
    if constexpr (Rule::nu_scaled) return c.cfg->angpt_residual_factor_mult;
    else return 1.0;
  }
  void forward(StepContext<T>& c, T* out, const T* h, const T* f, std::int64_t N, std::int64_t C) {
    if constexpr (Rule::learned_alpha) alpha.template effective<Backend>(c, c.alpha_tmp);
    Ops::forward(cache, out, h, f, c.alpha_tmp, N, C);
    if (const double m = nu_mult(c); m != 1.0) Backend::scale(out, N * C, T(m));
  }
  void backward(StepContext<T>& c, T* dh, T* df, const T* dout, const T* out, const T* h, const T* f,
                std::int64_t N, std::int64_t C) {
    if constexpr (Rule::learned_alpha) {
      alpha.template effective<Backend>(c, c.alpha_tmp);
      Backend::fill(c.d_alpha, C, T(0));
    }
    Ops::backward(dh, df, c.d_alpha, dout, cache, out, h, f, c.alpha_tmp, N, C);
    if (const double m = nu_mult(c); m != 1.0) {
      Backend::scale(dh, N * C, T(m));
      Backend::scale(df, N * C, T(m));
      if constexpr (Rule::learned_alpha) Backend::scale(c.d_alpha, C, T(m));
    }
    if constexpr (Rule::learned_alpha) alpha.template grad_to_stored<Backend>(c, c.d_alpha, c.d_scale);
  }
};

}  // namespace normlab
