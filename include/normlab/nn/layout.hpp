#pragma once
// Where the block normalizes, beyond pre-norm (a scheme's input_norm, today's
// default). The three layouts of the literature, each a choice of policies:
//   pre-norm       h ← h + f(Norm(h))           input_norm = Norm, residual_add
//   post-norm      h ← Norm(h + f(h))           input_norm = no_norm, residual post_norm<Norm>
//                  (the original Transformer and BERT; no final_norm needed: the
//                  stream leaves every block normalized)
//   sandwich /     h ← h + Norm_o(f(Norm_i(h)))  input_norm = Norm_i, output_norm = Norm_o
//   Peri-LN
// post_norm<Norm> is a residual rule holding a norm site (any norm policy,
// nn/norms.hpp or the user's): out = Norm(h + f), its parameters named
// "<prefix>post_<where>…" (where = attn | mlp).
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "normlab/nn/context.hpp"
#include "normlab/nn/norms.hpp"
#include "normlab/nn/params.hpp"
#include "normlab/nn/scale.hpp"
#include "normlab/tensor/tensor.hpp"

namespace normlab {

namespace detail {
// "post_norm(<Norm::name>)" as a constexpr string_view, so the architecture a
// checkpoint records tells post_norm<layer_norm> from post_norm<rms_norm>.
template <class Norm>
struct post_norm_name {
  static constexpr std::string_view head = "post_norm(", inner = Norm::name, tail = ")";
  static constexpr std::size_t size = head.size() + inner.size() + tail.size();
  static constexpr std::array<char, size> chars = [] {
    std::array<char, size> a{};
    std::size_t k = 0;
    for (char ch : head) a[k++] = ch;
    for (char ch : inner) a[k++] = ch;
    for (char ch : tail) a[k++] = ch;
    return a;
  }();
  static constexpr std::string_view value{chars.data(), size};
};
}  // namespace detail

template <class Norm>
struct post_norm {
  static constexpr std::string_view name = detail::post_norm_name<Norm>::value;
  static constexpr bool learned_alpha = false;
  static constexpr bool retracts = false;
  static constexpr bool nu_scaled = false;
  template <class T, class Backend, ScaleKind = ScaleKind::vector>
  struct site {
    typename Norm::template site<T, Backend> norm;
    T* sum = nullptr;  // (N,C) h + f, the norm's input
    T* ds = nullptr;   // (N,C) its gradient
    void declare(ParamStore<T>& p, const std::string& prefix, std::string_view where, const ModelConfig& cfg) {
      norm.declare(p, prefix, "post_" + std::string(where), cfg);
    }
    void bind(Arena<T>& ar, std::int64_t N, std::int64_t C) {
      sum = ar.take(N * C);
      ds = ar.take(N * C);
      norm.bind(ar, N, C);
    }
    void forward(StepContext<T>& c, T* out, const T* h, const T* f, std::int64_t N, std::int64_t C) {
      Backend::copy(sum, h, N * C);
      Backend::add_into(sum, f, N * C);
      Backend::copy(out, norm.forward(c, sum, N, C), N * C);
    }
    // d(h + f) = Norm's backward of dout; both inputs get it (dh may alias dout:
    // dout is read once, before dh is written).
    void backward(StepContext<T>& c, T* dh, T* df, const T* dout, const T* /*out*/, const T* /*h*/,
                  const T* /*f*/, std::int64_t N, std::int64_t C) {
      const T* d = norm.backward(c, ds, dout, sum, N, C);
      Backend::copy(df, d, N * C);
      if (dh != d) Backend::copy(dh, d, N * C);
    }
  };
};

}  // namespace normlab
