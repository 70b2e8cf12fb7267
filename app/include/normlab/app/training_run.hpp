#pragma once
// One training run, from --out to summary.json, as a sequence of phases (claim
// the run directory, resolve the rates, build, resume or initialise, print the
// header, train, summarize), each a member of TrainingRun; and --time-steps, the
// same run's step time without training.
//
// A run trains one variant on one process or as one rank of a data-parallel job
// (`comm`): every rank draws the same global batch and computes its rows; rank 0
// alone prints and writes metrics, checkpoints and the summary.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "normlab/backend/cpu/backend.hpp"
#include "normlab/core/error.hpp"
#include "normlab/core/exact.hpp"
#include "normlab/io/safetensors.hpp"
#include "normlab/optim/any_optimizer.hpp"
#include "normlab/optim/schedule.hpp"
#include "normlab/train/checkpoint_meta.hpp"
#include "normlab/train/data.hpp"
#include "normlab/app/data_parallel.hpp"
#include "normlab/app/model_handle.hpp"
#include "normlab/app/rank_agreement.hpp"
#include "normlab/app/run_options.hpp"
#include "normlab/app/run_support.hpp"

namespace normlab {
namespace detail {

template <class Comm, class Backend>
class TrainingRun {
 public:
  using Opt = AnyOptimizer<float, Backend>;

  TrainingRun(TrainOptions o, Comm& comm, const VariantEntry<Backend>& v, const OptimizerMenu<Backend>& menu)
      : o_(std::move(o)), comm_(comm), v_(v), menu_(menu), lead_(comm.rank() == 0) {}

  // The process exit code: 0, or 3 when the run stopped on a non-finite loss or gradient.
  int run() {
    detail::require_reachable_memory<Comm, Backend>();
    if constexpr (requires { Backend::require_device(); }) Backend::require_device();
    claim_out_dir();
    open_resumed_checkpoint();
    resolve_rates();
    build();
    record_run_meta();
    if (lead_) std::filesystem::create_directories(o_.out);
    if (resumed_) resume(*resumed_);
    else start_fresh();
    if (start_ == o_.steps) {  // a finished run resumed: its summary and checkpoint stay as they are
      if (!o_.quiet)
        std::printf("%s is already %lld steps in, all of --steps: nothing to train (raise --steps to go on)\n",
                    ckpt_.c_str(), static_cast<long long>(start_));
      return 0;
    }
    // The flags were compared at start; now what they produced: the data's content
    // (the same path may hold other files on another node), the start step and the
    // parameters every rank starts from.
    detail::check_ranks_agree(comm_, [&] {
      return std::vector<std::pair<std::string, std::string>>{
          {"data content", td_.description + " (hash " + detail::tokens_hash(td_) + ")"},
          {"start step", std::to_string(start_)},
          {"parameters (hash)", detail::hex(detail::fnv1a(model().params().values().data(),
                                                          model().params().values().size() * sizeof(float)))}};
    });
    if (lead_) metrics_.open(metrics_path_, std::ios::app);
    if (!o_.quiet) print_header();
    t0_ = clock::now();
    for (std::int64_t step = start_; step < o_.steps; ++step) {
      const Outcome r = train_step(step);
      if (r == Outcome::nonfinite_stop) return 3;
      if (r == Outcome::stopped_at) return 0;
    }
    write_summary();
    return 0;
  }

 private:
  using clock = std::chrono::steady_clock;
  enum class Outcome { trained, skipped, nonfinite_stop, stopped_at };

  ModelHandle<Backend>& model() { return *model_; }

