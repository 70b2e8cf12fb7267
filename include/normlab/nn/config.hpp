#pragma once
// The model's size and its numeric constants (what checkpoints record).
#include <cstdint>
#include <string>

#include "normlab/core/error.hpp"

namespace normlab {

// Where a token's position enters the model. rope: rotary embeddings on q and k
// (base rope_base); none: no positional signal (NoPE: causal masking alone);
// learned: a learned absolute table (n_positions, C) added to the token
// embedding (GPT-2), which caps the context at n_positions.
enum class Positions : int { rope = 0, none = 1, learned = 2 };
inline const char* positions_name(Positions p) {
  switch (p) {
    case Positions::rope: return "rope";
    case Positions::none: return "none";
    case Positions::learned: return "learned";
  }
  return "?";
}
// "rope" | "none" | "learned" -> the enum; false for any other text.
inline bool parse_positions(const std::string& s, Positions& out) {
  for (Positions p : {Positions::rope, Positions::none, Positions::learned})
    if (s == positions_name(p)) {
      out = p;
      return true;
    }
  return false;
}

struct ModelConfig {
  std::int64_t vocab_size = 256;
  std::int64_t n_embd = 64;
  std::int64_t n_head = 4;
  std::int64_t n_layer = 2;
  // The attention's and the MLP's shapes. 0 means the classic default, so a
  // config written before these existed builds the same model:
  //   n_kv_heads   key/value heads (0: n_head, multi-head attention); fewer
  //                than n_head is grouped-query attention (1: multi-query),
  //                query head h reading key/value head h / (n_head / n_kv_heads)
  //   d_ff         the MLP's hidden width F (0: 4·n_embd)
  //   attn_window  causal sliding window W: position t attends to t−W+1 … t
  //                (0: every earlier position)
  std::int64_t n_kv_heads = 0;
  std::int64_t d_ff = 0;
  std::int64_t attn_window = 0;
  // Positions and biases (the classic model: RoPE, no biases).
  //   n_positions  rows of the learned position table (positions = learned only)
  //   bias         a bias on every linear layer of the blocks (q, k, v, the
  //                attention's output, both MLP projections); the LM head has none
  Positions positions = Positions::rope;
  std::int64_t n_positions = 0;
  bool bias = false;
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
  // anGPT (approx_sphere): multipliers on the derived constant factors, for
  // the 0.5×/2× sensitivity ablation (docs/angpt.md).
  double angpt_attn_factor_mult = 1.0;
  double angpt_mlp_factor_mult = 1.0;
  double angpt_residual_factor_mult = 1.0;  // multiplies ν(α) of a ν-scaled residual (lerp_nu)

  std::int64_t head_dim() const { return n_embd / n_head; }
  std::int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_head; }
  std::int64_t kv_dim() const { return kv_heads() * head_dim(); }  // width of k and v
  std::int64_t ff_dim() const { return d_ff > 0 ? d_ff : 4 * n_embd; }
  bool grouped_kv() const { return kv_heads() != n_head; }
  void validate() const {
    auto bad = [](const std::string& m) { throw Error("model config: " + m); };
    if (vocab_size <= 0) bad("vocab_size must be positive");
    if (n_embd <= 0 || n_head <= 0 || n_layer <= 0) bad("n_embd, n_head and n_layer must be positive");
    if (n_embd % n_head != 0)
      bad("n_embd (" + std::to_string(n_embd) + ") must be divisible by n_head (" + std::to_string(n_head) + ")");
    if (head_dim() % 2 != 0) bad("head dimension n_embd/n_head must be even for RoPE");
    if (n_kv_heads < 0 || n_kv_heads > n_head || n_head % kv_heads() != 0)
      bad("n_kv_heads (" + std::to_string(n_kv_heads) + ") must divide n_head (" + std::to_string(n_head) +
          ") (0: as many as n_head)");
    if (d_ff < 0) bad("d_ff (" + std::to_string(d_ff) + ") must be positive (0: 4·n_embd)");
    if (attn_window < 0) bad("attn_window (" + std::to_string(attn_window) + ") must be positive (0: full causal)");
    if (positions == Positions::learned && n_positions <= 0)
      bad("positions = learned needs n_positions > 0 (the rows of the position table), got " +
          std::to_string(n_positions));
    if (positions != Positions::learned && n_positions != 0)
      bad("n_positions (" + std::to_string(n_positions) + ") is for positions = learned only (positions = " +
          positions_name(positions) + ")");
  }
};

}  // namespace normlab
