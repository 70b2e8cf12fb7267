#pragma once
// A user's own optimizer, outside normlab: SGD with Nesterov momentum
// (PyTorch's torch.optim.SGD(nesterov=True) order):
//   p ← p·(1 − lr·wd)                    (matrices, when --weight-decay > 0)
//   b ← μ·b + (1 − dampening)·g
//   p ← p − lr·(g + μ·b)
// It satisfies normlab::Optimizer (names, step, state, hyperparameters), so
// normlab's driver trains with it (--optimizer sgd, --momentum μ,
// --opt dampening=0.1), checkpoints its momentum buffer as
// optim/momentum_buffer/<parameter> and resumes exactly; ZeRO-1 shards it.
// Host loops: it runs on backends whose memory is the host's (the CPU's).
#include <cstdint>
#include <string_view>
#include <vector>

#include <normlab/optim/optimizer.hpp>

namespace my {

template <class T, class Backend>
class sgd_nesterov : public normlab::OptimizerShard<T> {
  static_assert(Backend::host_memory, "my::sgd_nesterov updates with host loops: a host-memory backend only");

 public:
  using scalar_type = T;
  using backend = Backend;
  static constexpr std::string_view name = "sgd";

  sgd_nesterov(const normlab::ParamStore<T>& store, const normlab::OptimizerOptions& o, std::size_t begin,
               std::size_t end)
      : normlab::OptimizerShard<T>(store, begin, end, "sgd"),
        momentum_(o.momentum),
        dampening_(o.get("dampening", 0.0)),
        weight_decay_(o.weight_decay) {
    normlab::require_beta(momentum_, "--momentum");
    normlab::require_beta(dampening_, "--opt dampening");
    buf_.assign(end - begin, T(0));
    this->group(normlab::ParamRole::matrix).weight_decay = weight_decay_;
  }

  std::vector<normlab::StateTensor<T>> state() { return {{"momentum_buffer", buf_.data()}}; }
  normlab::Hyperparameters hyperparameters() const {
    return {{"momentum", normlab::exact_string(momentum_)},
            {"dampening", normlab::exact_string(dampening_)},
            {"weight_decay", normlab::exact_string(weight_decay_)}};
  }

  void step(const normlab::ParamStore<T>& store, T* values, const T* grads, double lr) {
    this->begin_step(store);
    const T mu = T(momentum_), damp = T(1.0 - dampening_);
    for (const normlab::ParamSpec& s : store.specs()) {
      if (!this->owns(s)) continue;
      const normlab::GroupSettings& g = this->group(s.role);
      const T glr = T(lr * g.lr_mult), decay = T(1.0 - lr * g.lr_mult * g.weight_decay);
      T* p = values + s.offset;
      T* b = buf_.data() + (s.offset - this->shard_begin());
      const T* gr = grads + s.offset;
      for (std::size_t i = 0; i < s.numel; ++i) {
        if (g.weight_decay != 0.0) p[i] *= decay;
        b[i] = mu * b[i] + damp * gr[i];
        p[i] -= glr * (gr[i] + mu * b[i]);
      }
    }
  }

 private:
  double momentum_, dampening_, weight_decay_;
  typename Backend::template vector<T> buf_;
};

}  // namespace my