  // Never replaces a run silently; every rank must run the same binary, variant
  // and flags before rank 0 touches --out.
  void claim_out_dir() {
    namespace fs = std::filesystem;
    if (!lead_) o_.quiet = true;
    if (o_.out.empty()) o_.out = "runs/" + std::string(v_.name);
    ckpt_ = fs::path(o_.out) / "ckpt.safetensors";
    metrics_path_ = fs::path(o_.out) / "metrics.jsonl";
    summary_path_ = fs::path(o_.out) / "summary.json";
    if (o_.resume && o_.overwrite) throw Error("--resume and --overwrite contradict each other: pick one");
    dp_.emplace(comm_, o_);
    detail::check_ranks_agree(comm_, [&] { return detail::flags_fingerprint(o_, v_.name); });
    if (lead_ && !o_.resume && (fs::exists(ckpt_) || fs::exists(summary_path_))) {
      if (!o_.overwrite)
        throw Error("--out " + o_.out + " already holds a run (" +
                    (fs::exists(ckpt_) ? ckpt_ : summary_path_).string() +
                    "): pass --resume to continue it, or --overwrite to replace it");
      for (const fs::path& p : {ckpt_, summary_path_, metrics_path_}) fs::remove(p);
      fs::remove_all(fs::path(o_.out) / "snapshots");  // the replaced run's, not this one's
    }
    comm_.barrier();  // rank 0 has refused or cleared --out before any rank reads it
  }

  // The checkpoint is read once, here, and used again to load the model.
  void open_resumed_checkpoint() {
    if (!o_.resume) return;
    if (!std::filesystem::exists(ckpt_)) throw Error("--resume: no checkpoint at " + ckpt_.string());
    resumed_ = io::SafetensorsFile::open(ckpt_);
  }

  // Defaults the user did not set come from the checkpoint on resume: the warmup
  // (GPT's is steps/10, so a resume may grow --steps without changing it) and the
  // learning rates (whose defaults may have changed since the run started).
  void resolve_rates() {
    if (resumed_) {
      const io::SafetensorsFile& f = *resumed_;
      if (o_.warmup < 0 && f.metadata().count("run.warmup")) o_.warmup = checkpoint_int(f, "run.warmup");
      if (o_.lr == 0 && f.metadata().count("run.lr")) {
        o_.lr = checkpoint_double(f, "run.lr");
        lr_source_ = "the checkpoint's";
      }
      if (o_.min_lr < 0 && f.metadata().count("run.min_lr")) o_.min_lr = checkpoint_double(f, "run.min_lr");
    }
    if (o_.lr == 0) {
      o_.lr = v_.default_lr;
      lr_source_ = "the default for " + std::string(v_.name) + " (" + std::string(v_.default_lr_source) + ")";
    }
    if (o_.min_lr < 0) o_.min_lr = o_.lr / 10;
    if (o_.min_lr > o_.lr)
      throw Error("--min-lr " + exact_string(o_.min_lr) + " must not exceed --lr " + exact_string(o_.lr));
    v_.apply_defaults(o_);
  }

  // Data, model and optimizer, after the memory plan has accepted the run's size.
  void build() {
    detail::set_threads(o_);
    detail::set_precision<Backend>(o_);
    td_ = detail::load_training_data_in_turn(o_, comm_);
    const ModelConfig mc = detail::model_config(o_, td_.vocab_size, v_.configure);
    sampler_.emplace(td_.train, o_.batch, o_.seq, o_.seed, "train");
    // Before anything of the run's size is allocated (per rank: its share of the batch).
    memory_ = v_.plan_memory(mc, detail::per_rank(o_, *dp_));
    // Fail on a too-short validation split now, not at the first evaluation.
    idx_.assign(static_cast<std::size_t>(o_.batch * o_.seq), 0);
    tgt_.assign(idx_.size(), 0);
    data::eval_batch(td_.val, o_.batch, o_.seq, 0, idx_.data(), tgt_.data(), "val");
    sched_ = schedule_of(o_, o_.steps);
    oo_ = optimizer_options(o_);
    model_ = v_.make(mc, dp_->local_batch, o_.seq);
    opt_.emplace(detail::make_menu_optimizer(menu_, model(), oo_, *dp_, o_));
    if (const std::vector<std::string> unread = oo_.unread_extra(); !unread.empty()) {
      std::string asked;
      for (const std::string& k : *oo_.asked) asked += (asked.empty() ? "" : ", ") + k;
      throw Error("--opt " + unread.front() + ": optimizer '" + o_.optimizer + "' reads no such hyperparameter (" +
                  (asked.empty() ? std::string("it reads none through --opt") : "it reads: " + asked) + ")");
    }
    if (dp_->zero())
      memory_.optimizer =
          double(opt_->state().size()) * sizeof(float) * double(dp_->shard_end() - dp_->shard_begin());
  }

