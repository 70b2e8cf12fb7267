// Every layer's hand-written backward against central finite differences in
// float64 (see gradcheck.hpp for the tolerance). Sizes exercise every code
// path: odd T, several heads, dk = 8, rows that are not a multiple of anything.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <type_traits>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "gradcheck.hpp"
#include "normlab/normlab.hpp"
#include "normlab/train/gradcheck.hpp"
#include "normlab/train/variants.hpp"

using namespace normlab;
using normlab::test::dot;
using normlab::test::kGradTol;
using normlab::test::numeric_grad;
using normlab::test::random_vector;
using normlab::test::rel_err;
using Vec = std::vector<double>;

namespace {
constexpr std::int64_t B = 2, seq = 7, H = 3, D = 8, C = H * D, N = B * seq;
}

TEST_CASE("gradcheck: linear (x Wᵀ)", "[grad]") {
  const std::int64_t in = 5, out = 4;
  Vec x = random_vector(N * in, 1), W = random_vector(out * in, 2), w = random_vector(N * out, 3);
  Vec y(N * out);
  auto loss = [&] {
    cpu::linear_forward(y.data(), x.data(), W.data(), N, in, out);
    return dot(y, w);
  };
  Vec dx(x.size()), dW(W.size(), 0.0);
  cpu::linear_backward(dx.data(), dW.data(), w.data(), x.data(), W.data(), N, in, out);
  CHECK(rel_err(dx, numeric_grad(x, loss)) < kGradTol);
  CHECK(rel_err(dW, numeric_grad(W, loss)) < kGradTol);
}

TEST_CASE("gradcheck: embedding with repeated tokens", "[grad]") {
  const std::int64_t V = 5;
  std::vector<std::int64_t> idx = {0, 3, 3, 1, 4, 0, 3};
  Vec wte = random_vector(V * C, 4), w = random_vector(idx.size() * C, 5), y(idx.size() * C);
  auto loss = [&] {
    cpu::embedding_forward(y.data(), idx.data(), wte.data(), std::int64_t(idx.size()), C);
    return dot(y, w);
  };
  Vec dwte(wte.size(), 0.0);
  cpu::embedding_backward(dwte.data(), idx.data(), w.data(), std::int64_t(idx.size()), C);
  CHECK(rel_err(dwte, numeric_grad(wte, loss)) < kGradTol);
}

TEST_CASE("gradcheck: RMSNorm", "[grad]") {
  Vec x = random_vector(N * C, 6), g = random_vector(C, 7), w = random_vector(N * C, 8), y(N * C), r(N);
  auto loss = [&] {
    cpu::rmsnorm_forward(y.data(), r.data(), x.data(), g.data(), N, C, 1e-6);
    return dot(y, w);
  };
  loss();
  Vec dx(x.size()), dg(C, 0.0);
  cpu::rmsnorm_backward(dx.data(), dg.data(), w.data(), x.data(), g.data(), r.data(), N, C);
  CHECK(rel_err(dx, numeric_grad(x, loss)) < kGradTol);
  CHECK(rel_err(dg, numeric_grad(g, loss)) < kGradTol);
}

TEST_CASE("gradcheck: row normalization N(x) = x/‖x‖", "[grad]") {
  Vec x = random_vector(N * C, 9), w = random_vector(N * C, 10), y(N * C), nrm(N);
  auto loss = [&] {
    cpu::l2norm_rows_forward(y.data(), nrm.data(), x.data(), N, C);
    return dot(y, w);
  };
  loss();
  Vec dx(x.size());
  cpu::l2norm_rows_backward(dx.data(), w.data(), y.data(), nrm.data(), N, C);
  CHECK(rel_err(dx, numeric_grad(x, loss)) < kGradTol);
}

TEST_CASE("gradcheck: rotate-half RoPE", "[grad]") {
  Vec cs(seq * D / 2), sn(seq * D / 2);
  cpu::rope_table(cs.data(), sn.data(), seq, D);
  Vec x = random_vector(N * C, 11), w = random_vector(N * C, 12), y(N * C);
  auto loss = [&] {
    y = x;
    cpu::rope_apply(y.data(), cs.data(), sn.data(), B, seq, H, D, false);
    return dot(y, w);
  };
  Vec dx = w;
  cpu::rope_apply(dx.data(), cs.data(), sn.data(), B, seq, H, D, true);
  CHECK(rel_err(dx, numeric_grad(x, loss)) < kGradTol);
  // RoPE is a rotation: it preserves each head's norm.
  loss();
  for (std::int64_t r = 0; r < N * H; ++r) {
    double a = 0, b = 0;
    for (std::int64_t i = 0; i < D; ++i) {
      a += x[r * D + i] * x[r * D + i];
      b += y[r * D + i] * y[r * D + i];
    }
    CHECK(std::abs(a - b) < 1e-12 * a);
  }
}

