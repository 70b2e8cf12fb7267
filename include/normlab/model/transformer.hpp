#pragma once
// Decoder-only transformer, templated over the scalar type, a normalization
// scheme and a residual rule:  Transformer<double, prenorm_rms, residual_add>
// is the reference pre-norm GPT; Transformer<T, sphere, lerp_retract> is nGPT.
//
// Forward stores what backward needs in an arena laid out once for
// (max_batch, max_seq); backward is written by hand, layer by layer.
// Dims: B batch, T sequence, C = d, H heads, D = dk = C/H, F = 4C, V vocab, N = B*T.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "normlab/backend/cpu/ops.hpp"
#include "normlab/core/error.hpp"
#include "normlab/model/params.hpp"
#include "normlab/nn/angpt_factors.hpp"
#include "normlab/nn/constraint.hpp"
#include "normlab/nn/policies.hpp"
#include "normlab/nn/residual.hpp"
#include "normlab/tensor/tensor.hpp"

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

template <class T, NormScheme Scheme, ResidualRule Residual>
class Transformer {
  static_assert(check_block_policies<Scheme, Residual>());
  static_assert(std::is_floating_point_v<T>, "normlab: the scalar type must be float or double");
  using Res = ResidualOps<Residual, T>;

 public:
  using scalar_type = T;
  using scheme = Scheme;
  using residual = Residual;

  // Counts every buffer first (the constructor memory_plan uses), then allocates.
  Transformer(ModelConfig cfg, std::int64_t max_batch, std::int64_t max_seq)
      : Transformer(PlanOnly{}, cfg, max_batch, max_seq, /*allocate_params=*/true) {
    arena_ = Arena<T>(plan_.activations / sizeof(T));
    layout(arena_);
    // The model's own copy of the last batch's tokens: backward() must not read
    // the caller's arrays, which may have changed since forward().
    tokens_.assign(static_cast<std::size_t>(2 * maxB_ * maxT_), 0);
    cpu::rope_table(rope_cos_.data(), rope_sin_.data(), maxT_, cfg_.head_dim(), cfg_.rope_base);
    if constexpr (Scheme::approx_factors) {
      // c_att only for the scheme that asks for it (angpt_attnfactor); the paper's anGPT has none.
      if constexpr (attention_mixing_factor_of<Scheme>())
        attn_factor_ = cfg_.angpt_attn_factor_mult * angpt_attention_factor(cfg_.head_dim(), maxT_, cfg_.sqk_init);
      mlp_factor_ = cfg_.angpt_mlp_factor_mult * angpt_mlp_factor(cfg_.n_embd);
    }
  }

  // One model owns one arena its pointers point into: a copy would share (and a
  // moved-from object would keep) pointers into another model's buffers.
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;
  Transformer(Transformer&&) = delete;
  Transformer& operator=(Transformer&&) = delete;

  // Bytes a model of this config needs for max_batch × max_seq tokens, counted by
  // the same layout code as the real allocation (nothing is allocated but the
  // RoPE tables' few kilobytes): what a driver checks against the machine's
  // memory before it builds the model.
  struct MemoryPlan {
    std::size_t parameters = 0;   // values
    std::size_t gradients = 0;    // one gradient per value
    std::size_t scratch = 0;      // per-tensor scratch of the parameter store
    std::size_t activations = 0;  // the arena: everything forward keeps for backward
    std::size_t tokens = 0;       // the model's copy of a batch's inputs and targets
    std::size_t total() const { return parameters + gradients + scratch + activations + tokens; }
  };
  static MemoryPlan memory_plan(const ModelConfig& cfg, std::int64_t max_batch, std::int64_t max_seq) {
    return Transformer(PlanOnly{}, cfg, max_batch, max_seq).plan_;
  }

  const ModelConfig& config() const { return cfg_; }
  ParamStore<T>& params() { return params_; }
  const ParamStore<T>& params() const { return params_; }
  std::int64_t max_batch() const { return maxB_; }
  std::int64_t max_seq() const { return maxT_; }
  // "prenorm_rms+add" — stored in checkpoints so a mismatched load can name both.
  static std::string variant_signature() {
    return std::string(Scheme::name) + "+" + std::string(Residual::name);
  }

  // Fresh initialisation as the reference: N(0, bs) for linear and embedding
  // weights, N(0, bs/√(2L)) for the two output projections, gains 1, and the
  // nGPT scales stored so that stored × constant is their initial value.
  void init(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    const double bs = cfg_.base_scale;
    for (const ParamSpec& s : params_.specs()) {
      T* p = params_.value(s.offset);
      const bool proj = s.name.find("c_proj") != std::string::npos;
      switch (s.role) {
        case ParamRole::matrix: fill_normal(p, s.numel, proj ? bs / std::sqrt(2.0 * cfg_.n_layer) : bs, rng); break;
        case ParamRole::gain: std::fill_n(p, s.numel, T(1)); break;
        case ParamRole::alpha: std::fill_n(p, s.numel, T(bs)); break;
        case ParamRole::scale:
          std::fill_n(p, s.numel, s.name.ends_with("suv") ? T(1) : T(bs));
          break;
      }
    }
    // nGPT fixes and anGPT bounds the norms; both start from unit norm.
    if constexpr (Scheme::weights != WeightConstraint::none)
      apply_weight_constraint(params_, WeightConstraint::unit_norm);
  }

