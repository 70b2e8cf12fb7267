// AdamW, Lion, Muon, clipping and schedules against values computed independently here.
#include <catch2/catch.hpp>

#include <Eigen/Dense>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <omp.h>
#include <random>
#include <vector>

#include "normlab/normlab.hpp"

using namespace normlab;

namespace {
ParamStore<double> two_tensor_store() {
  ParamStore<double> s;
  s.add("w", {2, 2}, ParamRole::matrix);
  s.add("g", {3}, ParamRole::gain);
  s.finalize();
  const double init[] = {0.5, -1.0, 2.0, 0.25, 1.0, -0.5, 3.0};
  std::copy(std::begin(init), std::end(init), s.values().begin());
  return s;
}
}  // namespace

TEST_CASE("optim: AdamW matches the PyTorch update formula over several steps", "[optim]") {
  ParamStore<double> s = two_tensor_store();
  AdamWConfig cfg;
  cfg.beta1 = 0.8;
  cfg.beta2 = 0.9;
  cfg.eps = 1e-3;
  cfg.weight_decay = 0.1;
  AdamW<double> opt(s, cfg);
  const std::size_t n = s.size();
  std::vector<double> p(s.values().begin(), s.values().end());
  std::vector<double> m(n, 0.0), v(n, 0.0);
  const double lr = 0.05;
  for (int t = 1; t <= 4; ++t) {
    for (std::size_t i = 0; i < p.size(); ++i) s.grads()[i] = std::sin(double(i + 1) * t) * (i + 1);
    opt.step(s, lr);
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double g = std::sin(double(i + 1) * t) * (i + 1);
      if (i < 4) p[i] *= 1 - lr * 0.1;  // only the 2-D tensor is decayed
      m[i] = 0.8 * m[i] + 0.2 * g;
      v[i] = 0.9 * v[i] + 0.1 * g * g;
      const double mh = m[i] / (1 - std::pow(0.8, t));
      const double denom = std::sqrt(v[i]) / std::sqrt(1 - std::pow(0.9, t)) + 1e-3;
      p[i] -= lr * mh / denom;
    }
    for (std::size_t i = 0; i < p.size(); ++i) CHECK(s.values()[i] == Approx(p[i]).epsilon(1e-14));
  }
  CHECK(opt.steps_taken() == 4);
}

TEST_CASE("optim: parameter groups have their own lr multiplier, decay and epsilon", "[optim]") {
  ParamStore<double> s = two_tensor_store();
  AdamW<double> opt(s, {});
  opt.group(ParamRole::gain).lr_mult = 0.0;  // frozen group
  opt.group(ParamRole::matrix).eps = 0.1;
  const auto before = s.values();
  std::fill(s.grads().begin(), s.grads().end(), 1.0);
  opt.step(s, 0.01);
  for (std::size_t i = 4; i < 7; ++i) CHECK(s.values()[i] == before[i]);
  // first step: m̂ = g = 1, v̂ = 1 → update lr·1/(1 + ε) with ε = 0.1
  for (std::size_t i = 0; i < 4; ++i) CHECK(s.values()[i] == Approx(before[i] - 0.01 / 1.1).epsilon(1e-14));
}

TEST_CASE("optim: global-norm clipping as torch.nn.utils.clip_grad_norm_", "[optim]") {
  ParamStore<double> s = two_tensor_store();
  const double g[] = {3, 0, 0, 0, 0, 4, 0};  // norm 5
  std::copy(std::begin(g), std::end(g), s.grads().begin());
  CHECK(clip_grad_norm(s, 10.0) == Approx(5.0));
  CHECK(s.grads()[5] == 4.0);  // under the threshold: untouched
  CHECK(clip_grad_norm(s, 1.0) == Approx(5.0));
  CHECK(s.grads()[0] == Approx(3.0 / (5.0 + 1e-6)).epsilon(1e-15));
  CHECK(global_grad_norm(s) == Approx(5.0 / (5.0 + 1e-6)).epsilon(1e-15));
}