TEST_CASE("gradcheck: causal attention", "[grad]") {
  for (double scale : {1.0 / std::sqrt(double(D)), std::sqrt(double(D))}) {
    Vec q = random_vector(N * C, 13, 0.5), k = random_vector(N * C, 14, 0.5), v = random_vector(N * C, 15);
    Vec w = random_vector(N * C, 16), y(N * C), lse(B * H * seq), P(B * H * seq * seq);
    auto loss = [&] {
      cpu::attention_forward(y.data(), lse.data(), q.data(), k.data(), v.data(), B, seq, H, D, scale);
      return dot(y, w);
    };
    loss();
    Vec dq(q.size()), dk(k.size()), dv(v.size());
    cpu::attention_backward(dq.data(), dk.data(), dv.data(), w.data(), y.data(), lse.data(), q.data(), k.data(),
                            v.data(), B, seq, H, D, scale);
    CHECK(rel_err(dq, numeric_grad(q, loss)) < kGradTol);
    CHECK(rel_err(dk, numeric_grad(k, loss)) < kGradTol);
    CHECK(rel_err(dv, numeric_grad(v, loss)) < kGradTol);
    // causality: the first token only sees itself.
    cpu::attention_probs(P.data(), lse.data(), q.data(), k.data(), B, seq, H, D, scale);
    for (std::int64_t bh = 0; bh < B * H; ++bh) CHECK(P[bh * seq * seq] == Approx(1.0).epsilon(1e-15));
  }
}

namespace {
// Dense masked attention, written the obvious way (materializes T×T): the
// reference for the blocked kernel at sizes that span several blocks.
struct DenseAttention {
  std::int64_t B, T, H, dk;
  double scale;
  void forward(Vec& y, Vec& P, const Vec& q, const Vec& k, const Vec& v) const {
    const std::int64_t C = H * dk;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t t = 0; t < T; ++t) {
          double* p = &P[((b * H + h) * T + t) * T];
          double mx = -1e300;
          for (std::int64_t s = 0; s <= t; ++s) {
            double dot = 0;
            for (std::int64_t c = 0; c < dk; ++c) dot += q[(b * T + t) * C + h * dk + c] * k[(b * T + s) * C + h * dk + c];
            p[s] = scale * dot;
            mx = std::max(mx, p[s]);
          }
          double sum = 0;
          for (std::int64_t s = 0; s <= t; ++s) sum += (p[s] = std::exp(p[s] - mx));
          for (std::int64_t s = 0; s < T; ++s) p[s] = s <= t ? p[s] / sum : 0.0;
          for (std::int64_t c = 0; c < dk; ++c) {
            double acc = 0;
            for (std::int64_t s = 0; s <= t; ++s) acc += p[s] * v[(b * T + s) * C + h * dk + c];
            y[(b * T + t) * C + h * dk + c] = acc;
          }
        }
  }
  void backward(Vec& dq, Vec& dk_, Vec& dv, const Vec& dy, const Vec& P, const Vec& q, const Vec& k,
                const Vec& v) const {
    const std::int64_t C = H * dk;
    std::fill(dq.begin(), dq.end(), 0.0);
    std::fill(dk_.begin(), dk_.end(), 0.0);
    std::fill(dv.begin(), dv.end(), 0.0);
    std::vector<double> dp(static_cast<std::size_t>(T));
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t t = 0; t < T; ++t) {
          const double* p = &P[((b * H + h) * T + t) * T];
          const std::int64_t rt = (b * T + t) * C + h * dk;
          double sum = 0;
          for (std::int64_t s = 0; s <= t; ++s) {
            const std::int64_t rs = (b * T + s) * C + h * dk;
            double d = 0;
            for (std::int64_t c = 0; c < dk; ++c) {
              d += dy[rt + c] * v[rs + c];
              dv[rs + c] += p[s] * dy[rt + c];
            }
            dp[s] = d;
            sum += d * p[s];
          }
          for (std::int64_t s = 0; s <= t; ++s) {
            const std::int64_t rs = (b * T + s) * C + h * dk;
            const double ds = scale * p[s] * (dp[s] - sum);
            for (std::int64_t c = 0; c < dk; ++c) {
              dq[rt + c] += ds * k[rs + c];
              dk_[rs + c] += ds * q[rt + c];
            }
          }
        }
  }
};

