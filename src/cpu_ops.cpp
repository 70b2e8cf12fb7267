// The CPU backend's ops for float and double, compiled once: programs built
// against normlab_cpu_ops (NORMLAB_PREBUILT_CPU_OPS) declare them extern
// (backend/cpu/ops.hpp) and link these.
#include "normlab/backend/cpu/ops.hpp"
#include "normlab/backend/cpu/op_instances.hpp"

namespace normlab::cpu {
NORMLAB_CPU_OP_INSTANCES(, float)
NORMLAB_CPU_OP_INSTANCES(, double)
NORMLAB_CPU_GEMM_INSTANCES(, float)
NORMLAB_CPU_GEMM_INSTANCES(, double)
#if defined(NORMLAB_HAVE_BF16GEMM_AVX512)
NORMLAB_CPU_BF16_OP_INSTANCES()
#if defined(NORMLAB_HAVE_ATTENTION_AVX512)
NORMLAB_CPU_BF16_ATTENTION_INSTANCES()
#endif
#endif
}  // namespace normlab::cpu
