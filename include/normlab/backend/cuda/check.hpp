#pragma once
// Error checking for the CUDA backend: every CUDA runtime and cuBLASLt call goes
// through one of these macros, which throw normlab::Error naming the call, the
// file:line and the library's own status string. Plain C++ (no nvcc needed).
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <string>

#include "normlab/core/error.hpp"

namespace normlab::cuda {

inline std::string where(const char* file, int line) { return std::string(file) + ":" + std::to_string(line); }

inline void check_cuda(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess)
    throw Error("CUDA error at " + where(file, line) + ": " + what + " -> " + cudaGetErrorName(e) + " (" +
                cudaGetErrorString(e) + ")");
}

inline void check_cublas(cublasStatus_t s, const char* what, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error("cuBLASLt error at " + where(file, line) + ": " + what + " -> " + cublasLtGetStatusName(s) + " (" +
                cublasLtGetStatusString(s) + ")");
}

}  // namespace normlab::cuda

#define NORMLAB_CUDA_CHECK(call) ::normlab::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define NORMLAB_CUBLAS_CHECK(call) ::normlab::cuda::check_cublas((call), #call, __FILE__, __LINE__)
// After a kernel launch: launch-configuration errors surface here, not later.
#define NORMLAB_CUDA_CHECK_LAUNCH() ::normlab::cuda::check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
