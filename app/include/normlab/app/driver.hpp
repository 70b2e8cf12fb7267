#pragma once
// The training driver shared by every `train-<variant>` executable: data,
// schedule, gradient accumulation, clipping, validation, logging, atomic
// checkpoints with exact resume, data parallelism and sampling with a KV cache.
//
// A variant's program compiles only its model (and a thin adapter,
// model_handle.hpp); the driver itself (driver_impl.hpp) is compiled once per
// backend and communicator. Built against the normlab_driver library
// (NORMLAB_PREBUILT_DRIVER, set by its CMake target), the built-in combinations
// come from the library; otherwise, or for a backend or communicator of a
// user's own, driver_impl.hpp is included here and compiled with the program
// (header-only).
//
// Exit codes: 0 success, 2 bad input (flags, data, checkpoints), 3 the run
// stopped on a non-finite loss or gradient (the last good checkpoint is kept).
#include "normlab/optim/any_optimizer.hpp"
#include "normlab/app/driver_core.hpp"
#include "normlab/app/model_adapter.hpp"
#include "normlab/app/run_options.hpp"
#include "normlab/train/variants.hpp"

namespace normlab {

// main() of every train-<variant> executable. Under `mpirun -np N` (an MPI
// build) the run is data parallel over N ranks with the same global --batch.
// Backend: cpu_backend, or cuda_backend for the train-<variant>-cuda executables
// (one process, the same flags, metrics and checkpoints; --sample runs on the CPU).
// Optimizers: the ones --optimizer may name (builtin_optimizers, or a user's
// optimizer_list<AdamW, Lion, Muon, MyOptimizer>).
template <class Tag, class Comm = default_communicator, class Backend = cpu_backend,
          class Optimizers = builtin_optimizers>
int train_main(int argc, char** argv) {
  return detail::train_main_with<Comm, Backend>(argc, argv, variant_entry<Tag, Backend>(),
                                                optimizer_menu<Backend, Optimizers>());
}

// Trains one variant, on one process or as one rank of a data-parallel job
// (`comm`): every rank draws the same global batch and computes its rows; rank 0
// alone prints and writes metrics, checkpoints and the summary. Returns the
// process exit code.
template <class Tag, class Comm = dist::SingleProcess, class Backend = cpu_backend,
          class Optimizers = builtin_optimizers>
int run_training(TrainOptions o, Comm& comm) {
  return detail::run_training_with<Comm, Backend>(std::move(o), comm, variant_entry<Tag, Backend>(),
                                                  optimizer_menu<Backend, Optimizers>());
}

// --time-steps N: the step time of this variant at this run's flags, for a
// benchmark that interleaves variants (normlab-ablate's time to target). The
// run's data, model and optimizer; two warm-up steps, then N timed optimizer
// steps of the same work as training (o.accum micro-batches, clipping, the
// optimizer, constraint; no evaluation, no checkpoint); writes OUT/step_time.json
// {"variant", "step_time_s": median, "steps", "tokens_per_step",
// "step_intervals_s"} and nothing else. With --time-gate R,W another program
// paces the steps through two descriptors (normlab-ablate alternates the
// variants step by step).
template <class Tag, class Comm = dist::SingleProcess, class Backend = cpu_backend,
          class Optimizers = builtin_optimizers>
int time_training(TrainOptions o, Comm& comm) {
  return detail::time_training_with<Comm, Backend>(std::move(o), comm, variant_entry<Tag, Backend>(),
                                                   optimizer_menu<Backend, Optimizers>());
}

}  // namespace normlab

#ifdef NORMLAB_PREBUILT_DRIVER
// The library (app/src/driver.cpp) holds these; nothing of the driver is compiled here.
namespace normlab {
#define NORMLAB_DRIVER_EXTERN(COMM)                                                                              \
  extern template int detail::train_main_with<COMM, cpu_backend>(int, char**, const VariantEntry<cpu_backend>&, \
                                                                  const OptimizerMenu<cpu_backend>&);            \
  extern template int detail::run_training_with<COMM, cpu_backend>(TrainOptions, COMM&,                         \
                                                                    const VariantEntry<cpu_backend>&,            \
                                                                    const OptimizerMenu<cpu_backend>&);          \
  extern template int detail::time_training_with<COMM, cpu_backend>(TrainOptions, COMM&,                        \
                                                                     const VariantEntry<cpu_backend>&,           \
                                                                     const OptimizerMenu<cpu_backend>&);
NORMLAB_DRIVER_EXTERN(dist::SingleProcess)
#ifdef NORMLAB_HAVE_MPI
NORMLAB_DRIVER_EXTERN(dist::MpiComm)
#endif
#undef NORMLAB_DRIVER_EXTERN
extern template OptimizerMenu<cpu_backend> optimizer_menu<cpu_backend, builtin_optimizers>();
// A trainer's own list (optimizer_list<AdamW, ..., MyOptimizer>) takes the built-ins from here too.
extern template AnyOptimizer<float, cpu_backend> detail::make_builtin_optimizer<float, cpu_backend>(
    const ParamStore<float>&, const OptimizerOptions&, std::size_t, std::size_t);
}  // namespace normlab
#else
#include "normlab/app/driver_impl.hpp"
#endif
