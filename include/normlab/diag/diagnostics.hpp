#pragma once
// normlab::diag — spectral and norm diagnostics of a trained model, the
// figures the nGPT paper uses to compare GPT with nGPT (docs/diagnostics.md):
//
//  * per layer, the singular values of W_q, W_k, W_v, W_o, both halves of W_fc
//    (u and gate) and W_proj, their condition number σmax/σmin and effective
//    rank exp(H(p)), p_i = σ_i / Σσ;
//  * the input embeddings and the LM head: distribution of row norms and the
//    eigenvalue spectrum (and condition number) of the d×d covariance of the
//    centered rows;
//  * norms along the embedding dimension of every matrix the model declares a
//    constraint axis for (1 for nGPT);
//  * the learned scales (α, s_qk, s_uv, s_z) as effective values, RMSNorm gains;
//  * with data: hidden-state norms after each block and the attention entropy.
//
// All linear algebra is float64 (Eigen). Everything that can fail on bad input
// throws normlab::Error with a message naming the file or tensor at fault.
#include <Eigen/Dense>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>


#include "normlab/core/error.hpp"
#include "normlab/diag/linalg.hpp"
#include "normlab/io/safetensors.hpp"
#include "normlab/nn/params.hpp"
#include "normlab/train/checkpoint.hpp"
#include "normlab/train/data.hpp"
#include "normlab/train/variants.hpp"

