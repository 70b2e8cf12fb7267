#pragma once
// Data parallelism as the driver sees it: each rank's rows of the global batch,
// the gradient reduction and (ZeRO-1) the optimizer's shards; the optimizers built
// over them, and the accumulation of a step's micro-batches.

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "normlab/core/error.hpp"
#include "normlab/dist/comm.hpp"
#include "normlab/dist/grad_sync.hpp"
#include "normlab/optim/adamw.hpp"
#include "normlab/optim/any_optimizer.hpp"
#include "normlab/train/data.hpp"
#include "normlab/app/driver_core.hpp"
#include "normlab/app/model_handle.hpp"
#include "normlab/app/run_options.hpp"
#include "normlab/app/run_support.hpp"

namespace normlab {
namespace detail {

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

}  // namespace detail
}  // namespace normlab
