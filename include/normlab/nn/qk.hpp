#pragma once
// What happens to q and k between their projections and attention: RoPE, and
// the scheme's treatment. Each is a type whose `site<T, Backend>`:
//   forward(ctx, q, k)     q (N, C), k (N, Hkv·D) straight from the projections; applies
//                          RoPE from position ctx.pos0, and returns through
//                          qa()/ka() what attention sees
//   backward(ctx, dq, dk, scratch)  dq, dk: gradients at qa/ka on entry, at
//                          the projections' outputs on return (in place)
// Optional: `static constexpr bool backward_reads_qk = false` where backward
// reads neither q, k nor qa/ka: a bf16 run then keeps what attention reads
// (qa, ka and v) in bf16 only, forward's q and k being scratch. A site may also
// have `bind_bf16(arena, N, cfg)`, which that run calls instead of bind: qa/ka
// are then written over q, k (read only until the model rounds them) and the
// site binds just what its backward reads, keeping any q, k it reads itself
// (KeptForBackward, nn/kept.hpp); the model's q, k are scratch as above.
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "normlab/core/error.hpp"
#include "normlab/nn/context.hpp"
#include "normlab/nn/kept.hpp"
#include "normlab/nn/params.hpp"
#include "normlab/nn/scale.hpp"

namespace normlab {

// nGPT's s_qk is one vector over C = n_head·head_dim that scales q and k alike;
// with fewer key/value heads than query heads no such pairing exists.
inline void require_full_kv(const ModelConfig& cfg, std::string_view site) {
  if (cfg.grouped_kv())
    throw Error("qk site '" + std::string(site) + "' scales q and k with one s_qk over n_head·head_dim, so it needs "
                "as many key/value heads as query heads: n_kv_heads = " + std::to_string(cfg.n_kv_heads) +
                ", n_head = " + std::to_string(cfg.n_head) + " (a trainer: --kv-heads equal to --heads; a "
                "scheme of your own: qk_rope or qk_rms_gain with grouped-query attention)");
}

// GPT: RoPE, nothing else.
struct qk_rope {
  static constexpr std::string_view name = "rope";
  template <class T, class Backend>
  struct site {
    static constexpr bool backward_reads_qk = false;  // RoPE's backward rotates dq, dk alone
    T* q = nullptr;  // (N, C) after RoPE (the projections' outputs, rotated in place)
    T* k = nullptr;
    void declare(ParamStore<T>&, const std::string&, const ModelConfig&) {}
    void bind(Arena<T>&, std::int64_t, const ModelConfig&) {}
    void forward(StepContext<T>& c, T* q_, T* k_) {
      q = q_;
      k = k_;
      Backend::rope_apply(q, c.rope_cos, c.rope_sin, c.B, c.seq, c.H(), c.D(), false, c.pos0);
      Backend::rope_apply(k, c.rope_cos, c.rope_sin, c.B, c.seq, c.Hkv(), c.D(), false, c.pos0);
    }
    const T* qa() const { return q; }
    const T* ka() const { return k; }
    void backward(StepContext<T>& c, T* dq, T* dk, T* /*scratch*/) {
      Backend::rope_apply(dq, c.rope_cos, c.rope_sin, c.B, c.seq, c.H(), c.D(), true);
      Backend::rope_apply(dk, c.rope_cos, c.rope_sin, c.B, c.seq, c.Hkv(), c.D(), true);
    }
  };
};

// GPT+ ("QK-norm"): RoPE, then RMSNorm over each head with a learned gain (dk)
// for q and for k. Its backward reads the rotated q, k: under bf16, rounded
// (KeptForBackward; a bf16 run keeps them in bf16).
struct qk_rms_gain {
  static constexpr std::string_view name = "rms_gain";
  template <class T, class Backend>
  struct site {
    using Kept = KeptForBackward<T, Backend>;
    static constexpr bool kKeepsBf16 = Kept::can_store && requires(T* d, const T* x, const bfloat16* h, std::int64_t n) {
      Backend::rmsnorm_backward(d, d, x, h, x, x, n, n);
    };
    std::size_t q_gain = 0, k_gain = 0;
    Kept q, k;                       // (N, C), (N, KV) after RoPE
    T *qs = nullptr, *ks = nullptr;  // (N, C), (N, KV) RMSNorm ⊙ g: what attention sees
    T *qn = nullptr, *kn = nullptr;  // (N, H), (N, Hkv) 1/rms per head
    bool qa_over_q = false;          // bound by bind_bf16: qs, ks are forward's q, k
    void declare(ParamStore<T>& p, const std::string& prefix, const ModelConfig& cfg) {
      q_gain = p.add(prefix + "q_norm.weight", {cfg.head_dim()}, ParamRole::gain, NormAxis::none,
                     ParamInit::constant(1));
      k_gain = p.add(prefix + "k_norm.weight", {cfg.head_dim()}, ParamRole::gain, NormAxis::none,
                     ParamInit::constant(1));
    }
    void bind(Arena<T>& ar, std::int64_t N, const ModelConfig& cfg) {
      qn = ar.take(N * cfg.n_head);
      kn = ar.take(N * cfg.kv_heads());
      qs = ar.take(N * cfg.n_embd);
      ks = ar.take(N * cfg.kv_dim());
    }
    void bind_bf16(Arena<T>& ar, std::int64_t N, const ModelConfig& cfg)
      requires kKeepsBf16
    {
      qn = ar.take(N * cfg.n_head);
      kn = ar.take(N * cfg.kv_heads());
      q.bind_bf16(ar, N * cfg.n_embd);
      k.bind_bf16(ar, N * cfg.kv_dim());
      qa_over_q = true;
    }
    void forward(StepContext<T>& c, T* q_, T* k_) {
      const std::int64_t D = c.D(), N = c.N();
      Backend::rope_apply(q_, c.rope_cos, c.rope_sin, c.B, c.seq, c.H(), D, false, c.pos0);
      Backend::rope_apply(k_, c.rope_cos, c.rope_sin, c.B, c.seq, c.Hkv(), D, false, c.pos0);
      if (qa_over_q) {  // stored in bf16 before the norms write over q, k (in place, row by row)
        q.keep(q_, N * c.C());
        k.keep(k_, N * c.KV());
        qs = q_;
        ks = k_;
      }
      Backend::rmsnorm_forward(qs, qn, q_, c.P(q_gain), N * c.H(), D, T(c.cfg->rmsnorm_eps));
      Backend::rmsnorm_forward(ks, kn, k_, c.P(k_gain), N * c.Hkv(), D, T(c.cfg->rmsnorm_eps));
      if (!qa_over_q) {  // rounded in place (the bf16 method) only after the norms read them
        q.keep(q_, N * c.C());
        k.keep(k_, N * c.KV());
      }
    }
    const T* qa() const { return qs; }
    const T* ka() const { return ks; }
    void backward(StepContext<T>& c, T* dq, T* dk, T* scratch) {
      const std::int64_t D = c.D(), N = c.N();
      norm_backward(c, scratch, q_gain, dq, q, qn, N * c.H(), D);
      Backend::copy(dq, scratch, N * c.C());
      norm_backward(c, scratch, k_gain, dk, k, kn, N * c.Hkv(), D);
      Backend::copy(dk, scratch, N * c.KV());
      Backend::rope_apply(dq, c.rope_cos, c.rope_sin, c.B, c.seq, c.H(), D, true);
      Backend::rope_apply(dk, c.rope_cos, c.rope_sin, c.B, c.seq, c.Hkv(), D, true);
    }

