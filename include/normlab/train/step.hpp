#pragma once
// One optimizer step of a model: forward, backward, clip, the optimizer (any
// normlab::Optimizer, AdamW by default), constraint.
// The constraint is applied to the optimizer's own parameters (the master
// copy) right after the update, so the next step starts from the sphere.
#include <cstdint>

#include "normlab/optim/adamw.hpp"

namespace normlab {

struct StepResult {
  double loss = 0;
  double grad_norm = 0;  // before clipping
};

// On any backend: the model's live gradients and parameters are the
// optimizer's (its moments are in the same memory).
template <class Model, class Opt>
StepResult train_step(Model& model, Opt& opt, const std::int64_t* idx, const std::int64_t* targets,
                      std::int64_t B, std::int64_t seq, double lr, double grad_clip) {
  StepResult r;
  r.loss = model.forward(idx, targets, B, seq);
  model.backward();
  using Backend = typename Model::backend;
  r.grad_norm = clip_grad_norm<Backend>(model.param_grads(), static_cast<std::int64_t>(model.params().size()),
                                        grad_clip);
  opt.step(model.params(), model.param_values(), model.param_grads(), lr);
  model.apply_constraint();
  return r;
}

}  // namespace normlab
