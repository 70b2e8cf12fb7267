#pragma once
// The math of each residual rule: forward and hand-written backward.
//   residual_add:  out = h + f
//   lerp:          out = h + α ⊙ (f − h)
//   lerp_nu:       out = ν(α) ⊙ (h + α ⊙ (f − h)),  ν(α) = 1/√((1−α)² + α²)
//   lerp_retract:  A = N(h), Bf = N(f), z = A + α ⊙ (Bf − A), out = N(z)
//   slerp:         A = N(h), Bf = N(f), θ = ∠(A, Bf),
//                  z = g(1−α, θ) ⊙ A + g(α, θ) ⊙ Bf with g(β, θ) = sin(βθ)/sin θ, out = N(z)
// backward(dh, df, dα, dout, …): dh may alias dout (the residual-stream
// gradient is updated in place); dα accumulates.
// α here is the *effective* per-dimension step (already |stored × constant|);
// the rule's site owns the stored parameter and maps dα back to it.
//
// A residual rule is a type with a name, three facts the block's policy check
// reads (learned_alpha, retracts: its output lies on the unit sphere,
// nu_scaled), and `site<T, Backend, AlphaKind>`:
//   declare(params, prefix, where, cfg)   where = "attn" | "mlp"
//   bind(arena, N, C)                    what backward needs
//   forward(ctx, out, h, f, N, C)
//   backward(ctx, dh, df, dout, out, h, f, N, C)   dh may alias dout
// The built-in rules share residual_site below; a user's rule writes its own.
#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "normlab/backend/cpu/ops.hpp"
#include "normlab/nn/context.hpp"
#include "normlab/nn/params.hpp"
#include "normlab/nn/scale.hpp"
#include "normlab/tensor/tensor.hpp"

