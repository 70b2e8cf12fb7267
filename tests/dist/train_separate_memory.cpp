// train-ngpt-separate-memory: train-ngpt over MPI on separate_memory_backend
// (tests/separate_memory_backend.hpp), the CPU's kernels behind a GPU model's
// memory layout. It runs the driver's data-parallel step as a GPU trainer runs
// it (the live gradients bucketed, scaled, clipped and stepped in the backend's
// memory; ZeRO-1's shards, gathers and resume there; the host copy downloaded
// before the ranks compare parameters) on a machine without a GPU
// (tests/dist/device_memory.sh).
#include "normlab/dist/mpi.hpp"
#include "normlab/app/driver.hpp"
#include "../separate_memory_backend.hpp"
#include "separate_memory_models.hpp"

static_assert(!normlab::testing::separate_memory_backend::host_memory);
static_assert(normlab::dist::reduces_memory_of<normlab::dist::MpiComm, normlab::testing::separate_memory_backend>);

int main(int argc, char** argv) {
  return normlab::train_main<normlab::variants::ngpt, normlab::dist::MpiComm,
                             normlab::testing::separate_memory_backend>(argc, argv);
}
