#pragma once
// What both halves of test_bf16 use: bf16's unit roundoff, a normwise relative
// error, the skip on a CPU without the bf16 engine, the engines to loop over,
// and a scope that sets the products' precision.
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>

#include "normlab/backend/cpu/backend.hpp"
#include "normlab/core/precision.hpp"

namespace normlab::bf16_test {

// bf16 keeps 8 significant bits (7 stored): round to nearest moves a value by
// at most half an ulp, a relative 2^-8 (unit roundoff u = 2^(1-8)/2).
inline constexpr double kBf16Unit = 0x1p-8;
inline constexpr double kF32Unit = 0x1p-24;

inline double rel_err(const float* a, const double* b, std::size_t n) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += b[i] * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Reported by CTest as skipped (SKIP_RETURN_CODE 77), never as a pass.
inline void skip_without_bf16() {
  if (cpu::bf16_engine_available()) return;
  std::puts("SKIP: this CPU or build has no AVX-512 BF16; float32 products stay on the float32 engine");
  std::exit(77);
}

// Runs f(name) on each bf16 engine this CPU has: the tile unit's (AMX) where
// there is one, then AVX-512 BF16's, so both are tested on an AMX machine.
template <class F>
void for_each_bf16_engine(F&& f) {
#if defined(NORMLAB_HAVE_BF16GEMM_AMX)
  if (cpu::amx::supported()) {
    const bool was = cpu::amx::detail::enabled;
    cpu::amx::enable(true);
    f("AMX-BF16");
    cpu::amx::enable(false);
    f("AVX-512 BF16");
    cpu::amx::enable(was);
    return;
  }
#endif
  f("AVX-512 BF16");
}

// Sets the precision for one scope and puts float32 back after it.
struct PrecisionScope {
  explicit PrecisionScope(Precision p) { cpu::set_matmul_precision(p); }
  ~PrecisionScope() { cpu::set_matmul_precision(Precision::fp32); }
};

}  // namespace normlab::bf16_test
