// Bad input, end to end: every flag family of the trainers refused at parse time
// with a sentence (exit 2), runs too large for the machine refused with the
// planned figures before anything is allocated, non-finite checkpoints refused
// by every loader naming the tensor, and the hazards a read of the code found
// (copyable models, borrowed token pointers, checkpoints that did not record
// the whole config, shell-quoted paths). docs/reliability.md lists each case.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "normlab/core/process.hpp"
#include "normlab/train/checkpoint.hpp"
#include "normlab/app/driver.hpp"
#include "normlab/train/variants.hpp"
#include "temp_dir.hpp"

using namespace normlab;
namespace fs = std::filesystem;

namespace {

// This process's scratch folder, removed when the process ends (a failing
// check's files are in the log the check prints, not in what stays behind).
const fs::path& scratch_root() {
  static const normlab::test::TempDir root("normlab_bad_input_");
  return root.path;
}

fs::path scratch(const std::string& name) {
  const fs::path p = scratch_root() / name;
  fs::create_directories(p);
  return p;
}

struct Ran {
  int rc = -1;
  std::string out;  // stdout and stderr together
};

Ran run(const std::string& exe, const std::vector<std::string>& args) {
  static int n = 0;
  const fs::path log = scratch("logs") / ("run" + std::to_string(++n) + ".log");
  fs::remove(log);
  Ran r;
  r.rc = run_program(exe, args, {}, log);
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  r.out = ss.str();
  return r;
}

// What no message may contain: a raw exception name, or a number over 20 digits
// (CLI11's "Value 0 not in range 0.000000 to 17976931348623157…").
// (No std::regex: GCC 12 warns inside <regex> at -O3 with the sanitizers, and
// warnings are errors.)
std::size_t longest_digit_run(const std::string& s) {
  std::size_t best = 0, run = 0;
  for (char c : s) {
    run = (c >= '0' && c <= '9') ? run + 1 : 0;
    best = std::max(best, run);
  }
  return best;
}
void check_readable(const Ran& r) {
  INFO(r.out);
  CHECK(r.out.find("std::") == std::string::npos);
  CHECK(longest_digit_run(r.out) <= 20);
}

ModelConfig tiny_config() {
  ModelConfig c;
  c.vocab_size = 256;
  c.n_embd = 16;
  c.n_head = 2;
  c.n_layer = 1;
  return c;
}

// A checkpoint written the way a user's own loop would: save_checkpoint and nothing else.
template <class Model>
fs::path user_checkpoint(const std::string& name, const ModelConfig& c, std::int64_t T,
                         const std::function<void(Model&)>& edit = {}) {
  Model m(c, 1, T);
  m.init(3);
  if (edit) edit(m);
  const fs::path p = scratch("ckpts") / (name + ".safetensors");
  save_checkpoint(p, m, static_cast<const AdamW<float>*>(nullptr));
  return p;
}

}  // namespace

