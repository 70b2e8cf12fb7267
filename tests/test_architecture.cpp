// The block's shapes beyond the classic one: grouped-query attention
// (n_kv_heads), a causal sliding window (attn_window), the MLP's width (d_ff)
// and plain (ungated) activations. Each is checked where it acts: gradients by
// float64 finite differences at T larger than the window, decoding against the
// full forward, the window against a dense masked reference, grouped kv heads
// against multi-head attention with the kv weights repeated, and checkpoints
// that refuse a model of another shape, naming the field.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "normlab/normlab.hpp"
#include "normlab/train/gradcheck.hpp"

using namespace normlab;

namespace {

// GPT+ (QK-norm) with ReLU², the modern-block baseline, and the same with GELU.
struct qknorm_relu2 : prenorm_rms_qknorm {
  static constexpr std::string_view name = "qknorm_relu2";
  using mlp_activation = relu2;
};
struct prenorm_gelu_tanh : prenorm_rms {
  static constexpr std::string_view name = "prenorm_gelu_tanh";
  using mlp_activation = gelu_tanh;
};
struct prenorm_gelu_erf : prenorm_rms {
  static constexpr std::string_view name = "prenorm_gelu_erf";
  using mlp_activation = gelu_erf;
};

// 4 query heads over 2 kv heads, a window of 3 at T = 9 (several windows, and
// rows whose window starts mid-sequence), d_ff = 24 (not 4C).
GradcheckShape modern_shape() {
  GradcheckShape s;
  s.config.n_embd = 32;
  s.config.n_head = 4;
  s.config.n_kv_heads = 2;
  s.config.attn_window = 3;
  s.config.d_ff = 24;
  s.seq = 9;
  return s;
}

// Every tensor's relative error is at most 1e-6: the bar of the built-in
// variants (central differences with h = 1e-6 reach ~1e-9 on these shapes).
template <class Model>
double worst_gradient_error(const GradcheckShape& shape) {
  double worst = 0;
  for (const auto& r : check_model_gradients<Model>(5, shape)) worst = std::max(worst, r.rel_error);
  return worst;
}

std::vector<std::int64_t> tokens(std::int64_t n, std::int64_t vocab, std::int64_t salt) {
  std::vector<std::int64_t> t(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) t[i] = (i * 5 + salt * 3 + 1) % vocab;
  return t;
}

ModelConfig modern_config() {
  ModelConfig c;
  c.vocab_size = 23;
  c.n_embd = 32;
  c.n_head = 4;
  c.n_kv_heads = 2;
  c.attn_window = 4;
  c.d_ff = 48;
  c.n_layer = 2;
  return c;
}

// The worst |logit| difference between decoding T tokens one at a time with the
// KV cache and one full forward over them.
template <class Model>
double decode_vs_forward(ModelConfig c, std::int64_t T) {
  Model m(c, 1, T);
  m.init(9);
  const auto idx = tokens(T, c.vocab_size, 4);
  m.forward(idx.data(), nullptr, 1, T);
  const std::vector<double> full(m.logits(), m.logits() + T * c.vocab_size);
  auto cache = m.make_kv_cache();
  double worst = 0;
  for (std::int64_t t = 0; t < T; ++t) {
    const double* row = m.decode_step(idx[t], cache);
    for (std::int64_t v = 0; v < c.vocab_size; ++v) worst = std::max(worst, std::abs(row[v] - full[t * c.vocab_size + v]));
  }
  return worst;
}

}  // namespace

TEST_CASE("architecture: float64 gradients of grouped kv heads, a window, d_ff and plain MLPs at T > window",
          "[architecture][gradcheck]") {
  const GradcheckShape s = modern_shape();
  CHECK(worst_gradient_error<Transformer<double, qknorm_relu2, residual_add>>(s) <= 1e-6);
  CHECK(worst_gradient_error<Transformer<double, prenorm_rms, residual_add>>(s) <= 1e-6);  // GQA with SwiGLU
  CHECK(worst_gradient_error<Transformer<double, prenorm_gelu_tanh, lerp>>(s) <= 1e-6);
  CHECK(worst_gradient_error<Transformer<double, prenorm_gelu_erf, residual_add>>(s) <= 1e-6);
  // nGPT keeps its s_qk (no grouped kv) but takes the window and the width.
  GradcheckShape sphere_shape = s;
  sphere_shape.config.n_kv_heads = 0;
  CHECK(worst_gradient_error<Transformer<double, sphere, lerp_retract>>(sphere_shape) <= 1e-6);
  CHECK(worst_gradient_error<Transformer<double, approx_sphere, lerp_nu>>(sphere_shape) <= 1e-6);
}

