#pragma once
// CPU backend: the row-wise and GEMM primitives of the model, on Eigen + OpenMP.
//
// Conventions (as in llm.c):
//  * every buffer is row-major; N = rows (B*T tokens), C = d, F = 4d;
//  * weights use PyTorch's Linear layout W[out, in], y = x Wᵀ;
//  * parameter gradients accumulate (+=); activation gradients are written (=);
//  * reductions over rows into a parameter gradient go through column_reduce so
//    results do not depend on the thread count (resume must be bit-exact).
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace normlab::cpu {

// Below this many elements of work a parallel region costs more than it saves
// (a fork/join is a few microseconds; tiny models would spend most time there).
inline constexpr std::int64_t kParallelGrain = 1 << 15;

// out[j] += Σ_i term(i, j) over rows i = 0..N−1, for every column j < L.
// Columns go in blocks of 64: each block walks the rows in order reading 64
// contiguous values per row (cache-friendly, unlike a strided walk down one
// column), and every column's sum is still taken over i = 0, 1, … in order,
// so the result does not depend on the thread count (resume must be exact).
template <class T, class Term>
void column_reduce(T* out, std::int64_t N, std::int64_t L, Term&& term) {
  constexpr std::int64_t kBlock = 64;
  const std::int64_t blocks = (L + kBlock - 1) / kBlock;
#pragma omp parallel for if (N * L > kParallelGrain)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t j0 = b * kBlock, j1 = std::min(L, j0 + kBlock);
    T acc[kBlock] = {};
    for (std::int64_t i = 0; i < N; ++i)
      for (std::int64_t j = j0; j < j1; ++j) acc[j - j0] += term(i, j);
    for (std::int64_t j = j0; j < j1; ++j) out[j] += acc[j - j0];
  }
}

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using MapMat = Eigen::Map<RowMat<T>>;
template <class T>
using CMapMat = Eigen::Map<const RowMat<T>>;
template <class T>
using StridedMap = Eigen::Map<RowMat<T>, 0, Eigen::OuterStride<>>;
template <class T>
using CStridedMap = Eigen::Map<const RowMat<T>, 0, Eigen::OuterStride<>>;
template <class T>
using ArrayRow = Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>>;
template <class T>
using CArrayRow = Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>>;

// ---------------------------------------------------------------- GEMMs
// Y(N,out) = X(N,in) Wᵀ  (or += when accumulate)
template <class T>
void linear_forward(T* Y, const T* X, const T* W, std::int64_t N, std::int64_t in, std::int64_t out,
                    bool accumulate = false) {
  MapMat<T> y(Y, N, out);
  CMapMat<T> x(X, N, in), w(W, out, in);
  if (accumulate)
    y.noalias() += x * w.transpose();
  else
    y.noalias() = x * w.transpose();
}

// dX(N,in) = dY(N,out) W(out,in);  dW(out,in) += dYᵀ X
template <class T>
void linear_backward(T* dX, T* dW, const T* dY, const T* X, const T* W, std::int64_t N, std::int64_t in,
                     std::int64_t out) {
  CMapMat<T> dy(dY, N, out), x(X, N, in), w(W, out, in);
  if (dX) MapMat<T>(dX, N, in).noalias() = dy * w;
  if (dW) MapMat<T>(dW, out, in).noalias() += dy.transpose() * x;
}

// ---------------------------------------------------------------- embedding
// out(N,C) = wte[idx]
template <class T>
void embedding_forward(T* out, const std::int64_t* idx, const T* wte, std::int64_t N, std::int64_t C) {
#pragma omp parallel for if (N * C > kParallelGrain)
  for (std::int64_t i = 0; i < N; ++i) std::copy_n(wte + idx[i] * C, C, out + i * C);
}

// dwte[idx] += dout. Sequential over tokens: repeated tokens must add in a fixed order.
template <class T>
void embedding_backward(T* dwte, const std::int64_t* idx, const T* dout, std::int64_t N, std::int64_t C) {
  for (std::int64_t i = 0; i < N; ++i) {
    T* row = dwte + idx[i] * C;
    const T* g = dout + i * C;
    for (std::int64_t c = 0; c < C; ++c) row[c] += g[c];
  }
}

// ---------------------------------------------------------------- RMSNorm
// y = x / sqrt(mean(x²) + eps) ⊙ w ; rstd(N) saved for backward
template <class T>
void rmsnorm_forward(T* y, T* rstd, const T* x, const T* w, std::int64_t N, std::int64_t C, T eps) {
#pragma omp parallel for if (N * C > kParallelGrain)
  for (std::int64_t i = 0; i < N; ++i) {
    const T* xi = x + i * C;
    T ss = 0;
    for (std::int64_t c = 0; c < C; ++c) ss += xi[c] * xi[c];
    const T r = T(1) / std::sqrt(ss / T(C) + eps);
    rstd[i] = r;
    T* yi = y + i * C;
    for (std::int64_t c = 0; c < C; ++c) yi[c] = xi[c] * r * w[c];
  }
}

