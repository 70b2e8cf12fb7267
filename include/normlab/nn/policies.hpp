#pragma once
// Policies of the transformer block, as stateless tag types.
//
// A normalization scheme says where the model normalizes and which learned
// scales exist; a residual rule says how a sub-layer's output f joins the
// residual stream h. A model is Transformer<T, Scheme, Residual>: each ablation
// is one type. Invalid combinations fail to compile with a sentence naming the fix.
#include <concepts>
#include <string_view>
#include <type_traits>

namespace normlab {

template <class>
inline constexpr bool dependent_false = false;

// What happens to weight matrices after every optimizer step (on the master copy).
enum class WeightConstraint {
  none,       // plain GPT
  unit_norm,  // nGPT: every row/column along the embedding dimension set to norm 1
  bounded,    // anGPT: rows/columns with norm > 1 scaled back to 1
};

// ------------------------------------------------------------------ schemes
// Pre-norm GPT: RMSNorm (learned gain) before attention, before the MLP and
// before the LM head; softmax scale 1/√dk.
struct prenorm_rms {
  static constexpr std::string_view name = "prenorm_rms";
  static constexpr bool rmsnorm_inputs = true;   // x = RMSNorm(h) feeds each sub-layer; final RMSNorm
  static constexpr bool sphere_qk = false;       // q,k ← s_qk ⊙ N(q,k) per head after RoPE
  static constexpr bool sqrt_dk_softmax = false; // softmax scale √dk (else 1/√dk)
  static constexpr bool scaled_uv = false;       // MLP intermediate ⊙ s_uv·√d
  static constexpr bool scaled_logits = false;   // logits ⊙ s_z
  static constexpr WeightConstraint weights = WeightConstraint::none;
  static constexpr bool hidden_on_sphere = false;
};

// nGPT: hidden states and weights on the unit hypersphere, no RMSNorm anywhere.
struct sphere {
  static constexpr std::string_view name = "sphere";
  static constexpr bool rmsnorm_inputs = false;
  static constexpr bool sphere_qk = true;
  static constexpr bool sqrt_dk_softmax = true;
  static constexpr bool scaled_uv = true;
  static constexpr bool scaled_logits = true;
  static constexpr WeightConstraint weights = WeightConstraint::unit_norm;
  static constexpr bool hidden_on_sphere = true;
};

template <class S>
concept NormScheme = requires {
  { S::name } -> std::convertible_to<std::string_view>;
  { S::rmsnorm_inputs } -> std::convertible_to<bool>;
  { S::sphere_qk } -> std::convertible_to<bool>;
  { S::sqrt_dk_softmax } -> std::convertible_to<bool>;
  { S::scaled_uv } -> std::convertible_to<bool>;
  { S::scaled_logits } -> std::convertible_to<bool>;
  { S::weights } -> std::convertible_to<WeightConstraint>;
  { S::hidden_on_sphere } -> std::convertible_to<bool>;
};

// ------------------------------------------------------------------ residual rules
// Tags only; their math lives in nn/residual.hpp.
struct residual_add {          // h ← h + f
  static constexpr std::string_view name = "add";
  static constexpr bool learned_alpha = false;
  static constexpr bool retracts = false;  // output lies on the unit sphere
};
struct lerp_retract {          // h ← N(N(h) + |α| ⊙ (N(f) − N(h)))
  static constexpr std::string_view name = "lerp_retract";
  static constexpr bool learned_alpha = true;
  static constexpr bool retracts = true;
};

template <class R>
concept ResidualRule = requires {
  { R::name } -> std::convertible_to<std::string_view>;
  { R::learned_alpha } -> std::convertible_to<bool>;
  { R::retracts } -> std::convertible_to<bool>;
};

// A scheme that keeps hidden states on the sphere needs a rule that retracts to it.
template <NormScheme S, ResidualRule R>
constexpr bool check_block_policies() {
  static_assert(!S::hidden_on_sphere || R::retracts,
                "normlab: this normalization scheme keeps hidden states on the unit sphere; pair it with "
                "a retracting residual rule (lerp_retract), not residual_add");
  static_assert(S::hidden_on_sphere || !R::retracts,
                "normlab: a retracting residual rule needs a scheme whose hidden states live on the sphere "
                "(sphere); with prenorm_rms use residual_add");
  return true;
}

}  // namespace normlab
