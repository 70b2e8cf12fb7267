#pragma once
// The CPU backend's math of each built-in residual rule (nn/residual.hpp), keyed
// by ResidualMath: forward and hand-written backward over host arrays.
//   add:           out = h + f
//   lerp:          out = h + α ⊙ (f − h)
//   lerp_nu:       out = ν(α) ⊙ (h + α ⊙ (f − h)),  ν(α) = 1/√((1−α)² + α²)
//   lerp_retract:  A = N(h), Bf = N(f), z = A + α ⊙ (Bf − A), out = N(z)
//   slerp:         A = N(h), Bf = N(f), θ = ∠(A, Bf),
//                  z = g(1−α, θ) ⊙ A + g(α, θ) ⊙ Bf with g(β, θ) = sin(βθ)/sin θ, out = N(z)
// backward(dh, df, dα, dout, cache, out, h, f, α, N, C): dh may alias dout (the
// residual-stream gradient is updated in place); dα accumulates. α is the
// effective per-dimension step. Each specialization's Cache binds what backward
// needs from the model's arena.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "normlab/backend/cpu/ops.hpp"
#include "normlab/backend/residual_math.hpp"
#include "normlab/tensor/tensor.hpp"

namespace normlab::cpu {

template <ResidualMath M, class T>
struct ResidualKernels;

template <class T>
struct ResidualKernels<ResidualMath::add, T> {
  struct Cache {
    void bind(Arena<T>&, std::int64_t, std::int64_t) {}
  };
  static void forward(Cache&, T* out, const T* h, const T* f, const T* /*alpha*/, std::int64_t N,
                      std::int64_t C) {
    parallel_for(N * C, N * C > kParallelGrain, [&](std::int64_t i) { out[i] = h[i] + f[i]; });
  }
  // dh may alias dout (the residual stream gradient is updated in place).
  static void backward(T* dh, T* df, T* /*dalpha*/, const T* dout, const Cache&, const T* /*out*/,
                       const T* /*h*/, const T* /*f*/, const T* /*alpha*/, std::int64_t N, std::int64_t C) {
    parallel_for(N * C, N * C > kParallelGrain, [&](std::int64_t i) {
      const T g = dout[i];
      df[i] = g;
      dh[i] = g;
    });
  }
};

template <class T>
struct ResidualKernels<ResidualMath::lerp_retract, T> {
  // Only the row norms are kept: backward recomputes A = h/‖h‖ and Bf = f/‖f‖
  // from h and f with the same expression (a division is correctly rounded, so
  // the same bits). Keeping A and Bf would cost two (N, C) arrays written per
  // site that backward would read back instead of h and f (docs/perf.md).
  struct Cache {
    T* nh = nullptr;  // (N) ‖h‖
    T* nf = nullptr;  // (N) ‖f‖
    T* nz = nullptr;  // (N) ‖z‖
    void bind(Arena<T>& a, std::int64_t N, std::int64_t /*C*/) {
      nh = a.take(N);
      nf = a.take(N);
      nz = a.take(N);
    }
  };

  // A and Bf of token i, in this thread's two-row buffer.
  static std::pair<ArrayRow<T>, ArrayRow<T>> normalized(const T* hi, const T* fi, T nh, T nf, std::int64_t C) {
    T* b = detail::thread_scratch<T, detail::kResidualRow>(std::size_t(2 * C));
    ArrayRow<T> A(b, C), Bf(b + C, C);
    A = CArrayRow<T>(hi, C) / nh;
    Bf = CArrayRow<T>(fi, C) / nf;
    return {A, Bf};
  }

  // Eigen row maps: the norms and dots vectorize (a scalar float reduction
  // does not, without reassociation).
  static void forward(Cache& c, T* out, const T* h, const T* f, const T* alpha, std::int64_t N,
                      std::int64_t C) {
    CArrayRow<T> al(alpha, C);
    parallel_for(N, N * C > kParallelGrain, [&](std::int64_t i) {
      CArrayRow<T> hi(h + i * C, C), fi(f + i * C, C);
      ArrayRow<T> o(out + i * C, C);
      const T nh = std::sqrt(hi.matrix().squaredNorm()), nf = std::sqrt(fi.matrix().squaredNorm());
      c.nh[i] = nh;
      c.nf[i] = nf;
      auto [A, Bf] = normalized(h + i * C, f + i * C, nh, nf, C);
      o = A + al * (Bf - A);
      const T nz = std::sqrt(o.matrix().squaredNorm());
      c.nz[i] = nz;
      o /= nz;
    });
  }