namespace normlab {

template <class>
inline constexpr bool dependent_false = false;

template <class Rule, class T, class Backend, ScaleKind AlphaKind>
struct residual_site;

// ------------------------------------------------------------------ the rules
struct residual_add {  // h ← h + f
  static constexpr std::string_view name = "add";
  static constexpr bool learned_alpha = false;
  static constexpr bool retracts = false;  // output lies on the unit sphere
  static constexpr bool nu_scaled = false;
  template <class T, class Backend, ScaleKind AlphaKind = ScaleKind::vector>
  using site = residual_site<residual_add, T, Backend, AlphaKind>;
};
struct lerp {  // h ← h + |α| ⊙ (f − h)
  static constexpr std::string_view name = "lerp";
  static constexpr bool learned_alpha = true;
  static constexpr bool retracts = false;
  static constexpr bool nu_scaled = false;
  template <class T, class Backend, ScaleKind AlphaKind = ScaleKind::vector>
  using site = residual_site<lerp, T, Backend, AlphaKind>;
};
struct lerp_nu {  // h ← ν(α) ⊙ (h + |α| ⊙ (f − h)), ν(α) = 1/√((1−α)² + α²)
  static constexpr std::string_view name = "lerp_nu";
  static constexpr bool learned_alpha = true;
  static constexpr bool retracts = false;
  static constexpr bool nu_scaled = true;
  template <class T, class Backend, ScaleKind AlphaKind = ScaleKind::vector>
  using site = residual_site<lerp_nu, T, Backend, AlphaKind>;
};
struct lerp_retract {  // h ← N(N(h) + |α| ⊙ (N(f) − N(h)))
  static constexpr std::string_view name = "lerp_retract";
  static constexpr bool learned_alpha = true;
  static constexpr bool retracts = true;
  static constexpr bool nu_scaled = false;
  template <class T, class Backend, ScaleKind AlphaKind = ScaleKind::vector>
  using site = residual_site<lerp_retract, T, Backend, AlphaKind>;
};
struct slerp {  // h ← N(sin((1−α)θ)/sin θ ⊙ N(h) + sin(αθ)/sin θ ⊙ N(f)), θ = ∠(h, f)
  static constexpr std::string_view name = "slerp";
  static constexpr bool learned_alpha = true;
  static constexpr bool retracts = true;
  static constexpr bool nu_scaled = false;
  template <class T, class Backend, ScaleKind AlphaKind = ScaleKind::vector>
  using site = residual_site<slerp, T, Backend, AlphaKind>;
};

// The facts are optional in a user's rule (absent = false).
template <class R>
consteval bool rule_learns_alpha() {
  if constexpr (requires { R::learned_alpha; }) return R::learned_alpha;
  else return false;
}
template <class R>
consteval bool rule_retracts() {
  if constexpr (requires { R::retracts; }) return R::retracts;
  else return false;
}
template <class R>
consteval bool rule_nu_scaled() {
  if constexpr (requires { R::nu_scaled; }) return R::nu_scaled;
  else return false;
}

// Stands in for a backend when a concept only names a site type.
struct concept_probe_backend {};

template <class R>
concept ResidualRule = requires {
  { R::name } -> std::convertible_to<std::string_view>;
  typename R::template site<float, concept_probe_backend, ScaleKind::vector>;
};

// A learned residual step α: stored × alpha_init/base_scale, used as |·|
// (initialised to base_scale, so effective α starts at alpha_init), one value
// per dimension or one learned scalar.
template <class T, ScaleKind K>
struct ResidualStep {
  static_assert(K != ScaleKind::fixed, "normlab: a residual step α is learned (vector or scalar), not fixed");
  std::size_t offset = 0;
  void declare(ParamStore<T>& p, std::string name, const ModelConfig& cfg) {
    offset = p.add(std::move(name), {K == ScaleKind::scalar ? 1 : cfg.n_embd}, ParamRole::alpha, NormAxis::none,
                   ParamInit::constant(cfg.base_scale));
  }
  static double k_const(const StepContext<T>& c) { return c.cfg->alpha_init / c.cfg->base_scale; }
  void effective(const StepContext<T>& c, T* out) const {
    const double k = k_const(c);
    const T* p = c.P(offset);
    for (std::int64_t j = 0; j < c.C(); ++j) out[j] = T(std::abs(double(p[K == ScaleKind::scalar ? 0 : j]) * k));
  }
  // dα (effective, per dimension) → the stored parameter: d|p k|/dp = sign(p k)·k
  // (0 at 0, as torch.abs); d_scale is scratch of length C.
  void grad_to_stored(const StepContext<T>& c, const T* dalpha, T* d_scale) const {
    const double k = k_const(c);
    const T* p = c.P(offset);
    const std::int64_t C = c.C();
    for (std::int64_t j = 0; j < C; ++j) {
      const double x = double(p[K == ScaleKind::scalar ? 0 : j]) * k;
      const double sgn = x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);
      d_scale[j] = T(double(dalpha[j]) * sgn * k);
    }
    T* g = c.G(offset);
    if constexpr (K == ScaleKind::scalar) {
      T acc = 0;
      for (std::int64_t j = 0; j < C; ++j) acc += d_scale[j];
      g[0] += acc;
    } else {
      for (std::int64_t j = 0; j < C; ++j) g[j] += d_scale[j];
    }
  }
};

template <class R, class T>
struct ResidualOps {
  static_assert(dependent_false<R>, "normlab: no ResidualOps specialization for this residual rule");
};

template <class T>
struct ResidualOps<residual_add, T> {
  struct Cache {
    void bind(Arena<T>&, std::int64_t, std::int64_t) {}
  };
  static void forward(Cache&, T* out, const T* h, const T* f, const T* /*alpha*/, std::int64_t N,
                      std::int64_t C) {
    cpu::parallel_for(N * C, N * C > cpu::kParallelGrain, [&](std::int64_t i) { out[i] = h[i] + f[i]; });
  }
  // dh may alias dout (the residual stream gradient is updated in place).
  static void backward(T* dh, T* df, T* /*dalpha*/, const T* dout, const Cache&, const T* /*out*/,
                       const T* /*h*/, const T* /*f*/, const T* /*alpha*/, std::int64_t N, std::int64_t C) {
    cpu::parallel_for(N * C, N * C > cpu::kParallelGrain, [&](std::int64_t i) {
      const T g = dout[i];
      df[i] = g;
      dh[i] = g;
    });
  }
};