  void apply_constraint() { apply_weight_constraint(params_, Scheme::weights); }

  // anGPT's constant output factors (1 for other schemes), see docs/angpt.md.
  double attn_output_factor() const { return attn_factor_; }
  double mlp_output_factor() const { return mlp_factor_; }
  // Holds the output factors at given values instead of the ones derived for this
  // model's max_seq: evaluating a trained model at another context length keeps
  // the function it was trained as (c_att of angpt_attnfactor depends on T).
  void hold_output_factors(double attn, double mlp) {
    if (!std::isfinite(attn) || !std::isfinite(mlp) || attn <= 0 || mlp <= 0)
      throw Error("Transformer::hold_output_factors: factors must be positive and finite");
    attn_factor_ = attn;
    mlp_factor_ = mlp;
  }

  // Forward pass over idx (B,T). With targets, returns the mean cross-entropy
  // and keeps everything backward() needs; without, returns 0 (logits only).
  double forward(const std::int64_t* idx, const std::int64_t* targets, std::int64_t B, std::int64_t Tn) {
    check_sizes(B, Tn);
    check_tokens(idx, B * Tn, "token");
    B_ = B;
    T_ = Tn;
    const std::size_t n = static_cast<std::size_t>(B * Tn);
    std::copy_n(idx, n, tokens_.data());
    idx_ = tokens_.data();
    targets_ = nullptr;
    if (targets) {
      std::copy_n(targets, n, tokens_.data() + maxB_ * maxT_);
      targets_ = tokens_.data() + maxB_ * maxT_;
    }
    cpu::embedding_forward(acts_[0].h_in, idx, P(wte_), B * Tn, cfg_.n_embd);
    for (std::int64_t l = 0; l < cfg_.n_layer; ++l) layer_forward(l, B, Tn, nullptr, 0);
    head_forward(B * Tn);
    if (!targets) return 0.0;
    check_tokens(targets_, B * Tn, "target");
    return cpu::cross_entropy<T>(nullptr, logits(), targets_, B * Tn, cfg_.vocab_size);
  }

  // Keys and values of every layer for incremental decoding: (L, max_seq, C) each,
  // keys as attention sees them (after RoPE and the scheme's QK transform).
  struct KVCache {
    aligned_vector<T> k, v;
    aligned_vector<T> scratch;  // (max_seq) attention weights
    std::int64_t length = 0;  // positions filled
  };
  KVCache make_kv_cache() const {
    KVCache c;
    c.k.assign(static_cast<std::size_t>(cfg_.n_layer * maxT_ * cfg_.n_embd), T(0));
    c.v.assign(c.k.size(), T(0));
    c.scratch.assign(static_cast<std::size_t>(maxT_), T(0));
    return c;
  }
  // Feeds the next token (at position cache.length) and returns its logits (V).
  // Equal to the last row of a full forward over the same prefix (tested).
  const T* decode_step(std::int64_t token, KVCache& cache) {
    if (cache.length >= maxT_)
      throw Error("Transformer::decode_step: the KV cache is full (" + std::to_string(maxT_) + " positions)");
    check_tokens(&token, 1, "token");
    targets_ = nullptr;
    B_ = 1;
    T_ = 1;
    cpu::embedding_forward(acts_[0].h_in, &token, P(wte_), 1, cfg_.n_embd);
    for (std::int64_t l = 0; l < cfg_.n_layer; ++l) layer_forward(l, 1, 1, &cache, cache.length);
    ++cache.length;
    head_forward(1);
    return logits();
  }

