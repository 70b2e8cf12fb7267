#pragma once
// separate_memory_backend: cpu_backend with host_memory = false, so the model
// keeps its ParamStore on the host for init and checkpoints and steps on
// separate copies, exactly as on cuda_backend, while every kernel is the CPU's.
// It runs a GPU model's host-side paths (uploads, downloads, the live copies,
// and in the driver the data-parallel step on the live gradients) on a machine
// without a GPU. Its memory is still the host's (no `device_memory`), so MPI
// reduces it: dist::reduces_memory_of<MpiComm, separate_memory_backend>.
#include <string_view>

#include "normlab/backend/cpu/backend.hpp"

namespace normlab::testing {

struct separate_memory_backend : cpu_backend {
  static constexpr std::string_view name = "cpu-separate-memory";
  static constexpr bool host_memory = false;
};

}  // namespace normlab::testing