  // dz = (dout − out (out·dout)) / ‖z‖; dα += Σ_rows dz ⊙ (Bf − A);
  // dh = Nᵀ(A, dz ⊙ (1−α)); df = Nᵀ(Bf, dz ⊙ α). dh may alias dout.
  // One pass over the rows; dα through row_chunk_reduce (independent of the thread count).
  static void backward(T* dh, T* df, T* dalpha, const T* dout, const Cache& c, const T* out, const T* h,
                       const T* f, const T* alpha, std::int64_t N, std::int64_t C) {
    CArrayRow<T> al(alpha, C);
    row_chunk_reduce(dalpha, N, C, N * C > kParallelGrain, [&](std::int64_t i, ArrayRow<T>& pa) {
      auto [A, Bf] = normalized(h + i * C, f + i * C, c.nh[i], c.nf[i], C);
      CArrayRow<T> o(out + i * C, C), g(dout + i * C, C);
      ArrayRow<T> dz(df + i * C, C), dhi(dh + i * C, C);  // dz parked in df
      const T d = o.matrix().dot(g.matrix());
      dz = (g - o * d) / c.nz[i];  // g is not read after this line (dh may alias it)
      pa += dz * (Bf - A);
      const T sA = (A * dz * (T(1) - al)).sum(), sB = (Bf * dz * al).sum();
      dhi = (dz * (T(1) - al) - A * sA) / c.nh[i];
      dz = (dz * al - Bf * sB) / c.nf[i];
    });
  }
};

template <class T>
struct ResidualKernels<ResidualMath::lerp, T> {
  struct Cache {
    void bind(Arena<T>&, std::int64_t, std::int64_t) {}
  };
  static void forward(Cache&, T* out, const T* h, const T* f, const T* alpha, std::int64_t N, std::int64_t C) {
    parallel_for(N, N * C > kParallelGrain, [&](std::int64_t i) {
      for (std::int64_t j = 0; j < C; ++j) {
        const std::int64_t k = i * C + j;
        out[k] = h[k] + alpha[j] * (f[k] - h[k]);
      }
    });
  }
  static void backward(T* dh, T* df, T* dalpha, const T* dout, const Cache&, const T* /*out*/, const T* h,
                       const T* f, const T* alpha, std::int64_t N, std::int64_t C) {
    column_dot_accumulate_diff(dalpha, dout, f, h, N, C);
    parallel_for(N, N * C > kParallelGrain, [&](std::int64_t i) {
      for (std::int64_t j = 0; j < C; ++j) {
        const std::int64_t k = i * C + j;
        const T g = dout[k];
        df[k] = g * alpha[j];
        dh[k] = g * (T(1) - alpha[j]);
      }
    });
  }
};

// anGPT's residual: LERP scaled by ν(α) = 1/√((1−α)² + α²), the norm of
// (1−α)h + αf for orthogonal unit h and f, so unit inputs give unit outputs.
template <class T>
struct ResidualKernels<ResidualMath::lerp_nu, T> {
  struct Cache {
    void bind(Arena<T>&, std::int64_t, std::int64_t) {}
  };
  static T nu(T a) { return T(1) / std::sqrt((T(1) - a) * (T(1) - a) + a * a); }
  // ν(α_j) and ν'(α_j) = −(2α − 1) ν³ once per call, then row-wise Eigen arrays.
  static T* coefficients(const T* alpha, std::int64_t C) {
    T* k = detail::thread_scratch<T, detail::kResidualCoef>(std::size_t(2 * C));
    for (std::int64_t j = 0; j < C; ++j) {
      const T v = nu(alpha[j]);
      k[j] = v;
      k[C + j] = -(T(2) * alpha[j] - T(1)) * v * v * v;
    }
    return k;
  }
  static void forward(Cache&, T* out, const T* h, const T* f, const T* alpha, std::int64_t N, std::int64_t C) {
    const T* k = coefficients(alpha, C);
    CArrayRow<T> al(alpha, C), v(k, C);
    parallel_for(N, N * C > kParallelGrain, [&](std::int64_t i) {
      CArrayRow<T> hi(h + i * C, C), fi(f + i * C, C);
      ArrayRow<T>(out + i * C, C) = v * (hi + al * (fi - hi));
    });
  }
  // dα += Σ_rows dout ⊙ (ν (f − h) + ν' z), z = h + α(f − h); df = dout ν α; dh = dout ν (1 − α).
  // One pass; dα through row_chunk_reduce. dh may alias dout.
  static void backward(T* dh, T* df, T* dalpha, const T* dout, const Cache&, const T* /*out*/, const T* h,
                       const T* f, const T* alpha, std::int64_t N, std::int64_t C) {
    const T* k = coefficients(alpha, C);
    CArrayRow<T> al(alpha, C), v(k, C), dv(k + C, C);
    row_chunk_reduce(dalpha, N, C, N * C > kParallelGrain, [&](std::int64_t i, ArrayRow<T>& pa) {
      CArrayRow<T> g(dout + i * C, C), hi(h + i * C, C), fi(f + i * C, C);
      pa += g * (v * (fi - hi) + dv * (hi + al * (fi - hi)));
      ArrayRow<T>(df + i * C, C) = g * v * al;
      ArrayRow<T>(dh + i * C, C) = g * v * (T(1) - al);  // last: dh may alias dout
    });
  }
};

// Spherical interpolation with a per-dimension step. The coefficients use
// g(β, θ) = sin(βθ)/sin θ, evaluated by its Taylor series for small θ (the
// LERP limit), and θ is clamped to π − 1e-4 where the geodesic stops being
// unique (antipodal inputs). Scalar α gives the exact geodesic (z already unit).
namespace detail {
inline constexpr double kSlerpMaxTheta = 3.14159265358979323846 - 1e-4;
// Below this angle the coefficients come from their Taylor series in θ (the
// LERP limit): truncation O(θ⁴) ≤ 1e-12 relative.
inline constexpr double kSlerpSeriesTheta = 1e-3;
}  // namespace detail

// Per element, with β = 1−α for P (the weight of A) and β = α for Q (of Bf):
//   g(β,θ) = sin(βθ)/sin θ,  g_θ(β,θ) = (∂g/∂θ)/sin θ,  g_β(β,θ) = θ cos(βθ)/sin θ.
// Nothing per element is kept between forward and backward: a token's terms
// (A, Bf and the six coefficient rows) are recomputed from h, f and α by the
// same function in both, into a per-thread row buffer, so they have the same
// bits. Keeping them would take eight (N, C) arrays per site (128 of the
// reference config's 367 MiB of activations), written by forward and read back
// by backward beside separate passes for out·dout and dα; recomputing them costs
// four vectorized sin/cos per element, less than that traffic (docs/perf.md).
template <class T>
struct ResidualKernels<ResidualMath::slerp, T> {
  struct Cache {
    T* nz = nullptr;               // (N) ‖z‖
    double* dalpha_acc = nullptr;  // (C) backward's dα, summed in double
    std::vector<double> dalpha_store;
    void bind(Arena<T>& a, std::int64_t N, std::int64_t C) {
      nz = a.take(N);
      if (!a.counting()) {
        dalpha_store.assign(static_cast<std::size_t>(C), 0.0);
        dalpha_acc = dalpha_store.data();
      }
    }
  };

