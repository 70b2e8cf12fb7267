#pragma once
// Named variants: each is one type instantiation of the block. This is the one
// place that turns a runtime name (a flag, a checkpoint's metadata) into a type.
#include <string>
#include <string_view>
#include <tuple>

#include "normlab/model/transformer.hpp"

namespace normlab {
namespace variants {

// Pre-norm GPT with RMSNorm and the plain residual add (the baseline).
struct gpt {
  static constexpr std::string_view name = "gpt";
  template <class T>
  using model = Transformer<T, prenorm_rms, residual_add>;
};

// nGPT: everything on the unit sphere, LERP-retract residual with learned α.
struct ngpt {
  static constexpr std::string_view name = "ngpt";
  template <class T>
  using model = Transformer<T, sphere, lerp_retract>;
};

}  // namespace variants

using all_variants = std::tuple<variants::gpt, variants::ngpt>;

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
