#pragma once
// Tensor core: an owning row-major tensor, a non-owning view, and an arena that
// hands out every activation buffer of a model from one allocation sized once.
//
// Shapes are int64 (as in safetensors); data is always contiguous row-major.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "normlab/core/aligned.hpp"
#include "normlab/core/error.hpp"
#include "normlab/core/precision.hpp"

namespace normlab {

using Shape = std::vector<std::int64_t>;

inline std::int64_t numel_of(const Shape& s) {
  return std::accumulate(s.begin(), s.end(), std::int64_t{1}, std::multiplies<>{});
}

// Non-owning view over a contiguous buffer. Cheap to copy; never frees.
template <class T>
struct TensorView {
  T* data = nullptr;
  Shape shape;

  std::int64_t numel() const { return numel_of(shape); }
  std::int64_t dim(std::size_t i) const { return shape.at(i); }
  std::span<T> span() const { return {data, static_cast<std::size_t>(numel())}; }
  T& operator[](std::int64_t i) const { return data[i]; }
};

// Owning tensor. Used outside the hot path (I/O, tests, tools); the model itself
// keeps parameters in one flat buffer and activations in an Arena.
template <class T>
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Shape shape, T fill = T{})
      : shape_(std::move(shape)), data_(static_cast<std::size_t>(numel_of(shape_)), fill) {}

  const Shape& shape() const { return shape_; }
  std::int64_t numel() const { return static_cast<std::int64_t>(data_.size()); }
  T* data() { return data_.data(); }
  const T* data() const { return data_.data(); }
  T& operator[](std::int64_t i) { return data_[static_cast<std::size_t>(i)]; }
  const T& operator[](std::int64_t i) const { return data_[static_cast<std::size_t>(i)]; }
  TensorView<T> view() { return {data_.data(), shape_}; }
  TensorView<const T> view() const { return {data_.data(), shape_}; }
  std::vector<T>& storage() { return data_; }
  const std::vector<T>& storage() const { return data_; }

 private:
  Shape shape_;
  std::vector<T> data_;
};

// Bump allocator over one buffer. A model lays out its buffers twice with the
// same code: once with a counting arena (no memory) to learn the total, then
// for real. After that, nothing in a training step allocates. The buffer is
// the arena's own (host memory) or one a backend allocated (device memory):
// the arena only hands out pointers into it and never reads or writes them.
template <class T>
class Arena {
 public:
  // Counting mode: take() returns nullptr and only adds up sizes.
  Arena() = default;
  explicit Arena(std::size_t capacity) : buf_(capacity), base_(buf_.data()), capacity_(capacity), counting_(false) {}
  // Over `capacity` elements at `base`, owned by the caller (a backend's memory).
  Arena(T* base, std::size_t capacity) : base_(base), capacity_(capacity), counting_(false) {}
  Arena(Arena&& o) noexcept { *this = std::move(o); }
  Arena& operator=(Arena&& o) noexcept {
    const bool owned = o.base_ == o.buf_.data();
    buf_ = std::move(o.buf_);
    base_ = owned ? buf_.data() : o.base_;
    capacity_ = o.capacity_;
    used_ = o.used_;
    counting_ = o.counting_;
    return *this;
  }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  T* take(std::size_t n) {
    const std::size_t at = used_;
    used_ += round_up(n);
    if (counting_) return nullptr;
    if (used_ > capacity_)
      throw Error("normlab::Arena: layout asked for more than it was sized for (internal error)");
    return base_ + at;
  }
  // n bf16 values (activations a bf16 run keeps in bf16), taken in the arena's
  // own units and as aligned as any other buffer.
  bfloat16* take_bf16(std::size_t n) {
    return reinterpret_cast<bfloat16*>(take((n * sizeof(bfloat16) + sizeof(T) - 1) / sizeof(T)));
  }
  std::size_t used() const { return used_; }
  bool counting() const { return counting_; }

 private:
  // 64-byte alignment of every buffer keeps SIMD loads aligned and avoids
  // false sharing between buffers written by different threads.
  static std::size_t round_up(std::size_t n) {
    constexpr std::size_t k = 64 / sizeof(T) > 0 ? 64 / sizeof(T) : 1;
    return (n + k - 1) / k * k;
  }
  aligned_vector<T> buf_;
  T* base_ = nullptr;
  std::size_t capacity_ = 0;
  std::size_t used_ = 0;
  bool counting_ = true;
};

}  // namespace normlab