TEST_CASE("bad input: every flag family of a trainer is refused at parse time with a sentence") {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {{"--d", "0"}, "--d: must be a positive integer, got 0"},
      {{"--layers", "-1"}, "--layers: must be a positive integer, got -1"},
      {{"--heads", "1.5"}, "--heads: must be a positive integer, got 1.5"},
      {{"--steps", "many"}, "--steps: must be a positive integer, got many"},
      {{"--batch", "99999999999999999999999"}, "--batch: must be a positive integer"},
      {{"--lr", "-1"}, "--lr: must be a positive finite number, got -1"},
      {{"--lr", "nan"}, "--lr: must be a positive finite number, got nan"},
      {{"--lr", "inf"}, "--lr: must be a positive finite number, got inf"},
      {{"--lr", "1e999"}, "--lr: must be a positive finite number, got 1e999"},
      {{"--min-lr", "-0.1"}, "--min-lr: must be a non-negative finite number"},
      {{"--weight-decay", "nan"}, "--weight-decay: must be a non-negative finite number"},
      {{"--grad-clip", "-1"}, "--grad-clip: must be a non-negative finite number"},
      {{"--warmup", "-2"}, "--warmup: must be a non-negative integer, got -2"},
      {{"--threads", "-3"}, "--threads: must be an integer from 0 to 1024, got -3"},
      {{"--threads", "5000"}, "--threads: must be an integer from 0 to 1024"},
      {{"--zero", "2"}, "--zero: must be an integer from 0 to 1, got 2"},
      {{"--vocab", "0"}, "--vocab: must be an integer from 1 to 65536"},
      {{"--seed", "-1"}, "--seed: must be a non-negative integer"},
      {{"--eval-batches", "0"}, "--eval-batches: must be a positive integer"},
      {{"--max-memory", "lots"}, "--max-memory: must be a positive size such as 512M or 8G, got lots"},
      {{"--temperature", "-1", "--sample", "x"}, "--temperature: must be a non-negative finite number"},
      {{"--tokens", "0", "--sample", "x"}, "--tokens: must be a positive integer"},
      {{"--on-nonfinite", "ignore"}, "--on-nonfinite"},
      {{"--min-lr", "1", "--lr", "0.1"}, "--min-lr 1 must not exceed --lr 0.1"},
      {{"--d", "30", "--heads", "4"}, "--d 30 must be a multiple of --heads 4"},
      {{"--warmup", "5"}, "--warmup 5 is longer than the run (--steps 1)"},
      {{"--opt", "beta1=0.5"}, "--opt beta1: optimizer 'adamw' reads no such hyperparameter"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"--data", "synthetic", "--steps", "1", "--quiet", "--out",
                                     scratch("flags").string()};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const Ran r = run(NORMLAB_TRAIN_GPT_EXE, args);
    INFO("args: " << c.args[0] << " " << c.args[1] << "\n" << r.out);
    CHECK(r.rc == 2);
    CHECK(r.out.find(c.expect) != std::string::npos);
    check_readable(r);
  }
}

TEST_CASE("bad input: a run too large for the machine is refused with the planned figures") {
  // 100000 x 4096 tokens at d = 1024: terabytes of activations; was std::bad_alloc.
  const Ran big = run(NORMLAB_TRAIN_GPT_EXE, {"--data", "synthetic", "--batch", "100000", "--seq", "4096", "--d", "1024",
                                               "--out", scratch("big").string()});
  INFO(big.out);
  CHECK(big.rc == 2);
  CHECK(big.out.find("memory: --batch 100000 x --seq 4096") != std::string::npos);
  CHECK(big.out.find("activations") != std::string::npos);
  CHECK(big.out.find("lower --batch or --seq") != std::string::npos);
  check_readable(big);
  // A limit of our own: the same small run passes under 1G and is refused under 100K (it plans 0.3 MiB).
  const std::vector<std::string> small = {"--data", "synthetic", "--steps", "1", "--d", "16", "--layers", "1",
                                          "--heads", "2", "--seq", "16", "--batch", "2", "--eval-batches", "1"};
  std::vector<std::string> a = small, b = small;
  a.insert(a.end(), {"--max-memory", "1G", "--overwrite", "--out", scratch("small_ok").string()});
  b.insert(b.end(), {"--max-memory", "100K", "--out", scratch("small_refused").string()});
  const Ran ok = run(NORMLAB_TRAIN_GPT_EXE, a);
  INFO(ok.out);
  CHECK(ok.rc == 0);
  const std::size_t at = ok.out.find("memory: ");
  REQUIRE(at != std::string::npos);
  CHECK(ok.out.find(" MiB planned (parameters", at) != std::string::npos);
  const Ran refused = run(NORMLAB_TRAIN_GPT_EXE, b);
  INFO(refused.out);
  CHECK(refused.rc == 2);
  CHECK(refused.out.find("more than the --max-memory limit, 0.1 MiB") != std::string::npos);
}

TEST_CASE("bad input: the memory plan counts what the model allocates") {
  // The plan uses the model's own layout code; its parameter count is the real one.
  const ModelConfig c = tiny_config();
  const auto plan = GPT<float>::memory_plan(c, 3, 17);
  GPT<float> m(c, 3, 17);
  CHECK(plan.parameters == m.params().size() * sizeof(float));
  CHECK(plan.gradients == plan.parameters);
  CHECK(plan.activations > 3 * 17 * c.vocab_size * sizeof(float));  // at least the logits
  CHECK(plan.tokens == 2 * 3 * 17 * sizeof(std::int64_t));
}

