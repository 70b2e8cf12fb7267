// train-<variant> for a user's own variant: normlab's driver (flags, metrics,
// checkpoints with exact resume, sampling) instantiated on a type from
// my_policies.hpp, with the user's own optimizer from my_optimizer.hpp offered
// beside normlab's (--optimizer sgd) and a schedule of its own (--schedule
// inv_sqrt). CMake compiles this file once per
// variant with MY_TRAIN_VARIANT set (gpt_dyt, gpt_periln, gpt_gated; normlab's
// own gpt, the table's baseline, is the package's train-gpt).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include <normlab/app/driver.hpp>

#include "my_optimizer.hpp"
#include "my_policies.hpp"

#ifndef MY_TRAIN_VARIANT
#error "compile with -DMY_TRAIN_VARIANT=<variant type>"
#endif

// A learning-rate schedule of the user's own, offered as --schedule inv_sqrt:
// linear warmup, then lr·√(warmup / (step + 1)), never below --min-lr.
double inv_sqrt(std::int64_t step, const normlab::LrSchedule& s) {
  const double w = double(std::max<std::int64_t>(1, s.warmup));
  if (double(step + 1) <= w) return s.lr * double(step + 1) / w;
  return std::max(s.min_lr, s.lr * std::sqrt(w / double(step + 1)));
}

int main(int argc, char** argv) {
  normlab::register_schedule("inv_sqrt", inv_sqrt);
  using optimizers = normlab::optimizer_list<normlab::AdamW, normlab::Lion, normlab::Muon, my::sgd_nesterov>;
  return normlab::train_main<MY_TRAIN_VARIANT, normlab::default_communicator, normlab::cpu_backend, optimizers>(
      argc, argv);
}
