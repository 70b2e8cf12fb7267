// bench_allreduce: the collective bandwidth data-parallel training gets here.
//   mpirun -np 2 bench_allreduce [--quick]
// For each size, the median over repetitions of a nonblocking all-reduce (sum,
// in place, float32) as GradientSync issues it; prints time, algorithm
// bandwidth (bytes / time) and bus bandwidth (algbw · 2(n−1)/n, the convention
// of NVIDIA's nccl-tests, so figures compare with published NCCL ones).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "normlab/dist/mpi.hpp"

int main(int argc, char** argv) {
  normlab::dist::MpiComm comm(&argc, &argv);
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const int n = comm.size();
  if (comm.rank() == 0)
    std::printf("all-reduce (float32 sum, in place) over %d rank%s\n%12s %10s %12s %12s\n", n, n == 1 ? "" : "s",
                "bytes", "ms", "algbw GB/s", "busbw GB/s");
  for (std::size_t bytes = std::size_t(1) << 16; bytes <= (std::size_t(1) << 26); bytes <<= 2) {
    std::vector<float> buf(bytes / sizeof(float), 1.0f);
    std::vector<double> t;
    const int reps = quick ? 2 : 20;
    for (int i = 0; i < reps + 2; ++i) {
      comm.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<normlab::dist::MpiComm::Request> r{comm.start_allreduce_sum(buf.data(), buf.size())};
      comm.wait_all(r);
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (i >= 2) t.push_back(comm.allreduce_sum(dt) / n);  // the ranks' mean
    }
    std::sort(t.begin(), t.end());
    const double med = t[t.size() / 2];
    const double algbw = double(bytes) / med / 1e9;
    if (comm.rank() == 0)
      std::printf("%12zu %10.3f %12.2f %12.2f\n", bytes, med * 1e3, algbw, algbw * 2.0 * (n - 1) / std::max(n, 1));
  }
  return 0;
}