// dx = r (dy⊙w) − x r³/C Σ(dy⊙w⊙x);  dw += Σ_rows dy ⊙ x r
template <class T>
void rmsnorm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, std::int64_t N,
                      std::int64_t C) {
#pragma omp parallel for if (N * C > kParallelGrain)
  for (std::int64_t i = 0; i < N; ++i) {
    const T* xi = x + i * C;
    const T* gi = dy + i * C;
    const T r = rstd[i];
    T dot = 0;
    for (std::int64_t c = 0; c < C; ++c) dot += gi[c] * w[c] * xi[c];
    const T k = r * r * r * dot / T(C);
    T* di = dx + i * C;
    for (std::int64_t c = 0; c < C; ++c) di[c] = r * gi[c] * w[c] - k * xi[c];
  }
  column_reduce(dw, N, C, [&](std::int64_t i, std::int64_t c) { return dy[i * C + c] * x[i * C + c] * rstd[i]; });
}

// ---------------------------------------------------------------- row L2 normalisation
// Rows of length L (a token's d, or one head's dk): y = x/‖x‖, norm saved. No epsilon, as the reference.
template <class T>
void l2norm_rows_forward(T* y, T* norm, const T* x, std::int64_t rows, std::int64_t L) {
#pragma omp parallel for if (rows * L > kParallelGrain)
  for (std::int64_t i = 0; i < rows; ++i) {
    const T* xi = x + i * L;
    T ss = 0;
    for (std::int64_t c = 0; c < L; ++c) ss += xi[c] * xi[c];
    const T n = std::sqrt(ss);
    norm[i] = n;
    const T inv = T(1) / n;
    T* yi = y + i * L;
    for (std::int64_t c = 0; c < L; ++c) yi[c] = xi[c] * inv;
  }
}

// dx = (dy − y (y·dy)) / ‖x‖ ; dx may alias dy
template <class T>
void l2norm_rows_backward(T* dx, const T* dy, const T* y, const T* norm, std::int64_t rows, std::int64_t L) {
#pragma omp parallel for if (rows * L > kParallelGrain)
  for (std::int64_t i = 0; i < rows; ++i) {
    const T* yi = y + i * L;
    const T* gi = dy + i * L;
    T dot = 0;
    for (std::int64_t c = 0; c < L; ++c) dot += yi[c] * gi[c];
    const T inv = T(1) / norm[i];
    T* di = dx + i * L;
    for (std::int64_t c = 0; c < L; ++c) di[c] = (gi[c] - yi[c] * dot) * inv;
  }
}

// ---------------------------------------------------------------- RoPE (rotate-half)
// Table (T, dk/2) of cos and sin of p·θᵢ, θᵢ = base^(−2i/dk), computed in double.
template <class T>
void rope_table(T* cosv, T* sinv, std::int64_t Tn, std::int64_t dk, double base = 10000.0) {
  const std::int64_t h = dk / 2;
  for (std::int64_t p = 0; p < Tn; ++p)
    for (std::int64_t i = 0; i < h; ++i) {
      const double theta = std::pow(base, -2.0 * double(i) / double(dk));
      cosv[p * h + i] = T(std::cos(double(p) * theta));
      sinv[p * h + i] = T(std::sin(double(p) * theta));
    }
}

// In place on x (B,T,H,dk), positions pos0 … pos0+T−1. inverse=true applies the
// transpose rotation (the backward).
template <class T>
void rope_apply(T* x, const T* cosv, const T* sinv, std::int64_t B, std::int64_t Tn, std::int64_t H,
                std::int64_t dk, bool inverse, std::int64_t pos0 = 0) {
  const std::int64_t h = dk / 2;
  const T sgn = inverse ? T(-1) : T(1);
#pragma omp parallel for if (B * Tn * H * dk > kParallelGrain)
  for (std::int64_t bt = 0; bt < B * Tn; ++bt) {
    const std::int64_t p = pos0 + bt % Tn;  // pos0: first position (incremental decoding)
    for (std::int64_t hd = 0; hd < H; ++hd) {
      T* v = x + (bt * H + hd) * dk;
      for (std::int64_t i = 0; i < h; ++i) {
        const T c = cosv[p * h + i], s = sgn * sinv[p * h + i];
        const T a = v[i], b = v[i + h];
        v[i] = a * c - b * s;
        v[i + h] = b * c + a * s;
      }
    }
  }
}

