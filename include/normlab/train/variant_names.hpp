#pragma once
// The built-in variants' one list (docs/variants.md) and their names, without
// their types: all a program that only names variants needs, so that editing a
// policy or model header does not rebuild it (normlab-ablate). train/variants.hpp
// makes each row a type; CMake and scripts/variants.sh read the names from the
// rows here.
#include <algorithm>
#include <iterator>
#include <string>
#include <string_view>

namespace normlab {
namespace variants {

// Where the trainers' per-variant default learning rates come from.
inline constexpr std::string_view kDefaultLrSource =
    "docs/study.md: best of {3e-3, 1e-2, 3e-2} in a 300-step sweep on Brown, d=128, T=128, 2026-12-01";

// The ablation matrix (docs/variants.md), the one list of normlab's variants:
// X(name, scheme, residual rule, default learning rate, what it isolates). Each
// row is one type (train/variants.hpp). CMake reads the names from here (the trainers, the model
// library); nothing else lists them.
#define NORMLAB_BUILTIN_VARIANTS(X)                                                                          \
  X(gpt, prenorm_rms, residual_add, 3e-3, "baseline: pre-norm RMSNorm + residual add")                        \
  X(gpt_qknorm, prenorm_rms_qknorm, residual_add, 3e-3, "GPT+ with RMSNorm (learned gain) on q and k")         \
  X(gpt_alpha, prenorm_rms, lerp, 1e-2, "the learned step alpha without the sphere")                          \
  X(ngpt, sphere, lerp_retract, 1e-2, "nGPT as published")                                                    \
  X(ngpt_slerp, sphere, slerp, 1e-2, "geodesic (SLERP) instead of LERP + retraction")                         \
  X(ngpt_noqknorm, sphere_noqknorm, lerp_retract, 1e-2, "nGPT without normalizing q and k")                   \
  X(ngpt_scalar, sphere_scalar, lerp_retract, 1e-2, "one scalar each for alpha, s_qk, s_uv, s_z")              \
  X(ngpt_fixedscales, sphere_fixedscales, lerp_retract, 1e-2,                                                 \
    "s_qk, s_u, s_v fixed at their initial values, one learned scalar s_z (the paper's ablation)")            \
  X(angpt, approx_sphere, lerp_nu, 1e-2, "anGPT as published: constant factors instead of exact norms")      \
  X(angpt_attnfactor, approx_sphere_attnfactor, lerp_nu, 3e-3,                                               \
    "anGPT plus normlab's attention-mixing factor c_att (normlab's extension)")

}  // namespace variants

namespace detail {
#define NORMLAB_VARIANT_NAME(NAME, ...) std::string_view(#NAME),
inline constexpr std::string_view kBuiltinVariantNames[] = {NORMLAB_BUILTIN_VARIANTS(NORMLAB_VARIANT_NAME)};
#undef NORMLAB_VARIANT_NAME
}  // namespace detail

// Whether `name` is one of normlab's built-in variants.
inline bool is_builtin_variant_name(std::string_view name) {
  return std::find(std::begin(detail::kBuiltinVariantNames), std::end(detail::kBuiltinVariantNames), name) !=
         std::end(detail::kBuiltinVariantNames);
}

// "gpt, gpt_qknorm, …": the built-in variants in the list's order.
inline std::string known_variants() {
  std::string out;
  for (std::string_view n : detail::kBuiltinVariantNames) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

}  // namespace normlab
