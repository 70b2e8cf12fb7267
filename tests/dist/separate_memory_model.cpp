// ngpt's float model on separate_memory_backend, compiled once (separate_memory_models.hpp).
#define NORMLAB_SEPARATE_MEMORY_MODEL_HERE
#include "separate_memory_models.hpp"

NORMLAB_SEPARATE_MEMORY_MODEL(template)
