#pragma once
// ngpt's float model on separate_memory_backend, compiled in its own unit
// (separate_memory_model.cpp) beside train-ngpt-separate-memory's driver: two units
// in parallel, the longer 37 s, instead of one of 53 s (GCC 12, Intel Xeon). The
// driver builds no double model for this backend.
#include "normlab/train/variants.hpp"
#include "../separate_memory_backend.hpp"

namespace normlab {
extern template class Transformer<float, variants::ngpt::scheme, variants::ngpt::residual,
                                  testing::separate_memory_backend>;
}  // namespace normlab
