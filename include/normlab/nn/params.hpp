#pragma once
// Parameters of a model live in one flat buffer (and their gradients in a
// second one of the same layout). Each named tensor is a ParamSpec: its
// reference name, shape, offset, optimizer role and weight-constraint axis.
// One buffer makes the optimizer, the global gradient norm and checkpoints
// single loops, and keeps the master copy in exactly one place.
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "normlab/core/error.hpp"
#include "normlab/tensor/tensor.hpp"

namespace normlab {

// Optimizer parameter groups: each has its own lr multiplier, weight decay and ε.
enum class ParamRole : int {
  matrix = 0,  // 2-D weights (decayed in GPT, following PyTorch AdamW practice)
  gain = 1,    // norm gains and the linear layers' biases (vectors)
  alpha = 2,   // nGPT/anGPT learned residual steps α
  scale = 3,   // s_qk, s_uv, s_z
};
inline constexpr int kParamRoles = 4;
inline const char* role_name(ParamRole r) {
  switch (r) {
    case ParamRole::matrix: return "matrix";
    case ParamRole::gain: return "gain";
    case ParamRole::alpha: return "alpha";
    case ParamRole::scale: return "scale";
  }
  return "?";
}

// Along which axis a matrix is normalized so that the embedding dimension d is
// the one constrained: rows of W[out, d], columns of W[d, in].
enum class NormAxis { none, rows, cols };

// How a tensor starts (Transformer::init): N(0, value²) or every entry = value.
// The declaring policy says it, so the model never matches parameter names.
struct ParamInit {
  enum class Kind { normal, constant };
  Kind kind = Kind::constant;
  double value = 0;  // std for normal, the entry for constant
  static ParamInit normal(double stddev) { return {Kind::normal, stddev}; }
  static ParamInit constant(double v) { return {Kind::constant, v}; }
};

struct ParamSpec {
  std::string name;  // the reference implementation's name
  Shape shape;
  std::size_t offset = 0;
  std::size_t numel = 0;
  ParamRole role = ParamRole::matrix;
  NormAxis axis = NormAxis::none;
  ParamInit init;
  // A matrix with the vocabulary on one side (the embedding, the head): an
  // optimizer may treat it apart from the hidden matrices (Muon does).
  bool vocabulary = false;
};

template <class T>
class ParamStore {
 public:
  // Returns the offset of the new tensor; call finalize() once all are added.
  std::size_t add(std::string name, Shape shape, ParamRole role, NormAxis axis = NormAxis::none,
                  ParamInit init = ParamInit::constant(0)) {
    ParamSpec s;
    s.name = std::move(name);
    s.shape = std::move(shape);
    s.numel = static_cast<std::size_t>(numel_of(s.shape));
    s.offset = total_;
    s.role = role;
    s.axis = axis;
    s.init = init;
    total_ += s.numel;
    specs_.push_back(std::move(s));
    return specs_.back().offset;
  }
  // Marks the tensor at `offset` as vocabulary-side (ParamSpec::vocabulary).
  void mark_vocabulary(std::size_t offset) {
    for (auto& s : specs_)
      if (s.offset == offset) {
        s.vocabulary = true;
        return;
      }
    throw Error("mark_vocabulary: no tensor starts at offset " + std::to_string(offset));
  }
  void finalize() {
    value_.assign(total_, T(0));
    grad_.assign(total_, T(0));
    scratch_.assign(scratch_size(), T(0));
  }
  // Elements of scratch finalize() allocates: the widest dimension of any tensor.
  std::size_t scratch_size() const {
    std::size_t widest = 0;
    for (const auto& s : specs_)
      for (auto d : s.shape) widest = std::max(widest, static_cast<std::size_t>(d));
    return widest;
  }
  // One row/column's worth of scratch (the widest dimension), for in-place passes.
  aligned_vector<T>& scratch() { return scratch_; }

  const std::vector<ParamSpec>& specs() const { return specs_; }
  const ParamSpec& spec(const std::string& name) const {
    for (const auto& s : specs_)
      if (s.name == name) return s;
    throw Error("no parameter named '" + name + "' in this model");
  }
  bool has(const std::string& name) const {
    for (const auto& s : specs_)
      if (s.name == name) return true;
    return false;
  }
  std::size_t size() const { return total_; }
  T* value(std::size_t offset = 0) { return value_.data() + offset; }
  const T* value(std::size_t offset = 0) const { return value_.data() + offset; }
  T* grad(std::size_t offset = 0) { return grad_.data() + offset; }
  const T* grad(std::size_t offset = 0) const { return grad_.data() + offset; }
  aligned_vector<T>& values() { return value_; }
  const aligned_vector<T>& values() const { return value_; }
  aligned_vector<T>& grads() { return grad_; }
  const aligned_vector<T>& grads() const { return grad_; }
  // The model's step zeroes its gradients through its backend's fill (in
  // parallel on the CPU); this is the store's own, for code that holds a store.
  void zero_grad() { std::fill(grad_.begin(), grad_.end(), T(0)); }

 private:
  std::vector<ParamSpec> specs_;
  aligned_vector<T> value_, grad_, scratch_;
  std::size_t total_ = 0;
};

}  // namespace normlab