   private:
    static void norm_backward(StepContext<T>& c, T* dx, std::size_t gain, const T* dy, const Kept& x, const T* rstd,
                              std::int64_t rows, std::int64_t D) {
      if constexpr (kKeepsBf16)
        if (x.stored_in_bf16())
          return Backend::rmsnorm_backward(dx, c.G(gain), dy, static_cast<const bfloat16*>(x.stored), c.P(gain), rstd,
                                           rows, D);
      Backend::rmsnorm_backward(dx, c.G(gain), dy, static_cast<const T*>(x.values), c.P(gain), rstd, rows, D);
    }
  };
};

// nGPT/anGPT: q ← s_qk ⊙ N(q), k ← s_qk ⊙ N(k), per head after RoPE, with the
// learned scale s_qk (C, stored base_scale, effective × sqk_init/base_scale);
// RoPE, unit norm and s_qk in one fused pass each way.
template <ScaleKind K = ScaleKind::vector>
struct qk_unit_scaled {
  static constexpr std::string_view name = "unit_scaled";
  template <class T, class Backend>
  struct site {
    static constexpr bool backward_reads_qk = false;  // backward reads qh, kh and the norms alone
    ScaleParam<T, K> sqk;
    T *qh = nullptr, *kh = nullptr;  // (N, C) per-head unit vectors
    T *qn = nullptr, *kn = nullptr;  // (N, H) per-head norms
    T *qs = nullptr, *ks = nullptr;  // (N, C) s_qk ⊙ unit: what attention sees
    bool qa_over_q = false;          // bound by bind_bf16: qs, ks are forward's q, k
    void declare(ParamStore<T>& p, const std::string& prefix, const ModelConfig& cfg) {
      require_full_kv(cfg, name);
      sqk.declare(p, prefix + "sqk", cfg.n_embd, cfg.base_scale);
    }
    void bind(Arena<T>& ar, std::int64_t N, const ModelConfig& cfg) {
      qh = ar.take(N * cfg.n_embd);
      kh = ar.take(N * cfg.n_embd);
      qn = ar.take(N * cfg.n_head);
      kn = ar.take(N * cfg.n_head);
      qs = ar.take(N * cfg.n_embd);
      ks = ar.take(N * cfg.n_embd);
    }
    void bind_bf16(Arena<T>& ar, std::int64_t N, const ModelConfig& cfg) {
      qh = ar.take(N * cfg.n_embd);
      kh = ar.take(N * cfg.n_embd);
      qn = ar.take(N * cfg.n_head);
      kn = ar.take(N * cfg.n_head);
      qa_over_q = true;
    }
    double k_const(const StepContext<T>& c) const { return c.cfg->sqk_init / c.cfg->base_scale; }
    void forward(StepContext<T>& c, T* q, T* k) {
      if (qa_over_q) {  // the fused pass reads each value before it writes s_qk ⊙ unit over it
        qs = q;
        ks = k;
      }
      sqk.template effective<Backend>(c, k_const(c), c.C(), c.scale_tmp);
      Backend::rope_l2norm_scale_forward(q, qh, qn, qs, c.scale_tmp, c.rope_cos, c.rope_sin, c.B, c.seq, c.H(), c.D(),
                                         c.pos0);
      Backend::rope_l2norm_scale_forward(k, kh, kn, ks, c.scale_tmp, c.rope_cos, c.rope_sin, c.B, c.seq, c.H(), c.D(),
                                         c.pos0);
    }
    const T* qa() const { return qs; }
    const T* ka() const { return ks; }
    void backward(StepContext<T>& c, T* dq, T* dk, T* /*scratch*/) {
      sqk.template effective<Backend>(c, k_const(c), c.C(), c.scale_tmp);
      const T kk = T(k_const(c));
      Backend::fill(c.d_scale, c.C(), T(0));
      Backend::rope_l2norm_scale_backward(dq, c.d_scale, qh, qn, c.scale_tmp, c.rope_cos, c.rope_sin, c.B, c.seq,
                                          c.H(), c.D(), kk);
      Backend::rope_l2norm_scale_backward(dk, c.d_scale, kh, kn, c.scale_tmp, c.rope_cos, c.rope_sin, c.B, c.seq,
                                          c.H(), c.D(), kk);
      sqk.template fold_grad<Backend>(c, c.d_scale, c.C());
    }
  };
};

// Ablation: q ← s_qk ⊙ q, k ← s_qk ⊙ k after RoPE (the scale kept, the
// normalization dropped). s_qk's gradient reads the rotated q, k: under bf16,
// rounded (KeptForBackward; a bf16 run keeps them in bf16).
template <ScaleKind K = ScaleKind::vector>
struct qk_scaled_only {
  static constexpr std::string_view name = "scaled_only";
  template <class T, class Backend>
  struct site {
    using Kept = KeptForBackward<T, Backend>;
    ScaleParam<T, K> sqk;
    Kept q, k;                       // (N, C) after RoPE
    T *qs = nullptr, *ks = nullptr;  // (N, C) s_qk ⊙ q
    bool qa_over_q = false;          // bound by bind_bf16: qs, ks are forward's q, k
    void declare(ParamStore<T>& p, const std::string& prefix, const ModelConfig& cfg) {
      require_full_kv(cfg, name);
      sqk.declare(p, prefix + "sqk", cfg.n_embd, cfg.base_scale);
    }
    void bind(Arena<T>& ar, std::int64_t N, const ModelConfig& cfg) {
      qs = ar.take(N * cfg.n_embd);
      ks = ar.take(N * cfg.n_embd);
    }
    void bind_bf16(Arena<T>& ar, std::int64_t N, const ModelConfig& cfg)
      requires Kept::can_store
    {
      q.bind_bf16(ar, N * cfg.n_embd);
      k.bind_bf16(ar, N * cfg.n_embd);
      qa_over_q = true;
    }
    double k_const(const StepContext<T>& c) const { return c.cfg->sqk_init / c.cfg->base_scale; }
    void forward(StepContext<T>& c, T* q_, T* k_) {
      const std::int64_t N = c.N(), C = c.C();
      Backend::rope_apply(q_, c.rope_cos, c.rope_sin, c.B, c.seq, c.H(), c.D(), false, c.pos0);
      Backend::rope_apply(k_, c.rope_cos, c.rope_sin, c.B, c.seq, c.H(), c.D(), false, c.pos0);
      if (qa_over_q) {  // stored in bf16 before s_qk ⊙ q is written over q (element by element)
        q.keep(q_, N * C);
        k.keep(k_, N * C);
        qs = q_;
        ks = k_;
      }
      sqk.template effective<Backend>(c, k_const(c), C, c.scale_tmp);
      Backend::scale_columns(qs, q_, c.scale_tmp, N, C);
      Backend::scale_columns(ks, k_, c.scale_tmp, N, C);
      if (!qa_over_q) {  // rounded in place (the bf16 method) only after the scaling read them
        q.keep(q_, N * C);
        k.keep(k_, N * C);
      }
    }
    const T* qa() const { return qs; }
    const T* ka() const { return ks; }
    void backward(StepContext<T>& c, T* dq, T* dk, T* scratch) {
      const std::int64_t N = c.N(), C = c.C();
      sqk.template effective<Backend>(c, k_const(c), C, c.scale_tmp);
      const T kk = T(k_const(c));
      Backend::fill(c.d_scale, C, T(0));
      Backend::column_dot_accumulate(c.d_scale, dq, q.read(scratch, N * C), N, C, kk);
      Backend::column_dot_accumulate(c.d_scale, dk, k.read(scratch, N * C), N, C, kk);
      sqk.template fold_grad<Backend>(c, c.d_scale, C);
      Backend::scale_columns(dq, dq, c.scale_tmp, N, C);
      Backend::scale_columns(dk, dk, c.scale_tmp, N, C);
      Backend::rope_apply(dq, c.rope_cos, c.rope_sin, c.B, c.seq, c.H(), c.D(), true);
      Backend::rope_apply(dk, c.rope_cos, c.rope_sin, c.B, c.seq, c.H(), c.D(), true);
    }
  };
};

}  // namespace normlab