TEST_CASE("bad input: every loader refuses a checkpoint with a non-finite parameter, naming the tensor") {
  const fs::path nan_ckpt = user_checkpoint<GPT<float>>("nan_wte", tiny_config(), 32, [](GPT<float>& m) {
    m.params().value(m.params().spec("transformer.wte.weight").offset)[5] = std::numeric_limits<float>::quiet_NaN();
  });
  // The library loader (resume, sample, golden and diagnose all go through it).
  GPT<float> m(tiny_config(), 1, 32);
  const auto f = io::SafetensorsFile::open(nan_ckpt);
  try {
    load_checkpoint(f, m, static_cast<AdamW<float>*>(nullptr));
    FAIL("a NaN embedding was loaded");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("'transformer.wte.weight' holds a non-finite value") &&
                             Catch::Contains("nan_wte.safetensors") && Catch::Contains("element 5"));
  }
  // --sample printed garbage text and exited 0.
  const Ran s = run(NORMLAB_TRAIN_GPT_EXE, {"--sample", nan_ckpt.string(), "--tokens", "5"});
  INFO(s.out);
  CHECK(s.rc == 2);
  CHECK(s.out.find("transformer.wte.weight") != std::string::npos);
  check_readable(s);
  // normlab-diagnose.
  const Ran d = run(NORMLAB_DIAGNOSE_EXE, {nan_ckpt.string()});
  INFO(d.out);
  CHECK(d.rc == 2);
  CHECK(d.out.find("transformer.wte.weight") != std::string::npos);
  // --resume of a run whose checkpoint went bad.
  const fs::path run_dir = scratch("nan_resume");
  fs::copy_file(nan_ckpt, run_dir / "ckpt.safetensors", fs::copy_options::overwrite_existing);
  const Ran r = run(NORMLAB_TRAIN_GPT_EXE, {"--data", "synthetic", "--d", "16", "--layers", "1", "--heads", "2",
                                            "--seq", "32", "--resume", "--out", run_dir.string()});
  INFO(r.out);
  CHECK(r.rc == 2);
  CHECK(r.out.find("non-finite") != std::string::npos);
}

TEST_CASE("hazard: a model cannot be copied or moved (its pointers point into its own arena)") {
  STATIC_REQUIRE_FALSE(std::is_copy_constructible_v<GPT<float>>);
  STATIC_REQUIRE_FALSE(std::is_copy_assignable_v<NGPT<double>>);
  STATIC_REQUIRE_FALSE(std::is_move_constructible_v<ANGPT<float>>);
  STATIC_REQUIRE_FALSE(std::is_move_assignable_v<GPT<double>>);
}

TEST_CASE("hazard: backward() uses the tokens of its forward(), not the caller's arrays as they are now") {
  const ModelConfig c = tiny_config();
  const std::int64_t B = 2, T = 8;
  std::vector<std::int64_t> idx(B * T), tgt(B * T);
  for (std::int64_t i = 0; i < B * T; ++i) {
    idx[i] = (i * 37) % 256;
    tgt[i] = (i * 11 + 5) % 256;
  }
  GPT<double> clean(c, B, T), scribbled(c, B, T);
  clean.init(4);
  scribbled.init(4);
  clean.forward(idx.data(), tgt.data(), B, T);
  clean.backward();
  std::vector<std::int64_t> idx2 = idx, tgt2 = tgt;
  scribbled.forward(idx2.data(), tgt2.data(), B, T);
  std::fill(idx2.begin(), idx2.end(), 0);  // the caller reuses its buffers
  std::fill(tgt2.begin(), tgt2.end(), 1);
  scribbled.backward();
  // Same arithmetic on the same tokens: bit-identical gradients.
  CHECK(clean.params().grads() == scribbled.params().grads());
}

