#pragma once
// CPU backend: the model's leaf ops on OpenMP, one header per op family:
//   primitives.hpp  threading, deterministic row and column sums, Eigen maps, scratch
//   gemm.hpp        cpu::gemm and the linear layers
//   gram.hpp        cpu::gram: X Xᵀ from its upper triangle
//   norms.hpp       RMSNorm, row L2 norms, RoPE, the fused QK pass, per-column scales
//   attention.hpp   blocked causal attention, decoding, probabilities, grouped-query kv
//   mlp.hpp         pointwise activations, SwiGLU and scaled SwiGLU
//   vocab.hpp       embedding and cross-entropy
// float32 GEMMs run on normlab's own AVX-512 kernels (sgemm_avx512.hpp) where the
// build targets AVX-512F, with OpenBLAS's serial kernels for small products and on
// builds without AVX-512 (Eigen's where there is no OpenBLAS either); float64 GEMMs
// run on Eigen's GEBP kernels, so the oracle shares no GEMM code with the fast path.
// Include this header, not the parts: under NORMLAB_PREBUILT_CPU_OPS it declares
// every op's float and double instances extern (compiled once in src/cpu_ops.cpp).
//
// Conventions (as in llm.c):
//  * every buffer is row-major; N = rows (B*T tokens), C = d, F = 4d;
//  * weights use PyTorch's Linear layout W[out, in], y = x Wᵀ;
//  * parameter gradients accumulate (+=); activation gradients are written (=);
//  * reductions over rows into a parameter gradient go through column_reduce so
//    results do not depend on the thread count (resume must be bit-exact).
#include "normlab/backend/cpu/attention.hpp"
#include "normlab/backend/cpu/bf16_storage.hpp"
#include "normlab/backend/cpu/gemm.hpp"
#include "normlab/backend/cpu/gram.hpp"
#include "normlab/backend/cpu/mlp.hpp"
#include "normlab/backend/cpu/norms.hpp"
#include "normlab/backend/cpu/primitives.hpp"
#include "normlab/backend/cpu/vocab.hpp"

#ifdef NORMLAB_PREBUILT_CPU_OPS
// Compiled once in the normlab_cpu_ops library (src/cpu_ops.cpp).
#include "normlab/backend/cpu/op_instances.hpp"
namespace normlab::cpu {
NORMLAB_CPU_OP_INSTANCES(extern, float)
NORMLAB_CPU_OP_INSTANCES(extern, double)
NORMLAB_CPU_GEMM_INSTANCES(extern, float)
NORMLAB_CPU_GEMM_INSTANCES(extern, double)
#if defined(NORMLAB_HAVE_BF16GEMM_AVX512)
NORMLAB_CPU_BF16_OP_INSTANCES(extern)
#if defined(NORMLAB_HAVE_ATTENTION_AVX512)
NORMLAB_CPU_BF16_ATTENTION_INSTANCES(extern)
#endif
#endif
}  // namespace normlab::cpu
#endif
