#pragma once
// Umbrella header for CPU users: the model, its policies (and the interfaces a
// user's own policy implements: nn/context.hpp, docs/extending.md), the optimizer, the
// training step, data and batches, checkpoints, named variants, gradient
// checks and safetensors I/O (Eigen and nlohmann-json). Not included here:
// the command-line driver (normlab/app/driver.hpp, needs CLI11), the
// diagnostics (normlab/diag/diagnostics.hpp) and the CUDA backend
// (normlab/backend/cuda/, nvcc builds only). docs/library.md walks through it.
#include "normlab/core/error.hpp"
#include "normlab/tensor/tensor.hpp"
#include "normlab/backend/cpu/ops.hpp"
#include "normlab/backend/cpu/backend.hpp"
#include "normlab/nn/config.hpp"
#include "normlab/nn/context.hpp"
#include "normlab/nn/policies.hpp"
#include "normlab/nn/residual.hpp"
#include "normlab/nn/constraint.hpp"
#include "normlab/nn/params.hpp"
#include "normlab/model/transformer.hpp"
#include "normlab/optim/optimizer.hpp"
#include "normlab/optim/adamw.hpp"
#include "normlab/optim/lion.hpp"
#include "normlab/optim/muon.hpp"
#include "normlab/optim/any_optimizer.hpp"
#include "normlab/optim/schedule.hpp"
#include "normlab/train/step.hpp"
#include "normlab/train/data.hpp"
#include "normlab/train/checkpoint.hpp"
#include "normlab/train/variants.hpp"
#include "normlab/train/gradcheck.hpp"
#include "normlab/io/safetensors.hpp"
