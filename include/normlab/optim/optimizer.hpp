#pragma once
// The optimizer contract. A training step, the driver, checkpoints and ZeRO-1
// take any type O that satisfies normlab::Optimizer:
//
//   using scalar_type = T;  using backend = B;        the numbers and memory it updates
//   static constexpr std::string_view name;           "adamw", recorded in checkpoints
//   void step(const ParamStore<T>&, T* values, const T* grads, double lr);
//                                                     one update of the shard's tensors
//   std::int64_t steps_taken() const;  void set_steps_taken(std::int64_t);
//   std::size_t shard_begin() const, shard_end() const;   [0, store.size()) unless ZeRO-1
//   std::vector<StateTensor<T>> state();              its state, one value per parameter of
//                                                     the shard each, in the backend's memory
//   Hyperparameters hyperparameters() const;          (key, exact text) pairs
//
// and, to be chosen by a trainer's --optimizer, a constructor
//   O(const ParamStore<T>&, const OptimizerOptions&, std::size_t begin, std::size_t end).
// The state tensors are what a checkpoint saves (optim/<state name>/<parameter>)
// and what ZeRO-1 gathers, so an optimizer whose state is all there resumes exactly.
// OptimizerShard below does the bookkeeping every built-in shares.
#include <array>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "normlab/core/error.hpp"
#include "normlab/core/exact.hpp"
#include "normlab/core/precision.hpp"
#include "normlab/nn/params.hpp"

namespace normlab {

// Per-role settings (ParamRole): every built-in optimizer reads them.
struct GroupSettings {
  double lr_mult = 1.0;
  double weight_decay = 0.0;
  double eps = 1e-8;
};

// One named part of an optimizer's state: one value per parameter of its shard.
template <class T>
struct StateTensor {
  std::string name;
  T* data = nullptr;
};

using Hyperparameters = std::vector<std::pair<std::string, std::string>>;

// The hyperparameters a trainer's flags give an optimizer. Unset optionals take
// the optimizer's own default (AdamW β = (0.9, 0.95), Lion's (0.9, 0.99)).
// `extra` carries --opt KEY=VALUE for a user's optimizer.
struct OptimizerOptions {
  std::string name = "adamw";
  std::optional<double> beta1, beta2;
  double eps = 1e-8;
  double weight_decay = 0.0;  // on the matrix group (2-D tensors)
  double momentum = 0.95;     // Muon
  std::int64_t ns_steps = 5;  // Muon: Newton–Schulz iterations
  bool nesterov = true;       // Muon
  Precision ns_precision = Precision::bf16;  // Muon: the Newton–Schulz products (the reference's bf16)
  double muon_lr = 0.02;      // Muon's hidden matrices: their peak rate (the schedule scales it as --lr's)
  double peak_lr = 0;         // the schedule's peak (--lr), for a group that runs at a rate of its own
  std::map<std::string, double> extra;
  // The keys an optimizer asked get() for, shared by copies of these options: a
  // trainer refuses an --opt key its optimizer never reads (unread_extra), where it
  // would otherwise be ignored without a word.
  std::shared_ptr<std::set<std::string>> asked = std::make_shared<std::set<std::string>>();