namespace normlab::diag {

// ============================================================== model access

// A parameter as a float64 matrix (rows [row0, row0 + nrows) of its 2-D shape).
template <class T>
Eigen::MatrixXd param_matrix(const ParamStore<T>& store, const std::string& name, std::int64_t row0 = 0,
                             std::int64_t nrows = -1) {
  const ParamSpec& s = store.spec(name);
  if (s.shape.size() != 2) throw Error("param_matrix: '" + name + "' is not a matrix");
  const std::int64_t R = s.shape[0], C = s.shape[1];
  if (nrows < 0) nrows = R - row0;
  if (row0 < 0 || row0 + nrows > R) throw Error("param_matrix: rows out of range for '" + name + "'");
  using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<const RowMajor> W(store.value(s.offset) + row0 * C, nrows, C);
  Eigen::MatrixXd M = W.template cast<double>();
  require_finite(M, "tensor '" + name + "'");
  return M;
}

// Scales every row (NormAxis::rows) or column (NormAxis::cols) of every matrix
// with a constraint axis to unit norm, in float64: the after-the-fact
// normalization of the nGPT paper's comparison. Zero rows/columns stay zero.
template <class T>
void post_hoc_normalize(ParamStore<T>& store) {
  for (const ParamSpec& s : store.specs()) {
    if (s.axis == NormAxis::none) continue;
    T* W = store.value(s.offset);
    const std::int64_t R = s.shape.at(0), C = s.shape.at(1);
    const bool rows = s.axis == NormAxis::rows;
    const std::int64_t outer = rows ? R : C, inner = rows ? C : R;
    auto at = [&](std::int64_t a, std::int64_t b) -> T& { return rows ? W[a * C + b] : W[b * C + a]; };
    for (std::int64_t a = 0; a < outer; ++a) {
      double ss = 0;
      for (std::int64_t b = 0; b < inner; ++b) ss += double(at(a, b)) * double(at(a, b));
      if (!(ss > 0)) continue;
      const double f = 1.0 / std::sqrt(ss);
      for (std::int64_t b = 0; b < inner; ++b) at(a, b) = T(double(at(a, b)) * f);
    }
  }
}

// "transformer.h.3.query.weight" -> ("query", 3); "lm_head.weight" -> ("lm_head", -1).
inline std::pair<std::string, std::int64_t> param_kind(const std::string& name) {
  std::string rest = name;
  std::int64_t layer = -1;
  const std::string blocks = "transformer.h.";
  if (rest.starts_with(blocks)) {
    const std::size_t dot = rest.find('.', blocks.size());
    if (dot != std::string::npos) {
      layer = std::strtoll(rest.substr(blocks.size(), dot - blocks.size()).c_str(), nullptr, 10);
      rest = rest.substr(dot + 1);
    }
  } else if (rest.starts_with("transformer.")) {
    rest = rest.substr(std::string("transformer.").size());
  }
  if (rest.ends_with(".weight")) rest.resize(rest.size() - std::string(".weight").size());
  return {rest, layer};
}

// ============================================================== the report

// The matrix types, in the order they are reported.
inline const std::vector<std::string>& matrix_types() {
  static const std::vector<std::string> t = {"W_q", "W_k", "W_v", "W_o", "W_fc_u", "W_fc_gate", "W_proj"};
  return t;
}

struct MatrixReport {
  std::string type;    // one of matrix_types()
  std::string tensor;  // reference name (W_fc halves share c_fc.weight)
  std::int64_t layer = 0;
  std::int64_t rows = 0, cols = 0;
  Spectrum singular_values;
  double condition_number = 0;
  double effective_rank = 0;
};

struct EmbeddingReport {
  std::string tensor;
  std::int64_t rows_counted = 0;  // the rows the figures are over (see Report::embedding_rows_seen)
  NormStats row_norms;
  CovarianceSpectrum covariance;
};

// Norms along the embedding dimension of one constrained tensor.
struct AxisNormReport {
  std::string tensor;
  NormAxis axis = NormAxis::rows;
  NormStats norms;
};

// A learned scale or gain, as its effective value (what multiplies the activations).
struct ScaleReport {
  std::string tensor;
  std::string kind;         // attn_alpha, mlp_alpha, sqk, suv, sz, rmsnorm_att, q_norm, ...
  std::int64_t layer = -1;  // -1: not per layer
  ParamRole role = ParamRole::scale;
  std::string effective;    // how the effective value is obtained, e.g. "|stored x 2.5|"
  std::size_t count = 0;
  double mean = 0, min = 0, max = 0;
};

struct LayerActivity {
  std::int64_t layer = 0;
  double hidden_norm_mean = 0, hidden_norm_min = 0, hidden_norm_max = 0;  // rows of the block's output
  double attention_entropy = 0;          // mean −Σ p log p over batches, heads and positions (nats)
  double attention_entropy_uniform = 0;  // the same for uniform causal attention: mean log(t+1)
};

struct ActivityReport {
  std::string data;  // description of the data
  std::int64_t batches = 0, batch_size = 0, seq = 0;
  double val_loss = 0;  // mean cross-entropy over the batches (nats/token)
  std::vector<LayerActivity> layers;
};

struct Report {
  std::string source;  // the checkpoint (empty for an in-memory model)
  std::string variant, signature;
  std::int64_t vocab_size = 0, n_embd = 0, n_head = 0, n_layer = 0;
  double base_scale = 0;
  bool post_hoc_normalized = false;
  bool constrained = false;  // the variant keeps its matrices' norms (nGPT: unit; anGPT: bounded)
  std::vector<MatrixReport> matrices;  // layer-major, matrix_types() order within a layer
  EmbeddingReport wte, lm_head;
  // With data: the embedding figures count only the rows of tokens that occur in
  // its training split. A row never looked up (or predicted) keeps its init,
  // which would weigh in the spread and the conditioning as if it were trained.
  bool embedding_rows_seen = false;
  std::vector<AxisNormReport> axis_norms;
  std::vector<ScaleReport> scales;
  std::optional<ActivityReport> activity;

