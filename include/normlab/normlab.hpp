#pragma once
// Umbrella header for CPU users. CUDA code lives under backend/cuda and is
// only reachable from nvcc builds.
#include "normlab/core/error.hpp"
#include "normlab/tensor/tensor.hpp"
#include "normlab/backend/cpu/ops.hpp"
#include "normlab/nn/policies.hpp"
#include "normlab/nn/residual.hpp"
#include "normlab/nn/constraint.hpp"
#include "normlab/model/params.hpp"
#include "normlab/model/transformer.hpp"
#include "normlab/optim/adamw.hpp"
#include "normlab/optim/schedule.hpp"
#include "normlab/train/step.hpp"
#include "normlab/io/safetensors.hpp"
