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
#include "normlab/train/variant_names.hpp"

namespace normlab {
namespace variants {

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
// (src/model_variant_*.cpp) where a target links it (NORMLAB_PREBUILT_MODELS):
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

}  // namespace normlab
