// normlab::diag: spectra, condition numbers and effective ranks of matrices
// with known singular values, covariance spectra of constructed point sets,
// unit norms of a fresh nGPT checkpoint, post-hoc normalization of a GPT one,
// and clear errors for files that are not checkpoints.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "normlab/app/diag_report.hpp"
#include "normlab/normlab.hpp"
#include "normlab/train/checkpoint.hpp"
#include "temp_dir.hpp"

#ifndef NORMLAB_TEST_DATA_DIR
#define NORMLAB_TEST_DATA_DIR "tests/data"
#endif

namespace fs = std::filesystem;
using namespace normlab;
using Catch::Contains;

namespace {

Eigen::MatrixXd random_matrix(Eigen::Index r, Eigen::Index c, std::mt19937_64& rng) {
  std::normal_distribution<double> nd(0.0, 1.0);
  Eigen::MatrixXd M(r, c);
  for (Eigen::Index i = 0; i < r; ++i)
    for (Eigen::Index j = 0; j < c; ++j) M(i, j) = nd(rng);
  return M;
}

// An n×k matrix with orthonormal columns: the Q factor of a random matrix.
Eigen::MatrixXd orthonormal_columns(Eigen::Index n, Eigen::Index k, std::mt19937_64& rng) {
  Eigen::HouseholderQR<Eigen::MatrixXd> qr(random_matrix(n, k, rng));
  return qr.householderQ() * Eigen::MatrixXd::Identity(n, k);
}

ModelConfig tiny_config() {
  ModelConfig c;
  c.vocab_size = 64;
  c.n_embd = 32;
  c.n_head = 4;
  c.n_layer = 2;
  return c;
}

double effective_rank_of(const std::vector<double>& s) {
  double sum = 0, h = 0;
  for (double v : s) sum += v;
  for (double v : s) h -= (v / sum) * std::log(v / sum);
  return std::exp(h);
}

// A checkpoint without optimizer state.
template <class Model>
void save(const fs::path& file, const Model& model, const std::map<std::string, std::string>& meta = {}) {
  save_checkpoint(file, model, static_cast<const AdamW<typename Model::scalar_type>*>(nullptr), meta);
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no normlab::Error>";
}

}  // namespace

TEST_CASE("diagnose: singular values of U diag(sigma) V^T are recovered") {
  std::mt19937_64 rng(7);
  const Eigen::Index m = 64, n = 48;
  std::vector<double> sigma(n);
  for (Eigen::Index i = 0; i < n; ++i) sigma[i] = 10.0 * std::pow(0.9, double(i));  // cond = 0.9^-47
  const Eigen::MatrixXd U = orthonormal_columns(m, n, rng), V = orthonormal_columns(n, n, rng);
  Eigen::VectorXd s(n);
  for (Eigen::Index i = 0; i < n; ++i) s(i) = sigma[i];
  const Eigen::MatrixXd M = U * s.asDiagonal() * V.transpose();

  for (const Eigen::MatrixXd& A : {M, Eigen::MatrixXd(M.transpose())}) {
    const diag::Spectrum sp = diag::singular_values(A);
    REQUIRE(sp.values.size() == sigma.size());
    double worst = 0;
    for (std::size_t i = 0; i < sigma.size(); ++i) worst = std::max(worst, std::abs(sp.values[i] - sigma[i]));
    CHECK(worst <= 1e-10);
    const double cond = sigma.front() / sigma.back();
    CHECK(std::abs(diag::condition_number(sp) - cond) <= 1e-10 * cond);
    CHECK(std::abs(diag::condition_number(A) - cond) <= 1e-10 * cond);
    CHECK(std::abs(diag::effective_rank(sp) - effective_rank_of(sigma)) <= 1e-10);
  }

  // A flat spectrum has effective rank = its size; one direction has rank 1.
  const Eigen::MatrixXd flat = 3.0 * U * V.transpose();
  CHECK(std::abs(diag::effective_rank(flat) - double(n)) <= 1e-10);
  CHECK(std::abs(diag::condition_number(flat) - 1.0) <= 1e-10);
  const Eigen::MatrixXd rank1 = 2.5 * U.col(0) * V.col(3).transpose();
  CHECK(std::abs(diag::effective_rank(rank1) - 1.0) <= 1e-10);
  CHECK(diag::condition_number(diag::Spectrum{{2.0, 1.0, 0.0}}) == std::numeric_limits<double>::infinity());
  CHECK(diag::effective_rank(diag::Spectrum{{0.0, 0.0}}) == 0.0);

  Eigen::MatrixXd bad = M;
  bad(3, 4) = std::nan("");
  CHECK_THROWS_AS(diag::singular_values(bad), Error);
}