TEST_CASE("optim: learning-rate schedules", "[optim]") {
  LrSchedule c;
  c.lr = 0.1;
  CHECK(c.at(0) == 0.1);
  CHECK(c.at(1000) == 0.1);
  LrSchedule w;
  w.kind = LrSchedule::Kind::warmup_cosine;
  w.lr = 1.0;
  w.min_lr = 0.1;
  w.warmup = 10;
  w.total_steps = 110;
  CHECK(w.at(0) == Approx(0.1));
  CHECK(w.at(9) == Approx(1.0));
  CHECK(w.at(10) == Approx(1.0));
  CHECK(w.at(60) == Approx(0.55));  // half-way down the cosine
  CHECK(w.at(110) == Approx(0.1));
  CHECK(w.at(500) == Approx(0.1));
  for (std::int64_t t = 10; t < 110; ++t) CHECK(w.at(t + 1) <= w.at(t));
  CHECK_THROWS_WITH(LrSchedule::parse("linear"), Catch::Contains("linear"));
}

// ---------------------------------------------------------------- the optimizer contract and built-ins

static_assert(Optimizer<AdamW<double>> && Optimizer<AdamW<float>>);
static_assert(Optimizer<Lion<double>> && Optimizer<Muon<double>>);
static_assert(Optimizer<AnyOptimizer<double, cpu_backend>> == false, "AnyOptimizer names itself at run time");

TEST_CASE("optim: Lion matches the sign-of-interpolated-momentum formula over several steps", "[optim]") {
  ParamStore<double> s = two_tensor_store();
  LionConfig cfg;
  cfg.beta1 = 0.8;
  cfg.beta2 = 0.95;
  cfg.weight_decay = 0.5;
  Lion<double> opt(s, cfg);
  const std::size_t n = s.size();
  std::vector<double> p(s.values().begin(), s.values().end()), m(n, 0.0);
  const double lr = 0.01;
  for (int t = 1; t <= 5; ++t) {
    // Gradients whose interpolation is exactly 0 for one entry at t = 1 (sign(0) = 0).
    for (std::size_t i = 0; i < n; ++i) s.grads()[i] = (t == 1 && i == 2) ? 0.0 : std::cos(double(i + 2) * t) * (i + 1);
    opt.step(s, lr);
    for (std::size_t i = 0; i < n; ++i) {
      const double g = (t == 1 && i == 2) ? 0.0 : std::cos(double(i + 2) * t) * (i + 1);
      const double c = 0.8 * m[i] + 0.2 * g;
      const double sgn = c > 0 ? 1.0 : (c < 0 ? -1.0 : 0.0);
      if (i < 4) p[i] *= 1 - lr * 0.5;  // only the matrix group decays
      p[i] -= lr * sgn;
      m[i] = 0.95 * m[i] + 0.05 * g;
    }
    // The same expressions in float64; the compiler may contract a product and a sum
    // into one FMA in one place and not the other, so equal to 1e-14, not bit for bit.
    for (std::size_t i = 0; i < n; ++i) CHECK(s.values()[i] == Approx(p[i]).epsilon(1e-14));
  }
  CHECK(opt.steps_taken() == 5);
  CHECK(opt.state().size() == 1);
  CHECK(opt.state()[0].name == "exp_avg");
}

