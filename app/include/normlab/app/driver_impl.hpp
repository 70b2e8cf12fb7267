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
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "normlab/core/error.hpp"
#include "normlab/core/exact.hpp"
#include "normlab/dist/comm.hpp"
#include "normlab/app/data_parallel.hpp"
#include "normlab/app/driver_core.hpp"
#include "normlab/app/model_handle.hpp"
#include "normlab/app/rank_agreement.hpp"
#include "normlab/app/run_options.hpp"
#include "normlab/app/run_support.hpp"
#include "normlab/app/train_command.hpp"
#include "normlab/app/training_run.hpp"

namespace normlab {

// --time-steps N: the step time of this variant at this run's flags, for a
// benchmark that interleaves variants (normlab-ablate's time to target). The
// run's data, model and optimizer; two warm-up steps, then N timed optimizer
// steps of the same work as training (o.accum micro-batches, clipping, AdamW,
// constraint; no evaluation, no checkpoint); writes OUT/step_time.json
// {"variant", "step_time_s": median, "steps", "tokens_per_step",
// "step_intervals_s"} and nothing else. With --time-gate another program paces
// the steps (normlab-ablate runs every variant at once, one step at a time).
namespace detail {
// One byte of --time-gate's conversation; a closed pipe means the pacing
// program stopped, so the timing run stops too.
inline void gate_signal(int fd, const char* what) {
  const char b = '\n';
  ssize_t n;
  while ((n = ::write(fd, &b, 1)) < 0 && errno == EINTR) {}
  if (n != 1)
    throw Error(std::string("--time-gate: cannot write the '") + what + "' byte to file descriptor " +
                std::to_string(fd) + ": " + (n < 0 ? std::strerror(errno) : "nothing written"));
}
inline void gate_wait(int fd, std::int64_t step) {
  char b = 0;
  ssize_t n;
  while ((n = ::read(fd, &b, 1)) < 0 && errno == EINTR) {}
  if (n != 1)
    throw Error("--time-gate: file descriptor " + std::to_string(fd) + " closed before step " + std::to_string(step) +
                " (the program pacing this timing run stopped)");
}

inline void gate_wait_closed(int fd) {
  char b = 0;
  ssize_t n;
  while ((n = ::read(fd, &b, 1)) != 0)
    if (n < 0 && errno != EINTR) break;
}

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
  detail::set_precision<Backend>(o);
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
  // --time-gate: the lead rank says it is ready, then runs each step only when
  // the byte arrives, and answers when it is done (the other ranks follow it
  // through the step's all-reduce).
  const bool gated = lead && o.time_gate_in >= 0;
  if (gated) detail::gate_signal(o.time_gate_out, "ready");
  std::vector<double> times, exposed;
  nlohmann::json intervals = nlohmann::json::array();  // each timed step's [start, end], steady clock, s
  const auto clock_s = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(t.time_since_epoch()).count();
  };
  for (std::int64_t i = 0; i < o.time_steps + 2; ++i) {
    if (gated) detail::gate_wait(o.time_gate_in, i + 1);
    const auto ts = std::chrono::steady_clock::now();
    detail::accumulate_gradients(model, sampler, o, idx, tgt, dp);
    dp.update(model, opt, o.grad_clip, dp.zero() ? dp.grad_norm(model) : 0.0, o.lr);
    Backend::synchronize();  // the step's kernels are done before the clock stops
    const auto te = std::chrono::steady_clock::now();
    if (gated) detail::gate_signal(o.time_gate_out, "done");
    if (i >= 2) {
      // The ranks run in lockstep (each step ends in an all-reduce): their mean.
      const double dt = std::chrono::duration<double>(te - ts).count();
      times.push_back(dp.mean(dt));
      exposed.push_back(dp.exposed_s);
      intervals.push_back({clock_s(ts), clock_s(te)});
    }
  }
  // Wait until the pacing program closes the gate, so that this process's exit
  // (freeing its memory) does not run beside another variant's last step.
  if (gated) detail::gate_wait_closed(o.time_gate_in);
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
                      {"tokens_per_step", o.batch * o.seq * o.accum},
                      {"step_intervals_s", intervals},
                      {"gated", o.time_gate_in >= 0},
                      {"precision", o.precision},
                      {"precision_engine", detail::precision_engine<Backend>(o)}};
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


namespace detail {
// A model flag the variant has nothing to apply to would change nothing, silently: refused.
template <class Backend>
void check_model_flags(const TrainOptions& o, const VariantEntry<Backend>& v) {
  if (o.alpha_init > 0 && !v.learns_alpha)
    throw Error("--alpha-init: " + std::string(v.name) + " has no learned residual step alpha (its residual rule "
                "learns none)");
  if ((o.angpt_attn_factor > 0 || o.angpt_mlp_factor > 0) && !v.approximate_factors)
    throw Error(std::string(o.angpt_attn_factor > 0 ? "--angpt-attn-factor" : "--angpt-mlp-factor") + ": " +
                std::string(v.name) + " has no anGPT output factors (only the anGPT variants do)");
  if (o.angpt_residual_factor > 0 && !v.nu_scaled_residual)
    throw Error("--angpt-residual-factor: " + std::string(v.name) + " has no nu(alpha)-scaled residual (only the "
                "anGPT variants' lerp_nu has one)");
}

// train_main's body (driver.hpp), for any variant on this backend and communicator.
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
    detail::check_model_flags(o, v);
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
      detail::set_precision<Backend>(o);  // a bf16 model keeps some activations in bf16: its own plan
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
