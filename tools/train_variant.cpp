// train-<variant> and train-<variant>-cuda: one executable per variant and
// backend, each a single type instantiation (NORMLAB_TRAIN_VARIANT and, for the
// GPU, NORMLAB_TRAIN_CUDA are set by CMake), sharing one driver.
#include "normlab/train/driver.hpp"
#ifdef NORMLAB_TRAIN_CUDA
#include "normlab/backend/cuda/cuda_backend.hpp"
#endif

#ifndef NORMLAB_TRAIN_VARIANT
#error "compile with -DNORMLAB_TRAIN_VARIANT=<variant name>"
#endif

int main(int argc, char** argv) {
#ifdef NORMLAB_TRAIN_CUDA
  // One process: no MPI (a GPU trainer under mpirun is refused by train_main with a sentence).
  return normlab::train_main<normlab::variants::NORMLAB_TRAIN_VARIANT, normlab::dist::SingleProcess,
                             normlab::cuda_backend>(argc, argv);
#else
  return normlab::train_main<normlab::variants::NORMLAB_TRAIN_VARIANT>(argc, argv);
#endif
}