TEST_CASE("diagnose: covariance eigenvalues of a constructed point set") {
  std::mt19937_64 rng(11);
  const Eigen::Index n = 300, d = 8;
  // Z: centered columns with ZᵀZ = (n−1) I, so the rows of Z diag(√λ) Rᵀ + μ
  // have sample covariance R diag(λ) Rᵀ exactly.
  Eigen::MatrixXd A = random_matrix(n, d, rng);
  A = A.rowwise() - A.colwise().mean();
  Eigen::HouseholderQR<Eigen::MatrixXd> qr(A);
  const Eigen::MatrixXd Z = std::sqrt(double(n - 1)) * (qr.householderQ() * Eigen::MatrixXd::Identity(n, d));
  const std::vector<double> lambda = {50.0, 20.0, 9.0, 4.0, 2.5, 1.0, 0.5, 0.125};
  Eigen::VectorXd sq(d);
  for (Eigen::Index i = 0; i < d; ++i) sq(i) = std::sqrt(lambda[i]);
  const Eigen::MatrixXd R = orthonormal_columns(d, d, rng);
  Eigen::RowVectorXd mu(d);
  for (Eigen::Index i = 0; i < d; ++i) mu(i) = 3.0 - 0.7 * double(i);
  const Eigen::MatrixXd X = (Z * sq.asDiagonal() * R.transpose()).rowwise() + mu;

  const diag::CovarianceSpectrum cs = diag::covariance_spectrum(X);
  REQUIRE(cs.eigenvalues.values.size() == lambda.size());
  for (std::size_t i = 0; i < lambda.size(); ++i) CHECK(std::abs(cs.eigenvalues.values[i] - lambda[i]) <= 1e-10);
  CHECK(std::abs(cs.condition_number - 400.0) <= 1e-10 * 400.0);

  // Fewer points than dimensions: rank-deficient, condition number infinite.
  CHECK(diag::covariance_spectrum(random_matrix(4, 8, rng)).condition_number ==
        std::numeric_limits<double>::infinity());
}

TEST_CASE("diagnose: row and column norm statistics") {
  Eigen::MatrixXd M = Eigen::MatrixXd::Zero(5, 2);
  for (int i = 0; i < 5; ++i) M(i, i % 2) = double(5 - i);  // row norms 5 4 3 2 1
  const diag::NormStats s = diag::row_norm_stats(M);
  CHECK(s.count == 5);
  CHECK(s.min == 1.0);
  CHECK(s.q1 == 2.0);
  CHECK(s.median == 3.0);
  CHECK(s.q3 == 4.0);
  CHECK(s.max == 5.0);
  CHECK(s.mean == 3.0);
  CHECK(s.spread() == 4.0);
  const diag::NormStats c = diag::col_norm_stats(M);  // columns: (5,3,1) and (4,2)
  CHECK(std::abs(c.min - std::sqrt(20.0)) <= 1e-15);
  CHECK(std::abs(c.max - std::sqrt(35.0)) <= 1e-14);
  const diag::NormStats q = diag::norm_stats({1.0, 2.0, 3.0, 4.0});  // quartiles interpolate
  CHECK(std::abs(q.q1 - 1.75) <= 1e-15);
  CHECK(std::abs(q.median - 2.5) <= 1e-15);
  CHECK(std::abs(q.q3 - 3.25) <= 1e-15);
}

