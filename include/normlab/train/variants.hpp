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

// The ablation matrix (docs/variants.md), the one list of normlab's variants:
// X(name, scheme, residual rule, default learning rate, what it isolates). Each
// row is one type. CMake reads the names from here (the trainers, the model
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

#define NORMLAB_VARIANT_TAG(NAME, SCHEME, RULE, LR, WHAT) \
  struct NAME {                                           \
    static constexpr std::string_view name = #NAME;       \
    static constexpr std::string_view isolates = WHAT;    \
    static constexpr double default_lr = LR;              \
    using scheme = SCHEME;                                \
    using residual = RULE;                                \
    template <class T, class Backend = cpu_backend>       \
    using model = Transformer<T, SCHEME, RULE, Backend>;  \
  };
NORMLAB_BUILTIN_VARIANTS(NORMLAB_VARIANT_TAG)
#undef NORMLAB_VARIANT_TAG

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

#define NORMLAB_VARIANT_TYPE(NAME, ...) , variants::NAME
// The tuple's first element is a placeholder the leading comma needs, dropped by tail.
namespace detail {
template <class First, class... Rest>
struct tail_of {
  using type = std::tuple<Rest...>;
};
}  // namespace detail
using all_variants = detail::tail_of<void NORMLAB_BUILTIN_VARIANTS(NORMLAB_VARIANT_TYPE)>::type;
#undef NORMLAB_VARIANT_TYPE

// The built-in variants' CPU models, compiled once in the normlab_models library
// (src/model_variant.cpp) where a target links it (NORMLAB_PREBUILT_MODELS):
// their entry points (constructor, init, forward, backward, decode_step, …) are
// not compiled again here. Without the library, header-only as ever.
#ifdef NORMLAB_PREBUILT_MODELS
#define NORMLAB_EXTERN_MODEL(NAME, ...)                                                                     \
  extern template class Transformer<float, variants::NAME::scheme, variants::NAME::residual, cpu_backend>; \
  extern template class Transformer<double, variants::NAME::scheme, variants::NAME::residual, cpu_backend>;
NORMLAB_BUILTIN_VARIANTS(NORMLAB_EXTERN_MODEL)
#undef NORMLAB_EXTERN_MODEL
#endif

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
