#pragma once
// The command line of every train-<variant> (CLI11): the flags, grouped as the
// model's shape and data, the optimizer, the schedule, the run, and sampling;
// and how the trainer sets OpenMP's spinning before anything runs.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "normlab/core/exact.hpp"
#include "normlab/core/process.hpp"
#include "normlab/dist/comm.hpp"
#include "normlab/optim/schedule.hpp"
#include "normlab/app/cli.hpp"
#include "normlab/app/run_options.hpp"

namespace normlab {
namespace detail {

// Flags with no home in TrainOptions until parsing ends.
struct RawTrainFlags {
  std::vector<std::string> opt_params;  // --opt KEY=VALUE
  std::string max_memory;               // --max-memory 8G
  std::string time_gate;                // --time-gate R,W
};

inline void add_model_and_data_flags(CLI::App& app, TrainOptions& o) {
  using namespace normlab::cli;
  app.add_option("--data", o.data, "brown | synthetic | a UTF-8 text file | a directory with train.bin/val.bin")
      ->capture_default_str();
  app.add_option("--data-dir", o.data_dir,
                 "where the Brown corpus is fetched and cached ($NORMLAB_DATA_DIR, else $XDG_CACHE_HOME/normlab, "
                 "else ~/.cache/normlab)")->capture_default_str();
  app.add_option("--vocab", o.vocab, "vocabulary size of train.bin/val.bin token shards")->check(integer(1, 65536));
  app.add_option("--steps", o.steps, "optimizer steps")->capture_default_str()->check(positive_integer());
  app.add_option("--batch", o.batch, "sequences per micro-batch")->capture_default_str()->check(positive_integer());
  app.add_option("--seq", o.seq, "tokens per sequence (context length)")->capture_default_str()->check(positive_integer());
  app.add_option("--d", o.d, "embedding dimension")->capture_default_str()->check(positive_integer());
  app.add_option("--layers", o.layers, "transformer blocks")->capture_default_str()->check(positive_integer());
  app.add_option("--heads", o.heads, "attention heads")->capture_default_str()->check(positive_integer());
  app.add_option("--kv-heads", o.kv_heads,
                 "key/value heads (grouped-query attention when fewer than --heads; default: the variant's, else "
                 "--heads)")
      ->check(positive_integer());
  app.add_option("--d-ff", o.d_ff, "the MLP's hidden width (default: the variant's, else 4 x --d)")
      ->check(positive_integer());
  app.add_option("--window", o.window,
                 "causal sliding-window attention over this many positions (0: full; default: the variant's, else 0)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--positions", o.positions,
                 "where positions enter: rope, none (NoPE) or learned (an absolute table of --seq rows, GPT-2); "
                 "default: the variant's, else rope")
      ->check(CLI::IsMember({"rope", "none", "learned"}));
  app.add_option("--bias", o.bias, "1: a bias on every linear layer of the blocks (GPT-2); default: the variant's, else 0")
      ->check(CLI::Range(0, 1));
  app.add_option("--alpha-init", o.alpha_init,
                 "variants with a learned residual step (nGPT, anGPT, gpt_alpha): its initial alpha (default 0.05; "
                 "nGPT calls its init of the order of 1/layers)")
      ->check(real(0, true, 1));
  app.add_option("--angpt-attn-factor", o.angpt_attn_factor,
                 "anGPT variants: multiplies the attention output's constant factor (the paper's 0.5x/2x ablation; "
                 "default 1)")
      ->check(real(0, true, 100));
  app.add_option("--angpt-mlp-factor", o.angpt_mlp_factor,
                 "anGPT variants: multiplies the MLP output's constant factor (the paper's 0.5x/2x ablation; default 1)")
      ->check(real(0, true, 100));
  app.add_option("--angpt-residual-factor", o.angpt_residual_factor,
                 "anGPT variants: multiplies the residual's nu(alpha) (the paper's 0.5x/2x ablation; default 1)")
      ->check(real(0, true, 100));
}

inline void add_optimizer_flags(CLI::App& app, TrainOptions& o, RawTrainFlags& raw, std::string_view variant,
                                double default_lr, const std::string& extra_optimizers) {
  using namespace normlab::cli;
  app.add_option("--lr", o.lr, "peak learning rate (default: the variant's, from docs/study.md's sweep: " +
                                   std::string(variant) + " " + exact_string(default_lr) + ")")
      ->check(positive_real());
  app.add_option("--min-lr", o.min_lr, "learning rate at the end of the cosine (default: lr/10)")
      ->check(non_negative_real());
  app.add_option("--warmup", o.warmup, "linear warmup steps (default: steps/10 for GPT variants, 0 for nGPT/anGPT)")
      ->check(non_negative_integer());
  app.add_option("--weight-decay", o.weight_decay, "AdamW decay of matrices (default: 0.1 GPT, 0 nGPT/anGPT)")
      ->check(non_negative_real());
  app.add_option("--optimizer", o.optimizer,
                 "adamw | lion | muon (Muon orthogonalizes the hidden matrices' updates; AdamW runs the embedding, "
                 "head, gains, scales and alpha)" + std::string(extra_optimizers.empty() ? "" : " | " + extra_optimizers))
      ->capture_default_str();
  app.add_option("--beta1", o.beta1, "first-moment decay (default: AdamW 0.9, Lion 0.9; Muon's AdamW part 0.9)")
      ->check(real(0, false, 1));
  app.add_option("--beta2", o.beta2, "second-moment decay (default: AdamW 0.95, Lion 0.99)")->check(real(0, false, 1));
  app.add_option("--eps", o.eps, "AdamW's epsilon")->capture_default_str()->check(positive_real());
  app.add_option("--momentum", o.momentum, "Muon's momentum")->capture_default_str()->check(real(0, false, 1));
  app.add_option("--ns-steps", o.ns_steps, "Muon's Newton-Schulz iterations")->capture_default_str()->check(integer(1, 100));
  app.add_option("--ns-precision", o.ns_precision,
                 "Muon: the Newton-Schulz products' operands, bf16 (the reference's; float32 accumulation, float32 "
                 "where the CPU has no AVX-512 BF16) or fp32, whatever --precision is")
      ->capture_default_str()->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--nesterov", o.nesterov, "Muon: Nesterov momentum (true/false)")->capture_default_str();
  app.add_option("--muon-lr", o.muon_lr,
                 "Muon: peak learning rate of the hidden matrices (the schedule scales it as --lr)")
      ->capture_default_str()->check(positive_real());
  app.add_option("--opt", raw.opt_params, "KEY=VALUE: a hyperparameter of a user's optimizer (repeatable)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

inline void add_schedule_flags(CLI::App& app, TrainOptions& o) {
  using namespace normlab::cli;
  std::string schedules = "constant | cosine (warmup, then cosine to --min-lr) | wsd (warmup, stable, then decay "
                          "to --min-lr)";
  for (const auto& [name, fn] : user_schedules()) schedules += " | " + name;
  app.add_option("--schedule", o.schedule, "learning-rate schedule: " + schedules)
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            if (v == "constant" || v == "cosine" || v == "wsd" || user_schedules().count(v)) return {};
            std::string known = "constant, cosine, wsd";
            for (const auto& [name, fn] : user_schedules()) known += ", " + name;
            return "unknown schedule '" + v + "' (known: " + known + ")";
          },
          "SCHEDULE"));
  app.add_option("--decay-frac", o.decay_frac, "wsd: fraction of the steps spent decaying")
      ->capture_default_str()->check(real(0, true, 1));
  app.add_option("--decay-shape", o.decay_shape, "wsd: linear | 1-sqrt")
      ->capture_default_str()->check(CLI::IsMember({"linear", "1-sqrt"}));
}

inline void add_run_flags(CLI::App& app, TrainCommand& cmd, RawTrainFlags& raw) {
  using namespace normlab::cli;
  TrainOptions& o = cmd.train;
  app.add_option("--grad-clip", o.grad_clip, "global gradient-norm clip (0 = off)")->capture_default_str()->check(non_negative_real());
  app.add_option("--accum", o.accum, "micro-batches per step")->capture_default_str()->check(positive_integer());
  app.add_option("--seed", o.seed, "seed of initialisation and batches")->capture_default_str()->check(non_negative_integer());
  app.add_option("--eval-every", o.eval_every, "steps between validations")->capture_default_str()->check(non_negative_integer());
  app.add_option("--eval-batches", o.eval_batches, "validation batches")->capture_default_str()->check(positive_integer());
  app.add_option("--ckpt-every", o.ckpt_every, "steps between checkpoints")->capture_default_str()->check(non_negative_integer());
  app.add_option("--snapshot-every", o.snapshot_every,
                 "also keep the checkpoint every N steps as OUT/snapshots/step<N>.safetensors (e.g. for "
                 "normlab-diagnose over training; 0: none)")
      ->capture_default_str()->check(non_negative_integer());
  app.add_option("--out", o.out, "run directory (default runs/<variant>)");
  app.add_flag("--resume", o.resume, "continue from OUT/ckpt.safetensors");
  app.add_flag("--overwrite", o.overwrite, "replace a run already in OUT (without it, an existing run is refused)");
  app.add_option("--precision", o.precision,
                 "fp32, or bf16: every matrix product with bf16 operands and float32 accumulation (master weights, "
                 "optimizer state, norms, softmax, residuals and losses stay float32; a checkpoint resumes in either)")
      ->capture_default_str()->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--threads", o.threads, "OpenMP threads (0 = default)")->capture_default_str()->check(integer(0, 1024));
  app.add_option("--zero", o.zero,
                 "1: ZeRO-1 under mpirun, AdamW moments sharded over the ranks by whole tensors (0 = every rank "
                 "holds all; on one process 1 changes nothing)")
      ->capture_default_str()->check(integer(0, 1));
  app.add_option("--dp-bucket", o.dp_bucket,
                 "data parallel: gradient values per all-reduce bucket, started as backward completes them")
      ->capture_default_str()->check(integer(1, std::int64_t(1) << 30));
  app.add_option("--max-memory", raw.max_memory, "refuse a run planned above this size (e.g. 8G; default: the memory available)")
      ->check(byte_size());
  app.add_option("--stop-at", o.stop_at, "stop after this step with a checkpoint, as if interrupted (0: never; a resumed run already past it goes on)")->check(non_negative_integer());
  app.add_option("--on-nonfinite", o.on_nonfinite, "on a non-finite loss/gradient: stop, or skip the update")
      ->check(CLI::IsMember({"stop", "skip"}))->capture_default_str();
  app.add_flag("--quiet", o.quiet, "print nothing but errors");
  app.add_flag("--dry-run", cmd.dry_run,
               "check the flags and plan the memory (vocabulary 256 unless --vocab), then stop: nothing is read, "
               "fetched, trained or written");
  app.add_option("--time-steps", o.time_steps,
                 "benchmark: time this many optimizer steps (after 2 warm-up steps) at these flags, write "
                 "OUT/step_time.json with the median, and train nothing else (normlab-ablate's interleaved timing)")
      ->check(non_negative_integer());
  app.add_option("--time-gate", raw.time_gate,
                 "with --time-steps, R,W: open file descriptors; write a byte to W when ready, then before each step "
                 "wait for a byte on R and write one to W after it (normlab-ablate alternates the variants step by step)");
  app.add_option("--fault-nan-at", o.fault_nan_at, "testing: inject a NaN into a gradient at this step")
      ->check(non_negative_integer())->group("Testing");
}

inline CLI::Option* add_sample_flags(CLI::App& app, SampleOptions& so) {
  using namespace normlab::cli;
  CLI::Option* sample = app.add_option("--sample", so.ckpt, "generate text from this checkpoint instead of training");
  app.add_option("--prompt", so.prompt, "prompt for --sample")->capture_default_str();
  app.add_option("--tokens", so.tokens, "tokens to generate")->capture_default_str()->check(positive_integer());
  app.add_option("--temperature", so.temperature, "0 = greedy")->capture_default_str()->check(real(0, false, 100));
  app.add_option("--top-k", so.top_k, "sample among the k most likely (0 = all)")->capture_default_str()->check(non_negative_integer());
  app.add_option("--tokenizer", so.tokenizer,
                 "for --sample: the SentencePiece model of the checkpoint's tokens (default: the one it names)");
  return sample;
}

// The values parsing left as text: --max-memory's size, --opt's KEY=VALUE pairs, --time-gate's descriptors.
inline std::optional<int> apply_raw_flags(const RawTrainFlags& raw, TrainOptions& o) {
  if (!raw.max_memory.empty()) cli::parse_bytes(raw.max_memory, o.max_memory);
  for (const std::string& kv : raw.opt_params) {
    const std::size_t eq = kv.find('=');
    double x = 0;
    if (eq == std::string::npos || eq == 0 || !cli::detail::parse_real(kv.substr(eq + 1), x) || !std::isfinite(x)) {
      std::fprintf(stderr, "--opt %s: expected KEY=VALUE with a finite number\n", kv.c_str());
      return 2;
    }
    o.opt_params[kv.substr(0, eq)] = x;
  }
  if (!raw.time_gate.empty()) {
    const std::size_t comma = raw.time_gate.find(',');
    std::int64_t r = -1, w = -1;
    const auto bad = [&](const std::string& why) {
      std::fprintf(stderr, "--time-gate %s: %s\n", raw.time_gate.c_str(), why.c_str());
      return 2;
    };
    if (comma == std::string::npos || !cli::detail::parse_int(raw.time_gate.substr(0, comma), r) ||
        !cli::detail::parse_int(raw.time_gate.substr(comma + 1), w) || r < 0 || w < 0 || r > 1 << 20 || w > 1 << 20)
      return bad("expected R,W, two file descriptor numbers");
    if (o.time_steps == 0) return bad("only with --time-steps (it paces a timing run)");
    for (const std::int64_t fd : {r, w}) {
      const int mode = ::fcntl(int(fd), F_GETFL);
      if (mode < 0) return bad("file descriptor " + std::to_string(fd) + " is not open");
      const int acc = mode & O_ACCMODE;
      if (fd == r && acc == O_WRONLY) return bad("file descriptor " + std::to_string(fd) + " is not open for reading");
      if (fd == w && acc == O_RDONLY) return bad("file descriptor " + std::to_string(fd) + " is not open for writing");
    }
    o.time_gate_in = int(r);
    o.time_gate_out = int(w);
  }
  return std::nullopt;
}

// A flag given for a built-in optimizer or schedule that does not read it
// (--momentum under AdamW, --eps under Lion, --decay-frac under cosine) would
// otherwise be dropped without a word. A user's optimizer or schedule may read
// any of them, so those are left alone. Returns 2 after printing the sentence.
inline std::optional<int> refuse_unread_flags(const CLI::App& app, const TrainOptions& o) {
  struct Reader {
    const char* flag;
    std::vector<std::string> readers;
  };
  const std::vector<Reader> optimizer_flags = {
      {"--beta1", {"adamw", "lion", "muon"}},  {"--beta2", {"adamw", "lion", "muon"}},
      {"--eps", {"adamw", "muon"}},            {"--momentum", {"muon"}},
      {"--ns-steps", {"muon"}},                {"--ns-precision", {"muon"}},
      {"--nesterov", {"muon"}},                {"--muon-lr", {"muon"}}};
  const std::vector<Reader> schedule_flags = {{"--decay-frac", {"wsd"}},
                                              {"--decay-shape", {"wsd"}},
                                              {"--warmup", {"cosine", "wsd"}},
                                              {"--min-lr", {"cosine", "wsd"}}};
  const auto check = [&](const std::vector<Reader>& table, const std::string& chosen, const char* what,
                         const std::vector<std::string>& builtins) -> std::optional<int> {
    if (std::find(builtins.begin(), builtins.end(), chosen) == builtins.end()) return std::nullopt;
    for (const Reader& r : table) {
      if (app.count(r.flag) == 0 || std::find(r.readers.begin(), r.readers.end(), chosen) != r.readers.end())
        continue;
      std::string readers;
      for (const std::string& n : r.readers) readers += (readers.empty() ? "" : ", ") + n;
      std::fprintf(stderr, "%s: the %s '%s' does not read it (read by: %s); leave it out or choose another %s\n",
                   r.flag, what, chosen.c_str(), readers.c_str(), what);
      return 2;
    }
    return std::nullopt;
  };
  if (const auto rc = check(optimizer_flags, o.optimizer, "optimizer", {"adamw", "lion", "muon"})) return rc;
  // --schedule's validator admits these three and the registered user schedules.
  return check(schedule_flags, o.schedule, "schedule", {"constant", "cosine", "wsd"});
}

}  // namespace detail