namespace {
using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The public reference's orthogonalization (transpose a tall matrix, iterate, transpose back), in float64.
Mat reference_newton_schulz(Mat G, int steps) {
  const double a = 3.4445, b = -4.7750, c = 2.0315;
  const bool tall = G.rows() > G.cols();
  Mat X = tall ? Mat(G.transpose()) : G;
  X /= (X.norm() + 1e-7);
  for (int i = 0; i < steps; ++i) {
    const Mat A = X * X.transpose();
    const Mat B = b * A + c * A * A;
    X = a * X + B * X;
  }
  return tall ? Mat(X.transpose()) : X;
}

// A matrix with a known spectrum: Q₁ diag(σ) Q₂ᵀ, Q orthogonal from the QR of a
// random matrix, σ spread over [0.2, 1].
Mat with_spectrum(std::int64_t r, std::int64_t c, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd;
  auto random_orthogonal = [&](std::int64_t n) {
    Mat a(n, n);
    for (std::int64_t i = 0; i < n * n; ++i) a.data()[i] = nd(rng);
    return Mat(Eigen::HouseholderQR<Mat>(a).householderQ());
  };
  const std::int64_t k = std::min(r, c);
  Mat sigma = Mat::Zero(r, c);
  for (std::int64_t i = 0; i < k; ++i) sigma(i, i) = 0.2 + 0.8 * double(i) / double(std::max<std::int64_t>(1, k - 1));
  return random_orthogonal(r) * sigma * random_orthogonal(c).transpose();
}

// A store as a model's: a hidden matrix (wide), a hidden matrix (tall), an embedding, a gain.
ParamStore<double> muon_store() {
  ParamStore<double> s;
  s.add("wide", {6, 10}, ParamRole::matrix);
  s.add("tall", {12, 5}, ParamRole::matrix);
  const std::size_t emb = s.add("embedding", {7, 4}, ParamRole::matrix);
  s.mark_vocabulary(emb);
  s.add("gain", {4}, ParamRole::gain);
  s.finalize();
  for (std::size_t i = 0; i < s.size(); ++i) s.values()[i] = std::cos(0.37 * double(i));
  return s;
}
}  // namespace

TEST_CASE("optim: Muon's Newton-Schulz leaves every singular value in the iteration's band", "[optim]") {
  // With X = G/||G||_F every singular value starts in (0, 1]; the quintic maps any
  // that starts at or above 0.02 into [0.6818, 1.2024] within 5 steps (iterating
  // the scalar map x -> ax + bx^3 + cx^5 from a grid over [0.02, 1]). The matrices
  // here have singular values spread over [0.2, 1], so normalized ones above 0.02 (checked).
  for (auto [r, c] : {std::pair<std::int64_t, std::int64_t>{6, 10}, {12, 5}, {8, 8}}) {
    ParamStore<double> s;
    s.add("w", {r, c}, ParamRole::matrix);
    s.finalize();
    Muon<double> opt(s, MuonConfig{});
    Mat G = with_spectrum(r, c, std::uint64_t(r * 100 + c));
    const Eigen::JacobiSVD<Mat> before(G / G.norm());
    REQUIRE(before.singularValues().minCoeff() > 0.02);
    Mat X = G;
    opt.orthogonalize(X.data(), r, c);
    const Eigen::JacobiSVD<Mat> after(X);
    INFO(r << "x" << c << ": singular values " << after.singularValues().transpose());
    CHECK(after.singularValues().minCoeff() >= 0.68);
    CHECK(after.singularValues().maxCoeff() <= 1.21);
    // The reference's transpose-iterate-transpose gives the same matrix (float64 rounding).
    CHECK((X - reference_newton_schulz(G, 5)).cwiseAbs().maxCoeff() < 1e-12);
  }
}

