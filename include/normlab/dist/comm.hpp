#pragma once
// A communicator: what data-parallel training needs from a process group
// (launch, rendezvous and collectives belong to an engine such as MPI; normlab
// writes none of it). A type is chosen at compile time beside the backend:
// `SingleProcess` (this header, no dependency), `MpiComm` (dist/mpi.hpp) or, for
// a model in a GPU's memory, `NcclComm<Host>` (dist/cuda/nccl.hpp).
//
// Every collective is called by every rank in the same order with the same
// sizes; a nonblocking one returns a Request that `progress`/`wait_all` complete.
// The buffers of the array collectives are the backend's memory: host arrays for
// MPI, device arrays for NCCL (`reduces_memory_of`, below, says which pairs fit).
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

namespace normlab::dist {

template <class C>
concept Communicator = requires(C& c, const C& cc, float* f, double* d, std::size_t n, int code,
                                std::vector<typename C::Request>& reqs, const std::string& s,
                                const std::vector<std::size_t>& shards) {
  { cc.rank() } -> std::convertible_to<int>;
  { cc.size() } -> std::convertible_to<int>;
  { c.barrier() };
  { c.allreduce_sum(1.0) } -> std::convertible_to<double>;
  { c.start_allreduce_sum(f, n) } -> std::same_as<typename C::Request>;
  { c.start_allreduce_sum(d, n) } -> std::same_as<typename C::Request>;
  { c.progress(reqs) };
  { c.wait_all(reqs) };
  { c.start_reduce_sum(f, n, code) } -> std::same_as<typename C::Request>;
  { c.start_reduce_sum(d, n, code) } -> std::same_as<typename C::Request>;
  { c.allgather_shards(f, shards) };
  { c.allgather_shards(d, shards) };
  { c.gather_shards(f, f, shards) };
  { c.gather_shards(d, d, shards) };
  { c.gather_strings(s) } -> std::same_as<std::vector<std::string>>;
  { c.broadcast_int(code) } -> std::convertible_to<int>;
  { c.abort(code) };
};

// The number of processes a launcher started in this job, from the environment
// (Open MPI's mpirun, MPICH/hydra's PMI); 1 when none did.
inline int launcher_world_size() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* s = std::getenv(v)) {
      const int n = std::atoi(s);
      if (n > 0) return n;
    }
  return 1;
}

// One process: every collective is the identity. The default of every trainer
// built without MPI, and of an MPI build started without a launcher.
struct SingleProcess {
  struct Request {};
  int rank() const { return 0; }
  int size() const { return 1; }
  void barrier() {}
  double allreduce_sum(double x) { return x; }
  template <class T>
  Request start_allreduce_sum(T*, std::size_t) { return {}; }
  template <class T>
  Request start_reduce_sum(T*, std::size_t, int) { return {}; }
  void progress(std::vector<Request>&) {}
  void wait_all(std::vector<Request>& r) { r.clear(); }
  // Sharded buffers (ZeRO-1): rank r owns [shards[r], shards[r+1]) of a buffer.
  // allgather_shards: every rank's own piece to every rank, in place.
  template <class T>
  void allgather_shards(T*, const std::vector<std::size_t>&) {}
  // gather_shards: this rank's piece (`mine`, shards[r+1] - shards[r] values)
  // into `whole` on rank 0.
  template <class T>
  void gather_shards(const T* mine, T* whole, const std::vector<std::size_t>& shards) {
    std::copy(mine, mine + (shards[1] - shards[0]), whole + shards[0]);
  }
  // Every rank's string, in rank order, on rank 0 (empty elsewhere).
  std::vector<std::string> gather_strings(const std::string& s) { return {s}; }
  int broadcast_int(int x) { return x; }  // rank 0's value on every rank
  void broadcast_bytes(void*, std::size_t) {}  // rank 0's bytes on every rank (NCCL's id)
  [[noreturn]] void abort(int code) { std::exit(code); }
};
static_assert(Communicator<SingleProcess>);

// Whether a backend keeps its arrays where the host cannot address them (a
// GPU's memory): it says so with `static constexpr bool device_memory = true`.
template <class Backend>
constexpr bool in_device_memory() {
  if constexpr (requires { Backend::device_memory; }) return bool(Backend::device_memory);
  else return false;
}
// Whether a communicator's collectives take that memory: one that works on
// device arrays says so with `static constexpr bool device_buffers = true`
// (NcclComm); the others (MpiComm) take host arrays. SingleProcess moves
// nothing, so it fits every backend.
template <class Comm>
constexpr bool takes_device_buffers() {
  if constexpr (requires { Comm::device_buffers; }) return bool(Comm::device_buffers);
  else return false;
}
template <class Comm, class Backend>
inline constexpr bool reduces_memory_of =
    std::is_same_v<Comm, SingleProcess> || takes_device_buffers<Comm>() == in_device_memory<Backend>();

}  // namespace normlab::dist
