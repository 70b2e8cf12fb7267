#pragma once
// normlab::ablate — the pure logic behind `normlab-ablate`: read the files a
// `train-<variant>` run writes (metrics.jsonl, summary.json), measure how many
// tokens / seconds each variant needs to reach the baseline's final validation
// loss, aggregate over seeds, and render the comparison as a markdown table and
// a gnuplot script. Nothing here runs a process, so all of it is unit-tested.
//
// Definitions used throughout (also stated in the table's header lines):
//  * target loss       = the baseline's mean final val loss over its seeds. The
//                        baseline is the one named (ReportInfo::baselines), else
//                        "gpt" when it is in the set, else the first variant given.
//                        Further named baselines get a table of their own.
//  * tokens to target  = first eval point whose val_loss <= target, linearly
//                        interpolated between it and the eval point before it
//                        (see tokens_to_reach). Seconds: the same on elapsed_s.
//  * reference tokens  = the baseline's own mean tokens to target, over the
//                        baseline seeds that reach it (a seed ending above the
//                        seed mean never does; the report says how many did);
//                        reference seconds likewise. Not the baseline's whole
//                        budget: a baseline that touched its final loss before
//                        its last eval would otherwise "speed up" against itself
//                        and every other variant would be flattered.
//  * speedup (tokens)  = reference tokens / variant's mean tokens to target;
//                        the baseline's row is 1.00 by definition;
//                        > 1 means the variant needed fewer tokens. Wall-clock
//                        speedup likewise. A variant that misses the target in
//                        any seed gets no speedup: "not reached in k/n seeds".
//  * tokens/s          = tokens / (steps * mean_step_time_s): training
//                        throughput, evaluation time excluded.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "normlab/core/error.hpp"

namespace normlab::ablate {

namespace fs = std::filesystem;

// The validation curve of one run: one entry per eval line of metrics.jsonl,
// in file order. val_loss is NaN where the trainer wrote null (a diverged eval).
struct Curve {
  std::vector<double> tokens, val_loss, elapsed_s;
  std::size_t size() const { return val_loss.size(); }
  bool empty() const { return val_loss.empty(); }
};

namespace detail {

inline constexpr double nan = std::numeric_limits<double>::quiet_NaN();

inline std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// A required numeric field; `where` is "file:line" or "file".
inline double number(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end()) throw Error(where + ": missing field \"" + key + "\"");
  if (!it->is_number()) throw Error(where + ": field \"" + key + "\" is not a number (" + it->dump() + ")");
  return it->get<double>();
}

// An optional numeric field: absent or null gives nullopt.
inline std::optional<double> opt_number(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) throw Error(where + ": field \"" + key + "\" is not a number (" + it->dump() + ")");
  return it->get<double>();
}

inline std::int64_t integer(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end()) throw Error(where + ": missing field \"" + key + "\"");
  if (!it->is_number_integer()) throw Error(where + ": field \"" + key + "\" is not an integer (" + it->dump() + ")");
  return it->get<std::int64_t>();
}

// x at which the piecewise-linear curve (xs, ys) first gets to y <= target.
inline std::optional<double> first_reach(const std::vector<double>& xs, const std::vector<double>& ys, double target) {
  if (xs.size() != ys.size()) throw Error("ablate: curve columns have different lengths");
  if (std::isnan(target)) return std::nullopt;
  for (std::size_t i = 0; i < ys.size(); ++i) {
    if (!(ys[i] <= target)) continue;  // NaN never reaches
    if (i == 0) return xs[0];          // nothing before the first eval to interpolate from
    const double y0 = ys[i - 1], y1 = ys[i], x0 = xs[i - 1], x1 = xs[i];
    if (!std::isfinite(y0) || !std::isfinite(x0)) return x1;  // previous eval diverged: no bracket
    // y0 > target >= y1 here, so y0 - y1 > 0.
    return x0 + (x1 - x0) * (y0 - target) / (y0 - y1);
  }
  return std::nullopt;
}

inline std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Markdown table cells: a '|' would split the cell.
inline std::string md_cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n' || c == '\r') out += ' ';
    else out += c;
  }
  return out;
}

inline std::string md_code(const std::string& s) {
  std::string out = s;
  std::replace(out.begin(), out.end(), '`', '\'');
  std::replace(out.begin(), out.end(), '\n', ' ');
  return "`" + out + "`";
}

}  // namespace detail

// Reads the eval points of a metrics.jsonl: every line carrying "val_loss"
// contributes (tokens, val_loss, elapsed_s); training-only lines are checked to
// be JSON objects and otherwise skipped; blank lines are ignored. val_loss may be
// null (how JSON writers spell NaN) and is then read as NaN. Throws normlab::Error
// naming "file:line" on malformed JSON, a non-object line, a missing or
// non-numeric tokens/elapsed_s/val_loss, or tokens that go backwards (two runs
// appended into one file).
inline Curve read_val_curve(const fs::path& metrics_jsonl) {
  std::ifstream in(metrics_jsonl);
  if (!in) throw Error("cannot open metrics file " + metrics_jsonl.string());
  Curve c;
  std::string line;
  std::size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    const std::string t = detail::trim(line);
    if (t.empty()) continue;
    const std::string where = metrics_jsonl.string() + ":" + std::to_string(lineno);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(t);
    } catch (const nlohmann::json::parse_error& e) {
      throw Error(where + ": malformed JSON: " + e.what());
    }
    if (!j.is_object()) throw Error(where + ": expected a JSON object, got " + std::string(j.type_name()));
    const auto v = j.find("val_loss");
    if (v == j.end()) continue;
    double loss;
    if (v->is_null()) loss = detail::nan;
    else if (v->is_number()) loss = v->get<double>();
    else throw Error(where + ": field \"val_loss\" is not a number (" + v->dump() + ")");
    const double tokens = detail::number(j, "tokens", where);
    const double elapsed = detail::number(j, "elapsed_s", where);
    if (!c.tokens.empty() && tokens < c.tokens.back())
      throw Error(where + ": tokens go backwards (" + detail::fmt("%.0f", tokens) + " after " +
                  detail::fmt("%.0f", c.tokens.back()) + "); are two runs appended into one file?");
    c.tokens.push_back(tokens);
    c.val_loss.push_back(loss);
    c.elapsed_s.push_back(elapsed);
  }
  if (in.bad()) throw Error("error reading metrics file " + metrics_jsonl.string());
  return c;
}

