#pragma once
// A tensor forward saves for backward, kept as the bf16 method keeps it. Under
// bf16 a saved activation that backward reads in float32 is read rounded to
// bf16 in every model of the run: stored in bf16 by a float32 model built under
// bf16 products (half the bytes, widened for its reader), rounded in place by a
// float32 model built before bf16 was set, and by the float64 oracle. Under
// fp32 (or on a backend without bf16 rounding) it is kept as it is.
#include <concepts>
#include <cstdint>
#include <type_traits>

#include "normlab/core/precision.hpp"
#include "normlab/tensor/tensor.hpp"

namespace normlab {

// A backend that rounds a model's T buffers to bf16 in place (the CPU backend).
template <class T, class Backend>
concept RoundsToBf16 = requires(T* t, std::int64_t n) {
  { Backend::stores_bf16() } -> std::convertible_to<bool>;
  Backend::round_to_bf16_in_place(t, n);
};

// Whether the bf16 method is on for a model of scalar T now: a float32 model's
// products read bf16 (Backend::stores_bf16()), a float64 model runs under
// Precision::bf16. Never on a backend that cannot round to bf16.
template <class T, class Backend>
bool bf16_method_now() {
  if constexpr (RoundsToBf16<T, Backend>) {
    if constexpr (std::is_same_v<T, float>) return Backend::stores_bf16();
    else return Backend::precision() == Precision::bf16;
  }
  return false;
}

// One saved tensor, kept by keep(x) in forward and read by read() in backward.
// Where keep() goes depends on how it keeps x (stored_in_bf16()):
//   stored (bound by bind_bf16): it copies x, so it must run before anything
//     writes over x (a site writing qa over q keeps q first);
//   otherwise: it may round x in place, so it must run after forward's last
//     reader of the unrounded x.
// A site that never writes over x may call it after its last reader in both.
template <class T, class Backend>
struct KeptForBackward {
  // Whether this backend can store it in bf16 (a float32 model built under bf16).
  static constexpr bool can_store = requires(bfloat16* h, const T* x, T* y, std::int64_t n) {
    Backend::round_to_bf16(h, x, n);
    Backend::widen_bf16(y, h, n);
  };
  bfloat16* stored = nullptr;  // (n) the values in bf16, where bound so
  T* values = nullptr;         // else the float buffer keep() was given

  // Stored in bf16 from here on: called where the model is built under bf16 products.
  void bind_bf16(Arena<T>& ar, std::int64_t n)
    requires can_store
  {
    stored = ar.take_bf16(static_cast<std::size_t>(n));
  }
  bool stored_in_bf16() const { return stored != nullptr; }
  // x (n values) kept for backward (where: above). Stored in bf16, x itself
  // stays as it is (scratch again for the caller).
  void keep(T* x, std::int64_t n) {
    if constexpr (can_store)
      if (stored) return Backend::round_to_bf16(stored, static_cast<const T*>(x), n);
    values = x;
    if constexpr (RoundsToBf16<T, Backend>)
      if (bf16_method_now<T, Backend>()) Backend::round_to_bf16_in_place(x, n);
  }
  // The kept values for a float32 reader: widened into scratch (n values) where stored in bf16.
  const T* read(T* scratch, std::int64_t n) const {
    if constexpr (can_store)
      if (stored) {
        Backend::widen_bf16(scratch, static_cast<const bfloat16*>(stored), n);
        return scratch;
      }
    return values;
  }
};

}  // namespace normlab
