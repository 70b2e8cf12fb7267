// Every layer's hand-written backward against central finite differences in
// float64 (see gradcheck.hpp for the tolerance). Sizes exercise every code
// path: odd T, several heads, dk = 8, rows that are not a multiple of anything.
#include <catch2/catch.hpp>

#include "gradcheck.hpp"
#include "normlab/normlab.hpp"

using namespace normlab;
using normlab::test::dot;
using normlab::test::kGradTol;
using normlab::test::numeric_grad;
using normlab::test::random_vector;
using normlab::test::rel_err;
using Vec = std::vector<double>;

namespace {
constexpr std::int64_t B = 2, Tn = 7, H = 3, D = 8, C = H * D, N = B * Tn;
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
  Vec cs(Tn * D / 2), sn(Tn * D / 2);
  cpu::rope_table(cs.data(), sn.data(), Tn, D);
  Vec x = random_vector(N * C, 11), w = random_vector(N * C, 12), y(N * C);
  auto loss = [&] {
    y = x;
    cpu::rope_apply(y.data(), cs.data(), sn.data(), B, Tn, H, D, false);
    return dot(y, w);
  };
  Vec dx = w;
  cpu::rope_apply(dx.data(), cs.data(), sn.data(), B, Tn, H, D, true);
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
    Vec w = random_vector(N * C, 16), y(N * C), P(B * H * Tn * Tn), S(P.size());
    auto loss = [&] {
      cpu::attention_forward(y.data(), P.data(), q.data(), k.data(), v.data(), B, Tn, H, D, scale);
      return dot(y, w);
    };
    loss();
    Vec dq(q.size()), dk(k.size()), dv(v.size());
    cpu::attention_backward(dq.data(), dk.data(), dv.data(), S.data(), w.data(), P.data(), q.data(), k.data(),
                            v.data(), B, Tn, H, D, scale);
    CHECK(rel_err(dq, numeric_grad(q, loss)) < kGradTol);
    CHECK(rel_err(dk, numeric_grad(k, loss)) < kGradTol);
    CHECK(rel_err(dv, numeric_grad(v, loss)) < kGradTol);
    // causality: the first token only sees itself.
    for (std::int64_t bh = 0; bh < B * H; ++bh) CHECK(P[bh * Tn * Tn] == 1.0);
  }
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
  const std::int64_t F = 6;
  Vec uv = random_vector(N * 2 * F, 19), s = random_vector(2 * F, 20), w = random_vector(N * F, 21);
  Vec uvs(uv.size()), act(N * F);
  auto loss = [&] {
    cpu::scale_columns(uvs.data(), uv.data(), s.data(), N, 2 * F);
    cpu::swiglu_forward(act.data(), uvs.data(), N, F);
    return dot(act, w);
  };
  loss();
  Vec duv(uv.size()), ds(s.size(), 0.0);
  cpu::swiglu_backward(duv.data(), w.data(), uvs.data(), N, F);
  cpu::column_dot_accumulate(ds.data(), duv.data(), uv.data(), N, 2 * F);
  cpu::scale_columns(duv.data(), duv.data(), s.data(), N, 2 * F);
  CHECK(rel_err(duv, numeric_grad(uv, loss)) < kGradTol);
  CHECK(rel_err(ds, numeric_grad(s, loss)) < kGradTol);
}