  // Gradients of the mean cross-entropy of the last forward(), written into
  // params().grads() (zeroed first unless `accumulate`, for gradient accumulation).
  void backward(bool accumulate = false) {
    if (!targets_) throw Error("Transformer::backward: the last forward() had no targets");
    if (!accumulate) params_.zero_grad();
    const std::int64_t B = B_, Tn = T_, N = B * Tn, C = cfg_.n_embd, H = cfg_.n_head, D = cfg_.head_dim(),
                       F = 4 * C, V = cfg_.vocab_size;
    cpu::cross_entropy(d_logits_, logits(), targets_, N, V);
    if constexpr (Scheme::scaled_logits) {
      std::fill_n(d_scale_, V, T(0));
      cpu::column_dot_accumulate(d_scale_, d_logits_, logits_raw_, N, V, T(cfg_.sz_init / cfg_.base_scale));
      fold_scale_grad<ScaleSite::sz>(sz_, V);
      cpu::scale_columns(d_logits_, d_logits_, sz_tmp_, N, V);
    }
    const T* hf = Scheme::rmsnorm_inputs ? hf_norm_ : h_final_;
    // dh: (N,C) gradient of the residual stream, updated in place going down.
    if constexpr (Scheme::rmsnorm_inputs) {
      cpu::linear_backward(d_x_, G(lm_head_), d_logits_, hf, P(lm_head_), N, C, V);
      cpu::rmsnorm_backward(d_h_, G(ln_f_), d_x_, h_final_, P(ln_f_), rstd_f_, N, C);
    } else {
      cpu::linear_backward(d_h_, G(lm_head_), d_logits_, hf, P(lm_head_), N, C, V);
    }
    for (std::int64_t l = cfg_.n_layer - 1; l >= 0; --l) {
      LayerActs& a = acts_[l];
      const LayerOffsets& w = layers_[l];
      const T* h_out = (l + 1 < cfg_.n_layer) ? acts_[l + 1].h_in : h_final_;
      // ---- MLP residual
      if constexpr (Residual::learned_alpha) {
        effective_alpha(w.mlp_alpha, alpha_tmp_);
        std::fill_n(d_alpha_, C, T(0));
      }
      Res::backward(d_h_, d_f_, d_alpha_, d_h_, a.res_mlp, h_out, a.h_mid, a.m, alpha_tmp_, N, C);
      if constexpr (Residual::learned_alpha) alpha_grad_to_stored(w.mlp_alpha);
      cpu::linear_backward(d_act_, G(w.wproj), d_f_, a.act, P(w.wproj), N, F, C, T(mlp_factor_));
      if constexpr (Scheme::scaled_uv) {
        effective_scale<ScaleSite::suv>(w.suv, suv_const(), 2 * F, s_tmp_);
        std::fill_n(d_scale_, 2 * F, T(0));
        cpu::scaled_swiglu_backward(d_uv_, d_scale_, d_act_, a.uv, s_tmp_, N, F, T(suv_const()));
        fold_scale_grad<ScaleSite::suv>(w.suv, 2 * F);
      } else {
        cpu::swiglu_backward(d_uv_, d_act_, a.uv, N, F);
      }
      const T* xm = Scheme::rmsnorm_inputs ? a.xm : a.h_mid;
      cpu::linear_backward(d_x_, G(w.wfc), d_uv_, xm, P(w.wfc), N, C, 2 * F);
      if constexpr (Scheme::rmsnorm_inputs) {
        cpu::rmsnorm_backward(d_f_, G(w.ln_mlp), d_x_, a.h_mid, P(w.ln_mlp), a.rstd_m, N, C);
        add_into(d_h_, d_f_, N * C);
      } else {
        add_into(d_h_, d_x_, N * C);
      }
      // ---- attention residual
      if constexpr (Residual::learned_alpha) {
        effective_alpha(w.attn_alpha, alpha_tmp_);
        std::fill_n(d_alpha_, C, T(0));
      }
      Res::backward(d_h_, d_f_, d_alpha_, d_h_, a.res_att, a.h_mid, a.h_in, a.a, alpha_tmp_, N, C);
      if constexpr (Residual::learned_alpha) alpha_grad_to_stored(w.attn_alpha);
      cpu::linear_backward(d_y_, G(w.wo), d_f_, a.y, P(w.wo), N, C, C, T(attn_factor_));
      const T* qa = kQkTransformed ? a.qs : a.q;
      const T* ka = kQkTransformed ? a.ks : a.k;
      cpu::attention_backward(d_q_, d_k_, d_v_, d_y_, a.y, a.lse, qa, ka, a.v, B, Tn, H, D, softmax_scale());
      if constexpr (Scheme::qk == QkMode::rms_gain) {
        cpu::rmsnorm_backward(d_x_, G(w.q_gain), d_q_, a.q, P(w.q_gain), a.qn, N * H, D);
        std::copy_n(d_x_, N * C, d_q_);
        cpu::rmsnorm_backward(d_x_, G(w.k_gain), d_k_, a.k, P(w.k_gain), a.kn, N * H, D);
        std::copy_n(d_x_, N * C, d_k_);
      } else if constexpr (Scheme::qk == QkMode::unit_scaled) {  // s_qk, unit norm and RoPE: one fused pass
        effective_scale<ScaleSite::sqk>(w.sqk, cfg_.sqk_init / cfg_.base_scale, C, s_tmp_);
        const T k = T(cfg_.sqk_init / cfg_.base_scale);
        std::fill_n(d_scale_, C, T(0));
        cpu::rope_l2norm_scale_backward(d_q_, d_scale_, a.qh, a.qn, s_tmp_, rope_cos_.data(), rope_sin_.data(), B,
                                        Tn, H, D, k);
        cpu::rope_l2norm_scale_backward(d_k_, d_scale_, a.kh, a.kn, s_tmp_, rope_cos_.data(), rope_sin_.data(), B,
                                        Tn, H, D, k);
        fold_scale_grad<ScaleSite::sqk>(w.sqk, C);
      } else if constexpr (Scheme::qk == QkMode::scaled_only) {
        effective_scale<ScaleSite::sqk>(w.sqk, cfg_.sqk_init / cfg_.base_scale, C, s_tmp_);
        const T k = T(cfg_.sqk_init / cfg_.base_scale);
        std::fill_n(d_scale_, C, T(0));
        cpu::column_dot_accumulate(d_scale_, d_q_, a.q, N, C, k);
        cpu::column_dot_accumulate(d_scale_, d_k_, a.k, N, C, k);
        fold_scale_grad<ScaleSite::sqk>(w.sqk, C);
        cpu::scale_columns(d_q_, d_q_, s_tmp_, N, C);
        cpu::scale_columns(d_k_, d_k_, s_tmp_, N, C);
      }
      if constexpr (Scheme::qk != QkMode::unit_scaled) {
        cpu::rope_apply(d_q_, rope_cos_.data(), rope_sin_.data(), B, Tn, H, D, true);
        cpu::rope_apply(d_k_, rope_cos_.data(), rope_sin_.data(), B, Tn, H, D, true);
      }
      const T* x = Scheme::rmsnorm_inputs ? a.xa : a.h_in;
      cpu::linear_backward(d_x_, G(w.wq), d_q_, x, P(w.wq), N, C, C);
      cpu::linear_backward(d_f_, G(w.wk), d_k_, x, P(w.wk), N, C, C);
      add_into(d_x_, d_f_, N * C);
      cpu::linear_backward(d_f_, G(w.wv), d_v_, x, P(w.wv), N, C, C);
      add_into(d_x_, d_f_, N * C);
      if constexpr (Scheme::rmsnorm_inputs) {
        cpu::rmsnorm_backward(d_f_, G(w.ln_att), d_x_, a.h_in, P(w.ln_att), a.rstd_a, N, C);
        add_into(d_h_, d_f_, N * C);
      } else {
        add_into(d_h_, d_x_, N * C);
      }
    }
    cpu::embedding_backward(G(wte_), idx_, d_h_, N, C);
  }