  // An unsharded optimizer of the same kind: ZeRO-1 loads into it and gathers into it.
  Opt make_whole() { return menu_.make(model().params(), oo_, 0, model().params().size()); }

  // What defines the run: a resume with other values is refused.
  void record_run_meta() {
    run_meta_ = {{"run.data", td_.description},  {"run.batch", std::to_string(o_.batch)},
                 {"run.seq", std::to_string(o_.seq)}, {"run.lr", exact_string(o_.lr)},
                 {"run.min_lr", exact_string(o_.min_lr)}, {"run.warmup", std::to_string(o_.warmup)},
                 {"run.weight_decay", exact_string(o_.weight_decay)}, {"run.grad_clip", exact_string(o_.grad_clip)},
                 {"run.accum", std::to_string(o_.accum)}, {"run.seed", std::to_string(o_.seed)},
                 {"run.steps", std::to_string(o_.steps)}, {"run.optimizer", o_.optimizer},
                 {"run.schedule", sched_.name()}};
    if (sched_.kind == LrSchedule::Kind::wsd) {
      run_meta_["run.decay_frac"] = exact_string(o_.decay_frac);
      run_meta_["run.decay_shape"] = sched_.decay_name();
    }
  }

  void start_fresh() {
    model().init(o_.seed);
    if (lead_) std::ofstream(metrics_path_, std::ios::trunc);
  }

  void resume(const io::SafetensorsFile& f) {
    load_state(f);  // names a checkpoint of another variant or shape first
    check_resumed_meta(f);
    start_ = checkpoint_int(f, "train.steps_done");
    if (start_ > o_.steps)
      throw Error(ckpt_.string() + ": the run is already " + std::to_string(start_) + " steps in, past --steps " +
                  std::to_string(o_.steps) + ": a run cannot be shortened below the steps it has taken");
    check_length_change(f);
    // Temporary files of checkpoint writes a kill interrupted: never read, safe to drop.
    if (lead_)
      for (const auto& e : std::filesystem::directory_iterator(o_.out))
        if (e.path().filename().string().rfind("ckpt.safetensors.tmp.", 0) == 0) std::filesystem::remove(e.path());
    sampler_->restore({checkpoint_uint(f, "train.sampler_seed"), checkpoint_uint(f, "train.sampler_batches")});
    if (lead_) before_ = detail::truncate_metrics(metrics_path_, start_);
    if (!o_.quiet) std::printf("resumed from %s at step %lld\n", ckpt_.c_str(), static_cast<long long>(start_));
  }

  // The parameters and the optimizer's state; under ZeRO-1 the whole state, then
  // this rank's piece of each state tensor (in the backend's memory).
  void load_state(const io::SafetensorsFile& f) {
    if (!dp_->zero()) {
      model().load(f, &*opt_);
      return;
    }
    Opt whole = make_whole();
    model().load(f, &whole);
    const auto piece = static_cast<std::int64_t>(dp_->shard_end() - dp_->shard_begin());
    const auto mine = opt_->state(), all = whole.state();
    for (std::size_t k = 0; k < mine.size(); ++k) Backend::copy(mine[k].data, all[k].data + dp_->shard_begin(), piece);
    Backend::synchronize();  // the copies (asynchronous on a GPU) are done before `whole` is freed
    opt_->set_steps_taken(whole.steps_taken());
  }