TEST_CASE("diagnose: a fresh nGPT checkpoint has unit norms along d and no embedding-norm spread") {
  normlab::test::TempDir tmp("normlab_diagnose_test_");
  NGPT<double> model(tiny_config(), 1, 16);
  model.init(1);
  const fs::path file = tmp.path / "ngpt.safetensors";
  save(file, model);

  const diag::Report r = diag::diagnose_checkpoint(file);
  CHECK(r.source == file.string());
  CHECK(r.variant == "ngpt");
  CHECK(r.n_layer == 2);
  CHECK(r.matrices.size() == 2 * diag::matrix_types().size());
  // wte, lm_head and the six matrices of each layer.
  CHECK(r.axis_norms.size() == 2 + 6 * 2);
  for (const auto& a : r.axis_norms) {
    INFO(a.tensor);
    CHECK(std::abs(a.norms.min - 1.0) <= 1e-12);
    CHECK(std::abs(a.norms.max - 1.0) <= 1e-12);
  }
  CHECK(r.max_axis_norm_deviation() <= 1e-12);
  CHECK(r.wte.row_norms.spread() <= 1e-12);
  CHECK(r.lm_head.row_norms.spread() <= 1e-12);
  CHECK(std::abs(r.wte.row_norms.median - 1.0) <= 1e-12);
  CHECK(r.wte.covariance.eigenvalues.values.size() == 32);

  // Shapes and halves of W_fc; W_proj is d × 4d.
  CHECK(r.matrix(1, "W_fc_u").rows == 128);
  CHECK(r.matrix(1, "W_fc_gate").rows == 128);
  CHECK(r.matrix(0, "W_proj").cols == 128);
  for (const auto& m : r.matrices) {
    CHECK(m.singular_values.values.size() == 32);
    CHECK(m.effective_rank > 1.0);
    CHECK(m.effective_rank <= 32.0 + 1e-9);
    CHECK(m.condition_number >= 1.0);
  }

  // The learned scales at their initial effective values.
  int alphas = 0, sqk = 0, suv = 0, sz = 0;
  for (const auto& s : r.scales) {
    INFO(s.tensor);
    if (s.kind == "attn_alpha" || s.kind == "mlp_alpha") {
      ++alphas;
      CHECK(std::abs(s.mean - 0.05) <= 1e-12);
    } else if (s.kind == "sqk") {
      ++sqk;
      CHECK(std::abs(s.max - 1.0) <= 1e-12);
    } else if (s.kind == "suv") {
      ++suv;
      CHECK(std::abs(s.min - std::sqrt(32.0)) <= 1e-12);
    } else if (s.kind == "sz") {
      ++sz;
      CHECK(std::abs(s.mean - 1.0) <= 1e-12);
    }
  }
  CHECK(alphas == 4);
  CHECK(sqk == 2);
  CHECK(suv == 2);
  CHECK(sz == 1);

  // A float32 checkpoint: unit norms to float rounding.
  NGPT<float> mf(tiny_config(), 1, 16);
  mf.init(2);
  save(tmp.path / "ngpt_f32.safetensors", mf);
  const diag::Report rf = diag::diagnose_checkpoint(tmp.path / "ngpt_f32.safetensors");
  CHECK(rf.max_axis_norm_deviation() <= 1e-6);
  CHECK(rf.wte.row_norms.spread() <= 2e-6);
}

