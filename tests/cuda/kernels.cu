// The one translation unit that compiles normlab's CUDA kernels (for every
// architecture in CMAKE_CUDA_ARCHITECTURES); tests and benchmarks link it.
#include "normlab/backend/cuda/impl.cuh"