  void check_resumed_meta(const io::SafetensorsFile& f) const {
    // Written before normlab recorded them: those runs were AdamW with a cosine.
    const std::map<std::string, std::string> legacy_meta = {{"run.optimizer", "adamw"}, {"run.schedule", "cosine"}};
    auto check_meta = [&](const std::string& k, const std::string& v) {
      const std::string got = f.metadata().count(k)        ? f.metadata_value(k)
                              : legacy_meta.count(k) != 0 ? legacy_meta.at(k)
                                                          : "<none>";
      if (got != v)
        throw Error(ckpt_.string() + ": checkpoint has " + k.substr(4) + " = " + got + ", this run has " + v);
    };
    // The optimizer and the schedule first: they name what differs before their settings do.
    check_meta("run.optimizer", run_meta_.at("run.optimizer"));
    check_meta("run.schedule", run_meta_.at("run.schedule"));
    for (const auto& [k, v] : run_meta_)
      if (k != "run.steps") check_meta(k, v);  // a resume may extend the run
  }

  // A longer (or shorter) run must give the steps already taken the rates they
  // had: true of a constant rate and of a WSD run still in its stable phase; a
  // cosine's length changes its whole curve, which resuming has always allowed.
  void check_length_change(const io::SafetensorsFile& f) const {
    if (sched_.kind == LrSchedule::Kind::warmup_cosine || !f.metadata().count("run.steps")) return;
    const std::int64_t planned = checkpoint_int(f, "run.steps");
    const std::int64_t k = first_rate_difference(schedule_of(o_, planned), sched_, start_);
    if (k < 0) return;
    throw Error(ckpt_.string() + ": the run was planned for " + std::to_string(planned) + " steps and is " +
                std::to_string(start_) + " steps in; with --steps " + std::to_string(o_.steps) + " its " +
                sched_.name() + " schedule would have given step " + std::to_string(k + 1) +
                " another learning rate (" + exact_string(sched_.at(k)) + " instead of " +
                exact_string(schedule_of(o_, planned).at(k)) +
                "): a run may change its length only where the steps taken keep their rates (a WSD run: "
                "before its decay begins); resume with --steps " +
                std::to_string(planned));
  }

  // Where --snapshot-every keeps the checkpoint of step `done`.
  std::filesystem::path snapshot_path(std::int64_t done) const {
    return std::filesystem::path(o_.out) / "snapshots" / ("step" + std::to_string(done) + ".safetensors");
  }

  // The checkpoint, and a kept copy of it on a --snapshot-every step: the same
  // bytes as ckpt.safetensors when both fall on one step (copied, then renamed
  // into place, so a snapshot is never half written).
  void save_due(std::int64_t done, bool ckpt_now) {
    namespace fs = std::filesystem;
    const bool snap_now = o_.snapshot_every > 0 && done % o_.snapshot_every == 0;
    if (ckpt_now) save(done, ckpt_);
    if (!snap_now) return;
    if (!ckpt_now) return save(done, snapshot_path(done));
    if (!lead_) return;
    const fs::path dest = snapshot_path(done), tmp = fs::path(dest).concat(".tmp");
    fs::create_directories(dest.parent_path());
    fs::copy_file(ckpt_, tmp, fs::copy_options::overwrite_existing);
    fs::rename(tmp, dest);
  }

  void save(std::int64_t steps_done, const std::filesystem::path& path) {
    // The ranks compare the host copy of the parameters: bring it up to date first.
    if constexpr (!Backend::host_memory)
      if (dp_->distributed()) model().download_params();
    detail::check_parameters_agree(comm_, model().params(), steps_done);
    std::optional<Opt> whole;
    if (dp_->zero()) whole = dp_->gather_optimizer(*opt_, [&] { return make_whole(); });
    if (!lead_) return;
    auto meta = run_meta_;
    const data::SamplerState st = sampler_->state();
    meta["train.steps_done"] = std::to_string(steps_done);
    meta["train.sampler_seed"] = std::to_string(st.seed);
    meta["train.sampler_batches"] = std::to_string(st.batches_drawn);
    meta["train.tokens"] = std::to_string(steps_done * o_.batch * o_.seq * o_.accum);
    // Not a run.* key: a checkpoint holds float32 master weights, and a run may
    // resume in either precision; this says what the last stretch ran in.
    meta["train.precision"] = o_.precision;
    // Where the ids' text lives, for --sample (not run.*: moving the file
    // does not change the run).
    if (!td_.tokenizer.empty()) meta["data.tokenizer"] = td_.tokenizer;
    if (path != ckpt_) std::filesystem::create_directories(path.parent_path());
    model().save(path, whole ? &*whole : &*opt_, meta);
  }

