#pragma once
// Named variants: each is one type instantiation of the block. This is the one
// place that turns a runtime name (a flag, a checkpoint's metadata) into a type.
#include <string>
#include <string_view>
#include <tuple>

#include "normlab/model/transformer.hpp"

namespace normlab {
namespace variants {

#define NORMLAB_VARIANT(NAME, SCHEME, RULE, WHAT)   \
  struct NAME {                                     \
    static constexpr std::string_view name = #NAME; \
    static constexpr std::string_view isolates = WHAT; \
    template <class T>                              \
    using model = Transformer<T, SCHEME, RULE>;     \
  };

// The ablation matrix (docs/variants.md). Each row is one type.
NORMLAB_VARIANT(gpt, prenorm_rms, residual_add, "baseline: pre-norm RMSNorm + residual add")
NORMLAB_VARIANT(gpt_qknorm, prenorm_rms_qknorm, residual_add, "GPT+ with RMSNorm (learned gain) on q and k")
NORMLAB_VARIANT(gpt_alpha, prenorm_rms, lerp, "the learned step alpha without the sphere")
NORMLAB_VARIANT(ngpt, sphere, lerp_retract, "nGPT as published")
NORMLAB_VARIANT(ngpt_slerp, sphere, slerp, "geodesic (SLERP) instead of LERP + retraction")
NORMLAB_VARIANT(ngpt_noqknorm, sphere_noqknorm, lerp_retract, "nGPT without normalizing q and k")
NORMLAB_VARIANT(ngpt_scalar, sphere_scalar, lerp_retract, "one scalar each for alpha, s_qk, s_uv, s_z")
NORMLAB_VARIANT(ngpt_fixedscales, sphere_fixedscales, lerp_retract,
                "s_qk, s_u, s_v fixed at their initial values, one learned scalar s_z (the paper's ablation)")
NORMLAB_VARIANT(angpt, scalar_factors, lerp_nu, "anGPT as published: constant factors instead of exact norms")
NORMLAB_VARIANT(angpt_attnfactor, scalar_factors_attnfactor, lerp_nu,
                "anGPT plus normlab's attention-mixing factor c_att (normlab's extension)")

#undef NORMLAB_VARIANT

}  // namespace variants

using all_variants =
    std::tuple<variants::gpt, variants::gpt_qknorm, variants::gpt_alpha, variants::ngpt, variants::ngpt_slerp,
               variants::ngpt_noqknorm, variants::ngpt_scalar, variants::ngpt_fixedscales, variants::angpt,
               variants::angpt_attnfactor>;

// Calls f(Tag{}) for the variant called `name`; returns false if none matches.
template <class F>
bool dispatch_variant(std::string_view name, F&& f) {
  return std::apply(
      [&](auto... tags) {
        bool found = false;
        ((!found && decltype(tags)::name == name ? (f(tags), found = true) : false), ...);
        return found;
      },
      all_variants{});
}

inline std::string known_variants() {
  std::string out;
  std::apply([&](auto... tags) { ((out += (out.empty() ? "" : ", ") + std::string(decltype(tags)::name)), ...); },
             all_variants{});
  return out;
}

}  // namespace normlab