template <class T>
std::vector<T> cast(const Vec& v) {
  return std::vector<T>(v.begin(), v.end());
}
template <class T>
double rel_err_to(const std::vector<T>& a, const Vec& ref) {
  return rel_err(Vec(a.begin(), a.end()), ref);
}
}  // namespace

// T = 150 spans three key/query blocks of 64, the last one partial, so every
// path of the blocked kernel (diagonal blocks, full blocks, the ragged edge) runs.
// Head sizes: 16 (half a 32-column micro-tile of the float32 AVX-512 path), 40
// (a ragged 16 × 16 transpose in its packing) and 64 (the models').
TEMPLATE_TEST_CASE("attention: blocked (flash) kernel equals dense masked attention", "[attention]", double, float) {
  const std::int64_t dk = GENERATE(16, 40, 64);
  INFO("head size " << dk);
  const std::int64_t b = 2, t = 150, h = 2, c = h * dk, n = b * t;
  const double scale = std::sqrt(double(dk));  // nGPT's softmax scale: peaky rows
  const Vec q = random_vector(n * c, 41, 0.3), k = random_vector(n * c, 42, 0.3), v = random_vector(n * c, 43),
            dy = random_vector(n * c, 44);
  DenseAttention ref{b, t, h, dk, scale};
  Vec y(n * c), P(b * h * t * t), dq(n * c), dk_(n * c), dv(n * c);
  ref.forward(y, P, q, k, v);
  ref.backward(dq, dk_, dv, dy, P, q, k, v);

  using T = TestType;
  const auto qt = cast<T>(q), kt = cast<T>(k), vt = cast<T>(v), dyt = cast<T>(dy);
  std::vector<T> yt(n * c), lse(b * h * t), Pt(P.size()), dqt(n * c), dkt(n * c), dvt(n * c);
  cpu::attention_forward(yt.data(), lse.data(), qt.data(), kt.data(), vt.data(), b, t, h, dk, T(scale));
  cpu::attention_backward(dqt.data(), dkt.data(), dvt.data(), dyt.data(), yt.data(), lse.data(), qt.data(),
                          kt.data(), vt.data(), b, t, h, dk, T(scale));
  cpu::attention_probs(Pt.data(), lse.data(), qt.data(), kt.data(), b, t, h, dk, T(scale));
  // float64: both are exact up to rounding in a different order (1e-12);
  // float32 against the float64 reference: a few ulps of 1.2e-7 through sums of
  // ≤150 terms and exp (2e-5 relative, norm-wise).
  const double tol = std::is_same_v<T, double> ? 1e-12 : 2e-5;
  CHECK(rel_err_to(yt, y) < tol);
  CHECK(rel_err_to(Pt, P) < tol);
  CHECK(rel_err_to(dqt, dq) < tol);
  CHECK(rel_err_to(dkt, dk_) < tol);
  CHECK(rel_err_to(dvt, dv) < tol);
}

TEST_CASE("gradcheck: SwiGLU u ⊙ silu(g)", "[grad]") {
  const std::int64_t F = 6;
  Vec uv = random_vector(N * 2 * F, 17, 2.0), w = random_vector(N * F, 18), act(N * F);
  auto loss = [&] {
    cpu::swiglu_forward(act.data(), uv.data(), N, F);
    return dot(act, w);
  };
  Vec duv(uv.size());
  cpu::swiglu_backward(duv.data(), w.data(), uv.data(), N, F);
  CHECK(rel_err(duv, numeric_grad(uv, loss)) < kGradTol);
}

