// AdamW, clipping and schedules against values computed independently here.
#include <catch2/catch.hpp>

#include <cmath>

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
