#pragma once
// The math of each residual rule: forward and hand-written backward.
//   residual_add:  out = h + f
//   lerp_retract:  A = N(h), Bf = N(f), z = A + α ⊙ (Bf − A), out = N(z)
// α here is the *effective* per-dimension step (already |stored × constant|);
// the model maps dα back to the stored parameter.
#include <cmath>
#include <cstdint>

#include "normlab/backend/cpu/ops.hpp"
#include "normlab/nn/policies.hpp"
#include "normlab/tensor/tensor.hpp"

namespace normlab {

template <ResidualRule R, class T>
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
#pragma omp parallel for
    for (std::int64_t i = 0; i < N * C; ++i) out[i] = h[i] + f[i];
  }
  // dh may alias dout (the residual stream gradient is updated in place).
  static void backward(T* dh, T* df, T* /*dalpha*/, const T* dout, const Cache&, const T* /*out*/,
                       const T* /*alpha*/, std::int64_t N, std::int64_t C) {
#pragma omp parallel for
    for (std::int64_t i = 0; i < N * C; ++i) {
      const T g = dout[i];
      df[i] = g;
      dh[i] = g;
    }
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
    T* dot = nullptr;  // (N) backward scratch: out·dout
    void bind(Arena<T>& a, std::int64_t N, std::int64_t C) {
      A = a.take(N * C);
      Bf = a.take(N * C);
      nh = a.take(N);
      nf = a.take(N);
      nz = a.take(N);
      dot = a.take(N);
    }
  };

  static void forward(Cache& c, T* out, const T* h, const T* f, const T* alpha, std::int64_t N,
                      std::int64_t C) {
#pragma omp parallel for
    for (std::int64_t i = 0; i < N; ++i) {
      const T* hi = h + i * C;
      const T* fi = f + i * C;
      T sh = 0, sf = 0;
      for (std::int64_t j = 0; j < C; ++j) {
        sh += hi[j] * hi[j];
        sf += fi[j] * fi[j];
      }
      const T nh = std::sqrt(sh), nf = std::sqrt(sf);
      c.nh[i] = nh;
      c.nf[i] = nf;
      T* A = c.A + i * C;
      T* Bf = c.Bf + i * C;
      T* o = out + i * C;
      T sz = 0;
      for (std::int64_t j = 0; j < C; ++j) {
        A[j] = hi[j] / nh;
        Bf[j] = fi[j] / nf;
        o[j] = A[j] + alpha[j] * (Bf[j] - A[j]);
        sz += o[j] * o[j];
      }
      const T nz = std::sqrt(sz);
      c.nz[i] = nz;
      for (std::int64_t j = 0; j < C; ++j) o[j] /= nz;
    }
  }

  // dz = (dout − out (out·dout)) / ‖z‖; dα += Σ_rows dz ⊙ (Bf − A);
  // dh = Nᵀ(A, dz ⊙ (1−α)); df = Nᵀ(Bf, dz ⊙ α). dh may alias dout.
  static void backward(T* dh, T* df, T* dalpha, const T* dout, const Cache& c, const T* out, const T* alpha,
                       std::int64_t N, std::int64_t C) {
#pragma omp parallel for
    for (std::int64_t i = 0; i < N; ++i) {
      T d = 0;
      for (std::int64_t j = 0; j < C; ++j) d += out[i * C + j] * dout[i * C + j];
      c.dot[i] = d;
    }
    // dα first, column-parallel (deterministic), before dout may be overwritten.
#pragma omp parallel for
    for (std::int64_t j = 0; j < C; ++j) {
      T acc = 0;
      for (std::int64_t i = 0; i < N; ++i) {
        const std::int64_t k = i * C + j;
        const T dz = (dout[k] - out[k] * c.dot[i]) / c.nz[i];
        acc += dz * (c.Bf[k] - c.A[k]);
      }
      dalpha[j] += acc;
    }
#pragma omp parallel for
    for (std::int64_t i = 0; i < N; ++i) {
      const T* o = out + i * C;
      const T* g = dout + i * C;
      const T* A = c.A + i * C;
      const T* Bf = c.Bf + i * C;
      const T inz = T(1) / c.nz[i], d = c.dot[i];
      T sA = 0, sB = 0;
      for (std::int64_t j = 0; j < C; ++j) {
        const T dz = (g[j] - o[j] * d) * inz;
        sA += A[j] * dz * (T(1) - alpha[j]);
        sB += Bf[j] * dz * alpha[j];
      }
      const T inh = T(1) / c.nh[i], inf = T(1) / c.nf[i];
      T* dhi = dh + i * C;
      T* dfi = df + i * C;
      for (std::int64_t j = 0; j < C; ++j) {
        const T dz = (g[j] - o[j] * d) * inz;
        dfi[j] = (dz * alpha[j] - Bf[j] * sB) * inf;
        dhi[j] = (dz * (T(1) - alpha[j]) - A[j] * sA) * inh;  // last: dhi may alias g
      }
    }
  }
};

}  // namespace normlab