TEST_CASE("gradcheck: scaled SwiGLU (uv ⊙ s before the gate)", "[grad]") {
  // F = 70 spans two column blocks of the fused backward (64 + a ragged 6).
  const std::int64_t F = 70;
  const double c = 1.7;  // the scale's re-parameterisation constant
  Vec uv = random_vector(N * 2 * F, 19), s = random_vector(2 * F, 20), w = random_vector(N * F, 21);
  Vec act(N * F);
  auto loss = [&] {
    cpu::scaled_swiglu_forward(act.data(), uv.data(), s.data(), N, F);
    return dot(act, w);
  };
  Vec duv(uv.size()), ds(s.size(), 0.0);
  cpu::scaled_swiglu_backward(duv.data(), ds.data(), w.data(), uv.data(), s.data(), N, F, c);
  Vec ds_num = numeric_grad(s, loss);
  for (double& x : ds_num) x *= c;
  CHECK(rel_err(duv, numeric_grad(uv, loss)) < kGradTol);
  CHECK(rel_err(ds, ds_num) < kGradTol);
  // The unfused composition gives the same forward.
  Vec uvs(uv.size()), act2(N * F);
  cpu::scale_columns(uvs.data(), uv.data(), s.data(), N, 2 * F);
  cpu::swiglu_forward(act2.data(), uvs.data(), N, F);
  loss();
  CHECK(rel_err(act, act2) < 1e-15);
}

TEST_CASE("gradcheck: scaled QK-norm after RoPE (s ⊙ N(rope(q)) per head), fused kernels", "[grad]") {
  // B·T = 14 rows: with kRowChunk = 128 one chunk; the second case below
  // takes 300 rows (three chunks) against the unfused composition.
  Vec cs(seq * D / 2), sn(seq * D / 2);
  cpu::rope_table(cs.data(), sn.data(), seq, D);
  Vec q = random_vector(N * C, 22), s = random_vector(C, 23), w = random_vector(N * C, 24);
  Vec qr(N * C), qh(N * C), qs(N * C), nrm(N * H);
  auto loss = [&] {
    qr = q;
    cpu::rope_l2norm_scale_forward(qr.data(), qh.data(), nrm.data(), qs.data(), s.data(), cs.data(), sn.data(), B, seq,
                                   H, D);
    return dot(qs, w);
  };
  loss();
  const double c = 0.7;
  Vec dq = w, ds(C, 0.0);
  cpu::rope_l2norm_scale_backward(dq.data(), ds.data(), qh.data(), nrm.data(), s.data(), cs.data(), sn.data(), B, seq,
                                  H, D, c);
  Vec ds_num = numeric_grad(s, loss);
  for (double& x : ds_num) x *= c;
  CHECK(rel_err(dq, numeric_grad(q, loss)) < kGradTol);
  CHECK(rel_err(ds, ds_num) < kGradTol);
}

TEST_CASE("fused QK path equals RoPE, l2norm_rows and scale_columns composed (several row chunks)", "[grad]") {
  const std::int64_t b = 3, t = 100, h = 2, d = 8, c = h * d, n = b * t;
  Vec cs(t * d / 2), sn(t * d / 2);
  cpu::rope_table(cs.data(), sn.data(), t, d);
  const Vec q = random_vector(n * c, 25), s = random_vector(c, 26), g = random_vector(n * c, 27);
  // unfused
  Vec qr = q, qh(n * c), qs(n * c), nrm(n * h), dq(n * c), ds(c, 0.0);
  cpu::rope_apply(qr.data(), cs.data(), sn.data(), b, t, h, d, false);
  cpu::l2norm_rows_forward(qh.data(), nrm.data(), qr.data(), n * h, d);
  cpu::scale_columns(qs.data(), qh.data(), s.data(), n, c);
  cpu::column_dot_accumulate(ds.data(), g.data(), qh.data(), n, c);
  cpu::scale_columns(dq.data(), g.data(), s.data(), n, c);
  cpu::l2norm_rows_backward(dq.data(), dq.data(), qh.data(), nrm.data(), n * h, d);
  cpu::rope_apply(dq.data(), cs.data(), sn.data(), b, t, h, d, true);
  // fused
  Vec fq = q, fqh(n * c), fqs(n * c), fnrm(n * h), fdq = g, fds(c, 0.0);
  cpu::rope_l2norm_scale_forward(fq.data(), fqh.data(), fnrm.data(), fqs.data(), s.data(), cs.data(), sn.data(), b, t,
                                 h, d);
  cpu::rope_l2norm_scale_backward(fdq.data(), fds.data(), fqh.data(), fnrm.data(), s.data(), cs.data(), sn.data(), b,
                                  t, h, d, 1.0);
  // Same operations in the same order per element, except ds: summed per chunk of rows (rounding only).
  CHECK(rel_err(fq, qr) == 0.0);
  CHECK(rel_err(fqs, qs) == 0.0);
  CHECK(rel_err(fdq, dq) < 1e-15);
  CHECK(rel_err(fds, ds) < 1e-14);
}