// Muon's symmetric products: half computed, mirrored. The same dot products in the same
// order as the full product's, so the upper triangle has its bits at alpha = 1 (as bits, both
// orientations, one thread and the team, panels that divide n and one that does not,
// and shapes where the full product runs). With another alpha and K past one 512-deep slab, a kernel's epilogue
// may fuse alpha·sum + C in one tile and not in another: one rounding each, 2⁻²⁴ of
// the magnitudes summed.
TEST_CASE("optim: gram has the full product's bits and is exactly symmetric", "[optim]") {
  struct Shape {
    std::int64_t n, k;
  };
  const int team = cpu::max_threads();
  for (const int threads : {1, team})
  for (const Shape sh : {Shape{256, 1024}, Shape{200, 400}, Shape{128, 300}, Shape{256, 256}, Shape{130, 40}})
    for (const bool transposed : {false, true}) {
      omp_set_num_threads(threads);
      std::mt19937_64 rng(std::uint64_t(sh.n * 7 + sh.k));
      std::normal_distribution<float> g(0.0f, 1.0f);
      std::vector<float> X(std::size_t(sh.n * sh.k)), half(std::size_t(sh.n * sh.n), -1.0f), full(half.size(), -2.0f);
      for (float& x : X) x = g(rng);
      auto both = [&](float alpha) {
        cpu::gram(half.data(), X.data(), sh.n, sh.k, transposed, alpha);
        if (transposed)
          cpu::gemm<float, Eigen::ColMajor, Eigen::RowMajor>(sh.n, sh.n, sh.k, X.data(), sh.n, X.data(), sh.n,
                                                             full.data(), sh.n, false, alpha);
        else
          cpu::gemm<float, Eigen::RowMajor, Eigen::ColMajor>(sh.n, sh.n, sh.k, X.data(), sh.k, X.data(), sh.k,
                                                             full.data(), sh.n, false, alpha);
      };
      INFO("n " << sh.n << ", k " << sh.k << (transposed ? ", XtX" : ", XXt") << ", " << threads << " threads");
      // The magnitudes the roundings scale with: 0.75·Σ|x_il·x_jl| (the Gram matrix of |X|).
      std::vector<float> absX(X.size()), mag(half.size());
      for (std::size_t i = 0; i < X.size(); ++i) absX[i] = std::abs(X[i]);
      cpu::gram(mag.data(), absX.data(), sh.n, sh.k, transposed, 0.75f);
      both(0.75f);
      // The upper triangle, (i, j) with i ≤ j: the lower one is its mirror (checked below).
      auto upper = [&](auto&& f) {
        for (std::int64_t i = 0; i < sh.n; ++i)
          for (std::int64_t j = i; j < sh.n; ++j) f(std::size_t(i * sh.n + j));
      };
      double worst = 0;
      upper([&](std::size_t e) {
        worst = std::max(worst, std::abs(double(half[e]) - double(full[e])) / (0x1p-23 * double(mag[e])));
      });
      CHECK(worst <= 1.0);
      both(1.0f);
      omp_set_num_threads(team);
      std::int64_t differ = 0;
      upper([&](std::size_t e) { differ += std::memcmp(&half[e], &full[e], sizeof(float)) != 0; });
      CHECK(differ == 0);
      std::int64_t asymmetric = 0;
      for (std::int64_t i = 0; i < sh.n; ++i)
        for (std::int64_t j = 0; j < i; ++j) asymmetric += half[std::size_t(i * sh.n + j)] != half[std::size_t(j * sh.n + i)];
      CHECK(asymmetric == 0);
    }
}

// --ns-precision decides the iteration's products whatever the run's --precision
// (float64: bf16 rounds the operands, the oracle's arithmetic), and the run's
// precision is back after the step.
TEST_CASE("optim: Muon's iteration runs in ns_precision and puts the run's precision back", "[optim]") {
  std::map<std::pair<Precision, Precision>, std::vector<double>> after;
  for (const Precision run : {Precision::fp32, Precision::bf16})
    for (const Precision ns : {Precision::fp32, Precision::bf16}) {
      ParamStore<double> s = muon_store();
      MuonConfig cfg;
      cfg.ns_precision = ns;
      Muon<double> opt(s, cfg);
      for (std::size_t i = 0; i < s.size(); ++i) s.grads()[i] = std::sin(0.3 * double(i));
      cpu_backend::set_precision(run);
      opt.step(s, 0.01);
      CHECK(cpu_backend::precision() == run);
      cpu_backend::set_precision(Precision::fp32);
      after[{run, ns}].assign(s.values().begin(), s.values().end());
    }
  using P = Precision;
  CHECK(after[{P::fp32, P::fp32}] == after[{P::bf16, P::fp32}]);
  CHECK(after[{P::fp32, P::bf16}] == after[{P::bf16, P::bf16}]);
  CHECK(after[{P::fp32, P::fp32}] != after[{P::fp32, P::bf16}]);
}

