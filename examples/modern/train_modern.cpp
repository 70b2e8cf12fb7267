// train-modern: normlab's driver instantiated on the modern block's tag from
// modern.hpp (MY_TRAIN_VARIANT, set by CMake). The table's anchors, normlab's
// gpt and ngpt, are the package's own trainers.
#include <normlab/app/driver.hpp>

#include "modern.hpp"

#ifndef MY_TRAIN_VARIANT
#error "compile with -DMY_TRAIN_VARIANT=<variant type>"
#endif

int main(int argc, char** argv) { return normlab::train_main<MY_TRAIN_VARIANT>(argc, argv); }
