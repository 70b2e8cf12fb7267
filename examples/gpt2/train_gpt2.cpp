// train-<variant> for the GPT-2 block and nGPT on its shapes: normlab's driver
// instantiated on a tag from gpt2.hpp. CMake compiles this file once per variant
// with MY_TRAIN_VARIANT set; the table's anchors, normlab's gpt and ngpt, are the
// package's own trainers.
#include <normlab/app/driver.hpp>

#include "gpt2.hpp"

#ifndef MY_TRAIN_VARIANT
#error "compile with -DMY_TRAIN_VARIANT=<variant type>"
#endif

int main(int argc, char** argv) { return normlab::train_main<MY_TRAIN_VARIANT>(argc, argv); }