  // (B,T,V) logits of the last forward (after s_z where the scheme has it).
  const T* logits() const { return Scheme::scaled_logits ? logits_ : logits_raw_; }
  // Residual stream after layer l (l = n_layer-1 is the last block's output).
  const T* block_output(std::int64_t l) const {
    return (l + 1 < cfg_.n_layer) ? acts_[l + 1].h_in : h_final_;
  }
  std::int64_t last_batch() const { return B_; }
  std::int64_t last_seq() const { return T_; }
  // Attention probabilities of layer l from the last forward(): (B,H,T,T) with
  // B = last_batch(), T = last_seq(), contiguous; causal softmax rows, zeros above
  // the diagonal. Recomputed from the stored q, k and log-sum-exp (training keeps
  // no T×T matrix); for diagnostics, not valid after decode_step.
  std::vector<T> attention_probs(std::int64_t l) const {
    const LayerActs& a = acts_.at(static_cast<std::size_t>(l));
    const std::int64_t H = cfg_.n_head;
    std::vector<T> P(static_cast<std::size_t>(B_ * H * T_ * T_));
    cpu::attention_probs(P.data(), a.lse, kQkTransformed ? a.qs : a.q, kQkTransformed ? a.ks : a.k, B_, T_, H,
                         cfg_.head_dim(), softmax_scale());
    return P;
  }

 private:
  struct LayerOffsets {
    std::size_t wq = 0, wk = 0, wv = 0, wo = 0, wfc = 0, wproj = 0;
    std::size_t ln_att = 0, ln_mlp = 0;                    // prenorm_rms
    std::size_t attn_alpha = 0, mlp_alpha = 0;             // learned α
    std::size_t sqk = 0, suv = 0;                          // sphere, scalar_factors
    std::size_t q_gain = 0, k_gain = 0;                    // prenorm_rms_qknorm
  };
  struct LayerActs {
    T* h_in = nullptr;   // (N,C) residual stream entering the layer
    T* xa = nullptr;     // (N,C) RMSNorm(h_in)
    T* rstd_a = nullptr; // (N)
    T* q = nullptr;      // (N,C) after RoPE
    T* k = nullptr;      // (N,C) after RoPE
    T* v = nullptr;      // (N,C)
    T* qh = nullptr;     // (N,C) per-head unit q (unit_scaled)
    T* kh = nullptr;     // (N,C)
    T* qn = nullptr;     // (N,H) per-head ‖q‖ (unit_scaled) or 1/rms (rms_gain)
    T* kn = nullptr;     // (N,H)
    T* qs = nullptr;     // (N,C) q as attention sees it: s_qk ⊙ qh, s_qk ⊙ q, or RMSNorm(q) ⊙ g
    T* ks = nullptr;     // (N,C)
    T* lse = nullptr;    // (B,H,T) log-sum-exp of each attention row
    T* y = nullptr;      // (N,C) heads concatenated
    T* a = nullptr;      // (N,C) attention output
    typename Res::Cache res_att;
    T* h_mid = nullptr;  // (N,C) after the attention residual
    T* xm = nullptr;     // (N,C) RMSNorm(h_mid)
    T* rstd_m = nullptr; // (N)
    T* uv = nullptr;     // (N,2F) x W_fcᵀ
    T* act = nullptr;    // (N,F) u ⊙ silu(g)
    T* m = nullptr;      // (N,C) MLP output
    typename Res::Cache res_mlp;
  };

  static ModelConfig resolve(ModelConfig c) {
    if (c.base_scale == 0) c.base_scale = Scheme::hidden_on_sphere ? 1.0 / std::sqrt(double(c.n_embd)) : 0.02;
    return c;
  }

