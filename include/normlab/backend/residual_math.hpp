#pragma once
// Which built-in residual math a rule runs: the key under which every backend
// supplies its kernels (backend/cpu/residual.hpp, the CUDA backend's rows.cuh),
// so a rule type in nn/ names its math without naming a backend.
namespace normlab {

enum class ResidualMath { add, lerp, lerp_nu, lerp_retract, slerp };

}  // namespace normlab