TEST_CASE("gradcheck: cross-entropy and scaled logits", "[grad]") {
  const std::int64_t V = 9;
  std::vector<std::int64_t> tgt(N);
  for (std::int64_t i = 0; i < N; ++i) tgt[i] = (i * 5 + 2) % V;
  Vec raw = random_vector(N * V, 25, 2.0), sz = random_vector(V, 26), logits(N * V);
  auto loss = [&] {
    cpu::scale_columns(logits.data(), raw.data(), sz.data(), N, V);
    return cpu::cross_entropy<double>(nullptr, logits.data(), tgt.data(), N, V);
  };
  loss();
  Vec dl(N * V), dsz(V, 0.0);
  cpu::cross_entropy(dl.data(), logits.data(), tgt.data(), N, V);
  cpu::column_dot_accumulate(dsz.data(), dl.data(), raw.data(), N, V);
  cpu::scale_columns(dl.data(), dl.data(), sz.data(), N, V);
  CHECK(rel_err(dl, numeric_grad(raw, loss)) < kGradTol);
  CHECK(rel_err(dsz, numeric_grad(sz, loss)) < kGradTol);
}

// f_from_h: 0 = independent random f; otherwise f = f_from_h·h + noise·N(0,1)
// (θ ≈ noise near 0 for +1, θ ≈ π − noise for −1) to reach SLERP's series
// branch (θ < 1e-3) and the far side (below the π − 1e-4 clamp).
template <class Rule>
static void check_residual(bool alpha_mixed_sign, double f_from_h = 0.0, double noise_scale = 0.0,
                           double alpha_step = 1e-6) {
  using Ops = cpu::ResidualKernels<Rule::math, double>;
  Vec h = random_vector(N * C, 27), f = random_vector(N * C, 28), alpha = random_vector(C, 29, 0.3);
  if (f_from_h != 0.0) {
    const Vec noise = random_vector(N * C, 31, noise_scale);
    for (std::size_t i = 0; i < f.size(); ++i) f[i] = f_from_h * h[i] + noise[i];
  }
  if (!alpha_mixed_sign)
    for (double& a : alpha) a = std::abs(a);
  Vec w = random_vector(N * C, 30), out(N * C);
  Arena<double> counting;
  typename Ops::Cache cache;
  cache.bind(counting, N, C);
  Arena<double> arena(counting.used());
  cache.bind(arena, N, C);
  auto loss = [&] {
    Ops::forward(cache, out.data(), h.data(), f.data(), alpha.data(), N, C);
    return dot(out, w);
  };
  loss();
  Vec dh(N * C), df(N * C), da(C, 0.0);
  Ops::backward(dh.data(), df.data(), da.data(), w.data(), cache, out.data(), h.data(), f.data(), alpha.data(), N,
                C);
  CHECK(rel_err(dh, numeric_grad(h, loss)) < kGradTol);
  CHECK(rel_err(df, numeric_grad(f, loss)) < kGradTol);
  if constexpr (Rule::learned_alpha) CHECK(rel_err(da, numeric_grad(alpha, loss, alpha_step)) < kGradTol);
  if constexpr (Rule::retracts) {
    loss();
    for (std::int64_t i = 0; i < N; ++i) {
      double ss = 0;
      for (std::int64_t c = 0; c < C; ++c) ss += out[i * C + c] * out[i * C + c];
      CHECK(std::abs(std::sqrt(ss) - 1.0) < 1e-14);
    }
  }
}

TEST_CASE("gradcheck: residual add", "[grad]") { check_residual<residual_add>(false); }
TEST_CASE("gradcheck: LERP (no retraction)", "[grad]") { check_residual<lerp>(true); }
TEST_CASE("gradcheck: LERP with nu(alpha) (anGPT)", "[grad]") { check_residual<lerp_nu>(false); }
TEST_CASE("gradcheck: LERP-retract", "[grad]") { check_residual<lerp_retract>(true); }
TEST_CASE("gradcheck: SLERP, generic angles", "[grad]") { check_residual<slerp>(false); }
// θ ≈ 4e-4: inside the series branch. The α-gradient is ∝ θ (≈1e-3), so the
// default step's rounding floor (≈4e-9 absolute on a loss of ≈18) would be
// ~4e-6 relative; for α a step of 1e-4 brings rounding to 4e-11 while the
// truncation error (∝ step² × the small third derivative) stays below 1e-8.
TEST_CASE("gradcheck: SLERP, theta near 0 (series branch)", "[grad]") {
  check_residual<slerp>(false, 1.0, 4e-4, 1e-4);
}
TEST_CASE("gradcheck: SLERP, theta near pi", "[grad]") { check_residual<slerp>(false, -1.0, 1e-2); }