TEST_CASE("architecture: parameters follow the shapes, none dead", "[architecture]") {
  const ModelConfig c = modern_config();
  Transformer<double, qknorm_relu2, residual_add> m(c, 1, 8);
  const auto& specs = m.params().specs();
  auto shape_of = [&](const std::string& name) {
    for (const ParamSpec& s : specs)
      if (s.name == name) return s.shape;
    FAIL("no parameter " << name);
    return std::vector<std::int64_t>{};
  };
  CHECK(shape_of("transformer.h.0.key.weight") == std::vector<std::int64_t>{16, 32});    // 2 kv heads × 8
  CHECK(shape_of("transformer.h.0.value.weight") == std::vector<std::int64_t>{16, 32});
  CHECK(shape_of("transformer.h.0.query.weight") == std::vector<std::int64_t>{32, 32});
  CHECK(shape_of("transformer.h.0.c_fc.weight") == std::vector<std::int64_t>{48, 32});   // plain: F rows
  CHECK(shape_of("transformer.h.0.mlp_c_proj.weight") == std::vector<std::int64_t>{32, 48});
  Transformer<double, prenorm_rms, residual_add> gated(c, 1, 8);
  for (const ParamSpec& s : gated.params().specs())
    if (s.name == "transformer.h.0.c_fc.weight") CHECK(s.shape == std::vector<std::int64_t>{96, 32});  // [u | g]
  // Every parameter reaches the loss: after one backward none is exactly zero.
  const auto idx = tokens(8, c.vocab_size, 1), tgt = tokens(8, c.vocab_size, 2);
  m.init(3);
  m.forward(idx.data(), tgt.data(), 1, 8);
  m.backward();
  for (const ParamSpec& s : specs) {
    double norm = 0;
    for (std::size_t i = 0; i < s.numel; ++i) norm += std::abs(m.params().grad(s.offset)[i]);
    INFO(s.name);
    CHECK(norm > 0);
  }
  // The KV cache holds Hkv·D per position: half of multi-head attention's here.
  CHECK(m.make_kv_cache().k.size() == std::size_t(c.n_layer * 8 * 16));
}

TEST_CASE("architecture: decoding with the KV cache equals the full forward past the window", "[architecture][decode]") {
  // T = 11 > window 4: the decode's window slides. float64, the same arithmetic
  // in another order: a few ulps of O(1) logits.
  CHECK(decode_vs_forward<Transformer<double, qknorm_relu2, residual_add>>(modern_config(), 11) <= 1e-12);
}

TEST_CASE("architecture: the window masks exactly the keys before t-W+1 (against a dense reference)",
          "[architecture][attention]") {
  const std::int64_t B = 2, T = 150, H = 2, D = 8, C = H * D, W = 37;  // T over two 64-row blocks
  std::vector<double> q(B * T * C), k(q.size()), v(q.size()), y(q.size()), lse(B * H * T);
  for (std::size_t i = 0; i < q.size(); ++i) {
    q[i] = std::sin(0.37 * double(i));
    k[i] = std::cos(0.11 * double(i) + 1);
    v[i] = std::sin(0.05 * double(i) + 2);
  }
  const double scale = 1 / std::sqrt(double(D));
  cpu::attention_forward(y.data(), lse.data(), q.data(), k.data(), v.data(), B, T, H, D, scale, W);
  double worst = 0;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t t = 0; t < T; ++t) {
        std::vector<double> w;
        double mx = -1e300;
        for (std::int64_t s = std::max<std::int64_t>(0, t - W + 1); s <= t; ++s) {
          double dot = 0;
          for (std::int64_t c = 0; c < D; ++c) dot += q[(b * T + t) * C + h * D + c] * k[(b * T + s) * C + h * D + c];
          w.push_back(dot * scale);
          mx = std::max(mx, w.back());
        }
        double sum = 0;
        for (double& x : w) sum += (x = std::exp(x - mx));
        for (std::int64_t c = 0; c < D; ++c) {
          double ref = 0;
          for (std::size_t j = 0; j < w.size(); ++j)
            ref += w[j] / sum * v[(b * T + std::max<std::int64_t>(0, t - W + 1) + std::int64_t(j)) * C + h * D + c];
          worst = std::max(worst, std::abs(ref - y[(b * T + t) * C + h * D + c]));
        }
      }
  CHECK(worst <= 1e-13);  // float64 reordering only
  // attention_probs shows the same mask: zeros outside [t-W+1, t], rows summing to 1.
  std::vector<double> P(B * H * T * T);
  cpu::attention_probs(P.data(), lse.data(), q.data(), k.data(), B, T, H, D, scale, W);
  double off = 0, row_err = 0;
  for (std::int64_t r = 0; r < B * H * T; ++r) {
    const std::int64_t t = r % T;
    double sum = 0;
    for (std::int64_t s = 0; s < T; ++s) {
      const double p = P[r * T + s];
      if (s > t || s < t - W + 1) off = std::max(off, std::abs(p));
      sum += p;
    }
    row_err = std::max(row_err, std::abs(sum - 1));
  }
  CHECK(off == 0);
  CHECK(row_err <= 1e-13);
}