// The hidden matrices go to the team's threads whole, each orthogonalized on one
// thread with serial products; a lone matrix keeps the team for its products.
// The float32 step's bits must not depend on either.
TEST_CASE("optim: Muon's float32 step has the same bits on one thread and on the team", "[optim]") {
  for (const bool several : {true, false})
  for (const Precision ns : {Precision::fp32, Precision::bf16}) {
    std::vector<std::vector<float>> after;
    for (const int threads : {1, cpu::max_threads()}) {
      ParamStore<float> s;
      s.add("tall", {640, 128}, ParamRole::matrix);
      if (several) {
        s.add("square", {256, 256}, ParamRole::matrix);
        s.add("wide", {128, 600}, ParamRole::matrix);
        s.add("small", {48, 40}, ParamRole::matrix);
      }
      s.add("gain", {128}, ParamRole::gain);
      s.finalize();
      for (std::size_t i = 0; i < s.size(); ++i) s.values()[i] = float(std::cos(0.37 * double(i)));
      MuonConfig cfg;
      cfg.ns_precision = ns;
      Muon<float> opt(s, cfg);
      const int before = cpu::max_threads();
      omp_set_num_threads(threads);
      for (int t = 1; t <= 2; ++t) {
        for (std::size_t i = 0; i < s.size(); ++i) s.grads()[i] = float(std::sin(0.011 * double(i) * t + t));
        opt.step(s, 0.01);
      }
      omp_set_num_threads(before);
      after.emplace_back(s.values().begin(), s.values().end());
    }
    INFO("ns_precision " << precision_name(ns) << ", " << cpu::max_threads() << " threads, "
                         << (several ? "several matrices" : "one matrix"));
    CHECK(std::memcmp(after[0].data(), after[1].data(), after[0].size() * sizeof(float)) == 0);
  }
}

TEST_CASE("optim: Muon steps hidden matrices by orthogonalized momentum and the rest by AdamW", "[optim]") {
  for (const bool nesterov : {true, false}) {
    ParamStore<double> s = muon_store();
    MuonConfig cfg;
    cfg.momentum = 0.9;
    cfg.ns_steps = 5;
    cfg.nesterov = nesterov;
    cfg.lr_ratio = 4.0;
    cfg.weight_decay = 0.1;
    cfg.beta1 = 0.85;
    cfg.beta2 = 0.9;
    cfg.eps = 1e-6;
    cfg.ns_precision = Precision::fp32;  // exact products, as the reference below
    Muon<double> opt(s, cfg);
    const std::size_t n = s.size();
    std::vector<double> p(s.values().begin(), s.values().end()), m(n, 0.0), v(n, 0.0);
    const double lr = 0.01;
    for (int t = 1; t <= 3; ++t) {
      for (std::size_t i = 0; i < n; ++i) s.grads()[i] = std::sin(0.11 * double(i) * t + t);
      opt.step(s, lr);
      for (const ParamSpec& sp : s.specs()) {
        const std::size_t o = sp.offset;
        if (sp.name == "wide" || sp.name == "tall") {
          const std::int64_t r = sp.shape[0], c = sp.shape[1];
          Mat u(r, c);
          for (std::int64_t k = 0; k < r * c; ++k) {
            const double g = std::sin(0.11 * double(o + k) * t + t);
            m[o + k] = 0.9 * m[o + k] + 0.1 * g;
            u.data()[k] = nesterov ? 0.1 * g + 0.9 * m[o + k] : m[o + k];
          }
          const Mat X = reference_newton_schulz(u, 5);
          const double glr = lr * 4.0, scale = std::sqrt(std::max(1.0, double(r) / double(c)));
          for (std::int64_t k = 0; k < r * c; ++k) p[o + k] = p[o + k] * (1 - glr * 0.1) - glr * scale * X.data()[k];
        } else {
          const bool decayed = sp.role == ParamRole::matrix;  // the embedding: AdamW with decay
          for (std::size_t k = 0; k < sp.numel; ++k) {
            const double g = std::sin(0.11 * double(o + k) * t + t);
            if (decayed) p[o + k] *= 1 - lr * 0.1;
            m[o + k] = 0.85 * m[o + k] + 0.15 * g;
            v[o + k] = 0.9 * v[o + k] + 0.1 * g * g;
            p[o + k] -= lr / (1 - std::pow(0.85, t)) * m[o + k] / (std::sqrt(v[o + k]) / std::sqrt(1 - std::pow(0.9, t)) + 1e-6);
          }
        }
      }
      double worst = 0;
      for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(s.values()[i] - p[i]));
      INFO("nesterov " << nesterov << ", step " << t << ": worst difference " << worst);
      // float64 GEMMs in another association order than the reference's: ~1e-15.
      CHECK(worst < 1e-12);
    }
    CHECK(opt.state().size() == 2);
  }
}

