// train-<variant> and train-<variant>-cuda: one executable per variant and
// backend, each a single type instantiation (NORMLAB_TRAIN_VARIANT and, for the
// GPU, NORMLAB_TRAIN_CUDA are set by CMake), sharing one driver.
// With NORMLAB_PREBUILT_MODELS (CMake sets it) the variant's float and double
// models are compiled in their own objects (src/model_variant_*.cpp) and the
// driver in its library: this unit compiles the variant's entry (its adapter,
// checkpoint I/O, sampling) and main(). After an edit to a policy header,
// `ninja train-<variant>` recompiles the two model units and this one, in
// parallel, and links.
#include "normlab/app/driver.hpp"
#ifdef NORMLAB_TRAIN_CUDA
#include "normlab/backend/cuda/cuda_backend.hpp"
#ifdef NORMLAB_HAVE_NCCL
#include "normlab/dist/cuda/nccl.hpp"
#endif
#endif

#ifndef NORMLAB_TRAIN_VARIANT
#error "compile with -DNORMLAB_TRAIN_VARIANT=<variant name>"
#endif

int main(int argc, char** argv) {
#ifdef NORMLAB_TRAIN_CUDA
  // The GPU's communicator: NCCL, launched and bootstrapped by MPI where the build
  // has both; NCCL alone is one rank; without NCCL one process (a GPU trainer
  // that cannot reduce is refused under mpirun by train_main with a sentence).
#if defined(NORMLAB_HAVE_NCCL) && defined(NORMLAB_HAVE_MPI)
  using Comm = normlab::dist::NcclComm<normlab::dist::MpiComm>;
#elif defined(NORMLAB_HAVE_NCCL)
  using Comm = normlab::dist::NcclComm<normlab::dist::SingleProcess>;
#else
  using Comm = normlab::dist::SingleProcess;
#endif
  return normlab::train_main<normlab::variants::NORMLAB_TRAIN_VARIANT, Comm, normlab::cuda_backend>(argc, argv);
#else
  return normlab::train_main<normlab::variants::NORMLAB_TRAIN_VARIANT>(argc, argv);
#endif
}