  // One token's terms, C floats each, side by side in a per-thread buffer
  // (dz: backward's Nᵀ(out, dout) of the row).
  struct RowTerms {
    T *A, *Bf, *P, *Q, *Pth, *Qth, *Pb, *Qb, *dz;
    T nh, nf;      // ‖h_i‖, ‖f_i‖ (summed in double, rounded once)
    bool clamped;  // θ hit its clamp: no gradient through θ
    explicit RowTerms(std::int64_t C) {
      T* b = detail::thread_scratch<T, detail::kResidualRow>(std::size_t(9 * C));
      T** rows[9] = {&A, &Bf, &P, &Q, &Pth, &Qth, &Pb, &Qb, &dz};
      for (int r = 0; r < 9; ++r) *rows[r] = b + r * C;
    }
  };

  // The six coefficient rows of one token for angle th.
  static void coefficients(RowTerms& t, const T* alpha, std::int64_t C, double th) {
    using Row = Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>>;
    using CRow = Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>>;
    if (th < detail::kSlerpSeriesTheta) {
      const double t2 = th * th;
      auto series = [t2](double b, T& g, T& gth, T& gb) {
        const double b2 = b * b;
        g = T(b * (1.0 + (1.0 - b2) * t2 / 6.0));
        gth = T(b * (1.0 - b2) / 3.0 + b * (1.0 - b2) * (4.0 - b2) * t2 / 30.0);
        gb = T(1.0 + (1.0 - 3.0 * b2) * t2 / 6.0);
      };
      for (std::int64_t j = 0; j < C; ++j) {
        series(1.0 - double(alpha[j]), t.P[j], t.Pth[j], t.Pb[j]);
        series(double(alpha[j]), t.Q[j], t.Qth[j], t.Qb[j]);
      }
      return;
    }
    const T s = T(std::sin(th)), co = T(std::cos(th)), tt = T(th);
    const T inv_s = T(1) / s, inv_s3 = inv_s * inv_s * inv_s;
    CRow a(alpha, C);
    Row P(t.P, C), Q(t.Q, C), Pth(t.Pth, C), Qth(t.Qth, C), Pb(t.Pb, C), Qb(t.Qb, C);
    // sin and cos land in P/Q and Pb/Qb first; every later line is elementwise in place.
    P = ((T(1) - a) * tt).sin();
    Pb = ((T(1) - a) * tt).cos();
    Q = (a * tt).sin();
    Qb = (a * tt).cos();
    Pth = ((T(1) - a) * Pb * s - P * co) * inv_s3;
    Qth = (a * Qb * s - Q * co) * inv_s3;
    P *= inv_s;
    Q *= inv_s;
    Pb *= tt * inv_s;
    Qb *= tt * inv_s;
  }