// ---------------------------------------------------------------- causal attention
// q,k,v,y: (B,T,H,dk) i.e. (B*T, C); P: (B,H,T,T) softmax probabilities (upper triangle 0).
template <class T>
void attention_forward(T* y, T* P, const T* q, const T* k, const T* v, std::int64_t B, std::int64_t Tn,
                       std::int64_t H, std::int64_t dk, T scale) {
  const std::int64_t C = H * dk;
#pragma omp parallel for if (B * H * Tn * Tn * dk > kParallelGrain)
  for (std::int64_t bh = 0; bh < B * H; ++bh) {
    const std::int64_t b = bh / H, hd = bh % H;
    const std::int64_t off = b * Tn * C + hd * dk;
    CStridedMap<T> Q(q + off, Tn, dk, Eigen::OuterStride<>(C));
    CStridedMap<T> K(k + off, Tn, dk, Eigen::OuterStride<>(C));
    CStridedMap<T> V(v + off, Tn, dk, Eigen::OuterStride<>(C));
    StridedMap<T> Y(y + off, Tn, dk, Eigen::OuterStride<>(C));
    MapMat<T> S(P + bh * Tn * Tn, Tn, Tn);
    S.noalias() = Q * K.transpose();
    for (std::int64_t t = 0; t < Tn; ++t) {
      ArrayRow<T> row(S.data() + t * Tn, t + 1);
      const T mx = row.maxCoeff() * scale;  // scale > 0
      row = (row * scale - mx).exp();
      row *= T(1) / row.sum();
      std::fill(S.data() + t * Tn + t + 1, S.data() + (t + 1) * Tn, T(0));
    }
    Y.noalias() = S * V;
  }
}

// dS = P ⊙ (dP − rowsum(dP ⊙ P)), dP = dY Vᵀ; dq = scale dS K; dk = scale dSᵀ Q; dv = Pᵀ dY.
// scratch: (B,H,T,T).
template <class T>
void attention_backward(T* dq, T* dk_, T* dv, T* scratch, const T* dy, const T* P, const T* q, const T* k,
                        const T* v, std::int64_t B, std::int64_t Tn, std::int64_t H, std::int64_t dk, T scale) {
  const std::int64_t C = H * dk;
#pragma omp parallel for if (B * H * Tn * Tn * dk > kParallelGrain)
  for (std::int64_t bh = 0; bh < B * H; ++bh) {
    const std::int64_t b = bh / H, hd = bh % H;
    const std::int64_t off = b * Tn * C + hd * dk;
    CStridedMap<T> Q(q + off, Tn, dk, Eigen::OuterStride<>(C));
    CStridedMap<T> K(k + off, Tn, dk, Eigen::OuterStride<>(C));
    CStridedMap<T> V(v + off, Tn, dk, Eigen::OuterStride<>(C));
    CStridedMap<T> dY(dy + off, Tn, dk, Eigen::OuterStride<>(C));
    StridedMap<T> dQ(dq + off, Tn, dk, Eigen::OuterStride<>(C));
    StridedMap<T> dK(dk_ + off, Tn, dk, Eigen::OuterStride<>(C));
    StridedMap<T> dV(dv + off, Tn, dk, Eigen::OuterStride<>(C));
    CMapMat<T> Pm(P + bh * Tn * Tn, Tn, Tn);
    MapMat<T> dS(scratch + bh * Tn * Tn, Tn, Tn);
    dV.noalias() = Pm.transpose() * dY;
    dS.noalias() = dY * V.transpose();
    for (std::int64_t t = 0; t < Tn; ++t) {
      T* g = dS.data() + t * Tn;
      const T* p = Pm.data() + t * Tn;
      T dot = 0;
      for (std::int64_t s = 0; s <= t; ++s) dot += g[s] * p[s];
      for (std::int64_t s = 0; s <= t; ++s) g[s] = scale * p[s] * (g[s] - dot);
      for (std::int64_t s = t + 1; s < Tn; ++s) g[s] = 0;
    }
    dQ.noalias() = dS * K;
    dK.noalias() = dS.transpose() * Q;
  }
}

// One query (1,H,dk) against cached keys/values (S,H,dk) for positions 0..S−1:
// incremental decoding. y (1,H,dk); p: scratch (S).
template <class T>
void attention_decode(T* y, T* p, const T* q, const T* kc, const T* vc, std::int64_t S, std::int64_t H,
                      std::int64_t dk, T scale) {
  const std::int64_t C = H * dk;
  for (std::int64_t hd = 0; hd < H; ++hd) {
    T mx = -std::numeric_limits<T>::infinity();
    for (std::int64_t s = 0; s < S; ++s) {
      T dot = 0;
      for (std::int64_t i = 0; i < dk; ++i) dot += q[hd * dk + i] * kc[s * C + hd * dk + i];
      p[s] = dot * scale;
      mx = std::max(mx, p[s]);
    }
    T sum = 0;
    for (std::int64_t s = 0; s < S; ++s) sum += (p[s] = std::exp(p[s] - mx));
    for (std::int64_t i = 0; i < dk; ++i) y[hd * dk + i] = 0;
    for (std::int64_t s = 0; s < S; ++s) {
      const T w = p[s] / sum;
      for (std::int64_t i = 0; i < dk; ++i) y[hd * dk + i] += w * vc[s * C + hd * dk + i];
    }
  }
}