  const MatrixReport& matrix(std::int64_t layer, const std::string& type) const {
    for (const auto& m : matrices)
      if (m.layer == layer && m.type == type) return m;
    throw Error("Report: no matrix " + type + " in layer " + std::to_string(layer));
  }
  // Largest |norm − 1| along the embedding dimension over every constrained tensor.
  double max_axis_norm_deviation() const {
    double worst = 0;
    for (const auto& a : axis_norms)
      worst = std::max({worst, std::abs(a.norms.min - 1.0), std::abs(a.norms.max - 1.0)});
    return worst;
  }
};

struct DiagnoseOptions {
  bool post_hoc_normalize = false;  // normalize the model's matrices in place first
  std::int64_t batches = 0;         // validation batches for the activity figures (0: none)
  std::int64_t batch_size = 4;      // at most the model's max_batch()
};

namespace detail {

inline MatrixReport matrix_report(std::string type, std::string tensor, std::int64_t layer, const Eigen::MatrixXd& M) {
  MatrixReport r;
  r.type = std::move(type);
  r.tensor = std::move(tensor);
  r.layer = layer;
  r.rows = M.rows();
  r.cols = M.cols();
  r.singular_values = singular_values(M);
  r.condition_number = condition_number(r.singular_values);
  r.effective_rank = effective_rank(r.singular_values);
  return r;
}

// Over the rows `rows` of E (every row when empty).
inline EmbeddingReport embedding_report(const std::string& tensor, const Eigen::MatrixXd& E,
                                        const std::vector<std::int64_t>& rows = {}) {
  EmbeddingReport r;
  r.tensor = tensor;
  const Eigen::MatrixXd S = rows.empty() ? E : Eigen::MatrixXd(E(rows, Eigen::all));
  r.rows_counted = S.rows();
  r.row_norms = row_norm_stats(S);
  r.covariance = covariance_spectrum(S);
  return r;
}

// The distinct token ids of `tokens`, ascending (each below `vocab`).
inline std::vector<std::int64_t> tokens_occurring(const std::vector<std::uint16_t>& tokens, std::int64_t vocab) {
  std::vector<char> seen(static_cast<std::size_t>(vocab), 0);
  for (const std::uint16_t t : tokens)
    if (t < vocab) seen[t] = 1;
  std::vector<std::int64_t> rows;
  for (std::int64_t i = 0; i < vocab; ++i)
    if (seen[static_cast<std::size_t>(i)]) rows.push_back(i);
  return rows;
}

template <class Model>
ActivityReport activity(Model& model, const data::TokenData& td, const DiagnoseOptions& opt) {
  using T = typename Model::scalar_type;
  const ModelConfig& c = model.config();  // the data's vocabulary was checked against it by diagnose()
  if (opt.batch_size < 1) throw Error("diagnose: batch size must be positive");
  ActivityReport out;
  out.data = td.description;
  out.batches = opt.batches;
  out.batch_size = std::min(opt.batch_size, model.max_batch());
  out.seq = model.max_seq();
  const std::int64_t B = out.batch_size, seq = out.seq, C = c.n_embd, H = c.n_head, L = c.n_layer, N = B * seq;
  std::vector<std::int64_t> idx(static_cast<std::size_t>(N)), tgt(idx.size());
  std::vector<double> hsum(L, 0), hmin(L, std::numeric_limits<double>::infinity()), hmax(L, 0), esum(L, 0);
  double loss = 0, usum = 0;
  for (std::int64_t t = 0; t < seq; ++t) usum += std::log(double(t + 1));
  for (std::int64_t i = 0; i < opt.batches; ++i) {
    data::eval_batch(td.val, B, seq, i, idx.data(), tgt.data(), "val");
    loss += model.forward(idx.data(), tgt.data(), B, seq);
    for (std::int64_t l = 0; l < L; ++l) {
      const T* h = model.block_output(l);
      for (std::int64_t r = 0; r < N; ++r) {
        double ss = 0;
        for (std::int64_t k = 0; k < C; ++k) ss += double(h[r * C + k]) * double(h[r * C + k]);
        const double n = std::sqrt(ss);
        hsum[l] += n;
        hmin[l] = std::min(hmin[l], n);
        hmax[l] = std::max(hmax[l], n);
      }
      const std::vector<T> probs = model.attention_probs(l);
      const T* P = probs.data();
      double e = 0;
      for (std::int64_t bh = 0; bh < B * H; ++bh)
        for (std::int64_t t = 0; t < seq; ++t) {
          const T* row = P + (bh * seq + t) * seq;
          for (std::int64_t s = 0; s <= t; ++s) {
            const double p = double(row[s]);
            if (p > 0) e -= p * std::log(p);
          }
        }
      esum[l] += e;
    }
  }
  const double nb = double(opt.batches);
  out.val_loss = loss / nb;
  for (std::int64_t l = 0; l < L; ++l) {
    LayerActivity a;
    a.layer = l;
    a.hidden_norm_mean = hsum[l] / (nb * double(N));
    a.hidden_norm_min = hmin[l];
    a.hidden_norm_max = hmax[l];
    a.attention_entropy = esum[l] / (nb * double(B * H * seq));
    a.attention_entropy_uniform = usum / double(seq);
    out.layers.push_back(a);
  }
  return out;
}

}  // namespace detail

// Every figure of the report for `model`. With opt.post_hoc_normalize the
// model's matrices are first normalized in place (post_hoc_normalize). With
// `data` and opt.batches > 0, runs opt.batches fixed validation batches of
// (min(batch_size, max_batch), max_seq) tokens through the model.
template <class Model>
Report diagnose(Model& model, const DiagnoseOptions& opt = {}, const data::TokenData* td = nullptr) {
  auto& store = model.params();
  if (opt.post_hoc_normalize) post_hoc_normalize(store);
  const ModelConfig& c = model.config();
  Report r;
  r.variant = variant_name_of<Model>();
  r.signature = Model::variant_signature();
  r.constrained = Model::scheme::constraint::mode != WeightConstraint::none;
  r.vocab_size = c.vocab_size;
  r.n_embd = c.n_embd;
  r.n_head = c.n_head;
  r.n_layer = c.n_layer;
  r.base_scale = c.base_scale;
  r.post_hoc_normalized = opt.post_hoc_normalize;

  const std::int64_t F = c.ff_dim();
  for (std::int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    auto add = [&](const char* type, const std::string& tensor, std::int64_t row0 = 0, std::int64_t nrows = -1) {
      r.matrices.push_back(detail::matrix_report(type, tensor, l, param_matrix(store, tensor, row0, nrows)));
    };
    add("W_q", p + "query.weight");
    add("W_k", p + "key.weight");
    add("W_v", p + "value.weight");
    add("W_o", p + "att_c_proj.weight");
    add("W_fc_u", p + "c_fc.weight", 0, F);
    // A gated MLP's c_fc is [u | gate] (2F rows); a plain one has only u (F rows).
    if (store.spec(p + "c_fc.weight").shape.at(0) == 2 * F) add("W_fc_gate", p + "c_fc.weight", F, F);
    add("W_proj", p + "mlp_c_proj.weight");
  }
  std::vector<std::int64_t> rows;
  if (td) {
    if (td->vocab_size > c.vocab_size)
      throw Error("the data's vocabulary (" + std::to_string(td->vocab_size) + ") is larger than the model's (" +
                  std::to_string(c.vocab_size) + ")");
    rows = detail::tokens_occurring(td->train, c.vocab_size);
    if (rows.size() < 2) throw Error("diagnose: the data's training split holds fewer than 2 distinct tokens");
    r.embedding_rows_seen = true;
  }
  r.wte = detail::embedding_report("transformer.wte.weight", param_matrix(store, "transformer.wte.weight"), rows);
  r.lm_head = detail::embedding_report("lm_head.weight", param_matrix(store, "lm_head.weight"), rows);

  for (const ParamSpec& s : store.specs()) {
    if (s.axis != NormAxis::none) {
      const Eigen::MatrixXd M = param_matrix(store, s.name);
      r.axis_norms.push_back({s.name, s.axis, s.axis == NormAxis::rows ? row_norm_stats(M) : col_norm_stats(M)});
      continue;
    }
    if (s.role == ParamRole::matrix) continue;
    ScaleReport sr;
    sr.tensor = s.name;
    std::tie(sr.kind, sr.layer) = param_kind(s.name);
    sr.role = s.role;
    // The reference's re-parameterisation: effective = stored × init/base_scale.
    double k = 1.0;
    bool absolute = false;
    if (s.role == ParamRole::alpha) {
      k = c.alpha_init / c.base_scale;
      absolute = true;
    } else if (s.role == ParamRole::scale) {
      if (sr.kind == "sqk") k = c.sqk_init / c.base_scale;
      else if (sr.kind == "suv") k = c.suv_init * std::sqrt(double(c.n_embd));
      else if (sr.kind == "sz") k = c.sz_init / c.base_scale;
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, absolute ? "|stored x %.6g|" : "stored x %.6g", k);
    sr.effective = s.role == ParamRole::gain ? "stored" : buf;
    const auto* v = store.value(s.offset);
    sr.count = s.numel;
    sr.min = std::numeric_limits<double>::infinity();
    sr.max = -std::numeric_limits<double>::infinity();
    double sum = 0;
    for (std::size_t i = 0; i < s.numel; ++i) {
      double e = double(v[i]) * k;
      if (absolute) e = std::abs(e);
      if (!std::isfinite(e)) throw Error("tensor '" + s.name + "' has non-finite entries (NaN or inf)");
      sum += e;
      sr.min = std::min(sr.min, e);
      sr.max = std::max(sr.max, e);
    }
    sr.mean = s.numel ? sum / double(s.numel) : 0.0;
    r.scales.push_back(std::move(sr));
  }
  if (td && opt.batches > 0) r.activity = detail::activity(model, *td, opt);
  return r;
}

// ============================================================== checkpoints

namespace detail {

inline std::int64_t meta_int(const io::SafetensorsFile& f, const std::string& key, std::int64_t lo, std::int64_t hi) {
  const std::string v = f.metadata_value(key);  // names the file when missing
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE || x < lo || x > hi)
    throw Error(f.source() + ": metadata " + key + " = '" + v + "' is not an integer in [" + std::to_string(lo) +
                ", " + std::to_string(hi) + "]");
  return x;
}

inline double meta_positive_double(const io::SafetensorsFile& f, const std::string& key) {
  const std::string v = f.metadata_value(key);
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(x) || !(x > 0))
    throw Error(f.source() + ": metadata " + key + " = '" + v + "' is not a positive number");
  return x;
}