  // A named extra hyperparameter, or `fallback` when not given.
  double get(const std::string& key, double fallback) const {
    asked->insert(key);
    const auto it = extra.find(key);
    return it == extra.end() ? fallback : it->second;
  }
  // The --opt keys no get() asked for, once the optimizer is built.
  std::vector<std::string> unread_extra() const {
    std::vector<std::string> unread;
    for (const auto& [k, v] : extra)
      if (!asked->count(k)) unread.push_back(k);
    return unread;
  }
};

template <class O>
concept Optimizer =
    requires {
      typename O::scalar_type;
      typename O::backend;
      { O::name } -> std::convertible_to<std::string_view>;
    } &&
    requires(O& o, const O& co, const ParamStore<typename O::scalar_type>& store, typename O::scalar_type* values,
             const typename O::scalar_type* grads, double lr, std::int64_t t) {
      o.step(store, values, grads, lr);
      { co.steps_taken() } -> std::convertible_to<std::int64_t>;
      o.set_steps_taken(t);
      { co.shard_begin() } -> std::convertible_to<std::size_t>;
      { co.shard_end() } -> std::convertible_to<std::size_t>;
      { o.state() } -> std::same_as<std::vector<StateTensor<typename O::scalar_type>>>;
      { co.hyperparameters() } -> std::convertible_to<Hyperparameters>;
    };

// The same check member by member, so a user's optimizer that misses one reads
// one sentence naming it (instantiated by the driver and the checkpoint code).
template <class O>
constexpr bool check_optimizer() {
  static_assert(requires { typename O::scalar_type; }, "normlab optimizer: missing `using scalar_type = T;`");
  static_assert(requires { typename O::backend; }, "normlab optimizer: missing `using backend = B;`");
  static_assert(requires { { O::name } -> std::convertible_to<std::string_view>; },
                "normlab optimizer: missing `static constexpr std::string_view name`");
  if constexpr (requires { typename O::scalar_type; }) {
    using T = typename O::scalar_type;
    static_assert(requires(O& o, const ParamStore<T>& s, T* v, const T* g) { o.step(s, v, g, 1.0); },
                  "normlab optimizer: missing `void step(const ParamStore<T>&, T* values, const T* grads, double lr)`");
    static_assert(requires(const O& o) { { o.steps_taken() } -> std::convertible_to<std::int64_t>; },
                  "normlab optimizer: missing `std::int64_t steps_taken() const`");
    static_assert(requires(O& o) { o.set_steps_taken(std::int64_t(0)); },
                  "normlab optimizer: missing `void set_steps_taken(std::int64_t)`");
    static_assert(requires(const O& o) {
                    { o.shard_begin() } -> std::convertible_to<std::size_t>;
                    { o.shard_end() } -> std::convertible_to<std::size_t>;
                  },
                  "normlab optimizer: missing `std::size_t shard_begin() const` / `shard_end() const`");
    static_assert(requires(O& o) { { o.state() } -> std::same_as<std::vector<StateTensor<T>>>; },
                  "normlab optimizer: missing `std::vector<StateTensor<T>> state()`");
    static_assert(requires(const O& o) { { o.hyperparameters() } -> std::convertible_to<Hyperparameters>; },
                  "normlab optimizer: missing `Hyperparameters hyperparameters() const`");
  }
  return true;
}

// What every built-in shares: the shard [begin, end) of a store's parameters
// (bounds between tensors), one GroupSettings per role, the step count.
template <class T>
class OptimizerShard {
 public:
  OptimizerShard(const ParamStore<T>& store, std::size_t begin, std::size_t end, std::string_view who)
      : begin_(begin), end_(end), total_(store.size()), who_(who) {
    if (begin > end || end > store.size())
      throw Error(who_ + ": shard [" + std::to_string(begin) + ", " + std::to_string(end) + ") outside the " +
                  std::to_string(store.size()) + " parameters");
    for (const ParamSpec& s : store.specs()) {
      const std::size_t a = s.offset, b = s.offset + s.numel;
      if ((a < begin && b > begin) || (a < end && b > end))
        throw Error(who_ + ": shard [" + std::to_string(begin) + ", " + std::to_string(end) + ") cuts tensor " +
                    s.name);
    }
  }

  GroupSettings& group(ParamRole r) { return groups_[static_cast<int>(r)]; }
  const GroupSettings& group(ParamRole r) const { return groups_[static_cast<int>(r)]; }
  std::int64_t steps_taken() const { return t_; }
  void set_steps_taken(std::int64_t t) { t_ = t; }
  std::size_t shard_begin() const { return begin_; }
  std::size_t shard_end() const { return end_; }
  std::size_t shard_size() const { return end_ - begin_; }
  // Whether tensor s is this shard's to update.
  bool owns(const ParamSpec& s) const { return s.offset >= begin_ && s.offset < end_; }

 protected:
  // Refuses a store other than the one the state was built for; counts the step.
  void begin_step(const ParamStore<T>& store) {
    if (store.size() != total_)
      throw Error(who_ + "::step: parameter store has " + std::to_string(store.size()) +
                  " values but the optimizer state was built for " + std::to_string(total_));
    ++t_;
  }
  void set_eps(double eps) {
    for (auto& g : groups_) g.eps = eps;
  }

 private:
  std::array<GroupSettings, kParamRoles> groups_{};
  std::size_t begin_ = 0, end_ = 0, total_ = 0;
  std::int64_t t_ = 0;
  std::string who_;
};

// Refuses a β outside [0, 1), an ε that is not a positive finite number.
inline void require_beta(double b, const char* flag) {
  if (!(b >= 0.0 && b < 1.0)) throw Error(std::string(flag) + " must be in [0, 1), got " + exact_string(b));
}
inline void require_positive(double x, const char* flag) {
  if (!(x > 0.0) || !std::isfinite(x))
    throw Error(std::string(flag) + " must be a positive finite number, got " + exact_string(x));
}
inline void require_non_negative(double x, const char* flag) {
  if (!(x >= 0.0) || !std::isfinite(x))
    throw Error(std::string(flag) + " must be a non-negative finite number, got " + exact_string(x));
}

}  // namespace normlab
