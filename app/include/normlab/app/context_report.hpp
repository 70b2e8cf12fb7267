#pragma once
// normlab::ablate — validation loss past the training context, for an ablation's
// report: read each run's `normlab-eval --out` record (eval.json), average over
// seeds per variant and length, and render a markdown table and a gnuplot script
// (loss against context length, one line per variant, the training length marked).
// Pure functions: nothing here runs a process.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "normlab/core/error.hpp"
#include "normlab/app/ablate.hpp"

namespace normlab::ablate {

// One run's losses (all positions) at each evaluated context length.
struct ContextEval {
  std::string variant;
  std::int64_t seed = 0;
  std::int64_t trained_context = 0;
  std::vector<std::int64_t> lengths;  // ascending
  std::vector<double> loss;           // one per length
};

// Reads normlab-eval's eval.json. Throws naming the file and the field at fault.
inline ContextEval read_context_eval(const std::filesystem::path& file, const std::string& variant, std::int64_t seed) {
  std::ifstream in(file);
  if (!in) throw Error(file.string() + ": cannot open (normlab-eval --out writes it)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(file.string() + ": not JSON (" + e.what() + ")");
  }
  ContextEval c{variant, seed, 0, {}, {}};
  const std::string where = file.string();
  if (!j.is_object() || !j.contains("lengths") || !j["lengths"].is_array() || j["lengths"].empty())
    throw Error(where + ": no \"lengths\" array");
  if (j.contains("trained_context") && j["trained_context"].is_number_integer())
    c.trained_context = j["trained_context"].get<std::int64_t>();
  for (const auto& e : j["lengths"]) {
    if (!e.is_object() || !e.contains("length") || !e["length"].is_number_integer() || !e.contains("loss") ||
        !e["loss"].is_number())
      throw Error(where + ": each entry of \"lengths\" needs an integer \"length\" and a number \"loss\"");
    c.lengths.push_back(e["length"].get<std::int64_t>());
    c.loss.push_back(e["loss"].get<double>());
  }
  for (std::size_t i = 1; i < c.lengths.size(); ++i)
    if (c.lengths[i] <= c.lengths[i - 1]) throw Error(where + ": \"lengths\" are not ascending");
  return c;
}

namespace detail {

// Per variant (in first-seen order) and length: the losses over seeds.
struct ContextTable {
  std::vector<std::string> variants;
  std::vector<std::int64_t> lengths;                                 // union, ascending
  std::map<std::string, std::map<std::int64_t, std::vector<double>>> loss;
  std::int64_t trained_context = 0;                                  // 0 when the runs disagree or lack it
};

inline ContextTable gather(const std::vector<ContextEval>& evals) {
  ContextTable t;
  std::set<std::int64_t> lengths, trained;
  for (const auto& e : evals) {
    if (std::find(t.variants.begin(), t.variants.end(), e.variant) == t.variants.end()) t.variants.push_back(e.variant);
    trained.insert(e.trained_context);
    for (std::size_t i = 0; i < e.lengths.size(); ++i) {
      lengths.insert(e.lengths[i]);
      t.loss[e.variant][e.lengths[i]].push_back(e.loss[i]);
    }
  }
  t.lengths.assign(lengths.begin(), lengths.end());
  if (trained.size() == 1) t.trained_context = *trained.begin();
  return t;
}

}  // namespace detail

// The table: one row per variant, one column per length (mean ± sd over seeds),
// and the rise from the training length to the longest one.
inline std::string context_markdown(const std::vector<ContextEval>& evals, const std::string& how) {
  if (evals.empty()) return {};
  const detail::ContextTable t = detail::gather(evals);
  std::ostringstream os;
  os << "## Past the training context\n\n"
     << "Validation loss over all positions of windows of each length, from each run's final checkpoint (" << how
     << "). Trained at " << (t.trained_context > 0 ? std::to_string(t.trained_context) : std::string("(varies)"))
     << " tokens; mean ± sd over seeds.\n\n| variant |";
  for (const auto L : t.lengths) {
    os << " T = " << L;
    if (t.trained_context > 0 && L % t.trained_context == 0) os << " (" << L / t.trained_context << "×)";
    os << " |";
  }
  const bool rise = t.trained_context > 0 && t.lengths.size() > 1 &&
                    std::find(t.lengths.begin(), t.lengths.end(), t.trained_context) != t.lengths.end();
  if (rise) os << " rise " << t.trained_context << " → " << t.lengths.back() << " |";
  os << "\n|---|";
  for (std::size_t i = 0; i < t.lengths.size() + (rise ? 1 : 0); ++i) os << "---:|";
  os << "\n";
  for (const auto& v : t.variants) {
    os << "| " << detail::md_cell(v) << " |";
    const auto& per = t.loss.at(v);
    for (const auto L : t.lengths) {
      const auto it = per.find(L);
      os << " " << (it == per.end() ? std::string("n/a") : detail::pm(mean_sd(it->second), "%.4f")) << " |";
    }
    if (rise) {
      const auto a = per.find(t.trained_context), b = per.find(t.lengths.back());
      os << " "
         << (a == per.end() || b == per.end() ? std::string("n/a")
                                              : detail::fmt("%+.4f", mean_sd(b->second).mean - mean_sd(a->second).mean))
         << " |";
    }
    os << "\n";
  }
  return os.str();
}

// gnuplot: loss against context length (log2 axis), the mean over seeds per
// variant, the training length as a dashed vertical line.
inline std::string context_plot_script(const std::vector<ContextEval>& evals, const std::string& png_name,
                                       const std::string& svg_name) {
  const detail::ContextTable t = detail::gather(evals);
  std::ostringstream os;
  os << "# Written by normlab-ablate. Re-run with: gnuplot " << "context.gp (from this directory)\n";
  std::vector<std::string> plots;
  for (std::size_t vi = 0; vi < t.variants.size(); ++vi) {
    const std::string name = "$ctx" + std::to_string(vi);
    os << name << " << EOD\n";
    for (const auto& [L, xs] : t.loss.at(t.variants[vi]))
      os << L << " " << detail::fmt("%.17g", mean_sd(xs).mean) << "\n";
    os << "EOD\n";
    plots.push_back(name + " using 1:2 with linespoints lc " + std::to_string(vi + 1) + " lw 2 pt 7 title " +
                    detail::gp_quote(t.variants[vi]));
  }
  os << "set logscale x 2\nset xlabel 'context length (tokens)'\nset ylabel 'validation loss (nats/token)'\n"
        "set title " << detail::gp_quote("validation loss past the training context") << "\n"
        "set grid\nset key outside right top\n";
  if (t.trained_context > 0)
    os << "set arrow from " << t.trained_context << ", graph 0 to " << t.trained_context
       << ", graph 1 nohead lc rgb 'black' dt 2 lw 1.5\n"
       << "set label " << detail::gp_quote("trained at " + std::to_string(t.trained_context)) << " at "
       << t.trained_context << ", graph 0.95 left offset 0.5,0\n";
  std::string cmd = "plot ";
  for (std::size_t i = 0; i < plots.size(); ++i) cmd += (i ? ", \\\n     " : "") + plots[i];
  if (plots.empty()) cmd = "set label 1 'no data' at graph 0.5, graph 0.5 center\nplot [1:2] [0:1] NaN notitle";
  os << "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
        "  set terminal pngcairo size 1000,600 noenhanced font ',10'\n"
        "} else {\n"
        "  set terminal png size 1000,600 noenhanced\n"
        "}\n"
        "set output " << detail::gp_quote(png_name) << "\n"
     << cmd << "\n"
     << "set terminal svg size 1000,600 dynamic noenhanced\n"
        "set output " << detail::gp_quote(svg_name) << "\nreplot\nunset output\n";
  return os.str();
}

}  // namespace normlab::ablate