  // Declares the parameters (allocated only with allocate_params) and counts the
  // arena: all of memory_plan's model, and the first half of the real constructor.
  struct PlanOnly {};
  Transformer(PlanOnly, ModelConfig cfg, std::int64_t max_batch, std::int64_t max_seq, bool allocate_params = false)
      : cfg_(resolve(cfg)), maxB_(max_batch), maxT_(max_seq) {
    cfg_.validate();
    if (max_batch <= 0 || max_seq <= 0) throw Error("Transformer: max_batch and max_seq must be positive");
    declare_params(allocate_params);
    Arena<T> counting;
    layout(counting);
    plan_.parameters = params_.size() * sizeof(T);
    plan_.gradients = params_.size() * sizeof(T);
    plan_.scratch = params_.scratch_size() * sizeof(T);
    plan_.activations = counting.used() * sizeof(T);
    plan_.tokens = std::size_t(2 * max_batch * max_seq) * sizeof(std::int64_t);
  }

  void declare_params(bool allocate) {
    const std::int64_t C = cfg_.n_embd, V = cfg_.vocab_size, F = 4 * C;
    const NormAxis rows = NormAxis::rows, cols = NormAxis::cols;
    wte_ = params_.add("transformer.wte.weight", {V, C}, ParamRole::matrix, rows);
    layers_.resize(static_cast<std::size_t>(cfg_.n_layer));
    for (std::int64_t l = 0; l < cfg_.n_layer; ++l) {
      const std::string p = "transformer.h." + std::to_string(l) + ".";
      LayerOffsets& w = layers_[l];
      w.wq = params_.add(p + "query.weight", {C, C}, ParamRole::matrix, rows);
      w.wk = params_.add(p + "key.weight", {C, C}, ParamRole::matrix, rows);
      w.wv = params_.add(p + "value.weight", {C, C}, ParamRole::matrix, rows);
      w.wo = params_.add(p + "att_c_proj.weight", {C, C}, ParamRole::matrix, cols);
      w.wfc = params_.add(p + "c_fc.weight", {2 * F, C}, ParamRole::matrix, rows);
      w.wproj = params_.add(p + "mlp_c_proj.weight", {C, F}, ParamRole::matrix, cols);
      if constexpr (Scheme::rmsnorm_inputs) {
        w.ln_att = params_.add(p + "rmsnorm_att.weight", {C}, ParamRole::gain);
        w.ln_mlp = params_.add(p + "rmsnorm_mlp.weight", {C}, ParamRole::gain);
      }
      if constexpr (Scheme::qk == QkMode::rms_gain) {
        w.q_gain = params_.add(p + "q_norm.weight", {cfg_.head_dim()}, ParamRole::gain);
        w.k_gain = params_.add(p + "k_norm.weight", {cfg_.head_dim()}, ParamRole::gain);
      }
      if constexpr (Residual::learned_alpha) {
        w.attn_alpha = params_.add(p + "attn_alpha", {scale_len(C)}, ParamRole::alpha);
        w.mlp_alpha = params_.add(p + "mlp_alpha", {scale_len(C)}, ParamRole::alpha);
      }
      if constexpr ((Scheme::qk == QkMode::unit_scaled || Scheme::qk == QkMode::scaled_only) &&
                    kind<ScaleSite::sqk>() != ScaleKind::fixed)
        w.sqk = params_.add(p + "sqk", {site_len<ScaleSite::sqk>(C)}, ParamRole::scale);
      if constexpr (Scheme::scaled_uv && kind<ScaleSite::suv>() != ScaleKind::fixed)
        w.suv = params_.add(p + "suv", {site_len<ScaleSite::suv>(2 * F)}, ParamRole::scale);
    }
    if constexpr (Scheme::rmsnorm_inputs) ln_f_ = params_.add("rmsnorm_f.weight", {C}, ParamRole::gain);
    lm_head_ = params_.add("lm_head.weight", {V, C}, ParamRole::matrix, rows);
    if constexpr (Scheme::scaled_logits && kind<ScaleSite::sz>() != ScaleKind::fixed)
      sz_ = params_.add("sz", {site_len<ScaleSite::sz>(V)}, ParamRole::scale);
    if (allocate) params_.finalize();
  }