  double evaluate() {
    double total = 0;
    for (std::int64_t i = 0; i < o_.eval_batches; ++i) {
      data::eval_batch(td_.val, o_.batch, o_.seq, i, idx_.data(), tgt_.data(), "val");
      total += model().forward(idx_.data() + dp_->row_offset, tgt_.data() + dp_->row_offset, dp_->local_batch, o_.seq);
    }
    return dp_->mean(total / double(o_.eval_batches));
  }

  void print_header() {
    std::printf("train-%s: %s | %zu parameters | d=%lld layers=%lld heads=%lld T=%lld batch=%lld accum=%lld | "
                "lr %g (min %g, warmup %lld) wd %g clip %g | %lld steps\n",
                std::string(v_.name).c_str(), td_.description.c_str(), model().params().size(), (long long)o_.d,
                (long long)o_.layers, (long long)o_.heads, (long long)o_.seq, (long long)o_.batch,
                (long long)o_.accum, o_.lr, o_.min_lr, (long long)o_.warmup, o_.weight_decay, o_.grad_clip,
                (long long)o_.steps);
    const char* wait = std::getenv("OMP_WAIT_POLICY");
    const char* spin = std::getenv("GOMP_SPINCOUNT");
    if constexpr (Backend::host_memory)
      std::printf("threads: %d (OpenMP; OMP_WAIT_POLICY=%s, GOMP_SPINCOUNT=%s)\n", cpu::max_threads(),
                  wait ? wait : "unset", spin ? spin : "unset");
    else
      std::printf("backend: %s (float32 parameters, gradients, moments and activations; the step runs on the "
                  "device, the host keeps the data and writes checkpoints)\n",
                  std::string(Backend::name).c_str());
    std::printf("precision: %s\n", detail::precision_engine<Backend>(o_).c_str());
    std::printf("learning rate: %g, %s; %s\n", o_.lr, lr_source_.c_str(), describe_schedule(sched_).c_str());
    std::string hp;
    for (const auto& [k, v] : opt_->hyperparameters()) hp += (hp.empty() ? "" : ", ") + k + " " + v;
    std::printf("optimizer: %s (%s)\n", std::string(opt_->kind()).c_str(), hp.c_str());
    std::printf("memory: %s planned%s (%s)\n", detail::gib(memory_.total()).c_str(),
                dp_->distributed() ? " per rank" : "", memory_.breakdown().c_str());
    print_parallel_layout();
    if (std::isfinite(td_.entropy_floor_nats))
      std::printf("data: entropy floor %.4f nats/token (the lowest loss any model can reach)\n",
                  td_.entropy_floor_nats);
  }

  void print_parallel_layout() {
    if (dp_->distributed())
      std::printf("data parallel: %d ranks, %lld of the %lld sequences of each micro-batch per rank; gradients "
                  "%s in buckets during backward\n",
                  comm_.size(), (long long)dp_->local_batch, (long long)o_.batch,
                  dp_->zero() ? "reduce-scattered to their shard's owner" : "all-reduced");
    if (!dp_->zero()) return;
    std::string per;
    for (int r = 0; r < comm_.size(); ++r)
      per += (r ? ", " : "") + std::string("rank ") + std::to_string(r) + " " +
             detail::gib(4.0 * double(opt_->state().size()) *
                         double(dp_->shards[std::size_t(r) + 1] - dp_->shards[std::size_t(r)]));
    std::printf("ZeRO-1: %s's state sharded by whole tensors: %s (unsharded %s each)\n",
                std::string(opt_->kind()).c_str(), per.c_str(),
                detail::gib(4.0 * double(opt_->state().size()) * double(model().params().size())).c_str());
  }

