#pragma once
// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"):
// the sign of an interpolated momentum. Step t, each parameter p of a group
// with (lr·mult, wd):
//   c ← β₁m + (1−β₁)g
//   p ← p·(1 − lr·wd) − lr·sign(c)          (sign(0) = 0, as torch.sign)
//   m ← β₂m + (1−β₂)g
// One state tensor (exp_avg = m). Every update has magnitude lr, so Lion's
// rates are typically 3–10× below AdamW's. The elementwise pass is the
// backend's lion_update.
#include <cstdint>
#include <string_view>
#include <vector>

#include "normlab/backend/concept.hpp"
#include "normlab/optim/optimizer.hpp"

namespace normlab {

struct LionConfig {
  double beta1 = 0.9;
  double beta2 = 0.99;
  double weight_decay = 0.0;  // the matrix group only, as AdamW's
};

template <class T, class Backend = cpu_backend>
class Lion : public OptimizerShard<T> {
 public:
  using scalar_type = T;
  using backend = Backend;
  static constexpr std::string_view name = "lion";

  Lion(const ParamStore<T>& store, LionConfig cfg) : Lion(store, cfg, 0, store.size()) {}
  Lion(const ParamStore<T>& store, LionConfig cfg, std::size_t begin, std::size_t end)
      : OptimizerShard<T>(store, begin, end, "Lion"), cfg_(cfg) {
    require_beta(cfg.beta1, "--beta1");
    require_beta(cfg.beta2, "--beta2");
    require_non_negative(cfg.weight_decay, "--weight-decay");
    m_.assign(end - begin, T(0));
    this->group(ParamRole::matrix).weight_decay = cfg.weight_decay;
  }
  Lion(const ParamStore<T>& store, const OptimizerOptions& o, std::size_t begin, std::size_t end)
      : Lion(store, LionConfig{o.beta1.value_or(0.9), o.beta2.value_or(0.99), o.weight_decay}, begin, end) {}

  typename Backend::template vector<T>& exp_avg() { return m_; }
  std::vector<StateTensor<T>> state() { return {{"exp_avg", m_.data()}}; }
  Hyperparameters hyperparameters() const {
    return {{"beta1", exact_string(cfg_.beta1)}, {"beta2", exact_string(cfg_.beta2)},
            {"weight_decay", exact_string(cfg_.weight_decay)}};
  }

  void step(ParamStore<T>& store, double lr) { step(store, store.value(), store.grad(), lr); }
  void step(const ParamStore<T>& store, T* values, const T* grads, double lr) {
    this->begin_step(store);
    for (const ParamSpec& s : store.specs()) {
      if (!this->owns(s)) continue;
      const GroupSettings& g = this->group(s.role);
      const double glr = lr * g.lr_mult;
      Backend::lion_update(values + s.offset, m_.data() + (s.offset - this->shard_begin()), grads + s.offset,
                           static_cast<std::int64_t>(s.numel), 1.0 - glr * g.weight_decay, g.weight_decay != 0.0,
                           glr, cfg_.beta1, cfg_.beta2);
    }
  }

 private:
  LionConfig cfg_;
  typename Backend::template vector<T> m_;
};

}  // namespace normlab