// Tokens at which the run first reaches val_loss <= target_loss. With i the first
// eval point at or below the target, the result is linearly interpolated between
// point i-1 (above the target) and point i:
//   tokens[i-1] + (tokens[i] - tokens[i-1]) * (loss[i-1] - target) / (loss[i-1] - loss[i]).
// If i is the first eval point (or the point before it is NaN) there is nothing
// to bracket with and tokens[i] is returned. nullopt if the target is never
// reached (NaN losses never reach it; a NaN target is never reached).
inline std::optional<double> tokens_to_reach(const Curve& c, double target_loss) {
  return detail::first_reach(c.tokens, c.val_loss, target_loss);
}

// The same as tokens_to_reach, on the elapsed_s column (wall-clock seconds).
inline std::optional<double> seconds_to_reach(const Curve& c, double target_loss) {
  return detail::first_reach(c.elapsed_s, c.val_loss, target_loss);
}

// Mean and sample standard deviation (n - 1 in the denominator). sd is NaN for
// n < 2 and mean is NaN for n == 0; callers print those as absent, not as 0.
struct Stats {
  std::size_t n = 0;
  double mean = detail::nan;
  double sd = detail::nan;
};

inline Stats mean_sd(const std::vector<double>& xs) {
  Stats s;
  s.n = xs.size();
  if (xs.empty()) return s;
  double sum = 0;
  for (double x : xs) sum += x;
  s.mean = sum / double(xs.size());
  if (xs.size() >= 2) {
    double ss = 0;
    for (double x : xs) ss += (x - s.mean) * (x - s.mean);
    s.sd = std::sqrt(ss / double(xs.size() - 1));
  }
  return s;
}

// Aggregation of a per-seed measurement that may be missing (target not reached).
// `stats` covers only the seeds that reached; a report must not present it as the
// variant's value unless all_reached().
struct ReachStats {
  std::size_t n = 0;        // seeds
  std::size_t reached = 0;  // seeds that reached the target
  Stats stats;              // over the reached seeds only
  bool all_reached() const { return n > 0 && reached == n; }
  std::size_t not_reached() const { return n - reached; }
};

inline ReachStats aggregate_reach(const std::vector<std::optional<double>>& xs) {
  ReachStats r;
  r.n = xs.size();
  std::vector<double> got;
  for (const auto& x : xs)
    if (x) got.push_back(*x);
  r.reached = got.size();
  r.stats = mean_sd(got);
  return r;
}

// Two-sided 95% quantile of Student's t with df degrees of freedom (df >= 1):
// exact table to 30, then the Cornish–Fisher expansion (error < 1e-4 there).
inline double t_quantile_975(std::size_t df) {
  static constexpr double table[31] = {detail::nan, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306,
                                       2.262,       2.228,  2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110,
                                       2.101,       2.093,  2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
                                       2.052,       2.048,  2.045, 2.042};
  if (df == 0) return detail::nan;
  if (df <= 30) return table[df];
  const double z = 1.959963984540054, n = double(df);
  return z + (z * z * z + z) / (4 * n) + (5 * std::pow(z, 5) + 16 * z * z * z + 3 * z) / (96 * n * n);
}

// The 95% confidence interval of a mean over seeds, mean ± t(n−1)·sd/√n
// (seeds as independent draws; normal approximation of the per-seed values).
// Absent (NaN bounds) for fewer than two values.
struct Interval {
  double lo = detail::nan, hi = detail::nan;
  bool valid() const { return std::isfinite(lo) && std::isfinite(hi); }
};
inline Interval ci95(const Stats& s) {
  Interval iv;
  if (s.n < 2 || !std::isfinite(s.sd)) return iv;
  const double h = t_quantile_975(s.n - 1) * s.sd / std::sqrt(double(s.n));
  iv.lo = s.mean - h;
  iv.hi = s.mean + h;
  return iv;
}

// ------------------------------------------------------------------ the learning-rate sweep
// One short run of the sweep: a variant at one learning rate (one seed).
struct SweepRun {
  std::string variant;
  double lr = 0;
  std::optional<double> final_val_loss;  // absent or NaN: diverged or never evaluated
};
struct SweepChoice {
  std::string variant;
  double lr = 0;
  double final_val_loss = detail::nan;
};