TEST_CASE("diagnose: GPT embedding norms spread, post-hoc normalization removes it") {
  normlab::test::TempDir tmp("normlab_diagnose_test_");
  ModelConfig c = tiny_config();
  // Initial std 1/√d puts the embedding rows near norm 1, as in trained GPTs
  // (the default 0.02 gives norms near 0.11 with a proportionally small spread).
  c.base_scale = 1.0 / std::sqrt(32.0);
  GPT<double> model(c, 1, 16);
  model.init(3);
  const fs::path file = tmp.path / "gpt.safetensors";
  save(file, model, {{"run.seq", "16"}});

  const diag::Report r = diag::diagnose_checkpoint(file);
  CHECK(r.variant == "gpt");
  CHECK(r.base_scale == c.base_scale);
  CHECK(r.wte.row_norms.spread() > 0.1);
  CHECK(r.lm_head.row_norms.spread() > 0.1);
  CHECK(r.max_axis_norm_deviation() > 0.1);
  // GPT constrains no matrix: the headline shows no "deviation from the unit norm"
  // it never had to keep (it showed 0.92).
  CHECK_FALSE(r.constrained);
  for (const auto& [label, value] : diag::headline(r))
    if (label.find("max abs(norm - 1)") != std::string::npos) CHECK(std::isnan(value));
  int gains = 0;
  for (const auto& s : r.scales) {
    CHECK(s.role == ParamRole::gain);
    CHECK(s.mean == 1.0);
    ++gains;
  }
  CHECK(gains == 2 * 2 + 1);

  diag::DiagnoseOptions opt;
  opt.post_hoc_normalize = true;
  const diag::Report n = diag::diagnose_checkpoint(file, opt);
  CHECK(n.post_hoc_normalized);
  CHECK(n.wte.row_norms.spread() <= 1e-12);
  CHECK(n.lm_head.row_norms.spread() <= 1e-12);
  CHECK(n.max_axis_norm_deviation() <= 1e-12);

  // Side by side, and as JSON.
  const std::string md = diag::compare_markdown({r, n});
  CHECK_THAT(md, Contains("| figure |") && Contains("wte row norm spread") && Contains("post-hoc normalized") &&
                     Contains("W_q condition number"));
  CHECK_THAT(md, !Contains("sqk effective"));  // no variant here has s_qk
  const nlohmann::json j = nlohmann::json::parse(diag::to_json(r).dump());
  CHECK(j["variant"] == "gpt");
  CHECK(j["layers"].size() == 2);
  CHECK(j["layers"][0]["matrices"]["W_fc_gate"]["singular_values"].size() == 32);
  CHECK(j["embeddings"]["wte"]["row_norms"]["spread"].get<double>() > 0.1);
  CHECK(j["activity"].is_null());
  CHECK_THAT(diag::format_table(r), Contains("W_fc_gate") && Contains("rmsnorm_f.weight"));
}

namespace {
struct plain_mlp_scheme : prenorm_rms {
  static constexpr std::string_view name = "plain_mlp";
  using mlp_activation = relu2;
};
}  // namespace

TEST_CASE("diagnose: a checkpoint of another shape (grouped kv heads, window, learned positions, biases) is read whole") {
  normlab::test::TempDir tmp("normlab_diagnose_test_");
  ModelConfig c = tiny_config();
  c.n_kv_heads = c.n_head / 2;
  c.attn_window = 4;
  c.d_ff = 48;
  c.positions = Positions::learned;
  c.n_positions = 16;
  c.bias = true;
  GPT<double> model(c, 1, 16);
  model.init(3);
  const fs::path file = tmp.path / "gpt_shapes.safetensors";
  save(file, model, {{"run.seq", "16"}});
  const diag::Report r = diag::diagnose_checkpoint(file);
  CHECK(r.variant == "gpt");
  CHECK(r.wte.row_norms.spread() > 0);  // the weights were loaded (a classic model would have been refused)
  for (const diag::MatrixReport& m : r.matrices) {
    INFO(m.type << " " << m.tensor);
    if (m.type == "W_k") CHECK(m.rows == c.kv_dim());
    if (m.type == "W_fc_u") CHECK(m.rows == 48);  // d_ff, not 4C
  }
  // A plain (ungated) MLP has no gate half to report.
  Transformer<double, plain_mlp_scheme, residual_add> p(c, 1, 16);
  p.init(3);
  const diag::Report rp = diag::diagnose(p);
  CHECK(std::none_of(rp.matrices.begin(), rp.matrices.end(), [](const diag::MatrixReport& m) { return m.type == "W_fc_gate"; }));
  CHECK(std::count_if(rp.matrices.begin(), rp.matrices.end(), [](const diag::MatrixReport& m) { return m.type == "W_fc_u"; }) ==
        c.n_layer);
}

