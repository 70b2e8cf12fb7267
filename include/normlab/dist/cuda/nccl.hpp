#pragma once
// NcclComm<Host>: the Communicator of a model in a GPU's memory (cuda_backend).
// NCCL sums, reduces and gathers the gradients, parameters and moments where they
// are, in device memory; the host communicator `Host` launches the ranks,
// exchanges NCCL's unique id and carries the host-side collectives (the loss,
// fingerprints, errors): MpiComm under mpirun/srun (the way llm.c bootstraps
// NCCL), or SingleProcess for one rank without MPI. Include only in a build that
// links NCCL (CMake: -DNORMLAB_NCCL=ON; the trainers define NORMLAB_HAVE_NCCL).
//
// Streams. The model's kernels run on cuda::current()'s stream ("compute"). A
// gradient bucket started while backward runs goes on a second stream that first
// waits for everything compute had been given until then (an event), so the
// all-reduce runs beside the rest of backward; wait_all makes compute wait for
// the buckets. `settle()` (called by GradientSync before it starts its clock)
// waits for backward's kernels, so the time GradientSync reports is the
// communication left after backward: the exposed part. The blocking collectives
// (ZeRO-1's parameter all-gather, the moments' gather) are enqueued on compute.
//
// Devices. With more than one rank on a node each takes the GPU of its local
// rank (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID; else its
// rank) modulo the devices it sees, and makes it cuda::current(). NCCL itself
// starts at the first collective (every rank calls the same ones in the same
// order), so a machine without a GPU still reaches the trainer's own sentence.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "normlab/backend/cuda/device_context.hpp"
#include "normlab/core/error.hpp"
#include "normlab/dist/comm.hpp"

namespace normlab::dist {

template <class T>
ncclDataType_t nccl_type() {
  if constexpr (std::is_same_v<T, float>) return ncclFloat32;
  else if constexpr (std::is_same_v<T, double>) return ncclFloat64;
  else static_assert(sizeof(T) == 0, "NcclComm: float or double buffers only");
}

// This process's rank among the ranks of its node, from the launcher; -1 if none says.
inline int launcher_local_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "PMI_LOCAL_RANK"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return -1;
}
// The number of ranks on this node, from the launcher; 0 if none says.
inline int launcher_local_size() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return 0;
}

template <class Host>
class NcclComm {
 public:
  static constexpr bool device_buffers = true;  // dist::reduces_memory_of
  struct Request {
    cudaEvent_t done = nullptr;  // recorded on the side stream after the collective
  };

