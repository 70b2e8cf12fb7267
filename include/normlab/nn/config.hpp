#pragma once
// The model's size and its numeric constants (what checkpoints record).
#include <cstdint>
#include <string>

#include "normlab/core/error.hpp"

namespace normlab {

struct ModelConfig {
  std::int64_t vocab_size = 256;
  std::int64_t n_embd = 64;
  std::int64_t n_head = 4;
  std::int64_t n_layer = 2;
  // Std of the initial weights; also the re-parameterisation constant of the
  // nGPT scales (stored value × init/base_scale). The reference uses 0.02 for
  // GPT and 1/√d for nGPT; 0 means "the scheme's default".
  double base_scale = 0;
  double rmsnorm_eps = 1e-6;
  double rope_base = 10000.0;
  double alpha_init = 0.05;  // effective initial α of nGPT's residual steps
  double sqk_init = 1.0;
  double suv_init = 1.0;
  double sz_init = 1.0;
  // anGPT (scalar_factors): multipliers on the derived constant factors, for
  // the 0.5×/2× sensitivity ablation (docs/angpt.md).
  double angpt_attn_factor_mult = 1.0;
  double angpt_mlp_factor_mult = 1.0;

  std::int64_t head_dim() const { return n_embd / n_head; }
  void validate() const {
    auto bad = [](const std::string& m) { throw Error("model config: " + m); };
    if (vocab_size <= 0) bad("vocab_size must be positive");
    if (n_embd <= 0 || n_head <= 0 || n_layer <= 0) bad("n_embd, n_head and n_layer must be positive");
    if (n_embd % n_head != 0)
      bad("n_embd (" + std::to_string(n_embd) + ") must be divisible by n_head (" + std::to_string(n_head) + ")");
    if (head_dim() % 2 != 0) bad("head dimension n_embd/n_head must be even for RoPE");
  }
};

}  // namespace normlab