  // A = N(h_i), Bf = N(f_i), θ and the coefficients of token i.
  static void row_terms(RowTerms& t, const T* hi, const T* fi, const T* alpha, std::int64_t C) {
    // The row sums in double, in cpu::lane_sum's fixed order (vectorized).
    const double nh = std::sqrt(lane_sum<double>(C, [&](std::int64_t j) { return double(hi[j]) * hi[j]; }));
    const double nf = std::sqrt(lane_sum<double>(C, [&](std::int64_t j) { return double(fi[j]) * fi[j]; }));
    t.nh = T(nh);
    t.nf = T(nf);
    // Times the reciprocal in double: the two divisions per element stood out
    // in the row pass's profile, and the float result differs only where the
    // double lands within an ulp or two (of double) of a float rounding boundary.
    const double inh = 1.0 / nh, inf = 1.0 / nf;
    for (std::int64_t j = 0; j < C; ++j) {
      t.A[j] = T(hi[j] * inh);
      t.Bf[j] = T(fi[j] * inf);
    }
    // θ = 2·atan2(‖A − Bf‖, ‖A + Bf‖): accurate at both ends, where acos(A·Bf) loses half the digits.
    const double sm = lane_sum<double>(C, [&](std::int64_t j) {
      const double dm = double(t.A[j]) - t.Bf[j];
      return dm * dm;
    });
    const double sp = lane_sum<double>(C, [&](std::int64_t j) {
      const double dp = double(t.A[j]) + t.Bf[j];
      return dp * dp;
    });
    double th = 2.0 * std::atan2(std::sqrt(sm), std::sqrt(sp));
    t.clamped = th > detail::kSlerpMaxTheta;
    if (t.clamped) th = detail::kSlerpMaxTheta;
    coefficients(t, alpha, C, th);
  }

