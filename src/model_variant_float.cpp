// One built-in variant's float CPU model (src/model_variant.hpp).
#include "model_variant.hpp"

NORMLAB_INSTANTIATE_VARIANT_MODEL(float)
