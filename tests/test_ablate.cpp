// normlab::ablate: curve reading, time-to-target, aggregation, the markdown
// report, and (when CMake passes NORMLAB_ABLATE_EXE) the normlab-ablate CLI run
// end to end against fake trainers written as shell scripts.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "normlab/app/ablate.hpp"
#include "normlab/app/context_report.hpp"
#include "normlab/core/process.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
namespace ab = normlab::ablate;

namespace {

// A fresh directory under the system temp dir, removed when the test ends.
struct TempDir : normlab::test::TempDir {
  TempDir() : normlab::test::TempDir("normlab_ablate_test_") {}
};

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary);
  f << text;
  REQUIRE(f.good());
}

[[maybe_unused]] std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The table row of `variant` ("| variant ..." up to the newline), or "".
std::string row_of(const std::string& md, const std::string& variant) {
  std::istringstream is(md);
  std::string line;
  while (std::getline(is, line))
    if (line.rfind("| " + variant + " ", 0) == 0) return line;
  return {};
}

struct Point {
  double tokens, loss, elapsed;
};

// metrics.jsonl text: a training line and an eval line per point.
std::string metrics_text(const std::vector<Point>& pts) {
  std::string s;
  int step = 0;
  char buf[512];
  for (const auto& p : pts) {
    step += 10;
    std::snprintf(buf, sizeof buf,
                  "{\"step\": %d, \"tokens\": %.17g, \"train_loss\": %.17g, \"lr\": 0.001, \"step_time_s\": 0.1, "
                  "\"tokens_per_s\": 10000.0, \"elapsed_s\": %.17g}\n"
                  "{\"step\": %d, \"tokens\": %.17g, \"val_loss\": %.17g, \"elapsed_s\": %.17g}\n",
                  step, p.tokens, p.loss + 0.1, p.elapsed, step, p.tokens, p.loss, p.elapsed);
    s += buf;
  }
  return s;
}

std::string summary_text(const std::string& variant, int seed, const std::vector<Point>& pts, double step_time_s,
                         const char* floor = "null") {
  char buf[1024];
  const int steps = int(pts.size()) * 10;
  std::snprintf(buf, sizeof buf,
                "{\"variant\": \"%s\", \"seed\": %d, \"steps\": %d, \"tokens\": %.17g, \"final_val_loss\": %.17g, "
                "\"mean_step_time_s\": %.17g, \"total_time_s\": %.17g, \"params\": 1234, \"entropy_floor_nats\": %s, "
                "\"data\": \"synthetic corpus\"}\n",
                variant.c_str(), seed, steps, pts.back().tokens, pts.back().loss, step_time_s, pts.back().elapsed,
                floor);
  return buf;
}

ab::Run make_run(const fs::path& root, const std::string& variant, int seed, const std::vector<Point>& pts,
                 double step_time_s, const char* floor = "null") {
  const fs::path dir = root / variant / ("seed" + std::to_string(seed));
  write(dir / "metrics.jsonl", metrics_text(pts));
  write(dir / "summary.json", summary_text(variant, seed, pts, step_time_s, floor));
  return ab::load_run(dir, variant, seed);
}

// Linear loss from `from` to `to` over 10 evals of 10k tokens, `dt` seconds per eval.
std::vector<Point> linear(double from, double to, double dt) {
  std::vector<Point> pts;
  for (int i = 1; i <= 10; ++i) pts.push_back({i * 10000.0, from + (to - from) * i / 10.0, i * dt});
  return pts;
}

}  // namespace

TEST_CASE("ablate: tokens_to_reach interpolates between the bracketing eval points", "[ablate]") {
  ab::Curve c;
  c.tokens = {100, 200, 300, 400};
  c.val_loss = {3.0, 2.5, 2.0, 2.2};
  c.elapsed_s = {1, 2, 4, 5};
  CHECK(*ab::tokens_to_reach(c, 2.25) == Approx(250));
  CHECK(*ab::seconds_to_reach(c, 2.25) == Approx(3));
  CHECK(*ab::tokens_to_reach(c, 2.75) == Approx(150));
  // Exactly on a point: that point.
  CHECK(*ab::tokens_to_reach(c, 2.5) == Approx(200));
  CHECK(*ab::seconds_to_reach(c, 2.0) == Approx(4));
  // Already below the target at the first eval: nothing before it to interpolate from.
  CHECK(*ab::tokens_to_reach(c, 3.5) == Approx(100));
  // The first crossing counts even if the curve later goes back up.
  CHECK(*ab::tokens_to_reach(c, 2.1) == Approx(280));
}

TEST_CASE("ablate: tokens_to_reach is nullopt when the target is never reached", "[ablate]") {
  ab::Curve c;
  c.tokens = {100, 200};
  c.val_loss = {3.0, 2.5};
  c.elapsed_s = {1, 2};
  CHECK_FALSE(ab::tokens_to_reach(c, 2.4).has_value());
  CHECK_FALSE(ab::seconds_to_reach(c, 2.4).has_value());
  CHECK_FALSE(ab::tokens_to_reach(ab::Curve{}, 10.0).has_value());
  CHECK_FALSE(ab::tokens_to_reach(c, std::nan("")).has_value());
  // A diverged (NaN) eval never reaches, and is not used to interpolate from.
  ab::Curve d;
  d.tokens = {100, 200, 300};
  d.val_loss = {3.0, std::nan(""), 2.0};
  d.elapsed_s = {1, 2, 3};
  CHECK(*ab::tokens_to_reach(d, 2.5) == Approx(300));
}

TEST_CASE("ablate: mean and sample standard deviation over seeds", "[ablate]") {
  const ab::Stats s = ab::mean_sd({1, 2, 3, 4});
  CHECK(s.n == 4);
  CHECK(s.mean == Approx(2.5));
  CHECK(s.sd == Approx(std::sqrt(5.0 / 3.0)));  // n - 1 in the denominator
  const ab::Stats one = ab::mean_sd({7});
  CHECK(one.n == 1);
  CHECK(one.mean == Approx(7));
  CHECK(std::isnan(one.sd));
  CHECK(std::isnan(ab::mean_sd({}).mean));

  const ab::ReachStats all = ab::aggregate_reach({10.0, 20.0});
  CHECK(all.all_reached());
  CHECK(all.stats.mean == Approx(15));
  CHECK(all.stats.sd == Approx(std::sqrt(50.0)));
  const ab::ReachStats some = ab::aggregate_reach({10.0, std::nullopt, 30.0});
  CHECK_FALSE(some.all_reached());
  CHECK(some.n == 3);
  CHECK(some.reached == 2);
  CHECK(some.not_reached() == 1);
}

TEST_CASE("ablate: results_markdown reports speedups against the gpt baseline", "[ablate]") {
  TempDir tmp;
  // gpt: 4.0 -> 2.0 over 100k tokens, 1 s per eval (10 s in all), both seeds.
  // ngpt: 4.0 -> 0.0, so it reaches 2.0 at 50k tokens (half the tokens), but at 2 s
  // per eval that is 10 s: the same wall-clock time.
  std::vector<ab::VariantRuns> runs;
  runs.push_back({"ngpt", {make_run(tmp.path, "ngpt", 1, linear(4.0, 0.0, 2.0), 0.2),
                           make_run(tmp.path, "ngpt", 2, linear(4.0, 0.0, 2.0), 0.2)}});
  runs.push_back({"gpt", {make_run(tmp.path, "gpt", 1, linear(4.0, 2.0, 1.0), 0.1, "1.25"),
                          make_run(tmp.path, "gpt", 2, linear(4.0, 2.0, 1.0), 0.1, "1.25")}});
  // slow: one seed gets there (4.0 -> 1.9 ends below 2.0), the other does not.
  runs.push_back({"slow", {make_run(tmp.path, "slow", 1, linear(4.0, 1.9, 1.0), 0.1),
                           make_run(tmp.path, "slow", 2, linear(4.0, 2.1, 1.0), 0.1)}});

  const ab::Analysis a = ab::analyze(runs);
  CHECK(a.baseline == "gpt");
  CHECK(a.baseline_is_gpt);
  CHECK(a.target_loss == Approx(2.0));
  CHECK(a.ref_tokens == Approx(100000));
  CHECK(a.ref_seconds == Approx(10));
  REQUIRE(a.rows.size() == 3);
  CHECK(a.rows[0].tokens_to_target.stats.mean == Approx(50000));
  CHECK(*a.rows[0].speedup_tokens == Approx(2.0));
  CHECK(*a.rows[0].speedup_time == Approx(1.0));
  CHECK(*a.rows[1].speedup_tokens == Approx(1.0));
  CHECK_FALSE(a.rows[2].speedup_tokens.has_value());

  ab::ReportInfo info;
  info.date = "2025-01-02 03:04:05 UTC";
  info.command_line = "normlab-ablate --variants ngpt,gpt,slow --seeds 1,2 --out x -- --steps 100";
  info.config = "--steps 100";
  const std::string md = ab::results_markdown(runs, info);
  INFO(md);
  CHECK(md.find("2025-01-02 03:04:05 UTC") != std::string::npos);
  CHECK(md.find("--variants ngpt,gpt,slow") != std::string::npos);
  CHECK(md.find("synthetic corpus") != std::string::npos);  // data description from summary.json
  CHECK(md.find("Seeds: 1, 2 (n = 2)") != std::string::npos);
  CHECK(md.find("Entropy floor of the data: 1.2500 nats") != std::string::npos);
  CHECK(md.find("Baseline: gpt") != std::string::npos);

  const std::string ngpt = row_of(md, "ngpt");
  const std::string gpt = row_of(md, "gpt (baseline)");
  const std::string slow = row_of(md, "slow");
  REQUIRE_FALSE(ngpt.empty());
  REQUIRE_FALSE(gpt.empty());
  REQUIRE_FALSE(slow.empty());
  // | variant | seeds | final | tokens | speedup tok | time | speedup time | step ms | tokens/s |
  CHECK(ngpt == "| ngpt | 2 | 0.0000 ± 0.0000 | 50000 ± 0 | 2.00 | 10.0 ± 0.0 | 1.00 | 200.0 ± 0.0 | 5000 ± 0 |");
  CHECK(gpt == "| gpt (baseline) | 2 | 2.0000 ± 0.0000 | 100000 ± 0 | 1.00 | 10.0 ± 0.0 | 1.00 | 100.0 ± 0.0 | 10000 ± 0 |");
  CHECK(slow.find("| 2.0000 ± 0.1414 |") != std::string::npos);  // (1.9, 2.1): sd = 0.1 * sqrt(2)
  CHECK(slow.find("not reached in 1/2 seeds") != std::string::npos);
  CHECK(slow.find("n/a (target not reached)") != std::string::npos);
}

