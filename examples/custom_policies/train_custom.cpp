// train-<variant> for a user's own variant: normlab's driver (flags, metrics,
// checkpoints with exact resume, sampling) instantiated on a type from
// my_policies.hpp, with the user's own optimizer from my_optimizer.hpp offered
// beside normlab's (--optimizer sgd). CMake compiles this file once per
// variant with MY_TRAIN_VARIANT set (gpt_dyt, gpt_periln, gpt_gated, or
// normlab's gpt).
#include <normlab/train/driver.hpp>

#include "my_optimizer.hpp"
#include "my_policies.hpp"

#ifndef MY_TRAIN_VARIANT
#error "compile with -DMY_TRAIN_VARIANT=<variant type>"
#endif

int main(int argc, char** argv) {
  using optimizers = normlab::optimizer_list<normlab::AdamW, normlab::Lion, normlab::Muon, my::sgd_nesterov>;
  return normlab::train_main<MY_TRAIN_VARIANT, normlab::default_communicator, normlab::cpu_backend, optimizers>(
      argc, argv);
}