  // Every buffer of a step, from one arena; called twice (count, then bind).
  void layout(Arena<T>& ar) {
    const std::int64_t N = maxB_ * maxT_, C = cfg_.n_embd, H = cfg_.n_head, F = 4 * C, V = cfg_.vocab_size;
    acts_.assign(static_cast<std::size_t>(cfg_.n_layer), LayerActs{});
    for (LayerActs& a : acts_) {
      a.h_in = ar.take(N * C);
      if constexpr (Scheme::rmsnorm_inputs) {
        a.xa = ar.take(N * C);
        a.rstd_a = ar.take(N);
        a.xm = ar.take(N * C);
        a.rstd_m = ar.take(N);
      }
      a.q = ar.take(N * C);
      a.k = ar.take(N * C);
      a.v = ar.take(N * C);
      if constexpr (Scheme::qk == QkMode::unit_scaled) {
        a.qh = ar.take(N * C);
        a.kh = ar.take(N * C);
      }
      if constexpr (Scheme::qk == QkMode::unit_scaled || Scheme::qk == QkMode::rms_gain) {
        a.qn = ar.take(N * H);
        a.kn = ar.take(N * H);
      }
      if constexpr (kQkTransformed) {
        a.qs = ar.take(N * C);
        a.ks = ar.take(N * C);
      }
      a.lse = ar.take(N * H);
      a.y = ar.take(N * C);
      a.a = ar.take(N * C);
      a.res_att.bind(ar, N, C);
      a.h_mid = ar.take(N * C);
      a.uv = ar.take(N * 2 * F);
      a.act = ar.take(N * F);
      a.m = ar.take(N * C);
      a.res_mlp.bind(ar, N, C);
    }
    h_final_ = ar.take(N * C);
    if constexpr (Scheme::rmsnorm_inputs) {
      hf_norm_ = ar.take(N * C);
      rstd_f_ = ar.take(N);
    }
    logits_raw_ = ar.take(N * V);
    if constexpr (Scheme::scaled_logits) logits_ = ar.take(N * V);
    d_logits_ = ar.take(N * V);
    d_h_ = ar.take(N * C);
    d_x_ = ar.take(N * C);
    d_f_ = ar.take(N * C);
    d_y_ = ar.take(N * C);
    d_q_ = ar.take(N * C);
    d_k_ = ar.take(N * C);
    d_v_ = ar.take(N * C);
    d_act_ = ar.take(N * F);
    d_uv_ = ar.take(N * 2 * F);
    alpha_tmp_ = ar.take(C);
    d_alpha_ = ar.take(C);
    s_tmp_ = ar.take(2 * F);
    sz_tmp_ = ar.take(V);
    d_scale_ = ar.take(std::max(2 * F, V));
    rope_cos_.assign(static_cast<std::size_t>(maxT_ * cfg_.head_dim() / 2), T(0));
    rope_sin_.assign(rope_cos_.size(), T(0));
  }

  // One block over (B,T) tokens; with a cache, a single token at position pos0.
  void layer_forward(std::int64_t l, std::int64_t B, std::int64_t Tn, KVCache* cache, std::int64_t pos0) {
    const std::int64_t N = B * Tn, C = cfg_.n_embd, H = cfg_.n_head, D = cfg_.head_dim(), F = 4 * C;
    LayerActs& a = acts_[l];
    const LayerOffsets& w = layers_[l];
    T* h_out = (l + 1 < cfg_.n_layer) ? acts_[l + 1].h_in : h_final_;
    // ---- attention
    const T* x = a.h_in;
    if constexpr (Scheme::rmsnorm_inputs) {
      cpu::rmsnorm_forward(a.xa, a.rstd_a, a.h_in, P(w.ln_att), N, C, T(cfg_.rmsnorm_eps));
      x = a.xa;
    }
    cpu::linear_forward(a.q, x, P(w.wq), N, C, C);
    cpu::linear_forward(a.k, x, P(w.wk), N, C, C);
    cpu::linear_forward(a.v, x, P(w.wv), N, C, C);
    if constexpr (Scheme::qk == QkMode::unit_scaled) {  // RoPE, per-head unit norm, s_qk: one fused pass
      effective_scale<ScaleSite::sqk>(w.sqk, cfg_.sqk_init / cfg_.base_scale, C, s_tmp_);
      cpu::rope_l2norm_scale_forward(a.q, a.qh, a.qn, a.qs, s_tmp_, rope_cos_.data(), rope_sin_.data(), B, Tn, H, D,
                                     pos0);
      cpu::rope_l2norm_scale_forward(a.k, a.kh, a.kn, a.ks, s_tmp_, rope_cos_.data(), rope_sin_.data(), B, Tn, H, D,
                                     pos0);
    } else {
      cpu::rope_apply(a.q, rope_cos_.data(), rope_sin_.data(), B, Tn, H, D, false, pos0);
      cpu::rope_apply(a.k, rope_cos_.data(), rope_sin_.data(), B, Tn, H, D, false, pos0);
    }
    if constexpr (Scheme::qk == QkMode::rms_gain) {
      cpu::rmsnorm_forward(a.qs, a.qn, a.q, P(w.q_gain), N * H, D, T(cfg_.rmsnorm_eps));
      cpu::rmsnorm_forward(a.ks, a.kn, a.k, P(w.k_gain), N * H, D, T(cfg_.rmsnorm_eps));
    } else if constexpr (Scheme::qk == QkMode::scaled_only) {
      effective_scale<ScaleSite::sqk>(w.sqk, cfg_.sqk_init / cfg_.base_scale, C, s_tmp_);
      cpu::scale_columns(a.qs, a.q, s_tmp_, N, C);
      cpu::scale_columns(a.ks, a.k, s_tmp_, N, C);
    }
    const T* qa = kQkTransformed ? a.qs : a.q;
    const T* ka = kQkTransformed ? a.ks : a.k;
    if (cache) {  // one token: append its key/value, attend over positions 0..pos0
      T* kc = cache->k.data() + l * maxT_ * C;
      T* vc = cache->v.data() + l * maxT_ * C;
      std::copy_n(ka, C, kc + pos0 * C);
      std::copy_n(a.v, C, vc + pos0 * C);
      cpu::attention_decode(a.y, cache->scratch.data(), qa, kc, vc, pos0 + 1, H, D, softmax_scale());
    } else {
      cpu::attention_forward(a.y, a.lse, qa, ka, a.v, B, Tn, H, D, softmax_scale());
    }
    // anGPT's constant factor (1 for other schemes) is the GEMM's alpha.
    cpu::linear_forward(a.a, a.y, P(w.wo), N, C, C, false, T(attn_factor_));
    if constexpr (Residual::learned_alpha) effective_alpha(w.attn_alpha, alpha_tmp_);
    Res::forward(a.res_att, a.h_mid, a.h_in, a.a, alpha_tmp_, N, C);
    // ---- MLP
    const T* xm = a.h_mid;
    if constexpr (Scheme::rmsnorm_inputs) {
      cpu::rmsnorm_forward(a.xm, a.rstd_m, a.h_mid, P(w.ln_mlp), N, C, T(cfg_.rmsnorm_eps));
      xm = a.xm;
    }
    cpu::linear_forward(a.uv, xm, P(w.wfc), N, C, 2 * F);
    if constexpr (Scheme::scaled_uv) {
      effective_scale<ScaleSite::suv>(w.suv, suv_const(), 2 * F, s_tmp_);
      cpu::scaled_swiglu_forward(a.act, a.uv, s_tmp_, N, F);
    } else {
      cpu::swiglu_forward(a.act, a.uv, N, F);
    }
    cpu::linear_forward(a.m, a.act, P(w.wproj), N, F, C, false, T(mlp_factor_));
    if constexpr (Residual::learned_alpha) effective_alpha(w.mlp_alpha, alpha_tmp_);
    Res::forward(a.res_mlp, h_out, a.h_mid, a.m, alpha_tmp_, N, C);
  }

