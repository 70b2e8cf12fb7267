// normlab-ablate --variants gpt,ngpt --seeds 1,2 --out DIR [--bin-dir DIR] [--dry-run] [--report-only]
//                -- <flags passed to every train-<variant>>
//
// Runs every train-<variant> once per seed, one after another, each with
// `--seed S --out DIR/<variant>/seed<S>` followed by the pass-through flags, then
// writes DIR/results.md (see normlab/app/ablate.hpp for what is measured),
// DIR/loss.gp and, with gnuplot, DIR/loss_vs_tokens.png and .svg. With
// --extrapolate, normlab-eval measures each run's final checkpoint at multiples of
// its training context: a table in results.md and DIR/loss_vs_context.png/.svg.
// Exit codes: 0 success, 1 a trainer or gnuplot failed / a run's files are
// unreadable, 2 bad input (flags, missing trainer executables).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "normlab/core/process.hpp"
#include "normlab/app/ablate.hpp"
#include "normlab/app/cli.hpp"
#include "normlab/app/context_report.hpp"
#include "normlab/train/variant_names.hpp"

namespace fs = std::filesystem;
using normlab::find_on_path;
using normlab::is_executable_file;
namespace ab = normlab::ablate;

namespace {

// Bad input: reported and exit 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+=./,:@%") ==
                        std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string join_quoted(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& a : args) {
    if (!out.empty()) out += ' ';
    out += shell_quote(a);
  }
  return out;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s + ",") {
    if (c == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (c != ' ') {
      cur += c;
    }
  }
  return out;
}

std::vector<std::string> parse_variants(const std::string& s) {
  std::vector<std::string> out = split_list(s);
  if (out.empty()) throw UsageError("--variants is empty");
  std::set<std::string> seen;
  for (const auto& v : out) {
    if (v.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.") != std::string::npos ||
        v == "." || v == "..")
      throw UsageError("--variants: \"" + v + "\" is not a valid variant name (letters, digits, _ - . only)");
    if (!seen.insert(v).second) throw UsageError("--variants: \"" + v + "\" is given twice");
  }
  return out;
}

std::vector<std::int64_t> parse_seeds(const std::string& s) {
  std::vector<std::int64_t> out;
  std::set<std::int64_t> seen;
  for (const auto& tok : split_list(s)) {
    std::int64_t v = 0;
    if (!normlab::cli::detail::parse_int(tok, v)) throw UsageError("--seeds: \"" + tok + "\" is not an integer");
    if (!seen.insert(v).second) throw UsageError("--seeds: " + tok + " is given twice");
    out.push_back(v);
  }
  if (out.empty()) throw UsageError("--seeds is empty");
  return out;
}

fs::path run_dir(const fs::path& out, const std::string& variant, std::int64_t seed) {
  return out / variant / ("seed" + std::to_string(seed));
}

// Runs exe with args (no shell), output going straight to our stdout/stderr.
int run_child(const fs::path& exe, const std::vector<std::string>& args, const fs::path& cwd = {}) {
  const int rc = normlab::run_program(exe, args, cwd);
  if (rc == 127 && !normlab::is_executable_file(exe))
    std::fprintf(stderr, "normlab-ablate: cannot execute %s\n", exe.c_str());
  return rc;
}

std::string describe_status(int rc) {
  if (rc > 128 && rc < 128 + 65) {
    const int sig = rc - 128;
    const char* name = ::strsignal(sig);
    return "was killed by signal " + std::to_string(sig) + (name ? std::string(" (") + name + ")" : "");
  }
  return "failed with exit code " + std::to_string(rc);
}

// One timing round, step by step: every variant's trainer starts at once with
// --time-gate 3,4 (a pipe each way) and waits; once all are ready, each step
// goes to one trainer at a time, in the variants' order (like BM_StepPair), so
// the machine runs one step at a time and every variant meets the same
// machine state within the round. A trainer that fails or closes its pipe stops
// the round: the others see their pipes close and stop too.
void time_round_step_by_step(const std::vector<std::string>& variants, std::int64_t steps,
                             const std::vector<fs::path>& exes, const std::vector<std::vector<std::string>>& args,
                             std::int64_t round) {
  struct Child {
    pid_t pid = -1;
    int go = -1, done = -1;  // our ends: we write "go", read "done"
  };
  std::vector<Child> kids(variants.size());
  const auto sigpipe = std::signal(SIGPIPE, SIG_IGN);  // a trainer gone: a failed write, not our death
  // Closes our ends (a trainer still waiting reads end-of-file and stops),
  // collects every trainer and throws when one failed: the culprit's status
  // first (the others stop because it did).
  auto finish = [&](std::size_t culprit, const std::string& failed) {
    for (Child& k : kids)
      if (k.go >= 0) ::close(k.go), k.go = -1;
    std::vector<int> rcs(kids.size(), 0);
    for (std::size_t i = 0; i < kids.size(); ++i) {
      if (kids[i].done >= 0) ::close(kids[i].done);
      if (kids[i].pid >= 0) rcs[i] = normlab::wait_program(kids[i].pid);
    }
    std::signal(SIGPIPE, sigpipe);
    std::string why;
    if (culprit < kids.size())
      why = rcs[culprit] != 0 ? "train-" + variants[culprit] + " --time-steps --time-gate " + describe_status(rcs[culprit])
                              : failed;
    for (std::size_t i = 0; i < kids.size() && why.empty(); ++i)
      if (rcs[i] != 0) why = "train-" + variants[i] + " --time-steps --time-gate " + describe_status(rcs[i]);
    if (why.empty()) why = failed;
    if (!why.empty()) throw normlab::Error(why + " (timing round " + std::to_string(round) + ")");
  };
  constexpr std::size_t kNoCulprit = std::size_t(-1);
  for (std::size_t i = 0; i < variants.size(); ++i) {
    int go[2], done[2];
    if (::pipe2(go, O_CLOEXEC) != 0) finish(kNoCulprit, std::string("pipe: ") + std::strerror(errno));
    if (::pipe2(done, O_CLOEXEC) != 0) {
      ::close(go[0]), ::close(go[1]);
      finish(kNoCulprit, std::string("pipe: ") + std::strerror(errno));
    }
    std::vector<std::string> a = args[i];
    a.insert(a.end(), {"--time-gate", "3,4"});
    kids[i].go = go[1];
    kids[i].done = done[0];
    kids[i].pid = normlab::start_program(exes[i], a, {}, {}, {{go[0], 3}, {done[1], 4}});
    ::close(go[0]);
    ::close(done[1]);
  }
  auto exchange = [&](std::size_t i, bool send) {
    char b = '\n';
    ssize_t n = 1;
    if (send)
      while ((n = ::write(kids[i].go, &b, 1)) < 0 && errno == EINTR) {}
    if (n == 1)
      while ((n = ::read(kids[i].done, &b, 1)) < 0 && errno == EINTR) {}
    if (n != 1) finish(i, "train-" + variants[i] + " stopped answering its timing gate");
  };
  for (std::size_t i = 0; i < kids.size(); ++i) exchange(i, false);  // every trainer ready
  for (std::int64_t step = 0; step < steps + 2; ++step)              // 2 warm-up steps, as the trainers count
    for (std::size_t i = 0; i < kids.size(); ++i) exchange(i, true);
  finish(kNoCulprit, "");
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  if (!f) throw normlab::Error("cannot write " + p.string());
  f << text;
  f.close();
  if (!f) throw normlab::Error("error writing " + p.string());
}