  std::int64_t tokens_per_step() const { return o_.batch * o_.seq * o_.accum; }

  // One optimizer step: gradients, the update, its metrics line, the progress
  // line, a validation and a checkpoint when due.
  Outcome train_step(std::int64_t step) {
    const auto ts = clock::now();
    const double lr = sched_.at(step);
    const double loss =
        detail::accumulate_gradients(model(), *sampler_, o_, idx_, tgt_, *dp_, o_.fault_nan_at == step + 1);
    const double gnorm = dp_->grad_norm(model());
    const std::int64_t done = step + 1;
    if (!std::isfinite(loss) || !std::isfinite(gnorm)) return on_nonfinite(loss, done);
    dp_->update(model(), *opt_, o_.grad_clip, gnorm, lr);
    Backend::synchronize();  // the step's kernels are done before its time is taken
    const double dt = std::chrono::duration<double>(clock::now() - ts).count();
    step_time_sum_ += dt;
    const double elapsed = before_.elapsed_s + std::chrono::duration<double>(clock::now() - t0_).count();
    nlohmann::json line = {{"step", done},     {"tokens", done * tokens_per_step()},
                           {"train_loss", loss}, {"lr", lr},
                           {"grad_norm", gnorm}, {"step_time_s", dt},
                           {"tokens_per_s", double(tokens_per_step()) / dt}, {"elapsed_s", elapsed}};
    if (dp_->distributed()) {
      line["ranks"] = comm_.size();
      line["comm_exposed_s"] = dp_->exposed_s;  // all-reduce time not hidden behind backward
    }
    const bool eval_now = (o_.eval_every > 0 && done % o_.eval_every == 0) || done == o_.steps;
    if (eval_now) line["val_loss"] = last_val_ = evaluate();
    if (lead_) metrics_ << line.dump() << '\n' << std::flush;
    print_progress(done, loss, dt, eval_now);
    const bool stop_now = o_.stop_at > 0 && done == o_.stop_at;
    save_due(done, (o_.ckpt_every > 0 && done % o_.ckpt_every == 0) || done == o_.steps || stop_now);
    if (!stop_now) return Outcome::trained;
    if (!o_.quiet) std::printf("stopped after step %lld (--stop-at); resume with --resume\n", (long long)done);
    return Outcome::stopped_at;
  }

  Outcome on_nonfinite(double loss, std::int64_t done) {
    const std::string what = std::string("non-finite ") + (std::isfinite(loss) ? "gradient norm" : "loss") +
                             " at step " + std::to_string(done);
    if (lead_) metrics_ << nlohmann::json{{"step", done}, {"event", what}}.dump() << '\n' << std::flush;
    if (o_.on_nonfinite == "skip") {
      if (lead_) std::fprintf(stderr, "\n%s: update skipped (--on-nonfinite skip)\n", what.c_str());
      return Outcome::skipped;
    }
    if (lead_)
      std::fprintf(stderr, "\n%s: stopping; the last good checkpoint is kept at %s\n", what.c_str(), ckpt_.c_str());
    return Outcome::nonfinite_stop;
  }

  void print_progress(std::int64_t done, double loss, double dt, bool eval_now) {
    const double eta = step_time_sum_ / double(done - start_) * double(o_.steps - done);
    if (tty_ && !o_.quiet) {
      std::printf("\r[%lld/%lld] loss %.4f  val %s  %.0f tok/s  ETA %s   ", (long long)done, (long long)o_.steps,
                  loss, std::isfinite(last_val_) ? detail::fmt(last_val_).c_str() : "-",
                  double(tokens_per_step()) / dt, detail::duration(eta).c_str());
      if (eval_now) std::printf("\n");
      std::fflush(stdout);
    } else if (!o_.quiet && (eval_now || done % std::max<std::int64_t>(1, o_.steps / 20) == 0)) {
      std::printf("step %lld/%lld  loss %.4f%s  %.0f tok/s  ETA %s\n", (long long)done, (long long)o_.steps, loss,
                  eval_now ? ("  val " + detail::fmt(last_val_)).c_str() : "", double(tokens_per_step()) / dt,
                  detail::duration(eta).c_str());
      std::fflush(stdout);  // a pipe (normlab-ablate, a log) sees progress as it happens
    }
  }

