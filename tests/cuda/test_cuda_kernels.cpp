// Every fused CUDA kernel and the three GEMMs of a linear layer against the
// float64 CPU path (backend/cpu/ops.hpp, nn/residual.hpp, optim/adamw.hpp,
// nn/constraint.hpp), in float32 and bf16 storage, on random inputs.
//
// Inputs are rounded to the storage type first, and the float64 reference runs
// on the rounded inputs, so the error measured is the kernel's own.
// Tolerances (‖gpu − ref‖₂/‖ref‖₂ per output):
//  * float32: 1e-5. Float32 math with tree reductions: each output carries a
//    few ulps (6e-8 each) grown by sqrt of a reduction length ≤ 1e3 — ~1e-6;
//    1e-5 leaves a 10× margin and is the golden check's tolerance.
//  * bf16: 2e-2. Every stored intermediate is rounded to 8 significant bits
//    (relative 2^-9 = 2e-3); a kernel chains up to ~5 such roundings and some
//    outputs are differences of nearby values (the retraction's tangent
//    projection), which magnifies them; 2e-2 is 10× the single rounding.
// Sizes are chosen so every branch runs: row lengths not a multiple of 32,
// sequence lengths not a multiple of the 32-row attention tiles, head
// dimensions 8, 32 and 128, and a partial 8-row last block.
#include <array>
#include <cstdio>
#include <random>

#include "harness.hpp"
#include "normlab/backend/cpu/backend.hpp"
#include "normlab/backend/cpu/ops.hpp"
#include "normlab/backend/cpu/residual.hpp"
#include "normlab/nn/params.hpp"
#include "normlab/nn/constraint.hpp"
#include "normlab/nn/residual.hpp"
#include "normlab/optim/adamw.hpp"

using namespace normlab;
using namespace normlab::cuda;
using cuda::test::DTensor;
using cuda::test::rounded;
using cuda::test::Tally;
using Vec = std::vector<double>;

