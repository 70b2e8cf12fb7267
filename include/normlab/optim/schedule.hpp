#pragma once
// Learning-rate schedules. `step` is 0-based: the lr used by the (step+1)-th update.
//   constant       lr
//   cosine         linear warmup, then cosine from lr to min_lr at total_steps
//   wsd            warmup-stable-decay: linear warmup, lr, then over the last
//                  decay_frac of the steps down to min_lr (the last update at
//                  min_lr), linearly or as 1 − √progress
//   custom         a user's function of (step, this schedule's settings)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "normlab/core/error.hpp"
#include "normlab/core/exact.hpp"

namespace normlab {

struct LrSchedule {
  enum class Kind { constant, warmup_cosine, wsd, custom } kind = Kind::constant;
  enum class Decay { linear, one_minus_sqrt } decay = Decay::linear;  // wsd's decay shape
  double lr = 1e-3;
  double min_lr = 0.0;
  std::int64_t warmup = 0;       // linear ramp: lr·(step+1)/warmup for step < warmup
  std::int64_t total_steps = 0;  // cosine: reaches min_lr here; wsd: the decay ends here
  double decay_frac = 0.2;       // wsd: the fraction of total_steps spent decaying
  std::string custom_name;       // custom: its name (run headers, checkpoints)
  std::function<double(std::int64_t, const LrSchedule&)> custom_fn;

  // wsd: the steps of the decay and its first step.
  std::int64_t decay_steps() const {
    return std::max<std::int64_t>(1, std::llround(decay_frac * double(total_steps)));
  }
  std::int64_t decay_start() const { return total_steps - decay_steps(); }

  double at(std::int64_t step) const {
    switch (kind) {
      case Kind::constant: return lr;
      case Kind::custom: return custom_fn(step, *this);
      case Kind::warmup_cosine: {
        if (step < warmup) return lr * double(step + 1) / double(warmup);
        if (step >= total_steps) return min_lr;
        const double span = double(total_steps - warmup);
        const double progress = span > 0 ? double(step - warmup) / span : 1.0;
        constexpr double pi = 3.14159265358979323846;
        return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(pi * progress));
      }
      case Kind::wsd: {
        if (step < warmup) return lr * double(step + 1) / double(warmup);
        if (step >= total_steps) return min_lr;
        const std::int64_t d0 = decay_start();
        if (step < d0) return lr;
        const double progress = double(step - d0 + 1) / double(decay_steps());
        const double keep = decay == Decay::linear ? 1.0 - progress : 1.0 - std::sqrt(progress);
        return min_lr + (lr - min_lr) * keep;
      }
    }
    return lr;
  }

  // Refuses settings no schedule can run (a flag's sentence, not a NaN rate).
  void validate() const {
    if (!(lr > 0) || !std::isfinite(lr)) throw Error("--lr must be a positive finite number, got " + exact_string(lr));
    if (!(min_lr >= 0) || min_lr > lr)
      throw Error("--min-lr " + exact_string(min_lr) + " must be in [0, --lr " + exact_string(lr) + "]");
    if (kind == Kind::wsd) {
      if (!(decay_frac > 0 && decay_frac <= 1))
        throw Error("--decay-frac must be in (0, 1], got " + exact_string(decay_frac));
      if (warmup > decay_start())
        throw Error("--warmup " + std::to_string(warmup) + " runs into the decay, which starts at step " +
                    std::to_string(decay_start()) + " of " + std::to_string(total_steps) +
                    " (--decay-frac " + exact_string(decay_frac) + ")");
    }
    if (kind == Kind::warmup_cosine && warmup > total_steps)
      throw Error("--warmup " + std::to_string(warmup) + " is longer than the run (--steps " +
                  std::to_string(total_steps) + "): the rate would never reach --lr");
    if (kind == Kind::custom && !custom_fn) throw Error("custom learning-rate schedule '" + custom_name + "' has no function");
  }

  // The schedule's name and settings as (key, exact text), for checkpoints and summaries.
  std::string name() const {
    switch (kind) {
      case Kind::constant: return "constant";
      case Kind::warmup_cosine: return "cosine";
      case Kind::wsd: return "wsd";
      case Kind::custom: return custom_name;
    }
    return "?";
  }
  std::string decay_name() const { return decay == Decay::linear ? "linear" : "1-sqrt"; }

  static Kind parse(const std::string& name) {
    if (name == "constant") return Kind::constant;
    if (name == "cosine" || name == "warmup_cosine") return Kind::warmup_cosine;
    if (name == "wsd") return Kind::wsd;
    throw Error("unknown learning-rate schedule '" + name + "' (expected constant, cosine or wsd)");
  }
  static Decay parse_decay(const std::string& name) {
    if (name == "linear") return Decay::linear;
    if (name == "1-sqrt") return Decay::one_minus_sqrt;
    throw Error("unknown decay shape '" + name + "' (expected linear or 1-sqrt)");
  }
};

// A user's schedules by name, for the trainers' --schedule: register one before
// calling train_main (a trainer then accepts --schedule NAME; its checkpoints
// record the name, and a resume under another is refused). The function gets
// the 0-based step and the run's settings (lr, min_lr, warmup, total_steps).
using ScheduleFn = std::function<double(std::int64_t, const LrSchedule&)>;
inline std::map<std::string, ScheduleFn>& user_schedules() {
  static std::map<std::string, ScheduleFn> m;
  return m;
}
inline void register_schedule(const std::string& name, ScheduleFn fn) {
  if (name == "constant" || name == "cosine" || name == "warmup_cosine" || name == "wsd")
    throw Error("register_schedule: '" + name + "' is a built-in schedule's name");
  if (name.empty() || !fn) throw Error("register_schedule: a schedule needs a name and a function");
  user_schedules()[name] = std::move(fn);
}
// The schedule called `name` with these settings: a built-in, else a registered one.
inline LrSchedule make_schedule(const std::string& name, LrSchedule settings) {
  if (const auto it = user_schedules().find(name); it != user_schedules().end()) {
    settings.kind = LrSchedule::Kind::custom;
    settings.custom_name = name;
    settings.custom_fn = it->second;
    return settings;
  }
  std::string known = "constant, cosine, wsd";
  for (const auto& [k, f] : user_schedules()) known += ", " + k;
  if (name != "constant" && name != "cosine" && name != "warmup_cosine" && name != "wsd")
    throw Error("unknown learning-rate schedule '" + name + "' (known: " + known + ")");
  settings.kind = LrSchedule::parse(name);
  return settings;
}

// Whether `now` gives every one of the first `done` steps the rate `before`
// gave it: a resume whose schedule changed (a longer WSD run already in its
// decay) would otherwise continue from rates its own history never had.
inline std::int64_t first_rate_difference(const LrSchedule& before, const LrSchedule& now, std::int64_t done) {
  for (std::int64_t k = 0; k < done; ++k)
    if (before.at(k) != now.at(k)) return k;
  return -1;
}

}  // namespace normlab