TEST_CASE("optim: bad hyperparameters are refused with the flag's name", "[optim]") {
  ParamStore<double> s = two_tensor_store();
  OptimizerOptions o;
  o.beta1 = -0.1;
  CHECK_THROWS_WITH((AdamW<double>(s, o, 0, s.size())), Catch::Contains("--beta1"));
  o.beta1 = 0.9;
  o.eps = std::nan("");
  CHECK_THROWS_WITH((AdamW<double>(s, o, 0, s.size())), Catch::Contains("--eps"));
  o.eps = 1e-8;
  o.beta2 = 1.0;
  CHECK_THROWS_WITH((Lion<double>(s, o, 0, s.size())), Catch::Contains("--beta2"));
  o.beta2.reset();
  o.ns_steps = 0;
  o.peak_lr = 1e-3;
  CHECK_THROWS_WITH((Muon<double>(s, o, 0, s.size())), Catch::Contains("--ns-steps"));
  o.ns_steps = 5;
  o.peak_lr = 0;
  CHECK_THROWS_WITH((Muon<double>(s, o, 0, s.size())), Catch::Contains("--lr"));
  o.name = "sgd";
  CHECK_THROWS_WITH((make_optimizer_named<double, cpu_backend>(builtin_optimizers{}, s, o, 0, s.size())),
                    Catch::Contains("unknown optimizer") && Catch::Contains("adamw, lion, muon"));
}

TEST_CASE("optim: an optimizer chosen by name is the same optimizer", "[optim]") {
  ParamStore<double> a = two_tensor_store(), b = two_tensor_store();
  OptimizerOptions o;
  o.name = "lion";
  o.weight_decay = 0.2;
  auto any = make_optimizer_named<double, cpu_backend>(builtin_optimizers{}, a, o, 0, a.size());
  Lion<double> direct(b, o, 0, b.size());
  CHECK(any.kind() == "lion");
  REQUIRE(any.get<Lion<double>>() != nullptr);
  CHECK(any.get<AdamW<double>>() == nullptr);
  for (int t = 1; t <= 3; ++t) {
    for (std::size_t i = 0; i < a.size(); ++i) a.grads()[i] = b.grads()[i] = std::sin(double(i) + t);
    any.step(a, a.value(), a.grad(), 0.01);
    direct.step(b, 0.01);
  }
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a.values()[i] == b.values()[i]);
  CHECK(any.steps_taken() == 3);
}

TEST_CASE("optim: warmup-stable-decay", "[optim]") {
  LrSchedule w;
  w.kind = LrSchedule::Kind::wsd;
  w.lr = 1.0;
  w.min_lr = 0.1;
  w.warmup = 10;
  w.total_steps = 100;
  w.decay_frac = 0.2;  // the last 20 steps decay: steps 80..99
  w.validate();
  CHECK(w.decay_start() == 80);
  CHECK(w.at(0) == Approx(0.1));
  CHECK(w.at(9) == 1.0);
  CHECK(w.at(10) == 1.0);
  CHECK(w.at(79) == 1.0);
  CHECK(w.at(80) == Approx(1.0 - 0.9 * (1.0 / 20)));  // linear: 1/20 of the way down
  CHECK(w.at(89) == Approx(1.0 - 0.9 * 0.5));
  CHECK(w.at(99) == Approx(0.1));  // the last update at min_lr
  CHECK(w.at(150) == 0.1);
  w.decay = LrSchedule::Decay::one_minus_sqrt;
  CHECK(w.at(84) == Approx(0.1 + 0.9 * (1.0 - std::sqrt(5.0 / 20))));
  CHECK(w.at(99) == Approx(0.1));
  for (std::int64_t t = 10; t < 100; ++t) CHECK(w.at(t + 1) <= w.at(t));
  // A run grown before its decay gives the steps it took the same rates; one grown in it does not.
  LrSchedule longer = w;
  longer.total_steps = 200;
  CHECK(first_rate_difference(w, longer, 80) == -1);
  CHECK(first_rate_difference(w, longer, 85) == 80);
  w.warmup = 90;
  CHECK_THROWS_WITH(w.validate(), Catch::Contains("--warmup 90") && Catch::Contains("decay"));
  w.warmup = 0;
  w.decay_frac = 0;
  CHECK_THROWS_WITH(w.validate(), Catch::Contains("--decay-frac"));
  CHECK(LrSchedule::parse("wsd") == LrSchedule::Kind::wsd);
  CHECK_THROWS_WITH(LrSchedule::parse_decay("cubic"), Catch::Contains("cubic"));
}

