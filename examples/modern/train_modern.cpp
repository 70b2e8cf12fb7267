// train-<variant> for the modern block (or normlab's gpt / ngpt, the table's
// anchors): normlab's driver instantiated on a tag from modern.hpp. CMake
// compiles this file once per variant with MY_TRAIN_VARIANT set.
#include <normlab/app/driver.hpp>

#include "modern.hpp"

#ifndef MY_TRAIN_VARIANT
#error "compile with -DMY_TRAIN_VARIANT=<variant type>"
#endif

int main(int argc, char** argv) { return normlab::train_main<MY_TRAIN_VARIANT>(argc, argv); }
