// A modern decoder block as a user defines it, outside normlab: grouped-query
// attention (8 query heads share 2 key/value heads), a causal sliding window
// of 16 positions, a plain ReLU² MLP (no gate: W_fc is F × C), QK-norm, no
// biases. Only normlab's public policies and the variant-tag contract are used.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string_view>

#include <normlab/normlab.hpp>

namespace my {

// GPT+ (RMSNorm pre-norm, RMSNorm with gain on q and k) with ReLU² in the MLP.
struct modern_scheme : normlab::prenorm_rms_qknorm {
  static constexpr std::string_view name = "modern";
  using mlp_activation = normlab::relu2;
};

// The variant tag normlab's driver and normlab-ablate take. `configure` sets the
// architecture the tag stands for; --kv-heads, --d-ff and --window still override it.
struct modern {
  static constexpr std::string_view name = "modern";
  static constexpr std::string_view isolates = "GQA (heads/4 kv heads), window 16, ReLU^2 MLP, QK-norm";
  static constexpr double default_lr = 3e-3;
  static constexpr std::string_view default_lr_source = "GPT+'s rate (examples/modern: not swept)";
  using scheme = modern_scheme;
  using residual = normlab::residual_add;
  template <class T, class Backend = normlab::cpu_backend>
  using model = normlab::Transformer<T, scheme, residual, Backend>;
  static void configure(normlab::ModelConfig& c) {
    c.n_kv_heads = std::max<std::int64_t>(1, c.n_head / 4);
    c.attn_window = 16;
  }
};

}  // namespace my