TEST_CASE("architecture: float32 windowed attention (the AVX-512 kernel where built) equals the float64 oracle",
          "[architecture][attention]") {
  // T = 150 spans three 64-row blocks, the last partial; the windows cover one
  // key (W = 1), less than a block, exactly a block, more than a block, and
  // T − 1 (one position masked in the last rows).
  const std::int64_t B = 2, T = 150, H = 2, D = 16, C = H * D;
  const std::size_t n = std::size_t(B * T * C);
  std::vector<double> q(n), k(n), v(n), dy(n);
  for (std::size_t i = 0; i < n; ++i) {
    q[i] = std::sin(0.37 * double(i));
    k[i] = std::cos(0.11 * double(i) + 1);
    v[i] = std::sin(0.05 * double(i) + 2);
    dy[i] = std::cos(0.23 * double(i) + 3);
  }
  auto as_float = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
  const std::vector<float> qf = as_float(q), kf = as_float(k), vf = as_float(v), dyf = as_float(dy);
  // The worst difference over a tensor, relative to its largest reference entry
  // or to 1, whichever is larger: the inputs are O(1), and with W = 1 (one key,
  // P = 1, dS = dY·v − dY·y = 0) dq and dk are zero in exact arithmetic, so
  // they are held to the same absolute bound.
  auto rel = [](const std::vector<float>& got, const std::vector<double>& want) {
    double worst = 0, big = 1;
    for (std::size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, std::abs(double(got[i]) - want[i]));
      big = std::max(big, std::abs(want[i]));
    }
    return worst / big;
  };
  for (std::int64_t W : {1, 37, 64, 100, 149}) {
    CAPTURE(W);
    const double scale = 1 / std::sqrt(double(D));
    std::vector<double> y(n), lse(std::size_t(B * H * T)), dq(n), dk(n), dv(n);
    cpu::attention_forward(y.data(), lse.data(), q.data(), k.data(), v.data(), B, T, H, D, scale, W);
    cpu::attention_backward(dq.data(), dk.data(), dv.data(), dy.data(), y.data(), lse.data(), q.data(), k.data(),
                            v.data(), B, T, H, D, scale, W);
    std::vector<float> yf(n), lsef(lse.size()), dqf(n), dkf(n), dvf(n);
    cpu::attention_forward(yf.data(), lsef.data(), qf.data(), kf.data(), vf.data(), B, T, H, D, float(scale), W);
    cpu::attention_backward(dqf.data(), dkf.data(), dvf.data(), dyf.data(), yf.data(), lsef.data(), qf.data(),
                            kf.data(), vf.data(), B, T, H, D, float(scale), W);
    // float32 sums of at most max(W, D) ≤ 150 terms of O(1) values carry a
    // relative error below γ_n = n·u ≈ 150 × 6e-8 ≈ 9e-6 of the sum of their
    // magnitudes (and backward's sums of sums stay within twice that); 2e-5 is
    // that bound, not a fit. A mask that kept or dropped one key moves the
    // output by ~1/W ≥ 7e-3.
    CHECK(rel(yf, y) <= 2e-5);
    CHECK(rel(lsef, lse) <= 2e-5);
    CHECK(rel(dqf, dq) <= 2e-5);
    CHECK(rel(dkf, dk) <= 2e-5);
    CHECK(rel(dvf, dv) <= 2e-5);
  }
}

TEST_CASE("architecture: the plain activations in float32 (vectorized) equal the float64 formulas",
          "[architecture][mlp]") {
  // u over [-8, 8] (GELU's tails and its bend), n not a multiple of the
  // 4096-value chunks nor of a vector.
  const std::int64_t n = 2 * 4096 + 37;
  std::vector<double> u(n), d(n), y(n), g(n);
  for (std::int64_t i = 0; i < n; ++i) {
    u[std::size_t(i)] = -8.0 + 16.0 * double(i) / double(n - 1);
    d[std::size_t(i)] = std::cos(0.01 * double(i));
  }
  const std::vector<float> uf(u.begin(), u.end()), df(d.begin(), d.end());
  std::vector<float> yf(n), gf(n);
  for (Pointwise fn : {Pointwise::relu2, Pointwise::gelu_tanh, Pointwise::gelu_erf}) {
    CAPTURE(int(fn));
    cpu::pointwise_forward(fn, y.data(), u.data(), n);
    cpu::pointwise_backward(fn, g.data(), d.data(), u.data(), n);
    cpu::pointwise_forward(fn, yf.data(), uf.data(), n);
    cpu::pointwise_backward(fn, gf.data(), df.data(), uf.data(), n);
    double worst_y = 0, worst_g = 0;
    for (std::size_t i = 0; i < u.size(); ++i) {
      // A few float32 ulps of the largest term of each formula: relu² and its
      // derivative scale with u² and u, GELU's with u (1 + tanh(·) cancels to
      // ~1 ulp of 1 in the left tail, times 0.5·u).
      const double scale = std::max(1.0, u[i] * u[i]);
      worst_y = std::max(worst_y, std::abs(double(yf[i]) - y[i]) / scale);
      worst_g = std::max(worst_g, std::abs(double(gf[i]) - g[i]) / scale);
    }
    CHECK(worst_y <= 1e-6);  // ~16 ulps of float32 at the term's scale
    CHECK(worst_g <= 1e-6);
  }
}

