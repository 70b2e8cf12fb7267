// train-<variant> for a user's own variant: normlab's driver (flags, metrics,
// checkpoints with exact resume, sampling) instantiated on a type from
// my_policies.hpp. CMake compiles this file once per variant with
// MY_TRAIN_VARIANT set (gpt_dyt, gpt_periln, gpt_gated, or normlab's gpt).
#include <normlab/train/driver.hpp>

#include "my_policies.hpp"

#ifndef MY_TRAIN_VARIANT
#error "compile with -DMY_TRAIN_VARIANT=<variant type>"
#endif

int main(int argc, char** argv) { return normlab::train_main<MY_TRAIN_VARIANT>(argc, argv); }