// Variants and seeds found under OUT: OUT/<variant>/seed<S>/summary.json.
// gpt first (the baseline), the rest by name; seeds ascending.
void discover(const fs::path& out, std::vector<std::string>& variants, std::vector<std::int64_t>& seeds) {
  std::set<std::string> vs;
  std::set<std::int64_t> ss;
  for (const auto& e : fs::directory_iterator(out)) {
    if (!e.is_directory()) continue;
    for (const auto& s : fs::directory_iterator(e.path())) {
      const std::string n = s.path().filename().string();
      if (!s.is_directory() || n.rfind("seed", 0) != 0 || !fs::exists(s.path() / "summary.json")) continue;
      try {
        std::size_t pos = 0;
        const long long v = std::stoll(n.substr(4), &pos);
        if (pos != n.size() - 4) continue;
        vs.insert(e.path().filename().string());
        ss.insert(v);
      } catch (const std::exception&) {
      }
    }
  }
  if (vs.count("gpt")) variants.push_back("gpt");
  for (const auto& v : vs)
    if (v != "gpt") variants.push_back(v);
  seeds.assign(ss.begin(), ss.end());
}

// OUT/ablation.json, the record a study writes when it starts, if OUT has one.
std::optional<nlohmann::json> read_study_record(const fs::path& out) {
  const fs::path rec = out / "ablation.json";
  if (!fs::exists(rec)) return std::nullopt;
  try {
    std::ifstream f(rec);
    return nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw normlab::Error(rec.string() + ": " + e.what());
  }
}
// One field of that record; a missing or mistyped one is an error naming the file.
template <class V>
V record_field(const nlohmann::json& record, const fs::path& out, const char* key) {
  try {
    return record.at(key).get<V>();
  } catch (const nlohmann::json::exception& e) {
    throw normlab::Error((out / "ablation.json").string() + ": " + e.what());
  }
}

struct Options {
  std::string variants_s, seeds_s, out, bin_dir, lr_grid_s, lrs_s, baselines_s, extrapolate_s, budgets_s;
  std::string sweep_flag = "--lr";  // the trainer flag --lr-grid sweeps (e.g. --muon-lr)
  std::int64_t sweep_steps = 0;    // 0: a quarter of the study's --steps
  std::int64_t grid_extensions = 3;  // rates a variant's sweep may add past an edge winner
  bool full_horizon_check = true;    // the sweep's best two rates re-run at the study's --steps
  std::int64_t timing_rounds = 3;  // 0: time to target from the runs' wall clock
  std::int64_t timing_steps = 5;
  bool dry_run = false, report_only = false;
  std::vector<std::string> pass;
};

// A positive, finite learning rate spelled exactly by `tok`, else nullopt.
std::optional<double> positive_rate(const std::string& tok) {
  std::size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(tok, &pos);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (pos != tok.size() || pos == 0 || !std::isfinite(v) || !(v > 0)) return std::nullopt;
  return v;
}

std::vector<double> parse_lr_grid(const std::string& s) {
  std::vector<double> out;
  for (const auto& tok : split_list(s)) {
    const std::optional<double> r = positive_rate(tok);
    if (!r) throw UsageError("--lr-grid: \"" + tok + "\" is not a positive learning rate");
    const double v = *r;
    if (std::find(out.begin(), out.end(), v) != out.end()) throw UsageError("--lr-grid: " + tok + " is given twice");
    out.push_back(v);
  }
  if (out.empty()) throw UsageError("--lr-grid is empty");
  std::sort(out.begin(), out.end());
  return out;
}

// --lrs gpt=3e-3,ngpt=1e-2: a learning rate per variant (e.g. another study's sweep.json choices).
std::map<std::string, double> parse_lrs(const std::string& s, const std::vector<std::string>& variants) {
  std::map<std::string, double> out;
  for (const auto& tok : split_list(s)) {
    const auto eq = tok.find('=');
    if (eq == std::string::npos) throw UsageError("--lrs: \"" + tok + "\" is not VARIANT=LR");
    const std::string v = tok.substr(0, eq), x = tok.substr(eq + 1);
    if (std::find(variants.begin(), variants.end(), v) == variants.end())
      throw UsageError("--lrs: \"" + v + "\" is not one of --variants");
    const std::optional<double> lr = positive_rate(x);
    if (!lr) throw UsageError("--lrs: \"" + x + "\" is not a positive learning rate (for " + v + ")");
    if (!out.emplace(v, *lr).second) throw UsageError("--lrs: " + v + " is given twice");
  }
  for (const auto& v : variants)
    if (!out.count(v)) throw UsageError("--lrs: no learning rate for " + v);
  return out;
}

// The value of a pass-through flag ("--steps 300" or "--steps=300"), last one winning as in the trainers.
std::optional<std::string> pass_value(const std::vector<std::string>& pass, const std::string& flag) {
  std::optional<std::string> v;
  for (std::size_t i = 0; i < pass.size(); ++i) {
    if (pass[i] == flag && i + 1 < pass.size()) v = pass[i + 1];
    else if (pass[i].rfind(flag + "=", 0) == 0) v = pass[i].substr(flag.size() + 1);
  }
  return v;
}

std::string lr_name(double lr) {
  char b[64];
  std::snprintf(b, sizeof b, "%g", lr);
  return b;
}
fs::path sweep_dir(const fs::path& out, const std::string& variant, double lr) {
  return out / "sweep" / variant / ("lr" + lr_name(lr));
}

fs::path recheck_dir(const fs::path& out, const std::string& variant, double lr) {
  return out / "recheck" / variant / ("lr" + lr_name(lr));
}

// The rates a variant's sweep has run: the grid's and those its extensions added
// (OUT/sweep/<variant>/lr<rate>), ascending.
std::vector<double> swept_rates(const fs::path& out, const std::string& variant, const std::vector<double>& grid) {
  std::set<double> rates(grid.begin(), grid.end());
  std::error_code ec;
  if (fs::is_directory(out / "sweep" / variant, ec))
    for (const auto& e : fs::directory_iterator(out / "sweep" / variant)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("lr", 0) == 0)
        if (const auto r = positive_rate(name.substr(2))) rates.insert(*r);
    }
  return {rates.begin(), rates.end()};
}

// One finished (or diverged) run at a rate, as the sweep's selection reads it.
void read_rate_run(std::vector<ab::SweepRun>& runs, const fs::path& dir, const std::string& v, double g) {
  if (fs::exists(dir / "DIVERGED")) runs.push_back({v, g, std::nullopt});
  if (!fs::exists(dir / "summary.json")) return;
  runs.push_back({v, g, ab::read_summary(dir / "summary.json").final_val_loss});
}