  NcclComm(int* argc, char*** argv)
    requires std::is_constructible_v<Host, int*, char***>
      : host_(argc, argv) {
    choose_device();
  }
  NcclComm()
    requires std::is_default_constructible_v<Host>
  {
    choose_device();
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ~NcclComm() {  // no throw: statuses ignored
    if (comm_) ncclCommDestroy(comm_);
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    if (ready_) cudaEventDestroy(ready_);
    if (side_) cudaStreamDestroy(side_);
  }

  int rank() const { return host_.rank(); }
  int size() const { return host_.size(); }
  Host& host() { return host_; }
  // The device this rank computes on (cuda::current()'s), chosen at construction.
  int device() const { return device_; }

  // Host-side collectives: the host communicator's.
  void barrier() { host_.barrier(); }
  double allreduce_sum(double x) { return host_.allreduce_sum(x); }
  std::vector<std::string> gather_strings(const std::string& s) { return host_.gather_strings(s); }
  int broadcast_int(int x) { return host_.broadcast_int(x); }
  [[noreturn]] void abort(int code) { host_.abort(code); }

  // buf[0, n) (device memory) summed over the ranks in place, beside the compute stream.
  template <class T>
  Request start_allreduce_sum(T* buf, std::size_t n) {
    return on_side_stream(n, [&](cudaStream_t s) {
      return with_sum_op<T>([&](ncclRedOp_t op) { return ncclAllReduce(buf, buf, n, nccl_type<T>(), op, comm_, s); });
    });
  }
  // buf[0, n) summed over the ranks into rank `root`'s buf (elsewhere only read).
  template <class T>
  Request start_reduce_sum(T* buf, std::size_t n, int root) {
    return on_side_stream(n, [&](cudaStream_t s) {
      return with_sum_op<T>(
          [&](ncclRedOp_t op) { return ncclReduce(buf, buf, n, nccl_type<T>(), op, root, comm_, s); });
    });
  }
  // Each rank's contribution multiplied by f inside the two reductions above
  // (NCCL's PreMulSum): f = 1/ranks gives the mean in one pass. The trainers keep
  // f = 1, a plain sum followed by the driver's scale, as over MPI, so the two
  // communicators compute the same arithmetic. test_cuda_nccl sets f = 2: on one
  // rank a plain in-place sum is no operation at all inside NCCL, a PreMulSum
  // reads and writes the buffer, so the test sees whether the reduction ran
  // after the kernels that wrote it and before those that read it.
  void set_premultiply(double f) { premultiply_ = f; }
  // NCCL advances its collectives on the GPU: nothing for the host to do.
  void progress(std::vector<Request>&) {}
  // Compute waits for the buckets; the host waits for them too (so the caller's
  // clock sees the communication that was not hidden).
  void wait_all(std::vector<Request>& reqs) {
    cudaStream_t compute = cuda::current().stream();
    for (const Request& r : reqs)
      if (r.done) NORMLAB_CUDA_CHECK(cudaStreamWaitEvent(compute, r.done, 0));
    for (const Request& r : reqs)
      if (r.done) {
        NORMLAB_CUDA_CHECK(cudaEventSynchronize(r.done));
        free_events_.push_back(r.done);
      }
    reqs.clear();
  }
  // Backward's kernels are done (GradientSync, before it times wait_all).
  void settle() { cuda::current().synchronize(); }

  // ZeRO-1: every rank's piece [shards[r], shards[r+1]) of buf to every rank, in
  // place: one broadcast per owner in one NCCL group (the pieces differ in size,
  // which ncclAllGather does not allow). On the compute stream.
  template <class T>
  void allgather_shards(T* buf, const std::vector<std::size_t>& shards) {
    check_layout(shards);
    ensure_started();
    cudaStream_t compute = cuda::current().stream();
    in_group([&] {
      for (int r = 0; r < size(); ++r) {
        const std::size_t a = shards[std::size_t(r)], count = shards[std::size_t(r) + 1] - a;
        if (count > 0)
          check(ncclBroadcast(buf + a, buf + a, count, nccl_type<T>(), r, comm_, compute), "ncclBroadcast");
      }
    });
  }
  // This rank's piece `mine` into `whole` (device memory, rank 0 only). On the compute stream.
  template <class T>
  void gather_shards(const T* mine, T* whole, const std::vector<std::size_t>& shards) {
    check_layout(shards);
    ensure_started();
    cudaStream_t compute = cuda::current().stream();
    auto count = [&](int r) { return shards[std::size_t(r) + 1] - shards[std::size_t(r)]; };
    if (rank() == 0 && count(0) > 0)
      NORMLAB_CUDA_CHECK(cudaMemcpyAsync(whole + shards[0], mine, count(0) * sizeof(T), cudaMemcpyDeviceToDevice,
                                         compute));
    in_group([&] {
      if (rank() == 0) {
        for (int r = 1; r < size(); ++r)
          if (count(r) > 0)
            check(ncclRecv(whole + shards[std::size_t(r)], count(r), nccl_type<T>(), r, comm_, compute), "ncclRecv");
      } else if (count(rank()) > 0) {
        check(ncclSend(mine, count(rank()), nccl_type<T>(), 0, comm_, compute), "ncclSend");
      }
    });
  }

 private:
  void choose_device() {
    if (size() == 1) return;  // cuda::current()'s default, device 0
    const int devices = cuda::device_count();
    if (devices == 0) return;  // the trainer's require_device() says why
    // Two ranks on one GPU would fail inside NCCL's first collective ("duplicate GPU").
    if (const int per_node = launcher_local_size(); per_node > devices)
      throw Error(std::to_string(per_node) + " ranks on this node but " + std::to_string(devices) +
                  " GPU(s) visible: start at most " + std::to_string(devices) + " ranks per node (one GPU each)");
    const int local = launcher_local_rank();
    device_ = (local >= 0 ? local : rank()) % devices;
    static cuda::DeviceContext* mine = new cuda::DeviceContext(device_);  // never destroyed, as cuda::current()'s
    cuda::use(*mine);
  }
  // The NCCL communicator and the side stream, at the first collective.
  void ensure_started() {
    if (comm_) return;
    cuda::current();  // the device is set (cuda::DeviceContext's constructor) before NCCL binds to it
    ncclUniqueId id{};
    if (rank() == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    host_.broadcast_bytes(&id, sizeof id);
    check(ncclCommInitRank(&comm_, size(), id, rank()), "ncclCommInitRank");
    NORMLAB_CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
    NORMLAB_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  }
  template <class Launch>
  Request on_side_stream(std::size_t n, Launch&& launch) {
    if (n == 0) return {};
    ensure_started();
    // Everything compute was given so far (the gradients of this bucket) comes first.
    NORMLAB_CUDA_CHECK(cudaEventRecord(ready_, cuda::current().stream()));
    NORMLAB_CUDA_CHECK(cudaStreamWaitEvent(side_, ready_, 0));
    check(launch(side_), "NCCL collective");
    Request r{take_event()};
    NORMLAB_CUDA_CHECK(cudaEventRecord(r.done, side_));
    return r;
  }
  // A group of NCCL calls, closed even when one of them fails.
  template <class Calls>
  void in_group(Calls&& calls) {
    check(ncclGroupStart(), "ncclGroupStart");
    try {
      calls();
    } catch (...) {
      ncclGroupEnd();
      throw;
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
  }
  // ncclSum, or a PreMulSum by premultiply_ (created for the call: NCCL allows
  // destroying it once the call that uses it has returned).
  template <class T, class Call>
  ncclResult_t with_sum_op(Call&& call) {
    if (premultiply_ == 1.0) return call(ncclSum);
    T f = T(premultiply_);
    ncclRedOp_t op{};
    check(ncclRedOpCreatePreMulSum(&op, &f, nccl_type<T>(), ncclScalarHostImmediate, comm_),
          "ncclRedOpCreatePreMulSum");
    const ncclResult_t r = call(op);
    ncclRedOpDestroy(op, comm_);
    return r;
  }
  // Events are reused (grow-only), so a step creates none after the first.
  cudaEvent_t take_event() {
    if (free_events_.empty()) {
      cudaEvent_t e = nullptr;
      NORMLAB_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      return e;
    }
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  void check_layout(const std::vector<std::size_t>& shards) const {
    if (shards.size() != std::size_t(size()) + 1)
      throw Error("NcclComm: " + std::to_string(shards.size()) + " shard bounds for " + std::to_string(size()) +
                  " ranks");
  }
  void check(ncclResult_t r, const char* what) const {
    if (r == ncclSuccess) return;
    std::string detail = ncclGetErrorString(r);
    if (comm_)
      if (const char* last = ncclGetLastError(comm_); last && *last) detail += "; " + std::string(last);
    throw Error(std::string(what) + " failed (rank " + std::to_string(rank()) + " of " + std::to_string(size()) +
                "): " + detail);
  }

  Host host_;
  int device_ = 0;
  double premultiply_ = 1.0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t side_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  std::vector<cudaEvent_t> free_events_;
};
static_assert(Communicator<NcclComm<SingleProcess>>);

}  // namespace normlab::dist