TEST_CASE("ablate: without gpt the first variant is the baseline and the table says so", "[ablate]") {
  TempDir tmp;
  std::vector<ab::VariantRuns> runs;
  runs.push_back({"ngpt", {make_run(tmp.path, "ngpt", 1, linear(4.0, 2.0, 1.0), 0.1)}});
  runs.push_back({"angpt", {make_run(tmp.path, "angpt", 1, linear(4.0, 0.0, 1.0), 0.1)}});
  const std::string md = ab::results_markdown(runs, {});
  INFO(md);
  CHECK(md.find("Baseline: ngpt (gpt is not in this ablation, so the first variant is the baseline)") !=
        std::string::npos);
  CHECK(md.find("Entropy floor") == std::string::npos);  // unknown: not printed
  // One seed: no "±".
  CHECK(row_of(md, "ngpt (baseline)") == "| ngpt (baseline) | 1 | 2.0000 | 100000 | 1.00 | 10.0 | 1.00 | 100.0 | 10000 |");
  CHECK(row_of(md, "angpt") == "| angpt | 1 | 0.0000 | 50000 | 2.00 | 5.0 | 2.00 | 100.0 | 10000 |");
}

TEST_CASE("ablate: baseline seeds straddling their mean: honest baseline row, speedups from the reference",
          "[ablate]") {
  TempDir tmp;
  std::vector<ab::VariantRuns> runs;
  runs.push_back({"gpt", {make_run(tmp.path, "gpt", 1, linear(4.0, 1.9, 1.0), 0.1),
                          make_run(tmp.path, "gpt", 2, linear(4.0, 2.1, 1.0), 0.1)}});
  runs.push_back({"ngpt", {make_run(tmp.path, "ngpt", 1, linear(4.0, 0.0, 1.0), 0.1),
                           make_run(tmp.path, "ngpt", 2, linear(4.0, 0.0, 1.0), 0.1)}});
  const std::string md = ab::results_markdown(runs, {});
  INFO(md);
  CHECK(row_of(md, "gpt (baseline)").find("not reached in 1/2 seeds | 1.00 |") != std::string::npos);
  CHECK(md.find("1/2 baseline seeds end above") != std::string::npos);
  // The reference is the seed that reaches 2.0: 4.0 -> 1.9 linearly over 100k tokens
  // crosses 2.0 at 100k * 2.0/2.1 = 95238 tokens (9.52 s); ngpt needs 50k (5 s).
  const ab::Analysis a = ab::analyze(runs);
  CHECK(a.ref_tokens == Approx(100000.0 * 2.0 / 2.1));
  CHECK(row_of(md, "ngpt").find("| 50000 ± 0 | 1.90 | 5.0 ± 0.0 | 1.90 |") != std::string::npos);
}

TEST_CASE("ablate: the baseline row is 1.00 even when it touched its final loss before its last eval",
          "[ablate]") {
  // The README's case: gpt reached its own final loss before its last eval, so
  // against its whole budget it "sped up" 1.08x over itself and flattered the
  // other rows. gpt: 4.0 at 0, 1.8 at 50k, 2.0 at 100k (final; target 2.0):
  // first reach at 50k * (4.0-2.0)/(4.0-1.8) = 45455 tokens.
  TempDir tmp;
  const fs::path dir = tmp.path / "gpt" / "seed1";
  write(dir / "metrics.jsonl",
        "{\"step\": 0, \"tokens\": 0, \"val_loss\": 4.0, \"elapsed_s\": 0.0}\n"
        "{\"step\": 5, \"tokens\": 50000, \"val_loss\": 1.8, \"elapsed_s\": 5.0}\n"
        "{\"step\": 10, \"tokens\": 100000, \"val_loss\": 2.0, \"elapsed_s\": 10.0}\n");
  write(dir / "summary.json",
        "{\"variant\": \"gpt\", \"seed\": 1, \"steps\": 10, \"tokens\": 100000, \"final_val_loss\": 2.0, "
        "\"mean_step_time_s\": 0.1, \"total_time_s\": 10.0}");
  std::vector<ab::VariantRuns> runs;
  runs.push_back({"gpt", {ab::load_run(dir, "gpt", 1)}});
  runs.push_back({"angpt", {make_run(tmp.path, "angpt", 1, linear(4.0, 0.0, 1.0), 0.1)}});  // 2.0 at 50k
  const ab::Analysis a = ab::analyze(runs);
  CHECK(a.ref_tokens == Approx(50000.0 * 2.0 / 2.2));
  REQUIRE(a.rows.size() == 2);
  CHECK(*a.rows[0].speedup_tokens == 1.0);  // exactly, by definition
  CHECK(*a.rows[1].speedup_tokens == Approx((50000.0 * 2.0 / 2.2) / 50000.0));  // 0.91, not 2.0
  const std::string md = ab::results_markdown(runs, {});
  INFO(md);
  CHECK(row_of(md, "gpt (baseline)").find("| 45455 | 1.00 |") != std::string::npos);
}

TEST_CASE("ablate: the report states each variant's learning rate from the summaries", "[ablate]") {
  TempDir tmp;
  std::vector<ab::VariantRuns> runs;
  for (const auto& [v, lr] : {std::pair<std::string, const char*>{"gpt", "0.003"}, {"ngpt", "0.01"}}) {
    const fs::path dir = tmp.path / v / "seed1";
    write(dir / "metrics.jsonl", metrics_text(linear(4.0, 2.0, 1.0)));
    write(dir / "summary.json", "{\"variant\": \"" + v + "\", \"seed\": 1, \"steps\": 100, \"tokens\": 100000, "
                                "\"final_val_loss\": 2.0, \"mean_step_time_s\": 0.1, \"total_time_s\": 10.0, \"lr\": " +
                                lr + "}");
    runs.push_back({v, {ab::load_run(dir, v, 1)}});
  }
  const std::string md = ab::results_markdown(runs, {});
  INFO(md);
  CHECK(md.find("- Peak learning rates (from each run's summary.json): gpt 0.003, ngpt 0.01") != std::string::npos);
}

TEST_CASE("ablate: the report names each variant's optimizer, schedule and precision from the summaries", "[ablate]") {
  TempDir tmp;
  std::vector<ab::VariantRuns> runs;
  for (const auto& [v, extra] : {std::pair<std::string, std::string>{"gpt", ""},
                                 {"ngpt", ", \"optimizer\": {\"name\": \"muon\", \"hyperparameters\": {}}, "
                                          "\"schedule\": {\"name\": \"wsd\", \"warmup\": 0}, "
                                          "\"precision\": {\"name\": \"bf16\", \"engine\": \"x\"}"}}) {
    const fs::path dir = tmp.path / v / "seed1";
    write(dir / "metrics.jsonl", metrics_text(linear(4.0, 2.0, 1.0)));
    write(dir / "summary.json", "{\"variant\": \"" + v + "\", \"seed\": 1, \"steps\": 100, \"tokens\": 100000, "
                                "\"final_val_loss\": 2.0, \"mean_step_time_s\": 0.1, \"total_time_s\": 10.0" +
                                extra + "}");
    runs.push_back({v, {ab::load_run(dir, v, 1)}});
  }
  const std::string md = ab::results_markdown(runs, {});
  INFO(md);
  // A summary from before they were recorded is AdamW with a cosine, in fp32.
  CHECK(md.find("- Optimizer + schedule, precision (from each run's summary.json): gpt adamw + cosine, fp32, ngpt "
                "muon + wsd, bf16") != std::string::npos);
  TempDir bad;
  write(bad.path / "summary.json", "{\"variant\": \"gpt\", \"seed\": 1, \"steps\": 1, \"tokens\": 1, "
                                   "\"mean_step_time_s\": 0.1, \"total_time_s\": 1, \"optimizer\": 3}");
  CHECK_THROWS_WITH(ab::read_summary(bad.path / "summary.json"), Catch::Contains("\"optimizer\""));
}

TEST_CASE("ablate: a diverged baseline gives no target and no made-up speedups", "[ablate]") {
  TempDir tmp;
  const fs::path dir = tmp.path / "gpt" / "seed1";
  write(dir / "metrics.jsonl", "{\"step\": 10, \"tokens\": 100, \"val_loss\": null, \"elapsed_s\": 1.0}\n");
  write(dir / "summary.json",
        "{\"variant\": \"gpt\", \"seed\": 1, \"steps\": 10, \"tokens\": 100, \"final_val_loss\": null, "
        "\"mean_step_time_s\": 0.1, \"total_time_s\": 1.0}");
  std::vector<ab::VariantRuns> runs;
  runs.push_back({"gpt", {ab::load_run(dir, "gpt", 1)}});
  runs.push_back({"ngpt", {make_run(tmp.path, "ngpt", 1, linear(4.0, 0.0, 1.0), 0.1)}});
  const std::string md = ab::results_markdown(runs, {});
  INFO(md);
  CHECK(md.find("not finite") != std::string::npos);
  CHECK(row_of(md, "ngpt") == "| ngpt | 1 | 0.0000 | n/a (no target) | n/a (no target) | n/a (no target) | "
                              "n/a (no target) | 100.0 | 10000 |");
  CHECK(row_of(md, "gpt (baseline)").find("| nan |") != std::string::npos);
}

