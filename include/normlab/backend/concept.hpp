#pragma once
// What a backend is, for the generic layers (nn/, model/, optim/, dist/): they
// name no backend's folder, only this header. A backend is a type with static
// members (backend/cpu/backend.hpp and backend/cuda/cuda_backend.hpp are the
// two normlab has); the model checks the primitives it calls with
// check_model_backend<B, T>() first, one static_assert per primitive, so a
// backend of a user's that lacks one fails naming it. The ops a policy calls
// (rmsnorm_forward, rope_apply, swiglu_forward, …) are checked where the
// policy calls them.
//
// cpu_backend is declared here, defined in backend/cpu/backend.hpp: it is the
// default backend of the generic templates (Transformer<T, S, R>, AdamW<T>), so
// a program that uses the default includes that header (normlab.hpp does).
#include <concepts>
#include <cstdint>

namespace normlab {

struct cpu_backend;

// The primitives Transformer calls on every backend.
template <class B, class T>
concept ModelBackend = requires(T* y, const T* x, const std::int64_t* ids, std::int64_t n, T s) {
  { B::host_memory } -> std::convertible_to<bool>;
  typename B::template vector<T>;
  B::linear_forward(y, x, x, n, n, n, false, s);
  B::linear_backward(y, y, x, x, x, n, n, n, s);
  B::embedding_forward(y, ids, x, n, n);
  B::embedding_backward(y, ids, x, n, n);
  { B::cross_entropy(y, x, ids, n, n) } -> std::convertible_to<double>;
  B::attention_forward(y, y, x, x, x, n, n, n, n, s, n);
  B::attention_backward(y, y, y, x, x, x, x, x, x, n, n, n, n, s, n);
  B::attention_decode(y, y, x, x, x, n, n, n, s);
  B::attention_probs(y, x, x, x, n, n, n, n, s, n);
  B::rope_table(y, y, n, n, 1.0);
  B::check_model_limits(n, n, n, n, n);
  B::copy(y, x, n);
  B::add_into(y, x, n);
  B::fill(y, n, s);
  B::upload(y, x, n);
  B::download(y, x, n);
};

template <class B, class T>
constexpr bool check_model_backend() {
  static_assert(requires { sizeof(B); },
                "normlab backend: the backend type is incomplete; for the default cpu_backend include "
                "normlab/backend/cpu/backend.hpp (normlab/normlab.hpp does)");
  static_assert(requires { { B::host_memory } -> std::convertible_to<bool>; },
                "normlab backend: lacks static constexpr bool host_memory (true: parameters live in host arrays)");
  static_assert(requires { typename B::template vector<T>; },
                "normlab backend: lacks template <class U> using vector (its buffer type: assign, data, size)");
  static_assert(requires(T* y, const T* x, std::int64_t n, T s) { B::linear_forward(y, x, x, n, n, n, false, s); },
                "normlab backend: lacks linear_forward(Y, X, W, N, in, out, accumulate, alpha)");
  static_assert(requires(T* y, const T* x, std::int64_t n, T s) { B::linear_backward(y, y, x, x, x, n, n, n, s); },
                "normlab backend: lacks linear_backward(dX, dW, dY, X, W, N, in, out, alpha)");
  static_assert(requires(T* y, const T* x, const std::int64_t* ids, std::int64_t n) {
    B::embedding_forward(y, ids, x, n, n);
    B::embedding_backward(y, ids, x, n, n);
  }, "normlab backend: lacks embedding_forward(out, ids, wte, N, C) or embedding_backward(dwte, ids, dout, N, C)");
  static_assert(requires(T* y, const T* x, const std::int64_t* ids, std::int64_t n) {
    { B::cross_entropy(y, x, ids, n, n) } -> std::convertible_to<double>;
  }, "normlab backend: lacks double cross_entropy(dlogits, logits, targets, N, V)");
  static_assert(requires(T* y, const T* x, std::int64_t n, T s) { B::attention_forward(y, y, x, x, x, n, n, n, n, s, n); },
                "normlab backend: lacks attention_forward(y, lse, q, k, v, B, T, H, D, scale, window)");
  static_assert(requires(T* y, const T* x, std::int64_t n, T s) {
    B::attention_backward(y, y, y, x, x, x, x, x, x, n, n, n, n, s, n);
  }, "normlab backend: lacks attention_backward(dq, dk, dv, dy, y, lse, q, k, v, B, T, H, D, scale, window)");
  static_assert(requires(T* y, const T* x, std::int64_t n, T s) { B::attention_decode(y, y, x, x, x, n, n, n, s); },
                "normlab backend: lacks attention_decode(y, scratch, q, k_cache, v_cache, S, H, D, scale)");
  static_assert(requires(T* y, const T* x, std::int64_t n, T s) { B::attention_probs(y, x, x, x, n, n, n, n, s, n); },
                "normlab backend: lacks attention_probs(P, lse, q, k, B, T, H, D, scale, window)");
  static_assert(requires(T* y, std::int64_t n) { B::rope_table(y, y, n, n, 1.0); },
                "normlab backend: lacks rope_table(cos, sin, T, D, base)");
  static_assert(requires(std::int64_t n) { B::check_model_limits(n, n, n, n, n); },
                "normlab backend: lacks check_model_limits(max_batch, max_seq, heads, n_embd, head_dim)");
  static_assert(requires(T* y, const T* x, std::int64_t n, T s) {
    B::copy(y, x, n);
    B::add_into(y, x, n);
    B::fill(y, n, s);
  }, "normlab backend: lacks copy(dst, src, n), add_into(dst, src, n) or fill(dst, n, value)");
  static_assert(requires(T* y, const T* x, std::int64_t n) {
    B::upload(y, x, n);
    B::download(y, x, n);
  }, "normlab backend: lacks upload(device, host, n) or download(host, device, n)");
  return true;
}

}  // namespace normlab
