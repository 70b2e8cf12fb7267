#pragma once
// The diagnostics' report, written: JSON, the text table normlab-diagnose prints,
// the headline figures and the markdown comparison of several checkpoints. The
// measurements are the library's (normlab/diag/diagnostics.hpp); this is how the
// application presents them.

#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "normlab/diag/diagnostics.hpp"

namespace normlab::diag {


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
                {"rows_counted", e.rows_counted},
                {"row_norms", detail::stats_json(e.row_norms)},
                {"covariance_condition_number", e.covariance.condition_number},
                {"covariance_span_condition_number", e.covariance.span_condition_number},
                {"covariance_eigenvalues", e.covariance.eigenvalues.values}};
  };
  j["embeddings"] = {{"wte", emb(r.wte)},
                     {"lm_head", emb(r.lm_head)},
                     {"rows", r.embedding_rows_seen ? "tokens occurring in the data's training split" : "all"}};
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
    h.push_back({n + " covariance condition number (the rows' span)", e->covariance.span_condition_number});
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
  out += "\n| embedding rows counted |";
  for (const auto& r : reports)
    out.append(" ").append(std::to_string(r.wte.rows_counted)).append(r.embedding_rows_seen ? " (seen in training)" : " (all)")
        .append(" |");
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
  line("Embeddings: row norms, and eigenvalues of the d x d covariance of the centered rows, over " +
       std::to_string(r.wte.rows_counted) + " of " + std::to_string(r.vocab_size) + " rows" +
       (r.embedding_rows_seen ? " (the tokens that occur in the data's training split)" : " (all; --data counts only the tokens it holds)"));
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
