#pragma once
// AnyOptimizer<T, Backend>: any normlab::Optimizer behind one type, so a
// trainer's loop, checkpoints and ZeRO-1 are compiled once whatever
// --optimizer chooses (a virtual call a step costs nothing next to the step).
// make_optimizer_named builds the one called `name` among the built-ins and a
// user's own types.
#include <concepts>
#include <memory>
#include <type_traits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "normlab/core/error.hpp"
#include "normlab/optim/adamw.hpp"
#include "normlab/optim/lion.hpp"
#include "normlab/optim/muon.hpp"
#include "normlab/optim/optimizer.hpp"

namespace normlab {

template <class T, class Backend>
class AnyOptimizer {
 public:
  using scalar_type = T;
  using backend = Backend;

  template <class O>
    requires(!std::same_as<std::remove_cvref_t<O>, AnyOptimizer>)
  explicit AnyOptimizer(O o) : self_(std::make_unique<Held<O>>(std::move(o))) {
    static_assert(check_optimizer<O>() && Optimizer<O>);
  }

  std::string_view kind() const { return self_->kind(); }
  void step(const ParamStore<T>& store, T* values, const T* grads, double lr) {
    self_->step(store, values, grads, lr);
  }
  std::int64_t steps_taken() const { return self_->steps_taken(); }
  void set_steps_taken(std::int64_t t) { self_->set_steps_taken(t); }
  std::size_t shard_begin() const { return self_->shard_begin(); }
  std::size_t shard_end() const { return self_->shard_end(); }
  std::vector<StateTensor<T>> state() { return self_->state(); }
  Hyperparameters hyperparameters() const { return self_->hyperparameters(); }
  // The optimizer inside, when it is an O (else null).
  template <class O>
  O* get() {
    auto* h = dynamic_cast<Held<O>*>(self_.get());
    return h ? &h->o : nullptr;
  }

 private:
  struct Base {
    virtual ~Base() = default;
    virtual std::string_view kind() const = 0;
    virtual void step(const ParamStore<T>&, T*, const T*, double) = 0;
    virtual std::int64_t steps_taken() const = 0;
    virtual void set_steps_taken(std::int64_t) = 0;
    virtual std::size_t shard_begin() const = 0;
    virtual std::size_t shard_end() const = 0;
    virtual std::vector<StateTensor<T>> state() = 0;
    virtual Hyperparameters hyperparameters() const = 0;
  };
  template <class O>
  struct Held final : Base {
    O o;
    explicit Held(O x) : o(std::move(x)) {}
    std::string_view kind() const override { return O::name; }
    void step(const ParamStore<T>& s, T* v, const T* g, double lr) override { o.step(s, v, g, lr); }
    std::int64_t steps_taken() const override { return o.steps_taken(); }
    void set_steps_taken(std::int64_t t) override { o.set_steps_taken(t); }
    std::size_t shard_begin() const override { return o.shard_begin(); }
    std::size_t shard_end() const override { return o.shard_end(); }
    std::vector<StateTensor<T>> state() override { return o.state(); }
    Hyperparameters hyperparameters() const override { return o.hyperparameters(); }
  };
  std::unique_ptr<Base> self_;
};

// The name an optimizer records in a checkpoint: O::name, or an AnyOptimizer's kind().
template <class O>
std::string optimizer_name_of(const O& o) {
  if constexpr (requires { o.kind(); }) return std::string(o.kind());
  else return std::string(O::name);
}

// A list of optimizer templates (each template <class T, class Backend>) a
// trainer offers beside the built-ins.
template <template <class, class> class... Opts>
struct optimizer_list {};

using builtin_optimizers = optimizer_list<AdamW, Lion, Muon>;

namespace detail {
template <class T, class Backend, template <class, class> class... Opts>
std::string optimizer_names(optimizer_list<Opts...>) {
  std::string out;
  ((out += (out.empty() ? "" : ", ") + std::string(Opts<T, Backend>::name)), ...);
  return out;
}
}  // namespace detail

// Whether `List` has an optimizer called `name` (the trainers check --optimizer
// before anything is loaded; make_optimizer_named refuses the same names).
template <class T, class Backend, template <class, class> class... Opts>
bool has_optimizer_named(optimizer_list<Opts...>, std::string_view name) {
  return ((Opts<T, Backend>::name == name) || ...);
}

template <template <class, class> class O>
struct is_builtin_optimizer : std::false_type {};
template <>
struct is_builtin_optimizer<AdamW> : std::true_type {};
template <>
struct is_builtin_optimizer<Lion> : std::true_type {};
template <>
struct is_builtin_optimizer<Muon> : std::true_type {};

namespace detail {
// The built-in optimizer called o.name. Its own function (not inline), so that
// a library can compile it once for a T and backend (driver.hpp declares the
// CPU's float one extern) and a trainer with a list of its own compiles only
// its own optimizers.
template <class T, class Backend>
AnyOptimizer<T, Backend> make_builtin_optimizer(const ParamStore<T>& store, const OptimizerOptions& o,
                                                std::size_t begin, std::size_t end);
}  // namespace detail

// The optimizer called o.name among `List`, over [begin, end) of the store;
// an unknown name is refused naming the known ones.
template <class T, class Backend, template <class, class> class... Opts>
AnyOptimizer<T, Backend> make_optimizer_named(optimizer_list<Opts...> list, const ParamStore<T>& store,
                                              const OptimizerOptions& o, std::size_t begin, std::size_t end) {
  std::unique_ptr<AnyOptimizer<T, Backend>> made;
  auto try_one = [&]<template <class, class> class Opt>() {
    using O = Opt<T, Backend>;
    if constexpr (is_builtin_optimizer<Opt>::value) {
      if (!made && O::name == o.name)
        made = std::make_unique<AnyOptimizer<T, Backend>>(detail::make_builtin_optimizer<T, Backend>(store, o, begin, end));
    } else {
      static_assert(check_optimizer<O>());
      static_assert(std::is_constructible_v<O, const ParamStore<T>&, const OptimizerOptions&, std::size_t, std::size_t>,
                    "normlab optimizer: a trainer's --optimizer needs the constructor "
                    "O(const ParamStore<T>&, const OptimizerOptions&, std::size_t begin, std::size_t end)");
      if (!made && O::name == o.name) made = std::make_unique<AnyOptimizer<T, Backend>>(O(store, o, begin, end));
    }
  };
  (try_one.template operator()<Opts>(), ...);
  if (!made)
    throw Error("--optimizer " + o.name + ": unknown optimizer (known: " +
                detail::optimizer_names<T, Backend>(list) + ")");
  return std::move(*made);
}

namespace detail {
template <class T, class Backend>
AnyOptimizer<T, Backend> make_builtin_optimizer(const ParamStore<T>& store, const OptimizerOptions& o,
                                                std::size_t begin, std::size_t end) {
  if (o.name == AdamW<T, Backend>::name) return AnyOptimizer<T, Backend>(AdamW<T, Backend>(store, o, begin, end));
  if (o.name == Lion<T, Backend>::name) return AnyOptimizer<T, Backend>(Lion<T, Backend>(store, o, begin, end));
  if (o.name == Muon<T, Backend>::name) return AnyOptimizer<T, Backend>(Muon<T, Backend>(store, o, begin, end));
  throw Error("--optimizer " + o.name + ": not a built-in optimizer (known: " +
              optimizer_names<T, Backend>(builtin_optimizers{}) + ")");
}
}  // namespace detail

}  // namespace normlab