TEST_CASE("hazard: a checkpoint records and checks every config value that changes the function") {
  const ModelConfig c = tiny_config();
  const fs::path p = user_checkpoint<NGPT<float>>("ngpt_cfg", c, 32);
  const auto f = io::SafetensorsFile::open(p);
  struct Change {
    const char* key;
    std::function<void(ModelConfig&)> edit;
  };
  const std::vector<Change> changes = {
      {"rmsnorm_eps", [](ModelConfig& m) { m.rmsnorm_eps = 1e-5; }},
      {"rope_base", [](ModelConfig& m) { m.rope_base = 500000; }},
      {"base_scale", [](ModelConfig& m) { m.base_scale = 0.1; }},
      {"alpha_init", [](ModelConfig& m) { m.alpha_init = 0.1; }},
      {"sqk_init", [](ModelConfig& m) { m.sqk_init = 2; }},
      {"suv_init", [](ModelConfig& m) { m.suv_init = 2; }},
      {"sz_init", [](ModelConfig& m) { m.sz_init = 2; }},
      {"angpt_attn_factor_mult", [](ModelConfig& m) { m.angpt_attn_factor_mult = 2; }},
      {"angpt_mlp_factor_mult", [](ModelConfig& m) { m.angpt_mlp_factor_mult = 0.5; }},
      {"angpt_residual_factor_mult", [](ModelConfig& m) { m.angpt_residual_factor_mult = 2; }},
  };
  for (const Change& ch : changes) {
    ModelConfig other = c;
    ch.edit(other);
    NGPT<float> m(other, 1, 32);
    INFO(ch.key);
    CHECK_THROWS_WITH(load_checkpoint(f, m, static_cast<AdamW<float>*>(nullptr)),
                      Catch::Contains(std::string("checkpoint has ") + ch.key + " = "));
  }
  NGPT<float> same(c, 1, 32);
  CHECK_NOTHROW(load_checkpoint(f, same, static_cast<AdamW<float>*>(nullptr)));
  // angpt_attnfactor's c_att depends on the context it was built for.
  using AttnFactor = variants::angpt_attnfactor::model<float>;
  const fs::path a = user_checkpoint<AttnFactor>("angpt_ctx", c, 64);
  const auto fa = io::SafetensorsFile::open(a);
  AttnFactor longer(c, 1, 256);
  CHECK_THROWS_WITH(load_checkpoint(fa, longer, static_cast<AdamW<float>*>(nullptr)),
                    Catch::Contains("attn_output_factor") && Catch::Contains("context of 64 tokens") &&
                        Catch::Contains("context 256"));
  AttnFactor same_ctx(c, 1, 64);
  CHECK_NOTHROW(load_checkpoint(fa, same_ctx, static_cast<AdamW<float>*>(nullptr)));
  // The paper's anGPT has no context-dependent factor: any context loads it.
  const fs::path p2 = user_checkpoint<ANGPT<float>>("angpt_paper_ctx", c, 64);
  ANGPT<float> paper_longer(c, 1, 256);
  CHECK_NOTHROW(load_checkpoint(io::SafetensorsFile::open(p2), paper_longer, static_cast<AdamW<float>*>(nullptr)));
  // The config read back is the one written.
  const ModelConfig back = checkpoint_config(f);
  CHECK(back.rope_base == c.rope_base);
  CHECK(back.base_scale == 1.0 / std::sqrt(16.0));
  CHECK(checkpoint_max_seq(f) == 32);
}

TEST_CASE("hazard: a checkpoint from a user's own loop can be sampled (it records max_seq)") {
  const fs::path p = user_checkpoint<GPT<float>>("user_loop", tiny_config(), 48);
  const Ran s = run(NORMLAB_TRAIN_GPT_EXE, {"--sample", p.string(), "--prompt", "ab", "--tokens", "7"});
  INFO(s.out);
  CHECK(s.rc == 0);
  CHECK(s.out.rfind("ab", 0) == 0);
}

