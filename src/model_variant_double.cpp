// One built-in variant's float64 CPU model, the oracle (src/model_variant.hpp).
#include "model_variant.hpp"

NORMLAB_INSTANTIATE_VARIANT_MODEL(double)
