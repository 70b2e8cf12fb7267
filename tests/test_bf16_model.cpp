// Every variant's bf16 step (Precision::bf16) against the float64 oracles (the
// bf16 method's and the exact one) at tolerances derived from bf16's 8-bit
// significand, what a model built under bf16 keeps in bf16, and its bits
// against a float32-stored model.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string_view>
#include <vector>

#include "bf16_support.hpp"
#include "normlab/normlab.hpp"
#include "normlab/train/variants.hpp"
#include "support.hpp"

using namespace normlab;
using namespace normlab::bf16_test;

TEMPLATE_LIST_TEST_CASE("bf16: every variant's loss and gradients against the float64 oracle", "[bf16]",
                        all_variants) {
  skip_without_bf16();
  const ModelConfig mc = test::small_config(64, 64, 2, 2);
  const std::int64_t B = 2, seq = 96;
  // The exact oracle, the oracle of the bf16 method (a float64 model under
  // Precision::bf16: every product's operands rounded to bf16, then multiplied
  // in float64; attention's products too), and the float32 model in bf16.
  typename TestType::template model<double> m64(mc, B, seq), m64r(mc, B, seq);
  typename TestType::template model<float> m32(mc, B, seq);
  std::mt19937_64 rng(5);
  std::vector<std::int64_t> idx(B * seq), tgt(B * seq);
  test::perturbed_start(m64, m32, rng, idx, tgt, mc.vocab_size);
  m64r.params().values() = m64.params().values();
  const double l64 = m64.forward(idx.data(), tgt.data(), B, seq);
  m64.backward();
  double l64r = 0, l16 = 0;
  {
    PrecisionScope bf16(Precision::bf16);
    l64r = m64r.forward(idx.data(), tgt.data(), B, seq);
    m64r.backward();
    l16 = m32.forward(idx.data(), tgt.data(), B, seq);
    m32.backward();
  }
  // Built under bf16 products, a float32 model keeps its MLP activations (uv
  // and act), attention's q, k, v and output y, the outputs of its RMSNorm
  // input and final norms, the branch outputs its residual rule's backward
  // reads, the rotated q, k a q/k site's backward reads, and the backward's d_uv
  // (forward's float32 uv spanning d_act and d_uv), in bf16: the plan is smaller
  // by half of those buffers, the loss and every gradient have the bits of m32
  // (built under fp32, its uv, branch outputs and saved q, k rounded in place),
  // and the model refuses to run under fp32.
  {
    using M32 = typename TestType::template model<float>;
    const std::int64_t N = B * seq, F = mc.ff_dim();
    const std::int64_t UV = activation_gated<typename M32::scheme::mlp_activation>() ? 2 * F : F;
    auto half = [](std::int64_t n) { return std::size_t(n) - std::size_t((n + 1) / 2); };  // floats saved
    const auto plan32 = M32::memory_plan(mc, B, seq);
    PrecisionScope bf16(Precision::bf16);
    const auto plan16 = M32::memory_plan(mc, B, seq);
    using Scheme = typename M32::scheme;
    // N×C buffers halved: attention's output y, the RMSNorm outputs, and per layer q, k and v (as
    // many kv heads as query heads here), kept in bf16 as attention reads them (qa, ka). Every
    // built-in q/k site but RoPE then writes qa, ka over forward's scratch q, k instead of keeping
    // float32 copies of its own (two N×C buffers per layer): unit_scaled keeps nothing in their
    // place (its backward reads the unit vectors), QK-norm and scaled_only keep the rotated q, k
    // their backward reads, in bf16 (two N×C buffers halved).
    const std::string_view qk = Scheme::qk::name;
    REQUIRE((qk == "rope" || qk == "unit_scaled" || qk == "rms_gain" || qk == "scaled_only"));
    const bool qk_keeps_qk = qk == "rms_gain" || qk == "scaled_only";
    std::size_t nc_buffers = std::size_t(mc.n_layer) +
                                   (std::is_same_v<typename Scheme::input_norm, rms_norm> ? 2 * mc.n_layer : 0) +
                                   (std::is_same_v<typename Scheme::final_norm, rms_norm> ? 1 : 0) +
                                   3 * mc.n_layer + (qk_keeps_qk ? 2 * mc.n_layer : 0);
    const std::size_t nc_dropped = qk == "unit_scaled" ? 2 * mc.n_layer : 0;
    // and the branch outputs a_raw, m_raw where the output norms are the identity and the residual
    // rule's backward reads them (every rule here but residual_add), kept for it in bf16.
    const bool rule_reads_branch = !requires { requires !M32::residual::backward_reads_branch; };
    if (rule_reads_branch && is_identity_norm<typename Scheme::output_norm>) nc_buffers += 2 * mc.n_layer;
    REQUIRE(N * F % 16 == 0);  // whole 64-byte lines: no arena padding in the sums below
    const std::size_t duv = std::size_t(N * F + N * UV - std::max(N * UV, N * F + N * UV / 2));
    CHECK(plan32.activations - plan16.activations ==
          (std::size_t(mc.n_layer) * (half(N * F) + half(N * UV)) + nc_buffers * half(N * mc.n_embd) +
           nc_dropped * std::size_t(N * mc.n_embd) + duv) *
              sizeof(float));
    auto m32s = std::make_unique<M32>(mc, B, seq);
    CHECK(m32s->stores_act_bf16());
    CHECK_FALSE(m32.stores_act_bf16());
    m32s->params().values() = m32.params().values();
    const double l16s = m32s->forward(idx.data(), tgt.data(), B, seq);
    m32s->backward();
    CHECK(std::bit_cast<std::uint64_t>(l16s) == std::bit_cast<std::uint64_t>(l16));
    CHECK(std::memcmp(m32s->params().grad(), m32.params().grad(), m32.params().size() * sizeof(float)) == 0);
    // With q, k kept in bf16 the probabilities come from what attention read: rows of one within
    // float32's rounding of T terms and of lse (1e-5; q, k from forward's overwritten scratch
    // would miss by O(1); float32 q, k against a bf16 lse by ~1e-3).
    const std::vector<float> probs = m32s->attention_probs(mc.n_layer - 1);
    for (std::int64_t r = 0; r < B * mc.n_head * seq; ++r) {
      double sum = 0;
      for (std::int64_t t = 0; t < seq; ++t) sum += probs[std::size_t(r * seq + t)];
      INFO("probability row " << r);
      REQUIRE(std::abs(sum - 1.0) <= 1e-5);
    }
    // Decoding (one token's q, k, v in float32 scratch where they are kept in bf16) gives m32's bits.
    auto cache16 = m32s->make_kv_cache();
    auto cache32 = m32.make_kv_cache();
    for (std::size_t t = 0; t < 5; ++t) {
      const float* a = m32s->decode_step(idx[t], cache16);
      const float* b = m32.decode_step(idx[t], cache32);
      INFO("decoded token " << t);
      REQUIRE(std::memcmp(a, b, std::size_t(mc.vocab_size) * sizeof(float)) == 0);
    }
    cpu::set_matmul_precision(Precision::fp32);
    CHECK_THROWS_WITH(m32s->forward(idx.data(), tgt.data(), B, seq),
                      Catch::Contains("built under bf16 products") && Catch::Contains("run with float32 products"));
  }
  INFO("variant " << TestType::name << ": loss " << l64 << " (float64), " << l64r << " (float64, bf16 operands), "
                  << l16 << " (bf16)");
  // Bars from bf16's unit roundoff u = 2^-8. The deepest quantity passes
  // through P = 4·layers + 2 rounded products in series (the head; per layer
  // the MLP's two and attention's output and input projections; a weight's own
  // gradient product), attention's products beside them.
  const double P = 4.0 * double(mc.n_layer) + 2.0;
  // Against the oracle of the bf16 method, only float32's own errors remain
  // (test_precision: 5e-6 relative on the loss), plus operands whose float32
  // and float64 values round to neighbouring bf16 values: those within
  // float32's error of a rounding boundary, ~2^-16 of them, each moving one
  // term by one bf16 step. 1e-5 relative for the loss (measured ≤ 1.7e-6). For
  // gradients such differences grow along the backward by at most one bf16
  // rounding per product: P·u normwise per tensor (measured ≤ 3.5e-3 against 0.039).
  CHECK(std::abs(l16 - l64r) <= 1e-5 * l64);
  // Against the exact oracle, each product rounds two operands: 2·P·u, first
  // order and with no credit for cancellation (measured: loss ≤ 8.9e-6
  // relative). For the gradients that holds of the whole gradient, normwise
  // (measured ≤ 4.8e-3); a single small tensor can lose more to cancellation:
  // ngpt_scalar's one s_qk sums every score's gradient, and with P and dS in
  // bf16 it is off by 15% (0.3% from the bf16 oracle: the method, not the code).
  CHECK(std::abs(l16 - l64) <= 2 * P * kBf16Unit * l64);
  double num = 0, den = 0;
  for (const ParamSpec& s : m64.params().specs()) {
    const double er = rel_err(m32.params().grad(s.offset), m64r.params().grad(s.offset), s.numel);
    INFO("gradient of " << s.name << ": relative error " << er << " against the bf16 oracle, "
                        << rel_err(m32.params().grad(s.offset), m64.params().grad(s.offset), s.numel)
                        << " against the exact one");
    CHECK(er <= P * kBf16Unit);
    for (std::size_t i = 0; i < s.numel; ++i) {
      const double g = m64.params().grad(s.offset)[i], d = double(m32.params().grad(s.offset)[i]) - g;
      num += d * d;
      den += g * g;
    }
  }
  INFO("whole gradient: relative error " << std::sqrt(num / den) << " against the exact oracle");
  CHECK(std::sqrt(num / den) <= 2 * P * kBf16Unit);
  // The bf16 oracle is not the exact one in disguise.
  CHECK(l64r != l64);
}
