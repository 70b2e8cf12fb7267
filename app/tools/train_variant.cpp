// train-<variant> and train-<variant>-cuda: one executable per variant and
// backend, each a single type instantiation (NORMLAB_TRAIN_VARIANT and, for the
// GPU, NORMLAB_TRAIN_CUDA are set by CMake), sharing one driver.
#if defined(NORMLAB_PREBUILT_ENTRIES) && !defined(NORMLAB_TRAIN_CUDA)
// The CPU trainer of a built-in variant: its model and entry are compiled in their
// own objects (src/model_variant_*.cpp, app/src/variant_entry.cpp) and the driver in
// the library, so this file only names them. It includes no policy, scheme or model
// header: after an edit to one, `ninja train-<variant>` recompiles the variant's
// model and entry (in parallel) and links, and leaves this file alone.
#include "normlab/app/driver_core.hpp"
#include "normlab/app/model_handle.hpp"
namespace normlab {
namespace variants {
struct NORMLAB_TRAIN_VARIANT;
}  // namespace variants
template <class Tag, class Backend>
VariantEntry<Backend> variant_entry();
extern template OptimizerMenu<cpu_backend> optimizer_menu<cpu_backend, builtin_optimizers>();
}  // namespace normlab
#else
#include "normlab/app/driver.hpp"
#endif
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
#elif defined(NORMLAB_PREBUILT_ENTRIES)
  return normlab::detail::train_main_with<normlab::default_communicator, normlab::cpu_backend>(
      argc, argv, normlab::variant_entry<normlab::variants::NORMLAB_TRAIN_VARIANT, normlab::cpu_backend>(),
      normlab::optimizer_menu<normlab::cpu_backend, normlab::builtin_optimizers>());
#else
  return normlab::train_main<normlab::variants::NORMLAB_TRAIN_VARIANT>(argc, argv);
#endif
}
