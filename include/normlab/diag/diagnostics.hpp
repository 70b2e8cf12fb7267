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

#include <nlohmann/json.hpp>

#include "normlab/core/error.hpp"
#include "normlab/io/safetensors.hpp"
#include "normlab/nn/params.hpp"
#include "normlab/train/checkpoint.hpp"
#include "normlab/train/data.hpp"
#include "normlab/train/variants.hpp"

namespace normlab::diag {

// ============================================================== linear algebra

// Singular values (or eigenvalues), largest first.
struct Spectrum {
  std::vector<double> values;
  double max() const { return values.empty() ? std::nan("") : values.front(); }
  double min() const { return values.empty() ? std::nan("") : values.back(); }
};

inline void require_finite(const Eigen::MatrixXd& M, const std::string& what) {
  if (!M.allFinite()) throw Error(what + " has non-finite entries (NaN or inf)");
}

// The two eigen-solvers (Eigen's BDCSVD and SelfAdjointEigenSolver) are most of
// this header's compile time at -O3. A program that links normlab_diag
// (NORMLAB_PREBUILT_DIAG) gets them compiled once (src/diag_spectra.cpp);
// without it they are inline here, header-only as ever.
#if defined(NORMLAB_DIAG_LIBRARY_SOLVERS)
#define NORMLAB_DIAG_SOLVER
#define NORMLAB_DIAG_SOLVER_BODIES 1
#elif defined(NORMLAB_PREBUILT_DIAG) || defined(NORMLAB_DIAG_LIBRARY_CHECKPOINT)
#define NORMLAB_DIAG_SOLVER
#define NORMLAB_DIAG_SOLVER_BODIES 0
#else
#define NORMLAB_DIAG_SOLVER inline
#define NORMLAB_DIAG_SOLVER_BODIES 1
#endif
// All min(rows, cols) singular values of M, descending (Eigen::BDCSVD, values only).
NORMLAB_DIAG_SOLVER Spectrum singular_values(const Eigen::MatrixXd& M);

// σmax / σmin; +inf when σmin is 0 (rank-deficient), NaN for an empty spectrum.
inline double condition_number(const Spectrum& s) {
  if (s.values.empty()) return std::nan("");
  if (!(s.min() > 0)) return std::numeric_limits<double>::infinity();
  return s.max() / s.min();
}
inline double condition_number(const Eigen::MatrixXd& M) { return condition_number(singular_values(M)); }

// exp(−Σ p_i log p_i) with p_i = σ_i / Σσ (0 log 0 = 0): between 1 (one
// direction carries everything) and min(rows, cols) (a flat spectrum). 0 for a
// zero matrix.
inline double effective_rank(const Spectrum& s) {
  double total = 0;
  for (double v : s.values) total += v;
  if (!(total > 0)) return 0.0;
  double h = 0;
  for (double v : s.values) {
    const double p = v / total;
    if (p > 0) h -= p * std::log(p);
  }
  return std::exp(h);
}
inline double effective_rank(const Eigen::MatrixXd& M) { return effective_rank(singular_values(M)); }

// Distribution of a set of norms: extremes, quartiles (linear interpolation
// between order statistics, numpy's default) and mean.
struct NormStats {
  std::size_t count = 0;
  double min = std::nan(""), q1 = std::nan(""), median = std::nan(""), q3 = std::nan(""), max = std::nan("");
  double mean = std::nan("");
  double spread() const { return max - min; }
  double relative_spread() const { return median > 0 ? (max - min) / median : std::nan(""); }
};
using RowNormStats = NormStats;

inline NormStats norm_stats(std::vector<double> v) {
  NormStats s;
  s.count = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto quantile = [&](double p) {
    const double h = double(v.size() - 1) * p;
    const auto lo = static_cast<std::size_t>(std::floor(h));
    const std::size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (h - double(lo)) * (v[hi] - v[lo]);
  };
  s.min = v.front();
  s.max = v.back();
  s.q1 = quantile(0.25);
  s.median = quantile(0.5);
  s.q3 = quantile(0.75);
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / double(v.size());
  return s;
}

// Euclidean norms of the rows (columns) of M.
inline NormStats row_norm_stats(const Eigen::MatrixXd& M) {
  const Eigen::VectorXd n = M.rowwise().norm();
  std::vector<double> v(static_cast<std::size_t>(n.size()));
  Eigen::Map<Eigen::VectorXd>(v.data(), n.size()) = n;
  return norm_stats(std::move(v));
}
inline NormStats col_norm_stats(const Eigen::MatrixXd& M) {
  const Eigen::RowVectorXd n = M.colwise().norm();
  std::vector<double> v(static_cast<std::size_t>(n.size()));
  Eigen::Map<Eigen::RowVectorXd>(v.data(), n.size()) = n;
  return norm_stats(std::move(v));
}

// Sample covariance (d×d) of the rows of X (n×d): rows centered on their mean,
// divided by n − 1.
inline Eigen::MatrixXd covariance(const Eigen::MatrixXd& X) {
  if (X.rows() < 2) throw Error("covariance: need at least 2 rows, got " + std::to_string(X.rows()));
  require_finite(X, "covariance: the matrix");
  const Eigen::MatrixXd Xc = X.rowwise() - X.colwise().mean();
  return (Xc.transpose() * Xc) / double(X.rows() - 1);
}

// Eigenvalues of the covariance, largest first, and λmax/λmin (+inf when
// λmin ≤ 0, i.e. the rows span fewer than d directions).
struct CovarianceSpectrum {
  Spectrum eigenvalues;
  double condition_number = std::nan("");
};

NORMLAB_DIAG_SOLVER CovarianceSpectrum covariance_spectrum(const Eigen::MatrixXd& X);

#if NORMLAB_DIAG_SOLVER_BODIES
NORMLAB_DIAG_SOLVER Spectrum singular_values(const Eigen::MatrixXd& M) {
  if (M.size() == 0) throw Error("singular_values: the matrix is empty");
  require_finite(M, "singular_values: the matrix");
  Eigen::BDCSVD<Eigen::MatrixXd> svd(M);  // computation options 0: singular values only
  const Eigen::VectorXd& s = svd.singularValues();
  Spectrum out;
  out.values.assign(s.data(), s.data() + s.size());
  std::sort(out.values.begin(), out.values.end(), std::greater<double>());
  return out;
}

NORMLAB_DIAG_SOLVER CovarianceSpectrum covariance_spectrum(const Eigen::MatrixXd& X) {
  const Eigen::MatrixXd C = covariance(X);
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(C, Eigen::EigenvaluesOnly);
  if (es.info() != Eigen::Success) throw Error("covariance_spectrum: the eigensolver did not converge");
  const Eigen::VectorXd& ev = es.eigenvalues();
  CovarianceSpectrum out;
  out.eigenvalues.values.assign(ev.data(), ev.data() + ev.size());
  std::sort(out.eigenvalues.values.begin(), out.eigenvalues.values.end(), std::greater<double>());
  const double lo = out.eigenvalues.min(), hi = out.eigenvalues.max();
  out.condition_number = lo > 0 ? hi / lo : std::numeric_limits<double>::infinity();
  return out;
}
#endif

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

inline EmbeddingReport embedding_report(const std::string& tensor, const Eigen::MatrixXd& E) {
  EmbeddingReport r;
  r.tensor = tensor;
  r.row_norms = row_norm_stats(E);
  r.covariance = covariance_spectrum(E);
  return r;
}

template <class Model>
ActivityReport activity(Model& model, const data::TokenData& td, const DiagnoseOptions& opt) {
  using T = typename Model::scalar_type;
  const ModelConfig& c = model.config();
  if (td.vocab_size > c.vocab_size)
    throw Error("the data's vocabulary (" + std::to_string(td.vocab_size) + ") is larger than the model's (" +
                std::to_string(c.vocab_size) + ")");
  if (opt.batch_size < 1) throw Error("diagnose: batch size must be positive");
  ActivityReport out;
  out.data = td.description;
  out.batches = opt.batches;
  out.batch_size = std::min(opt.batch_size, model.max_batch());
  out.seq = model.max_seq();
  const std::int64_t B = out.batch_size, Tn = out.seq, C = c.n_embd, H = c.n_head, L = c.n_layer, N = B * Tn;
  std::vector<std::int64_t> idx(static_cast<std::size_t>(N)), tgt(idx.size());
  std::vector<double> hsum(L, 0), hmin(L, std::numeric_limits<double>::infinity()), hmax(L, 0), esum(L, 0);
  double loss = 0, usum = 0;
  for (std::int64_t t = 0; t < Tn; ++t) usum += std::log(double(t + 1));
  for (std::int64_t i = 0; i < opt.batches; ++i) {
    data::eval_batch(td.val, B, Tn, i, idx.data(), tgt.data(), "val");
    loss += model.forward(idx.data(), tgt.data(), B, Tn);
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
        for (std::int64_t t = 0; t < Tn; ++t) {
          const T* row = P + (bh * Tn + t) * Tn;
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
    a.attention_entropy = esum[l] / (nb * double(B * H * Tn));
    a.attention_entropy_uniform = usum / double(Tn);
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
  r.wte = detail::embedding_report("transformer.wte.weight", param_matrix(store, "transformer.wte.weight"));
  r.lm_head = detail::embedding_report("lm_head.weight", param_matrix(store, "lm_head.weight"));

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
    bool known = false;
    dispatch_variant(variant, [&](auto) { known = true; });
    if (!known) fail("unknown variant '" + variant + "' (known: " + known_variants() + ")");

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

// ============================================================== output

namespace detail {

inline std::string num(double x, int prec = 4) {
  if (std::isnan(x)) return "-";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char b[48];
  std::snprintf(b, sizeof b, "%.*g", prec, x);
  return b;
}

inline nlohmann::json stats_json(const NormStats& s) {
  return {{"count", s.count}, {"min", s.min},     {"q1", s.q1},           {"median", s.median},
          {"q3", s.q3},       {"max", s.max},     {"mean", s.mean},       {"spread", s.spread()},
          {"relative_spread", s.relative_spread()}};
}

inline const char* axis_name(NormAxis a) {
  return a == NormAxis::rows ? "rows" : a == NormAxis::cols ? "cols" : "none";
}

// Left-aligned in w columns, always at least one space after it.
inline std::string pad(std::string s, std::size_t w) {
  s.append(s.size() < w ? w - s.size() : 1, ' ');
  return s;
}
// Right-aligned in w columns, always at least one space before it.
inline std::string rpad(const std::string& s, std::size_t w) {
  return s.size() < w ? std::string(w - s.size(), ' ') + s : " " + s;
}

}  // namespace detail

// One JSON document with every figure (spectra in full). Non-finite numbers
// (an infinite condition number) come out as null.
inline nlohmann::json to_json(const Report& r) {
  using nlohmann::json;
  json j;
  j["file"] = r.source;
  j["variant"] = r.variant;
  j["signature"] = r.signature;
  j["config"] = {{"vocab_size", r.vocab_size}, {"n_embd", r.n_embd}, {"n_head", r.n_head},
                 {"n_layer", r.n_layer},       {"base_scale", r.base_scale}};
  j["post_hoc_normalized"] = r.post_hoc_normalized;
  json layers = json::array();
  for (std::int64_t l = 0; l < r.n_layer; ++l) {
    json mats = json::object();
    for (const auto& m : r.matrices) {
      if (m.layer != l) continue;
      mats[m.type] = {{"tensor", m.tensor},
                      {"shape", {m.rows, m.cols}},
                      {"sigma_max", m.singular_values.max()},
                      {"sigma_min", m.singular_values.min()},
                      {"condition_number", m.condition_number},
                      {"effective_rank", m.effective_rank},
                      {"singular_values", m.singular_values.values}};
    }
    layers.push_back({{"layer", l}, {"matrices", mats}});
  }
  j["layers"] = layers;
  auto emb = [](const EmbeddingReport& e) {
    return json{{"tensor", e.tensor},
                {"row_norms", detail::stats_json(e.row_norms)},
                {"covariance_condition_number", e.covariance.condition_number},
                {"covariance_eigenvalues", e.covariance.eigenvalues.values}};
  };
  j["embeddings"] = {{"wte", emb(r.wte)}, {"lm_head", emb(r.lm_head)}};
  json axes = json::array();
  for (const auto& a : r.axis_norms)
    axes.push_back({{"tensor", a.tensor}, {"axis", detail::axis_name(a.axis)}, {"norms", detail::stats_json(a.norms)}});
  j["axis_norms"] = axes;
  j["max_axis_norm_deviation"] = r.max_axis_norm_deviation();
  json scales = json::array();
  for (const auto& s : r.scales)
    scales.push_back({{"tensor", s.tensor},
                      {"kind", s.kind},
                      {"layer", s.layer},
                      {"role", role_name(s.role)},
                      {"effective", s.effective},
                      {"count", s.count},
                      {"mean", s.mean},
                      {"min", s.min},
                      {"max", s.max}});
  j["scales"] = scales;
  if (r.activity) {
    const ActivityReport& a = *r.activity;
    json ls = json::array();
    for (const auto& l : a.layers)
      ls.push_back({{"layer", l.layer},
                    {"hidden_norm", {{"mean", l.hidden_norm_mean}, {"min", l.hidden_norm_min}, {"max", l.hidden_norm_max}}},
                    {"attention_entropy", l.attention_entropy},
                    {"attention_entropy_uniform", l.attention_entropy_uniform}});
    j["activity"] = {{"data", a.data},         {"batches", a.batches}, {"batch_size", a.batch_size},
                     {"seq", a.seq},           {"val_loss", a.val_loss}, {"layers", ls}};
  } else {
    j["activity"] = nullptr;
  }
  return j;
}

// The headline figures, always the same rows in the same order (NaN where a
// figure does not apply to the variant): what --compare puts side by side.
inline std::vector<std::pair<std::string, double>> headline(const Report& r) {
  std::vector<std::pair<std::string, double>> h;
  const double nan = std::nan("");
  for (const EmbeddingReport* e : {&r.wte, &r.lm_head}) {
    const std::string n = e == &r.wte ? "wte" : "lm_head";
    h.push_back({n + " row norm min", e->row_norms.min});
    h.push_back({n + " row norm median", e->row_norms.median});
    h.push_back({n + " row norm max", e->row_norms.max});
    h.push_back({n + " row norm spread (max-min)", e->row_norms.spread()});
    h.push_back({n + " covariance condition number", e->covariance.condition_number});
  }
  for (const std::string& t : matrix_types()) {
    double cs = 0, es = 0;
    int n = 0;
    for (const auto& m : r.matrices)
      if (m.type == t) {
        cs += m.condition_number;
        es += m.effective_rank;
        ++n;
      }
    h.push_back({t + " condition number (mean over layers)", n ? cs / n : nan});
    h.push_back({t + " effective rank (mean over layers)", n ? es / n : nan});
  }
  // Only a variant that constrains its matrices has a norm to keep; for the others
  // the figure would read as a violation of a rule they do not have.
  h.push_back({"max abs(norm - 1) along d (constrained matrices)",
               r.constrained || r.post_hoc_normalized ? r.max_axis_norm_deviation() : nan});
  auto mean_of = [&](auto pred) {
    double s = 0;
    std::size_t n = 0;
    for (const auto& x : r.scales)
      if (pred(x)) {
        s += x.mean * double(x.count);
        n += x.count;
      }
    return n ? s / double(n) : nan;
  };
  for (const char* k : {"attn_alpha", "mlp_alpha", "sqk", "suv", "sz"})
    h.push_back({std::string(k) + " effective (mean)", mean_of([&](const ScaleReport& s) { return s.kind == k; })});
  h.push_back({"RMSNorm gain (mean)", mean_of([](const ScaleReport& s) { return s.role == ParamRole::gain; })});
  const ActivityReport* a = r.activity ? &*r.activity : nullptr;
  h.push_back({"val loss (nats/token)", a ? a->val_loss : nan});
  double ent = nan, last = nan;
  if (a && !a->layers.empty()) {
    ent = 0;
    for (const auto& l : a->layers) ent += l.attention_entropy;
    ent /= double(a->layers.size());
    last = a->layers.back().hidden_norm_mean;
  }
  h.push_back({"attention entropy (mean over layers, nats)", ent});
  h.push_back({"hidden norm after the last block (mean)", last});
  return h;
}

// Markdown table, one column per report; rows that apply to none are left out.
inline std::string compare_markdown(const std::vector<Report>& reports) {
  auto cell = [](const std::string& s) {  // a '|' inside a cell would split it
    std::string o;
    o.reserve(s.size() + 4);
    for (char ch : s) {
      if (ch == '|') o.push_back('\\');
      o.push_back(ch);
    }
    return o;
  };
  std::string out = "| figure |";
  std::string rule = "|---|";
  for (const auto& r : reports) {
    out.append(" ").append(cell(r.source)).append(" |");
    rule += "---:|";
  }
  out.append("\n").append(rule).append("\n| variant |");
  for (const auto& r : reports)
    out.append(" ").append(r.variant).append(r.post_hoc_normalized ? " (post-hoc normalized)" : "").append(" |");
  out += "\n| d / layers / heads / vocab |";
  for (const auto& r : reports)
    out.append(" ").append(std::to_string(r.n_embd)).append(" / ").append(std::to_string(r.n_layer))
        .append(" / ").append(std::to_string(r.n_head)).append(" / ").append(std::to_string(r.vocab_size)).append(" |");
  out += "\n";
  std::vector<std::vector<std::pair<std::string, double>>> rows;
  for (const auto& r : reports) rows.push_back(headline(r));
  if (rows.empty()) return out;
  for (std::size_t i = 0; i < rows[0].size(); ++i) {
    bool any = false;
    for (const auto& hr : rows) any = any || !std::isnan(hr[i].second);
    if (!any) continue;
    out.append("| ").append(cell(rows[0][i].first)).append(" |");
    for (const auto& hr : rows) out.append(" ").append(detail::num(hr[i].second)).append(" |");
    out += "\n";
  }
  return out;
}

// The readable report.
inline std::string format_table(const Report& r) {
  using detail::num;
  using detail::pad;
  using detail::rpad;
  std::string o;
  auto line = [&](const std::string& s) { o += s + "\n"; };
  line("normlab-diagnose: " + (r.source.empty() ? std::string("<model>") : r.source));
  line("variant " + r.variant + " (" + r.signature + ") | vocab " + std::to_string(r.vocab_size) + ", d " +
       std::to_string(r.n_embd) + ", heads " + std::to_string(r.n_head) + ", layers " + std::to_string(r.n_layer) +
       ", base_scale " + num(r.base_scale, 6) +
       (r.post_hoc_normalized ? " | matrices normalized post hoc along d" : ""));
  line("");
  line("Singular values of the weight matrices (float64 SVD); eff_rank = exp(entropy of sigma/sum(sigma))");
  line(pad("layer", 6) + pad("matrix", 11) + pad("shape", 11) + rpad("sigma_max", 11) + rpad("sigma_min", 11) +
       rpad("cond", 11) + rpad("eff_rank", 10) + rpad("of", 6));
  for (const auto& m : r.matrices)
    line(pad(std::to_string(m.layer), 6) + pad(m.type, 11) +
         pad(std::to_string(m.rows) + "x" + std::to_string(m.cols), 11) + rpad(num(m.singular_values.max()), 11) +
         rpad(num(m.singular_values.min()), 11) + rpad(num(m.condition_number), 11) +
         rpad(num(m.effective_rank), 10) + rpad(std::to_string(std::min(m.rows, m.cols)), 6));
  line("");
  line("Embeddings: row norms, and eigenvalues of the d x d covariance of the centered rows");
  line(pad("tensor", 24) + rpad("min", 9) + rpad("q1", 9) + rpad("median", 9) + rpad("q3", 9) + rpad("max", 9) +
       rpad("spread", 9) + rpad("cov_cond", 11) + rpad("eig_max", 11) + rpad("eig_min", 11));
  for (const EmbeddingReport* e : {&r.wte, &r.lm_head}) {
    const NormStats& s = e->row_norms;
    line(pad(e->tensor, 24) + rpad(num(s.min), 9) + rpad(num(s.q1), 9) + rpad(num(s.median), 9) + rpad(num(s.q3), 9) +
         rpad(num(s.max), 9) + rpad(num(s.spread()), 9) + rpad(num(e->covariance.condition_number), 11) +
         rpad(num(e->covariance.eigenvalues.max()), 11) + rpad(num(e->covariance.eigenvalues.min()), 11));
  }
  line("");
  line("Norms along the embedding dimension (rows of W[out,d], columns of W[d,in]; nGPT fixes them to 1)");
  line(pad("tensor", 14) + pad("axis", 6) + rpad("tensors", 8) + rpad("vectors", 9) + rpad("min", 10) +
       rpad("mean", 10) + rpad("max", 10));
  {
    struct Agg {
      NormAxis axis = NormAxis::rows;
      int tensors = 0;
      std::size_t vectors = 0;
      double min = std::numeric_limits<double>::infinity(), max = 0, sum = 0;
    };
    std::vector<std::pair<std::string, Agg>> aggs;
    for (const auto& a : r.axis_norms) {
      const std::string kind = param_kind(a.tensor).first;
      auto it = std::find_if(aggs.begin(), aggs.end(), [&](const auto& p) { return p.first == kind; });
      if (it == aggs.end()) {
        aggs.push_back({kind, Agg{}});
        it = aggs.end() - 1;
      }
      Agg& g = it->second;
      g.axis = a.axis;
      ++g.tensors;
      g.vectors += a.norms.count;
      g.min = std::min(g.min, a.norms.min);
      g.max = std::max(g.max, a.norms.max);
      g.sum += a.norms.mean * double(a.norms.count);
    }
    for (const auto& [kind, g] : aggs)
      line(pad(kind, 14) + pad(detail::axis_name(g.axis), 6) + rpad(std::to_string(g.tensors), 8) +
           rpad(std::to_string(g.vectors), 9) + rpad(num(g.min, 6), 10) +
           rpad(num(g.vectors ? g.sum / double(g.vectors) : std::nan(""), 6), 10) + rpad(num(g.max, 6), 10));
    line("max |norm - 1|: " + num(r.max_axis_norm_deviation(), 3));
  }
  line("");
  if (r.scales.empty()) {
    line("Learned scales: none in this variant");
  } else {
    line("Learned scales and gains (effective values)");
    line(pad("tensor", 36) + pad("effective", 20) + rpad("n", 6) + rpad("mean", 10) + rpad("min", 10) +
         rpad("max", 10));
    for (const auto& s : r.scales)
      line(pad(s.tensor, 36) + pad(s.effective, 20) + rpad(std::to_string(s.count), 6) + rpad(num(s.mean), 10) +
           rpad(num(s.min), 10) + rpad(num(s.max), 10));
  }
  if (r.activity) {
    const ActivityReport& a = *r.activity;
    line("");
    line("Activations on " + std::to_string(a.batches) + " validation batches of " + std::to_string(a.batch_size) +
         " x " + std::to_string(a.seq) + " tokens (" + a.data + "); val loss " + num(a.val_loss, 5));
    line(pad("layer", 6) + rpad("h_norm_mean", 12) + rpad("h_norm_min", 12) + rpad("h_norm_max", 12) +
         rpad("attn_entropy", 14) + rpad("uniform", 10));
    for (const auto& l : a.layers)
      line(pad(std::to_string(l.layer), 6) + rpad(num(l.hidden_norm_mean), 12) + rpad(num(l.hidden_norm_min), 12) +
           rpad(num(l.hidden_norm_max), 12) + rpad(num(l.attention_entropy), 14) +
           rpad(num(l.attention_entropy_uniform), 10));
  }
  return o;
}

}  // namespace normlab::diag
