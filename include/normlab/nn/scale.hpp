#pragma once
// A learned scale of nGPT (s_qk, s_uv, s_z) as one reusable type, with the
// reference's re-parameterisation: effective = stored × k, k = init/base_scale
// (Adam's steps act on the stored value). How it is held is a type argument:
//   ScaleKind::vector  one value per dimension (the paper)
//   ScaleKind::scalar  one learned scalar, broadcast
//   ScaleKind::fixed   its initial effective value: no parameter, no gradient,
//                      no optimizer state (the value follows from the config)
#include <cstddef>
#include <cstdint>
#include <string>

#include "normlab/nn/context.hpp"
#include "normlab/nn/params.hpp"

namespace normlab {

enum class ScaleKind { vector, scalar, fixed };

template <class T, ScaleKind K>
struct ScaleParam {
  static constexpr ScaleKind kind = K;
  std::size_t offset = 0;
  T initial_stored = T(0);  // what init() stores: effective at init = initial_stored × k

  // n: the scale's length as a vector; role: its optimizer group.
  void declare(ParamStore<T>& p, std::string name, std::int64_t n, double stored_init,
               ParamRole role = ParamRole::scale) {
    initial_stored = T(stored_init);
    if constexpr (K != ScaleKind::fixed)
      offset = p.add(std::move(name), {K == ScaleKind::scalar ? 1 : n}, role, NormAxis::none,
                     ParamInit::constant(stored_init));
  }
  // out(n) = stored × k (broadcast for a scalar; the initial value for a fixed scale).
  template <class Backend>
  void effective(const StepContext<T>& c, double k, std::int64_t n, T* out) const {
    if constexpr (K == ScaleKind::fixed) Backend::fill(out, n, T(double(initial_stored) * k));
    else Backend::effective_scale(out, c.P(offset), k, n, K == ScaleKind::scalar, /*absolute=*/false);
  }
  // d(n) holds d loss / d(expanded stored values); fold it into the parameter.
  template <class Backend>
  void fold_grad(const StepContext<T>& c, const T* d, std::int64_t n) const {
    if constexpr (K != ScaleKind::fixed) Backend::fold_scale_grad(c.G(offset), d, n, K == ScaleKind::scalar);
  }
};

}  // namespace normlab