// Each variant's learning rate: the one with the lowest final validation loss
// in the sweep (ties: the smaller rate). A run whose loss is absent or not
// finite counts as diverged and is never chosen; a variant with no finite run,
// or none at all, is an error naming it.
inline std::vector<SweepChoice> choose_learning_rates(const std::vector<std::string>& variants,
                                                     const std::vector<SweepRun>& runs) {
  std::vector<SweepChoice> out;
  for (const auto& v : variants) {
    SweepChoice best{v, 0, detail::nan};
    bool any = false, found = false;
    for (const auto& r : runs) {
      if (r.variant != v) continue;
      any = true;
      if (!r.final_val_loss || !std::isfinite(*r.final_val_loss)) continue;
      const double l = *r.final_val_loss;
      if (!found || l < best.final_val_loss || (l == best.final_val_loss && r.lr < best.lr)) {
        best.lr = r.lr;
        best.final_val_loss = l;
        found = true;
      }
    }
    if (!any) throw Error("lr sweep: no sweep run of variant \"" + v + "\"");
    if (!found)
      throw Error("lr sweep: every learning rate of variant \"" + v +
                  "\" diverged (no finite final validation loss); widen --lr-grid towards smaller rates");
    out.push_back(best);
  }
  return out;
}

// The sweep as a markdown table: one row per variant, one column per rate,
// the chosen rate's loss in bold, "diverged" where a run has no finite loss.
inline std::string sweep_markdown(const std::vector<std::string>& variants, const std::vector<double>& grid,
                                  const std::vector<SweepRun>& runs, const std::vector<SweepChoice>& chosen,
                                  std::int64_t sweep_steps, std::int64_t seed) {
  std::ostringstream os;
  os << "Each variant trained for " << sweep_steps << " steps (seed " << seed
     << ") at every rate of the grid, with the study's other flags; the rate with the lowest final validation loss "
        "(bold) is the one its full runs use (ties: the smaller rate).\n\n";
  os << "| variant |";
  for (double g : grid) os << " lr " << detail::fmt("%g", g) << " |";
  os << " chosen lr |\n|---|";
  for (std::size_t i = 0; i < grid.size(); ++i) os << "---|";
  os << "---|\n";
  for (const auto& v : variants) {
    const SweepChoice* c = nullptr;
    for (const auto& x : chosen)
      if (x.variant == v) c = &x;
    os << "| " << detail::md_cell(v) << " |";
    for (double g : grid) {
      const SweepRun* r = nullptr;
      for (const auto& x : runs)
        if (x.variant == v && x.lr == g) r = &x;
      std::string cell = "not run";
      if (r) cell = (r->final_val_loss && std::isfinite(*r->final_val_loss)) ? detail::fmt("%.4f", *r->final_val_loss)
                                                                              : "diverged";
      if (r && c && c->lr == g) cell = "**" + cell + "**";
      os << " " << cell << " |";
    }
    os << " " << (c ? detail::fmt("%g", c->lr) : std::string("n/a")) << " |\n";
  }
  return os.str();
}

// summary.json of one run. Required: variant, seed, steps, tokens,
// mean_step_time_s, total_time_s. Optional (absent or null): final_val_loss,
// params, entropy_floor_nats, data.
struct RunSummary {
  std::string variant;
  std::int64_t seed = 0;
  std::int64_t steps = 0;
  double tokens = 0;
  std::optional<double> final_val_loss;
  double mean_step_time_s = 0;
  double total_time_s = 0;
  std::optional<std::int64_t> params;
  std::optional<double> entropy_floor_nats;
  std::string data;
  std::optional<double> lr;  // the peak learning rate the run used (summaries since 2026-12-01)
  // The optimizer and learning-rate schedule the run used ("adamw", "cosine"):
  // empty in summaries written before they were recorded (AdamW with a cosine).
  std::string optimizer, schedule;
};

inline RunSummary read_summary(const fs::path& summary_json) {
  const std::string where = summary_json.string();
  std::ifstream in(summary_json);
  if (!in) throw Error("cannot open summary file " + where);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(where + ": malformed JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(where + ": expected a JSON object, got " + std::string(j.type_name()));
  RunSummary s;
  const auto v = j.find("variant");
  if (v == j.end() || !v->is_string()) throw Error(where + ": missing or non-string field \"variant\"");
  s.variant = v->get<std::string>();
  s.seed = detail::integer(j, "seed", where);
  s.steps = detail::integer(j, "steps", where);
  s.tokens = detail::number(j, "tokens", where);
  s.final_val_loss = detail::opt_number(j, "final_val_loss", where);
  s.mean_step_time_s = detail::number(j, "mean_step_time_s", where);
  s.total_time_s = detail::number(j, "total_time_s", where);
  if (const auto p = j.find("params"); p != j.end() && !p->is_null()) {
    if (!p->is_number_integer()) throw Error(where + ": field \"params\" is not an integer (" + p->dump() + ")");
    s.params = p->get<std::int64_t>();
  }
  s.entropy_floor_nats = detail::opt_number(j, "entropy_floor_nats", where);
  s.lr = detail::opt_number(j, "lr", where);
  if (const auto d = j.find("data"); d != j.end() && !d->is_null()) {
    if (!d->is_string()) throw Error(where + ": field \"data\" is not a string");
    s.data = d->get<std::string>();
  }
  for (const auto& [key, out] : {std::pair<const char*, std::string*>{"optimizer", &s.optimizer},
                                 std::pair<const char*, std::string*>{"schedule", &s.schedule}}) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    const auto name = it->is_object() ? it->find("name") : it->end();
    if (name == it->end() || !name->is_string())
      throw Error(where + ": field \"" + key + "\" has no string \"name\" (" + it->dump() + ")");
    *out = name->get<std::string>();
  }
  return s;
}

