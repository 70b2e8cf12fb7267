#pragma once
// GradientSync: sums a flat gradient buffer over the ranks of a Communicator in
// buckets that start while backward is still running. Backward reports, as it
// goes down the layers, the offset from which the gradients are final
// (`ready(from)`: grads[from, n) will not change); each report that completes a
// bucket of at least `min_bucket` values starts a nonblocking all-reduce of it,
// and every report lets MPI progress the reductions already in flight. `finish`
// waits for the rest and returns the time it waited: the communication that was
// not hidden behind backward ("exposed").
//
// With `shards` (ZeRO-1: rank r owns [shards[r], shards[r+1])), each bucket is
// reduced to the owners of its pieces instead of to everyone: a reduce-scatter
// in the order backward produces the gradients; only the owner's piece holds the
// sum afterwards.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

#include "normlab/core/error.hpp"
#include "normlab/dist/comm.hpp"

namespace normlab::dist {

template <class T, Communicator Comm>
class GradientSync {
 public:
  // 256 Ki values (1 MiB of float32): large enough that a reduction's latency is
  // paid a few times a step, small enough that the last layers' buckets start
  // while the lower layers still run backward.
  static constexpr std::size_t kDefaultMinBucket = std::size_t(1) << 18;

  GradientSync(Comm& comm, std::size_t n, const std::vector<std::size_t>* shards = nullptr,
               std::size_t min_bucket = kDefaultMinBucket)
      : comm_(comm), n_(n), min_bucket_(min_bucket), shards_(shards) {
    if (shards && (shards->size() != std::size_t(comm.size()) + 1 || shards->back() != n))
      throw Error("GradientSync: shard bounds do not cover the " + std::to_string(n) + " gradients over " +
                  std::to_string(comm.size()) + " ranks");
  }

  // Before the backward whose gradients are final (the last micro-batch).
  void begin(T* grads) {
    if (!reqs_.empty()) throw Error("GradientSync::begin: the previous step's reductions were not finished");
    grads_ = grads;
    pending_end_ = n_;
    buckets_ = 0;
  }
  // grads[from, n) are final.
  void ready(std::size_t from) {
    if (!grads_) throw Error("GradientSync::ready before begin");
    if (from > pending_end_) throw Error("GradientSync::ready: offsets must decrease as backward goes down");
    if (pending_end_ - from >= min_bucket_ || (from == 0 && pending_end_ > 0)) {
      if (!shards_) {
        reqs_.push_back(comm_.start_allreduce_sum(grads_ + from, pending_end_ - from));
      } else {
        for (int r = 0; r < comm_.size(); ++r) {
          const std::size_t a = std::max(from, (*shards_)[std::size_t(r)]);
          const std::size_t b = std::min(pending_end_, (*shards_)[std::size_t(r) + 1]);
          if (a < b) reqs_.push_back(comm_.start_reduce_sum(grads_ + a, b - a, r));
        }
      }
      pending_end_ = from;
      ++buckets_;
    }
    comm_.progress(reqs_);
  }
  // Every gradient summed over the ranks; returns the seconds spent waiting.
  double finish() {
    if (!grads_) throw Error("GradientSync::finish before begin");
    if (pending_end_ > 0) ready(0);
    // A communicator whose compute runs asynchronously (NCCL beside a GPU's
    // stream) first waits for backward itself, so the time below is only the
    // communication's.
    if constexpr (requires { comm_.settle(); }) comm_.settle();
    const auto t0 = std::chrono::steady_clock::now();
    comm_.wait_all(reqs_);
    grads_ = nullptr;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  int buckets() const { return buckets_; }

 private:
  Comm& comm_;
  std::size_t n_, min_bucket_;
  const std::vector<std::size_t>* shards_;
  T* grads_ = nullptr;
  std::size_t pending_end_ = 0;
  int buckets_ = 0;
  std::vector<typename Comm::Request> reqs_;
};

}  // namespace normlab::dist