// The command line of every train-<variant>. Returns an exit code when the
// program should stop now (0 after --help, 2 on a bad flag), else nullopt.
inline std::optional<int> parse_train_command(int argc, const char* const* argv, std::string_view variant,
                                              std::string_view isolates, TrainCommand& cmd, double default_lr = 0,
                                              const std::string& extra_optimizers = "") {
  CLI::App app{"Train the '" + std::string(variant) + "' variant (" + std::string(isolates) +
               "), or sample from one of its checkpoints."};
  // A flag given twice takes its last value, so wrappers can append overrides.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  detail::RawTrainFlags raw;
  detail::add_model_and_data_flags(app, cmd.train);
  detail::add_optimizer_flags(app, cmd.train, raw, variant, default_lr, extra_optimizers);
  detail::add_schedule_flags(app, cmd.train);
  detail::add_run_flags(app, cmd, raw);
  CLI::Option* sample = detail::add_sample_flags(app, cmd.sample);
  if (const auto rc = normlab::cli::parse(app, argc, argv)) return rc;
  if (const auto rc = detail::apply_raw_flags(raw, cmd.train)) return rc;
  if (const auto rc = detail::refuse_unread_flags(app, cmd.train)) return rc;
  cmd.sampling = static_cast<bool>(*sample);
  if (cmd.sampling) cmd.sample.seed = cmd.train.seed;
  return std::nullopt;
}