  static void forward(Cache& c, T* out, const T* h, const T* f, const T* alpha, std::int64_t N, std::int64_t C) {
    parallel_for(N, N * C > kParallelGrain, [&](std::int64_t i) {
      RowTerms t(C);
      row_terms(t, h + i * C, f + i * C, alpha, C);
      T* o = out + i * C;
      for (std::int64_t j = 0; j < C; ++j) o[j] = t.P[j] * t.A[j] + t.Q[j] * t.Bf[j];
      const double sz = lane_sum<double>(C, [&](std::int64_t j) { return double(o[j]) * o[j]; });
      const T inz = T(1.0 / std::sqrt(sz));
      c.nz[i] = T(std::sqrt(sz));
      for (std::int64_t j = 0; j < C; ++j) o[j] *= inz;
    });
  }

  // dz = Nᵀ(out, dout); through z = P A + Q Bf with P = g(1−α,θ), Q = g(α,θ):
  //   dA = dz ⊙ P + du·Bf, dBf = dz ⊙ Q + du·A, with du = −dθ/sin θ
  //   = −Σ dz ⊙ (P_θ ⊙ A + Q_θ ⊙ Bf); dα = Σ dz ⊙ (−P_β ⊙ A + Q_β ⊙ Bf)
  // (in double, through row_chunk_reduce: independent of the thread count).
  // One pass over the rows; h and f are read before dh is written (dh may alias dout).
  static void backward(T* dh, T* df, T* dalpha, const T* dout, const Cache& c, const T* out, const T* h,
                       const T* f, const T* alpha, std::int64_t N, std::int64_t C) {
    std::fill_n(c.dalpha_acc, C, 0.0);
    row_chunk_reduce(c.dalpha_acc, N, C, N * C > kParallelGrain, [&](std::int64_t i, ArrayRow<double>& pa) {
      const std::int64_t r = i * C;
      RowTerms t(C);
      row_terms(t, h + r, f + r, alpha, C);
      const T* o = out + r;
      const T* g = dout + r;
      const T* A = t.A;
      const T* Bf = t.Bf;
      const T d = T(lane_sum<double>(C, [&](std::int64_t j) { return double(o[j]) * g[j]; }));
      const T inz = T(1) / c.nz[i];
      const double dinz = 1.0 / double(c.nz[i]);
      T* dz = t.dz;
      for (std::int64_t j = 0; j < C; ++j) {
        dz[j] = (g[j] - o[j] * d) * inz;
        pa[j] += (g[j] - o[j] * double(d)) * dinz * (-double(t.Pb[j]) * A[j] + double(t.Qb[j]) * Bf[j]);
      }
      double du = 0;
      if (!t.clamped)
        du = -lane_sum<double>(C, [&](std::int64_t j) { return double(dz[j] * (t.Pth[j] * A[j] + t.Qth[j] * Bf[j])); });
      // dA, dBf, then through the two row normalizations (need A·dA, Bf·dBf).
      const T tdu = T(du);
      const double sA = lane_sum<double>(C, [&](std::int64_t j) { return double(A[j] * (dz[j] * t.P[j] + tdu * Bf[j])); });
      const double sB = lane_sum<double>(C, [&](std::int64_t j) { return double(Bf[j] * (dz[j] * t.Q[j] + tdu * A[j])); });
      const T inh = T(1) / t.nh, inf = T(1) / t.nf, tsA = T(sA), tsB = T(sB);
      T* dhi = dh + r;
      T* dfi = df + r;
      // No iteration reads what another writes (dhi and dfi are the caller's, the
      // rest this thread's row buffer), but with seven streams GCC gives up on
      // proving it and leaves the loop scalar (measured: half the pass).
#pragma omp simd
      for (std::int64_t j = 0; j < C; ++j) {
        const T dA = dz[j] * t.P[j] + tdu * Bf[j];
        const T dB = dz[j] * t.Q[j] + tdu * A[j];
        dfi[j] = (dB - Bf[j] * tsB) * inf;
        dhi[j] = (dA - A[j] * tsA) * inh;
      }
    });
    for (std::int64_t j = 0; j < C; ++j) dalpha[j] += T(c.dalpha_acc[j]);
  }
};

}  // namespace normlab::cpu