// Above the sweep's table when it swept another flag than --lr: which, and
// that the "lr" columns are that flag's values.
std::string sweep_flag_note(const std::string& flag, bool lrs_given) {
  if (flag == "--lr") return "";
  return "The sweep is of `" + flag + "`: the \"lr\" columns below are its values; each variant's `--lr` " +
         (lrs_given ? std::string("is the one --lrs gave (ablation.json)") : std::string("is the trainers'")) +
         ".\n\n";
}

// The re-check of OUT/recheck.json as markdown, below the sweep's table.
std::string recheck_markdown(const nlohmann::json& j, std::int64_t full_steps) {
  std::ostringstream os;
  os << "\nFull-horizon re-check: each variant's two best swept rates trained again for the study's " << full_steps
     << " steps (first seed); the better final validation loss decides the rate of its full runs, and that run is "
        "the first seed's run.\n\n| variant | rate: loss at full horizon | chosen lr |\n|---|---|---|\n";
  for (const auto& [v, r] : j.items()) {
    os << "| " << v << " | ";
    if (r.contains("why_not")) {
      os << "not re-checked: " << r.at("why_not").get<std::string>() << " | " << lr_name(r.at("chosen").get<double>()) << " |\n";
      continue;
    }
    const auto rates = r.at("rates").get<std::vector<double>>();
    for (std::size_t i = 0; i < rates.size(); ++i) {
      const auto& l = r.at("losses").at(i);
      char b[64];
      std::snprintf(b, sizeof b, "%.4f", l.is_number() ? l.get<double>() : std::nan(""));
      os << (i ? ", " : "") << lr_name(rates[i]) << ": " << (l.is_number() ? b : "diverged");
    }
    os << " | " << lr_name(r.at("chosen").get<double>()) << " |\n";
  }
  return os.str();
}

// The sweep's runs as they stand in OUT (summary.json of each), for selection and the report.
std::vector<ab::SweepRun> read_sweep(const fs::path& out, const std::vector<std::string>& variants,
                                     const std::vector<double>& grid) {
  std::vector<ab::SweepRun> runs;
  for (const auto& v : variants)
    for (double g : swept_rates(out, v, grid)) read_rate_run(runs, sweep_dir(out, v, g), v, g);
  return runs;
}

// OUT/timing/<variant>/round<r>/step_time.json: that timing round's median step, s.
fs::path round_step_file(const fs::path& out, const std::string& v, std::int64_t r) {
  return out / "timing" / v / ("round" + std::to_string(r)) / "step_time.json";
}
double read_round_step_time(const fs::path& f) {
  try {
    std::ifstream in(f);
    return nlohmann::json::parse(in).at("step_time_s").get<double>();
  } catch (const nlohmann::json::exception& e) {
    throw normlab::Error(f.string() + ": " + e.what());
  }
}

// OUT/timing.json: the interleaved step times, {"method": ..., "step_s": {variant: s}}.
void read_timing(const fs::path& out, ab::ReportInfo& info) {
  const fs::path p = out / "timing.json";
  if (!fs::exists(p)) return;
  try {
    std::ifstream f(p);
    const nlohmann::json j = nlohmann::json::parse(f);
    info.step_s_method = j.at("method").get<std::string>();
    info.step_s = j.at("step_s").get<std::map<std::string, double>>();
    if (j.contains("spread")) info.step_spread = j.at("spread").get<std::map<std::string, double>>();
  } catch (const nlohmann::json::exception& e) {
    throw normlab::Error(p.string() + ": " + e.what());
  }
  // Each round's time, from the rounds' own files (OUT/timing/<variant>/round<r>/step_time.json).
  for (const auto& entry : info.step_s) {
    const std::string& v = entry.first;
    std::vector<double> rounds;
    for (std::int64_t r = 1; fs::exists(round_step_file(out, v, r)); ++r)
      rounds.push_back(read_round_step_time(round_step_file(out, v, r)));
    if (!rounds.empty()) info.step_rounds[v] = std::move(rounds);
  }
}

std::vector<std::string> parse_baselines(const std::string& s, const std::vector<std::string>& variants) {
  std::vector<std::string> out = split_list(s);
  if (out.empty()) throw UsageError("--baselines is empty");
  for (const auto& b : out) {
    if (std::find(variants.begin(), variants.end(), b) == variants.end())
      throw UsageError("--baselines: \"" + b + "\" is not one of --variants");
    if (std::count(out.begin(), out.end(), b) > 1) throw UsageError("--baselines: " + b + " is given twice");
  }
  return out;
}

// "1,2,4,8": multiples of the training context, each an integer from 1 to 64.
std::vector<std::int64_t> parse_multiples(const std::string& s) {
  std::vector<std::int64_t> out;
  for (const auto& tok : split_list(s)) {
    std::int64_t v = 0;
    if (!normlab::cli::detail::parse_int(tok, v) || v < 1 || v > 64)
      throw UsageError("--extrapolate: \"" + tok + "\" is not a multiple of the training context from 1 to 64");
    out.push_back(v);
  }
  if (out.empty()) throw UsageError("--extrapolate is empty (e.g. --extrapolate 1,2,4,8)");
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// "0.25,0.5,1": fractions of the study's steps, each in (0, 1]; the full runs
// are the budget 1, so the smaller ones are returned, ascending.
std::vector<double> parse_budgets(const std::string& s) {
  std::set<double> out;
  for (const auto& tok : split_list(s)) {
    const std::optional<double> f = positive_rate(tok);
    if (!f || *f > 1) throw UsageError("--budgets: \"" + tok + "\" is not a fraction of the study's steps in (0, 1]");
    if (*f < 1) out.insert(*f);
  }
  if (out.empty()) throw UsageError("--budgets needs a fraction below 1 (e.g. --budgets 0.25,0.5,1)");
  return {out.begin(), out.end()};
}

fs::path budget_dir(const fs::path& out, double fraction, const std::string& variant, std::int64_t seed) {
  return out / ("budget" + lr_name(fraction)) / variant / ("seed" + std::to_string(seed));
}

std::string join_ints(const std::vector<std::int64_t>& xs) {
  std::string out;
  for (const auto x : xs) {
    if (!out.empty()) out += ',';
    out += std::to_string(x);
  }
  return out;
}

fs::path context_dir(const fs::path& out, const std::string& variant, std::int64_t seed) {
  return run_dir(out, variant, seed) / "context";
}

// Where each variant's trainer is: train-<variant> in --bin-dir (default: this
// tool's own directory). For normlab's own variants, when --bin-dir has none,
// this tool's directory too: a user's project builds only its own variants, and
// the package installs normlab's trainers beside normlab-ablate.
struct Trainers {
  fs::path bin, self;  // self: empty when /proc/self/exe cannot be read (then --bin-dir only)
  std::map<std::string, fs::path> exe;
  // Another of normlab's programs (normlab-eval): in --bin-dir, else beside this tool.
  fs::path tool(const std::string& name) const {
    if (is_executable_file(bin / name) || self.empty()) return bin / name;
    return self / name;
  }
};

// Exits 2 (UsageError) naming an unknown variant, or every trainer missing, before anything runs.
Trainers find_trainers(const std::vector<std::string>& variants, const std::string& bin_dir) {
  Trainers t;
  std::error_code ec;
  const fs::path self_exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec && bin_dir.empty())
    throw normlab::Error("cannot find this executable's directory (/proc/self/exe): " + ec.message() +
                         "; pass --bin-dir");
  if (!ec) t.self = self_exe.parent_path();
  t.bin = bin_dir.empty() ? t.self : fs::path(bin_dir);
  const bool fallback = !t.self.empty() && !bin_dir.empty() && fs::weakly_canonical(t.bin) != t.self;
  std::vector<std::string> missing;
  for (const auto& v : variants) {
    const std::string name = "train-" + v;
    const bool builtin = normlab::is_builtin_variant_name(v);
    if (is_executable_file(t.bin / name)) {
      t.exe[v] = t.bin / name;
    } else if (!builtin) {
      throw UsageError("unknown variant '" + v + "' (known: " + normlab::known_variants() +
                       "; a variant of your own needs its " + name + " in --bin-dir)");
    } else if (fallback && is_executable_file(t.self / name)) {
      t.exe[v] = t.self / name;
    } else {
      missing.push_back((t.bin / name).string());
    }
  }
  if (missing.empty()) return t;
  std::string msg = "missing trainer executable" + std::string(missing.size() > 1 ? "s" : "") + ": ";
  for (std::size_t i = 0; i < missing.size(); ++i) {
    if (i) msg += ", ";
    msg += missing[i];
  }
  msg += " (looked in " + t.bin.string();
  if (bin_dir.empty()) msg += ", this tool's directory; set --bin-dir";
  else if (fallback) msg += " and beside normlab-ablate, in " + t.self.string();
  throw UsageError(msg + "). Nothing was run.");
}

