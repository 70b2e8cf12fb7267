// The safetensors reader's and writer's JSON parts (nlohmann-json's parser and
// serializer), compiled once: programs built against normlab_cpu_ops
// (NORMLAB_PREBUILT_IO) declare them only (io/safetensors.hpp) and link these.
#define NORMLAB_IO_IMPLEMENTATION
#include "normlab/io/safetensors.hpp"