// One finished run (one variant, one seed).
struct Run {
  std::string variant;
  std::int64_t seed = 0;
  Curve curve;
  RunSummary summary;

  // summary.final_val_loss, else the last eval point of the curve, else NaN.
  double final_val_loss() const {
    if (summary.final_val_loss) return *summary.final_val_loss;
    return curve.empty() ? detail::nan : curve.val_loss.back();
  }
  // Training throughput, evaluation excluded; NaN if the summary cannot give it.
  double tokens_per_s() const {
    const double t = double(summary.steps) * summary.mean_step_time_s;
    return t > 0 ? summary.tokens / t : detail::nan;
  }
};

// Reads DIR/metrics.jsonl and DIR/summary.json; throws if the summary's variant
// or seed is not the one expected (a mixed-up output directory).
inline Run load_run(const fs::path& dir, const std::string& variant, std::int64_t seed) {
  Run r;
  r.variant = variant;
  r.seed = seed;
  r.curve = read_val_curve(dir / "metrics.jsonl");
  r.summary = read_summary(dir / "summary.json");
  const std::string where = (dir / "summary.json").string();
  if (r.summary.variant != variant)
    throw Error(where + ": variant is \"" + r.summary.variant + "\", expected \"" + variant + "\"");
  if (r.summary.seed != seed)
    throw Error(where + ": seed is " + std::to_string(r.summary.seed) + ", expected " + std::to_string(seed));
  return r;
}

// All seeds of one variant.
struct VariantRuns {
  std::string variant;
  std::vector<Run> runs;
};

namespace detail {
// Seconds a run needs to reach the target: from the variant's interleaved step
// time when `step_s` has it (tokens to target ÷ tokens per step × step time),
// else the run's own elapsed_s column.
inline std::optional<double> seconds_to_target(const Run& r, double target, const std::map<std::string, double>& step_s) {
  const auto it = step_s.find(r.variant);
  if (it == step_s.end()) return seconds_to_reach(r.curve, target);
  const auto toks = tokens_to_reach(r.curve, target);
  if (!toks || r.summary.steps <= 0 || !(r.summary.tokens > 0)) return std::nullopt;
  return *toks / (r.summary.tokens / double(r.summary.steps)) * it->second;
}
}  // namespace detail

// One table row.
struct VariantRow {
  std::string variant;
  std::size_t n = 0;
  Stats final_val_loss;
  ReachStats tokens_to_target, seconds_to_target;
  std::optional<double> speedup_tokens, speedup_time;  // set only when reached in every seed
  Stats step_time_ms;
  Stats tokens_per_s;
};

struct Analysis {
  std::string baseline;
  bool baseline_is_gpt = false;
  double target_loss = detail::nan;  // baseline's mean final val loss
  double ref_tokens = detail::nan;   // baseline's mean tokens to target (seeds that reach it)
  double ref_seconds = detail::nan;  // baseline's mean seconds to target (seeds that reach it)
  std::vector<VariantRow> rows;      // in input order
};

// Runs the measurements described at the top of this file. Throws if the input
// is empty or a variant has no runs. With `step_s` (seconds per optimizer step
// of a variant, measured interleaved across the variants in one benchmark),
// a run's seconds to target are its tokens to target ÷ its tokens per step ×
// that step time, for every variant it names, instead of the run's wall clock.
// `baseline` names the reference variant; empty: "gpt" when present, else the first.
inline Analysis analyze(const std::vector<VariantRuns>& variants, const std::map<std::string, double>& step_s = {},
                        const std::string& baseline = {}) {
  if (variants.empty()) throw Error("ablate: no variants to analyze");
  for (const auto& v : variants)
    if (v.runs.empty()) throw Error("ablate: variant \"" + v.variant + "\" has no runs");
  Analysis a;
  const VariantRuns* base = &variants.front();
  const std::string wanted = baseline.empty() ? std::string("gpt") : baseline;
  bool found = false;
  for (const auto& v : variants)
    if (v.variant == wanted) {
      base = &v;
      found = true;
      break;
    }
  if (!found && !baseline.empty())
    throw Error("ablate: the baseline \"" + baseline + "\" is not one of the variants");
  a.baseline_is_gpt = found && wanted == "gpt";
  a.baseline = base->variant;
  {
    std::vector<double> finals, toks, secs;
    for (const auto& r : base->runs) finals.push_back(r.final_val_loss());
    a.target_loss = mean_sd(finals).mean;
    for (const auto& r : base->runs) {
      if (const auto t = tokens_to_reach(r.curve, a.target_loss)) toks.push_back(*t);
      if (const auto t = detail::seconds_to_target(r, a.target_loss, step_s)) secs.push_back(*t);
    }
    if (!toks.empty()) a.ref_tokens = mean_sd(toks).mean;
    if (!secs.empty()) a.ref_seconds = mean_sd(secs).mean;
  }
  for (const auto& v : variants) {
    VariantRow row;
    row.variant = v.variant;
    row.n = v.runs.size();
    std::vector<double> finals, step_ms, tps;
    std::vector<std::optional<double>> toks, secs;
    for (const auto& r : v.runs) {
      finals.push_back(r.final_val_loss());
      step_ms.push_back(r.summary.mean_step_time_s * 1000.0);
      tps.push_back(r.tokens_per_s());
      toks.push_back(tokens_to_reach(r.curve, a.target_loss));
      secs.push_back(detail::seconds_to_target(r, a.target_loss, step_s));
    }
    row.final_val_loss = mean_sd(finals);
    row.step_time_ms = mean_sd(step_ms);
    row.tokens_per_s = mean_sd(tps);
    row.tokens_to_target = aggregate_reach(toks);
    row.seconds_to_target = aggregate_reach(secs);
    const auto ratio = [](double ref, const ReachStats& rs) -> std::optional<double> {
      if (!rs.all_reached() || !std::isfinite(ref) || !(rs.stats.mean > 0)) return std::nullopt;
      return ref / rs.stats.mean;
    };
    row.speedup_tokens = ratio(a.ref_tokens, row.tokens_to_target);
    row.speedup_time = ratio(a.ref_seconds, row.seconds_to_target);
    if (&v == base) {  // the reference itself: 1 by definition, whenever the reference exists
      row.speedup_tokens = std::isfinite(a.ref_tokens) ? std::optional<double>(1.0) : std::nullopt;
      row.speedup_time = std::isfinite(a.ref_seconds) ? std::optional<double>(1.0) : std::nullopt;
    }
    a.rows.push_back(std::move(row));
  }
  return a;
}

