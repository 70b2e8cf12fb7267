#pragma once
// A training run's options and plans, without the machinery that runs it: the
// flags a train-<variant> takes (TrainOptions), the optimizer's and the schedule's settings from the flags, and the
// memory plan that refuses a run too large for the machine before it allocates.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "normlab/core/error.hpp"
#include "normlab/nn/config.hpp"
#include "normlab/optim/optimizer.hpp"
#include "normlab/optim/schedule.hpp"
#include "normlab/train/data.hpp"

namespace normlab {

struct TrainOptions {
  std::string data = "brown";        // brown | synthetic | FILE.txt | DIR with train.bin/val.bin
  std::string data_dir = data::default_data_dir();  // where the Brown corpus is fetched and cached
  std::int64_t vocab = 0;            // for DIR data (uint16 tokens)
  std::int64_t steps = 300;
  std::int64_t batch = 16;
  std::int64_t seq = 128;
  std::int64_t d = 128;
  std::int64_t layers = 4;
  std::int64_t heads = 4;
  std::int64_t kv_heads = -1;        // -1: the variant's (n_head unless it sets one)
  std::int64_t d_ff = -1;            // -1: the variant's (4·d unless it sets one)
  std::int64_t window = -1;          // -1: the variant's (full causal unless it sets one)
  std::string positions;             // "": the variant's (RoPE unless it sets one); rope | none | learned
  std::int64_t bias = -1;            // -1: the variant's (none unless it sets them); 0 | 1
  double alpha_init = -1;            // -1: ModelConfig's (0.05); the learned residual step's initial α
  double angpt_attn_factor = -1;     // -1: 1; multiplies anGPT's attention output factor
  double angpt_mlp_factor = -1;      // -1: 1; multiplies anGPT's MLP output factor
  double angpt_residual_factor = -1;  // -1: 1; multiplies anGPT's residual ν(α)
  double lr = 0;                     // 0: the variant's default (variants.hpp), or the checkpoint's on resume
  double min_lr = -1;                // -1: lr / 10
  std::int64_t warmup = -1;          // -1: the variant's default
  double weight_decay = -1;          // -1: the variant's default
  std::string optimizer = "adamw";   // adamw | lion | muon | a user's (train_main's optimizer list)
  double beta1 = -1, beta2 = -1;     // -1: the optimizer's default
  double eps = 1e-8;                 // AdamW's (and Muon's AdamW part's)
  double momentum = 0.95;            // Muon
  std::int64_t ns_steps = 5;         // Muon: Newton–Schulz iterations
  std::string ns_precision = "bf16"; // Muon: the iteration's products, fp32 | bf16
  bool nesterov = true;              // Muon
  double muon_lr = 0.02;             // Muon: peak rate of the hidden matrices
  std::map<std::string, double> opt_params;  // --opt KEY=VALUE, for a user's optimizer
  std::string schedule = "cosine";   // constant | cosine | wsd
  double decay_frac = 0.2;           // wsd: fraction of the steps spent decaying
  std::string decay_shape = "linear";  // wsd: linear | 1-sqrt
  std::string precision = "fp32";   // fp32 | bf16: the arithmetic of the products (core/precision.hpp)
  double grad_clip = 1.0;
  std::int64_t accum = 1;
  std::uint64_t seed = 1;
  std::int64_t eval_every = 50;
  std::int64_t eval_batches = 8;
  std::int64_t ckpt_every = 100;
  std::int64_t snapshot_every = 0;   // 0: none; else a kept copy every N steps (OUT/snapshots/step<N>.safetensors)
  std::string out;                   // default runs/<variant>
  bool resume = false;
  bool overwrite = false;            // replace an existing run in --out
  int threads = 0;                   // 0: OpenMP's default
  int zero = 0;                      // 1: ZeRO-1, AdamW moments sharded over the ranks
  std::int64_t dp_bucket = 1 << 18;  // gradient values per all-reduce bucket (data parallel)
  std::int64_t stop_at = 0;          // stop after this many steps, as if interrupted
  std::string on_nonfinite = "stop"; // stop | skip
  std::int64_t fault_nan_at = 0;     // testing: poison a gradient at this step (1-based)
  std::int64_t time_steps = 0;       // benchmark mode: time this many steps, write OUT/step_time.json, train nothing else
  int time_gate_in = -1;             // benchmark mode: wait for a byte here before each step (-1: none)
  int time_gate_out = -1;            // ... and write one here when ready and after each step
  bool quiet = false;
  double max_memory = 0;             // bytes; 0: the machine's available memory
};

// The optimizer's hyperparameters from a run's flags (after the variant's defaults).
inline OptimizerOptions optimizer_options(const TrainOptions& o) {
  OptimizerOptions oo;
  oo.name = o.optimizer;
  if (o.beta1 >= 0) oo.beta1 = o.beta1;
  if (o.beta2 >= 0) oo.beta2 = o.beta2;
  oo.eps = o.eps;
  oo.weight_decay = o.weight_decay < 0 ? 0.0 : o.weight_decay;
  oo.momentum = o.momentum;
  oo.ns_steps = o.ns_steps;
  if (const std::optional<Precision> p = parse_precision(o.ns_precision)) oo.ns_precision = *p;
  else throw Error("--ns-precision: unknown precision '" + o.ns_precision + "' (known: fp32, bf16)");
  oo.nesterov = o.nesterov;
  oo.muon_lr = o.muon_lr;
  oo.peak_lr = o.lr;
  oo.extra = o.opt_params;
  return oo;
}

// The learning-rate schedule of a run's flags, for a run of `steps` steps.
inline LrSchedule schedule_of(const TrainOptions& o, std::int64_t steps) {
  LrSchedule sched;
  sched.decay = LrSchedule::parse_decay(o.decay_shape);
  sched.lr = o.lr;
  sched.min_lr = o.min_lr;
  sched.warmup = o.warmup;
  sched.total_steps = steps;
  sched.decay_frac = o.decay_frac;
  sched = make_schedule(o.schedule, sched);
  sched.validate();
  return sched;
}

// What the schedule prints in a run header: "cosine to 0.001", "wsd: ...".
inline std::string describe_schedule(const LrSchedule& s) {
  char b[256];
  switch (s.kind) {
    case LrSchedule::Kind::constant: return "constant";
    case LrSchedule::Kind::warmup_cosine:
      std::snprintf(b, sizeof b, "cosine to %g", s.min_lr);
      return b;
    case LrSchedule::Kind::wsd:
      std::snprintf(b, sizeof b, "warmup-stable-decay: stable to step %lld, then %s decay over %lld steps to %g",
                    (long long)s.decay_start(), s.decay_name().c_str(), (long long)s.decay_steps(), s.min_lr);
      return b;
    case LrSchedule::Kind::custom: return s.custom_name;
  }
  return "?";
}

namespace detail {

// Bytes the kernel would still give this process (MemAvailable), 0 if unknown.
inline double available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024.0;
  return 0;
}

inline std::string gib(double bytes) {
  char b[32];
  if (bytes >= 1024.0 * 1024 * 1024) std::snprintf(b, sizeof b, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  else std::snprintf(b, sizeof b, "%.1f MiB", bytes / (1024.0 * 1024));
  return b;
}

}  // namespace detail

// What a training run will allocate, planned before anything is allocated.
struct RunMemory {
  double parameters = 0, gradients = 0, optimizer = 0, activations = 0, batches = 0;
  double total() const { return parameters + gradients + optimizer + activations + batches; }
  std::string breakdown() const {
    return "parameters " + detail::gib(parameters) + ", gradients " + detail::gib(gradients) + ", optimizer moments " +
           detail::gib(optimizer) + ", activations " + detail::gib(activations) + ", batches " + detail::gib(batches);
  }
};

// Plans the run's memory and refuses it, with the figures, when it exceeds the
// limit (--max-memory, else the machine's MemAvailable): a run too large for the
// machine fails in a second with a sentence, not with std::bad_alloc or after
// minutes under the OOM killer.
template <class Model>
RunMemory plan_run_memory(const ModelConfig& mc, const TrainOptions& o) {
  // First in floating point, so absurd sizes cannot overflow the exact count.
  const double tokens = double(o.batch) * double(o.seq);
  const double rough = tokens * (3.0 * double(mc.vocab_size) + 40.0 * double(mc.n_embd) * double(mc.n_layer)) * 4.0 +
                       double(mc.vocab_size) * double(mc.n_embd) * 8.0;
  const double limit = o.max_memory > 0 ? o.max_memory : detail::available_memory_bytes();
  const std::string shape = "--batch " + std::to_string(o.batch) + " x --seq " + std::to_string(o.seq) + ", --d " +
                            std::to_string(o.d) + ", --layers " + std::to_string(o.layers);
  const std::string where = o.max_memory > 0 ? "the --max-memory limit" : "the memory available (MemAvailable)";
  if (!(rough < 1e18))
    throw Error("memory: " + shape + " needs about " + detail::gib(rough) + ", beyond any machine; lower --batch, --seq or --d");
  RunMemory m;
  const auto plan = Model::memory_plan(mc, o.batch, o.seq);
  m.parameters = double(plan.parameters);
  m.gradients = double(plan.gradients + plan.scratch);
  // The optimizer's state: two values per parameter (AdamW's moments; Muon's
  // momentum and AdamW's second moment), one for Lion.
  m.optimizer = (o.optimizer == "lion" ? 1.0 : 2.0) * double(plan.parameters);
  m.activations = double(plan.activations);
  m.batches = double(plan.tokens) + 2.0 * tokens * sizeof(std::int64_t);  // the model's copy + the driver's batch
  using B = typename Model::backend;
  if constexpr (requires { B::device_free_bytes(); }) {
    // A backend with its own memory (a GPU's): the live parameters and
    // gradients, the moments and the activations are there, checked against its
    // free memory (or --max-memory); the host keeps the parameter store and the
    // batches.
    const double device = m.parameters + double(plan.gradients) + m.optimizer + m.activations;
    // --max-memory lowers the bound, never raises it above what is free. Not counted: the
    // backend's grow-only op scratch and a communicator's own buffers (NCCL's), which
    // need headroom beyond this figure.
    const double avail = B::device_free_bytes();
    const double free = o.max_memory > 0 && (avail <= 0 || o.max_memory < avail) ? o.max_memory : avail;
    if (free > 0 && device > free)
      throw Error("memory: " + shape + " needs " + detail::gib(device) + " of " + std::string(B::name) +
                  " device memory (parameters " + detail::gib(m.parameters) + ", gradients " +
                  detail::gib(double(plan.gradients)) + ", optimizer moments " + detail::gib(m.optimizer) +
                  ", activations " + detail::gib(m.activations) + "), more than " +
                  (free == o.max_memory ? std::string("the --max-memory limit") : "the device's free memory") + ", " +
                  detail::gib(free) + "; lower --batch or --seq");
    const double host = m.parameters + m.gradients + m.batches;
    if (limit > 0 && host > limit)
      throw Error("memory: " + shape + " needs " + detail::gib(host) + " of host memory (the parameter store " +
                  detail::gib(m.parameters + m.gradients) + ", batches " + detail::gib(m.batches) + "), more than " +
                  where + ", " + detail::gib(limit) + "; lower --batch or --seq, or raise --max-memory");
    return m;
  }
  if (limit > 0 && m.total() > limit)
    throw Error("memory: " + shape + " needs " + detail::gib(m.total()) + " (" + m.breakdown() + "), more than " +
                where + ", " + detail::gib(limit) + "; lower --batch or --seq, or raise --max-memory");
  return m;
}

namespace detail {
// The model a run of these flags trains, for a vocabulary of `vocab`: the
// sizes from the flags, then the variant's own architecture (`configure`, a
// tag's optional `static void configure(ModelConfig&)`), then --kv-heads,
// --d-ff, --window, --positions and --bias where given (learned positions
// without a table size get one row per position of --seq).
inline ModelConfig model_config(const TrainOptions& o, std::int64_t vocab,
                                void (*configure)(ModelConfig&) = nullptr) {
  ModelConfig mc;
  mc.vocab_size = vocab;
  mc.n_embd = o.d;
  mc.n_head = o.heads;
  mc.n_layer = o.layers;
  if (configure) configure(mc);
  if (o.kv_heads >= 0) mc.n_kv_heads = o.kv_heads;
  if (o.d_ff >= 0) mc.d_ff = o.d_ff;
  if (o.window >= 0) mc.attn_window = o.window;
  if (!o.positions.empty() && !parse_positions(o.positions, mc.positions))
    throw Error("--positions: '" + o.positions + "' is none of rope, none, learned");
  if (mc.positions != Positions::learned) mc.n_positions = 0;
  else if (mc.n_positions == 0) mc.n_positions = o.seq;  // the table covers the training context
  if (o.bias >= 0) mc.bias = o.bias != 0;
  if (o.alpha_init > 0) mc.alpha_init = o.alpha_init;
  if (o.angpt_attn_factor > 0) mc.angpt_attn_factor_mult = o.angpt_attn_factor;
  if (o.angpt_mlp_factor > 0) mc.angpt_mlp_factor_mult = o.angpt_mlp_factor;
  if (o.angpt_residual_factor > 0) mc.angpt_residual_factor_mult = o.angpt_residual_factor;
  return mc;
}
}  // namespace detail

struct SampleOptions {
  std::string ckpt;
  std::string prompt = "The ";
  std::int64_t tokens = 200;
  double temperature = 0.8;
  std::int64_t top_k = 40;
  std::uint64_t seed = 1;
  std::string tokenizer;  // a SentencePiece model; default: the one the checkpoint names
};

struct TrainCommand {
  TrainOptions train;
  SampleOptions sample;
  bool sampling = false;
  bool dry_run = false;
};

}  // namespace normlab