  void write_summary() {
    const double total = before_.elapsed_s + std::chrono::duration<double>(clock::now() - t0_).count();
    const std::int64_t ran = o_.steps;  // every step of the run, this session's and earlier ones'
    step_time_sum_ += before_.step_time_s;
    nlohmann::json summary = {{"variant", std::string(v_.name)},
                              {"seed", o_.seed},
                              {"steps", o_.steps},
                              {"lr", o_.lr},
                              {"min_lr", o_.min_lr},
                              {"tokens", o_.steps * tokens_per_step()},
                              {"final_val_loss", last_val_},
                              {"mean_step_time_s", ran > 0 ? step_time_sum_ / double(ran) : 0.0},
                              {"total_time_s", total},
                              {"params", model().params().size()},
                              {"data", td_.description}};
    summary["entropy_floor_nats"] =
        std::isfinite(td_.entropy_floor_nats) ? nlohmann::json(td_.entropy_floor_nats) : nlohmann::json(nullptr);
    nlohmann::json hp = nlohmann::json::object();
    for (const auto& [k, v] : opt_->hyperparameters()) hp[k] = v;
    summary["optimizer"] = {{"name", std::string(opt_->kind())}, {"hyperparameters", hp}};
    summary["schedule"] = {{"name", sched_.name()}, {"warmup", o_.warmup}, {"min_lr", o_.min_lr}};
    if (sched_.kind == LrSchedule::Kind::wsd) {
      summary["schedule"]["decay_frac"] = o_.decay_frac;
      summary["schedule"]["decay_shape"] = sched_.decay_name();
    }
    summary["precision"] = {{"name", o_.precision}, {"engine", detail::precision_engine<Backend>(o_)}};
    if (dp_->distributed()) summary["ranks"] = comm_.size();
    if (lead_) detail::write_text_atomically(summary_path_, summary.dump(2) + "\n");
    if (!o_.quiet)
      std::printf("done: %lld steps, final val loss %.4f, %.1f s; checkpoint %s\n", (long long)o_.steps, last_val_,
                  total, ckpt_.c_str());
  }

  TrainOptions o_;
  Comm& comm_;
  const VariantEntry<Backend>& v_;
  const OptimizerMenu<Backend>& menu_;
  const bool lead_;
  std::filesystem::path ckpt_, metrics_path_, summary_path_;
  std::optional<detail::DataParallel<Comm>> dp_;
  std::optional<io::SafetensorsFile> resumed_;
  std::string lr_source_ = "--lr";
  data::TokenData td_;
  std::optional<data::BatchSampler> sampler_;
  RunMemory memory_;
  std::vector<std::int64_t> idx_, tgt_;
  LrSchedule sched_;
  OptimizerOptions oo_;
  std::unique_ptr<ModelHandle<Backend>> model_;
  std::optional<Opt> opt_;
  std::map<std::string, std::string> run_meta_;
  std::int64_t start_ = 0;
  detail::TimeSpent before_;  // earlier sessions of this run (resume)
  std::ofstream metrics_;
  const bool tty_ = isatty(fileno(stdout));  // and not --quiet: a live progress line
  clock::time_point t0_;
  double step_time_sum_ = 0, last_val_ = std::nan("");
};

template <class Comm, class Backend>
int run_training_with(TrainOptions o, Comm& comm, const VariantEntry<Backend>& v, const OptimizerMenu<Backend>& menu) {
  return TrainingRun<Comm, Backend>(std::move(o), comm, v, menu).run();
}

}  // namespace detail
}  // namespace normlab