// The lines above the table. Empty / absent fields are filled from the runs
// (data description and entropy floor from the first summary that has one,
// seeds from the runs) or left out.
struct ReportInfo {
  std::string date;          // e.g. "2025-01-31 12:00:00 UTC"
  std::string command_line;  // how the ablation was run
  std::string data;          // data description
  std::string config;        // the flags every trainer got
  bool config_known = true;  // false: printed as "(not recorded)" instead of config
  std::vector<std::int64_t> seeds;
  std::optional<double> entropy_floor_nats;
  std::string note;          // free text line, e.g. "report regenerated by ..."
  // Interleaved step times (seconds per step, per variant) and how they were
  // measured; empty: time to target is each run's wall clock.
  std::map<std::string, double> step_s;
  std::string step_s_method;
  std::string sweep_md;      // the learning-rate sweep's table (sweep_markdown), if the study ran one
  // Baselines: the first is the reference of the main table; each further one gets
  // a table of tokens/time to its own final loss. Empty: "gpt" if present, else the first.
  std::vector<std::string> baselines;
  std::string context_md;    // the evaluation past the training context (context_markdown), if run
};

// What a baseline is, for the report's header line.
inline std::string baseline_description(const std::string& v) {
  if (v == "gpt_qknorm") return "GPT+ (GPT with QK-norm), the baseline of the nGPT and anGPT papers";
  if (v == "gpt") return "plain GPT (pre-norm RMSNorm, no QK-norm)";
  return {};
}

namespace detail {

// "m ± sd" (n >= 2), "m" (n == 1), "n/a" (n == 0); f is the printf format.
inline std::string pm(const Stats& s, const char* f) {
  if (s.n == 0) return "n/a";
  std::string out = fmt(f, s.mean);
  if (s.n >= 2) out += " ± " + fmt(f, s.sd);
  return out;
}

inline std::string reach_cell(const ReachStats& r, const char* f) {
  if (r.n == 0) return "n/a";
  if (!r.all_reached())
    return "not reached in " + std::to_string(r.not_reached()) + "/" + std::to_string(r.n) + " seeds";
  return pm(r.stats, f);
}

inline std::string speedup_cell(const std::optional<double>& s, const ReachStats& r) {
  if (s) return fmt("%.2f", *s);
  if (r.n > 0 && !r.all_reached()) return "n/a (target not reached)";
  return "n/a";
}

inline void fill_info(ReportInfo& info, const std::vector<VariantRuns>& variants) {
  for (const auto& v : variants)
    for (const auto& r : v.runs) {
      if (info.data.empty() && !r.summary.data.empty()) info.data = r.summary.data;
      if (!info.entropy_floor_nats && r.summary.entropy_floor_nats) info.entropy_floor_nats = r.summary.entropy_floor_nats;
    }
  if (info.seeds.empty()) {
    std::set<std::int64_t> seen;
    for (const auto& v : variants)
      for (const auto& r : v.runs)
        if (seen.insert(r.seed).second) info.seeds.push_back(r.seed);
  }
}

}  // namespace detail