template <class T>
struct ResidualOps<lerp_retract, T> {
  struct Cache {
    T* A = nullptr;    // (N,C) N(h)
    T* Bf = nullptr;   // (N,C) N(f)
    T* nh = nullptr;   // (N) ‖h‖
    T* nf = nullptr;   // (N) ‖f‖
    T* nz = nullptr;   // (N) ‖z‖
    void bind(Arena<T>& a, std::int64_t N, std::int64_t C) {
      A = a.take(N * C);
      Bf = a.take(N * C);
      nh = a.take(N);
      nf = a.take(N);
      nz = a.take(N);
    }
  };

  // Eigen row maps: the norms and dots vectorize (a scalar float reduction
  // does not, without reassociation).
  static void forward(Cache& c, T* out, const T* h, const T* f, const T* alpha, std::int64_t N,
                      std::int64_t C) {
    cpu::CArrayRow<T> al(alpha, C);
    cpu::parallel_for(N, N * C > cpu::kParallelGrain, [&](std::int64_t i) {
      cpu::CArrayRow<T> hi(h + i * C, C), fi(f + i * C, C);
      cpu::ArrayRow<T> A(c.A + i * C, C), Bf(c.Bf + i * C, C), o(out + i * C, C);
      const T nh = std::sqrt(hi.matrix().squaredNorm()), nf = std::sqrt(fi.matrix().squaredNorm());
      c.nh[i] = nh;
      c.nf[i] = nf;
      A = hi / nh;
      Bf = fi / nf;
      o = A + al * (Bf - A);
      const T nz = std::sqrt(o.matrix().squaredNorm());
      c.nz[i] = nz;
      o /= nz;
    });
  }