inline void expect_shape(const io::SafetensorsFile& f, const std::string& tensor, const std::vector<std::int64_t>& shape) {
  const io::TensorInfo& ti = f.info(tensor);  // names the file when missing
  if (ti.shape != shape)
    throw Error(f.source() + ": tensor '" + tensor + "' has shape " + shape_string(ti.shape) +
                ", the checkpoint's metadata implies " + shape_string(shape));
}

}  // namespace detail

// Loads a checkpoint written by save_checkpoint (any registered variant, F32
// or F64) into a float64 model and diagnoses it. The model is built for
// (batch, run.seq from the metadata, else 64), batch = opt.batch_size when
// data is given, else 1. Anything wrong with the file — unreadable, not
// safetensors, truncated, not a normlab checkpoint, an unknown variant,
// metadata that does not match the tensors — is a normlab::Error whose
// message starts with the file name.
//
// Every built-in variant's model is built here (dispatch by the file's variant),
// so this is compiled once in normlab_diag (src/diag_checkpoint.cpp) where a
// program links it (NORMLAB_PREBUILT_DIAG); inline otherwise.
#if defined(NORMLAB_DIAG_LIBRARY_CHECKPOINT)
#define NORMLAB_DIAG_CHECKPOINT
#define NORMLAB_DIAG_CHECKPOINT_BODY 1
#elif defined(NORMLAB_PREBUILT_DIAG) || defined(NORMLAB_DIAG_LIBRARY_SOLVERS)
#define NORMLAB_DIAG_CHECKPOINT
#define NORMLAB_DIAG_CHECKPOINT_BODY 0
#else
#define NORMLAB_DIAG_CHECKPOINT inline
#define NORMLAB_DIAG_CHECKPOINT_BODY 1
#endif
NORMLAB_DIAG_CHECKPOINT Report diagnose_checkpoint(const std::filesystem::path& path, const DiagnoseOptions& opt = {},
                                                   const data::TokenData* td = nullptr);
