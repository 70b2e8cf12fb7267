#pragma once
// One built-in variant's CPU models, compiled once for every program that links
// normlab_models: CMake compiles model_variant_float.cpp and
// model_variant_double.cpp once per variant with -DNORMLAB_MODEL_VARIANT=<name>
// (the names read from train/variants.hpp), and train/variants.hpp declares these
// instantiations extern under NORMLAB_PREBUILT_MODELS. float and double in two
// units: a rebuild after a policy edit compiles them on two cores at once.
#include "normlab/train/variants.hpp"

#ifndef NORMLAB_MODEL_VARIANT
#error "src/model_variant_*.cpp: compile with -DNORMLAB_MODEL_VARIANT=<variant> (CMake does, once per variant)"
#endif

#define NORMLAB_INSTANTIATE_VARIANT_MODEL(Scalar)                                                    \
  namespace normlab {                                                                                \
  template class Transformer<Scalar, variants::NORMLAB_MODEL_VARIANT::scheme,                        \
                             variants::NORMLAB_MODEL_VARIANT::residual, cpu_backend>;                \
  }