// ---------------------------------------------------------------- SwiGLU
// uv (N, 2F) = [u | g]; act (N,F) = u ⊙ silu(g)
template <class T>
inline T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// Row-wise with Eigen arrays so exp() is vectorized (the scalar loop was
// exp-bound at ~4 GB/s; docs/perf.md).
template <class T>
void swiglu_forward(T* act, const T* uv, std::int64_t N, std::int64_t F) {
#pragma omp parallel for if (N * F > kParallelGrain)
  for (std::int64_t i = 0; i < N; ++i) {
    CArrayRow<T> u(uv + i * 2 * F, F), g(uv + i * 2 * F + F, F);
    ArrayRow<T>(act + i * F, F) = u * g / (T(1) + (-g).exp());
  }
}

// du = dact ⊙ silu(g); dg = dact ⊙ u ⊙ σ(g)(1 + g(1 − σ(g)))
template <class T>
void swiglu_backward(T* duv, const T* dact, const T* uv, std::int64_t N, std::int64_t F) {
#pragma omp parallel for if (N * F > kParallelGrain)
  for (std::int64_t i = 0; i < N; ++i) {
    CArrayRow<T> u(uv + i * 2 * F, F), g(uv + i * 2 * F + F, F), da(dact + i * F, F);
    const Eigen::Array<T, 1, Eigen::Dynamic> sg = T(1) / (T(1) + (-g).exp());
    ArrayRow<T>(duv + i * 2 * F, F) = da * g * sg;
    ArrayRow<T>(duv + i * 2 * F + F, F) = da * u * sg * (T(1) + g * (T(1) - sg));
  }
}

// ---------------------------------------------------------------- per-column scale
// y(N,L) = x ⊙ s (s broadcast over rows); y may alias x.
template <class T>
void scale_columns(T* y, const T* x, const T* s, std::int64_t N, std::int64_t L) {
#pragma omp parallel for if (N * L > kParallelGrain)
  for (std::int64_t i = 0; i < N; ++i)
    for (std::int64_t j = 0; j < L; ++j) y[i * L + j] = x[i * L + j] * s[j];
}

// ds(L) += c · Σ_rows dy ⊙ x  (deterministic, see column_reduce)
template <class T>
void column_dot_accumulate(T* ds, const T* dy, const T* x, std::int64_t N, std::int64_t L, T c = T(1)) {
  column_reduce(ds, N, L, [&](std::int64_t i, std::int64_t j) { return c * (dy[i * L + j] * x[i * L + j]); });
}

// ds(L) += Σ_rows dy ⊙ (a − b)
template <class T>
void column_dot_accumulate_diff(T* ds, const T* dy, const T* a, const T* b, std::int64_t N, std::int64_t L) {
  column_reduce(ds, N, L, [&](std::int64_t i, std::int64_t j) {
    const std::int64_t k = i * L + j;
    return dy[k] * (a[k] - b[k]);
  });
}

// ---------------------------------------------------------------- cross-entropy
// Mean over N rows. Returns the loss (accumulated in double); if dlogits is not
// null writes d loss / d logits = (softmax − onehot)/N. dlogits may alias logits.
template <class T>
double cross_entropy(T* dlogits, const T* logits, const std::int64_t* targets, std::int64_t N, std::int64_t V) {
  std::vector<double> row_loss(static_cast<std::size_t>(N));
#pragma omp parallel for if (N * V > kParallelGrain)
  for (std::int64_t i = 0; i < N; ++i) {
    const T* l = logits + i * V;
    CArrayRow<T> row(l, V);
    const T mx = row.maxCoeff();
    const T lse = mx + std::log((row - mx).exp().sum());
    row_loss[static_cast<std::size_t>(i)] = double(lse - l[targets[i]]);
    if (dlogits) {
      const T invN = T(1) / T(N);
      ArrayRow<T>(dlogits + i * V, V) = (row - lse).exp() * invN;
      dlogits[i * V + targets[i]] -= invN;
    }
  }
  double total = 0;
  for (double x : row_loss) total += x;
  return total / double(N);
}

}  // namespace normlab::cpu
