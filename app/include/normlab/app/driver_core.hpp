#pragma once
// The training driver's entry points for any variant on a backend and a
// communicator (defined in driver_impl.hpp), and the communicator a trainer is
// built with. Knows no model type: the driver library compiles against this.
#include <string>

#include "normlab/backend/cpu/backend.hpp"
#include "normlab/dist/comm.hpp"
#ifdef NORMLAB_HAVE_MPI
#include "normlab/dist/mpi.hpp"
#endif
#include "normlab/app/model_handle.hpp"
#include "normlab/app/run_options.hpp"

namespace normlab {

// The communicator a trainer is built with: MPI where the build links it
// (NORMLAB_HAVE_MPI; a process no launcher started is still a group of one),
// else a single process.
#ifdef NORMLAB_HAVE_MPI
using default_communicator = dist::MpiComm;
#else
using default_communicator = dist::SingleProcess;
#endif

namespace detail {
template <class Comm, class Backend>
int train_main_with(int argc, char** argv, const VariantEntry<Backend>& v, const OptimizerMenu<Backend>& menu);
template <class Comm, class Backend>
int run_training_with(TrainOptions o, Comm& comm, const VariantEntry<Backend>& v, const OptimizerMenu<Backend>& menu);
template <class Comm, class Backend>
int time_training_with(TrainOptions o, Comm& comm, const VariantEntry<Backend>& v, const OptimizerMenu<Backend>& menu);
}  // namespace detail

}  // namespace normlab
