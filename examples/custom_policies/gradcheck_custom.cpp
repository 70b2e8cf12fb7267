// Finite-difference gradient check of every parameter of the three custom
// models in float64, with normlab's own checker (check_model_gradients: central
// differences, every entry, on a 2-layer d=16 model). Exit 0 only when every
// tensor's relative error is at most 1e-6, the bar normlab's own variants meet.
#include <cstdio>
#include <string_view>

#include "my_policies.hpp"

namespace {
constexpr double kTolerance = 1e-6;

template <class Variant>
bool check(std::uint64_t seed) {
  using Model = typename Variant::template model<double>;
  const auto rows = normlab::check_model_gradients<Model>(seed);
  double worst = 0;
  std::string_view where;
  for (const auto& r : rows)
    if (r.rel_error >= worst) {
      worst = r.rel_error;
      where = r.name;
    }
  const bool ok = worst <= kTolerance;
  std::printf("%-12s %3zu tensors  max_rel_error %.3e (%.*s)  %s\n", std::string(Variant::name).c_str(), rows.size(),
              worst, int(where.size()), where.data(), ok ? "PASS" : "FAIL");
  return ok;
}
}  // namespace

int main() {
  bool ok = true;
  ok &= check<my::gpt_dyt>(7);
  ok &= check<my::gpt_periln>(7);
  ok &= check<my::gpt_gated>(7);
  std::printf("custom gradcheck: %s (tolerance %.0e)\n", ok ? "PASS" : "FAIL", kTolerance);
  return ok ? 0 : 1;
}
