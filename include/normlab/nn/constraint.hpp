#pragma once
// Weight-constraint policy, applied to the master parameters (the copy the
// optimizer updates) at initialisation and after every optimizer step.
// Applying it to a compute copy only would silently train a different method.
#include <cmath>
#include <cstdint>
#include <vector>

#include "normlab/backend/concept.hpp"
#include "normlab/nn/params.hpp"

namespace normlab {

// What happens to weight matrices after every optimizer step (on the master copy).
enum class WeightConstraint {
  none,       // plain GPT
  unit_norm,  // nGPT: every row/column along the embedding dimension set to norm 1
  bounded,    // anGPT: rows/columns with norm > 1 scaled back to 1 (initialised at 1)
};

// One Backend::constrain_matrix call per constrained tensor: rows (or columns)
// of W (R, L) to norm 1 (unit) or only those above 1 shrunk (bounded). On the
// CPU model `values` is the store's own array; on a backend with its own memory,
// the live copy.
template <class Backend, class T>
void apply_weight_constraint_on(const ParamStore<T>& store, T* values, WeightConstraint mode) {
  if (mode == WeightConstraint::none) return;
  for (const ParamSpec& s : store.specs()) {
    if (s.axis == NormAxis::none) continue;
    Backend::constrain_matrix(values + s.offset, s.shape.at(0), s.shape.at(1), s.axis == NormAxis::rows,
                              /*shrink_only=*/mode == WeightConstraint::bounded);
  }
}

template <class T>
void apply_weight_constraint(ParamStore<T>& store, WeightConstraint mode) {
  apply_weight_constraint_on<cpu_backend>(store, store.value(), mode);
}

// ------------------------------------------------------------------ constraint policies
// A scheme's `constraint`: at_init(store) after the initial draw, after_step(store)
// after every optimizer step, both on the master copy; `mode` names it.
// after_step_on<Backend>(store, values) is after_step for parameters that live
// in a backend's own memory.
template <WeightConstraint AtInit, WeightConstraint AfterStep>
struct weight_constraint {
  static constexpr WeightConstraint mode = AfterStep;
  template <class T>
  static void at_init(ParamStore<T>& store) {
    apply_weight_constraint(store, AtInit);
  }
  template <class T>
  static void after_step(ParamStore<T>& store) {
    apply_weight_constraint(store, AfterStep);
  }
  template <class Backend, class T>
  static void after_step_on(const ParamStore<T>& store, T* values) {
    apply_weight_constraint_on<Backend>(store, values, AfterStep);
  }
};
using no_constraint = weight_constraint<WeightConstraint::none, WeightConstraint::none>;
// nGPT: every matrix's rows (or columns) along d on the unit sphere.
using unit_norm_constraint = weight_constraint<WeightConstraint::unit_norm, WeightConstraint::unit_norm>;
// anGPT: start on the sphere, then only shrink rows/columns whose norm exceeds 1.
using bounded_constraint = weight_constraint<WeightConstraint::unit_norm, WeightConstraint::bounded>;

// Largest |‖row or column‖ − 1| over every constrained tensor: the invariant
// the tests check after each step.
template <class T>
double max_constraint_violation(const ParamStore<T>& store) {
  double worst = 0;
  for (const ParamSpec& s : store.specs()) {
    if (s.axis == NormAxis::none) continue;
    const T* W = store.value(s.offset);
    const std::int64_t R = s.shape.at(0), Cn = s.shape.at(1);
    const bool rows = s.axis == NormAxis::rows;
    const std::int64_t outer = rows ? R : Cn, inner = rows ? Cn : R;
    for (std::int64_t a = 0; a < outer; ++a) {
      double ss = 0;
      for (std::int64_t b = 0; b < inner; ++b) {
        const double w = rows ? W[a * Cn + b] : W[b * Cn + a];
        ss += w * w;
      }
      worst = std::max(worst, std::abs(std::sqrt(ss) - 1.0));
    }
  }
  return worst;
}

}  // namespace normlab