TEST_CASE("ablate: malformed metrics lines are errors naming the file and line", "[ablate]") {
  TempDir tmp;
  const fs::path p = tmp.path / "metrics.jsonl";
  const std::string good = "{\"step\": 10, \"tokens\": 100, \"val_loss\": 3.0, \"elapsed_s\": 1.0}\n";
  auto message = [&](const std::string& text) {
    write(p, text);
    try {
      ab::read_val_curve(p);
    } catch (const normlab::Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string where = p.string() + ":";

  std::string m = message(good + "\n{\"step\": 20, \"tokens\": 2\n");
  CHECK(m.find(where + "3") != std::string::npos);  // the blank line 2 still counts
  CHECK(m.find("malformed JSON") != std::string::npos);

  m = message(good + "{\"step\": 20, \"val_loss\": 2.5, \"elapsed_s\": 2.0}\n");
  CHECK(m.find(where + "2") != std::string::npos);
  CHECK(m.find("\"tokens\"") != std::string::npos);

  m = message(good + "{\"step\": 20, \"tokens\": 200, \"val_loss\": \"low\", \"elapsed_s\": 2.0}\n");
  CHECK(m.find(where + "2") != std::string::npos);
  CHECK(m.find("val_loss") != std::string::npos);

  m = message(good + "[1, 2]\n");
  CHECK(m.find(where + "2") != std::string::npos);

  m = message(good + good);
  CHECK(m == "(no error)");  // same tokens twice is allowed
  m = message(good + "{\"step\": 5, \"tokens\": 50, \"val_loss\": 3.0, \"elapsed_s\": 0.5}\n");
  CHECK(m.find(where + "2") != std::string::npos);
  CHECK(m.find("backwards") != std::string::npos);

  CHECK_THROWS_WITH(ab::read_val_curve(tmp.path / "nope.jsonl"), Catch::Contains("nope.jsonl"));

  // null val_loss (a diverged eval) reads as NaN; training-only lines are skipped.
  write(p, "{\"step\": 1, \"tokens\": 10, \"train_loss\": 9.0, \"elapsed_s\": 0.1}\n" + good +
               "{\"step\": 20, \"tokens\": 200, \"val_loss\": null, \"elapsed_s\": 2.0}\n");
  const ab::Curve c = ab::read_val_curve(p);
  REQUIRE(c.size() == 2);
  CHECK(c.tokens[0] == 100);
  CHECK(std::isnan(c.val_loss[1]));
}

TEST_CASE("ablate: summary.json errors name the file and the field", "[ablate]") {
  TempDir tmp;
  const fs::path dir = tmp.path / "gpt" / "seed1";
  write(dir / "metrics.jsonl", metrics_text(linear(4, 2, 1)));
  write(dir / "summary.json", "{\"variant\": \"gpt\", \"seed\": 1, \"steps\": 100, \"tokens\": 1000}");
  CHECK_THROWS_WITH(ab::load_run(dir, "gpt", 1),
                    Catch::Contains("summary.json") && Catch::Contains("mean_step_time_s"));
  write(dir / "summary.json", summary_text("ngpt", 1, linear(4, 2, 1), 0.1));
  CHECK_THROWS_WITH(ab::load_run(dir, "gpt", 1), Catch::Contains("expected \"gpt\""));
}

TEST_CASE("ablate: the gnuplot script has every run, the target and the entropy floor", "[ablate]") {
  TempDir tmp;
  std::vector<ab::VariantRuns> runs;
  runs.push_back({"gpt", {make_run(tmp.path, "gpt", 1, linear(4.0, 2.0, 1.0), 0.1)}});
  runs.push_back({"ngpt", {make_run(tmp.path, "ngpt", 3, linear(4.0, 0.0, 1.0), 0.1)}});
  const std::string gp = ab::loss_plot_script(runs, ab::analyze(runs), 1.5, "a.png", "a.svg");
  CHECK(gp.find("'gpt seed 1'") != std::string::npos);
  CHECK(gp.find("'ngpt seed 3'") != std::string::npos);
  CHECK(gp.find("(target)") != std::string::npos);
  CHECK(gp.find("entropy floor 1.5000") != std::string::npos);
  CHECK(gp.find("set output 'a.png'") != std::string::npos);
  CHECK(gp.find("set output 'a.svg'") != std::string::npos);
  // Readable by default: the legend beside the plot, tokens in millions with one tick format.
  CHECK(gp.find("set key outside right top") != std::string::npos);
  CHECK(gp.find("set xlabel 'tokens (millions)'") != std::string::npos);
  CHECK(gp.find("set format x '%g'") != std::string::npos);
  CHECK(gp.find("\n0.1 ") != std::string::npos);  // 100000 tokens, as 0.1 million
}

TEST_CASE("ablate: the plot's y axis follows the curves, not a far-away entropy floor", "[ablate]") {
  TempDir tmp;
  std::vector<ab::VariantRuns> runs;
  runs.push_back({"gpt", {make_run(tmp.path, "gpt", 1, linear(4.0, 2.0, 1.0), 0.1)}});
  runs.push_back({"ngpt", {make_run(tmp.path, "ngpt", 1, linear(4.0, 1.8, 1.0), 0.1)}});
  const std::string gp = ab::loss_plot_script(runs, ab::analyze(runs), 0.5, "a.png", "a.svg");
  INFO(gp);
  // Curves from 10% of the tokens on span [1.8, 3.8]: padded by 5%, the floor at 0.5 stays out.
  CHECK(gp.find("set yrange [1.7") != std::string::npos);
  CHECK(gp.find("entropy floor 0.5000 nats, below the plot") != std::string::npos);
  CHECK(gp.find("lc rgb 'gray40'") == std::string::npos);
}

TEST_CASE("ablate: Student-t quantiles and 95% intervals of a mean over seeds", "[ablate]") {
  // Table values (two-sided 95%), and the expansion past 30 against known quantiles.
  CHECK(ab::t_quantile_975(1) == Approx(12.706));
  CHECK(ab::t_quantile_975(2) == Approx(4.303));
  CHECK(ab::t_quantile_975(9) == Approx(2.262));
  CHECK(ab::t_quantile_975(30) == Approx(2.042));
  CHECK(ab::t_quantile_975(40) == Approx(2.0211).epsilon(1e-4));
  CHECK(ab::t_quantile_975(120) == Approx(1.9799).epsilon(1e-4));
  // {1, 2, 3}: mean 2, sd 1, half-width t(2)/√3 = 2.4843.
  const ab::Interval iv = ab::ci95(ab::mean_sd({1.0, 2.0, 3.0}));
  REQUIRE(iv.valid());
  CHECK(iv.lo == Approx(2.0 - 4.303 / std::sqrt(3.0)));
  CHECK(iv.hi == Approx(2.0 + 4.303 / std::sqrt(3.0)));
  CHECK_FALSE(ab::ci95(ab::mean_sd({1.0})).valid());  // one seed: no interval, never a zero-width one
}

TEST_CASE("ablate: the sweep picks each variant's lowest final loss, diverged runs never, ties the smaller rate",
          "[ablate]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<ab::SweepRun> runs = {
      {"gpt", 1e-3, 2.10}, {"gpt", 3e-3, 1.95}, {"gpt", 1e-2, 2.05}, {"gpt", 3e-2, nan},          // 3e-3
      {"ngpt", 1e-3, 2.30}, {"ngpt", 3e-3, 2.00}, {"ngpt", 1e-2, 1.90}, {"ngpt", 3e-2, std::nullopt},  // 1e-2
      {"tie", 1e-2, 2.00}, {"tie", 3e-3, 2.00},                                                      // 3e-3
  };
  const auto c = ab::choose_learning_rates({"gpt", "ngpt", "tie"}, runs);
  REQUIRE(c.size() == 3);
  CHECK(c[0].variant == "gpt");
  CHECK(c[0].lr == 3e-3);
  CHECK(c[0].final_val_loss == 1.95);
  CHECK(c[1].lr == 1e-2);
  CHECK(c[2].lr == 3e-3);
  // Every rate diverged: an error naming the variant, not a silent pick.
  CHECK_THROWS_WITH(ab::choose_learning_rates({"bad"}, {{"bad", 1e-2, nan}, {"bad", 3e-2, std::nullopt}}),
                    Catch::Contains("\"bad\"") && Catch::Contains("diverged"));
  CHECK_THROWS_WITH(ab::choose_learning_rates({"missing"}, runs), Catch::Contains("no sweep run of variant \"missing\""));
  // The table: one column per rate, the choice in bold, "diverged" and "not run" said as such.
  const std::string md = ab::sweep_markdown({"gpt", "ngpt"}, {1e-3, 3e-3, 1e-2, 3e-2, 1e-1}, runs, c, 75, 1);
  INFO(md);
  CHECK(md.find("| variant | lr 0.001 | lr 0.003 | lr 0.01 | lr 0.03 | lr 0.1 | chosen lr | neighbours' losses "
                "(below / above) |") != std::string::npos);
  CHECK(row_of(md, "gpt") == "| gpt | 2.1000 | **1.9500** | 2.0500 | diverged | not run | 0.003 | 2.1000 / 2.0500 |");
  CHECK(row_of(md, "ngpt") == "| ngpt | 2.3000 | 2.0000 | **1.9000** | diverged | not run | 0.01 | 2.0000 / diverged |");
  CHECK(md.find("75 steps (seed 1)") != std::string::npos);
  // A rate only an extension ran is marked, and a winner on the edge is said to be.
  const std::vector<ab::SweepRun> edge = {{"gpt", 1e-2, 2.0}, {"gpt", 3e-2, 2.2}};
  const std::string md_edge = ab::sweep_markdown({"gpt"}, {3e-2}, edge, ab::choose_learning_rates({"gpt"}, edge), 75, 1);
  INFO(md_edge);
  CHECK(md_edge.find("| variant | lr 0.01 (ext.) | lr 0.03 |") != std::string::npos);
  CHECK(row_of(md_edge, "gpt") == "| gpt | **2.0000** | 2.2000 | 0.01 | none tried / 2.2000 (on the edge) |");
}

TEST_CASE("ablate: a sweep whose best rate sits on an edge goes one rate further, x3 or /3, until it is interior",
          "[ablate]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  using R = std::vector<ab::SweepRun>;
  // Best at the bottom: next /3; at the top: x3; inside: done.
  CHECK(ab::next_grid_rate("v", R{{"v", 3e-3, 1.9}, {"v", 1e-2, 2.0}, {"v", 3e-2, 2.1}}) == Approx(1e-3));
  CHECK(ab::next_grid_rate("v", R{{"v", 3e-3, 2.1}, {"v", 1e-2, 2.0}, {"v", 3e-2, 1.9}}) == Approx(9e-2));
  CHECK_FALSE(ab::next_grid_rate("v", R{{"v", 3e-3, 2.1}, {"v", 1e-2, 1.9}, {"v", 3e-2, 2.0}}));
  // A diverged rate above the best bounds it: the best is interior, nothing more to try there.
  CHECK_FALSE(ab::next_grid_rate("v", R{{"v", 3e-3, 2.1}, {"v", 1e-2, 1.9}, {"v", 3e-2, nan}}));
  CHECK_FALSE(ab::next_grid_rate("v", R{{"v", 3e-3, 2.1}, {"v", 1e-2, 1.9}, {"v", 3e-2, std::nullopt}}));
  // Other variants' runs do not count.
  CHECK(ab::next_grid_rate("v", R{{"v", 1e-2, 1.9}, {"v", 3e-2, 2.0}, {"w", 1e-3, 1.0}}) == Approx(1e-2 / 3));
  // The re-check's pair: the best two converged rates, best first, ties the smaller rate.
  CHECK(ab::best_two_rates("v", R{{"v", 1e-3, 2.0}, {"v", 3e-3, 1.9}, {"v", 1e-2, 2.0}, {"v", 3e-2, nan}}) ==
        std::vector<double>{3e-3, 1e-3});
  CHECK(ab::best_two_rates("v", R{{"v", 1e-3, 2.0}, {"v", 3e-3, nan}}) == std::vector<double>{1e-3});
  // Timing rounds: (slowest - fastest) / median.
  CHECK(ab::round_spread({0.10, 0.11, 0.12}) == Approx(0.02 / 0.11));
  CHECK(ab::round_spread({0.1}) == 0.0);
}

TEST_CASE("ablate: seeds aggregated with intervals, interleaved step times, a variant that never reaches the target",
          "[ablate]") {
  TempDir tmp;
  std::vector<ab::VariantRuns> runs;
  // gpt: two seeds ending at 1.9 and 2.1 (target = their mean, 2.0); ngpt reaches 2.0 at 50k tokens in both
  // seeds; slow never gets below 3.0.
  runs.push_back({"gpt",
                  {make_run(tmp.path, "gpt", 1, linear(4.0, 1.9, 1.0), 0.1),
                   make_run(tmp.path, "gpt", 2, linear(4.0, 2.1, 1.0), 0.1)}});
  runs.push_back({"ngpt",
                  {make_run(tmp.path, "ngpt", 1, linear(4.0, 0.0, 1.0), 0.1),
                   make_run(tmp.path, "ngpt", 2, linear(4.0, 0.0, 1.0), 0.1)}});
  runs.push_back({"slow", {make_run(tmp.path, "slow", 1, linear(4.0, 3.0, 1.0), 0.1)}});
  // Interleaved step times: 100 steps of 1000 tokens; gpt 0.2 s, ngpt 0.4 s, slow 0.1 s per step.
  const std::map<std::string, double> step_s = {{"gpt", 0.2}, {"ngpt", 0.4}, {"slow", 0.1}};
  const ab::Analysis a = ab::analyze(runs, step_s);
  CHECK(a.target_loss == Approx(2.0));
  // gpt seed 1 reaches 2.0 between 90k (2.11) and 100k (1.9); seed 2 never does.
  const double gpt_tokens = 90000 + 10000 * (2.11 - 2.0) / (2.11 - 1.9);
  CHECK(a.ref_tokens == Approx(gpt_tokens));
  CHECK(a.ref_seconds == Approx(gpt_tokens / 1000 * 0.2));  // from the step time, not elapsed_s
  REQUIRE(a.rows.size() == 3);
  CHECK(*a.rows[0].speedup_tokens == 1.0);  // the baseline, exactly
  CHECK(*a.rows[0].speedup_time == 1.0);
  CHECK(a.rows[1].tokens_to_target.stats.mean == Approx(50000));
  CHECK(*a.rows[1].speedup_tokens == Approx(gpt_tokens / 50000));
  CHECK(*a.rows[1].speedup_time == Approx((gpt_tokens / 1000 * 0.2) / (50.0 * 0.4)));
  CHECK(a.rows[2].tokens_to_target.reached == 0);
  CHECK_FALSE(a.rows[2].speedup_tokens.has_value());
  CHECK_FALSE(a.rows[2].speedup_time.has_value());

  ab::ReportInfo info;
  info.step_s = step_s;
  info.step_s_method = "3 rounds";
  const std::string md = ab::results_markdown(runs, info);
  INFO(md);
  CHECK(md.find("interleaved benchmark (3 rounds): gpt 200.0 ms, ngpt 400.0 ms, slow 100.0 ms per step") !=
        std::string::npos);
  CHECK(md.find("measured while the runs ran one after another") == std::string::npos);
  CHECK(row_of(md, "slow").find("not reached in 1/1 seeds | n/a (target not reached) |") != std::string::npos);
  CHECK(md.find("*noisy*") == std::string::npos);
  // Timing rounds that disagree by over 10%: said beside the time, and in the header.
  ab::ReportInfo noisy = info;
  noisy.step_spread = {{"gpt", 0.04}, {"ngpt", 0.25}, {"slow", 0.0}};
  const std::string md_noisy = ab::results_markdown(runs, noisy);
  CHECK(md_noisy.find("**over 10% for ngpt 25%**") != std::string::npos);
  CHECK(row_of(md_noisy, "ngpt").find("*noisy*") != std::string::npos);
  CHECK(row_of(md_noisy, "gpt (baseline)").find("*noisy*") == std::string::npos);
  // The spread table: gpt's final losses 1.9 / 2.1 → 2.0 ± 0.1414, interval 2.0 ± 12.706 · 0.1414/√2.
  const std::string spread = md.substr(md.find("## Spread over seeds"));
  const double h = 12.706 * std::sqrt(0.02) / std::sqrt(2.0);
  char want[160];
  std::snprintf(want, sizeof want, "| gpt | 2 | 2.0000 ± 0.1414 | [%.4f, %.4f] | 1/2 |", 2.0 - h, 2.0 + h);
  CHECK(row_of(spread, "gpt").find(want) != std::string::npos);
  CHECK(row_of(spread, "ngpt").find("| 2/2 | 50000 ± 0 | [50000, 50000] |") != std::string::npos);
  CHECK(row_of(spread, "slow") == "| slow | 1 | 3.0000 | n/a (n < 2) | 0/1 | n/a | n/a (n < 2) |");
}

TEST_CASE("ablate: the plot draws every seed and, with several seeds, their mean", "[ablate]") {
  TempDir tmp;
  std::vector<ab::VariantRuns> runs;
  runs.push_back({"gpt",
                  {make_run(tmp.path, "gpt", 1, linear(4.0, 2.0, 1.0), 0.1),
                   make_run(tmp.path, "gpt", 2, linear(4.0, 3.0, 1.0), 0.1)}});
  runs.push_back({"ngpt", {make_run(tmp.path, "ngpt", 1, linear(4.0, 1.0, 1.0), 0.1)}});
  const std::string gp = ab::loss_plot_script(runs, ab::analyze(runs), std::nullopt, "a.png", "a.svg");
  INFO(gp);
  CHECK(gp.find("'gpt seed 1'") != std::string::npos);
  CHECK(gp.find("'gpt seed 2'") != std::string::npos);
  CHECK(gp.find("'gpt mean of 2 seeds'") != std::string::npos);
  CHECK(gp.find("'ngpt mean of") == std::string::npos);  // one seed: no mean line
  // The mean's last point: (2.0 + 3.0) / 2 at 0.1 million tokens.
  const std::size_t m = gp.find("$mean0 << EOD");
  REQUIRE(m != std::string::npos);
  CHECK(gp.find("\n0.1 2.5\nEOD", m) != std::string::npos);
}

TEST_CASE("ablate: a named baseline is the main table's reference, each further one gets its own table",
          "[ablate]") {
  TempDir tmp;
  // gpt ends at 2.0, gpt_qknorm at 1.5, ngpt at 1.0; all linear from 4.0 over 100k tokens, 1 s per eval.
  std::vector<ab::VariantRuns> runs;
  runs.push_back({"gpt", {make_run(tmp.path, "gpt", 1, linear(4.0, 2.0, 1.0), 0.1)}});
  runs.push_back({"gpt_qknorm", {make_run(tmp.path, "gpt_qknorm", 1, linear(4.0, 1.5, 1.0), 0.1)}});
  runs.push_back({"ngpt", {make_run(tmp.path, "ngpt", 1, linear(4.0, 1.0, 1.0), 0.1)}});
  const ab::Analysis a = ab::analyze(runs, {}, "gpt_qknorm");
  CHECK(a.baseline == "gpt_qknorm");
  CHECK_FALSE(a.baseline_is_gpt);
  CHECK(a.target_loss == Approx(1.5));
  // ngpt: 4.0 -> 1.0 reaches 1.5 at 2.5/3.0 of 100k tokens; the reference is 100k.
  REQUIRE(a.rows.size() == 3);
  CHECK(*a.rows[2].speedup_tokens == Approx(100000.0 / (100000.0 * 2.5 / 3.0)));
  CHECK_FALSE(a.rows[0].speedup_tokens.has_value());  // gpt never gets to 1.5
  CHECK_THROWS_WITH(ab::analyze(runs, {}, "gpt_plus"),
                    Catch::Contains("the baseline \"gpt_plus\" is not one of the variants"));

  ab::ReportInfo info;
  info.baselines = {"gpt_qknorm", "gpt"};
  const std::string md = ab::results_markdown(runs, info);
  INFO(md);
  CHECK(md.find("Baseline: gpt_qknorm: GPT+ (GPT with QK-norm), the baseline of the nGPT and anGPT papers; "
                "speedups against gpt in their own tables below") != std::string::npos);
  CHECK(row_of(md, "gpt_qknorm (baseline)").find("| 1.00 |") != std::string::npos);
  CHECK(row_of(md, "ngpt").find("| 1.20 |") != std::string::npos);
  // The table against gpt: target 2.0, ngpt reaches it at 2/3 of 100k tokens (1.50x),
  // gpt_qknorm at 2/2.5 (1.25x).
  const auto against = md.find("## Against gpt: plain GPT");
  REQUIRE(against != std::string::npos);
  const std::string tail = md.substr(against);
  CHECK(tail.find("Target: gpt's mean final val loss, 2.0000") != std::string::npos);
  CHECK(row_of(tail, "gpt (baseline)") == "| gpt (baseline) | 100000 | 1.00 | 10.0 | 1.00 |");
  CHECK(row_of(tail, "gpt_qknorm") == "| gpt_qknorm | 80000 | 1.25 | 8.0 | 1.25 |");
  CHECK(row_of(tail, "ngpt") == "| ngpt | 66667 | 1.50 | 6.7 | 1.50 |");
}

namespace {

void write_eval_json(const fs::path& p, std::int64_t trained, const std::vector<std::pair<int, double>>& losses) {
  std::string s = "{\"variant\": \"x\", \"trained_context\": " + std::to_string(trained) + ", \"lengths\": [";
  for (std::size_t i = 0; i < losses.size(); ++i)
    s += std::string(i ? ", " : "") + "{\"length\": " + std::to_string(losses[i].first) +
         ", \"loss\": " + std::to_string(losses[i].second) + ", \"bucket_start\": [], \"bucket_loss\": []}";
  write(p, s + "]}\n");
}

}  // namespace

TEST_CASE("ablate: the loss past the training context, averaged over seeds, as a table and a plot", "[ablate]") {
  TempDir tmp;
  write_eval_json(tmp.path / "a1.json", 128, {{128, 1.5}, {256, 2.0}, {512, 3.0}});
  write_eval_json(tmp.path / "a2.json", 128, {{128, 1.7}, {256, 2.2}, {512, 3.4}});
  write_eval_json(tmp.path / "b1.json", 128, {{128, 1.4}, {256, 1.45}, {512, 1.5}});
  std::vector<ab::ContextEval> evals{ab::read_context_eval(tmp.path / "a1.json", "gpt", 1),
                                     ab::read_context_eval(tmp.path / "a2.json", "gpt", 2),
                                     ab::read_context_eval(tmp.path / "b1.json", "ngpt", 1)};
  CHECK(evals[0].trained_context == 128);
  CHECK(evals[1].loss == std::vector<double>{1.7, 2.2, 3.4});
  const std::string md = ab::context_markdown(evals, "how");
  INFO(md);
  CHECK(md.find("| variant | T = 128 (1×) | T = 256 (2×) | T = 512 (4×) | rise 128 → 512 |") != std::string::npos);
  // gpt: means 1.6, 2.1, 3.2 with sd 0.1414, 0.1414, 0.2828; rise 3.2 - 1.6.
  CHECK(row_of(md, "gpt") == "| gpt | 1.6000 ± 0.1414 | 2.1000 ± 0.1414 | 3.2000 ± 0.2828 | +1.6000 |");
  CHECK(row_of(md, "ngpt") == "| ngpt | 1.4000 | 1.4500 | 1.5000 | +0.1000 |");
  const std::string gp = ab::context_plot_script(evals, "c.png", "c.svg");
  CHECK(gp.find("$ctx0 << EOD\n128 1.6000000000000001\n256 2.1000000000000001\n512 3.2000000000000002\nEOD") !=
        std::string::npos);
  CHECK(gp.find("set arrow from 128, graph 0 to 128, graph 1") != std::string::npos);
  CHECK(gp.find("set output 'c.png'") != std::string::npos);

  // Bad files name themselves and what is wrong.
  write(tmp.path / "bad.json", "{\"lengths\": [{\"length\": 128}]}");
  CHECK_THROWS_WITH(ab::read_context_eval(tmp.path / "bad.json", "gpt", 1),
                    Catch::Contains("bad.json") && Catch::Contains("a number \"loss\""));
  CHECK_THROWS_WITH(ab::read_context_eval(tmp.path / "none.json", "gpt", 1),
                    Catch::Contains("none.json: cannot open"));
}

#ifdef NORMLAB_ABLATE_EXE

namespace {

// A fake trainer: parses --seed/--out (without consuming its arguments), records
// its arguments one per line in OUT/args.txt, and writes metrics.jsonl and
// summary.json whose val loss goes 4.0 -> `to` over 100k tokens. Only shell
// builtins, so it works with any PATH. With `best_lr`, a run given another
// --lr ends 0.5 higher (the sweep has something to choose). With --time-steps
// it writes OUT/step_time.json (`step_s`) and nothing else, as the trainers do.
void fake_trainer(const fs::path& bin, const std::string& variant, double to, int exit_code = 0,
                  const std::string& best_lr = "", double step_s = 0.1, const std::string& rate_flag = "--lr") {
  const fs::path p = bin / ("train-" + variant);
  auto printer = [&](double final_loss) {
    std::string metrics;
    std::istringstream is(metrics_text(linear(4.0, final_loss, 1.0)));
    std::string l;
    while (std::getline(is, l)) metrics += "printf '%s\\n' '" + l + "'\n";
    char summary[512];
    std::snprintf(summary, sizeof summary,
                  "printf '{\"variant\": \"%s\", \"seed\": %%s, \"steps\": 100, \"tokens\": 100000, "
                  "\"final_val_loss\": %.17g, \"mean_step_time_s\": 0.1, \"total_time_s\": 10.0, \"params\": 10, "
                  "\"entropy_floor_nats\": 1.0, \"data\": \"fake data\"}\\n' \"$seed\"",
                  variant.c_str(), final_loss);
    return "{\n" + metrics + "} > \"$out/metrics.jsonl\"\n" + summary + " > \"$out/summary.json\"\n";
  };
  char timing[160];
  std::snprintf(timing, sizeof timing, "printf '{\"step_time_s\": %.17g}\\n' > \"$out/step_time.json\"\n", step_s);
  // With --time-gate R,W it keeps the trainers' conversation: a byte on W when
  // ready, then for each of the timed + 2 warm-up steps a byte read from R, a
  // line "<variant> <step>" appended to BIN/gate-order.txt, a byte on W.
  std::string text = "#!/bin/sh\n"
                     "seed=''; out=''; lr=''; timed=''; gate=''; prev=''\n"
                     "for a in \"$@\"; do\n"
                     "  case \"$prev\" in --seed) seed=$a ;; --out) out=$a ;; " + rate_flag +
                     ") lr=$a ;; --time-steps) timed=$a ;; --time-gate) gate=$a ;; esac\n"
                     "  prev=$a\n"
                     "done\n"
                     "if [ -n \"$gate\" ]; then\n"
                     "  r=${gate%,*}; w=${gate#*,}; i=0\n"
                     "  eval \"printf '\\n' >&$w\"\n"
                     "  while [ $i -lt $((timed + 2)) ]; do\n"
                     "    eval \"read -r x <&$r\" || exit 4\n"
                     "    echo \"" + variant + " $i\" >> \"${0%/*}/gate-order.txt\"\n"
                     "    eval \"printf '\\n' >&$w\"\n"
                     "    i=$((i + 1))\n"
                     "  done\n"
                     "fi\n"
                     "if [ -n \"$timed\" ]; then mkdir -p \"$out\"; " + std::string(timing) + " exit 0; fi\n"
                     "echo \"fake train-" + variant + " seed $seed\"\n";
  if (exit_code != 0) text += "exit " + std::to_string(exit_code) + "\n";
  text += "printf '%s\\n' \"$@\" > \"$out/args.txt\"\n";
  if (best_lr.empty()) {
    text += printer(to);
  } else {
    text += "if [ \"$lr\" = '" + best_lr + "' ]; then\n" + printer(to) + "else\n" + printer(to + 0.5) + "fi\n";
  }
  write(p, text);
  fs::permissions(p, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec, fs::perm_options::replace);
}

// Runs normlab-ablate with `args` (already shell-quoted), output into `log`.
int run_ablate(const std::string& args, const fs::path& log, const std::string& env = "",
               const fs::path& exe = NORMLAB_ABLATE_EXE) {
  const std::string cmd = env + " '" + exe.string() + "' " + args + " > '" + log.string() + "' 2>&1";
  const int st = std::system(cmd.c_str());
  REQUIRE(st != -1);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// What every normlab-ablate test starts from: a scratch dir with bin/ for fake
// trainers, out/ for the study, and the log of the last run.
struct CliStudy {
  TempDir tmp;
  fs::path bin = tmp.path / "bin", out = tmp.path / "out", log = tmp.path / "log.txt";
  explicit CliStudy(std::initializer_list<std::pair<const char*, double>> trainers) {
    fs::create_directories(bin);
    for (const auto& [variant, to] : trainers) fake_trainer(bin, variant, to);
  }
  // " --out 'OUT' --bin-dir 'BIN'"
  std::string dirs() const { return " --out '" + out.string() + "' --bin-dir '" + bin.string() + "'"; }
};

}  // namespace

TEST_CASE("ablate: normlab-ablate runs fake trainers and writes results.md", "[ablate][cli]") {
  CliStudy st({{"gpt", 2.0}, {"ngpt", 0.0}});
  const fs::path &bin = st.bin, &out = st.out, &log = st.log;

  const int rc =
      run_ablate("--variants gpt,ngpt --seeds 1,2" + st.dirs() + " -- --steps 100 --data 'two words' --lr=0.01", log);
  const std::string text = slurp(log);
  INFO(text);
  REQUIRE(rc == 0);
  CHECK(text.find("fake train-ngpt seed 2") != std::string::npos);  // the child's output is streamed through
  REQUIRE(fs::exists(out / "results.md"));
  const std::string md = slurp(out / "results.md");
  CHECK(row_of(md, "gpt (baseline)").find("| 2 | 2.0000 ± 0.0000 |") != std::string::npos);
  CHECK(row_of(md, "ngpt").find("| 50000 ± 0 | 2.00 |") != std::string::npos);
  CHECK(md.find("fake data") != std::string::npos);
  CHECK(md.find("Entropy floor of the data: 1.0000 nats") != std::string::npos);
  CHECK(md.find("--steps 100 --data 'two words' --lr=0.01") != std::string::npos);
  CHECK(text.find("| ngpt |") != std::string::npos);  // the table is printed too
  CHECK(fs::exists(out / "loss.gp"));
  CHECK(fs::exists(out / "ablation.json"));

  // Arguments reach the trainer as given: no shell re-parsing of "two words".
  const std::string args = slurp(out / "ngpt" / "seed2" / "args.txt");
  CHECK(args == "--seed\n2\n--out\n" + (out / "ngpt" / "seed2").string() +
                    "\n--steps\n100\n--data\ntwo words\n--lr=0.01\n");

  if (text.find("gnuplot not found") == std::string::npos) {
    CHECK(fs::file_size(out / "loss_vs_tokens.png") > 0);
    CHECK(fs::file_size(out / "loss_vs_tokens.svg") > 0);
    CHECK(text.find("loss_vs_tokens.png") != std::string::npos);
  }

  // --report-only re-makes the report from OUT, without running anything; with
  // no gnuplot on PATH it says so and still writes results.md.
  fs::remove(out / "results.md");
  fs::remove(bin / "train-gpt");
  const int rc2 = run_ablate("--report-only --out '" + out.string() + "'", log, "PATH=/nonexistent");
  const std::string text2 = slurp(log);
  INFO(text2);
  CHECK(rc2 == 0);
  CHECK(text2.find("gnuplot not found") != std::string::npos);
  REQUIRE(fs::exists(out / "results.md"));
  const std::string md2 = slurp(out / "results.md");
  CHECK(row_of(md2, "ngpt").find("| 2.00 |") != std::string::npos);
  CHECK(md2.find("report re-made") != std::string::npos);
}

TEST_CASE("ablate: normlab-ablate exits 2 naming a missing trainer before running anything", "[ablate][cli]") {
  CliStudy st({{"gpt", 2.0}, {"ngpt", 0.0}});
  const fs::path &out = st.out, &log = st.log;
  // A copy of the tool in a directory of its own: no trainer beside it either.
  const fs::path tool = st.tmp.path / "tool" / "normlab-ablate";
  fs::create_directories(tool.parent_path());
  fs::copy_file(NORMLAB_ABLATE_EXE, tool);
  const int rc = run_ablate("--variants gpt,ngpt,angpt --seeds 1" + st.dirs() + " -- --steps 10", log, "", tool);
  const std::string text = slurp(log);
  INFO(text);
  CHECK(rc == 2);
  CHECK(text.find("missing trainer executable: " + (st.bin / "train-angpt").string() + " (looked in " +
                  st.bin.string() + " and beside normlab-ablate, in " + tool.parent_path().string() +
                  "). Nothing was run.") != std::string::npos);
  CHECK_FALSE(fs::exists(out / "gpt" / "seed1" / "summary.json"));  // nothing ran
}

TEST_CASE("ablate: normlab's own variant missing from --bin-dir trains with the trainer beside normlab-ablate",
          "[ablate][cli]") {
  // A user's project builds only its own variant (fake train-mine); normlab's gpt
  // comes from the tool's directory (the build tree here, the package's bin/ when installed).
  CliStudy st({{"mine", 2.0}});
  const fs::path builtin = fs::path(NORMLAB_ABLATE_EXE).parent_path() / "train-gpt";
  REQUIRE(normlab::is_executable_file(builtin));
  const int rc = run_ablate("--variants gpt,mine --seeds 1 --timing-rounds 0" + st.dirs() +
                                " -- --data synthetic --steps 4 --batch 2 --seq 8 --d 16 --layers 1 --heads 2"
                                " --eval-every 2 --eval-batches 1 --ckpt-every 0 --threads 1 --quiet",
                            st.log);
  const std::string text = slurp(st.log);
  INFO(text);
  REQUIRE(rc == 0);
  CHECK(text.find("[normlab-ablate] run 1/2: " + builtin.string() + " --seed 1") != std::string::npos);
  CHECK(text.find("[normlab-ablate] run 2/2: " + (st.bin / "train-mine").string() + " --seed 1") != std::string::npos);
  const nlohmann::json rec = nlohmann::json::parse(slurp(st.out / "ablation.json"));
  CHECK(rec.at("trainers").at("gpt") == fs::absolute(builtin).string());
  CHECK(rec.at("trainers").at("mine") == fs::absolute(st.bin / "train-mine").string());
  const std::string md = slurp(st.out / "results.md");
  CHECK(row_of(md, "gpt (baseline)").find("| 1 |") != std::string::npos);
  CHECK(row_of(md, "mine").find("| 1 |") != std::string::npos);
}

TEST_CASE("ablate: normlab-ablate stops when a trainer fails, naming it and its exit code", "[ablate][cli]") {
  CliStudy st({{"gpt", 2.0}});
  const fs::path &bin = st.bin, &out = st.out, &log = st.log;
  fake_trainer(bin, "ngpt", 0.0, 3);
  const int rc = run_ablate("--variants ngpt,gpt --seeds 1,2" + st.dirs(), log);
  const std::string text = slurp(log);
  INFO(text);
  CHECK(rc == 1);
  CHECK(text.find("train-ngpt (seed 1) failed with exit code 3") != std::string::npos);
  CHECK_FALSE(fs::exists(out / "gpt" / "seed1" / "summary.json"));  // stopped at the first failure
  CHECK_FALSE(fs::exists(out / "results.md"));

  // Flags normlab-ablate sets itself are refused as pass-through.
  CHECK(run_ablate("--variants gpt --seeds 1" + st.dirs() + " -- --seed 5", log) == 2);
  CHECK(slurp(log).find("--seeds") != std::string::npos);
}

TEST_CASE("ablate: a rerun resumes the study: finished runs skipped, interrupted ones resumed", "[ablate][cli]") {
  CliStudy st({{"gpt", 2.0}, {"ngpt", 0.0}});
  const fs::path &out = st.out, &log = st.log;
  const std::string args = "--variants gpt,ngpt --seeds 1,2" + st.dirs() + " -- --steps 100";
  REQUIRE(run_ablate(args, log) == 0);
  // ngpt seed 2 "interrupted": a checkpoint, no summary.
  fs::remove(out / "ngpt" / "seed2" / "summary.json");
  write(out / "ngpt" / "seed2" / "ckpt.safetensors", "x");
  REQUIRE(run_ablate(args, log) == 0);
  const std::string text = slurp(log);
  INFO(text);
  CHECK(text.find("gpt seed 1 finished earlier") != std::string::npos);
  CHECK(text.find("ngpt seed 1 finished earlier") != std::string::npos);
  CHECK(text.find("fake train-gpt seed 1") == std::string::npos);  // not retrained
  CHECK(text.find("run 4/4 (resuming)") != std::string::npos);
  CHECK(slurp(out / "ngpt" / "seed2" / "args.txt").find("--resume\n") != std::string::npos);
  // Other trainer flags into the same study are refused (they would mix).
  CHECK(run_ablate("--variants gpt,ngpt --seeds 1,2" + st.dirs() + " -- --steps 200", log) == 2);
  CHECK(slurp(log).find("holds a study run with other trainer flags") != std::string::npos);
}

TEST_CASE("ablate: a report on another variant set is named by it and never replaces results.md", "[ablate][cli]") {
  CliStudy st({{"gpt", 2.0}, {"ngpt", 0.0}});
  const fs::path &out = st.out, &log = st.log;
  REQUIRE(run_ablate("--variants gpt,ngpt --seeds 1" + st.dirs(), log) == 0);
  const std::string before = slurp(out / "results.md");
  REQUIRE(run_ablate("--report-only --variants ngpt --out '" + out.string() + "'", log, "PATH=/nonexistent") == 0);
  CHECK(slurp(out / "results.md") == before);
  REQUIRE(fs::exists(out / "results-ngpt.md"));
  CHECK(slurp(out / "results-ngpt.md").find("ngpt (baseline)") != std::string::npos);
  CHECK(fs::exists(out / "loss-ngpt.gp"));
}

TEST_CASE("ablate: --lr-grid sweeps every variant, trains each at its best rate, times them interleaved",
          "[ablate][cli]") {
  CliStudy st({});
  const fs::path &bin = st.bin, &out = st.out, &log = st.log;
  fake_trainer(bin, "gpt", 2.0, 0, "0.003", 0.2);
  fake_trainer(bin, "ngpt", 1.0, 0, "0.01", 0.15);
  const std::string args = "--variants gpt,ngpt --seeds 1,2 --lr-grid 1e-2,3e-3 --timing-rounds 2" + st.dirs() +
                           " -- --steps 100";
  const int rc = run_ablate(args, log);
  const std::string text = slurp(log);
  INFO(text);
  REQUIRE(rc == 0);
  // Sweep: 25 steps (a quarter of --steps), first seed, every rate.
  const std::string sweep_args = slurp(out / "sweep" / "ngpt" / "lr0.003" / "args.txt");
  CHECK(sweep_args == "--seed\n1\n--out\n" + (out / "sweep" / "ngpt" / "lr0.003").string() +
                          "\n--steps\n100\n--steps\n25\n--lr\n0.003\n");
  CHECK(text.find("sweep: gpt trains at lr 0.003") != std::string::npos);
  CHECK(text.find("sweep: ngpt trains at lr 0.01") != std::string::npos);
  // Both winners sat on an edge of {0.003, 0.01}: one rate further each, then interior.
  CHECK(text.find("sweep: gpt's best rate is on the edge of the rates tried: extending to 0.001") != std::string::npos);
  CHECK(text.find("sweep: ngpt's best rate is on the edge of the rates tried: extending to 0.03") != std::string::npos);
  CHECK(fs::exists(out / "sweep" / "gpt" / "lr0.001" / "summary.json"));
  CHECK_FALSE(fs::exists(out / "sweep" / "gpt" / "lr0.0003333"));
  // The best two rates again at the full 100 steps; the winner's run is seed 1's.
  CHECK(slurp(out / "recheck" / "gpt" / "lr0.001" / "args.txt").find("--steps\n100\n--lr\n0.001\n") != std::string::npos);
  CHECK(slurp(out / "gpt" / "seed1" / "args.txt") == slurp(out / "recheck" / "gpt" / "lr0.003" / "args.txt"));
  // Full runs at the chosen rate, every seed.
  CHECK(slurp(out / "gpt" / "seed2" / "args.txt").find("--lr\n0.003\n") != std::string::npos);
  CHECK(slurp(out / "ngpt" / "seed1" / "args.txt").find("--lr\n0.01\n") != std::string::npos);
  const std::string md = slurp(out / "results.md");
  CHECK(md.find("## Learning-rate sweep") != std::string::npos);
  CHECK(row_of(md.substr(md.find("## Learning-rate sweep")), "gpt") ==
        "| gpt | 2.5000 | **2.0000** | 2.5000 | not run | 0.003 | 2.5000 / 2.5000 |");
  CHECK(md.find("Full-horizon re-check") != std::string::npos);
  CHECK(row_of(md.substr(md.find("Full-horizon re-check")), "gpt") == "| gpt | 0.003: 2.0000, 0.001: 2.5000 | 0.003 |");
  CHECK(md.find("Timing rounds' spread ((slowest − fastest) / median): within 10% for every variant.") != std::string::npos);
  // Time to target from the interleaved step times (2 rounds), and the report says so.
  REQUIRE(fs::exists(out / "timing.json"));
  // Each round ran both trainers at once and gave them one step at a time, in turn:
  // 2 rounds of (5 timed + 2 warm-up) steps, gpt's step k before ngpt's step k before gpt's k + 1.
  std::string order;
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 7; ++k) order += "gpt " + std::to_string(k) + "\nngpt " + std::to_string(k) + "\n";
  CHECK(slurp(bin / "gate-order.txt") == order);
  CHECK(slurp(out / "timing.json").find("alternating them step by step") != std::string::npos);
  CHECK(md.find("interleaved benchmark (2 rounds") != std::string::npos);
  CHECK(md.find("gpt 200.0 ms, ngpt 150.0 ms per step") != std::string::npos);
  CHECK(md.find("Step time ÷ gpt's, paired within each timing round: ngpt 0.750, 0.750.") != std::string::npos);
  CHECK(row_of(md, "gpt (baseline)").find("| 100000 ± 0 | 1.00 | 20.0 ± 0.0 | 1.00 |") != std::string::npos);
  // ngpt (4 → 1 over 100k tokens) reaches 2.0 at 66667 tokens = 66.7 steps × 0.15 s = 10 s; gpt 100 × 0.2 s.
  CHECK(row_of(md, "ngpt").find("| 66667 ± 0 | 1.50 | 10.0 ± 0.0 | 2.00 |") != std::string::npos);

  // The study resumes as itself only: another grid into the same OUT is refused; a rerun skips everything.
  CHECK(run_ablate("--variants gpt,ngpt --seeds 1,2 --lr-grid 1e-2" + st.dirs() + " -- --steps 100", log) == 2);
  CHECK(slurp(log).find("another learning-rate sweep") != std::string::npos);
  REQUIRE(run_ablate(args, log) == 0);
  CHECK(slurp(log).find("fake train-") == std::string::npos);
  // --report-only re-makes the sweep table and the interleaved times from OUT.
  REQUIRE(run_ablate("--report-only --out '" + out.string() + "'", log, "PATH=/nonexistent") == 0);
  const std::string md2 = slurp(out / "results.md");
  CHECK(md2.find("## Learning-rate sweep") != std::string::npos);
  CHECK(md2.find("lr 0.03 (ext.)") != std::string::npos);
  CHECK(md2.find("Full-horizon re-check") != std::string::npos);
  CHECK(md2.find("gpt 200.0 ms, ngpt 150.0 ms per step") != std::string::npos);
  // --lr with --lr-grid contradicts it.
  CHECK(run_ablate("--variants gpt --seeds 1 --lr-grid 1e-2 --out '" + (st.tmp.path / "o2").string() +
                       "' --bin-dir '" + bin.string() + "' -- --lr 0.1", log) == 2);
  CHECK(slurp(log).find("do not also pass --lr") != std::string::npos);
  // --lrs: a rate per variant, no sweep (e.g. this study's choices at another context length).
  const fs::path o3 = st.tmp.path / "o3";
  REQUIRE(run_ablate("--variants gpt,ngpt --seeds 1 --lrs gpt=0.003,ngpt=0.01 --timing-rounds 0 --out '" +
                         o3.string() + "' --bin-dir '" + bin.string() + "' -- --steps 100", log) == 0);
  CHECK(slurp(o3 / "ngpt" / "seed1" / "args.txt").find("--lr\n0.01\n") != std::string::npos);
  CHECK_FALSE(fs::exists(o3 / "sweep"));
  CHECK(slurp(o3 / "results.md").find("measured while the runs ran one after another") != std::string::npos);
  CHECK(run_ablate("--variants gpt,ngpt --seeds 1 --lrs gpt=0.003 --out '" + (st.tmp.path / "o4").string() +
                       "' --bin-dir '" + bin.string() + "'", log) == 2);
  CHECK(slurp(log).find("--lrs: no learning rate for ngpt") != std::string::npos);
}

TEST_CASE("ablate: a trainer that dies in a step-by-step timing round stops the study with a sentence",
          "[ablate][cli]") {
  CliStudy st({{"gpt", 2.0}, {"ngpt", 1.0}});
  // ngpt's trainer answers "ready", then dies before its first step; gpt must not wait forever.
  const fs::path p = st.bin / "train-ngpt";
  std::string text = slurp(p);
  text.insert(text.find("if [ -n \"$gate\" ]; then\n") + std::string("if [ -n \"$gate\" ]; then\n").size(),
              "  eval \"printf '\\n' >&${gate#*,}\"; exit 7\n");
  write(p, text);
  const int rc = run_ablate("--variants gpt,ngpt --seeds 1 --lrs gpt=0.003,ngpt=0.01 --timing-rounds 1" + st.dirs() +
                                " -- --steps 100",
                            st.log);
  const std::string log = slurp(st.log);
  INFO(log);
  CHECK(rc == 1);
  CHECK(log.find("train-ngpt --time-steps --time-gate failed with exit code 7 (timing round 1)") != std::string::npos);
  CHECK_FALSE(fs::exists(st.out / "timing.json"));
}

TEST_CASE("ablate: --sweep-flag sweeps another flag (Muon's rate) beside each variant's --lr from --lrs",
          "[ablate][cli]") {
  CliStudy st({});
  fake_trainer(st.bin, "gpt", 2.0, 0, "0.03", 0.1, "--muon-lr");
  fake_trainer(st.bin, "ngpt", 1.0, 0, "0.03", 0.1, "--muon-lr");
  const std::string study = " --lr-grid 1e-2,3e-2,1e-1 --timing-rounds 0" + st.dirs() + " -- --steps 100 --optimizer muon";
  const std::string args = "--variants gpt,ngpt --seeds 1,2 --lrs gpt=0.003,ngpt=0.01 --sweep-flag --muon-lr" + study;
  REQUIRE(run_ablate(args, st.log) == 0);
  const std::string text = slurp(st.log);
  INFO(text);
  // The sweep varies --muon-lr; each variant keeps its own --lr (last, so they override the pass-through).
  CHECK(slurp(st.out / "sweep" / "ngpt" / "lr0.1" / "args.txt") ==
        "--seed\n1\n--out\n" + (st.out / "sweep" / "ngpt" / "lr0.1").string() +
            "\n--steps\n100\n--optimizer\nmuon\n--steps\n25\n--lr\n0.01\n--muon-lr\n0.1\n");
  CHECK(text.find("sweep: gpt trains at muon-lr 0.03") != std::string::npos);
  CHECK(text.find("extending") == std::string::npos);  // 0.03 is interior
  CHECK(slurp(st.out / "recheck" / "gpt" / "lr0.03" / "args.txt").find("--lr\n0.003\n--muon-lr\n0.03\n") !=
        std::string::npos);
  CHECK(slurp(st.out / "ngpt" / "seed2" / "args.txt").find("--optimizer\nmuon\n--lr\n0.01\n--muon-lr\n0.03\n") !=
        std::string::npos);
  CHECK(slurp(st.out / "ablation.json").find("\"sweep_flag\": \"--muon-lr\"") != std::string::npos);
  const std::string note = "The sweep is of `--muon-lr`";
  CHECK(slurp(st.out / "results.md").find(note) != std::string::npos);
  REQUIRE(run_ablate("--report-only --out '" + st.out.string() + "'", st.log) == 0);
  CHECK(slurp(st.out / "results.md").find(note) != std::string::npos);
  // The same OUT swept as --lr is another study.
  CHECK(run_ablate("--variants gpt,ngpt --seeds 1,2" + study, st.log) == 2);
  CHECK(slurp(st.log).find("holds a study that swept --muon-lr (now --sweep-flag --lr)") != std::string::npos);
  // Mistakes, each refused before any run with a sentence.
  const std::string o2 = " --out '" + (st.tmp.path / "o2").string() + "' --bin-dir '" + st.bin.string() + "'";
  CHECK(run_ablate("--variants gpt --seeds 1 --sweep-flag --muon-lr" + o2, st.log) == 2);
  CHECK(slurp(st.log).find("--sweep-flag needs --lr-grid") != std::string::npos);
  CHECK(run_ablate("--variants gpt --seeds 1 --lr-grid 1e-2 --sweep-flag --seed" + o2, st.log) == 2);
  CHECK(slurp(st.log).find("--sweep-flag --seed: normlab-ablate sets it per run") != std::string::npos);
  CHECK(run_ablate("--variants gpt --seeds 1 --lr-grid 1e-2 --sweep-flag muon-lr" + o2, st.log) == 2);
  CHECK(slurp(st.log).find("--sweep-flag: \"muon-lr\" is not a trainer flag") != std::string::npos);
  CHECK(run_ablate("--variants gpt --seeds 1 --lr-grid 1e-2 --sweep-flag --muon-lr" + o2 + " -- --muon-lr 0.02", st.log) == 2);
  CHECK(slurp(st.log).find("do not also pass --muon-lr") != std::string::npos);
  CHECK_FALSE(fs::exists(st.tmp.path / "o2"));
}

TEST_CASE("ablate: --grid-extensions bounds the extension, the report says the winner is still on the edge",
          "[ablate][cli]") {
  CliStudy st({});
  fake_trainer(st.bin, "gpt", 2.0, 0, "0.001");  // best far below the grid
  const std::string args = "--variants gpt --seeds 1 --lr-grid 1e-2,3e-3 --grid-extensions 1 --timing-rounds 0"
                           " --no-full-horizon-check" + st.dirs() + " -- --steps 100";
  REQUIRE(run_ablate(args, st.log) == 0);
  const std::string text = slurp(st.log);
  INFO(text);
  CHECK(text.find("extending to 0.001") != std::string::npos);
  CHECK(text.find("gpt's best rate is still on the edge after 1 extension(s) (--grid-extensions): 0.000333333 not tried") !=
        std::string::npos);
  const std::string md = slurp(st.out / "results.md");
  CHECK(row_of(md.substr(md.find("## Learning-rate sweep")), "gpt") ==
        "| gpt | **2.0000** | 2.5000 | 2.5000 | 0.001 | none tried / 2.5000 (on the edge) |");
  CHECK(md.find("No full-horizon re-check (--no-full-horizon-check): the rates were chosen on 25-step runs of a "
                "100-step study.") != std::string::npos);
  CHECK_FALSE(fs::exists(st.out / "recheck"));
  CHECK(slurp(st.out / "gpt" / "seed1" / "args.txt").find("--lr\n0.001\n") != std::string::npos);
}

TEST_CASE("ablate: tokens to target from a loss-vs-budget curve, interpolated in log tokens", "[ablate]") {
  const std::vector<double> t = {25000, 50000, 100000};
  // Between the budgets that bracket it, linear in log tokens: 2.0 lies 1/4 of the way from 2.2 to 1.4.
  const ab::BudgetReach r = ab::budget_tokens_to_reach(t, {2.6, 2.2, 1.4}, 2.0);
  REQUIRE(r.tokens);
  CHECK(*r.tokens == Approx(std::exp(std::log(50000.0) + 0.25 * std::log(2.0))));
  CHECK_FALSE(r.bound);
  // The full budget exactly at the target (the baseline): its own tokens.
  CHECK(*ab::budget_tokens_to_reach(t, {2.6, 2.2, 2.0}, 2.0).tokens == Approx(100000));
  // Already at the smallest budget: a bound, not an extrapolation.
  const ab::BudgetReach b = ab::budget_tokens_to_reach(t, {1.9, 1.8, 1.7}, 2.0);
  CHECK(*b.tokens == 25000);
  CHECK(b.bound);
  // Never: nullopt; a diverged budget is skipped, not interpolated across.
  CHECK_FALSE(ab::budget_tokens_to_reach(t, {2.6, 2.2, 2.1}, 2.0).tokens);
  CHECK(*ab::budget_tokens_to_reach(t, {2.6, std::nan(""), 1.9}, 2.0).tokens == 100000);
}

TEST_CASE("ablate: --budgets trains each variant to each budget with its own schedule and reports both methods",
          "[ablate][cli]") {
  CliStudy st({});
  // A fake trainer whose final loss falls with its own --steps: loss = A + 30 / steps (in thousandths),
  // tokens = 1000 per step; its metrics: 4.0 at the first step, the final loss at the last.
  auto budget_trainer = [&](const std::string& v, int a_milli) {
    const fs::path p = st.bin / ("train-" + v);
    write(p, "#!/bin/sh\nseed=''; out=''; steps=100; timed=''; prev=''\n"
             "for a in \"$@\"; do\n"
             "  case \"$prev\" in --seed) seed=$a ;; --out) out=$a ;; --steps) steps=$a ;; --time-steps) timed=$a ;; esac\n"
             "  prev=$a\ndone\n"
             "mkdir -p \"$out\"\n"
             "if [ -n \"$timed\" ]; then printf '{\"step_time_s\": 0.1}\\n' > \"$out/step_time.json\"; exit 0; fi\n"
             "printf '%s\\n' \"$@\" > \"$out/args.txt\"\n"
             "loss=$((" + std::to_string(a_milli) + " + 30000 / steps)); tokens=$((steps * 1000))\n"
             "fl=$(printf '%d.%03d' $((loss / 1000)) $((loss % 1000)))\n"
             "{ printf '{\"step\": 1, \"tokens\": 1000, \"val_loss\": 4.0, \"elapsed_s\": 0.1}\\n'\n"
             "  printf '{\"step\": %d, \"tokens\": %d, \"val_loss\": %s, \"elapsed_s\": 1.0}\\n' $steps $tokens $fl\n"
             "} > \"$out/metrics.jsonl\"\n"
             "printf '{\"variant\": \"" + v + "\", \"seed\": %s, \"steps\": %d, \"tokens\": %d, \"final_val_loss\": %s, "
             "\"mean_step_time_s\": 0.1, \"total_time_s\": 1.0, \"data\": \"fake\"}\\n' \"$seed\" $steps $tokens $fl "
             "> \"$out/summary.json\"\n");
    fs::permissions(p, fs::perms::owner_all, fs::perm_options::replace);
  };
  budget_trainer("gpt", 2000);   // 25 steps: 3.200, 50: 2.600, 100: 2.300 (the target)
  budget_trainer("ngpt", 1800);  // 25: 3.000, 50: 2.400, 100: 2.100
  const std::string args = "--variants gpt,ngpt --seeds 1 --budgets 0.25,0.5,1 --timing-rounds 0" + st.dirs() +
                           " -- --steps 100";
  REQUIRE(run_ablate(args, st.log) == 0);
  INFO(slurp(st.log));
  CHECK(slurp(st.out / "budget0.25" / "ngpt" / "seed1" / "args.txt").find("--steps\n100\n--steps\n25\n") !=
        std::string::npos);
  const std::string md = slurp(st.out / "results.md");
  INFO(md);
  const std::string sec = md.substr(md.find("## Budgets as separate runs"));
  // gpt reaches its own 2.3 at the full budget; ngpt between 50k (2.4) and 100k (2.1): 1/3 of the way in log tokens.
  char want[200];
  std::snprintf(want, sizeof want, "| ngpt | 3.0000 | 2.4000 | 2.1000 | %.0f | %.2f |",
                std::exp(std::log(50000.0) + std::log(2.0) / 3), 100000 / std::exp(std::log(50000.0) + std::log(2.0) / 3));
  CHECK(row_of(sec, "ngpt").find(want) != std::string::npos);
  CHECK(row_of(sec, "gpt (baseline)").find("| 3.2000 | 2.6000 | 2.3000 | 100000 | 1.00 |") != std::string::npos);
  // A rerun skips every run; another budget list into the same OUT is refused.
  REQUIRE(run_ablate(args, st.log) == 0);
  CHECK(run_ablate("--variants gpt,ngpt --seeds 1 --budgets 0.5 --timing-rounds 0" + st.dirs() + " -- --steps 100",
                   st.log) == 2);
  CHECK(slurp(st.log).find("other --budgets") != std::string::npos);
  CHECK(run_ablate("--variants gpt --seeds 1 --budgets 1.5" + st.dirs() + " -- --steps 100", st.log) == 2);
  CHECK(slurp(st.log).find("not a fraction of the study's steps in (0, 1]") != std::string::npos);
}

TEST_CASE("ablate: usage mistakes get a sentence that says what to do", "[ablate][cli]") {
  CliStudy st({{"gpt", 2.0}});
  const fs::path &out = st.out, &log = st.log;
  // An unknown variant lists the known ones.
  CHECK(run_ablate("--variants gpt,nGPT --seeds 1" + st.dirs(), log) == 2);
  CHECK(slurp(log).find("unknown variant 'nGPT' (known: gpt, ") != std::string::npos);
  // Trainer flags without the lone "--".
  CHECK(run_ablate("--variants gpt --seeds 1 --out '" + out.string() + "' --steps 10", log) == 2);
  CHECK(slurp(log).find("hint: flags for the trainers go after a lone --") != std::string::npos);
  // --seeds forgotten.
  CHECK(run_ablate("--variants gpt" + st.dirs(), log) == 2);
  CHECK(slurp(log).find("--seeds is required") != std::string::npos);
}

TEST_CASE("ablate: --baselines and --extrapolate: tables against both baselines, normlab-eval on every run",
          "[ablate][cli]") {
  CliStudy st({{"gpt", 2.0}, {"gpt_qknorm", 1.5}, {"ngpt", 1.0}});
  // A fake normlab-eval: records its arguments and writes eval.json whose loss rises with the multiple.
  const fs::path ev = st.bin / "normlab-eval";
  write(ev, "#!/bin/sh\nout=''; prev=''\nfor a in \"$@\"; do case \"$prev\" in --out) out=$a ;; esac; prev=$a; done\n"
            "mkdir -p \"$out\"; printf '%s\\n' \"$@\" > \"$out/args.txt\"\n"
            "printf '{\"trained_context\": 64, \"lengths\": [{\"length\": 64, \"loss\": 1.0}, "
            "{\"length\": 128, \"loss\": 1.5}]}' > \"$out/eval.json\"\n");
  fs::permissions(ev, fs::perms::owner_all, fs::perm_options::replace);
  const int rc = run_ablate("--variants gpt,gpt_qknorm,ngpt --seeds 1 --baselines gpt_qknorm,gpt --extrapolate 2,1" +
                                st.dirs() + " -- --steps 100 --data brown --data-dir /d --seq 64",
                            st.log);
  const std::string text = slurp(st.log);
  INFO(text);
  REQUIRE(rc == 0);
  const std::string md = slurp(st.out / "results.md");
  CHECK(md.find("Baseline: gpt_qknorm: GPT+") != std::string::npos);
  CHECK(md.find("## Against gpt: plain GPT") != std::string::npos);
  CHECK(md.find("## Past the training context") != std::string::npos);
  CHECK(row_of(md, "ngpt (baseline)").empty());
  CHECK(md.find("| ngpt | 1.0000 | 1.5000 | +0.5000 |") != std::string::npos);
  // normlab-eval got the checkpoint, the multiples (sorted) and the data flags.
  CHECK(slurp(st.out / "ngpt" / "seed1" / "context" / "args.txt") ==
        (st.out / "ngpt" / "seed1" / "ckpt.safetensors").string() + "\n--multiples\n1,2\n--out\n" +
            (st.out / "ngpt" / "seed1" / "context").string() + "\n--data\nbrown\n--data-dir\n/d\n");
  CHECK(fs::exists(st.out / "context.gp"));
  // A rerun skips the finished evaluations; --report-only keeps both baselines and the table.
  fs::remove(st.out / "ngpt" / "seed1" / "context" / "args.txt");
  REQUIRE(run_ablate("--variants gpt,gpt_qknorm,ngpt --seeds 1 --baselines gpt_qknorm,gpt --extrapolate 1,2" +
                         st.dirs() + " -- --steps 100 --data brown --data-dir /d --seq 64",
                     st.log) == 0);
  CHECK_FALSE(fs::exists(st.out / "ngpt" / "seed1" / "context" / "args.txt"));
  REQUIRE(run_ablate("--report-only --out '" + st.out.string() + "'", st.log) == 0);
  const std::string md2 = slurp(st.out / "results.md");
  CHECK(md2.find("## Against gpt: plain GPT") != std::string::npos);
  CHECK(md2.find("| ngpt | 1.0000 | 1.5000 | +0.5000 |") != std::string::npos);
  // Mistakes: a baseline that is not a variant, a multiple out of range.
  CHECK(run_ablate("--variants gpt --seeds 1 --baselines gpt_qknorm" + st.dirs(), st.log) == 2);
  CHECK(slurp(st.log).find("--baselines: \"gpt_qknorm\" is not one of --variants") != std::string::npos);
  CHECK(run_ablate("--variants gpt --seeds 1 --extrapolate 1,0" + st.dirs(), st.log) == 2);
  CHECK(slurp(st.log).find("--extrapolate: \"0\" is not a multiple") != std::string::npos);
}

#endif  // NORMLAB_ABLATE_EXE