TEST_CASE("architecture: a window of at least T is full causal attention, bit for bit (float32)", "[architecture]") {
  ModelConfig c = modern_config();
  c.n_kv_heads = 0;
  c.attn_window = 0;
  const std::int64_t T = 16;
  GPT<float> full(c, 2, T);
  c.attn_window = T;
  GPT<float> wide(c, 2, T);
  full.init(4);
  wide.init(4);
  const auto idx = tokens(2 * T, c.vocab_size, 5), tgt = tokens(2 * T, c.vocab_size, 6);
  CHECK(full.forward(idx.data(), tgt.data(), 2, T) == wide.forward(idx.data(), tgt.data(), 2, T));
}

TEST_CASE("architecture: grouped kv heads equal multi-head attention with each kv head's weights repeated",
          "[architecture][gqa]") {
  ModelConfig g = modern_config();
  ModelConfig m = g;
  m.n_kv_heads = 0;
  const std::int64_t T = 10, D = g.head_dim(), group = g.n_head / g.kv_heads();
  Transformer<double, qknorm_relu2, residual_add> gqa(g, 2, T), mha(m, 2, T);
  gqa.init(11);
  mha.init(11);
  // Copy every tensor by name; K and V rows of kv head j go to query heads j·group … j·group+group−1.
  for (const ParamSpec& s : gqa.params().specs()) {
    const ParamSpec* t = nullptr;
    for (const ParamSpec& u : mha.params().specs())
      if (u.name == s.name) t = &u;
    REQUIRE(t);
    const double* src = gqa.params().value(s.offset);
    double* dst = mha.params().value(t->offset);
    if (s.shape != t->shape) {  // key/value: (Hkv·D, C) -> (H·D, C)
      const std::int64_t C = s.shape[1];
      for (std::int64_t h = 0; h < g.n_head; ++h)
        std::copy_n(src + (h / group) * D * C, D * C, dst + h * D * C);
    } else {
      std::copy_n(src, s.numel, dst);
    }
  }
  const auto idx = tokens(2 * T, g.vocab_size, 7), tgt = tokens(2 * T, g.vocab_size, 8);
  const double lg = gqa.forward(idx.data(), tgt.data(), 2, T), lm = mha.forward(idx.data(), tgt.data(), 2, T);
  CHECK(std::abs(lg - lm) <= 1e-13);
}