TEST_CASE("diagnose: hidden-state norms and attention entropy on data") {
  const data::TokenData td = data::make_synthetic(20000, 4000, 1);
  ModelConfig c = tiny_config();
  c.vocab_size = 256;
  NGPT<double> model(c, 2, 16);
  model.init(5);
  diag::DiagnoseOptions opt;
  opt.batches = 2;
  opt.batch_size = 2;
  const diag::Report r = diag::diagnose(model, opt, &td);
  REQUIRE(r.activity.has_value());
  const auto& a = *r.activity;
  CHECK(a.batch_size == 2);
  CHECK(a.seq == 16);
  CHECK(std::isfinite(a.val_loss));
  REQUIRE(a.layers.size() == 2);
  double uniform = 0;
  for (int t = 0; t < 16; ++t) uniform += std::log(double(t + 1));
  uniform /= 16;
  for (const auto& l : a.layers) {
    CHECK(std::abs(l.hidden_norm_min - 1.0) <= 1e-12);  // nGPT's hidden states live on the sphere
    CHECK(std::abs(l.hidden_norm_max - 1.0) <= 1e-12);
    CHECK(l.attention_entropy > 0.0);
    CHECK(l.attention_entropy <= uniform + 1e-12);
    CHECK(std::abs(l.attention_entropy_uniform - uniform) <= 1e-12);
  }

  ModelConfig small = tiny_config();  // vocabulary 64 < the data's 256
  NGPT<double> m64(small, 2, 16);
  m64.init(1);
  CHECK_THROWS_WITH(diag::diagnose(m64, opt, &td), Contains("vocabulary"));
}

TEST_CASE("diagnose: with data, the embedding figures count only the tokens its training split holds") {
  ModelConfig c = tiny_config();
  c.vocab_size = 256;
  c.base_scale = 1.0 / std::sqrt(32.0);
  GPT<double> model(c, 1, 16);
  model.init(4);
  // Training text of four distinct tokens; the validation split holds a fifth,
  // which is not counted (the model never trained on it).
  data::TokenData td;
  td.vocab_size = 256;
  const std::vector<std::int64_t> seen = {3, 7, 11, 200};
  for (int i = 0; i < 400; ++i) td.train.push_back(std::uint16_t(seen[std::size_t(i) % 4]));
  td.val.assign(64, 9);
  // Rows never looked up, made far larger than the rest: counted, they would set
  // the maximum norm and dominate the covariance.
  auto& store = model.params();
  for (const char* name : {"transformer.wte.weight", "lm_head.weight"}) {
    double* w = store.value(store.spec(name).offset);
    for (std::int64_t row = 0; row < 256; ++row)
      if (std::find(seen.begin(), seen.end(), row) == seen.end())
        for (std::int64_t k = 0; k < 32; ++k) w[row * 32 + k] *= 100.0;
  }
  const diag::Report all = diag::diagnose(model);
  const diag::Report counted = diag::diagnose(model, {}, &td);
  CHECK_FALSE(all.embedding_rows_seen);
  CHECK(all.wte.rows_counted == 256);
  CHECK(counted.embedding_rows_seen);
  CHECK(counted.wte.rows_counted == 4);
  CHECK(counted.lm_head.rows_counted == 4);
  // The figures equal those of the four rows alone.
  const Eigen::MatrixXd E = diag::param_matrix(store, "transformer.wte.weight");
  Eigen::MatrixXd rows(4, 32);
  for (int i = 0; i < 4; ++i) rows.row(i) = E.row(seen[std::size_t(i)]);
  const diag::EmbeddingReport ref = diag::detail::embedding_report("wte", rows);
  CHECK(counted.wte.row_norms.max == ref.row_norms.max);
  CHECK(counted.wte.row_norms.min == ref.row_norms.min);
  CHECK(counted.wte.covariance.condition_number == ref.covariance.condition_number);
  CHECK(all.wte.row_norms.max > 10 * counted.wte.row_norms.max);
  // Four rows span at most 3 directions of d = 32: the full covariance is singular
  // (condition ∞), its conditioning within the rows' span is finite; with more
  // rows than d the two are the same number.
  CHECK(std::isinf(counted.wte.covariance.condition_number));
  CHECK(std::isfinite(counted.wte.covariance.span_condition_number));
  CHECK(counted.wte.covariance.span_condition_number ==
        counted.wte.covariance.eigenvalues.values[0] / counted.wte.covariance.eigenvalues.values[2]);
  CHECK(all.wte.covariance.span_condition_number == all.wte.covariance.condition_number);
  // The reports say which rows they count.
  const nlohmann::json j = nlohmann::json::parse(diag::to_json(counted).dump());
  CHECK(j["embeddings"]["wte"]["rows_counted"] == 4);
  CHECK(j["embeddings"]["rows"] == "tokens occurring in the data's training split");
  CHECK_THAT(diag::compare_markdown({all, counted}),
             Contains("| embedding rows counted | 256 (all) | 4 (seen in training) |"));
  CHECK_THAT(diag::format_table(counted), Contains("over 4 of 256 rows (the tokens that occur"));
  td.train.assign(10, 3);  // one distinct token: no spread or covariance to speak of
  CHECK_THROWS_WITH(diag::diagnose(model, {}, &td), Contains("fewer than 2 distinct tokens"));
}