// anGPT's residual multiplier m (ModelConfig::angpt_residual_factor_mult): the
// site's output is exactly m times the m = 1 output, and dh, df and the stored
// α's gradient are m times theirs (m = 0.5 and 2 are powers of two: every
// product is exact, so the comparison is bitwise).
TEST_CASE("lerp_nu: anGPT's residual multiplier scales the output and every gradient exactly", "[grad]") {
  using Site = lerp_nu::site<double, cpu_backend>;
  const Vec h = random_vector(N * C, 51), f = random_vector(N * C, 52), dout = random_vector(N * C, 53);
  auto run = [&](double m, Vec& out, Vec& dh, Vec& df, Vec& dalpha) {
    ModelConfig mc;
    mc.n_embd = C;
    mc.n_head = H;
    mc.alpha_init = 0.3;
    mc.base_scale = 1.0 / std::sqrt(double(C));  // 0 would mean "the scheme's default", which only a model resolves
    mc.angpt_residual_factor_mult = m;
    ParamStore<double> store;
    Site site;
    site.declare(store, "h.0.", "attn", mc);
    store.finalize();
    for (std::int64_t j = 0; j < C; ++j) store.value()[j] = mc.base_scale * (0.5 + 0.04 * double(j));
    Arena<double> counting;
    site.bind(counting, N, C);
    Arena<double> arena(counting.used());
    site.bind(arena, N, C);
    Vec tmp(4 * C);
    StepContext<double> c;
    c.cfg = &mc;
    c.params = &store;
    c.values = store.value();
    c.grads = store.grad();
    c.alpha_tmp = tmp.data();
    c.d_alpha = tmp.data() + C;
    c.d_scale = tmp.data() + 2 * C;
    out.assign(N * C, 0.0);
    dh.assign(N * C, 0.0);
    df.assign(N * C, 0.0);
    site.forward(c, out.data(), h.data(), f.data(), N, C);
    site.backward(c, dh.data(), df.data(), dout.data(), out.data(), h.data(), f.data(), N, C);
    dalpha.assign(store.grad(), store.grad() + C);
  };
  Vec o1, dh1, df1, da1;
  run(1.0, o1, dh1, df1, da1);
  for (const double m : {0.5, 2.0}) {
    Vec o, dh, df, da;
    run(m, o, dh, df, da);
    auto times = [m](Vec v) {
      for (double& x : v) x *= m;
      return v;
    };
    INFO("m = " << m);
    CHECK(o == times(o1));
    CHECK(dh == times(dh1));
    CHECK(df == times(df1));
    CHECK(da == times(da1));
    CHECK(o != o1);
  }
}

// The whole anGPT model with every multiplier off 1 (the paper's sensitivity
// ablation): the gradients still match the finite differences. The residual's
// is 2, not 0.5: at 0.5 every residual halves the hidden state, the gradients
// shrink towards the finite difference's rounding floor (measured: 7e-6
// relative at the same tolerance's probe), while 2 exercises the same code at
// 2e-8 (the site's exact scaling by 0.5 and 2 is the test above).
TEST_CASE("gradcheck: anGPT with its attention, MLP and residual multipliers off 1, whole model", "[grad][model]") {
  GradcheckShape shape;
  shape.config.angpt_attn_factor_mult = 2.0;
  shape.config.angpt_mlp_factor_mult = 0.5;
  shape.config.angpt_residual_factor_mult = 2.0;
  for (const TensorGradError& e : check_model_gradients<ANGPT<double>>(43, shape, 48)) {
    INFO(e.name << ": " << e.rel_error);
    CHECK(e.rel_error < kGradTol);
  }
}

