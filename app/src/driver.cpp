// The training driver for the CPU backend, compiled once: every train-<variant>
// built against normlab_driver links this instead of compiling the driver
// (driver.hpp declares these instantiations extern under NORMLAB_PREBUILT_DRIVER).
#include "normlab/app/driver_impl.hpp"

namespace normlab {
#define NORMLAB_DRIVER_INSTANCE(COMM)                                                                     \
  template int detail::train_main_with<COMM, cpu_backend>(int, char**, const VariantEntry<cpu_backend>&, \
                                                           const OptimizerMenu<cpu_backend>&);            \
  template int detail::run_training_with<COMM, cpu_backend>(TrainOptions, COMM&,                         \
                                                             const VariantEntry<cpu_backend>&,            \
                                                             const OptimizerMenu<cpu_backend>&);          \
  template int detail::time_training_with<COMM, cpu_backend>(TrainOptions, COMM&,                        \
                                                              const VariantEntry<cpu_backend>&,           \
                                                              const OptimizerMenu<cpu_backend>&);
NORMLAB_DRIVER_INSTANCE(dist::SingleProcess)
#ifdef NORMLAB_HAVE_MPI
NORMLAB_DRIVER_INSTANCE(dist::MpiComm)
#endif
#undef NORMLAB_DRIVER_INSTANCE
template OptimizerMenu<cpu_backend> optimizer_menu<cpu_backend, builtin_optimizers>();
template AnyOptimizer<float, cpu_backend> detail::make_builtin_optimizer<float, cpu_backend>(
    const ParamStore<float>&, const OptimizerOptions&, std::size_t, std::size_t);
}  // namespace normlab
