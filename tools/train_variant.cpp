// train-<variant>: one executable per variant, each a single type
// instantiation (NORMLAB_TRAIN_VARIANT is set by CMake), sharing one driver.
#include "normlab/train/driver.hpp"

#ifndef NORMLAB_TRAIN_VARIANT
#error "compile with -DNORMLAB_TRAIN_VARIANT=<variant name>"
#endif

int main(int argc, char** argv) { return normlab::train_main<normlab::variants::NORMLAB_TRAIN_VARIANT>(argc, argv); }
