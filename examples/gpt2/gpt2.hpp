// GPT-2's block as a user defines it, outside normlab: LayerNorm with gain and
// bias before each sub-layer and before the head, a plain GELU (tanh) MLP of
// width 4C, a bias on every linear layer of the blocks, learned absolute
// positions, multi-head attention with softmax scale 1/√dk. Beside it, nGPT on
// the same attention and MLP policies (learned positions, plain GELU MLP):
// only the normalization differs. Only normlab's public policies and the
// variant-tag contract are used.
#pragma once
#include <string_view>

#include <normlab/normlab.hpp>

namespace my {

struct gpt2_scheme : normlab::prenorm_rms {
  static constexpr std::string_view name = "gpt2";
  using input_norm = normlab::layer_norm;
  using final_norm = normlab::layer_norm;
  using mlp_activation = normlab::gelu_tanh;
};

struct ngpt_gpt2_scheme : normlab::sphere {
  static constexpr std::string_view name = "ngpt_gpt2";
  using mlp_activation = normlab::gelu_tanh;
};

// GPT-2's architecture on top of normlab's config: learned positions (the
// driver sizes the table to --seq), biases, LayerNorm's ε of 1e-5.
inline void gpt2_shape(normlab::ModelConfig& c) {
  c.positions = normlab::Positions::learned;
  c.bias = true;
  c.rmsnorm_eps = 1e-5;
}

struct gpt2 {
  static constexpr std::string_view name = "gpt2";
  static constexpr std::string_view isolates = "GPT-2: LayerNorm+bias, GELU MLP 4C with biases, learned positions";
  static constexpr double default_lr = 3e-3;
  static constexpr std::string_view default_lr_source = "GPT's rate (examples/gpt2: not swept)";
  using scheme = gpt2_scheme;
  using residual = normlab::residual_add;
  template <class T, class Backend = normlab::cpu_backend>
  using model = normlab::Transformer<T, scheme, residual, Backend>;
  static void configure(normlab::ModelConfig& c) { gpt2_shape(c); }
};

struct ngpt_gpt2 {
  static constexpr std::string_view name = "ngpt_gpt2";
  static constexpr std::string_view isolates = "nGPT on GPT-2's positions and plain GELU MLP (no biases)";
  static constexpr double default_lr = 1e-2;
  static constexpr std::string_view default_lr_source = "nGPT's rate (examples/gpt2: not swept)";
  using scheme = ngpt_gpt2_scheme;
  using residual = normlab::lerp_retract;
  template <class T, class Backend = normlab::cpu_backend>
  using model = normlab::Transformer<T, scheme, residual, Backend>;
  static void configure(normlab::ModelConfig& c) { c.positions = normlab::Positions::learned; }
};

}  // namespace my