namespace {
// One SLERP forward with a scalar step a on random rows; returns out and ‖z‖ per row.
struct SlerpRun {
  Vec h, f, out, nz;
};
SlerpRun run_slerp(double a, std::uint64_t seed, double f_from_h = 0.0) {
  using Ops = cpu::ResidualKernels<slerp::math, double>;
  SlerpRun r{random_vector(N * C, seed), random_vector(N * C, seed + 1), Vec(N * C), Vec(N)};
  if (f_from_h != 0.0) {
    const Vec noise = random_vector(N * C, seed + 2, 1e-12);
    for (std::size_t i = 0; i < r.f.size(); ++i) r.f[i] = f_from_h * r.h[i] + noise[i];
  }
  const Vec alpha(C, a);
  Arena<double> counting;
  Ops::Cache cache;
  cache.bind(counting, N, C);
  Arena<double> arena(counting.used());
  cache.bind(arena, N, C);
  Ops::forward(cache, r.out.data(), r.h.data(), r.f.data(), alpha.data(), N, C);
  for (std::int64_t i = 0; i < N; ++i) r.nz[i] = cache.nz[i];
  return r;
}
double max_diff_to_normalized(const Vec& out, const Vec& x) {
  double worst = 0;
  for (std::int64_t i = 0; i < N; ++i) {
    double ss = 0;
    for (std::int64_t c = 0; c < C; ++c) ss += x[i * C + c] * x[i * C + c];
    for (std::int64_t c = 0; c < C; ++c) worst = std::max(worst, std::abs(out[i * C + c] - x[i * C + c] / std::sqrt(ss)));
  }
  return worst;
}
}  // namespace

TEST_CASE("slerp: returns its endpoints at alpha = 0 and alpha = 1", "[slerp]") {
  const SlerpRun a0 = run_slerp(0.0, 50);
  CHECK(max_diff_to_normalized(a0.out, a0.h) < 1e-14);
  const SlerpRun a1 = run_slerp(1.0, 50);
  CHECK(max_diff_to_normalized(a1.out, a1.f) < 1e-14);
}

TEST_CASE("slerp: scalar alpha is the exact geodesic (unit before retraction)", "[slerp]") {
  for (double a : {0.05, 0.3, 0.5, 0.9}) {
    const SlerpRun r = run_slerp(a, 60);
    for (double nz : r.nz) CHECK(std::abs(nz - 1.0) < 1e-12);
    // and θ near 0: the LERP limit is still on the sphere
    const SlerpRun near = run_slerp(a, 70, 1.0);
    for (double nz : near.nz) CHECK(std::abs(nz - 1.0) < 1e-12);
  }
}

TEST_CASE("slerp: antipodal inputs give finite unit outputs", "[slerp]") {
  const SlerpRun r = run_slerp(0.5, 80, -1.0);
  for (double x : r.out) REQUIRE(std::isfinite(x));
  for (std::int64_t i = 0; i < N; ++i) {
    double ss = 0;
    for (std::int64_t c = 0; c < C; ++c) ss += r.out[i * C + c] * r.out[i * C + c];
    CHECK(std::abs(std::sqrt(ss) - 1.0) < 1e-12);
  }
}

// Whole-model checks: d loss / d 48 sampled entries of every parameter tensor
// (all of the small ones), for every named variant (through every layer and the re-parameterisation of the scales).
TEST_CASE("gradcheck: every variant, whole model, every parameter tensor", "[grad][model]") {
  std::apply(
      [](auto... tags) {
        (
            [&] {
              using Model = typename decltype(tags)::template model<double>;
              for (const TensorGradError& e : check_model_gradients<Model>(41, 48)) {
                INFO(decltype(tags)::name << " " << e.name << ": " << e.rel_error);
                CHECK(e.rel_error < kGradTol);
              }
            }(),
            ...);
      },
      all_variants{});
}