namespace detail {
// How long OpenMP's idle threads spin before they sleep, unless the user chose
// (OMP_WAIT_POLICY or GOMP_SPINCOUNT set). libgomp's default spins 300000 times:
// with one competing busy process the reference step then ran 2.6-2.8x slower
// than alone; OMP_WAIT_POLICY=PASSIVE (no spin) 1.7-1.8x, but ~10% slower alone
// (a step opens hundreds of parallel regions, each waking sleeping threads);
// GOMP_SPINCOUNT=1000 (about a microsecond of spinning) kept the speed alone
// within noise and 1.8-2.0x under contention (docs/perf.md, "Threading under
// contention"). libgomp reads these once, before main, so the trainer sets it
// and executes itself again (same pid, arguments and otherwise the same
// environment). Not under an MPI launcher: ranks run one thread each by
// default, and re-executing a rank before MPI_Init is not worth the risk.
inline constexpr const char* kTrainerSpinCount = "1000";
inline void prefer_short_omp_spin(char** argv) {
#if defined(_OPENMP) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  if (dist::launcher_world_size() > 1) return;
  if (::setenv("GOMP_SPINCOUNT", kTrainerSpinCount, 1) != 0) return;
  ::execv("/proc/self/exe", argv);
  ::unsetenv("GOMP_SPINCOUNT");  // exec failed: go on as started
#else
  (void)argv;
#endif
}
}  // namespace detail

}  // namespace normlab