namespace {

double tol(Dtype dt) { return dt == Dtype::f32 ? 1e-5 : 2e-2; }
std::string tag(Dtype dt, const std::string& what) { return std::string(dtype_name(dt)) + " " + what; }
Vec f32_vec(DeviceContext& be, const float* p, std::size_t n) {
  std::vector<float> h(n);
  be.download(h.data(), p, n * 4);
  return Vec(h.begin(), h.end());
}
Vec rounded32(Vec v) { return rounded(Dtype::f32, std::move(v)); }

void test_gemm(DeviceContext& be, Dtype dt, Tally& t, std::mt19937_64& rng) {
  for (auto [N, in, out] : {std::array<std::int64_t, 3>{37, 24, 40}, std::array<std::int64_t, 3>{64, 128, 96}}) {
    const Vec X = rounded(dt, test::random_vec(rng, N * in)), W = rounded(dt, test::random_vec(rng, out * in));
    const Vec dY = rounded(dt, test::random_vec(rng, N * out)), W0 = rounded32(test::random_vec(rng, out * in));
    DTensor x(be, dt, X), w(be, dt, W), dy(be, dt, dY), y(be, dt, N * out), dx(be, dt, N * in);
    DTensor dw(be, Dtype::f32, W0);
    be.linear_forward(dt, y.ptr(), x.ptr(), w.ptr(), N, in, out);
    be.linear_backward_x(dt, dx.ptr(), dy.ptr(), w.ptr(), N, in, out);
    be.linear_backward_w(dt, dw.f(), dy.ptr(), x.ptr(), N, in, out);
    Vec ry(N * out), rdx(N * in), rdw = W0;
    cpu::linear_forward(ry.data(), X.data(), W.data(), N, in, out);
    cpu::linear_backward(rdx.data(), rdw.data(), dY.data(), X.data(), W.data(), N, in, out);
    const std::string sz = " N=" + std::to_string(N) + " in=" + std::to_string(in) + " out=" + std::to_string(out);
    t.rel(tag(dt, "gemm Y = X W^T" + sz), y.get(), ry, tol(dt));
    t.rel(tag(dt, "gemm dX = dY W" + sz), dx.get(), rdx, tol(dt));
    t.rel(tag(dt, "gemm dW += dY^T X (f32 out)" + sz), dw.get(), rdw, dt == Dtype::f32 ? 1e-5 : 1e-5);
  }
}

void test_rmsnorm(DeviceContext& be, Dtype dt, Tally& t, std::mt19937_64& rng) {
  const std::int64_t N = 45, C = 80;
  const Vec X = rounded(dt, test::random_vec(rng, N * C, 1.5)), Wt = rounded32(test::random_vec(rng, C, 0.2, 1.0));
  const Vec dY = rounded(dt, test::random_vec(rng, N * C)), DX0 = rounded(dt, test::random_vec(rng, N * C));
  const Vec DW0 = rounded32(test::random_vec(rng, C));
  DTensor x(be, dt, X), w(be, Dtype::f32, Wt), y(be, dt, N * C), rstd(be, Dtype::f32, N), dy(be, dt, dY);
  DTensor dx(be, dt, DX0), dw(be, Dtype::f32, DW0);
  DTensor partial(be, Dtype::f32, colreduce_chunks(N) * C);
  k::rmsnorm_forward(dt, y.ptr(), rstd.f(), x.ptr(), w.f(), N, C, 1e-6f, be.stream());
  k::rmsnorm_backward(dt, dx.ptr(), dw.f(), dy.ptr(), x.ptr(), w.f(), rstd.f(), N, C, true, partial.f(), be.stream());
  Vec ry(N * C), rr(N), rdx(N * C), rdw = DW0;
  cpu::rmsnorm_forward(ry.data(), rr.data(), X.data(), Wt.data(), N, C, 1e-6);
  cpu::rmsnorm_backward(rdx.data(), rdw.data(), dY.data(), X.data(), Wt.data(), rr.data(), N, C);
  for (std::size_t i = 0; i < rdx.size(); ++i) rdx[i] += DX0[i];  // accumulate = true
  t.rel(tag(dt, "rmsnorm forward y"), y.get(), ry, tol(dt));
  t.rel(tag(dt, "rmsnorm forward rstd"), rstd.get(), rr, tol(dt));
  t.rel(tag(dt, "rmsnorm backward dx (accumulated)"), dx.get(), rdx, tol(dt));
  t.rel(tag(dt, "rmsnorm backward dw"), dw.get(), rdw, tol(dt));
}

template <class Rule>
void test_residual(DeviceContext& be, Dtype dt, ResidualKind kind, const char* name, Tally& t, std::mt19937_64& rng) {
  const std::int64_t N = 43, C = 72;
  using Ops = cpu::ResidualKernels<Rule::math, double>;
  const Vec Hh = rounded(dt, test::random_vec(rng, N * C, 0.3)), Ff = rounded(dt, test::random_vec(rng, N * C, 0.3));
  Vec alpha = test::random_vec(rng, C, 0.05, 0.2);
  for (double& a : alpha) a = float(std::abs(a));
  const Vec dOut = rounded(dt, test::random_vec(rng, N * C));
  DTensor h(be, dt, Hh), f(be, dt, Ff), al(be, Dtype::f32, alpha), out(be, dt, N * C);
  DTensor nh(be, Dtype::f32, N), nf(be, Dtype::f32, N), nz(be, Dtype::f32, N), rowdot(be, Dtype::f32, N);
  DTensor th(be, Dtype::f32, N), clamped(be, Dtype::f32, N);
  // dα accumulates: it starts at zero, as the model's residual site leaves it.
  DTensor g(be, dt, dOut), df(be, dt, N * C), dal(be, Dtype::f32, Vec(std::size_t(C), 0.0));
  DTensor partial(be, Dtype::f32, colreduce_chunks(N) * C);
  const k::ResidualCache cache{nh.f(), nf.f(), nz.f(), th.f(), clamped.f()};
  k::residual_forward(dt, kind, out.ptr(), h.ptr(), f.ptr(), al.f(), cache, N, C, be.stream());
  // Backward with dh aliasing dout, as the model calls it.
  k::residual_backward(dt, kind, g.ptr(), df.ptr(), dal.f(), g.ptr(), out.ptr(), h.ptr(), f.ptr(), al.f(), cache,
                       rowdot.f(), N, C, partial.f(), be.stream());
  Arena<double> counting;
  typename Ops::Cache rc;
  rc.bind(counting, N, C);
  Arena<double> arena(counting.used());
  rc.bind(arena, N, C);
  Vec rout(N * C), rdh(N * C), rdf(N * C), rdal(C, 0.0);
  Ops::forward(rc, rout.data(), Hh.data(), Ff.data(), alpha.data(), N, C);
  Ops::backward(rdh.data(), rdf.data(), rdal.data(), dOut.data(), rc, rout.data(), Hh.data(), Ff.data(), alpha.data(),
                N, C);
  t.rel(tag(dt, std::string(name) + " forward"), out.get(), rout, tol(dt));
  if (kind == ResidualKind::add) return;
  t.rel(tag(dt, std::string(name) + " backward dh (in place over dout)"), g.get(), rdh, tol(dt));
  t.rel(tag(dt, std::string(name) + " backward df"), df.get(), rdf, tol(dt));
  t.rel(tag(dt, std::string(name) + " backward dalpha"), dal.get(), rdal, tol(dt));
}

void test_qk(DeviceContext& be, Dtype dt, Tally& t, std::mt19937_64& rng) {
  for (auto [B, T, H, D] : {std::array<std::int64_t, 4>{2, 37, 4, 8}, std::array<std::int64_t, 4>{1, 20, 2, 128}}) {
    const std::int64_t N = B * T, C = H * D;
    std::vector<float> cf(T * D / 2), sf(cf.size());
    cpu::rope_table(cf.data(), sf.data(), T, D);
    const Vec cosd(cf.begin(), cf.end()), sind(sf.begin(), sf.end());
    const Vec Q = rounded(dt, test::random_vec(rng, N * C)), Sq = rounded32(test::random_vec(rng, C, 0.3, 1.0));
    const Vec dQs = rounded(dt, test::random_vec(rng, N * C)), dKs = rounded(dt, test::random_vec(rng, N * C));
    const Vec K = rounded(dt, test::random_vec(rng, N * C)), G0 = rounded32(test::random_vec(rng, C));
    DTensor cosv(be, Dtype::f32, cosd), sinv(be, Dtype::f32, sind), s(be, Dtype::f32, Sq);
    DTensor q(be, dt, Q), qh(be, dt, N * C), qn(be, Dtype::f32, N * H), qs(be, dt, N * C);
    DTensor kk(be, dt, K), kh(be, dt, N * C), kn(be, Dtype::f32, N * H), ks(be, dt, N * C);
    DTensor dq(be, dt, dQs), dk(be, dt, dKs), ds(be, Dtype::f32, G0);
    DTensor partial(be, Dtype::f32, colreduce_chunks(N) * C);
    k::qk_forward(dt, QkKind::unit_scaled, q.ptr(), qh.ptr(), qn.f(), qs.ptr(), s.f(), cosv.f(), sinv.f(), B, T, H, D,
                  be.stream());
    k::qk_forward(dt, QkKind::unit_scaled, kk.ptr(), kh.ptr(), kn.f(), ks.ptr(), s.f(), cosv.f(), sinv.f(), B, T, H,
                  D, be.stream());
    k::qk_scale_grad(dt, ds.f(), dq.ptr(), qh.ptr(), dk.ptr(), kh.ptr(), 1.7f, N, C, partial.f(), be.stream());
    k::qk_backward(dt, QkKind::unit_scaled, dq.ptr(), qh.ptr(), qn.f(), s.f(), cosv.f(), sinv.f(), B, T, H, D,
                   be.stream());
    // Reference: the CPU model's sequence (transformer.hpp).
    Vec rq = Q, rqh(N * C), rqn(N * H), rqs(N * C), rk = K, rkh(N * C), rkn(N * H);
    cpu::rope_apply(rq.data(), cosd.data(), sind.data(), B, T, H, D, false);
    cpu::rope_apply(rk.data(), cosd.data(), sind.data(), B, T, H, D, false);
    cpu::l2norm_rows_forward(rqh.data(), rqn.data(), rq.data(), N * H, D);
    cpu::l2norm_rows_forward(rkh.data(), rkn.data(), rk.data(), N * H, D);
    cpu::scale_columns(rqs.data(), rqh.data(), Sq.data(), N, C);
    Vec rds = G0, rdq = dQs;
    cpu::column_dot_accumulate(rds.data(), dQs.data(), rqh.data(), N, C, 1.7);
    cpu::column_dot_accumulate(rds.data(), dKs.data(), rkh.data(), N, C, 1.7);
    cpu::scale_columns(rdq.data(), rdq.data(), Sq.data(), N, C);
    cpu::l2norm_rows_backward(rdq.data(), rdq.data(), rqh.data(), rqn.data(), N * H, D);
    cpu::rope_apply(rdq.data(), cosd.data(), sind.data(), B, T, H, D, true);
    const std::string sz = " D=" + std::to_string(D);
    t.rel(tag(dt, "rope q (in place)" + sz), q.get(), rq, tol(dt));
    t.rel(tag(dt, "qk-norm qh" + sz), qh.get(), rqh, tol(dt));
    t.rel(tag(dt, "qk-norm |q|" + sz), qn.get(), rqn, tol(dt));
    t.rel(tag(dt, "s_qk * qh" + sz), qs.get(), rqs, tol(dt));
    t.rel(tag(dt, "s_qk gradient" + sz), ds.get(), rds, tol(dt));
    t.rel(tag(dt, "qk backward dq (through s, N, RoPE)" + sz), dq.get(), rdq, tol(dt));
    // RoPE alone, forward then backward, is the identity.
    DTensor r(be, dt, Q);
    k::qk_forward(dt, QkKind::none, r.ptr(), nullptr, nullptr, nullptr, nullptr, cosv.f(), sinv.f(), B, T, H, D,
                  be.stream());
    k::qk_backward(dt, QkKind::none, r.ptr(), nullptr, nullptr, nullptr, cosv.f(), sinv.f(), B, T, H, D, be.stream());
    t.rel(tag(dt, "rope inverse(rope(q)) = q" + sz), r.get(), Q, dt == Dtype::f32 ? 1e-6 : 1e-2);
  }
}

void test_attention(DeviceContext& be, Dtype dt, Tally& t, std::mt19937_64& rng) {
  // The last two with a sliding window (W < T, spanning several 32-key tiles).
  for (auto [B, T, H, D, sc, W] :
       {std::array<double, 6>{2, 37, 3, 8, 0, 0}, std::array<double, 6>{1, 70, 2, 64, 1, 0},
        std::array<double, 6>{1, 33, 1, 128, 0, 0}, std::array<double, 6>{2, 90, 2, 16, 0, 20},
        std::array<double, 6>{1, 100, 1, 32, 1, 33}}) {
    const std::int64_t b = std::int64_t(B), tt = std::int64_t(T), h = std::int64_t(H), d = std::int64_t(D);
    const std::int64_t w = std::int64_t(W);
    const std::int64_t N = b * tt, C = h * d;
    const double scale = sc ? std::sqrt(D) : 1.0 / std::sqrt(D);
    // nGPT's √dk scale with unit-ish q, k; GPT's 1/√dk with N(0,1) entries.
    const double amp = sc ? 1.0 / std::sqrt(D) * 1.5 : 1.0;
    const Vec Q = rounded(dt, test::random_vec(rng, N * C, amp)), K = rounded(dt, test::random_vec(rng, N * C, amp));
    const Vec Vv = rounded(dt, test::random_vec(rng, N * C)), dY = rounded(dt, test::random_vec(rng, N * C));
    DTensor q(be, dt, Q), k_(be, dt, K), v(be, dt, Vv), y(be, dt, N * C), lse(be, Dtype::f32, b * h * tt);
    DTensor dy(be, dt, dY), dq(be, dt, N * C), dk(be, dt, N * C), dv(be, dt, N * C), dsum(be, Dtype::f32, b * h * tt);
    k::attention_forward(dt, y.ptr(), lse.f(), q.ptr(), k_.ptr(), v.ptr(), b, tt, h, d, float(scale), w, be.stream());
    k::attention_backward(dt, dq.ptr(), dk.ptr(), dv.ptr(), dsum.f(), dy.ptr(), y.ptr(), q.ptr(), k_.ptr(), v.ptr(),
                          lse.f(), b, tt, h, d, float(scale), w, be.stream());
    Vec ry(N * C), rlse(b * h * tt), rdq(N * C), rdk(N * C), rdv(N * C);
    cpu::attention_forward(ry.data(), rlse.data(), Q.data(), K.data(), Vv.data(), b, tt, h, d, scale, w);
    cpu::attention_backward(rdq.data(), rdk.data(), rdv.data(), dY.data(), ry.data(), rlse.data(), Q.data(), K.data(),
                            Vv.data(), b, tt, h, d, scale, w);
    const std::string sz = " T=" + std::to_string(tt) + " D=" + std::to_string(d) + (w ? " W=" + std::to_string(w) : "");
    t.rel(tag(dt, "attention forward y" + sz), y.get(), ry, tol(dt));
    t.rel(tag(dt, "attention log-sum-exp" + sz), lse.get(), rlse, tol(dt));
    t.rel(tag(dt, "attention backward dq" + sz), dq.get(), rdq, tol(dt));
    t.rel(tag(dt, "attention backward dk" + sz), dk.get(), rdk, tol(dt));
    t.rel(tag(dt, "attention backward dv" + sz), dv.get(), rdv, tol(dt));
  }
}

void test_swiglu(DeviceContext& be, Dtype dt, Tally& t, std::mt19937_64& rng) {
  const std::int64_t N = 29, F = 48;
  const Vec UV = rounded(dt, test::random_vec(rng, N * 2 * F, 1.5)), S = rounded32(test::random_vec(rng, 2 * F, 0.3, 1.0));
  const Vec dA = rounded(dt, test::random_vec(rng, N * F)), G0 = rounded32(test::random_vec(rng, 2 * F));
  for (bool scaled : {false, true}) {
    DTensor uv(be, dt, UV), s(be, Dtype::f32, S), act(be, dt, N * F), da(be, dt, dA), duv(be, dt, N * 2 * F);
    DTensor ds(be, Dtype::f32, G0), partial(be, Dtype::f32, colreduce_chunks(N) * 2 * F);
    const float* sp = scaled ? s.f() : nullptr;
    k::swiglu_forward(dt, act.ptr(), uv.ptr(), sp, N, F, be.stream());
    k::swiglu_backward(dt, duv.ptr(), da.ptr(), uv.ptr(), sp, N, F, be.stream());
    if (scaled) k::scale_grad_inplace(dt, ds.f(), duv.ptr(), uv.ptr(), s.f(), 2.5f, N, 2 * F, partial.f(), be.stream());
    Vec uvs = UV, ract(N * F), rduv(N * 2 * F), rds = G0;
    if (scaled) cpu::scale_columns(uvs.data(), UV.data(), S.data(), N, 2 * F);
    cpu::swiglu_forward(ract.data(), uvs.data(), N, F);
    cpu::swiglu_backward(rduv.data(), dA.data(), uvs.data(), N, F);
    if (scaled) {
      cpu::column_dot_accumulate(rds.data(), rduv.data(), UV.data(), N, 2 * F, 2.5);
      cpu::scale_columns(rduv.data(), rduv.data(), S.data(), N, 2 * F);
      t.rel(tag(dt, "scaled swiglu s_uv gradient"), ds.get(), rds, tol(dt));
    }
    const std::string nm = scaled ? "scaled swiglu" : "swiglu";
    t.rel(tag(dt, nm + " forward"), act.get(), ract, tol(dt));
    t.rel(tag(dt, nm + " backward duv"), duv.get(), rduv, tol(dt));
  }
}

void test_cross_entropy(DeviceContext& be, Dtype dt, Tally& t, std::mt19937_64& rng) {
  for (std::int64_t V : {67, 1100}) {
    const std::int64_t N = 19;
    const Vec raw = rounded(dt, test::random_vec(rng, N * V, 2.0)), sz = rounded32(test::random_vec(rng, V, 0.2, 1.0));
    std::vector<std::int32_t> tgt(N);
    std::vector<std::int64_t> tgt64(N);
    for (std::int64_t i = 0; i < N; ++i) tgt64[i] = tgt[i] = std::int32_t(rng() % std::uint64_t(V));
    DeviceBuffer dtgt(N * 4);
    be.upload(dtgt.get(), tgt.data(), N * 4);
    for (bool scaled : {false, true}) {
      DTensor x(be, dt, raw), s(be, Dtype::f32, sz), dl(be, dt, N * V), loss(be, Dtype::f32, N);
      k::cross_entropy(dt, dl.ptr(), loss.f(), x.ptr(), scaled ? s.f() : nullptr, dtgt.as<std::int32_t>(), N, V,
                       be.stream());
      Vec logits = raw;
      if (scaled) {
        cpu::scale_columns(logits.data(), raw.data(), sz.data(), N, V);
        logits = rounded(dt, logits);  // the kernel rounds raw ⊙ s_z to storage, as a stored tensor would be
      }
      Vec rdl(N * V);
      const double rloss = cpu::cross_entropy(rdl.data(), logits.data(), tgt64.data(), N, V);
      const Vec gl = loss.get();
      double mean = 0;
      for (double x : gl) mean += x;
      mean /= double(N);
      const std::string nm = std::string(scaled ? "cross-entropy with s_z" : "cross-entropy") + " V=" + std::to_string(V);
      t.rel(tag(dt, nm + " mean loss"), {mean}, {rloss}, dt == Dtype::f32 ? 1e-5 : 1e-3);
      t.rel(tag(dt, nm + " dlogits"), dl.get(), rdl, tol(dt));
    }
  }
}

void test_embedding(DeviceContext& be, Dtype dt, Tally& t, std::mt19937_64& rng) {
  const std::int64_t N = 50, C = 40, V = 13;
  const Vec W = rounded(dt, test::random_vec(rng, V * C)), dO = rounded(dt, test::random_vec(rng, N * C));
  std::vector<std::int64_t> idx(N);
  for (auto& i : idx) i = std::int64_t(rng() % 7);  // repeated tokens, some rows never used
  // positions sorted by token (what the model stages on the host)
  std::vector<std::int32_t> uniq, starts, order;
  for (std::int64_t v = 0; v < V; ++v) {
    const std::size_t before = order.size();
    for (std::int64_t i = 0; i < N; ++i)
      if (idx[i] == v) order.push_back(std::int32_t(i));
    if (order.size() > before) {
      uniq.push_back(std::int32_t(v));
      starts.push_back(std::int32_t(before));
    }
  }
  starts.push_back(std::int32_t(N));
  std::vector<std::int32_t> idx32(idx.begin(), idx.end());
  auto up = [&](const std::vector<std::int32_t>& h) {
    DeviceBuffer b(h.size() * 4);
    be.upload(b.get(), h.data(), h.size() * 4);
    return b;
  };
  DeviceBuffer di = up(idx32), du = up(uniq), ds = up(starts), dord = up(order);
  const Vec G0 = rounded32(test::random_vec(rng, V * C));
  DTensor w(be, dt, W), out(be, dt, N * C), dout(be, dt, dO), g(be, Dtype::f32, G0);
  k::embedding_forward(dt, out.ptr(), di.as<std::int32_t>(), w.ptr(), N, C, be.stream());
  k::embedding_backward(dt, g.f(), du.as<std::int32_t>(), ds.as<std::int32_t>(), dord.as<std::int32_t>(),
                        std::int64_t(uniq.size()), dout.ptr(), C, be.stream());
  Vec rout(N * C), rg = G0;
  cpu::embedding_forward(rout.data(), idx.data(), W.data(), N, C);
  cpu::embedding_backward(rg.data(), idx.data(), dO.data(), N, C);
  t.rel(tag(dt, "embedding forward"), out.get(), rout, 0.0);
  t.rel(tag(dt, "embedding backward (accumulated)"), g.get(), rg, 1e-6);
}

void test_adamw(DeviceContext& be, Dtype dt, Tally& t, std::mt19937_64& rng) {
  struct Case {
    NormAxis axis;
    WeightConstraint w;
    std::int64_t R, L;
    double wd;
  };
  for (const Case& c : {Case{NormAxis::none, WeightConstraint::none, 1, 300, 0.0},
                        Case{NormAxis::none, WeightConstraint::none, 30, 20, 0.1},
                        Case{NormAxis::rows, WeightConstraint::unit_norm, 33, 70, 0.0},
                        Case{NormAxis::cols, WeightConstraint::unit_norm, 70, 33, 0.0},
                        Case{NormAxis::rows, WeightConstraint::bounded, 20, 40, 0.0},
                        Case{NormAxis::cols, WeightConstraint::bounded, 40, 20, 0.0}}) {
    ParamStore<double> store;
    const Shape shape = c.R == 1 ? Shape{c.L} : Shape{c.R, c.L};
    store.add("w", shape, c.R == 1 ? ParamRole::scale : ParamRole::matrix, c.axis);
    store.finalize();
    const std::size_t n = store.size();
    // bounded: mixed norms around 1, so both branches (shrink, keep) run
    const Vec P0 = rounded32(test::random_vec(rng, n, c.w == WeightConstraint::bounded ? 0.15 : 0.1));
    const Vec Gr = rounded32(test::random_vec(rng, n, 0.01));
    std::copy(P0.begin(), P0.end(), store.values().begin());
    std::copy(Gr.begin(), Gr.end(), store.grads().begin());
    AdamWConfig oc;
    oc.weight_decay = c.wd;
    AdamW<double> opt(store, oc);
    const double lr = 0.01, coef = 0.7;
    for (double& g : store.grads()) g *= coef;
    opt.step(store, lr);
    apply_weight_constraint(store, c.w);

    DTensor p(be, Dtype::f32, P0), m(be, Dtype::f32, Vec(n, 0.0)), v(be, Dtype::f32, Vec(n, 0.0));
    DTensor g(be, Dtype::f32, Gr), copy(be, dt, n);
    k::AdamHyper hp;
    hp.decay = float(1.0 - lr * c.wd);
    hp.decayed = c.R > 1 && c.wd != 0.0;
    hp.step_size = float(lr / (1.0 - oc.beta1));
    hp.beta1 = float(oc.beta1);
    hp.beta2 = float(oc.beta2);
    hp.eps = float(oc.eps);
    hp.sqrt_bc2 = float(std::sqrt(1.0 - oc.beta2));
    hp.grad_scale = float(coef);
    const ConstraintAxis ax = c.axis == NormAxis::rows ? ConstraintAxis::rows
                              : c.axis == NormAxis::cols ? ConstraintAxis::cols : ConstraintAxis::none;
    const ConstraintKind kind = c.w == WeightConstraint::unit_norm ? ConstraintKind::unit_norm
                                : c.w == WeightConstraint::bounded ? ConstraintKind::bounded : ConstraintKind::none;
    k::adamw_constrain(p.f(), m.f(), v.f(), g.f(), dt == Dtype::f32 ? nullptr : copy.ptr(), dt, c.R, c.L, ax, kind, hp,
                       be.stream());
    const char* axn = c.axis == NormAxis::rows ? "rows" : c.axis == NormAxis::cols ? "cols" : "none";
    const char* wn = c.w == WeightConstraint::unit_norm ? "unit" : c.w == WeightConstraint::bounded ? "bounded" : "none";
    const std::string nm = std::string("adamw+constraint ") + axn + "/" + wn + " " + std::to_string(c.R) + "x" +
                           std::to_string(c.L);
    // Float32 master weights in both storage modes: 1e-5 after one step.
    t.rel(tag(dt, nm + " master"), p.get(), test::plain(store.values()), 1e-5);
    t.rel(tag(dt, nm + " exp_avg"), m.get(), test::plain(opt.exp_avg()), 1e-5);
    t.rel(tag(dt, nm + " exp_avg_sq"), v.get(), test::plain(opt.exp_avg_sq()), 1e-5);
    if (dt != Dtype::f32) t.rel(tag(dt, nm + " bf16 copy"), copy.get(), test::plain(store.values()), 4e-3);
  }
}

void test_sum_squares(DeviceContext& be, Tally& t, std::mt19937_64& rng) {
  for (std::int64_t n : {1, 1000, 300001}) {
    const Vec x = rounded32(test::random_vec(rng, std::size_t(n)));
    DTensor dx(be, Dtype::f32, x);
    DeviceBuffer out(8), partial(k::kSumSqBlocks * 8);
    k::sum_squares(out.as<double>(), partial.as<double>(), dx.f(), n, be.stream());
    double got = 0, ref = 0;
    be.download(&got, out.get(), 8);
    for (double v : x) ref += v * v;
    t.rel("sum of squares n=" + std::to_string(n), {got}, {ref}, 1e-12);
  }
}

}  // namespace

