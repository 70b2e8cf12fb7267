#pragma once
// Named variants: each is one type instantiation of the block. This is the one
// place that turns a runtime name (a flag, a checkpoint's metadata) into a type.
// Tag::model<T> is the CPU model; Tag::model<float, cuda_backend> the same
// variant on a GPU (backend/cuda/cuda_backend.hpp).
#include <string>
#include <string_view>
#include <tuple>

#include "normlab/backend/cpu/backend.hpp"
#include "normlab/model/transformer.hpp"

namespace normlab {
namespace variants {

// Where the trainers' per-variant default learning rates come from.
inline constexpr std::string_view kDefaultLrSource =
    "docs/study.md: best of {3e-3, 1e-2, 3e-2} in a 300-step sweep on Brown, d=128, T=128, 2026-12-01";

#define NORMLAB_VARIANT(NAME, SCHEME, RULE, LR, WHAT)   \
  struct NAME {                                         \
    static constexpr std::string_view name = #NAME;     \
    static constexpr std::string_view isolates = WHAT;  \
    static constexpr double default_lr = LR;            \
    using scheme = SCHEME;                              \
    using residual = RULE;                              \
    template <class T, class Backend = cpu_backend>     \
    using model = Transformer<T, SCHEME, RULE, Backend>; \
  };

// The ablation matrix (docs/variants.md). Each row is one type.
NORMLAB_VARIANT(gpt, prenorm_rms, residual_add, 3e-3, "baseline: pre-norm RMSNorm + residual add")
NORMLAB_VARIANT(gpt_qknorm, prenorm_rms_qknorm, residual_add, 3e-3, "GPT+ with RMSNorm (learned gain) on q and k")
NORMLAB_VARIANT(gpt_alpha, prenorm_rms, lerp, 1e-2, "the learned step alpha without the sphere")
NORMLAB_VARIANT(ngpt, sphere, lerp_retract, 1e-2, "nGPT as published")
NORMLAB_VARIANT(ngpt_slerp, sphere, slerp, 1e-2, "geodesic (SLERP) instead of LERP + retraction")
NORMLAB_VARIANT(ngpt_noqknorm, sphere_noqknorm, lerp_retract, 1e-2, "nGPT without normalizing q and k")
NORMLAB_VARIANT(ngpt_scalar, sphere_scalar, lerp_retract, 1e-2, "one scalar each for alpha, s_qk, s_uv, s_z")
NORMLAB_VARIANT(ngpt_fixedscales, sphere_fixedscales, lerp_retract, 1e-2,
                "s_qk, s_u, s_v fixed at their initial values, one learned scalar s_z (the paper's ablation)")
NORMLAB_VARIANT(angpt, scalar_factors, lerp_nu, 1e-2, "anGPT as published: constant factors instead of exact norms")
NORMLAB_VARIANT(angpt_attnfactor, scalar_factors_attnfactor, lerp_nu, 3e-3,
                "anGPT plus normlab's attention-mixing factor c_att (normlab's extension)")

#undef NORMLAB_VARIANT

}  // namespace variants

// The model of a variant tag on a backend. A user's tag may declare only
// `template <class T> using model = …` (the CPU model, as normlab's did before
// the backend became a parameter): on cpu_backend that is what is used; on
// another backend the tag needs `template <class T, class Backend> using model`.
namespace detail {
template <class Tag, class T, class Backend>
struct model_for {
  using type = typename Tag::template model<T, Backend>;
};
template <class Tag, class T>
struct model_for<Tag, T, cpu_backend> {
  using type = typename Tag::template model<T>;
};
}  // namespace detail
template <class Tag, class T, class Backend = cpu_backend>
using model_of = typename detail::model_for<Tag, T, Backend>::type;

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
