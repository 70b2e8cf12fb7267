#pragma once
// MpiComm: the Communicator over MPI_COMM_WORLD (launch by mpirun / srun,
// rendezvous and collectives are MPI's). Include only in a build that links MPI
// (CMake: MPI::MPI_CXX; normlab's trainers define NORMLAB_HAVE_MPI).
//
// A process that no launcher started (no OMPI_COMM_WORLD_SIZE, PMIX_RANK or
// PMI_RANK in its environment) does not initialise MPI at all and is a group of
// one: `train-gpt` alone behaves exactly as a build without MPI.
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <type_traits>
#include <string>
#include <vector>

#include "normlab/core/error.hpp"
#include "normlab/dist/comm.hpp"

namespace normlab::dist {

// Whether an MPI launcher started this process (Open MPI's mpirun, PMIx or PMI-2:
// mpirun, srun --mpi=pmix, hydra).
inline bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

template <class T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else static_assert(sizeof(T) == 0, "MpiComm: float or double buffers only");
}

class MpiComm {
 public:
  using Request = MPI_Request;

  MpiComm(int* argc, char*** argv) {
    if (!launched_by_mpi()) return;
    int provided = 0;
    // Only the main thread calls MPI (OpenMP regions never do).
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
      throw Error("MPI_Init_thread failed (launched by mpirun/srun, but MPI could not start)");
    active_ = true;
    if (provided < MPI_THREAD_FUNNELED)
      throw Error("MPI gives thread level " + std::to_string(provided) +
                  ", below MPI_THREAD_FUNNELED (OpenMP threads beside the main thread's MPI calls)");
    // Errors are returned, not fatal, so they surface as normlab::Error with a sentence.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;
  ~MpiComm() {
    if (active_) MPI_Finalize();
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool active() const { return active_; }

  void barrier() {
    if (active_) check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  }
  double allreduce_sum(double x) {
    if (!active_) return x;
    double out = 0;
    check(MPI_Allreduce(&x, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
    return out;
  }
  // Sums buf[0, n) over the ranks in place, without blocking: the reduction
  // proceeds while the caller computes (progressed by `progress` and `wait_all`).
  template <class T>
  Request start_allreduce_sum(T* buf, std::size_t n) {
    Request r = MPI_REQUEST_NULL;
    if (!active_ || n == 0) return r;
    check(MPI_Iallreduce(MPI_IN_PLACE, buf, checked_count(n), mpi_type<T>(), MPI_SUM, MPI_COMM_WORLD, &r),
          "MPI_Iallreduce");
    return r;
  }
  // Sums buf[0, n) over the ranks into rank `root`'s buf, without blocking
  // (the other ranks' buf is only read).
  template <class T>
  Request start_reduce_sum(T* buf, std::size_t n, int root) {
    Request r = MPI_REQUEST_NULL;
    if (!active_ || n == 0) return r;
    const int count = checked_count(n);
    // The root sums in place; elsewhere buf is only sent (the receive buffer is not used).
    const void* send = rank_ == root ? MPI_IN_PLACE : static_cast<const void*>(buf);
    void* recv = rank_ == root ? static_cast<void*>(buf) : nullptr;
    check(MPI_Ireduce(send, recv, count, mpi_type<T>(), MPI_SUM, root, MPI_COMM_WORLD, &r), "MPI_Ireduce");
    return r;
  }
  template <class T>
  void allgather_shards(T* buf, const std::vector<std::size_t>& shards) {
    if (!active_) return;
    std::vector<int> counts, displs;
    layout(shards, counts, displs);
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts.data(), displs.data(), mpi_type<T>(),
                         MPI_COMM_WORLD),
          "MPI_Allgatherv");
  }
  template <class T>
  void gather_shards(const T* mine, T* whole, const std::vector<std::size_t>& shards) {
    if (!active_) {
      std::copy(mine, mine + (shards[1] - shards[0]), whole + shards[0]);
      return;
    }
    std::vector<int> counts, displs;
    layout(shards, counts, displs);
    check(MPI_Gatherv(mine, counts[std::size_t(rank_)], mpi_type<T>(), whole, counts.data(), displs.data(),
                      mpi_type<T>(), 0, MPI_COMM_WORLD),
          "MPI_Gatherv");
  }
  // Lets MPI advance outstanding reductions (Open MPI has no progress thread by default).
  void progress(std::vector<Request>& reqs) {
    if (reqs.empty()) return;
    int done = 0;
    check(MPI_Testall(int(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
  }
  void wait_all(std::vector<Request>& reqs) {
    if (!reqs.empty()) check(MPI_Waitall(int(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    reqs.clear();
  }
  std::vector<std::string> gather_strings(const std::string& s) {
    if (!active_) return {s};
    int len = int(s.size());
    std::vector<int> lens(std::size_t(size_), 0), displs(std::size_t(size_), 0);
    check(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather");
    std::string all;
    if (rank_ == 0) {
      int total = 0;
      for (int r = 0; r < size_; ++r) displs[r] = total, total += lens[r];
      all.resize(std::size_t(total));
    }
    check(MPI_Gatherv(s.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, MPI_COMM_WORLD),
          "MPI_Gatherv");
    std::vector<std::string> out;
    if (rank_ == 0)
      for (int r = 0; r < size_; ++r) out.push_back(all.substr(std::size_t(displs[r]), std::size_t(lens[r])));
    return out;
  }
  int broadcast_int(int x) {
    if (active_) check(MPI_Bcast(&x, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast");
    return x;
  }
  void broadcast_bytes(void* p, std::size_t n) {
    if (active_) check(MPI_Bcast(p, checked_count(n), MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
  }
  // Ends every rank of the job with `code` (mpirun exits with it).
  [[noreturn]] void abort(int code) {
    if (active_) MPI_Abort(MPI_COMM_WORLD, code);
    std::exit(code);
  }

 private:
  static int checked_count(std::size_t n) {
    if (n > std::size_t(std::numeric_limits<int>::max()))
      throw Error("MpiComm: " + std::to_string(n) + " values in one collective exceed MPI's int count");
    return int(n);
  }
  void layout(const std::vector<std::size_t>& shards, std::vector<int>& counts, std::vector<int>& displs) const {
    if (shards.size() != std::size_t(size_) + 1)
      throw Error("MpiComm: " + std::to_string(shards.size()) + " shard bounds for " + std::to_string(size_) + " ranks");
    checked_count(shards.back());
    for (int r = 0; r < size_; ++r) {
      counts.push_back(int(shards[std::size_t(r) + 1] - shards[std::size_t(r)]));
      displs.push_back(int(shards[std::size_t(r)]));
    }
  }
  static void check(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    throw Error(std::string(what) + " failed: " + std::string(msg, std::size_t(len)));
  }
  bool active_ = false;
  int rank_ = 0, size_ = 1;
};
static_assert(Communicator<MpiComm>);

}  // namespace normlab::dist
