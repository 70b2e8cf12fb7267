#pragma once
// 64-byte-aligned storage for every long-lived numeric buffer (parameters,
// gradients, optimizer moments, activations).
//
// Why it matters for exactness, not only speed: Eigen's vectorized loops peel
// scalar iterations until the destination is packet-aligned, and with FMA
// contraction the scalar and packet paths can round the same element
// differently. With bases aligned to the widest packet (64 bytes, AVX-512),
// which elements take which path depends only on offsets within the buffer,
// never on where the heap happened to place it, so a step gives the same bits
// in any process (a resumed run continues exactly).
#include <cstddef>
#include <new>
#include <vector>

namespace normlab {

inline constexpr std::size_t kBufferAlignment = 64;

template <class T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() noexcept = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(kBufferAlignment)));
  }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t(kBufferAlignment)); }
  template <class U>
  bool operator==(const AlignedAllocator<U>&) const noexcept { return true; }
};

template <class T>
using aligned_vector = std::vector<T, AlignedAllocator<T>>;

}  // namespace normlab
