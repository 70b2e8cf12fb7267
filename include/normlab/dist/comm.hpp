#pragma once
// A communicator: what data-parallel training needs from a process group
// (launch, rendezvous and collectives belong to an engine such as MPI; normlab
// writes none of it). A type is chosen at compile time beside the backend:
// `SingleProcess` (this header, no dependency) or `MpiComm` (dist/mpi.hpp).
//
// Every collective is called by every rank in the same order with the same
// sizes; a nonblocking one returns a Request that `test`/`wait_all` complete.
#include <concepts>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <vector>

namespace normlab::dist {

template <class C>
concept Communicator = requires(C& c, const C& cc, float* f, double* d, std::size_t n, int code,
                                std::vector<typename C::Request>& reqs, const std::string& s) {
  { cc.rank() } -> std::convertible_to<int>;
  { cc.size() } -> std::convertible_to<int>;
  { c.barrier() };
  { c.allreduce_sum(1.0) } -> std::convertible_to<double>;
  { c.start_allreduce_sum(f, n) } -> std::same_as<typename C::Request>;
  { c.start_allreduce_sum(d, n) } -> std::same_as<typename C::Request>;
  { c.progress(reqs) };
  { c.wait_all(reqs) };
  { c.gather_strings(s) } -> std::same_as<std::vector<std::string>>;
  { c.broadcast_int(code) } -> std::convertible_to<int>;
  { c.abort(code) };
};

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
  void progress(std::vector<Request>&) {}
  void wait_all(std::vector<Request>& r) { r.clear(); }
  // Every rank's string, in rank order, on rank 0 (empty elsewhere).
  std::vector<std::string> gather_strings(const std::string& s) { return {s}; }
  int broadcast_int(int x) { return x; }  // rank 0's value on every rank
  [[noreturn]] void abort(int code) { std::exit(code); }
};
static_assert(Communicator<SingleProcess>);

}  // namespace normlab::dist
