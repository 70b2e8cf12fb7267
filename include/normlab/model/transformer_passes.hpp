#pragma once
// The Transformer's passes: forward, one block's forward (layer_forward), incremental
// decoding, the hand-written backward and the attention probabilities. Apart from the
// class: the arithmetic of a step, out of line so a library can compile it once.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "normlab/model/transformer_class.hpp"

namespace normlab {

// Defined out of the class to keep the class short; inline, as a member defined
// in the class is.
template <class T, NormScheme Scheme, ResidualRule Residual, class Backend>
inline void Transformer<T, Scheme, Residual, Backend>::layer_forward(std::int64_t l, KVCache* cache) {
  StepContext<T>& c = ctx_;
  const std::int64_t N = c.N(), C = cfg_.n_embd, H = cfg_.n_head, D = cfg_.head_dim(), F = cfg_.ff_dim();
  const std::int64_t KV = cfg_.kv_dim(), UV = kGated ? 2 * F : F;
  LayerActs& a = acts_[l];
  const LayerOffsets& w = layers_[l];
  T* h_out = (l + 1 < cfg_.n_layer) ? acts_[l + 1].h_in : h_final_;
  // ---- attention
  norm_forward(a.in_att, a.xa, a.xa16, a.h_in, N, C);
  // Kept in bf16, q, k and v are computed in backward's scratch first.
  T* q = qkv_bf16() ? d_q_ : a.q;
  T* k = qkv_bf16() ? d_k_ : a.k;
  T* v = qkv_bf16() ? d_v_ : a.v;
  T* y = y_bf16() ? d_y_ : a.y;  // kept in bf16, y is computed in backward's scratch first
  with_normed(a.xa, a.xa16, [&](auto x) {
    Backend::linear_forward(q, x, P(w.wq), N, C, C);
    Backend::linear_forward(k, x, P(w.wk), N, C, KV);
    Backend::linear_forward(v, x, P(w.wv), N, C, KV);
  });
  add_bias(q, w.bq, N, C);
  add_bias(k, w.bk, N, KV);
  add_bias(v, w.bv, N, KV);
  a.qk.forward(c, q, k);
  if constexpr (kQkvBf16)
    if (qkv_bf16() && !cache) {
      Backend::round_to_bf16(a.q16, a.qk.qa(), N * C);
      Backend::round_to_bf16(a.k16, a.qk.ka(), N * KV);
      Backend::round_to_bf16(a.v16, static_cast<const T*>(v), N * KV);
    }
  if (cache) {  // one token: append its key/value, attend over the window's positions up to pos0
    const std::int64_t pos0 = c.pos0, first = cfg_.attn_window > 0 ? std::max<std::int64_t>(0, pos0 + 1 - cfg_.attn_window) : 0;
    T* kc = cache->k.data() + l * maxT_ * KV;
    T* vc = cache->v.data() + l * maxT_ * KV;
    Backend::copy(kc + pos0 * KV, a.qk.ka(), KV);
    Backend::copy(vc + pos0 * KV, static_cast<const T*>(v), KV);
    const T* keys = kc + first * KV;
    const T* values = vc + first * KV;
    if (cfg_.grouped_kv()) {
      repeat_kv(cache->kx.data(), keys, pos0 + 1 - first);
      repeat_kv(cache->vx.data(), values, pos0 + 1 - first);
      keys = cache->kx.data();
      values = cache->vx.data();
    }
    Backend::attention_decode(y, cache->scratch.data(), a.qk.qa(), keys, values, pos0 + 1 - first, H, D,
                              softmax_scale());
  } else if (qkv_bf16()) {
    if constexpr (kQkvBf16)
      Backend::attention_forward(y, a.lse, static_cast<const bfloat16*>(a.q16), static_cast<const bfloat16*>(a.k16),
                                 static_cast<const bfloat16*>(a.v16), c.B, c.seq, H, D, softmax_scale(),
                                 cfg_.attn_window);
  } else {
    const auto [keys, values] = attention_kv(a, N);
    Backend::attention_forward(y, a.lse, a.qk.qa(), keys, values, c.B, c.seq, H, D, softmax_scale(),
                               cfg_.attn_window);
  }
  // The scheme's output factor (1 for most) is the GEMM's alpha.
  T* a_raw = kBranchInScratch || branch_bf16() ? d_work_ : a.a_raw;
  if constexpr (kYBf16)
    if (y_bf16() && !cache) Backend::round_to_bf16(a.y16, static_cast<const T*>(y), N * C);
  Backend::linear_forward(a_raw, static_cast<const T*>(y), P(w.wo), N, C, C, false, T(attn_factor_));
  add_bias(a_raw, w.bo, N, C);
  a.a = a.out_att.forward(c, a_raw, N, C);
  a.res_att.forward(c, a.h_mid, a.h_in, a.a, N, C);
  if constexpr (kRoundsBranch)  // after the residual's forward read it in float32
    if (!cache) a.a_kept.keep(a_raw, N * C);
  // ---- MLP
  norm_forward(a.in_mlp, a.xm, a.xm16, a.h_mid, N, C);
  // Stored in bf16, uv and act are computed in backward's scratch first (uv_f32_, d_act_).
  T* uv = uv_bf16() ? uv_f32_ : a.uv;
  with_normed(a.xm, a.xm16, [&](auto x) { Backend::linear_forward(uv, x, P(w.wfc), N, C, UV); });
  add_bias(uv, w.bfc, N, UV);
  mlp_activation_forward(c, a, uv, N, F);
  T* m_raw = kBranchInScratch || branch_bf16() ? d_work_ : a.m_raw;
  with_stored_act(a, [&](auto act) {
    Backend::linear_forward(m_raw, act, P(w.wproj), N, F, C, false, T(mlp_factor_));
  });
  add_bias(m_raw, w.bproj, N, C);
  a.m = a.out_mlp.forward(c, m_raw, N, C);
  a.res_mlp.forward(c, h_out, a.h_mid, a.m, N, C);
  if constexpr (kRoundsBranch)  // after the residual's forward read it in float32
    if (!cache) a.m_kept.keep(m_raw, N * C);
  // Not kept (backward reads neither), or kept in bf16 (a.a_kept, a.m_kept): forward's a, m were scratch.
  if (kBranchInScratch || branch_bf16()) a.a = a.m = nullptr;
}

// The MLP's activation on the float32 uv just computed (in d_uv_ where uv is
// stored in bf16), act and uv then stored as this model keeps them: in one pass
// where the activation stores both in bf16, else rounded after its forward
// (or uv rounded in place: the bf16 method on a float32-stored model).
template <class T, NormScheme Scheme, ResidualRule Residual, class Backend>
void Transformer<T, Scheme, Residual, Backend>::mlp_activation_forward(StepContext<T>& c, LayerActs& a, T* uv,
                                                                      std::int64_t N, std::int64_t F) {
  const std::int64_t UV = kGated ? 2 * F : F;
  if constexpr (kKeepsInForward)
    if (uv_bf16()) return a.activation.forward(c, a.act16, a.uv16, static_cast<const T*>(uv), N, F);
  a.activation.forward(c, act_bf16_ ? d_act_ : a.act, uv, N, F);
  if constexpr (kUvBf16)
    if (uv_bf16()) Backend::round_to_bf16(a.uv16, static_cast<const T*>(uv), N * UV);
  if constexpr (kRoundsUv)
    if (!uv_bf16() && rounds_uv_now()) Backend::round_to_bf16_in_place(a.uv, N * UV);
  if constexpr (kBf16Storage)
    if (act_bf16_) Backend::round_to_bf16(a.act16, static_cast<const T*>(d_act_), N * F);
}

template <class T, NormScheme Scheme, ResidualRule Residual, class Backend>
void Transformer<T, Scheme, Residual, Backend>::mlp_fc_backward(StepContext<T>& c, LayerActs& a,
                                                               const LayerOffsets& w, std::int64_t N, std::int64_t F) {
  const std::int64_t C = cfg_.n_embd, UV = kGated ? 2 * F : F;
  auto fc = [&](auto duv) {
    with_normed(a.xm, a.xm16, [&](auto x) { Backend::linear_backward(d_x_, G(w.wfc), duv, x, P(w.wfc), N, C, UV); });
  };
  if constexpr (kDuvBf16)
    if (duv_bf16()) {
      a.activation.backward(c, d_uv16_, static_cast<const T*>(d_act_), static_cast<const bfloat16*>(a.uv16), N, F);
      return fc(static_cast<const bfloat16*>(d_uv16_));
    }
  with_stored_uv(a, [&](auto uv) { a.activation.backward(c, d_uv_, d_act_, uv, N, F); });
  bias_grad(w.bfc, d_uv_, N, UV);
  fc(static_cast<const T*>(d_uv_));
}

// The entry points, defined out of the class: not inline, so a translation unit
// that sees `extern template class Transformer<…>` (train/variants.hpp, under
// NORMLAB_PREBUILT_MODELS) links the library's copy instead of compiling the
// model again.
template <class T, NormScheme Scheme, ResidualRule Residual, class Backend>
double Transformer<T, Scheme, Residual, Backend>::forward(const std::int64_t* idx, const std::int64_t* targets,
                                                         std::int64_t B, std::int64_t seq) {
  check_sizes(B, seq);
  check_storage();
  check_tokens(idx, B * seq, "token");
  B_ = B;
  seq_ = seq;
  const std::size_t n = static_cast<std::size_t>(B * seq);
  std::copy_n(idx, n, tokens_.data());
  idx_ = tokens_.data();
  targets_ = nullptr;
  if (targets) {
    std::copy_n(targets, n, tokens_.data() + maxB_ * maxT_);
    targets_ = tokens_.data() + maxB_ * maxT_;
  }
  set_sizes(B, seq, 0);
  embed(idx, B, seq, 0);
  for (std::int64_t l = 0; l < cfg_.n_layer; ++l) layer_forward(l, nullptr);
  head_forward(B * seq);
  if (!targets) return 0.0;
  check_tokens(targets_, B * seq, "target");
  return Backend::cross_entropy(static_cast<T*>(nullptr), logits(), targets_, B * seq, cfg_.vocab_size);
}

template <class T, NormScheme Scheme, ResidualRule Residual, class Backend>
const T* Transformer<T, Scheme, Residual, Backend>::decode_step(std::int64_t token, KVCache& cache) {
  if (cache.length >= maxT_)
    throw Error("Transformer::decode_step: the KV cache is full (" + std::to_string(maxT_) + " positions)");
  check_storage();
  check_tokens(&token, 1, "token");
  targets_ = nullptr;
  B_ = 1;
  seq_ = 1;
  set_sizes(1, 1, cache.length);
  embed(&token, 1, 1, cache.length);
  for (std::int64_t l = 0; l < cfg_.n_layer; ++l) layer_forward(l, &cache);
  ++cache.length;
  head_forward(1);
  return logits();
}

template <class T, NormScheme Scheme, ResidualRule Residual, class Backend>
void Transformer<T, Scheme, Residual, Backend>::backward(bool accumulate,
                                                        const std::function<void(std::size_t)>& ready) {
  if (!targets_) throw Error("Transformer::backward: the last forward() had no targets");
  check_storage();
  if (!accumulate) zero_grads();
  const std::int64_t B = B_, seq = seq_, N = B * seq, C = cfg_.n_embd, F = cfg_.ff_dim(), V = cfg_.vocab_size;
  const std::int64_t KV = cfg_.kv_dim();
  set_sizes(B, seq, 0);
  StepContext<T>& c = ctx_;
  Backend::cross_entropy(d_logits_, logits(), targets_, N, V);
  logit_scale_.backward(c, d_logits_, logits_raw_, N, V);
  // dh: (N,C) gradient of the residual stream, updated in place going down.
  if constexpr (is_identity_norm<typename Scheme::final_norm>) {
    Backend::linear_backward(d_h_, G(lm_head_), d_logits_, h_final_, P(lm_head_), N, C, V);
  } else {
    with_normed(hf_, hf16_, [&](auto x) {
      Backend::linear_backward(d_x_, G(lm_head_), d_logits_, x, P(lm_head_), N, C, V);
    });
    final_norm_.backward(c, d_h_, d_x_, h_final_, N, C);
  }
  ready(head_begin_);
  for (std::int64_t l = cfg_.n_layer - 1; l >= 0; --l) {
    LayerActs& a = acts_[l];
    const LayerOffsets& w = layers_[l];
    const T* h_out = block_output(l);
    // ---- MLP: residual, output norm, projection, activation, input projection, input norm
    a.res_mlp.backward(c, d_h_, d_work_, d_h_, h_out, a.h_mid, branch_for_backward(a.m_kept, a.m, N * C), N, C);
    const T* dm = a.out_mlp.backward(c, d_y_, d_work_, a.m_raw, N, C);
    bias_grad(w.bproj, dm, N, C);
    with_stored_act(a, [&](auto act) {
      Backend::linear_backward(d_act_, G(w.wproj), dm, act, P(w.wproj), N, F, C, T(mlp_factor_));
    });
    mlp_fc_backward(c, a, w, N, F);
    Backend::add_into(d_h_, a.in_mlp.backward(c, d_work_, d_x_, a.h_mid, N, C), N * C);
    // ---- attention: residual, output norm, projection, attention, q/k, projections, input norm
    a.res_att.backward(c, d_h_, d_work_, d_h_, a.h_mid, a.h_in, branch_for_backward(a.a_kept, a.a, N * C), N, C);
    const T* da = a.out_att.backward(c, d_x_, d_work_, a.a_raw, N, C);
    bias_grad(w.bo, da, N, C);
    with_stored_y(a, [&](auto y) {
      Backend::linear_backward(d_y_, G(w.wo), da, y, P(w.wo), N, C, C, T(attn_factor_));
      if (qkv_bf16()) {
        if constexpr (kQkvBf16)
          Backend::attention_backward(d_q_, d_k_, d_v_, d_y_, y, a.lse, static_cast<const bfloat16*>(a.q16),
                                      static_cast<const bfloat16*>(a.k16), static_cast<const bfloat16*>(a.v16), B,
                                      seq, cfg_.n_head, cfg_.head_dim(), softmax_scale(), cfg_.attn_window);
      } else {
        const auto [keys, values] = attention_kv(a, N);
        Backend::attention_backward(d_q_, d_k_, d_v_, d_y_, y, a.lse, a.qk.qa(), keys, values, B, seq, cfg_.n_head,
                                    cfg_.head_dim(), softmax_scale(), cfg_.attn_window);
      }
    });
    T* dk = d_k_;
    T* dv = d_v_;
    if (cfg_.grouped_kv()) {  // each kv head's gradient is the sum over its query heads
      group_sum_kv(d_kc_, d_k_, N);
      group_sum_kv(d_vc_, d_v_, N);
      dk = d_kc_;
      dv = d_vc_;
    }
    a.qk.backward(c, d_q_, dk, d_x_);
    bias_grad(w.bq, d_q_, N, C);
    bias_grad(w.bk, dk, N, KV);
    bias_grad(w.bv, dv, N, KV);
    with_normed(a.xa, a.xa16, [&](auto x) {
      Backend::linear_backward(d_x_, G(w.wq), d_q_, x, P(w.wq), N, C, C);
      Backend::linear_backward(d_work_, G(w.wk), dk, x, P(w.wk), N, C, KV);
      Backend::add_into(d_x_, d_work_, N * C);
      Backend::linear_backward(d_work_, G(w.wv), dv, x, P(w.wv), N, C, KV);
      Backend::add_into(d_x_, d_work_, N * C);
    });
    Backend::add_into(d_h_, a.in_att.backward(c, d_work_, d_x_, a.h_in, N, C), N * C);
    ready(layers_[l].begin);
  }
  embed_backward(B, seq);
  ready(std::size_t(0));
}

template <class T, NormScheme Scheme, ResidualRule Residual, class Backend>
void Transformer<T, Scheme, Residual, Backend>::backward(bool accumulate) {
  backward(accumulate, [](std::size_t) {});
}

template <class T, NormScheme Scheme, ResidualRule Residual, class Backend>
std::vector<T> Transformer<T, Scheme, Residual, Backend>::attention_probs(std::int64_t l) const {
  const LayerActs& a = acts_.at(static_cast<std::size_t>(l));
  const std::int64_t H = cfg_.n_head, N = B_ * seq_;
  std::vector<T> P(static_cast<std::size_t>(B_ * H * seq_ * seq_));
  const T* queries = a.qk.qa();
  const T* keys = a.qk.ka();
  buffer wide, wide_q;
  if (qkv_bf16()) {  // the values attention read, widened exactly (forward's float32 q, k were scratch)
    const std::size_t n = static_cast<std::size_t>(N * cfg_.n_embd);
    wide_q.assign(n, T(0));
    wide.assign(n, T(0));
    for (std::size_t i = 0; i < n; ++i) {
      wide_q[i] = T(to_float(a.q16[i]));
      wide[i] = T(to_float(a.k16[i]));
    }
    queries = wide_q.data();
    keys = wide.data();
  }
  if (cfg_.grouped_kv()) {
    wide.assign(static_cast<std::size_t>(N * cfg_.n_embd), T(0));
    repeat_kv(wide.data(), keys, N);
    keys = wide.data();
  }
  Backend::attention_probs(P.data(), a.lse, queries, keys, B_, seq_, H, cfg_.head_dim(), softmax_scale(),
                           cfg_.attn_window);
  return P;
}

}  // namespace normlab