namespace {
// C = alpha·op(A)·op(B) (+ C when accumulating) through cpu::gemm, against a
// long-double product; also run with one thread and compared bit for bit, and
// the padding columns of C (ldc > N) must stay untouched. Returns the worst
// error relative to 1 + |reference|.
template <class T, int LhsOrder, int RhsOrder>
double gemm_error(std::int64_t M, std::int64_t N, std::int64_t K, bool accumulate, T alpha) {
  const std::int64_t lda = LhsOrder == Eigen::RowMajor ? K + 3 : M + 5;
  const std::int64_t ldb = RhsOrder == Eigen::RowMajor ? N + 2 : K + 1;
  const std::int64_t ldc = N + 7;
  auto fill = [](std::size_t n, std::uint64_t seed) {
    const Vec v = random_vector(n, seed);
    return std::vector<T>(v.begin(), v.end());
  };
  const std::vector<T> A = fill(std::size_t((LhsOrder == Eigen::RowMajor ? M : K) * lda), 11);
  const std::vector<T> Bm = fill(std::size_t((RhsOrder == Eigen::RowMajor ? K : N) * ldb), 12);
  const std::vector<T> C0 = fill(std::size_t(M * ldc), 13);
  auto a = [&](std::int64_t i, std::int64_t k) { return LhsOrder == Eigen::RowMajor ? A[i * lda + k] : A[k * lda + i]; };
  auto b = [&](std::int64_t k, std::int64_t j) { return RhsOrder == Eigen::RowMajor ? Bm[k * ldb + j] : Bm[j * ldb + k]; };
  std::vector<T> C = C0, C1 = C0;
  cpu::gemm<T, LhsOrder, RhsOrder>(M, N, K, A.data(), lda, Bm.data(), ldb, C.data(), ldc, accumulate, alpha);
#ifdef _OPENMP
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
#endif
  cpu::gemm<T, LhsOrder, RhsOrder>(M, N, K, A.data(), lda, Bm.data(), ldb, C1.data(), ldc, accumulate, alpha);
#ifdef _OPENMP
  omp_set_num_threads(threads);
#endif
  CHECK(C == C1);  // the same bits for any thread count
  double worst = 0;
  std::int64_t padding_written = 0;
  for (std::int64_t i = 0; i < M; ++i) {
    for (std::int64_t j = 0; j < N; ++j) {
      long double s = 0;
      for (std::int64_t k = 0; k < K; ++k) s += static_cast<long double>(a(i, k)) * b(k, j);
      const double ref = double(static_cast<long double>(alpha) * s) + (accumulate ? double(C0[i * ldc + j]) : 0.0);
      worst = std::max(worst, std::abs(ref - double(C[i * ldc + j])) / (1 + std::abs(ref)));
    }
    for (std::int64_t j = N; j < ldc; ++j) padding_written += C[i * ldc + j] != C0[i * ldc + j];
  }
  CHECK(padding_written == 0);
  return worst;
}
}  // namespace

TEST_CASE("gemm: every storage order, ragged and model shapes, accumulate and alpha, against long double", "[gemm]") {
  // Ragged shapes leave partial micro-panels and chunks; the larger ones take
  // the threaded path with several row chunks and K-slabs (the float32 AVX-512
  // kernels: {300, 200, 700}, {29, 1100, 260} and {1100, 40, 600} cross their
  // 518-row, 256-column and 512-deep blocks with partial 14 × 32 tiles; 1100 rows
  // make pieces of 550). Tolerances: float64
  // 1e-12 and float32 1e-4 relative to 1 + |C| (sums of up to 700 unit-variance
  // products; rounding grows like √K·ε·max|partial sum|).
  const std::int64_t shapes[][3] = {{7, 5, 4},     {16, 5, 3},      {37, 53, 71},    {300, 200, 700},
                                    {513, 96, 33}, {29, 1100, 260}, {1100, 40, 600}};
  for (const auto& s : shapes) {
    const std::int64_t M = s[0], N = s[1], K = s[2];
    INFO("M " << M << " N " << N << " K " << K);
    CHECK(gemm_error<double, Eigen::RowMajor, Eigen::ColMajor>(M, N, K, false, 1.0) < 1e-12);
    CHECK(gemm_error<double, Eigen::RowMajor, Eigen::RowMajor>(M, N, K, true, 0.5) < 1e-12);
    CHECK(gemm_error<double, Eigen::ColMajor, Eigen::RowMajor>(M, N, K, true, 1.0) < 1e-12);
    CHECK(gemm_error<double, Eigen::ColMajor, Eigen::ColMajor>(M, N, K, false, 2.0) < 1e-12);
    CHECK(gemm_error<float, Eigen::RowMajor, Eigen::ColMajor>(M, N, K, false, 1.0f) < 1e-4);
    CHECK(gemm_error<float, Eigen::ColMajor, Eigen::RowMajor>(M, N, K, true, 0.7f) < 1e-4);
    CHECK(gemm_error<float, Eigen::RowMajor, Eigen::RowMajor>(M, N, K, true, 1.0f) < 1e-4);
    CHECK(gemm_error<float, Eigen::ColMajor, Eigen::ColMajor>(M, N, K, false, 0.5f) < 1e-4);
  }
}
