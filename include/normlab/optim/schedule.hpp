#pragma once
// Learning-rate schedules. `step` is 0-based: the lr used by the (step+1)-th update.
#include <cmath>
#include <cstdint>
#include <string>

#include "normlab/core/error.hpp"

namespace normlab {

struct LrSchedule {
  enum class Kind { constant, warmup_cosine } kind = Kind::constant;
  double lr = 1e-3;
  double min_lr = 0.0;
  std::int64_t warmup = 0;       // linear ramp: lr·(step+1)/warmup for step < warmup
  std::int64_t total_steps = 0;  // cosine from lr (at step = warmup) to min_lr (at step = total_steps)

  double at(std::int64_t step) const {
    if (kind == Kind::constant) return lr;
    if (step < warmup) return lr * double(step + 1) / double(warmup);
    if (step >= total_steps) return min_lr;
    const double span = double(total_steps - warmup);
    const double progress = span > 0 ? double(step - warmup) / span : 1.0;
    constexpr double pi = 3.14159265358979323846;
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(pi * progress));
  }

  static Kind parse(const std::string& name) {
    if (name == "constant") return Kind::constant;
    if (name == "cosine" || name == "warmup_cosine") return Kind::warmup_cosine;
    throw Error("unknown learning-rate schedule '" + name + "' (expected constant or cosine)");
  }
};

}  // namespace normlab
