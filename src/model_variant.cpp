// One built-in variant's CPU models, float and double, compiled once for every
// program that links normlab_models: CMake compiles this file once per variant
// with -DNORMLAB_MODEL_VARIANT=<name> (the names read from train/variants.hpp),
// and train/variants.hpp declares these instantiations extern under
// NORMLAB_PREBUILT_MODELS.
#include "normlab/train/variants.hpp"

#ifndef NORMLAB_MODEL_VARIANT
#error "src/model_variant.cpp: compile with -DNORMLAB_MODEL_VARIANT=<variant> (CMake does, once per variant)"
#endif

namespace normlab {
using Tag = variants::NORMLAB_MODEL_VARIANT;
template class Transformer<float, Tag::scheme, Tag::residual, cpu_backend>;
template class Transformer<double, Tag::scheme, Tag::residual, cpu_backend>;
}  // namespace normlab