TEST_CASE("hazard: tools run other programs without a shell, so any character in a path is safe") {
  // normlab-diagnose --plots ran gnuplot through std::system with quoted paths.
  REQUIRE_FALSE(find_on_path("gnuplot").empty());  // installed by scripts/bootstrap.sh
  const fs::path ck = user_checkpoint<GPT<float>>("plot_me", tiny_config(), 16);
  const fs::path dir = scratch("it's a \"dir\" with $HOME and `ticks`");
  const Ran d = run(NORMLAB_DIAGNOSE_EXE, {ck.string(), "--plots", dir.string()});
  INFO(d.out);
  CHECK(d.rc == 0);
  bool png = false;
  for (const auto& e : fs::directory_iterator(dir)) png = png || (e.path().extension() == ".png" && fs::file_size(e.path()) > 1000);
  CHECK(png);
  // run_program itself: arguments arrive byte for byte.
  const fs::path out = scratch("argv") / "out.txt";
  const std::string weird = "a'b\"c $x `y` \\z";
  REQUIRE(run_program(find_on_path("sh"), {"-c", "printf '%s' \"$1\" > \"$2\"", "sh", weird, out.string()}) == 0);
  std::ifstream in(out);
  std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(got == weird);
}

// ---------------------------------------------------------------- the user's path

