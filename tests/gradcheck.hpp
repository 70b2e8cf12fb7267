#pragma once
// Central finite differences in float64 for the gradient tests.
//
// Every check uses a scalar probe loss L = Σ w ⊙ out with fixed random w, so
// d L / d out = w is known exactly. With step h = 1e-6 the central difference
// has truncation error O(h²) ≈ 1e-12 and rounding error ≈ 1e-16/h = 1e-10,
// relative to gradients of order 1; the bar of 1e-6 leaves a wide margin while
// any real mistake in a backward (a missing term, a wrong sign) lands far above it.
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "normlab/train/gradcheck.hpp"

namespace normlab::test {

inline constexpr double kGradTol = 1e-6;

inline std::vector<double> random_vector(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = d(rng);
  return v;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// d loss / d x by central differences over every entry; x is restored afterwards.
inline std::vector<double> numeric_grad(std::vector<double>& x, const std::function<double()>& loss,
                                        double h = 1e-6) {
  std::vector<std::size_t> all(x.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  return central_differences(x, all, loss, h);
}

// ‖a − b‖ / ‖b‖ over all entries.
inline double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace normlab::test