TEST_CASE("diagnose: files that are not usable checkpoints give an error naming the file") {
  normlab::test::TempDir tmp("normlab_diagnose_test_");
  NGPT<float> model(tiny_config(), 1, 16);
  model.init(1);
  const fs::path good = tmp.path / "good.safetensors";
  save(good, model);

  const fs::path garbage = tmp.path / "garbage.safetensors";
  {
    std::ofstream out(garbage, std::ios::binary);
    std::mt19937_64 rng(3);
    for (int i = 0; i < 4096; ++i) out.put(char(rng() & 0xff));
  }
  const fs::path truncated = tmp.path / "truncated.safetensors";
  {
    std::ifstream in(good, std::ios::binary);
    std::string head(100, '\0');
    in.read(head.data(), 100);
    std::ofstream(truncated, std::ios::binary).write(head.data(), 100);
  }
  const fs::path unknown = tmp.path / "unknown_variant.safetensors";
  {
    io::SafetensorsWriter w;
    w.set_metadata("format", "normlab-checkpoint-1");
    w.set_metadata("variant", "hybrid_not_a_variant");
    const std::vector<float> x = {1.0f};
    w.add<float>("x", {1}, std::span<const float>(x));
    w.write_atomic(unknown);
  }
  const fs::path foreign = fs::path(NORMLAB_TEST_DATA_DIR) / "golden" / "gpt_small.safetensors";
  const fs::path missing = tmp.path / "no_such_checkpoint.safetensors";

  for (const fs::path& f : {garbage, truncated, unknown, foreign, missing}) {
    INFO(f.string());
    CHECK_THROWS_AS(diag::diagnose_checkpoint(f), Error);
    CHECK_THAT(error_of([&] { diag::diagnose_checkpoint(f); }), Contains(f.string()));
  }
  CHECK_THAT(error_of([&] { diag::diagnose_checkpoint(unknown); }), Contains("unknown variant"));
  CHECK_THAT(error_of([&] { diag::diagnose_checkpoint(foreign); }), Contains("not a normlab checkpoint"));

  // Metadata that disagrees with the tensors is refused before anything is built.
  const fs::path lying = tmp.path / "lying.safetensors";
  save(lying, model, {{"n_layer", "3000"}});
  CHECK_THAT(error_of([&] { diag::diagnose_checkpoint(lying); }),
             Contains(lying.string()) && Contains("transformer.h.2999.query.weight"));
  CHECK_NOTHROW(diag::diagnose_checkpoint(good));
}