TEST_CASE("gradcheck: scaled QK-norm after RoPE (s ⊙ N(rope(q)) per head)", "[grad]") {
  Vec cs(Tn * D / 2), sn(Tn * D / 2);
  cpu::rope_table(cs.data(), sn.data(), Tn, D);
  Vec q = random_vector(N * C, 22), s = random_vector(C, 23), w = random_vector(N * C, 24);
  Vec qr(N * C), qh(N * C), qs(N * C), nrm(N * H);
  auto loss = [&] {
    qr = q;
    cpu::rope_apply(qr.data(), cs.data(), sn.data(), B, Tn, H, D, false);
    cpu::l2norm_rows_forward(qh.data(), nrm.data(), qr.data(), N * H, D);
    cpu::scale_columns(qs.data(), qh.data(), s.data(), N, C);
    return dot(qs, w);
  };
  loss();
  Vec dq(N * C), ds(C, 0.0);
  cpu::column_dot_accumulate(ds.data(), w.data(), qh.data(), N, C);
  cpu::scale_columns(dq.data(), w.data(), s.data(), N, C);
  cpu::l2norm_rows_backward(dq.data(), dq.data(), qh.data(), nrm.data(), N * H, D);
  cpu::rope_apply(dq.data(), cs.data(), sn.data(), B, Tn, H, D, true);
  CHECK(rel_err(dq, numeric_grad(q, loss)) < kGradTol);
  CHECK(rel_err(ds, numeric_grad(s, loss)) < kGradTol);
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

template <class Rule>
static void check_residual(bool alpha_mixed_sign) {
  using Ops = ResidualOps<Rule, double>;
  Vec h = random_vector(N * C, 27), f = random_vector(N * C, 28), alpha = random_vector(C, 29, 0.3);
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
  Ops::backward(dh.data(), df.data(), da.data(), w.data(), cache, out.data(), alpha.data(), N, C);
  CHECK(rel_err(dh, numeric_grad(h, loss)) < kGradTol);
  CHECK(rel_err(df, numeric_grad(f, loss)) < kGradTol);
  if constexpr (Rule::learned_alpha) CHECK(rel_err(da, numeric_grad(alpha, loss)) < kGradTol);
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
TEST_CASE("gradcheck: LERP-retract", "[grad]") { check_residual<lerp_retract>(true); }

// Whole-model check: d loss / d every parameter, through every layer and the
// reference re-parameterisation of the scales (so |α|, s_qk, s_uv, s_z included).
// base_scale: GPT's reference init (std 0.02) makes the q/k gradients ~1e-5 of
// the loss, where the finite difference's rounding (≈1e-10 absolute) alone is
// 1e-5 relative; a larger init exercises the same code with O(1) gradients.
template <class Model>
static void check_model_gradients(std::uint64_t seed, double base_scale) {
  ModelConfig mc;
  mc.base_scale = base_scale;
  mc.vocab_size = 11;
  mc.n_embd = 16;
  mc.n_head = 2;
  mc.n_layer = 2;
  const std::int64_t b = 2, t = 5;
  Model model(mc, b, t);
  model.init(seed);
  // Move the scales off their initial values so every term of their gradients is non-trivial.
  auto& store = model.params();
  std::mt19937_64 rng(seed + 1);
  std::uniform_real_distribution<double> u(0.7, 1.3);
  for (const ParamSpec& s : store.specs())
    if (s.role != ParamRole::matrix)
      for (std::size_t i = 0; i < s.numel; ++i) store.value(s.offset)[i] *= u(rng);
  std::vector<std::int64_t> idx(b * t), tgt(b * t);
  for (std::int64_t i = 0; i < b * t; ++i) {
    idx[i] = (i * 3 + 1) % mc.vocab_size;
    tgt[i] = (i * 7 + 2) % mc.vocab_size;
  }
  model.forward(idx.data(), tgt.data(), b, t);
  model.backward();
  const Vec analytic = store.grads();
  Vec& values = store.values();
  const Vec numeric = numeric_grad(values, [&] { return model.forward(idx.data(), tgt.data(), b, t); });
  for (const ParamSpec& s : store.specs()) {
    Vec a(analytic.begin() + s.offset, analytic.begin() + s.offset + s.numel);
    Vec n(numeric.begin() + s.offset, numeric.begin() + s.offset + s.numel);
    INFO("parameter " << s.name);
    CHECK(rel_err(a, n) < kGradTol);
  }
}

TEST_CASE("gradcheck: whole GPT model, every parameter", "[grad][model]") {
  check_model_gradients<GPT<double>>(41, 0.3);
}
TEST_CASE("gradcheck: whole nGPT model, every parameter", "[grad][model]") {
  check_model_gradients<NGPT<double>>(42, 0.0);  // 0: the scheme's default 1/√d
}
