#pragma once
// normlab::diag, its linear algebra: spectra (singular values, covariance
// eigenvalues), condition numbers, effective ranks and norm statistics, all in
// float64 (Eigen). The measurements of a model build on these (diagnostics.hpp).

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "normlab/core/error.hpp"

namespace normlab::diag {

// ============================================================== linear algebra

// Singular values (or eigenvalues), largest first.
struct Spectrum {
  std::vector<double> values;
  double max() const { return values.empty() ? std::nan("") : values.front(); }
  double min() const { return values.empty() ? std::nan("") : values.back(); }
};

inline void require_finite(const Eigen::MatrixXd& M, const std::string& what) {
  if (!M.allFinite()) throw Error(what + " has non-finite entries (NaN or inf)");
}

// The two eigen-solvers (Eigen's BDCSVD and SelfAdjointEigenSolver) are most of
// this header's compile time at -O3. A program that links normlab_diag
// (NORMLAB_PREBUILT_DIAG) gets them compiled once (src/diag_spectra.cpp);
// without it they are inline here, header-only as ever.
#if defined(NORMLAB_DIAG_LIBRARY_SOLVERS)
#define NORMLAB_DIAG_SOLVER
#define NORMLAB_DIAG_SOLVER_BODIES 1
#elif defined(NORMLAB_PREBUILT_DIAG) || defined(NORMLAB_DIAG_LIBRARY_CHECKPOINT)
#define NORMLAB_DIAG_SOLVER
#define NORMLAB_DIAG_SOLVER_BODIES 0
#else
#define NORMLAB_DIAG_SOLVER inline
#define NORMLAB_DIAG_SOLVER_BODIES 1
#endif
// All min(rows, cols) singular values of M, descending (Eigen::BDCSVD, values only).
NORMLAB_DIAG_SOLVER Spectrum singular_values(const Eigen::MatrixXd& M);

// σmax / σmin; +inf when σmin is 0 (rank-deficient), NaN for an empty spectrum.
inline double condition_number(const Spectrum& s) {
  if (s.values.empty()) return std::nan("");
  if (!(s.min() > 0)) return std::numeric_limits<double>::infinity();
  return s.max() / s.min();
}
inline double condition_number(const Eigen::MatrixXd& M) { return condition_number(singular_values(M)); }

// exp(−Σ p_i log p_i) with p_i = σ_i / Σσ (0 log 0 = 0): between 1 (one
// direction carries everything) and min(rows, cols) (a flat spectrum). 0 for a
// zero matrix.
inline double effective_rank(const Spectrum& s) {
  double total = 0;
  for (double v : s.values) total += v;
  if (!(total > 0)) return 0.0;
  double h = 0;
  for (double v : s.values) {
    const double p = v / total;
    if (p > 0) h -= p * std::log(p);
  }
  return std::exp(h);
}
inline double effective_rank(const Eigen::MatrixXd& M) { return effective_rank(singular_values(M)); }

// Distribution of a set of norms: extremes, quartiles (linear interpolation
// between order statistics, numpy's default) and mean.
struct NormStats {
  std::size_t count = 0;
  double min = std::nan(""), q1 = std::nan(""), median = std::nan(""), q3 = std::nan(""), max = std::nan("");
  double mean = std::nan("");
  double spread() const { return max - min; }
  double relative_spread() const { return median > 0 ? (max - min) / median : std::nan(""); }
};
using RowNormStats = NormStats;

inline NormStats norm_stats(std::vector<double> v) {
  NormStats s;
  s.count = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto quantile = [&](double p) {
    const double h = double(v.size() - 1) * p;
    const auto lo = static_cast<std::size_t>(std::floor(h));
    const std::size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (h - double(lo)) * (v[hi] - v[lo]);
  };
  s.min = v.front();
  s.max = v.back();
  s.q1 = quantile(0.25);
  s.median = quantile(0.5);
  s.q3 = quantile(0.75);
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / double(v.size());
  return s;
}

// Euclidean norms of the rows (columns) of M.
inline NormStats row_norm_stats(const Eigen::MatrixXd& M) {
  const Eigen::VectorXd n = M.rowwise().norm();
  std::vector<double> v(static_cast<std::size_t>(n.size()));
  Eigen::Map<Eigen::VectorXd>(v.data(), n.size()) = n;
  return norm_stats(std::move(v));
}
inline NormStats col_norm_stats(const Eigen::MatrixXd& M) {
  const Eigen::RowVectorXd n = M.colwise().norm();
  std::vector<double> v(static_cast<std::size_t>(n.size()));
  Eigen::Map<Eigen::RowVectorXd>(v.data(), n.size()) = n;
  return norm_stats(std::move(v));
}

// Sample covariance (d×d) of the rows of X (n×d): rows centered on their mean,
// divided by n − 1.
inline Eigen::MatrixXd covariance(const Eigen::MatrixXd& X) {
  if (X.rows() < 2) throw Error("covariance: need at least 2 rows, got " + std::to_string(X.rows()));
  require_finite(X, "covariance: the matrix");
  const Eigen::MatrixXd Xc = X.rowwise() - X.colwise().mean();
  return (Xc.transpose() * Xc) / double(X.rows() - 1);
}

// Eigenvalues of the covariance, largest first, and λmax/λmin (+inf when
// λmin ≤ 0, i.e. the rows span fewer than d directions).
struct CovarianceSpectrum {
  Spectrum eigenvalues;
  double condition_number = std::nan("");
  // λ_max / λ_r with r = min(d, n − 1), the most directions n centered rows can
  // span: the conditioning within the rows' own span. Equal to condition_number
  // when n > d; finite where that one is ∞ only because there are few rows (e.g.
  // the 85 byte values of an English text in d = 128).
  double span_condition_number = std::nan("");
};

NORMLAB_DIAG_SOLVER CovarianceSpectrum covariance_spectrum(const Eigen::MatrixXd& X);

#if NORMLAB_DIAG_SOLVER_BODIES
NORMLAB_DIAG_SOLVER Spectrum singular_values(const Eigen::MatrixXd& M) {
  if (M.size() == 0) throw Error("singular_values: the matrix is empty");
  require_finite(M, "singular_values: the matrix");
  Eigen::BDCSVD<Eigen::MatrixXd> svd(M);  // computation options 0: singular values only
  const Eigen::VectorXd& s = svd.singularValues();
  Spectrum out;
  out.values.assign(s.data(), s.data() + s.size());
  std::sort(out.values.begin(), out.values.end(), std::greater<double>());
  return out;
}

NORMLAB_DIAG_SOLVER CovarianceSpectrum covariance_spectrum(const Eigen::MatrixXd& X) {
  const Eigen::MatrixXd C = covariance(X);
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(C, Eigen::EigenvaluesOnly);
  if (es.info() != Eigen::Success) throw Error("covariance_spectrum: the eigensolver did not converge");
  const Eigen::VectorXd& ev = es.eigenvalues();
  CovarianceSpectrum out;
  out.eigenvalues.values.assign(ev.data(), ev.data() + ev.size());
  std::sort(out.eigenvalues.values.begin(), out.eigenvalues.values.end(), std::greater<double>());
  const double lo = out.eigenvalues.min(), hi = out.eigenvalues.max();
  out.condition_number = lo > 0 ? hi / lo : std::numeric_limits<double>::infinity();
  const std::size_t r = std::min<std::size_t>(out.eigenvalues.values.size(), std::size_t(std::max<Eigen::Index>(X.rows() - 1, 0)));
  const double lo_span = r > 0 ? out.eigenvalues.values[r - 1] : 0.0;
  out.span_condition_number = lo_span > 0 ? hi / lo_span : std::numeric_limits<double>::infinity();
  return out;
}
#endif

}  // namespace normlab::diag