int run(int argc, char** argv) {
  // Everything after the first "--" goes to the trainers untouched.
  std::vector<std::string> own_args{argv[0]};
  Options o;
  bool after = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (!after && a == "--") {
      after = true;
      continue;
    }
    (after ? o.pass : own_args).push_back(a);
  }
  std::vector<std::string> all_args(argv, argv + argc);
  const std::string command_line = join_quoted(all_args);

  CLI::App app{
      "Run every train-<variant> for every seed, then compare the variants: results.md (tokens and wall-clock "
      "time to reach the gpt baseline's final val loss) and a loss-vs-tokens plot.\n"
      "Usage: normlab-ablate --variants gpt,ngpt --seeds 1,2 --out DIR [options] -- <trainer flags>"};
  app.add_option("--variants", o.variants_s,
                 "REQUIRED (but with --report-only): comma-separated variants, e.g. gpt,ngpt,angpt (gpt is the "
                 "baseline); known: " + normlab::known_variants());
  app.add_option("--seeds", o.seeds_s, "REQUIRED (but with --report-only): comma-separated seeds, e.g. 1,2,3");
  app.add_option("--out", o.out, "output directory; runs go to OUT/<variant>/seed<S>")->required();
  app.add_option("--bin-dir", o.bin_dir, "where the train-<variant> executables are (default: this tool's directory); normlab's own "
                 "variants not there are taken from this tool's directory (the installed package's)");
  app.add_option("--lr-grid", o.lr_grid_s,
                 "sweep these peak learning rates first (e.g. 1e-3,3e-3,1e-2,3e-2): every variant for --sweep-steps "
                 "at each, on the first seed; each variant's full runs then use the rate with the lowest final val loss");
  app.add_option("--lrs", o.lrs_s,
                 "a peak learning rate (--lr) per variant instead of a sweep, e.g. gpt=3e-3,ngpt=1e-2 (every variant "
                 "of --variants; e.g. another study's OUT/sweep.json); with --sweep-flag, the fixed --lr beside it");
  app.add_option("--sweep-flag", o.sweep_flag,
                 "the trainer flag whose value --lr-grid sweeps (default --lr); e.g. --muon-lr sweeps Muon's rate of "
                 "the hidden matrices, each variant's --lr given by --lrs or the trainer's default")
      ->capture_default_str();
  app.add_option("--sweep-steps", o.sweep_steps, "steps of each sweep run (default: a quarter of the study's --steps)")
      ->check(CLI::PositiveNumber);
  app.add_option("--grid-extensions", o.grid_extensions,
                 "when a variant's best swept rate is the smallest or largest it tried, sweep one more rate x3 past "
                 "it (/3 below), at most this many times per variant (0: the grid as given)")
      ->capture_default_str()->check(CLI::Range(0, 10));
  app.add_flag("!--no-full-horizon-check", o.full_horizon_check,
               "skip re-running each variant's two best swept rates at the study's --steps (the sweep's runs are "
               "shorter; a rate that wins early may lose at the full horizon)");
  app.add_option("--timing-rounds", o.timing_rounds,
                 "after the runs, time the variants this many rounds, each alternating them step by step "
                 "(train-<variant> --time-steps --time-gate), for time to target; 0: use each run's wall clock instead")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--timing-steps", o.timing_steps, "timed steps per variant and round")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--baselines", o.baselines_s,
                 "the reference variant(s): the first is the main table's, each further one gets a table of its own "
                 "(e.g. gpt_qknorm,gpt: GPT+ as in the nGPT/anGPT papers, plain GPT beside it); default: gpt if "
                 "present, else the first variant");
  app.add_option("--extrapolate", o.extrapolate_s,
                 "after the runs, evaluate each run's final checkpoint at these multiples of its training context "
                 "(normlab-eval, e.g. 1,2,4,8): a table in results.md and loss_vs_context.png");
  app.add_option("--budgets", o.budgets_s,
                 "also train every variant and seed to these fractions of --steps (e.g. 0.25,0.5,1), each run with "
                 "its own schedule: tokens to target from the loss-vs-budget curve, beside the crossing in one run");
  app.add_flag("--dry-run", o.dry_run,
               "print the commands that would run and let each trainer check its flags (--dry-run), train nothing");
  app.add_flag("--report-only", o.report_only,
               "re-make results.md and the plots from an existing OUT (variants/seeds: the flags, else those recorded "
               "in OUT/ablation.json, else those found in OUT)");
  std::vector<char*> own_argv;
  for (auto& a : own_args) own_argv.push_back(a.data());
  try {
    app.parse(int(own_argv.size()), own_argv.data());
  } catch (const CLI::ExtrasError& e) {
    app.exit(e);
    std::fprintf(stderr, "hint: flags for the trainers go after a lone --, e.g. normlab-ablate --variants gpt,ngpt "
                         "--seeds 1 --out runs/x -- --steps 100\n");
    return 2;
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  // Given on this command line (else a resumed study keeps what it recorded).
  const bool extensions_given = app.count("--grid-extensions") > 0, check_given = app.count("--no-full-horizon-check") > 0;
  const fs::path out = o.out;
  std::vector<std::string> variants;
  std::vector<std::int64_t> seeds;
  if (!o.variants_s.empty()) variants = parse_variants(o.variants_s);
  if (!o.seeds_s.empty()) seeds = parse_seeds(o.seeds_s);

  // Read once: what the study in OUT recorded when it started (absent for a new one).
  const std::optional<nlohmann::json> record = read_study_record(out);
  std::vector<std::string> baselines;
  std::vector<std::int64_t> multiples;
  if (!o.extrapolate_s.empty()) multiples = parse_multiples(o.extrapolate_s);
  std::vector<double> budgets;
  if (!o.budgets_s.empty()) budgets = parse_budgets(o.budgets_s);

  ab::ReportInfo info;
  info.date = utc_now();
  info.command_line = command_line;
  info.config = join_quoted(o.pass);

  if (o.report_only) {
    if (o.dry_run) throw UsageError("--dry-run and --report-only do not go together");
    if (!o.pass.empty()) throw UsageError("--report-only runs no trainer, so it takes no flags after --");
    if (!fs::is_directory(out)) throw UsageError("--report-only: " + out.string() + " is not a directory");
    if (record) {
      if (variants.empty()) variants = record_field<std::vector<std::string>>(*record, out, "variants");
      if (seeds.empty()) seeds = record_field<std::vector<std::int64_t>>(*record, out, "seeds");
      info.command_line = record_field<std::string>(*record, out, "command_line");
      info.config = record_field<std::string>(*record, out, "config");
      info.date = record_field<std::string>(*record, out, "date") + " (runs); report re-made " + utc_now();
      if (o.baselines_s.empty() && record->contains("baselines"))
        baselines = record_field<std::vector<std::string>>(*record, out, "baselines");
      if (multiples.empty() && record->contains("extrapolate"))
        multiples = record_field<std::vector<std::int64_t>>(*record, out, "extrapolate");
      if (budgets.empty() && record->contains("budgets"))
        budgets = record_field<std::vector<double>>(*record, out, "budgets");
    } else {
      info.note = "OUT/ablation.json not found; variants and seeds were taken from the directories in OUT";
      info.command_line.clear();
      info.config_known = false;
    }
    if (variants.empty() || seeds.empty()) {
      std::vector<std::string> dv;
      std::vector<std::int64_t> ds;
      discover(out, dv, ds);
      if (variants.empty()) variants = dv;
      if (seeds.empty()) seeds = ds;
    }
    if (variants.empty() || seeds.empty())
      throw UsageError("--report-only: found no runs (OUT/<variant>/seed<S>/summary.json) in " + out.string());
    if (!o.baselines_s.empty()) baselines = parse_baselines(o.baselines_s, variants);
    else {
      std::erase_if(baselines, [&](const std::string& b) {
        return std::find(variants.begin(), variants.end(), b) == variants.end();
      });
    }
    info.note = (info.note.empty() ? "" : info.note + "; ") + "report re-made with: " + command_line;
    if (record && record->contains("lr_grid") && !record->at("lr_grid").is_null()) {
      const auto grid = record_field<std::vector<double>>(*record, out, "lr_grid");
      const auto runs = read_sweep(out, variants, grid);
      info.sweep_md = sweep_flag_note(record->contains("sweep_flag") ? record_field<std::string>(*record, out, "sweep_flag")
                                                                    : std::string("--lr"),
                                      record->contains("lrs")) +
                      ab::sweep_markdown(variants, grid, runs, ab::choose_learning_rates(variants, runs),
                                         record_field<std::int64_t>(*record, out, "sweep_steps"), seeds.front());
      if (fs::exists(out / "recheck.json")) {
        std::int64_t full_steps = 300;
        if (const auto v = pass_value(record_field<std::vector<std::string>>(*record, out, "pass_through"), "--steps"))
          full_steps = std::stoll(*v);
        std::ifstream in(out / "recheck.json");
        try {
          info.sweep_md += recheck_markdown(nlohmann::json::parse(in), full_steps);
        } catch (const nlohmann::json::exception& e) {
          throw normlab::Error((out / "recheck.json").string() + ": " + e.what());
        }
      }
    }
    read_timing(out, info);
  } else {
    if (variants.empty()) throw UsageError("--variants is required (e.g. --variants gpt,ngpt)");
    if (seeds.empty()) throw UsageError("--seeds is required (e.g. --seeds 1,2)");
    if (!o.baselines_s.empty()) baselines = parse_baselines(o.baselines_s, variants);
    for (const auto& p : o.pass) {
      for (const char* own : {"--seed", "--out"}) {
        const std::string f = own;
        if (p == f || p.rfind(f + "=", 0) == 0)
          throw UsageError("pass-through flag " + p + " is set per run by normlab-ablate" +
                           (f == "--seed" ? "; use --seeds" : "; use --out"));
      }
    }
    std::vector<double> grid;
    std::int64_t full_steps = 300;  // the trainers' default --steps
    if (const auto v = pass_value(o.pass, "--steps")) {
      try {
        full_steps = std::stoll(*v);
      } catch (const std::exception&) {
        throw UsageError("pass-through --steps " + *v + " is not an integer");
      }
    }
    if (!o.lr_grid_s.empty()) {
      grid = parse_lr_grid(o.lr_grid_s);
      const std::string& f = o.sweep_flag;
      if (f.size() < 3 || f.rfind("--", 0) != 0 || f.find('=') != std::string::npos)
        throw UsageError("--sweep-flag: \"" + f + "\" is not a trainer flag (e.g. --lr, --muon-lr)");
      for (const char* own : {"--seed", "--out", "--steps", "--resume"})
        if (f == own)
          throw UsageError("--sweep-flag " + f + ": normlab-ablate sets it per run; sweep a rate (e.g. --lr, --muon-lr)");
      if (pass_value(o.pass, o.sweep_flag))
        throw UsageError("--lr-grid chooses each variant's " + o.sweep_flag + ": do not also pass " + o.sweep_flag +
                         " to the trainers");
      if (o.sweep_steps == 0) o.sweep_steps = std::max<std::int64_t>(1, full_steps / 4);
    } else if (app.count("--sweep-flag") > 0) {
      throw UsageError("--sweep-flag needs --lr-grid (the values it sweeps)");
    } else if (o.sweep_steps != 0) {
      throw UsageError("--sweep-steps needs --lr-grid");
    }
    std::map<std::string, double> given_lr;
    if (!o.lrs_s.empty()) {
      if (!grid.empty() && o.sweep_flag == "--lr")
        throw UsageError("--lrs and --lr-grid contradict each other: give one (or sweep another flag: --sweep-flag)");
      if (pass_value(o.pass, "--lr")) throw UsageError("--lrs sets each variant's --lr: do not also pass --lr");
      given_lr = parse_lrs(o.lrs_s, variants);
    }
    const Trainers trainers = find_trainers(variants, o.bin_dir);
    // A study is resumable: a rerun skips finished runs and resumes interrupted
    // ones, so it must be the same study (same trainer flags).
    if (record) {
      const auto before = record_field<std::vector<std::string>>(*record, out, "pass_through");
      if (before != o.pass)
        throw UsageError(out.string() + " holds a study run with other trainer flags (" + join_quoted(before) +
                         "; now " + join_quoted(o.pass) + "): its finished runs would be mixed with new ones. "
                         "Use another --out, or remove " + out.string());
      const nlohmann::json before_grid = record->contains("lr_grid") ? record->at("lr_grid") : nlohmann::json();
      const nlohmann::json now_grid = grid.empty() ? nlohmann::json() : nlohmann::json(grid);
      const nlohmann::json before_steps = record->contains("sweep_steps") ? record->at("sweep_steps") : nlohmann::json();
      const nlohmann::json now_steps = grid.empty() ? nlohmann::json() : nlohmann::json(o.sweep_steps);
      const nlohmann::json before_lrs = record->contains("lrs") ? record->at("lrs") : nlohmann::json();
      const nlohmann::json now_lrs = given_lr.empty() ? nlohmann::json() : nlohmann::json(given_lr);
      const nlohmann::json before_budgets = record->contains("budgets") ? record->at("budgets") : nlohmann::json();
      if (before_budgets != (budgets.empty() ? nlohmann::json() : nlohmann::json(budgets)))
        throw UsageError(out.string() + " holds a study with other --budgets (" + before_budgets.dump() +
                         "). Use another --out, or remove " + out.string());
      const std::string before_flag =
          record->contains("sweep_flag") ? record_field<std::string>(*record, out, "sweep_flag") : "--lr";
      if (!grid.empty() && record->contains("lr_grid") && before_flag != o.sweep_flag)
        throw UsageError(out.string() + " holds a study that swept " + before_flag + " (now --sweep-flag " +
                         o.sweep_flag + "). Use another --out, or remove " + out.string());
      if (before_lrs != now_lrs)
        throw UsageError(out.string() + " holds a study with other --lrs (" + before_lrs.dump() + "; now " +
                         now_lrs.dump() + "). Use another --out, or remove " + out.string());
      // A resumed study keeps how its sweep was extended and re-checked; one
      // recorded before either existed resumes without them.
      if (!grid.empty() && record->contains("lr_grid")) {
        const bool legacy = !record->contains("grid_extensions");
        if (!extensions_given)
          o.grid_extensions = legacy ? 0 : record_field<std::int64_t>(*record, out, "grid_extensions");
        if (!check_given) o.full_horizon_check = legacy ? false : record_field<bool>(*record, out, "full_horizon_check");
      }
      const auto same_setting = [&](const char* key, const nlohmann::json& now) {
        return grid.empty() || !record->contains(key) || record->at(key) == now;
      };
      if (!same_setting("grid_extensions", o.grid_extensions) || !same_setting("full_horizon_check", o.full_horizon_check))
        throw UsageError(out.string() + " holds a study whose sweep was extended or re-checked otherwise (--grid-extensions, "
                         "--no-full-horizon-check). Use another --out, or remove " + out.string());
      if (before_grid != now_grid || before_steps != now_steps)
        throw UsageError(out.string() + " holds a study with another learning-rate sweep (--lr-grid " +
                         before_grid.dump() + ", --sweep-steps " + before_steps.dump() + "; now " + now_grid.dump() +
                         ", " + now_steps.dump() + "). Use another --out, or remove " + out.string());
    }
    if (!o.dry_run) {
      fs::create_directories(out);
      nlohmann::json rec = {{"date", info.date},          {"command_line", command_line},
                            {"config", info.config},      {"variants", variants},
                            {"seeds", seeds},             {"bin_dir", fs::absolute(trainers.bin).string()},
                            {"pass_through", o.pass}};
      for (const auto& [v, exe] : trainers.exe) rec["trainers"][v] = fs::absolute(exe).string();
      if (!grid.empty()) {
        rec["lr_grid"] = grid;
        rec["sweep_steps"] = o.sweep_steps;
        rec["grid_extensions"] = o.grid_extensions;
        rec["full_horizon_check"] = o.full_horizon_check;
        if (o.sweep_flag != "--lr") rec["sweep_flag"] = o.sweep_flag;
      }
      if (!given_lr.empty()) rec["lrs"] = given_lr;
      if (!baselines.empty()) rec["baselines"] = baselines;
      if (!multiples.empty()) rec["extrapolate"] = multiples;
      if (!budgets.empty()) rec["budgets"] = budgets;
      write_file(out / "ablation.json", rec.dump(2) + "\n");
    }
    // One trainer run into `dir` (skipped when finished, resumed when interrupted);
    // `extra` comes after the pass-through flags, so it overrides them.
    std::size_t total = variants.size() * (seeds.size() * (1 + budgets.size()) + grid.size());
    std::size_t k = 0;
    // A sweep run that stops on a non-finite loss (the trainer's exit 3) is a result
    // of the sweep ("diverged", marked by DIVERGED in its directory), not an error.
    auto run_one = [&](const std::string& v, std::int64_t s, const fs::path& dir,
                       const std::vector<std::string>& extra, const std::string& what, bool sweep = false) {
      ++k;
      if (sweep && fs::exists(dir / "DIVERGED")) {
        std::printf("[normlab-ablate] run %zu/%zu: %s %s diverged earlier: skipped\n", k, total, v.c_str(), what.c_str());
        return;
      }
      const fs::path& exe = trainers.exe.at(v);
      std::vector<std::string> args{"--seed", std::to_string(s), "--out", dir.string()};
      args.insert(args.end(), o.pass.begin(), o.pass.end());
      args.insert(args.end(), extra.begin(), extra.end());
      if (fs::exists(dir / "summary.json")) {
        std::printf("[normlab-ablate] run %zu/%zu: %s %s finished earlier (%s): skipped\n", k, total, v.c_str(),
                    what.c_str(), (dir / "summary.json").c_str());
        return;
      }
      const bool resuming = fs::exists(dir / "ckpt.safetensors");
      if (resuming) args.push_back("--resume");  // interrupted: continue from its checkpoint
      std::printf("[normlab-ablate] run %zu/%zu%s: %s %s\n", k, total, resuming ? " (resuming)" : "",
                  shell_quote(exe.string()).c_str(), join_quoted(args).c_str());
      std::fflush(stdout);
      if (o.dry_run) {
        // The trainer checks its flags and plans its memory without training.
        std::vector<std::string> dry = args;
        dry.push_back("--dry-run");
        if (const int rc = run_child(exe, dry); rc != 0)
          throw UsageError("train-" + v + " refuses these flags (exit " + std::to_string(rc) + ", above)");
        return;
      }
      fs::create_directories(dir);
      const int rc = run_child(exe, args);
      if (rc == 3 && sweep) {
        write_file(dir / "DIVERGED", "non-finite loss (train-" + v + " exit 3)\n");
        std::printf("[normlab-ablate] %s %s diverged (non-finite loss): counted as diverged in the sweep\n",
                    v.c_str(), what.c_str());
        return;
      }
      if (rc != 0)
        throw normlab::Error("train-" + v + " (" + what + ") " + describe_status(rc) + "; stopping the ablation (" +
                             std::to_string(k - 1) + "/" + std::to_string(total) +
                             " runs finished). Its output is above; its run directory is " + dir.string());
    };

    // 1. The learning-rate sweep (first seed), and each variant's choice.
    // Each variant's rate flags: the swept flag's value (chosen_lr), and --lrs'
    // --lr beside it when the sweep is of another flag.
    std::map<std::string, double> chosen_lr = o.sweep_flag == "--lr" ? given_lr : std::map<std::string, double>{};
    auto fixed_args = [&](const std::string& v) {
      std::vector<std::string> a;
      if (o.sweep_flag != "--lr" && given_lr.count(v)) a = {"--lr", lr_name(given_lr.at(v))};
      return a;
    };
    auto swept_args = [&](const std::string& v, std::vector<std::string> a, double g) {
      const auto f = fixed_args(v);
      a.insert(a.end(), f.begin(), f.end());
      a.insert(a.end(), {o.sweep_flag, lr_name(g)});
      return a;
    };
    auto rate_args = [&](const std::string& v, std::vector<std::string> a = {}) {
      const auto f = fixed_args(v);
      a.insert(a.end(), f.begin(), f.end());
      if (chosen_lr.count(v)) a.insert(a.end(), {o.sweep_flag, lr_name(chosen_lr.at(v))});
      return a;
    };
    if (!grid.empty()) {
      auto sweep_run = [&](const std::string& v, double g) {
        run_one(v, seeds.front(), sweep_dir(out, v, g), swept_args(v, {"--steps", std::to_string(o.sweep_steps)}, g),
                o.sweep_flag.substr(2) + " " + lr_name(g) + " (sweep, " + std::to_string(o.sweep_steps) + " steps)", true);
      };
      for (const auto& v : variants) {
        for (double g : grid) sweep_run(v, g);
        // Past an edge winner, one rate at a time, until the best is interior.
        for (std::int64_t e = 0; !o.dry_run; ++e) {
          const auto next = ab::next_grid_rate(v, read_sweep(out, {v}, grid));
          if (!next) break;
          const double g = *positive_rate(lr_name(*next));  // the rate as its directory and --lr spell it
          if (e == o.grid_extensions) {
            std::printf("[normlab-ablate] sweep: %s's best rate is still on the edge after %lld extension(s) "
                        "(--grid-extensions): %g not tried\n", v.c_str(), (long long)e, g);
            break;
          }
          std::printf("[normlab-ablate] sweep: %s's best rate is on the edge of the rates tried: extending to %g\n",
                      v.c_str(), g);
          ++total;
          sweep_run(v, g);
        }
      }
      if (!o.dry_run) {
        const auto runs = read_sweep(out, variants, grid);
        const auto choices = ab::choose_learning_rates(variants, runs);
        nlohmann::json chosen = nlohmann::json::object();
        for (const auto& c : choices) {
          chosen_lr[c.variant] = c.lr;
          chosen[c.variant] = c.lr;
          std::printf("[normlab-ablate] sweep: %s trains at %s %g (final val loss %.4f after %lld steps)\n",
                      c.variant.c_str(), o.sweep_flag.substr(2).c_str(), c.lr, c.final_val_loss, (long long)o.sweep_steps);
        }
        info.sweep_md = sweep_flag_note(o.sweep_flag, !given_lr.empty()) +
                        ab::sweep_markdown(variants, grid, runs, choices, o.sweep_steps, seeds.front());
        // The best two rates again at the study's --steps (first seed): a rate
        // that wins a short run may lose a long one. The better one is the
        // variant's rate, and its run is the first seed's run (the same flags
        // and seed: the trainer gives the same bits), copied, not repeated.
        if (o.full_horizon_check && o.sweep_steps < full_steps) {
          nlohmann::json recheck = nlohmann::json::object();
          for (const auto& c : choices) {
            const std::string& v = c.variant;
            const std::vector<double> two = ab::best_two_rates(v, runs);
            if (two.size() < 2) {
              recheck[v] = {{"why_not", "only one swept rate converged"}, {"chosen", c.lr}};
              continue;
            }
            std::vector<ab::SweepRun> full;
            nlohmann::json losses = nlohmann::json::array();
            for (double g : two) {
              ++total;
              run_one(v, seeds.front(), recheck_dir(out, v, g), swept_args(v, {}, g),
                      o.sweep_flag.substr(2) + " " + lr_name(g) + " (full-horizon re-check)", true);
              const std::size_t before = full.size();
              read_rate_run(full, recheck_dir(out, v, g), v, g);
              const bool finite = full.size() > before && full.back().final_val_loss &&
                                  std::isfinite(*full.back().final_val_loss);
              losses.push_back(finite ? nlohmann::json(*full.back().final_val_loss) : nlohmann::json(nullptr));
            }
            const ab::SweepChoice pick = ab::choose_learning_rates({v}, full).front();
            if (pick.lr != c.lr)
              std::printf("[normlab-ablate] re-check: %s trains at %s %g, not the sweep's %g: better at %lld steps "
                          "(%.4f)\n", v.c_str(), o.sweep_flag.substr(2).c_str(), pick.lr, c.lr, (long long)full_steps, pick.final_val_loss);
            chosen_lr[v] = pick.lr;
            chosen[v] = pick.lr;
            recheck[v] = {{"rates", two}, {"losses", losses}, {"chosen", pick.lr}};
            const fs::path first = run_dir(out, v, seeds.front());
            if (!fs::exists(first / "summary.json")) {
              fs::remove_all(first);
              fs::create_directories(first.parent_path());
              fs::copy(recheck_dir(out, v, pick.lr), first, fs::copy_options::recursive);
            }
          }
          write_file(out / "recheck.json", recheck.dump(2) + "\n");
          info.sweep_md += recheck_markdown(recheck, full_steps);
        } else {
          info.sweep_md += o.full_horizon_check
                               ? "\nNo full-horizon re-check: the sweep ran at the study's full length.\n"
                               : "\nNo full-horizon re-check (--no-full-horizon-check): the rates were chosen on " +
                                     std::to_string(o.sweep_steps) + "-step runs of a " + std::to_string(full_steps) +
                                     "-step study.\n";
        }
        write_file(out / "sweep.json", chosen.dump(2) + "\n");
      }
    }
    // 2. The full runs, every seed, at the chosen rates.
    for (const auto& v : variants) {
      const std::vector<std::string> extra = rate_args(v);
      for (const auto s : seeds) run_one(v, s, run_dir(out, v, s), extra, "seed " + std::to_string(s));
    }
    // 2b. Smaller budgets as runs of their own (each its own schedule), shortest first.
    for (const double f : budgets) {
      const std::int64_t steps = std::max<std::int64_t>(1, std::llround(f * double(full_steps)));
      for (const auto& v : variants) {
        const std::vector<std::string> extra = rate_args(v, {"--steps", std::to_string(steps)});
        for (const auto s : seeds)
          run_one(v, s, budget_dir(out, f, v, s), extra,
                  "seed " + std::to_string(s) + " (budget " + lr_name(f) + ": " + std::to_string(steps) + " steps)");
      }
    }
    // 3. Step times measured interleaved: each round times every variant in turn.
    if (!o.dry_run && o.timing_rounds > 0) {
      std::map<std::string, std::vector<double>> times;
      for (std::int64_t r = 1; r <= o.timing_rounds; ++r) {
        std::vector<fs::path> exes;
        std::vector<std::vector<std::string>> all_args;
        for (const auto& v : variants) {
          const fs::path dir = round_step_file(out, v, r).parent_path();
          std::vector<std::string> args{"--seed", std::to_string(seeds.front()), "--out", dir.string()};
          args.insert(args.end(), o.pass.begin(), o.pass.end());
          args = rate_args(v, std::move(args));
          args.insert(args.end(), {"--time-steps", std::to_string(o.timing_steps), "--quiet"});
          exes.push_back(trainers.exe.at(v));
          all_args.push_back(std::move(args));
        }
        time_round_step_by_step(variants, o.timing_steps, exes, all_args, r);
        for (const auto& v : variants) times[v].push_back(read_round_step_time(round_step_file(out, v, r)));
      }
      nlohmann::json step_s = nlohmann::json::object(), spread = nlohmann::json::object();
      for (auto& [v, ts] : times) {
        const double sp = ab::round_spread(ts);
        spread[v] = sp;
        if (sp > ab::kNoisyTimingSpread)
          std::printf("[normlab-ablate] timing: %s's rounds disagree by %.0f%% (over 10%%): the machine is not quiet\n",
                      v.c_str(), 100 * sp);
        std::sort(ts.begin(), ts.end());
        const std::size_t n = ts.size();
        step_s[v] = n % 2 ? ts[n / 2] : 0.5 * (ts[n / 2 - 1] + ts[n / 2]);
      }
      const std::string method = std::to_string(o.timing_rounds) +
                                 " rounds, each running every variant's trainer at once and alternating them step by "
                                 "step (one step of each in turn, the others waiting) for " +
                                 std::to_string(o.timing_steps) +
                                 " steps after 2 warm-up steps at the study's flags (train-<variant> --time-steps "
                                 "--time-gate); median over rounds of each round's median step";
      write_file(out / "timing.json",
                 nlohmann::json{{"method", method}, {"step_s", step_s}, {"spread", spread}}.dump(2) + "\n");
      std::printf("[normlab-ablate] step times measured interleaved (%s)\n", method.c_str());
    }
    // 4. Each run's final checkpoint past its training context (skipped when done).
    if (!multiples.empty()) {
      const fs::path eval_exe = trainers.tool("normlab-eval");
      if (!is_executable_file(eval_exe))
        throw UsageError("--extrapolate needs normlab-eval beside the trainers or beside normlab-ablate: " +
                         eval_exe.string() + " is missing");
      for (const auto& v : variants)
        for (const auto s : seeds) {
          const fs::path dir = context_dir(out, v, s);
          if (!o.dry_run && fs::exists(dir / "eval.json")) continue;
          std::vector<std::string> args{(run_dir(out, v, s) / "ckpt.safetensors").string(), "--multiples",
                                        join_ints(multiples), "--out", dir.string()};
          for (const char* f : {"--data", "--data-dir", "--vocab"})
            if (const auto val = pass_value(o.pass, f)) args.insert(args.end(), {f, *val});
          std::printf("[normlab-ablate] past the training context: %s %s\n", shell_quote(eval_exe.string()).c_str(),
                      join_quoted(args).c_str());
          std::fflush(stdout);
          if (o.dry_run) continue;
          if (const int rc = run_child(eval_exe, args); rc != 0)
            throw normlab::Error("normlab-eval on " + v + " seed " + std::to_string(s) + " " + describe_status(rc));
        }
    }
    if (!o.dry_run) read_timing(out, info);
    if (o.dry_run) {
      std::printf("[normlab-ablate] dry run: nothing was run\n");
      return 0;
    }
  }

  // ---- report
  std::vector<ab::VariantRuns> data;
  for (const auto& v : variants) {
    ab::VariantRuns vr{v, {}};
    for (const auto s : seeds) vr.runs.push_back(ab::load_run(run_dir(out, v, s), v, s));
    data.push_back(std::move(vr));
  }
  info.seeds = seeds;
  info.baselines = baselines;
  for (const double f : budgets) {
    std::vector<ab::VariantRuns> at;
    for (const auto& v : variants) {
      ab::VariantRuns vr{v, {}};
      for (const auto s : seeds) vr.runs.push_back(ab::load_run(budget_dir(out, f, v, s), v, s));
      at.push_back(std::move(vr));
    }
    info.budget_runs.emplace_back(f, std::move(at));
  }
  std::vector<ab::ContextEval> contexts;
  if (!multiples.empty()) {
    for (const auto& v : variants)
      for (const auto s : seeds) contexts.push_back(ab::read_context_eval(context_dir(out, v, s) / "eval.json", v, s));
    info.context_md = ab::context_markdown(
        contexts, "normlab-eval at " + join_ints(multiples) + "× the training context, its default batches");
  }
  const std::string md = ab::results_markdown(data, info);
  // The study's own report is results.md; a report on another set of variants
  // (--report-only --variants ...) is named by its set and never replaces it. (A
  // run of the study has just recorded its own variants: its report is results.md.)
  std::string suffix;
  if (o.report_only && record && record_field<std::vector<std::string>>(*record, out, "variants") != variants)
    for (const auto& v : variants) suffix += (suffix.empty() ? "-" : "+") + v;
  const fs::path results = out / ("results" + suffix + ".md");
  write_file(results, md);

  std::optional<double> floor = info.entropy_floor_nats;
  for (const auto& v : data)
    for (const auto& r : v.runs)
      if (!floor && r.summary.entropy_floor_nats) floor = r.summary.entropy_floor_nats;
  const ab::Analysis analysis = ab::analyze(data, {}, baselines.empty() ? std::string() : baselines.front());
  const fs::path script = out / ("loss" + suffix + ".gp");
  const std::string png = "loss_vs_tokens" + suffix + ".png", svg = "loss_vs_tokens" + suffix + ".svg";
  write_file(script, ab::loss_plot_script(data, analysis, floor, png, svg));

  std::printf("\n%s\n", md.c_str());
  std::printf("results: %s\n", results.c_str());
  std::vector<fs::path> scripts{script};
  std::vector<std::string> made{png, svg};
  if (!contexts.empty()) {
    const fs::path cscript = out / ("context" + suffix + ".gp");
    const std::string cpng = "loss_vs_context" + suffix + ".png", csvg = "loss_vs_context" + suffix + ".svg";
    write_file(cscript, ab::context_plot_script(contexts, cpng, csvg));
    scripts.push_back(cscript);
    made.insert(made.end(), {cpng, csvg});
  }
  const fs::path gnuplot = find_on_path("gnuplot");
  if (gnuplot.empty()) {
    std::printf("gnuplot not found on PATH: plots not made (scripts written to %s; install gnuplot and run "
                "`gnuplot <script>.gp` there)\n",
                out.c_str());
    return 0;
  }
  for (const auto& sc : scripts) {
    const int rc = run_child(gnuplot, {sc.filename().string()}, out);
    if (rc != 0) {
      std::fprintf(stderr, "normlab-ablate: gnuplot %s on %s; results.md was written, the plots were not\n",
                   describe_status(rc).c_str(), sc.c_str());
      return 1;
    }
  }
  std::printf("plots:");
  for (const auto& m : made) std::printf(" %s", (out / m).c_str());
  std::printf("\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "normlab-ablate: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "normlab-ablate: %s\n", e.what());
    return 1;
  }
}
