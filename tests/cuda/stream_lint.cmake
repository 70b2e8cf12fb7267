# Refuses host<->device copies and fills that bypass the CUDA backend's stream.
# cuda::DeviceContext's stream is non-blocking: it does not wait for the legacy default
# stream, and a synchronous cudaMemcpy from pageable memory may return before its
# DMA lands, so a kernel enqueued next on our stream can read stale memory. Every
# transfer must go through Backend::upload/download/fill_bytes (or an *Async call
# on the backend's stream). Scans the CUDA backend, its tests and benchmarks.
#   cmake -DROOT=<source dir> -P stream_lint.cmake
file(GLOB_RECURSE files
     ${ROOT}/include/normlab/backend/cuda/*.hpp ${ROOT}/include/normlab/backend/cuda/*.cuh
     ${ROOT}/tests/cuda/*.cpp ${ROOT}/tests/cuda/*.hpp ${ROOT}/tests/cuda/*.cu
     ${ROOT}/bench/cuda/*.cpp)
list(LENGTH files n)
if(n LESS 10)
  message(FATAL_ERROR "stream_lint: found only ${n} CUDA sources under ${ROOT}: wrong ROOT?")
endif()
set(bad "")
foreach(f ${files})
  file(STRINGS ${f} lines)
  set(lineno 0)
  foreach(line IN LISTS lines)
    math(EXPR lineno "${lineno} + 1")
    # A call, not a mention in a comment: the name directly followed by '('.
    if(line MATCHES "(cudaMemcpy|cudaMemset|cudaMemcpy2D|cudaMemcpyToSymbol|cudaDeviceSynchronize)[ \t]*\\(")
      string(REGEX REPLACE "^[ \t]*//.*" "" code "${line}")
      if(NOT code STREQUAL "")
        file(RELATIVE_PATH rel ${ROOT} ${f})
        string(APPEND bad "  ${rel}:${lineno}: ${line}\n")
      endif()
    endif()
  endforeach()
endforeach()
if(bad)
  message(FATAL_ERROR "stream_lint: synchronous copies/fills on the legacy stream (use Backend::upload, "
                      "download or fill_bytes):\n${bad}")
endif()
message(STATUS "stream_lint: ${n} files, every host-device copy goes through the backend's stream")