  // Final norm (pre-norm schemes), LM head and s_z over the first N rows.
  void head_forward(std::int64_t N) {
    const std::int64_t C = cfg_.n_embd, V = cfg_.vocab_size;
    const T* hf = h_final_;
    if constexpr (Scheme::rmsnorm_inputs) {
      cpu::rmsnorm_forward(hf_norm_, rstd_f_, h_final_, P(ln_f_), N, C, T(cfg_.rmsnorm_eps));
      hf = hf_norm_;
    }
    cpu::linear_forward(logits_raw_, hf, P(lm_head_), N, C, V);
    if constexpr (Scheme::scaled_logits) {
      effective_scale<ScaleSite::sz>(sz_, cfg_.sz_init / cfg_.base_scale, V, sz_tmp_);
      cpu::scale_columns(logits_, logits_raw_, sz_tmp_, N, V);
    }
  }

  void check_tokens(const std::int64_t* ids, std::int64_t n, const char* what) const {
    for (std::int64_t i = 0; i < n; ++i)
      if (ids[i] < 0 || ids[i] >= cfg_.vocab_size)
        throw Error(std::string("Transformer: ") + what + " id " + std::to_string(ids[i]) + " at position " +
                    std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(cfg_.vocab_size) + ")");
  }

  void check_sizes(std::int64_t B, std::int64_t Tn) const {
    if (B <= 0 || B > maxB_ || Tn <= 0 || Tn > maxT_)
      throw Error("Transformer: batch " + std::to_string(B) + " x seq " + std::to_string(Tn) +
                  " exceeds the sizes the model was built for (" + std::to_string(maxB_) + " x " +
                  std::to_string(maxT_) + ")");
  }

  T softmax_scale() const {
    const double D = double(cfg_.head_dim());
    return T(Scheme::sqrt_dk_softmax ? std::sqrt(D) : 1.0 / std::sqrt(D));
  }

  // ---- the reference's re-parameterisation: effective = stored × init/base_scale
  static constexpr bool kQkTransformed = Scheme::qk != QkMode::none;
  static std::int64_t scale_len(std::int64_t n) { return Scheme::scalar_scales ? 1 : n; }
  double suv_const() const { return cfg_.suv_init * std::sqrt(double(cfg_.n_embd)); }

  template <ScaleSite W>
  static consteval ScaleKind kind() { return scale_kind_of<Scheme, W>(); }
  template <ScaleSite W>
  static std::int64_t site_len(std::int64_t n) { return kind<W>() == ScaleKind::scalar ? 1 : n; }
  // The stored value a scale starts from (init()): s_uv 1, s_qk and s_z base_scale.
  template <ScaleSite W>
  T initial_stored() const { return W == ScaleSite::suv ? T(1) : T(cfg_.base_scale); }