TEST_CASE("architecture: checkpoints record the shapes and refuse another, naming the field",
          "[architecture][checkpoint]") {
  const auto dir = std::filesystem::temp_directory_path() / "normlab_test_architecture";
  std::filesystem::create_directories(dir);
  const ModelConfig c = modern_config();
  Transformer<double, prenorm_rms, residual_add> windowed(c, 1, 8);
  windowed.init(2);
  save_checkpoint(dir / "w.safetensors", windowed, static_cast<const AdamW<double>*>(nullptr));
  const auto f = io::SafetensorsFile::open(dir / "w.safetensors");
  CHECK(f.metadata_value("n_kv_heads") == "2");
  CHECK(f.metadata_value("attn_window") == "4");
  CHECK(f.metadata_value("d_ff") == "48");
  CHECK(checkpoint_config(f).attn_window == 4);
  ModelConfig full = c;
  full.attn_window = 0;
  Transformer<double, prenorm_rms, residual_add> full_model(full, 1, 8);
  CHECK_THROWS_WITH(load_checkpoint(f, full_model, static_cast<AdamW<double>*>(nullptr)),
                    Catch::Contains("attn_window = 4") && Catch::Contains("the model has 0"));
  ModelConfig mha = c;
  mha.n_kv_heads = 0;
  Transformer<double, prenorm_rms, residual_add> mha_model(mha, 1, 8);
  CHECK_THROWS_WITH(load_checkpoint(f, mha_model, static_cast<AdamW<double>*>(nullptr)),
                    Catch::Contains("n_kv_heads = 2") && Catch::Contains("the model has 4"));
  // Two user schemes of one name that differ in a policy: refused naming both policy lists.
  struct prenorm_relu2 : prenorm_rms {  // both keep prenorm_rms's name on purpose
    using mlp_activation = relu2;
  };
  struct prenorm_gelu : prenorm_rms {
    using mlp_activation = gelu_tanh;
  };
  Transformer<double, prenorm_relu2, residual_add> relu_model(c, 1, 8);
  relu_model.init(2);
  save_checkpoint(dir / "relu2.safetensors", relu_model, static_cast<const AdamW<double>*>(nullptr));
  Transformer<double, prenorm_gelu, residual_add> gelu_model(c, 1, 8);
  CHECK_THROWS_WITH(load_checkpoint(io::SafetensorsFile::open(dir / "relu2.safetensors"), gelu_model,
                                    static_cast<AdamW<double>*>(nullptr)),
                    Catch::Contains("mlp_activation=relu2") && Catch::Contains("mlp_activation=gelu_tanh"));
  Transformer<double, prenorm_rms, residual_add> same(c, 1, 8);
  load_checkpoint(f, same, static_cast<AdamW<double>*>(nullptr));
  CHECK(same.params().values() == windowed.params().values());

  // A checkpoint written before the fields existed (no n_kv_heads, d_ff,
  // attn_window, architecture, angpt_residual_factor_mult) holds the classic
  // shape and the multiplier every model then had, 1, and loads into it.
  ModelConfig classic = c;
  classic.n_kv_heads = classic.d_ff = classic.attn_window = 0;
  GPT<double> gpt(classic, 1, 8);
  gpt.init(6);
  save_checkpoint(dir / "new.safetensors", gpt, static_cast<const AdamW<double>*>(nullptr));
  const auto nf = io::SafetensorsFile::open(dir / "new.safetensors");
  io::SafetensorsWriter w;
  for (const auto& [key, value] : nf.metadata())
    if (key != "n_kv_heads" && key != "d_ff" && key != "attn_window" && key != "architecture" &&
        key != "angpt_residual_factor_mult")
      w.set_metadata(key, value);
  std::vector<std::vector<double>> keep;
  for (const std::string& name : nf.names()) {
    keep.push_back(nf.read<double>(name));
    w.add<double>(name, nf.info(name).shape, std::span<const double>(keep.back()));
  }
  w.write_atomic(dir / "old.safetensors");
  const auto of = io::SafetensorsFile::open(dir / "old.safetensors");
  REQUIRE(of.metadata().count("n_kv_heads") == 0);
  GPT<double> old_back(classic, 1, 8);
  load_checkpoint(of, old_back, static_cast<AdamW<double>*>(nullptr));
  CHECK(old_back.params().values() == gpt.params().values());
  CHECK(checkpoint_config(of).kv_heads() == classic.n_head);
  CHECK(checkpoint_config(of).angpt_residual_factor_mult == 1.0);
  ModelConfig doubled = classic;
  doubled.angpt_residual_factor_mult = 2;
  GPT<double> doubled_gpt(doubled, 1, 8);
  CHECK_THROWS_WITH(load_checkpoint(of, doubled_gpt, static_cast<AdamW<double>*>(nullptr)),
                    Catch::Contains("checkpoint has no angpt_residual_factor_mult (written before it existed: 1)"));
  GPT<double> windowed_gpt(c, 1, 8);
  CHECK_THROWS_WITH(load_checkpoint(of, windowed_gpt, static_cast<AdamW<double>*>(nullptr)),
                    Catch::Contains("predates the field"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("architecture: shapes that cannot work are refused naming the field", "[architecture][bad-input]") {
  ModelConfig c = modern_config();
  c.n_kv_heads = 3;
  CHECK_THROWS_WITH((GPT<double>(c, 1, 4)), Catch::Contains("n_kv_heads (3) must divide n_head (4)"));
  c.n_kv_heads = 2;
  c.attn_window = -1;
  CHECK_THROWS_WITH((GPT<double>(c, 1, 4)), Catch::Contains("attn_window"));
  c.attn_window = 0;
  c.d_ff = -5;
  CHECK_THROWS_WITH((GPT<double>(c, 1, 4)), Catch::Contains("d_ff"));
  c.d_ff = 0;
  // nGPT's s_qk pairs q and k head by head: grouped kv heads are refused, naming the site.
  CHECK_THROWS_WITH((NGPT<double>(c, 1, 4)), Catch::Contains("unit_scaled") && Catch::Contains("n_kv_heads = 2"));
}

// ------------------------------------------------------------------ positions, biases, norms and layouts
namespace {

struct layernorm_gelu : prenorm_rms {  // GPT-2's norms and MLP
  static constexpr std::string_view name = "layernorm_gelu";
  using input_norm = layer_norm;
  using final_norm = layer_norm;
  using mlp_activation = gelu_tanh;
};
struct layernorm_nobias_scheme : prenorm_rms {
  static constexpr std::string_view name = "layernorm_nobias";
  using input_norm = layer_norm_nobias;
  using final_norm = layer_norm_nobias;
};
// Post-LN: no pre-norm, Norm(h + f) in the residual, no final norm.
struct post_ln : prenorm_rms {
  static constexpr std::string_view name = "post_ln";
  using input_norm = no_norm;
  using final_norm = no_norm;
};
struct with_embedding_norm : prenorm_rms {
  static constexpr std::string_view name = "with_embedding_norm";
  using embedding_norm = layer_norm;
};

GradcheckShape gpt2_shape(Positions p, bool bias) {
  GradcheckShape s;
  s.config.n_embd = 16;
  s.config.n_head = 4;
  s.config.positions = p;
  s.config.n_positions = p == Positions::learned ? 7 : 0;
  s.config.bias = bias;
  s.seq = 7;
  return s;
}

}  // namespace

TEST_CASE("architecture: float64 gradients of learned positions, NoPE, biases, LayerNorm, post-norm, embedding norm",
          "[architecture][gradcheck]") {
  // The same 1e-6 bar; a key bias's gradient is zero by symmetry (softmax ignores
  // a shift every key shares) and is checked as zero (gradcheck's `vanishing`).
  using GPT2 = Transformer<double, layernorm_gelu, residual_add>;
  // With RoPE the key bias is no longer a shared shift (each key is rotated by its own position).
  auto worst_and_key_bias = [](const GradcheckShape& shape, bool& key_bias_vanishes) {
    double worst = 0;
    for (const auto& r : check_model_gradients<GPT2>(5, shape)) {
      worst = std::max(worst, r.rel_error);
      if (r.name == "transformer.h.0.key.bias") key_bias_vanishes = r.vanishing;
    }
    return worst;
  };
  bool key_bias_vanishes_with_learned = false, key_bias_vanishes_with_rope = true;
  CHECK(worst_and_key_bias(gpt2_shape(Positions::learned, true), key_bias_vanishes_with_learned) <= 1e-6);
  CHECK(worst_gradient_error<GPT2>(gpt2_shape(Positions::none, true)) <= 1e-6);
  CHECK(worst_and_key_bias(gpt2_shape(Positions::rope, true), key_bias_vanishes_with_rope) <= 1e-6);
  CHECK(key_bias_vanishes_with_learned);
  CHECK_FALSE(key_bias_vanishes_with_rope);
  CHECK(worst_gradient_error<Transformer<double, layernorm_nobias_scheme, residual_add>>(
            gpt2_shape(Positions::rope, false)) <= 1e-6);
  CHECK(worst_gradient_error<Transformer<double, post_ln, post_norm<layer_norm>>>(gpt2_shape(Positions::learned, true)) <=
        1e-6);
  CHECK(worst_gradient_error<Transformer<double, post_ln, post_norm<rms_norm>>>(gpt2_shape(Positions::rope, false)) <=
        1e-6);
  CHECK(worst_gradient_error<Transformer<double, with_embedding_norm, residual_add>>(
            gpt2_shape(Positions::learned, false)) <= 1e-6);
  CHECK(worst_gradient_error<Transformer<double, sphere, lerp_retract>>(gpt2_shape(Positions::learned, true)) <= 1e-6);
}

TEST_CASE("architecture: positions, biases, LayerNorm and post-norm decode as they forward", "[architecture][decode]") {
  ModelConfig c = modern_config();
  c.positions = Positions::learned;
  c.n_positions = 11;
  c.bias = true;
  // float64, the same arithmetic in another order: a few ulps of O(1) logits.
  CHECK(decode_vs_forward<Transformer<double, layernorm_gelu, residual_add>>(c, 11) <= 1e-12);
  CHECK(decode_vs_forward<Transformer<double, post_ln, post_norm<layer_norm>>>(c, 11) <= 1e-12);
  CHECK(decode_vs_forward<Transformer<double, with_embedding_norm, residual_add>>(c, 11) <= 1e-12);
  c.positions = Positions::none;
  c.n_positions = 0;
  CHECK(decode_vs_forward<Transformer<double, layernorm_gelu, residual_add>>(c, 11) <= 1e-12);
}

TEST_CASE("architecture: NoPE is RoPE's model with the rotation removed, and learned positions at zero are NoPE",
          "[architecture]") {
  // The same weights: positions = none gives the logits of a model whose q/k
  // sites rotate nothing; a learned table of zeros adds nothing (bit for bit).
  ModelConfig c = modern_config();
  c.attn_window = 0;
  c.positions = Positions::none;
  const std::int64_t T = 8;
  GPT<double> nope(c, 1, T);
  nope.init(4);
  ModelConfig lc = c;
  lc.positions = Positions::learned;
  lc.n_positions = T;
  GPT<double> learned(lc, 1, T);
  learned.init(4);
  for (const ParamSpec& s : learned.params().specs()) {
    if (s.name == "transformer.wpe.weight") {
      std::fill_n(learned.params().value(s.offset), s.numel, 0.0);
      continue;
    }
    bool found = false;
    for (const ParamSpec& t : nope.params().specs())
      if (t.name == s.name) {
        std::copy_n(nope.params().value(t.offset), s.numel, learned.params().value(s.offset));
        found = true;
      }
    INFO(s.name);
    CHECK(found);
  }
  const auto idx = tokens(T, c.vocab_size, 2);
  nope.forward(idx.data(), nullptr, 1, T);
  learned.forward(idx.data(), nullptr, 1, T);
  CHECK(std::equal(nope.logits(), nope.logits() + T * c.vocab_size, learned.logits()));
  // Without positions a causal model still tells the first token's logits from
  // RoPE's only through the rotation: at position 0 RoPE rotates by 0, so row 0 agrees.
  ModelConfig rc = c;
  rc.positions = Positions::rope;
  GPT<double> rope(rc, 1, T);
  rope.init(4);
  rope.forward(idx.data(), nullptr, 1, T);
  double row0 = 0, later = 0;
  for (std::int64_t v = 0; v < c.vocab_size; ++v) {
    row0 = std::max(row0, std::abs(rope.logits()[v] - nope.logits()[v]));
    later = std::max(later, std::abs(rope.logits()[(T - 1) * c.vocab_size + v] - nope.logits()[(T - 1) * c.vocab_size + v]));
  }
  CHECK(row0 <= 1e-14);
  CHECK(later > 1e-6);
}

TEST_CASE("architecture: biases and the position table have their shapes, checkpoints refuse another positions or bias",
          "[architecture][checkpoint]") {
  const auto dir = std::filesystem::temp_directory_path() / "normlab_test_positions";
  std::filesystem::create_directories(dir);
  ModelConfig c = modern_config();
  c.positions = Positions::learned;
  c.n_positions = 8;
  c.bias = true;
  using GPT2 = Transformer<double, layernorm_gelu, residual_add>;
  GPT2 m(c, 1, 8);
  m.init(2);
  std::vector<std::string> names;
  for (const ParamSpec& s : m.params().specs()) {
    names.push_back(s.name);
    if (s.name == "transformer.wpe.weight") CHECK(s.shape == std::vector<std::int64_t>{8, 32});
    if (s.name == "transformer.h.0.key.bias") CHECK(s.shape == std::vector<std::int64_t>{16});  // kv heads · D
    if (s.name == "transformer.h.0.c_fc.bias") CHECK(s.shape == std::vector<std::int64_t>{48});  // plain: F
    if (s.name == "transformer.h.0.layernorm_att.bias") CHECK(s.shape == std::vector<std::int64_t>{32});
  }
  for (const char* want : {"transformer.wpe.weight", "transformer.h.1.query.bias", "transformer.h.1.value.bias",
                           "transformer.h.1.att_c_proj.bias", "transformer.h.1.mlp_c_proj.bias", "layernorm_f.bias"}) {
    INFO(want);
    CHECK(std::find(names.begin(), names.end(), want) != names.end());
  }
  save_checkpoint(dir / "g.safetensors", m, static_cast<const AdamW<double>*>(nullptr));
  const auto f = io::SafetensorsFile::open(dir / "g.safetensors");
  CHECK(f.metadata_value("positions") == "learned");
  CHECK(f.metadata_value("n_positions") == "8");
  CHECK(f.metadata_value("bias") == "1");
  const ModelConfig back = checkpoint_config(f);
  CHECK(back.positions == Positions::learned);
  CHECK(back.n_positions == 8);
  CHECK(back.bias);
  ModelConfig rope = c;
  rope.positions = Positions::rope;
  rope.n_positions = 0;
  GPT2 rope_model(rope, 1, 8);
  CHECK_THROWS_WITH(load_checkpoint(f, rope_model, static_cast<AdamW<double>*>(nullptr)),
                    Catch::Contains("positions = learned, the model has rope") ||
                        Catch::Contains("n_positions = 8, the model has 0"));
  ModelConfig nobias = c;
  nobias.bias = false;
  GPT2 nobias_model(nobias, 1, 8);
  CHECK_THROWS_WITH(load_checkpoint(f, nobias_model, static_cast<AdamW<double>*>(nullptr)),
                    Catch::Contains("bias = 1, the model has 0"));
  GPT2 same(c, 1, 8);
  load_checkpoint(f, same, static_cast<AdamW<double>*>(nullptr));
  CHECK(same.params().values() == m.params().values());
  // A learned table covers n_positions: a longer context is refused, not read past the table.
  CHECK_THROWS_WITH((GPT2(c, 1, 16)), Catch::Contains("max_seq 16") && Catch::Contains("n_positions"));
  // The post-norm rule's name carries its norm's, so checkpoints tell them apart.
  CHECK((Transformer<double, post_ln, post_norm<layer_norm>>::architecture().find("residual=post_norm(layernorm)") !=
         std::string::npos));
  CHECK((Transformer<double, with_embedding_norm, residual_add>::architecture().find("embedding_norm=layernorm") !=
         std::string::npos));
  CHECK(GPT<double>::architecture().find("embedding_norm") == std::string::npos);  // older checkpoints still load
  std::filesystem::remove_all(dir);
}

TEST_CASE("architecture: positions that cannot work are refused naming the field", "[architecture][bad-input]") {
  ModelConfig c = modern_config();
  c.positions = Positions::learned;
  CHECK_THROWS_WITH((GPT<double>(c, 1, 4)), Catch::Contains("positions = learned needs n_positions > 0"));
  c.positions = Positions::rope;
  c.n_positions = 5;
  CHECK_THROWS_WITH((GPT<double>(c, 1, 4)), Catch::Contains("n_positions (5) is for positions = learned only"));
  Positions p{};
  CHECK_FALSE(parse_positions("alibi", p));
  CHECK(parse_positions("none", p));
  CHECK(p == Positions::none);
}

TEST_CASE("architecture: a bias through a GEMM on a column of ones (the fallback) equals the CPU's add_bias",
          "[architecture]") {
  // The model's fallback for a backend without add_bias/bias_backward is
  // linear_forward/linear_backward with K = 1 against ones; on the CPU both exist,
  // so they must agree: forward exactly (y + 1·b is one rounding either way),
  // the bias gradient to 1e-12 (column sums in another order, float64).
  const std::int64_t N = 37, M = 19;
  std::vector<double> y(N * M), b(M), dy(N * M), ones(N, 1.0);
  for (std::int64_t i = 0; i < N * M; ++i) {
    y[i] = std::sin(0.37 * double(i));
    dy[i] = std::cos(0.11 * double(i) + 0.5);
  }
  for (std::int64_t j = 0; j < M; ++j) b[j] = 0.1 * double(j) - 0.7;
  std::vector<double> fused = y, gemm = y;
  cpu_backend::add_bias(fused.data(), b.data(), N, M);
  cpu_backend::linear_forward(gemm.data(), static_cast<const double*>(ones.data()), b.data(), N, 1, M, true, 1.0);
  CHECK(fused == gemm);
  for (std::int64_t i = 0; i < N; ++i)
    for (std::int64_t j = 0; j < M; ++j) CHECK(fused[i * M + j] == y[i * M + j] + b[j]);
  std::vector<double> db_fused(M, 0.5), db_gemm(M, 0.5);  // both accumulate into the gradient
  cpu_backend::bias_backward(db_fused.data(), dy.data(), N, M);
  cpu_backend::linear_backward(static_cast<double*>(nullptr), db_gemm.data(), dy.data(),
                               static_cast<const double*>(ones.data()), b.data(), N, 1, M, 1.0);
  for (std::int64_t j = 0; j < M; ++j) {
    double ref = 0.5;
    for (std::int64_t i = 0; i < N; ++i) ref += dy[i * M + j];
    CHECK(std::abs(db_fused[j] - ref) <= 1e-12);
    CHECK(std::abs(db_gemm[j] - ref) <= 1e-12);
  }
}

TEST_CASE("architecture: a block whose residual rule reads no branch output keeps none for backward",
          "[architecture]") {
  // gpt's and gpt_alpha's blocks differ only in the residual rule: lerp's
  // backward reads f (dα needs f − h), residual_add's reads neither f nor its
  // output, so gpt keeps no a_raw or m_raw (two N×C buffers a layer; its
  // branch outputs live in backward's scratch until the residual joins them).
  // Exact: arena buffers are whole 64-byte lines, N·C = 3·16·32 is a multiple.
  ModelConfig c = modern_config();
  c.n_kv_heads = 0;
  c.attn_window = 0;
  const std::int64_t B = 3, T = 16, N = B * T;
  using Add = Transformer<double, prenorm_rms, residual_add>;
  using Lerp = Transformer<double, prenorm_rms, lerp>;
  CHECK(Lerp::memory_plan(c, B, T).activations - Add::memory_plan(c, B, T).activations ==
        std::size_t(2 * c.n_layer * N * c.n_embd) * sizeof(double));
  // Its gradients are checked above (central differences); decoding, whose
  // branch outputs share that scratch, still equals the forward.
  CHECK(decode_vs_forward<Add>(c, 9) <= 1e-12);
}
