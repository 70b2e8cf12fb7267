#pragma once
// normlab::ablate, its analysis: the pure logic behind `normlab-ablate`: read the files a
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
  // "fp32" or "bf16" (--precision); empty before it was recorded (fp32).
  std::string precision;
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
                                 std::pair<const char*, std::string*>{"schedule", &s.schedule},
                                 std::pair<const char*, std::string*>{"precision", &s.precision}}) {
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

}  // namespace normlab::ablate