TEST_CASE("optim: a checkpoint names its optimizer, another optimizer's state is refused naming both", "[optim]") {
  using Model = variants::gpt::model<double>;
  ModelConfig mc;
  mc.vocab_size = 16;
  mc.n_embd = 8;
  mc.n_head = 2;
  mc.n_layer = 1;
  Model model(mc, 1, 8), back(mc, 1, 8);
  model.init(1);
  OptimizerOptions o;
  o.name = "muon";
  o.peak_lr = 1e-3;
  Muon<double> muon(model.params(), o, 0, model.params().size());
  std::vector<std::int64_t> idx(8), tgt(8);
  for (int i = 0; i < 8; ++i) idx[i] = tgt[(i + 7) % 8] = i % 16;
  train_step(model, muon, idx.data(), tgt.data(), 1, 8, 1e-3, 1.0);
  const std::string path = "test_optim_muon.safetensors";
  save_checkpoint(path, model, &muon);
  const auto f = io::SafetensorsFile::open(path);
  CHECK(f.metadata_value("optimizer") == "muon");
  CHECK(f.metadata_value("optim.ns_steps") == "5");
  AdamW<double> adamw(back.params(), AdamWConfig{});
  CHECK_THROWS_WITH(load_checkpoint(f, back, &adamw),
                    Catch::Contains("optimizer 'muon'") && Catch::Contains("'adamw'"));
  o.ns_steps = 3;
  Muon<double> other(back.params(), o, 0, back.params().size());
  CHECK_THROWS_WITH(load_checkpoint(f, back, &other), Catch::Contains("ns_steps = 5") && Catch::Contains("has 3"));
  o.ns_steps = 5;
  Muon<double> same(back.params(), o, 0, back.params().size());
  load_checkpoint(f, back, &same);
  CHECK(same.steps_taken() == 1);
  const auto a = muon.state(), b = same.state();
  for (std::size_t k = 0; k < a.size(); ++k)
    for (std::size_t i = 0; i < model.params().size(); ++i) REQUIRE(a[k].data[i] == b[k].data[i]);
  std::remove(path.c_str());
}

TEST_CASE("optim: a user's schedule by name, beside the built-ins", "[optim]") {
  register_schedule("test_halving", [](std::int64_t step, const LrSchedule& s) { return s.lr / double(1 << (step / 10)); });
  LrSchedule settings;
  settings.lr = 0.8;
  const LrSchedule mine = make_schedule("test_halving", settings);
  CHECK(mine.kind == LrSchedule::Kind::custom);
  CHECK(mine.name() == "test_halving");
  CHECK(mine.at(0) == 0.8);
  CHECK(mine.at(25) == 0.2);
  CHECK(make_schedule("wsd", settings).kind == LrSchedule::Kind::wsd);
  CHECK_THROWS_WITH(make_schedule("cyclic", settings), Catch::Contains("cyclic") && Catch::Contains("test_halving"));
  CHECK_THROWS_WITH(register_schedule("cosine", mine.custom_fn), Catch::Contains("built-in"));
  user_schedules().erase("test_halving");
}