  // dz = (dout − out (out·dout)) / ‖z‖; dα += Σ_rows dz ⊙ (Bf − A);
  // dh = Nᵀ(A, dz ⊙ (1−α)); df = Nᵀ(Bf, dz ⊙ α). dh may alias dout.
  // One pass over the rows; dα through cpu::row_chunk_reduce (independent of the thread count).
  static void backward(T* dh, T* df, T* dalpha, const T* dout, const Cache& c, const T* out, const T* /*h*/,
                       const T* /*f*/, const T* alpha, std::int64_t N, std::int64_t C) {
    cpu::CArrayRow<T> al(alpha, C);
    cpu::row_chunk_reduce(dalpha, N, C, N * C > cpu::kParallelGrain, [&](std::int64_t i, cpu::ArrayRow<T>& pa) {
      cpu::CArrayRow<T> o(out + i * C, C), g(dout + i * C, C), A(c.A + i * C, C), Bf(c.Bf + i * C, C);
      cpu::ArrayRow<T> dz(df + i * C, C), dhi(dh + i * C, C);  // dz parked in df
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
struct ResidualOps<lerp, T> {
  struct Cache {
    void bind(Arena<T>&, std::int64_t, std::int64_t) {}
  };
  static void forward(Cache&, T* out, const T* h, const T* f, const T* alpha, std::int64_t N, std::int64_t C) {
    cpu::parallel_for(N, N * C > cpu::kParallelGrain, [&](std::int64_t i) {
      for (std::int64_t j = 0; j < C; ++j) {
        const std::int64_t k = i * C + j;
        out[k] = h[k] + alpha[j] * (f[k] - h[k]);
      }
    });
  }
  static void backward(T* dh, T* df, T* dalpha, const T* dout, const Cache&, const T* /*out*/, const T* h,
                       const T* f, const T* alpha, std::int64_t N, std::int64_t C) {
    cpu::column_dot_accumulate_diff(dalpha, dout, f, h, N, C);
    cpu::parallel_for(N, N * C > cpu::kParallelGrain, [&](std::int64_t i) {
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
struct ResidualOps<lerp_nu, T> {
  struct Cache {
    void bind(Arena<T>&, std::int64_t, std::int64_t) {}
  };
  static T nu(T a) { return T(1) / std::sqrt((T(1) - a) * (T(1) - a) + a * a); }
  // ν(α_j) and ν'(α_j) = −(2α − 1) ν³ once per call, then row-wise Eigen arrays.
  static T* coefficients(const T* alpha, std::int64_t C) {
    T* k = cpu::detail::thread_scratch<T, cpu::detail::kResidualCoef>(std::size_t(2 * C));
    for (std::int64_t j = 0; j < C; ++j) {
      const T v = nu(alpha[j]);
      k[j] = v;
      k[C + j] = -(T(2) * alpha[j] - T(1)) * v * v * v;
    }
    return k;
  }
  static void forward(Cache&, T* out, const T* h, const T* f, const T* alpha, std::int64_t N, std::int64_t C) {
    const T* k = coefficients(alpha, C);
    cpu::CArrayRow<T> al(alpha, C), v(k, C);
    cpu::parallel_for(N, N * C > cpu::kParallelGrain, [&](std::int64_t i) {
      cpu::CArrayRow<T> hi(h + i * C, C), fi(f + i * C, C);
      cpu::ArrayRow<T>(out + i * C, C) = v * (hi + al * (fi - hi));
    });
  }
  // dα += Σ_rows dout ⊙ (ν (f − h) + ν' z), z = h + α(f − h); df = dout ν α; dh = dout ν (1 − α).
  // One pass; dα through cpu::row_chunk_reduce. dh may alias dout.
  static void backward(T* dh, T* df, T* dalpha, const T* dout, const Cache&, const T* /*out*/, const T* h,
                       const T* f, const T* alpha, std::int64_t N, std::int64_t C) {
    const T* k = coefficients(alpha, C);
    cpu::CArrayRow<T> al(alpha, C), v(k, C), dv(k + C, C);
    cpu::row_chunk_reduce(dalpha, N, C, N * C > cpu::kParallelGrain, [&](std::int64_t i, cpu::ArrayRow<T>& pa) {
      cpu::CArrayRow<T> g(dout + i * C, C), hi(h + i * C, C), fi(f + i * C, C);
      pa += g * (v * (fi - hi) + dv * (hi + al * (fi - hi)));
      cpu::ArrayRow<T>(df + i * C, C) = g * v * al;
      cpu::ArrayRow<T>(dh + i * C, C) = g * v * (T(1) - al);  // last: dh may alias dout
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
// Forward computes all six coefficient rows once (vectorized sin/cos through
// Eigen arrays: one sin and one cos of each of (1−α)θ and αθ), and keeps them
// for backward, which is then plain arithmetic.
template <class T>
struct ResidualOps<slerp, T> {
  struct Cache {
    T* A = nullptr;   // (N,C) N(h)
    T* Bf = nullptr;  // (N,C) N(f)
    T* nh = nullptr;  // (N)
    T* nf = nullptr;  // (N)
    T* nz = nullptr;  // (N) ‖z‖
    T* th = nullptr;  // (N) θ (clamped)
    T* clamped = nullptr;  // (N) 1 where θ hit its clamp (no gradient through θ)
    T* dot = nullptr;      // (N) backward scratch: out·dout
    T* P = nullptr;        // (N,C) g(1−α, θ)
    T* Q = nullptr;        // (N,C) g(α, θ)
    T* Pth = nullptr;      // (N,C) g_θ(1−α, θ)
    T* Qth = nullptr;      // (N,C) g_θ(α, θ)
    T* Pb = nullptr;       // (N,C) g_β(1−α, θ)
    T* Qb = nullptr;       // (N,C) g_β(α, θ)
    double* dalpha_acc = nullptr;  // (C) backward scratch
    std::vector<double> dalpha_store;
    void bind(Arena<T>& a, std::int64_t N, std::int64_t C) {
      dot = a.take(N);
      P = a.take(N * C);
      Q = a.take(N * C);
      Pth = a.take(N * C);
      Qth = a.take(N * C);
      Pb = a.take(N * C);
      Qb = a.take(N * C);
      if (!a.counting()) {
        dalpha_store.assign(static_cast<std::size_t>(C), 0.0);
        dalpha_acc = dalpha_store.data();
      }
      A = a.take(N * C);
      Bf = a.take(N * C);
      nh = a.take(N);
      nf = a.take(N);
      nz = a.take(N);
      th = a.take(N);
      clamped = a.take(N);
    }
  };

  // The six coefficient rows of one token (length C) for angle th.
  static void coefficients(const Cache& c, std::int64_t i, const T* alpha, std::int64_t C, double th) {
    using Row = Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>>;
    using CRow = Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>>;
    const std::int64_t o = i * C;
    if (th < detail::kSlerpSeriesTheta) {
      const double t2 = th * th;
      auto series = [t2](double b, T& g, T& gth, T& gb) {
        const double b2 = b * b;
        g = T(b * (1.0 + (1.0 - b2) * t2 / 6.0));
        gth = T(b * (1.0 - b2) / 3.0 + b * (1.0 - b2) * (4.0 - b2) * t2 / 30.0);
        gb = T(1.0 + (1.0 - 3.0 * b2) * t2 / 6.0);
      };
      for (std::int64_t j = 0; j < C; ++j) {
        series(1.0 - double(alpha[j]), c.P[o + j], c.Pth[o + j], c.Pb[o + j]);
        series(double(alpha[j]), c.Q[o + j], c.Qth[o + j], c.Qb[o + j]);
      }
      return;
    }
    const T s = T(std::sin(th)), co = T(std::cos(th)), tt = T(th);
    const T inv_s = T(1) / s, inv_s3 = inv_s * inv_s * inv_s;
    CRow a(alpha, C);
    Row P(c.P + o, C), Q(c.Q + o, C), Pth(c.Pth + o, C), Qth(c.Qth + o, C), Pb(c.Pb + o, C), Qb(c.Qb + o, C);
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

  static void forward(Cache& c, T* out, const T* h, const T* f, const T* alpha, std::int64_t N, std::int64_t C) {
    cpu::parallel_for(N, N * C > cpu::kParallelGrain, [&](std::int64_t i) {
      const T* hi = h + i * C;
      const T* fi = f + i * C;
      double sh = 0, sf = 0;
      for (std::int64_t j = 0; j < C; ++j) {
        sh += double(hi[j]) * hi[j];
        sf += double(fi[j]) * fi[j];
      }
      const double nh = std::sqrt(sh), nf = std::sqrt(sf);
      T* A = c.A + i * C;
      T* Bf = c.Bf + i * C;
      // θ = 2·atan2(‖A − Bf‖, ‖A + Bf‖): accurate at both ends, where acos(A·Bf) loses half the digits.
      double sm = 0, sp = 0;
      for (std::int64_t j = 0; j < C; ++j) {
        A[j] = T(hi[j] / nh);
        Bf[j] = T(fi[j] / nf);
        const double dm = double(A[j]) - Bf[j], dp = double(A[j]) + Bf[j];
        sm += dm * dm;
        sp += dp * dp;
      }
      double th = 2.0 * std::atan2(std::sqrt(sm), std::sqrt(sp));
      const bool clamp = th > detail::kSlerpMaxTheta;
      if (clamp) th = detail::kSlerpMaxTheta;
      c.nh[i] = T(nh);
      c.nf[i] = T(nf);
      c.th[i] = T(th);
      c.clamped[i] = clamp ? T(1) : T(0);
      coefficients(c, i, alpha, C, th);
      T* o = out + i * C;
      const T* Pi = c.P + i * C;
      const T* Qi = c.Q + i * C;
      double sz = 0;
      for (std::int64_t j = 0; j < C; ++j) {
        const T z = Pi[j] * A[j] + Qi[j] * Bf[j];
        o[j] = z;
        sz += double(z) * z;
      }
      const T inz = T(1.0 / std::sqrt(sz));
      c.nz[i] = T(std::sqrt(sz));
      for (std::int64_t j = 0; j < C; ++j) o[j] *= inz;
    });
  }

  // dz = Nᵀ(out, dout); through z = P A + Q Bf with P = g(1−α,θ), Q = g(α,θ):
  //   dA = dz ⊙ P + du·Bf, dBf = dz ⊙ Q + du·A, with du = −dθ/sin θ
  //   = −Σ dz ⊙ (P_θ ⊙ A + Q_θ ⊙ Bf); dα = Σ dz ⊙ (−P_β ⊙ A + Q_β ⊙ Bf).
  static void backward(T* dh, T* df, T* dalpha, const T* dout, const Cache& c, const T* out, const T* /*h*/,
                       const T* /*f*/, const T* /*alpha*/, std::int64_t N, std::int64_t C) {
    cpu::parallel_for(N, N * C > cpu::kParallelGrain, [&](std::int64_t i) {
      double d = 0;
      for (std::int64_t j = 0; j < C; ++j) d += double(out[i * C + j]) * dout[i * C + j];
      c.dot[i] = T(d);
    });
    // dα first (deterministic column reduction, in double), before dh overwrites dout.
    std::fill_n(c.dalpha_acc, C, 0.0);
    cpu::column_reduce(c.dalpha_acc, N, C, [&](std::int64_t i, std::int64_t j) {
      const std::int64_t k = i * C + j;
      const double dz = (dout[k] - out[k] * double(c.dot[i])) / c.nz[i];
      return dz * (-double(c.Pb[k]) * c.A[k] + double(c.Qb[k]) * c.Bf[k]);
    });
    for (std::int64_t j = 0; j < C; ++j) dalpha[j] += T(c.dalpha_acc[j]);
    cpu::parallel_for(N, N * C > cpu::kParallelGrain, [&](std::int64_t i) {
      const std::int64_t r = i * C;
      const T* o = out + r;
      const T* g = dout + r;
      const T* A = c.A + r;
      const T* Bf = c.Bf + r;
      const T d = c.dot[i];
      const T inz = T(1) / c.nz[i];
      double du = 0;
      if (c.clamped[i] == T(0))
        for (std::int64_t j = 0; j < C; ++j) {
          const T dz = (g[j] - o[j] * d) * inz;
          du -= double(dz * (c.Pth[r + j] * A[j] + c.Qth[r + j] * Bf[j]));
        }
      // dA, dBf, then through the two row normalizations (need A·dA, Bf·dBf).
      const T tdu = T(du);
      double sA = 0, sB = 0;
      for (std::int64_t j = 0; j < C; ++j) {
        const T dz = (g[j] - o[j] * d) * inz;
        sA += double(A[j] * (dz * c.P[r + j] + tdu * Bf[j]));
        sB += double(Bf[j] * (dz * c.Q[r + j] + tdu * A[j]));
      }
      const T inh = T(1) / c.nh[i], inf = T(1) / c.nf[i], tsA = T(sA), tsB = T(sB);
      T* dhi = dh + r;
      T* dfi = df + r;
      for (std::int64_t j = 0; j < C; ++j) {
        const T dz = (g[j] - o[j] * d) * inz;
        const T dA = dz * c.P[r + j] + tdu * Bf[j];
        const T dB = dz * c.Q[r + j] + tdu * A[j];
        dfi[j] = (dB - Bf[j] * tsB) * inf;
        dhi[j] = (dA - A[j] * tsA) * inh;  // last: dhi may alias g
      }
    });
  }
};

// ------------------------------------------------------------------ the built-in rules' site
// α (if the rule learns one, named "<prefix><where>_alpha") and the rule's cache;
// the math is ResidualOps<Rule, T> (host arrays: the CPU backend's).
template <class Rule, class T, class Backend, ScaleKind AlphaKind>
struct residual_site {
  using Ops = ResidualOps<Rule, T>;
  typename Ops::Cache cache;
  ResidualStep<T, AlphaKind> alpha;

  void declare(ParamStore<T>& p, const std::string& prefix, std::string_view where, const ModelConfig& cfg) {
    if constexpr (Rule::learned_alpha) alpha.declare(p, prefix + std::string(where) + "_alpha", cfg);
  }
  void bind(Arena<T>& ar, std::int64_t N, std::int64_t C) { cache.bind(ar, N, C); }
  void forward(StepContext<T>& c, T* out, const T* h, const T* f, std::int64_t N, std::int64_t C) {
    if constexpr (Rule::learned_alpha) alpha.effective(c, c.alpha_tmp);
    Ops::forward(cache, out, h, f, c.alpha_tmp, N, C);
  }
  void backward(StepContext<T>& c, T* dh, T* df, const T* dout, const T* out, const T* h, const T* f,
                std::int64_t N, std::int64_t C) {
    if constexpr (Rule::learned_alpha) {
      alpha.effective(c, c.alpha_tmp);
      Backend::fill(c.d_alpha, C, T(0));
    }
    Ops::backward(dh, df, c.d_alpha, dout, cache, out, h, f, c.alpha_tmp, N, C);
    if constexpr (Rule::learned_alpha) alpha.grad_to_stored(c, c.d_alpha, c.d_scale);
  }
};

}  // namespace normlab