  // out(n) = stored × k, broadcast when the scale is one learned scalar; a fixed
  // scale is its initial effective value, initial stored × k, as a learned one starts.
  template <ScaleSite W>
  void effective_scale(std::size_t off, double k, std::int64_t n, T* out) const {
    if constexpr (kind<W>() == ScaleKind::fixed) {
      std::fill_n(out, n, T(double(initial_stored<W>()) * k));
    } else {
      const T* p = P(off);
      for (std::int64_t c = 0; c < n; ++c) out[c] = T(double(p[kind<W>() == ScaleKind::scalar ? 0 : c]) * k);
    }
  }
  // d_scale_(n) holds d loss / d(expanded stored values); fold into the parameter
  // (nothing for a fixed scale: it has no parameter).
  template <ScaleSite W>
  void fold_scale_grad(std::size_t off, std::int64_t n) {
    if constexpr (kind<W>() == ScaleKind::fixed) return;
    else if constexpr (kind<W>() == ScaleKind::scalar) {
      T acc = 0;
      for (std::int64_t c = 0; c < n; ++c) acc += d_scale_[c];
      G(off)[0] += acc;
    } else {
      T* g = G(off);
      for (std::int64_t c = 0; c < n; ++c) g[c] += d_scale_[c];
    }
  }
  // The same for α, whose kind follows scalar_scales.
  void fold_alpha_grad(std::size_t off, std::int64_t n) {
    T* g = G(off);
    if constexpr (Scheme::scalar_scales) {
      T acc = 0;
      for (std::int64_t c = 0; c < n; ++c) acc += d_scale_[c];
      g[0] += acc;
    } else {
      for (std::int64_t c = 0; c < n; ++c) g[c] += d_scale_[c];
    }
  }
  void effective_alpha(std::size_t off, T* out) const {
    const double k = cfg_.alpha_init / cfg_.base_scale;
    const T* p = P(off);
    for (std::int64_t c = 0; c < cfg_.n_embd; ++c)
      out[c] = T(std::abs(double(p[Scheme::scalar_scales ? 0 : c]) * k));
  }
  // d|p k|/dp = sign(p k)·k (0 at 0, as torch.abs).
  void alpha_grad_to_stored(std::size_t off) {
    const double k = cfg_.alpha_init / cfg_.base_scale;
    const T* p = P(off);
    for (std::int64_t c = 0; c < cfg_.n_embd; ++c) {
      const double x = double(p[Scheme::scalar_scales ? 0 : c]) * k;
      const double sgn = x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);
      d_scale_[c] = T(double(d_alpha_[c]) * sgn * k);
    }
    fold_alpha_grad(off, cfg_.n_embd);
  }

  static void add_into(T* dst, const T* src, std::int64_t n) {
    cpu::parallel_for(n, n > cpu::kParallelGrain, [&](std::int64_t i) { dst[i] += src[i]; });
  }
  // Box–Muller on mt19937_64: the same numbers on every platform (std::normal_distribution is not specified).
  static void fill_normal(T* p, std::size_t n, double stddev, std::mt19937_64& rng) {
    constexpr double two_pi = 6.283185307179586476925286766559;
    auto uniform = [&] { return (double(rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0); };
    for (std::size_t i = 0; i < n; i += 2) {
      const double r = std::sqrt(-2.0 * std::log(uniform())), th = two_pi * uniform();
      p[i] = T(stddev * r * std::cos(th));
      if (i + 1 < n) p[i + 1] = T(stddev * r * std::sin(th));
    }
  }

  T* P(std::size_t off) { return params_.value(off); }
  const T* P(std::size_t off) const { return params_.value(off); }
  T* G(std::size_t off) { return params_.grad(off); }

  ModelConfig cfg_;
  std::int64_t maxB_, maxT_;
  ParamStore<T> params_;
  std::size_t wte_ = 0, lm_head_ = 0, ln_f_ = 0, sz_ = 0;
  std::vector<LayerOffsets> layers_;
  Arena<T> arena_;
  std::vector<LayerActs> acts_;
  aligned_vector<T> rope_cos_, rope_sin_;  // (maxT, D/2)
  T* h_final_ = nullptr;    // (N,C) residual stream after the last block
  T* hf_norm_ = nullptr;    // (N,C) final RMSNorm
  T* rstd_f_ = nullptr;     // (N)
  T* logits_raw_ = nullptr; // (N,V) h lm_headᵀ
  T* logits_ = nullptr;     // (N,V) ⊙ s_z (sphere)
  T* d_logits_ = nullptr;   // (N,V)
  T *d_h_ = nullptr, *d_x_ = nullptr, *d_f_ = nullptr, *d_y_ = nullptr;  // (N,C)
  T *d_q_ = nullptr, *d_k_ = nullptr, *d_v_ = nullptr;                   // (N,C)
  T* d_act_ = nullptr;      // (N,F)
  T* d_uv_ = nullptr;       // (N,2F)
  T* alpha_tmp_ = nullptr;  // (C) effective α of the current sub-layer
  T* d_alpha_ = nullptr;    // (C)
  T* s_tmp_ = nullptr;      // (2F) effective s_qk or s_uv
  T* sz_tmp_ = nullptr;     // (V) effective s_z
  T* d_scale_ = nullptr;    // (max(2F,V)) gradient of an expanded scale before folding
  double attn_factor_ = 1.0, mlp_factor_ = 1.0;  // anGPT output factors
  std::int64_t B_ = 0, T_ = 0;
  std::vector<std::int64_t> tokens_;        // (2, maxB·maxT): inputs | targets of the last forward
  const std::int64_t* idx_ = nullptr;       // into tokens_
  const std::int64_t* targets_ = nullptr;   // into tokens_, null after a forward without targets
  MemoryPlan plan_;                         // what the counting constructor counted
};

template <class T>
using GPT = Transformer<T, prenorm_rms, residual_add>;
template <class T>
using NGPT = Transformer<T, sphere, lerp_retract>;
template <class T>
using ANGPT = Transformer<T, scalar_factors, lerp_nu>;

}  // namespace normlab