#if NORMLAB_DIAG_CHECKPOINT_BODY
NORMLAB_DIAG_CHECKPOINT Report diagnose_checkpoint(const std::filesystem::path& path, const DiagnoseOptions& opt,
                                                   const data::TokenData* td) {
  const std::string shown = path.string();
  try {
    const io::SafetensorsFile f = io::SafetensorsFile::open(path);
    const auto& meta = f.metadata();
    auto fail = [&](const std::string& msg) { throw Error(shown + ": " + msg); };
    const auto fmt = meta.find("format");
    if (fmt == meta.end() || fmt->second != "normlab-checkpoint-1")
      fail("not a normlab checkpoint (its metadata lacks \"format\": \"normlab-checkpoint-1\"; checkpoints are "
           "written by the train-<variant> tools or save_checkpoint)");
    if (!meta.count("variant")) fail("not a normlab checkpoint (no \"variant\" in its metadata)");
    const std::string variant = meta.at("variant");
    if (!is_builtin_variant_name(variant)) fail("unknown variant '" + variant + "' (known: " + known_variants() + ")");

    ModelConfig mc;
    mc.vocab_size = detail::meta_int(f, "vocab_size", 1, std::int64_t(1) << 24);
    mc.n_embd = detail::meta_int(f, "n_embd", 1, std::int64_t(1) << 16);
    mc.n_head = detail::meta_int(f, "n_head", 1, mc.n_embd);
    mc.n_layer = detail::meta_int(f, "n_layer", 1, 4096);
    // The attention's and the MLP's shapes, positions and biases (absent in older
    // checkpoints: the classic model).
    if (meta.count("n_kv_heads")) mc.n_kv_heads = detail::meta_int(f, "n_kv_heads", 1, mc.n_head);
    if (meta.count("d_ff")) mc.d_ff = detail::meta_int(f, "d_ff", 1, std::int64_t(1) << 20);
    if (meta.count("attn_window")) mc.attn_window = detail::meta_int(f, "attn_window", 0, std::int64_t(1) << 20);
    if (meta.count("n_positions")) mc.n_positions = detail::meta_int(f, "n_positions", 0, std::int64_t(1) << 20);
    if (meta.count("bias")) mc.bias = detail::meta_int(f, "bias", 0, 1) != 0;
    if (meta.count("positions") && !parse_positions(meta.at("positions"), mc.positions))
      fail("positions '" + meta.at("positions") + "' is none of rope, none, learned");
    // Every real-valued config field the checkpoint records (load_checkpoint
    // refuses a model built with other values).
    // base_scale and rmsnorm_eps must also be positive (they divide).
    for (const auto& [key, field] : checkpoint_real_fields()) {
      if (!meta.count(key)) continue;
      const std::string_view k = key;
      mc.*field = k == "base_scale" || k == "rmsnorm_eps" ? detail::meta_positive_double(f, key) : checkpoint_double(f, key);
    }
    // The context the model was built for (anGPT's attention factor depends on it).
    const std::int64_t seq = meta.count("max_seq")   ? detail::meta_int(f, "max_seq", 1, 1 << 16)
                             : meta.count("run.seq") ? detail::meta_int(f, "run.seq", 1, 1 << 16)
                                                     : 64;
    const std::int64_t batch = (td && opt.batches > 0) ? std::max<std::int64_t>(opt.batch_size, 1) : 1;
    // The tensors bound the metadata before anything is allocated.
    const std::int64_t V = mc.vocab_size, C = mc.n_embd;
    detail::expect_shape(f, "transformer.wte.weight", {V, C});
    detail::expect_shape(f, "lm_head.weight", {V, C});
    detail::expect_shape(f, "transformer.h." + std::to_string(mc.n_layer - 1) + ".query.weight", {C, C});
    const double attention_elems = double(batch) * double(mc.n_head) * double(seq) * double(seq);
    if (attention_elems > double(std::int64_t(1) << 28))
      fail("run.seq = " + std::to_string(seq) + " with " + std::to_string(mc.n_head) + " heads and batch " +
           std::to_string(batch) + " needs an attention buffer too large to diagnose here");
    mc.validate();

    Report r;
    dispatch_variant(variant, [&](auto tag) {
      using Model = typename decltype(tag)::template model<double>;
      Model model(mc, batch, seq);
      load_checkpoint(f, model, static_cast<AdamW<double>*>(nullptr));
      r = diagnose(model, opt, td);
    });
    r.source = shown;
    return r;
  } catch (const Error& e) {
    const std::string m = e.what();
    if (m.starts_with(shown)) throw;
    throw Error(shown + ": " + m);
  } catch (const std::bad_alloc&) {
    throw Error(shown + ": out of memory building the model its metadata describes");
  } catch (const std::length_error& e) {
    throw Error(shown + ": " + e.what());
  }
}
#endif

}  // namespace normlab::diag
