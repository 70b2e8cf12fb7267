#pragma once
// How a Transformer comes to be: its parameters declared, its arena counted and then
// bound by the same layout code, the weights initialised and constrained. Apart from
// the passes, which only use what is built here.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>

#include "normlab/model/transformer_class.hpp"

namespace normlab {

// Defined out of the class to keep the class short; inline, as a member defined
// in the class is.
template <class T, NormScheme Scheme, ResidualRule Residual, class Backend>
inline void Transformer<T, Scheme, Residual, Backend>::declare_params(bool allocate) {
  const std::int64_t C = cfg_.n_embd, V = cfg_.vocab_size, F = cfg_.ff_dim(), KV = cfg_.kv_dim();
  const std::int64_t UV = kGated ? 2 * F : F;
  const NormAxis rows = NormAxis::rows, cols = NormAxis::cols;
  const ParamInit w_init = ParamInit::normal(cfg_.base_scale);
  const ParamInit proj_init = ParamInit::normal(cfg_.base_scale / std::sqrt(2.0 * double(cfg_.n_layer)));
  wte_ = params_.add("transformer.wte.weight", {V, C}, ParamRole::matrix, rows, w_init);
  params_.mark_vocabulary(wte_);
  if (cfg_.positions == Positions::learned) {  // an embedding table: AdamW under Muon, as wte
    wpe_ = params_.add("transformer.wpe.weight", {cfg_.n_positions, C}, ParamRole::matrix, rows, w_init);
    params_.mark_vocabulary(wpe_);
  }
  embedding_norm_.declare(params_, "transformer.", "emb", cfg_);
  layers_.resize(static_cast<std::size_t>(cfg_.n_layer));
  for (std::int64_t l = 0; l < cfg_.n_layer; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    LayerOffsets& w = layers_[l];
    LayerActs& a = acts_[l];
    w.begin = params_.size();
    w.wq = params_.add(p + "query.weight", {C, C}, ParamRole::matrix, rows, w_init);
    w.wk = params_.add(p + "key.weight", {KV, C}, ParamRole::matrix, rows, w_init);
    w.wv = params_.add(p + "value.weight", {KV, C}, ParamRole::matrix, rows, w_init);
    w.wo = params_.add(p + "att_c_proj.weight", {C, C}, ParamRole::matrix, cols, proj_init);
    w.wfc = params_.add(p + "c_fc.weight", {UV, C}, ParamRole::matrix, rows, w_init);
    w.wproj = params_.add(p + "mlp_c_proj.weight", {C, F}, ParamRole::matrix, cols, proj_init);
    if (cfg_.bias) {
      auto bias = [&](const char* name, std::int64_t n) {
        return params_.add(p + name, {n}, ParamRole::gain, NormAxis::none, ParamInit::constant(0));
      };
      w.bq = bias("query.bias", C);
      w.bk = bias("key.bias", KV);
      w.bv = bias("value.bias", KV);
      w.bo = bias("att_c_proj.bias", C);
      w.bfc = bias("c_fc.bias", UV);
      w.bproj = bias("mlp_c_proj.bias", C);
    }
    a.in_att.declare(params_, p, "att", cfg_);
    a.in_mlp.declare(params_, p, "mlp", cfg_);
    a.out_att.declare(params_, p, "att_out", cfg_);
    a.out_mlp.declare(params_, p, "mlp_out", cfg_);
    a.res_att.declare(params_, p, "attn", cfg_);
    a.res_mlp.declare(params_, p, "mlp", cfg_);
    a.qk.declare(params_, p, cfg_);
    a.activation.declare(params_, p, cfg_);
  }
  head_begin_ = params_.size();
  final_norm_.declare(params_, "", "f", cfg_);
  lm_head_ = params_.add("lm_head.weight", {V, C}, ParamRole::matrix, rows, w_init);
  params_.mark_vocabulary(lm_head_);
  logit_scale_.declare(params_, cfg_);
  if (allocate) params_.finalize();
}

template <class T, NormScheme Scheme, ResidualRule Residual, class Backend>
inline void Transformer<T, Scheme, Residual, Backend>::layout(Arena<T>& ar) {
  const std::int64_t N = maxB_ * maxT_, C = cfg_.n_embd, H = cfg_.n_head, F = cfg_.ff_dim(), V = cfg_.vocab_size;
  const std::int64_t KV = cfg_.kv_dim(), UV = kGated ? 2 * F : F;
  if constexpr (kEmbeddingNorm) {
    emb_raw_ = ar.take(N * C);
    embedding_norm_.bind(ar, N, C);
  }
  for (LayerActs& a : acts_) {
    a.h_in = ar.take(N * C);
    bind_norm(a.in_att, ar, N, C);
    bind_norm(a.in_mlp, ar, N, C);
    if (qkv_bf16()) {
      a.q16 = ar.take_bf16(N * C);
      a.k16 = ar.take_bf16(N * KV);
      a.v16 = ar.take_bf16(N * KV);
    } else {
      a.q = ar.take(N * C);
      a.k = ar.take(N * KV);
      a.v = ar.take(N * KV);
    }
    if constexpr (kQkvBf16 && requires { a.qk.bind_bf16(ar, N, cfg_); })
      if (qkv_bf16()) a.qk.bind_bf16(ar, N, cfg_);
      else a.qk.bind(ar, N, cfg_);
    else
      a.qk.bind(ar, N, cfg_);
    a.lse = ar.take(N * H);
    if (y_bf16())
      a.y16 = ar.take_bf16(N * C);
    else
      a.y = ar.take(N * C);
    if constexpr (!kBranchInScratch) bind_branch(ar, a.a_kept, a.a_raw, N * C);
    a.out_att.bind(ar, N, C);
    a.res_att.bind(ar, N, C);
    a.h_mid = ar.take(N * C);
    if (uv_bf16())
      a.uv16 = ar.take_bf16(N * UV);
    else
      a.uv = ar.take(N * UV);
    if (act_bf16_)
      a.act16 = ar.take_bf16(N * F);
    else
      a.act = ar.take(N * F);
    if constexpr (!kBranchInScratch) bind_branch(ar, a.m_kept, a.m_raw, N * C);
    a.out_mlp.bind(ar, N, C);
    a.res_mlp.bind(ar, N, C);
  }
  h_final_ = ar.take(N * C);
  bind_norm(final_norm_, ar, N, C);
  logits_raw_ = ar.take(N * V);
  logit_scale_.bind(ar, N, V);
  d_logits_ = ar.take(N * V);
  d_h_ = ar.take(N * C);
  d_x_ = ar.take(N * C);
  d_work_ = ar.take(N * C);
  d_y_ = ar.take(N * C);
  // Backward's MLP scratch (d_act, d_uv) and its attention scratch (d_q, d_k,
  // d_v) are never live together, nor are forward's float32 q, k, v (kept in
  // bf16) and its float32 uv: one region holds each pair in turn. Every piece
  // starts on a 64-byte line.
  const auto line = [](std::int64_t n) { return (n + 15) / 16 * 16; };
  const std::int64_t act = line(N * F);
  // Where d_uv is kept in bf16, forward's float32 uv spans d_act and d_uv16.
  const std::int64_t mlp = duv_bf16() ? std::max(N * UV, act + (N * UV + 1) / 2) : act + N * UV;
  T* region = ar.take(std::max(mlp, 3 * line(N * C)));
  const auto at = [&](std::int64_t offset) { return region ? region + offset : nullptr; };
  d_q_ = at(0);
  d_k_ = at(line(N * C));
  d_v_ = at(2 * line(N * C));
  d_act_ = uv_f32_ = at(0);
  if (duv_bf16())
    d_uv16_ = reinterpret_cast<bfloat16*>(at(act));
  else
    d_uv_ = uv_f32_ = at(act);
  if (cfg_.grouped_kv()) {  // widened k, v (shared by the layers: backward widens again) and compact grads
    kx_ = ar.take(N * C);
    vx_ = ar.take(N * C);
    d_kc_ = ar.take(N * KV);
    d_vc_ = ar.take(N * KV);
  }
  ctx_.alpha_tmp = ar.take(C);
  ctx_.d_alpha = ar.take(C);
  ctx_.scale_tmp = ar.take(std::max({2 * F, V, C}));
  ctx_.d_scale = ar.take(std::max({2 * F, V, C}));
}

// The constructors, init and apply_constraint, defined out of the class: not
// inline, so a translation unit that sees `extern template class Transformer<…>`
// (train/variants.hpp, under NORMLAB_PREBUILT_MODELS) links the library's copy
// instead of compiling them again.
template <class T, NormScheme Scheme, ResidualRule Residual, class Backend>
Transformer<T, Scheme, Residual, Backend>::Transformer(ModelConfig cfg, std::int64_t max_batch, std::int64_t max_seq)
    : Transformer(PlanOnly{}, cfg, max_batch, max_seq, /*allocate_params=*/true) {
  arena_memory_.assign(plan_.activations / sizeof(T), T(0));
  arena_ = Arena<T>(arena_memory_.data(), arena_memory_.size());
  layout(arena_);
  // The model's own copy of the last batch's tokens: backward() must not read
  // the caller's arrays, which may have changed since forward().
  tokens_.assign(static_cast<std::size_t>(2 * maxB_ * maxT_), 0);
  rope_cos_.assign(static_cast<std::size_t>(maxT_ * cfg_.head_dim() / 2), T(0));
  rope_sin_.assign(rope_cos_.size(), T(0));
  Backend::rope_table(rope_cos_.data(), rope_sin_.data(), maxT_, cfg_.head_dim(), cfg_.rope_base);
  if (cfg_.positions != Positions::rope) {  // no rotation: cos 1, sin 0 make every q/k site's RoPE the identity
    Backend::fill(rope_cos_.data(), std::int64_t(rope_cos_.size()), T(1));
    Backend::fill(rope_sin_.data(), std::int64_t(rope_sin_.size()), T(0));
  }
  if (!kFusedBias && cfg_.bias) {
    ones_.assign(static_cast<std::size_t>(maxB_ * maxT_), T(0));
    Backend::fill(ones_.data(), std::int64_t(ones_.size()), T(1));
  }
  attn_factor_ = Factors::attn(cfg_, maxT_);
  mlp_factor_ = Factors::mlp(cfg_);
  ctx_.cfg = &cfg_;
  ctx_.params = &params_;
  if constexpr (Backend::host_memory) {
    ctx_.values = params_.value();
    ctx_.grads = params_.grad();
  } else {  // the store keeps the host copy (init, checkpoints); the step runs on these
    live_values_.assign(params_.size(), T(0));
    live_grads_.assign(params_.size(), T(0));
    ctx_.values = live_values_.data();
    ctx_.grads = live_grads_.data();
  }
  ctx_.rope_cos = rope_cos_.data();
  ctx_.rope_sin = rope_sin_.data();
}

template <class T, NormScheme Scheme, ResidualRule Residual, class Backend>
Transformer<T, Scheme, Residual, Backend>::Transformer(PlanOnly, ModelConfig cfg, std::int64_t max_batch,
                                                      std::int64_t max_seq, bool allocate_params)
    : cfg_(resolve(cfg)), maxB_(max_batch), maxT_(max_seq) {
  cfg_.validate();
  if (max_batch <= 0 || max_seq <= 0) throw Error("Transformer: max_batch and max_seq must be positive");
  Backend::check_model_limits(max_batch, max_seq, cfg_.n_head, cfg_.n_embd, cfg_.head_dim());
  if (cfg_.positions == Positions::learned && max_seq > cfg_.n_positions)
    throw Error("Transformer: max_seq " + std::to_string(max_seq) + " exceeds the learned position table's " +
                std::to_string(cfg_.n_positions) + " rows (n_positions): learned positions do not extrapolate");
  acts_.assign(static_cast<std::size_t>(cfg_.n_layer), LayerActs{});
  if constexpr (kBf16Storage) act_bf16_ = Backend::stores_bf16();
  declare_params(allocate_params);
  Arena<T> counting;
  layout(counting);
  plan_.parameters = params_.size() * sizeof(T);
  plan_.gradients = params_.size() * sizeof(T);
  plan_.scratch = params_.scratch_size() * sizeof(T);
  plan_.activations = counting.used() * sizeof(T);
  plan_.tokens = std::size_t(2 * max_batch * max_seq) * sizeof(std::int64_t);
}

template <class T, NormScheme Scheme, ResidualRule Residual, class Backend>
void Transformer<T, Scheme, Residual, Backend>::init(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (const ParamSpec& s : params_.specs()) {
    T* p = params_.value(s.offset);
    if (s.init.kind == ParamInit::Kind::normal) fill_normal(p, s.numel, s.init.value, rng);
    else std::fill_n(p, s.numel, T(s.init.value));
  }
  Constraint::at_init(params_);
  upload_params();
}

template <class T, NormScheme Scheme, ResidualRule Residual, class Backend>
void Transformer<T, Scheme, Residual, Backend>::apply_constraint() {
  if constexpr (Backend::host_memory) Constraint::after_step(params_);
  else Constraint::template after_step_on<Backend>(params_, ctx_.values);
}

}  // namespace normlab