namespace {
std::vector<nlohmann::json> metrics_of(const fs::path& dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(dir / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}
nlohmann::json summary_of(const fs::path& dir) {
  std::ifstream in(dir / "summary.json");
  return nlohmann::json::parse(in);
}
const std::vector<std::string> kTiny = {"--data", "synthetic", "--d", "16", "--layers", "1", "--heads", "2",
                                        "--seq", "16", "--batch", "2", "--eval-every", "5", "--eval-batches", "1",
                                        "--quiet"};
std::vector<std::string> tiny_with(std::initializer_list<std::string> more) {
  std::vector<std::string> a = kTiny;
  a.insert(a.end(), more);
  return a;
}
}  // namespace

TEST_CASE("user path: time survives an interruption (elapsed_s and the summary's totals)") {
  const fs::path dir = scratch("timed");
  fs::remove_all(dir);
  REQUIRE(run(NORMLAB_TRAIN_GPT_EXE, tiny_with({"--steps", "20", "--stop-at", "10", "--out", dir.string()})).rc == 0);
  const double at10 = metrics_of(dir).back().at("elapsed_s").get<double>();
  REQUIRE(run(NORMLAB_TRAIN_GPT_EXE, tiny_with({"--steps", "20", "--resume", "--out", dir.string()})).rc == 0);
  const auto m = metrics_of(dir);
  REQUIRE(m.size() == 20);
  // elapsed_s restarted from 0 at step 11: it must keep growing across the resume.
  double prev = 0, step_sum = 0;
  for (const auto& j : m) {
    CHECK(j.at("elapsed_s").get<double>() >= prev);
    prev = j.at("elapsed_s").get<double>();
    step_sum += j.at("step_time_s").get<double>();
  }
  CHECK(m[10].at("elapsed_s").get<double>() >= at10);
  const auto s = summary_of(dir);
  // total_time_s covered only the resumed half; now it covers the whole run.
  CHECK(s.at("total_time_s").get<double>() >= prev);
  CHECK(s.at("total_time_s").get<double>() >= at10);
  // mean step time over all 20 steps, as the metrics say (5% for rounding in the JSON).
  CHECK(s.at("mean_step_time_s").get<double>() == Approx(step_sum / 20).epsilon(0.05));
}

TEST_CASE("user path: a resume may grow --steps for every variant (warmup kept from the checkpoint)") {
  // GPT's default warmup is steps/10: 20 steps -> 2; resuming with --steps 30 used to
  // recompute 3 and refuse with "checkpoint has warmup = 2, this run has 3".
  const fs::path dir = scratch("grow");
  fs::remove_all(dir);
  REQUIRE(run(NORMLAB_TRAIN_GPT_EXE, tiny_with({"--steps", "20", "--stop-at", "4", "--out", dir.string()})).rc == 0);
  const Ran r = run(NORMLAB_TRAIN_GPT_EXE, tiny_with({"--steps", "30", "--resume", "--out", dir.string()}));
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(summary_of(dir).at("steps").get<int>() == 30);
  // An explicit, different warmup is still refused, naming the flag.
  const fs::path dir2 = scratch("grow2");
  fs::remove_all(dir2);
  REQUIRE(run(NORMLAB_TRAIN_GPT_EXE, tiny_with({"--steps", "20", "--stop-at", "4", "--out", dir2.string()})).rc == 0);
  const Ran bad = run(NORMLAB_TRAIN_GPT_EXE, tiny_with({"--steps", "30", "--warmup", "5", "--resume", "--out", dir2.string()}));
  CHECK(bad.rc == 2);
  CHECK(bad.out.find("checkpoint has warmup = 2, this run has 5") != std::string::npos);
}

TEST_CASE("user path: a finished run resumed trains nothing and keeps its record, and a shorter --steps is refused") {
  const fs::path dir = scratch("finished");
  fs::remove_all(dir);
  REQUIRE(run(NORMLAB_TRAIN_GPT_EXE, tiny_with({"--steps", "10", "--out", dir.string()})).rc == 0);
  const auto summary = summary_of(dir);
  REQUIRE(summary.at("final_val_loss").is_number());
  auto bytes = [&] {
    std::ifstream in(dir / "ckpt.safetensors", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string ckpt = bytes();
  const Ran again = run(NORMLAB_TRAIN_GPT_EXE, tiny_with({"--steps", "10", "--resume", "--out", dir.string()}));
  INFO(again.out);
  CHECK(again.rc == 0);
  CHECK(summary_of(dir) == summary);  // it once wrote a NaN final loss over the real one
  CHECK(bytes() == ckpt);
  CHECK(metrics_of(dir).size() == 10);
  const Ran shorter = run(NORMLAB_TRAIN_GPT_EXE, tiny_with({"--steps", "5", "--resume", "--out", dir.string()}));
  INFO(shorter.out);
  CHECK(shorter.rc == 2);
  CHECK(shorter.out.find("already 10 steps in, past --steps 5") != std::string::npos);
  CHECK(summary_of(dir) == summary);
  CHECK(bytes() == ckpt);
}

TEST_CASE("user path: a refused resume names the variant, or the flag behind the optimizer's setting") {
  const fs::path dir = scratch("named");
  fs::remove_all(dir);
  REQUIRE(run(NORMLAB_TRAIN_GPT_EXE, tiny_with({"--steps", "6", "--stop-at", "3", "--optimizer", "muon",
                                                "--out", dir.string()})).rc == 0);
  const Ran lr = run(NORMLAB_TRAIN_GPT_EXE, tiny_with({"--steps", "6", "--optimizer", "muon", "--muon-lr", "0.01",
                                                       "--resume", "--out", dir.string()}));
  INFO(lr.out);
  CHECK(lr.rc == 2);
  CHECK(lr.out.find("lr_ratio") != std::string::npos);
  CHECK(lr.out.find("(--muon-lr ÷ --lr)") != std::string::npos);
#ifdef NORMLAB_TRAIN_ANGPT_EXE
  // gpt's checkpoint into anGPT: the variant, not the weight decay both default differently.
  const Ran variant = run(NORMLAB_TRAIN_ANGPT_EXE, tiny_with({"--steps", "6", "--optimizer", "muon", "--resume",
                                                              "--out", dir.string()}));
  INFO(variant.out);
  CHECK(variant.rc == 2);
  CHECK(variant.out.find("checkpoint of variant 'gpt'") != std::string::npos);
#endif
}

TEST_CASE("user path: an existing run is never replaced silently") {
  const fs::path dir = scratch("kept");
  fs::remove_all(dir);
  REQUIRE(run(NORMLAB_TRAIN_GPT_EXE, tiny_with({"--steps", "10", "--out", dir.string()})).rc == 0);
  REQUIRE(metrics_of(dir).size() == 10);
  const Ran again = run(NORMLAB_TRAIN_GPT_EXE, tiny_with({"--steps", "5", "--out", dir.string()}));
  INFO(again.out);
  CHECK(again.rc == 2);
  CHECK(again.out.find("already holds a run") != std::string::npos);
  CHECK(again.out.find("--resume") != std::string::npos);
  CHECK(again.out.find("--overwrite") != std::string::npos);
  CHECK(metrics_of(dir).size() == 10);  // untouched
  const Ran replaced = run(NORMLAB_TRAIN_GPT_EXE, tiny_with({"--steps", "5", "--overwrite", "--out", dir.string()}));
  CHECK(replaced.rc == 0);
  CHECK(metrics_of(dir).size() == 5);
  CHECK(run(NORMLAB_TRAIN_GPT_EXE, tiny_with({"--steps", "5", "--overwrite", "--resume", "--out", dir.string()})).rc == 2);
}

TEST_CASE("user path: corpora are cached in one documented place, never the current directory") {
  const auto restore = [](const char* k, const char* v) {
    if (v) ::setenv(k, v, 1);
    else ::unsetenv(k);
  };
  const char* keys[] = {"NORMLAB_DATA_DIR", "XDG_CACHE_HOME", "HOME"};
  std::vector<std::optional<std::string>> saved;
  for (const char* k : keys) saved.push_back(std::getenv(k) ? std::optional<std::string>(std::getenv(k)) : std::nullopt);
  ::unsetenv("NORMLAB_DATA_DIR");
  ::unsetenv("XDG_CACHE_HOME");
  ::setenv("HOME", "/home/someone", 1);
  CHECK(data::default_data_dir() == "/home/someone/.cache/normlab");
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  CHECK(data::default_data_dir() == "/xdg/normlab");
  ::setenv("NORMLAB_DATA_DIR", "/corpora", 1);
  CHECK(data::default_data_dir() == "/corpora");
  for (std::size_t i = 0; i < 3; ++i) restore(keys[i], saved[i] ? saved[i]->c_str() : nullptr);
  // The trainers' --help shows where it is.
  const Ran h = run(NORMLAB_TRAIN_GPT_EXE, {"--help"});
  CHECK(h.out.find("XDG_CACHE_HOME") != std::string::npos);
}

#ifdef NORMLAB_TRAIN_ANGPT_ATTNFACTOR_EXE
TEST_CASE("angpt_attnfactor reproduces the former train-angpt step by step") {
  // tests/data/angpt_attnfactor_reference.json: train-angpt's losses as it was before
  // the paper's anGPT (c_att = 1) took the name, recorded with the command it holds.
  // Same arithmetic, so the same bits on the machine that recorded it; 1e-5 relative
  // allows float32 reordering by another CPU's SIMD width over 20 steps.
  std::ifstream in(std::string(NORMLAB_TEST_DATA_DIR) + "/angpt_attnfactor_reference.json");
  const auto ref = nlohmann::json::parse(in);
  const fs::path dir = scratch("attnfactor");
  fs::remove_all(dir);
  std::vector<std::string> args = {"--data", "synthetic", "--steps", "20", "--d", "64", "--layers", "2", "--heads",
                                   "2", "--seq", "64", "--batch", "4", "--eval-every", "10", "--eval-batches", "2",
                                   "--ckpt-every", "0", "--quiet", "--out", dir.string()};
  const Ran r = run(NORMLAB_TRAIN_ANGPT_ATTNFACTOR_EXE, args);
  INFO(r.out);
  REQUIRE(r.rc == 0);
  const auto m = metrics_of(dir);
  const auto want = ref.at("train_loss").get<std::vector<double>>();
  REQUIRE(m.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(m[i].at("train_loss").get<double>() == Approx(want[i]).epsilon(1e-5));
  }
  // ... and the paper's anGPT is a different function from step 1 on.
  const fs::path pdir = scratch("angpt_paper");
  fs::remove_all(pdir);
  args.back() = pdir.string();
  REQUIRE(run(NORMLAB_TRAIN_ANGPT_EXE, args).rc == 0);
  CHECK(std::abs(metrics_of(pdir)[0].at("train_loss").get<double>() - want[0]) > 1e-4);
}
#endif

TEST_CASE("hazard: a trainer that cannot join an MPI job refuses to run as one of its processes") {
  // N copies of a single-process trainer under mpirun would each train the whole
  // run into the same --out. A launcher's world size in the environment (here
  // PMI_SIZE alone, which does not make the trainer initialise MPI) is refused.
  ::setenv("PMI_SIZE", "2", 1);
  const Ran r = run(NORMLAB_TRAIN_GPT_EXE, {"--data", "synthetic", "--steps", "1", "--out",
                                           (scratch("pmi") / "run").string()});
  ::unsetenv("PMI_SIZE");
  INFO(r.out);
  CHECK(r.rc == 2);
  CHECK(r.out.find("started by mpirun as one of 2 processes") != std::string::npos);
  CHECK_FALSE(fs::exists(scratch("pmi") / "run" / "metrics.jsonl"));
}