int main() {
  return cuda::test::run_test("test_cuda_kernels", [] {
    DeviceContext be;
    Tally t;
    t.test = "test_cuda_kernels";
    std::mt19937_64 rng(20261130);
    for (Dtype dt : {Dtype::f32, Dtype::bf16}) {
      test_gemm(be, dt, t, rng);
      test_rmsnorm(be, dt, t, rng);
      test_residual<residual_add>(be, dt, ResidualKind::add, "residual add", t, rng);
      test_residual<normlab::lerp>(be, dt, ResidualKind::lerp, "lerp", t, rng);
      test_residual<lerp_nu>(be, dt, ResidualKind::lerp_nu, "lerp_nu", t, rng);
      test_residual<lerp_retract>(be, dt, ResidualKind::lerp_retract, "lerp_retract", t, rng);
      test_residual<slerp>(be, dt, ResidualKind::slerp, "slerp", t, rng);
      test_qk(be, dt, t, rng);
      test_attention(be, dt, t, rng);
      test_swiglu(be, dt, t, rng);
      test_cross_entropy(be, dt, t, rng);
      test_embedding(be, dt, t, rng);
      test_adamw(be, dt, t, rng);
    }
    test_sum_squares(be, t, rng);
    return t.finish("test_cuda_kernels");
  });
}