// The ablation report: header lines, then one table row per variant. See the top
// of this file for the definitions; the header lines restate them.
inline std::string results_markdown(const std::vector<VariantRuns>& variants, ReportInfo info) {
  const Analysis a = analyze(variants, info.step_s, info.baselines.empty() ? std::string() : info.baselines.front());
  detail::fill_info(info, variants);
  std::ostringstream os;
  os << "# normlab ablation\n\n";
  if (!info.date.empty()) os << "- Date: " << info.date << "\n";
  if (!info.command_line.empty()) os << "- Command: " << detail::md_code(info.command_line) << "\n";
  if (!info.note.empty()) os << "- Note: " << info.note << "\n";
  os << "- Data: " << (info.data.empty() ? "(not recorded)" : info.data) << "\n";
  os << "- Config (flags given to every trainer): "
     << (!info.config_known ? "(not recorded)" : info.config.empty() ? "(none)" : detail::md_code(info.config))
     << "\n";
  os << "- Seeds: ";
  for (std::size_t i = 0; i < info.seeds.size(); ++i) os << (i ? ", " : "") << info.seeds[i];
  os << " (n = " << info.seeds.size() << ")\n";
  if (info.entropy_floor_nats)
    os << "- Entropy floor of the data: " << detail::fmt("%.4f", *info.entropy_floor_nats) << " nats\n";
  if (!info.baselines.empty()) {
    const std::string d = baseline_description(a.baseline);
    os << "- Baseline: " << a.baseline << (d.empty() ? "" : ": " + d);
    if (info.baselines.size() > 1) {
      os << "; speedups against ";
      for (std::size_t i = 1; i < info.baselines.size(); ++i) os << (i > 1 ? ", " : "") << info.baselines[i];
      os << " in their own tables below";
    }
    os << "\n";
  } else if (a.baseline_is_gpt) {
    os << "- Baseline: gpt\n";
  } else {
    os << "- Baseline: " << a.baseline << " (gpt is not in this ablation, so the first variant is the baseline)\n";
  }
  os << "- Target: the baseline's mean final val loss, " << detail::fmt("%.4f", a.target_loss)
     << ". Tokens/time to target: first eval point at or below it, linearly interpolated between eval points.\n";
  os << "- Speedup = baseline reference / variant's mean tokens (or seconds) to target; > 1 means fewer than the "
        "baseline, and the baseline's own row is 1.00 by definition. Reference: the baseline's own mean tokens and "
        "time to target, over the baseline seeds that reach it (";
  if (std::isfinite(a.ref_tokens))
    os << detail::fmt("%.0f", a.ref_tokens) << " tokens, " << detail::fmt("%.1f", a.ref_seconds) << " s";
  else
    os << "undefined: no baseline seed reaches the target";
  os << ").\n";
  if (info.step_s.empty()) {
    os << "- Time to target is elapsed training time from each run's metrics.jsonl (evaluation included; carried "
          "across interruptions by --resume), measured while the runs ran one after another: a wall-clock "
          "comparison on a shared machine, not an interleaved benchmark.\n";
  } else {
    os << "- Time to target = tokens to target ÷ tokens per step × the variant's step time from an interleaved "
          "benchmark (" << info.step_s_method << "): ";
    bool first = true;
    for (const auto& v : variants)
      if (const auto it = info.step_s.find(v.variant); it != info.step_s.end()) {
        os << (first ? "" : ", ") << detail::md_cell(v.variant) << " " << detail::fmt("%.1f", it->second * 1000) << " ms";
        first = false;
      }
    os << " per step; evaluation excluded. Not the runs' wall clock, which ran at different moments. The step time "
          "column is each run's own mean.\n";
  }
  // Each variant's learning rate(s), as its runs' summaries record them.
  {
    std::string lrs;
    for (const auto& v : variants) {
      std::vector<double> seen;
      for (const auto& r : v.runs)
        if (r.summary.lr && std::find(seen.begin(), seen.end(), *r.summary.lr) == seen.end())
          seen.push_back(*r.summary.lr);
      if (seen.empty()) continue;
      // Appended piece by piece: GCC 12 reports a false -Wrestrict on "literal" + std::string&&.
      if (!lrs.empty()) lrs.append(", ");
      lrs.append(detail::md_cell(v.variant)).append(" ");
      for (std::size_t i = 0; i < seen.size(); ++i) {
        if (i) lrs.append("/");
        lrs.append(detail::fmt("%g", seen[i]));
      }
    }
    if (!lrs.empty()) os << "- Peak learning rates (from each run's summary.json): " << lrs << "\n";
  }
  // Each variant's optimizer and schedule, as its runs' summaries record them.
  {
    std::string used;
    for (const auto& v : variants) {
      std::vector<std::string> seen;
      for (const auto& r : v.runs) {
        const std::string o = (r.summary.optimizer.empty() ? std::string("adamw") : r.summary.optimizer) + " + " +
                              (r.summary.schedule.empty() ? std::string("cosine") : r.summary.schedule);
        if (std::find(seen.begin(), seen.end(), o) == seen.end()) seen.push_back(o);
      }
      if (seen.empty()) continue;
      if (!used.empty()) used.append(", ");
      used.append(detail::md_cell(v.variant)).append(" ");
      for (std::size_t i = 0; i < seen.size(); ++i) used.append(i ? " / " : "").append(seen[i]);
    }
    if (!used.empty()) os << "- Optimizer + schedule (from each run's summary.json): " << used << "\n";
  }
  os << "- Values are mean ± sample sd over seeds; tokens/s is training throughput (eval excluded).\n\n";

  os << "| variant | seeds | final val loss | tokens to target | speedup (tokens) | time to target (s) | "
        "speedup (time) | step time (ms) | tokens/s |\n";
  os << "|---|---|---|---|---|---|---|---|---|\n";
  // Seconds to target with one decimal, or three when every time is under a second
  // (tiny runs printed 0.0 s).
  double max_secs = 0;
  for (const auto& r : a.rows)
    if (r.seconds_to_target.reached > 0 && std::isfinite(r.seconds_to_target.stats.mean))
      max_secs = std::max(max_secs, r.seconds_to_target.stats.mean);
  const char* secs_fmt = max_secs > 0 && max_secs < 1 ? "%.3f" : "%.1f";
  for (const auto& r : a.rows) {
    std::string name = detail::md_cell(r.variant);
    if (r.variant == a.baseline) name += " (baseline)";
    const bool target = std::isfinite(a.target_loss);
    const std::string none = "n/a (no target)";
    os << "| " << name << " | " << r.n << " | " << detail::pm(r.final_val_loss, "%.4f") << " | "
       << (target ? detail::reach_cell(r.tokens_to_target, "%.0f") : none) << " | "
       << (target ? detail::speedup_cell(r.speedup_tokens, r.tokens_to_target) : none) << " | "
       << (target ? detail::reach_cell(r.seconds_to_target, secs_fmt) : none) << " | "
       << (target ? detail::speedup_cell(r.speedup_time, r.seconds_to_target) : none) << " | "
       << detail::pm(r.step_time_ms, "%.1f") << " | " << detail::pm(r.tokens_per_s, "%.0f") << " |\n";
  }
  if (!std::isfinite(a.target_loss)) {
    os << "\nThe baseline's mean final val loss is not finite (a diverged or unevaluated run?), so there is no "
          "target and no speedup.\n";
  } else {
    for (const auto& r : a.rows)
      if (r.variant == a.baseline && r.tokens_to_target.n > 0 && !r.tokens_to_target.all_reached())
        os << "\n" << r.tokens_to_target.not_reached() << "/" << r.tokens_to_target.n
           << " baseline seeds end above the baseline's mean final val loss and so never reach it; the "
              "reference is the mean over the seeds that do.\n";
  }
  for (std::size_t bi = 1; bi < info.baselines.size(); ++bi) {
    const Analysis b = analyze(variants, info.step_s, info.baselines[bi]);
    const std::string d = baseline_description(b.baseline);
    os << "\n## Against " << detail::md_cell(b.baseline) << (d.empty() ? "" : ": " + d) << "\n\n"
       << "Target: " << b.baseline << "'s mean final val loss, " << detail::fmt("%.4f", b.target_loss)
       << "; reference: its own tokens and time to reach it, as above.\n\n"
       << "| variant | tokens to target | speedup (tokens) | time to target (s) | speedup (time) |\n"
       << "|---|---|---|---|---|\n";
    const bool target = std::isfinite(b.target_loss);
    const std::string none = "n/a (no target)";
    for (const auto& r : b.rows) {
      std::string name = detail::md_cell(r.variant);
      if (r.variant == b.baseline) name += " (baseline)";
      os << "| " << name << " | " << (target ? detail::reach_cell(r.tokens_to_target, "%.0f") : none) << " | "
         << (target ? detail::speedup_cell(r.speedup_tokens, r.tokens_to_target) : none) << " | "
         << (target ? detail::reach_cell(r.seconds_to_target, secs_fmt) : none) << " | "
         << (target ? detail::speedup_cell(r.speedup_time, r.seconds_to_target) : none) << " |\n";
    }
  }
  if (!info.context_md.empty()) os << "\n" << info.context_md;
  os << "\n## Spread over seeds\n\n"
        "95% intervals of the mean over seeds: mean ± t(n−1)·sd/√n (n ≥ 2 seeds). Tokens to target are over the "
        "seeds that reach it.\n\n"
        "| variant | seeds | final val loss | 95% interval | reached target | tokens to target | 95% interval |\n"
        "|---|---|---|---|---|---|---|\n";
  const auto interval = [](const Stats& st, const char* f) {
    const Interval iv = ci95(st);
    return iv.valid() ? "[" + detail::fmt(f, iv.lo) + ", " + detail::fmt(f, iv.hi) + "]" : std::string("n/a (n < 2)");
  };
  for (const auto& r : a.rows) {
    const bool target = std::isfinite(a.target_loss);
    os << "| " << detail::md_cell(r.variant) << " | " << r.n << " | " << detail::pm(r.final_val_loss, "%.4f") << " | "
       << interval(r.final_val_loss, "%.4f") << " | "
       << (target ? std::to_string(r.tokens_to_target.reached) + "/" + std::to_string(r.tokens_to_target.n) : "n/a")
       << " | " << (target && r.tokens_to_target.reached > 0 ? detail::pm(r.tokens_to_target.stats, "%.0f") : "n/a")
       << " | " << (target ? interval(r.tokens_to_target.stats, "%.0f") : "n/a") << " |\n";
  }
  if (!info.sweep_md.empty()) os << "\n## Learning-rate sweep\n\n" << info.sweep_md;
  return os.str();
}

namespace detail {

// A gnuplot single-quoted string: only '' needs escaping.
inline std::string gp_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += (c == '\'') ? std::string("''") : std::string(1, c);
  return out + "'";
}

}  // namespace detail

// A self-contained gnuplot script (data inline) that draws val loss vs tokens,
// one thin line per variant x seed (colour = variant, dash = seed) and, for a
// variant with several seeds, their mean as a thick line; the target as a
// dashed horizontal line and the entropy floor (when known) as a dotted one. It
// writes png_name and svg_name relative to the directory gnuplot runs in.
inline std::string loss_plot_script(const std::vector<VariantRuns>& variants, const Analysis& a,
                                    std::optional<double> entropy_floor_nats, const std::string& png_name,
                                    const std::string& svg_name) {
  std::ostringstream os;
  os << "# Written by normlab-ablate. Re-run with: gnuplot loss.gp (from this directory)\n";
  std::vector<std::string> plots;
  std::size_t block = 0;
  for (std::size_t vi = 0; vi < variants.size(); ++vi) {
    const auto& v = variants[vi];
    for (std::size_t si = 0; si < v.runs.size(); ++si) {
      const auto& r = v.runs[si];
      const std::string name = "$run" + std::to_string(block++);
      os << name << " << EOD\n";
      std::size_t points = 0;
      for (std::size_t i = 0; i < r.curve.size(); ++i) {
        if (!std::isfinite(r.curve.val_loss[i]) || !std::isfinite(r.curve.tokens[i])) continue;
        char buf[96];
        // Millions of tokens: one tick format for the whole axis (was "800.0" next to "1.0k").
        std::snprintf(buf, sizeof buf, "%.12g %.17g\n", r.curve.tokens[i] / 1e6, r.curve.val_loss[i]);
        os << buf;
        ++points;
      }
      os << "EOD\n";
      if (points == 0) continue;  // gnuplot errors on an empty datablock
      plots.push_back(name + " using 1:2 with linespoints lc " + std::to_string(vi + 1) + " dt " +
                      std::to_string(si % 5 + 1) + " lw 1 pt 7 ps 0.4 title " +
                      detail::gp_quote(v.variant + " seed " + std::to_string(r.seed)));
    }
    // With several seeds, their mean as a thick line: at each eval point every
    // seed has (same tokens, finite loss); points where one lacks it are left out.
    if (v.runs.size() >= 2) {
      const std::string name = "$mean" + std::to_string(vi);
      os << name << " << EOD\n";
      std::size_t points = 0;
      const Curve& c0 = v.runs.front().curve;
      for (std::size_t i = 0; i < c0.size(); ++i) {
        double sum = 0;
        bool all = std::isfinite(c0.tokens[i]);
        for (const auto& r : v.runs) {
          if (i >= r.curve.size() || r.curve.tokens[i] != c0.tokens[i] || !std::isfinite(r.curve.val_loss[i])) {
            all = false;
            break;
          }
          sum += r.curve.val_loss[i];
        }
        if (!all) continue;
        char buf[96];
        std::snprintf(buf, sizeof buf, "%.12g %.17g\n", c0.tokens[i] / 1e6, sum / double(v.runs.size()));
        os << buf;
        ++points;
      }
      os << "EOD\n";
      if (points > 0)
        plots.push_back(name + " using 1:2 with lines lc " + std::to_string(vi + 1) + " dt 1 lw 3 title " +
                        detail::gp_quote(v.variant + " mean of " + std::to_string(v.runs.size()) + " seeds"));
    }
  }
  if (std::isfinite(a.target_loss))
    plots.push_back(detail::fmt("%.17g", a.target_loss) + " with lines lc rgb 'black' dt 2 lw 1.5 title " +
                    detail::gp_quote(a.baseline + " final val loss " + detail::fmt("%.4f", a.target_loss) +
                                     " (target)"));
  // The y range follows the curves past their first tenth of tokens (the first evals
  // sit far above and would flatten the part that matters) and the target; the
  // entropy floor is drawn only when it falls inside that range, else named in the title.
  double lo = INFINITY, hi = -INFINITY, max_tokens = 0;
  for (const auto& v : variants)
    for (const auto& r : v.runs)
      for (std::size_t i = 0; i < r.curve.size(); ++i)
        if (std::isfinite(r.curve.tokens[i])) max_tokens = std::max(max_tokens, r.curve.tokens[i]);
  for (const auto& v : variants)
    for (const auto& r : v.runs)
      for (std::size_t i = 0; i < r.curve.size(); ++i) {
        const double y = r.curve.val_loss[i];
        if (!std::isfinite(y)) continue;
        lo = std::min(lo, y);
        if (r.curve.tokens[i] >= 0.1 * max_tokens) hi = std::max(hi, y);
      }
  if (std::isfinite(a.target_loss)) {
    lo = std::min(lo, a.target_loss);
    hi = std::max(hi, a.target_loss);
  }
  std::string title = "normlab ablation: validation loss vs tokens";
  const bool ranged = std::isfinite(lo) && std::isfinite(hi) && hi > lo;
  if (entropy_floor_nats && std::isfinite(*entropy_floor_nats)) {
    if (!ranged || *entropy_floor_nats >= lo - 0.1 * (hi - lo))
      plots.push_back(detail::fmt("%.17g", *entropy_floor_nats) + " with lines lc rgb 'gray40' dt 3 lw 1.5 title " +
                      detail::gp_quote("entropy floor " + detail::fmt("%.4f", *entropy_floor_nats) + " nats"));
    else
      title += " (entropy floor " + detail::fmt("%.4f", *entropy_floor_nats) + " nats, below the plot)";
  }
  os << "set xlabel 'tokens (millions)'\n"
        "set ylabel 'validation loss (nats/token)'\n"
        "set title " << detail::gp_quote(title) << "\n"
        "set grid\n"
        "set key outside right top\n"   // beside the plot: never over a curve
        "set format x '%g'\n";
  if (ranged) {
    const double pad = 0.05 * (hi - lo);
    os << "set yrange [" << detail::fmt("%.6g", lo - pad) << ":" << detail::fmt("%.6g", hi + pad) << "]\n";
  }
  std::string cmd = "plot ";
  for (std::size_t i = 0; i < plots.size(); ++i) {
    if (i) cmd += ", \\\n     ";
    cmd += plots[i];
  }
  if (plots.empty()) cmd = "set label 1 'no data' at graph 0.5, graph 0.5 center\nplot [0:1] [0:1] NaN notitle";
  os << "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
        "  set terminal pngcairo size 1200,650 noenhanced font ',10'\n"
        "} else {\n"
        "  set terminal png size 1200,650 noenhanced\n"
        "}\n"
        "set output " << detail::gp_quote(png_name) << "\n"
     << cmd << "\n"
     << "set terminal svg size 1200,650 dynamic noenhanced\n"
        "set output " << detail::gp_quote(svg_name) << "\n"
     << "replot\n"
        "unset output\n";
  return os.str();
}

}  // namespace normlab::ablate
