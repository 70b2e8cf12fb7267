#pragma once
// cuda::Transformer<Scheme, Residual, Storage>: the model of model/transformer.hpp
// on one GPU. Same ParamSpec list (names, shapes, offsets, roles, axes) as the
// CPU model, so parameters copy across and golden files are reused; float32
// master weights, gradients and Adam moments on the device; activations and
// the GEMM copy of the weights in `Storage` (cuda::f32 or cuda::bf16); the
// optimizer step (global-norm clipping, AdamW per role group, weight
// constraint on the master copy, then the storage copy) runs on the device.
// Every buffer is allocated at construction: a step calls no cudaMalloc.
//
// Plain C++ (compiled by the host compiler); the kernels it calls are declared
// in kernels.hpp and compiled once from impl.cuh.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "normlab/backend/cpu/ops.hpp"
#include "normlab/backend/cuda/backend.hpp"
#include "normlab/backend/cuda/kernels.hpp"
#include "normlab/nn/params.hpp"
#include "normlab/model/transformer.hpp"
#include "normlab/nn/angpt_factors.hpp"
#include "normlab/nn/constraint.hpp"
#include "normlab/nn/policies.hpp"
#include "normlab/optim/adamw.hpp"

namespace normlab::cuda {

// Storage types of activations and of the GEMM copy of the weights.
struct f32 {
  static constexpr Dtype dtype = Dtype::f32;
  static constexpr std::string_view name = "f32";
};
struct bf16 {
  static constexpr Dtype dtype = Dtype::bf16;
  static constexpr std::string_view name = "bf16";
};

inline float bf16_bits_to_float(std::uint16_t b) {
  const std::uint32_t u = std::uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <ResidualRule R>
constexpr ResidualKind residual_kind() {
  if constexpr (std::is_same_v<R, residual_add>) return ResidualKind::add;
  else if constexpr (std::is_same_v<R, lerp>) return ResidualKind::lerp;
  else if constexpr (std::is_same_v<R, lerp_nu>) return ResidualKind::lerp_nu;
  else {
    static_assert(std::is_same_v<R, lerp_retract>,
                  "normlab::cuda: the CUDA backend implements residual_add, lerp, lerp_nu and lerp_retract; "
                  "slerp runs on the CPU backend only (docs/cuda.md)");
    return ResidualKind::lerp_retract;
  }
}

// What this model reads of a scheme. The CUDA model still mirrors the CPU one
// (it is not yet the one model over a CUDA backend, issue 17): it recognises
// normlab's built-in policy types and refuses any other at compile time.
enum class QkMode { none, rms_gain, unit_scaled, scaled_only, other };
namespace facts {
template <class Q>
struct qk_facts {
  static constexpr QkMode mode = QkMode::other;
  static constexpr ScaleKind kind = ScaleKind::vector;
};
template <>
struct qk_facts<qk_rope> {
  static constexpr QkMode mode = QkMode::none;
  static constexpr ScaleKind kind = ScaleKind::vector;
};
template <>
struct qk_facts<qk_rms_gain> {
  static constexpr QkMode mode = QkMode::rms_gain;
  static constexpr ScaleKind kind = ScaleKind::vector;
};
template <ScaleKind K>
struct qk_facts<qk_unit_scaled<K>> {
  static constexpr QkMode mode = QkMode::unit_scaled;
  static constexpr ScaleKind kind = K;
};
template <ScaleKind K>
struct qk_facts<qk_scaled_only<K>> {
  static constexpr QkMode mode = QkMode::scaled_only;
  static constexpr ScaleKind kind = K;
};
template <class A>
struct scaled_facts {  // swiglu / no_logit_scale: unscaled; anything else unknown
  static constexpr bool known = std::is_same_v<A, swiglu> || std::is_same_v<A, no_logit_scale>;
  static constexpr bool scaled = false;
  static constexpr ScaleKind kind = ScaleKind::vector;
};
template <ScaleKind K>
struct scaled_facts<scaled_swiglu<K>> {
  static constexpr bool known = true, scaled = true;
  static constexpr ScaleKind kind = K;
};
template <ScaleKind K>
struct scaled_facts<scaled_logits<K>> {
  static constexpr bool known = true, scaled = true;
  static constexpr ScaleKind kind = K;
};
}  // namespace facts

template <class S>
struct SchemeFacts {
  static constexpr bool rmsnorm_inputs = std::is_same_v<typename S::input_norm, rms_norm>;
  static constexpr bool norms_known =
      std::is_same_v<typename S::output_norm, no_norm> &&
      ((rmsnorm_inputs && std::is_same_v<typename S::final_norm, rms_norm>) ||
       (std::is_same_v<typename S::input_norm, no_norm> && std::is_same_v<typename S::final_norm, no_norm>));
  static constexpr QkMode qk = facts::qk_facts<typename S::qk>::mode;
  static constexpr bool scaled_uv = facts::scaled_facts<typename S::mlp_activation>::scaled;
  static constexpr bool scaled_logits = facts::scaled_facts<typename S::logit_scale>::scaled;
  static constexpr bool all_vector_scales = S::alpha_kind == ScaleKind::vector &&
                                            facts::qk_facts<typename S::qk>::kind == ScaleKind::vector &&
                                            facts::scaled_facts<typename S::mlp_activation>::kind == ScaleKind::vector &&
                                            facts::scaled_facts<typename S::logit_scale>::kind == ScaleKind::vector;
  static constexpr bool activations_known = facts::scaled_facts<typename S::mlp_activation>::known &&
                                            facts::scaled_facts<typename S::logit_scale>::known;
  static constexpr bool approx_factors = S::output_factors::approximate;
  static constexpr bool attention_mixing_factor = std::is_same_v<typename S::output_factors, angpt_output_factors<true>>;
  static constexpr WeightConstraint weights = S::constraint::mode;
  static constexpr bool sqrt_dk_softmax = S::softmax == SoftmaxScale::sqrt_dk;
};

template <NormScheme Scheme, ResidualRule Residual, class Storage>
class Transformer {
  using Facts = SchemeFacts<Scheme>;
  static_assert(check_block_policies<Scheme, Residual>());
  static_assert(Facts::norms_known && Facts::activations_known && Facts::qk != QkMode::other,
                "normlab::cuda: this scheme uses a policy the CUDA model does not implement (it knows normlab's "
                "built-in norms, q/k treatments, activations and logit scales); run it on the CPU backend");
  static_assert(Facts::qk == QkMode::none || Facts::qk == QkMode::unit_scaled,
                "normlab::cuda: QK modes rms_gain (gpt_qknorm) and scaled_only (ngpt_noqknorm) are not implemented "
                "by the CUDA backend yet; use the CPU backend for those variants");
  static_assert(Facts::all_vector_scales,
                "normlab::cuda: scalar or fixed learned scales (ngpt_scalar, ngpt_fixedscales) are not implemented by "
                "the CUDA backend yet");
  static_assert(std::is_same_v<Storage, f32> || std::is_same_v<Storage, bf16>,
                "normlab::cuda: Storage must be cuda::f32 or cuda::bf16");
  static constexpr Dtype dt = Storage::dtype;
  static constexpr ResidualKind kRes = residual_kind<Residual>();
  static constexpr bool kUnitQk = Facts::qk == QkMode::unit_scaled;

 public:
  using scheme = Scheme;
  using residual = Residual;
  using storage = Storage;

  Transformer(Backend& be, ModelConfig cfg, std::int64_t max_batch, std::int64_t max_seq)
      : be_(be), cfg_(resolve(cfg)), maxB_(max_batch), maxT_(max_seq) {
    cfg_.validate();
    if (max_batch <= 0 || max_seq <= 0) throw Error("cuda::Transformer: max_batch and max_seq must be positive");
    if (cfg_.head_dim() > 128) throw Error("cuda::Transformer: head dimension above 128 is not supported");
    check_model_grid_limits(maxB_, maxT_, cfg_.n_head, cfg_.n_embd);
    declare_params();
    const std::size_t np = specs_.size();
    params_ = DeviceBuffer(np * 4);
    grads_ = DeviceBuffer(np * 4);
    m_ = DeviceBuffer(np * 4);
    v_ = DeviceBuffer(np * 4);
    if constexpr (dt != Dtype::f32) copy_ = DeviceBuffer(np * dtype_size(dt));
    for (DeviceBuffer* b : {&params_, &grads_, &m_, &v_})
      be_.fill_bytes(b->get(), 0, np * 4);
    Arena counting;
    layout(counting);
    arena_ = DeviceBuffer(counting.used);
    Arena real{static_cast<char*>(arena_.get()), 0};
    layout(real);
    std::vector<float> cosv(static_cast<std::size_t>(maxT_ * cfg_.head_dim() / 2)), sinv(cosv.size());
    cpu::rope_table(cosv.data(), sinv.data(), maxT_, cfg_.head_dim(), cfg_.rope_base);
    upload(rope_cos_, cosv.data(), cosv.size() * 4);
    upload(rope_sin_, sinv.data(), sinv.size() * 4);
    if constexpr (Facts::approx_factors) {
      // c_att only for the scheme that asks for it (angpt_attnfactor); the paper's anGPT has none.
      if constexpr (Facts::attention_mixing_factor)
        attn_factor_ = cfg_.angpt_attn_factor_mult * angpt_attention_factor(cfg_.head_dim(), maxT_, cfg_.sqk_init);
      mlp_factor_ = cfg_.angpt_mlp_factor_mult * angpt_mlp_factor(cfg_.n_embd);
    }
    configure_optimizer(AdamWConfig{});
    be_.synchronize();
  }
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const std::vector<ParamSpec>& specs() const { return specs_.specs(); }
  std::size_t num_params() const { return specs_.size(); }
  static std::string variant_signature() {
    return std::string(Scheme::name) + "+" + std::string(Residual::name) + "@" + std::string(Storage::name);
  }
  double attn_output_factor() const { return attn_factor_; }
  double mlp_output_factor() const { return mlp_factor_; }
  std::size_t device_bytes() const {
    return params_.bytes() + grads_.bytes() + m_.bytes() + v_.bytes() + copy_.bytes() + arena_.bytes();
  }

  // ---- parameters: host <-> device (float32, ParamStore layout)
  void set_params(const std::vector<float>& host) {
    if (host.size() != num_params())
      throw Error("cuda::Transformer::set_params: " + std::to_string(host.size()) + " values for " +
                  std::to_string(num_params()) + " parameters");
    be_.upload(params_.get(), host.data(), host.size() * 4);
    sync_copy(ConstraintKind::none);
  }
  std::vector<float> get_params() const { return download_f32(params_.as<float>(), num_params()); }
  std::vector<float> get_grads() const { return download_f32(grads_.as<float>(), num_params()); }

  // Fresh initialisation, the same numbers as normlab::Transformer::init (Box–Muller on mt19937_64).
  void init(std::uint64_t seed) {
    std::vector<float> host(num_params());
    std::mt19937_64 rng(seed);
    const double bs = cfg_.base_scale;
    for (const ParamSpec& s : specs()) {
      float* p = host.data() + s.offset;
      const bool proj = s.name.find("c_proj") != std::string::npos;
      switch (s.role) {
        case ParamRole::matrix: fill_normal(p, s.numel, proj ? bs / std::sqrt(2.0 * cfg_.n_layer) : bs, rng); break;
        case ParamRole::gain: std::fill_n(p, s.numel, 1.f); break;
        case ParamRole::alpha: std::fill_n(p, s.numel, float(bs)); break;
        case ParamRole::scale: std::fill_n(p, s.numel, s.name.ends_with("suv") ? 1.f : float(bs)); break;
      }
    }
    be_.upload(params_.get(), host.data(), host.size() * 4);
    sync_copy(Facts::weights != WeightConstraint::none ? ConstraintKind::unit_norm : ConstraintKind::none);
  }

  // ---- optimizer settings, as normlab::AdamW: ε per group, weight decay on matrices.
  void configure_optimizer(const AdamWConfig& c) {
    opt_ = c;
    for (auto& g : groups_) g = GroupSettings{};
    for (auto& g : groups_) g.eps = c.eps;
    group(ParamRole::matrix).weight_decay = c.weight_decay;
  }
  GroupSettings& group(ParamRole r) { return groups_[static_cast<int>(r)]; }
  std::int64_t steps_taken() const { return t_; }

  // Mean cross-entropy over idx (B,T) against targets (host arrays); keeps what backward needs.
  double forward(const std::int64_t* idx, const std::int64_t* targets, std::int64_t B, std::int64_t T) {
    if (B <= 0 || B > maxB_ || T <= 0 || T > maxT_)
      throw Error("cuda::Transformer: batch " + std::to_string(B) + " x seq " + std::to_string(T) +
                  " exceeds the sizes the model was built for (" + std::to_string(maxB_) + " x " +
                  std::to_string(maxT_) + ")");
    if (!targets) throw Error("cuda::Transformer::forward: targets are required (training model)");
    B_ = B;
    T_ = T;
    const std::int64_t N = B * T, C = cfg_.n_embd;
    stage_tokens(idx, targets, N);
    k::embedding_forward(dt, acts_[0].h_in, tok_idx_, Pc(wte_), N, C, s());
    for (std::int64_t l = 0; l < cfg_.n_layer; ++l) layer_forward(l);
    head_forward();
    k::cross_entropy(dt, d_logits_, row_loss_, logits_raw_, Facts::scaled_logits ? sz_tmp_ : nullptr, tok_tgt_, N,
                     cfg_.vocab_size, s());
    host_loss_.resize(static_cast<std::size_t>(N));
    NORMLAB_CUDA_CHECK(cudaMemcpyAsync(host_loss_.data(), row_loss_, N * 4, cudaMemcpyDeviceToHost, s()));
    be_.synchronize();
    double total = 0;
    for (float x : host_loss_) total += double(x);
    has_forward_ = true;
    return total / double(N);
  }

  // (B,T,V) logits of the last forward (after s_z where the scheme has it), on the host.
  std::vector<float> logits() const {
    const std::int64_t N = B_ * T_, V = cfg_.vocab_size;
    std::vector<float> out = download_storage(logits_raw_, N * V);
    if constexpr (Facts::scaled_logits) {
      const std::vector<float> sz = download_f32(sz_tmp_, V);
      for (std::int64_t i = 0; i < N; ++i)
        for (std::int64_t j = 0; j < V; ++j) out[i * V + j] = out[i * V + j] * sz[j];
    }
    return out;
  }

  // Gradients of the last forward's mean loss into the device gradient buffer (zeroed first).
  // d_logits is scaled in place (s_z) and consumed: one backward per forward.
  void backward() {
    if (!has_forward_)
      throw Error("cuda::Transformer::backward: needs a forward() with targets since the last backward() "
                  "(the logits' gradient is consumed in place; call forward() again)");
    has_forward_ = false;
    const std::int64_t N = B_ * T_, C = cfg_.n_embd, F = 4 * C, V = cfg_.vocab_size;
    NORMLAB_CUDA_CHECK(cudaMemsetAsync(grads_.get(), 0, num_params() * 4, s()));
    if constexpr (Facts::scaled_logits)
      k::scale_grad_inplace(dt, G(sz_), d_logits_, logits_raw_, sz_tmp_, float(cfg_.sz_init / cfg_.base_scale), N, V,
                            partial_, s());
    if constexpr (Facts::rmsnorm_inputs) {
      be_.linear_backward_x(dt, d_x_, d_logits_, Pc(lm_head_), N, C, V);
      be_.linear_backward_w(dt, G(lm_head_), d_logits_, hf_norm_, N, C, V);
      k::rmsnorm_backward(dt, d_h_, G(ln_f_), d_x_, h_final_, P(ln_f_), rstd_f_, N, C, false, partial_, s());
    } else {
      be_.linear_backward_x(dt, d_h_, d_logits_, Pc(lm_head_), N, C, V);
      be_.linear_backward_w(dt, G(lm_head_), d_logits_, h_final_, N, C, V);
    }
    const std::int64_t H = cfg_.n_head, D = cfg_.head_dim();
    const float fa = float(attn_factor_), fm = float(mlp_factor_);
    for (std::int64_t l = cfg_.n_layer - 1; l >= 0; --l) {
      LayerActs& a = acts_[l];
      const LayerOffsets& w = layers_[l];
      void* h_out = (l + 1 < cfg_.n_layer) ? acts_[l + 1].h_in : h_final_;
      // ---- MLP residual
      if constexpr (Residual::learned_alpha) effective_alpha(w.mlp_alpha);
      void* df = kRes == ResidualKind::add ? d_h_ : d_f_;
      k::residual_backward(dt, kRes, d_h_, d_f_, d_alpha_, d_h_, h_out, a.h_mid, a.m, alpha_tmp_, a.res_mlp, rowdot_,
                           N, C, partial_, s());
      if constexpr (Residual::learned_alpha)
        k::alpha_grad_to_stored(G(w.mlp_alpha), d_alpha_, P(w.mlp_alpha), alpha_const(), C, s());
      be_.linear_backward_x(dt, d_act_, df, Pc(w.wproj), N, F, C, fm);
      be_.linear_backward_w(dt, G(w.wproj), df, a.act, N, F, C, fm);
      if constexpr (Facts::scaled_uv) k::effective_scale(s_tmp_, P(w.suv), suv_const(), 2 * F, false, s());
      k::swiglu_backward(dt, d_uv_, d_act_, a.uv, Facts::scaled_uv ? s_tmp_ : nullptr, N, F, s());
      if constexpr (Facts::scaled_uv)
        k::scale_grad_inplace(dt, G(w.suv), d_uv_, a.uv, s_tmp_, float(suv_const()), N, 2 * F, partial_, s());
      if constexpr (Facts::rmsnorm_inputs) {
        be_.linear_backward_x(dt, d_x_, d_uv_, Pc(w.wfc), N, C, 2 * F);
        be_.linear_backward_w(dt, G(w.wfc), d_uv_, a.xm, N, C, 2 * F);
        k::rmsnorm_backward(dt, d_h_, G(w.ln_mlp), d_x_, a.h_mid, P(w.ln_mlp), a.rstd_m, N, C, true, partial_, s());
      } else {
        be_.linear_backward_x(dt, d_h_, d_uv_, Pc(w.wfc), N, C, 2 * F, 1.f, 1.f);  // d_h += d_uv W_fc
        be_.linear_backward_w(dt, G(w.wfc), d_uv_, a.h_mid, N, C, 2 * F);
      }
      // ---- attention residual
      if constexpr (Residual::learned_alpha) effective_alpha(w.attn_alpha);
      k::residual_backward(dt, kRes, d_h_, d_f_, d_alpha_, d_h_, a.h_mid, a.h_in, a.a, alpha_tmp_, a.res_att, rowdot_,
                           N, C, partial_, s());
      if constexpr (Residual::learned_alpha)
        k::alpha_grad_to_stored(G(w.attn_alpha), d_alpha_, P(w.attn_alpha), alpha_const(), C, s());
      be_.linear_backward_x(dt, d_y_, df, Pc(w.wo), N, C, C, fa);
      be_.linear_backward_w(dt, G(w.wo), df, a.y, N, C, C, fa);
      const void* qa = kUnitQk ? a.qs : a.q;
      const void* ka = kUnitQk ? a.ks : a.k;
      k::attention_backward(dt, d_q_, d_k_, d_v_, dsum_, d_y_, a.y, qa, ka, a.v, a.lse, B_, T_, H, D, softmax_scale(),
                            s());
      if constexpr (kUnitQk) {
        k::effective_scale(s_tmp_, P(w.sqk), sqk_const(), C, false, s());
        k::qk_scale_grad(dt, G(w.sqk), d_q_, a.qh, d_k_, a.kh, float(sqk_const()), N, C, partial_, s());
      }
      const QkKind qk = kUnitQk ? QkKind::unit_scaled : QkKind::none;
      k::qk_backward(dt, qk, d_q_, a.qh, a.qn, s_tmp_, rope_cos(), rope_sin(), B_, T_, H, D, s());
      k::qk_backward(dt, qk, d_k_, a.kh, a.kn, s_tmp_, rope_cos(), rope_sin(), B_, T_, H, D, s());
      const void* x = Facts::rmsnorm_inputs ? a.xa : a.h_in;
      void* dx = Facts::rmsnorm_inputs ? d_x_ : d_h_;
      const float beta0 = Facts::rmsnorm_inputs ? 0.f : 1.f;  // pre-norm: d_x fresh; sphere: into d_h
      be_.linear_backward_x(dt, dx, d_q_, Pc(w.wq), N, C, C, 1.f, beta0);
      be_.linear_backward_x(dt, dx, d_k_, Pc(w.wk), N, C, C, 1.f, 1.f);
      be_.linear_backward_x(dt, dx, d_v_, Pc(w.wv), N, C, C, 1.f, 1.f);
      be_.linear_backward_w(dt, G(w.wq), d_q_, x, N, C, C);
      be_.linear_backward_w(dt, G(w.wk), d_k_, x, N, C, C);
      be_.linear_backward_w(dt, G(w.wv), d_v_, x, N, C, C);
      if constexpr (Facts::rmsnorm_inputs)
        k::rmsnorm_backward(dt, d_h_, G(w.ln_att), d_x_, a.h_in, P(w.ln_att), a.rstd_a, N, C, true, partial_, s());
    }
    k::embedding_backward(dt, G(wte_), tok_uniq_, tok_starts_, tok_order_, n_uniq_, d_h_, C, s());
  }

  // Global-norm clipping, AdamW (per role group) and the weight constraint, on the
  // device. Returns the gradient norm before clipping.
  double step(double lr, double grad_clip) {
    k::sum_squares(gnorm_, gnorm_partial_, grads_.as<float>(), std::int64_t(num_params()), s());
    double ss = 0;
    NORMLAB_CUDA_CHECK(cudaMemcpyAsync(&ss, gnorm_, sizeof(double), cudaMemcpyDeviceToHost, s()));
    be_.synchronize();
    const double norm = std::sqrt(ss);
    // PyTorch's clip_grad_norm_ (and the CPU path) scales the gradients in place,
    // so what get_grads() returns after a step is what the optimizer used.
    if (grad_clip > 0) {
      const double coef = std::min(1.0, grad_clip / (norm + 1e-6));
      if (coef < 1.0) k::scale_inplace(grads_.as<float>(), float(coef), std::int64_t(num_params()), s());
    }
    ++t_;
    const double bc1 = 1.0 - std::pow(opt_.beta1, double(t_));
    const double bc2 = 1.0 - std::pow(opt_.beta2, double(t_));
    for (const ParamSpec& sp : specs()) {
      const GroupSettings& g = group(sp.role);
      const double glr = lr * g.lr_mult;
      k::AdamHyper hp;
      hp.decay = float(1.0 - glr * g.weight_decay);
      hp.decayed = g.weight_decay != 0.0;
      hp.step_size = float(glr / bc1);
      hp.beta1 = float(opt_.beta1);
      hp.beta2 = float(opt_.beta2);
      hp.eps = float(g.eps);
      hp.sqrt_bc2 = float(std::sqrt(bc2));
      hp.grad_scale = 1.f;  // already clipped in place
      update_tensor(sp, hp, constraint_kind(Facts::weights));
    }
    return norm;
  }

  // Re-applies the scheme's weight constraint to the master copy (and refreshes the storage copy).
  void apply_constraint() { sync_copy(constraint_kind(Facts::weights)); }

 private:
  // Device bump allocator, run twice by layout(): counting (base null), then binding.
  struct Arena {
    char* base = nullptr;
    std::size_t used = 0;
    template <class T>
    T* take(std::int64_t n) {
      const std::size_t at = used;
      used += (std::size_t(n) * sizeof(T) + 255) / 256 * 256;  // 256-byte alignment (cuBLASLt, vector loads)
      return base ? reinterpret_cast<T*>(base + at) : nullptr;
    }
    void* takeS(std::int64_t n) { return take<char>(n * std::int64_t(dtype_size(dt))); }
  };
  struct LayerOffsets {
    std::size_t wq = 0, wk = 0, wv = 0, wo = 0, wfc = 0, wproj = 0;
    std::size_t ln_att = 0, ln_mlp = 0, attn_alpha = 0, mlp_alpha = 0, sqk = 0, suv = 0;
  };
  struct LayerActs {
    void* h_in = nullptr;   // (N,C) residual stream entering the layer
    void* xa = nullptr;     // (N,C) RMSNorm(h_in)            [prenorm]
    float* rstd_a = nullptr;// (N)
    void* q = nullptr;      // (N,C) after RoPE
    void* k = nullptr;      // (N,C)
    void* v = nullptr;      // (N,C)
    void* qh = nullptr;     // (N,C) N(q) per head            [unit_scaled]
    void* kh = nullptr;     // (N,C)
    float* qn = nullptr;    // (N*H) ‖q‖ per head
    float* kn = nullptr;    // (N*H)
    void* qs = nullptr;     // (N,C) s_qk ⊙ qh: what attention sees
    void* ks = nullptr;     // (N,C)
    float* lse = nullptr;   // (B,H,T) attention log-sum-exp
    void* y = nullptr;      // (N,C) heads concatenated
    void* a = nullptr;      // (N,C) attention output (× anGPT factor)
    k::ResidualCache res_att;  // (N) norms each [lerp_retract]
    void* h_mid = nullptr;  // (N,C) after the attention residual
    void* xm = nullptr;     // (N,C) RMSNorm(h_mid)           [prenorm]
    float* rstd_m = nullptr;// (N)
    void* uv = nullptr;     // (N,2F) x W_fcᵀ (unscaled)
    void* act = nullptr;    // (N,F) u ⊙ silu(g)
    void* m = nullptr;      // (N,C) MLP output (× anGPT factor)
    k::ResidualCache res_mlp;
  };

  static ModelConfig resolve(ModelConfig c) {
    if (c.base_scale == 0) c.base_scale = Scheme::hidden_on_sphere ? 1.0 / std::sqrt(double(c.n_embd)) : 0.02;
    return c;
  }

  // Exactly normlab::Transformer::declare_params (same order, so the same offsets; tested).
  void declare_params() {
    const std::int64_t C = cfg_.n_embd, V = cfg_.vocab_size, F = 4 * C;
    const NormAxis rows = NormAxis::rows, cols = NormAxis::cols;
    wte_ = specs_.add("transformer.wte.weight", {V, C}, ParamRole::matrix, rows);
    layers_.resize(static_cast<std::size_t>(cfg_.n_layer));
    for (std::int64_t l = 0; l < cfg_.n_layer; ++l) {
      const std::string p = "transformer.h." + std::to_string(l) + ".";
      LayerOffsets& w = layers_[l];
      w.wq = specs_.add(p + "query.weight", {C, C}, ParamRole::matrix, rows);
      w.wk = specs_.add(p + "key.weight", {C, C}, ParamRole::matrix, rows);
      w.wv = specs_.add(p + "value.weight", {C, C}, ParamRole::matrix, rows);
      w.wo = specs_.add(p + "att_c_proj.weight", {C, C}, ParamRole::matrix, cols);
      w.wfc = specs_.add(p + "c_fc.weight", {2 * F, C}, ParamRole::matrix, rows);
      w.wproj = specs_.add(p + "mlp_c_proj.weight", {C, F}, ParamRole::matrix, cols);
      if constexpr (Facts::rmsnorm_inputs) {
        w.ln_att = specs_.add(p + "rmsnorm_att.weight", {C}, ParamRole::gain);
        w.ln_mlp = specs_.add(p + "rmsnorm_mlp.weight", {C}, ParamRole::gain);
      }
      if constexpr (Residual::learned_alpha) {
        w.attn_alpha = specs_.add(p + "attn_alpha", {C}, ParamRole::alpha);
        w.mlp_alpha = specs_.add(p + "mlp_alpha", {C}, ParamRole::alpha);
      }
      if constexpr (kUnitQk) w.sqk = specs_.add(p + "sqk", {C}, ParamRole::scale);
      if constexpr (Facts::scaled_uv) w.suv = specs_.add(p + "suv", {2 * F}, ParamRole::scale);
    }
    if constexpr (Facts::rmsnorm_inputs) ln_f_ = specs_.add("rmsnorm_f.weight", {C}, ParamRole::gain);
    lm_head_ = specs_.add("lm_head.weight", {V, C}, ParamRole::matrix, rows);
    if constexpr (Facts::scaled_logits) sz_ = specs_.add("sz", {V}, ParamRole::scale);
  }

  void layout(Arena& ar) {
    const std::int64_t N = maxB_ * maxT_, C = cfg_.n_embd, H = cfg_.n_head, F = 4 * C, V = cfg_.vocab_size;
    acts_.assign(static_cast<std::size_t>(cfg_.n_layer), LayerActs{});
    auto cache = [&](k::ResidualCache& c) {
      if constexpr (kRes == ResidualKind::lerp_retract) {
        c.nh = ar.template take<float>(N);
        c.nf = ar.template take<float>(N);
        c.nz = ar.template take<float>(N);
      }
    };
    for (LayerActs& a : acts_) {
      a.h_in = ar.takeS(N * C);
      if constexpr (Facts::rmsnorm_inputs) {
        a.xa = ar.takeS(N * C);
        a.rstd_a = ar.template take<float>(N);
        a.xm = ar.takeS(N * C);
        a.rstd_m = ar.template take<float>(N);
      }
      a.q = ar.takeS(N * C);
      a.k = ar.takeS(N * C);
      a.v = ar.takeS(N * C);
      if constexpr (kUnitQk) {
        a.qh = ar.takeS(N * C);
        a.kh = ar.takeS(N * C);
        a.qn = ar.template take<float>(N * H);
        a.kn = ar.template take<float>(N * H);
        a.qs = ar.takeS(N * C);
        a.ks = ar.takeS(N * C);
      }
      a.lse = ar.template take<float>(N * H);
      a.y = ar.takeS(N * C);
      a.a = ar.takeS(N * C);
      cache(a.res_att);
      a.h_mid = ar.takeS(N * C);
      a.uv = ar.takeS(N * 2 * F);
      a.act = ar.takeS(N * F);
      a.m = ar.takeS(N * C);
      cache(a.res_mlp);
    }
    h_final_ = ar.takeS(N * C);
    if constexpr (Facts::rmsnorm_inputs) {
      hf_norm_ = ar.takeS(N * C);
      rstd_f_ = ar.template take<float>(N);
    }
    logits_raw_ = ar.takeS(N * V);
    d_logits_ = ar.takeS(N * V);
    row_loss_ = ar.template take<float>(N);
    d_h_ = ar.takeS(N * C);
    d_x_ = ar.takeS(N * C);
    d_f_ = ar.takeS(N * C);
    d_y_ = ar.takeS(N * C);
    d_q_ = ar.takeS(N * C);
    d_k_ = ar.takeS(N * C);
    d_v_ = ar.takeS(N * C);
    d_act_ = ar.takeS(N * F);
    d_uv_ = ar.takeS(N * 2 * F);
    dsum_ = ar.template take<float>(N * H);
    rowdot_ = ar.template take<float>(N);
    alpha_tmp_ = ar.template take<float>(C);
    d_alpha_ = ar.template take<float>(C);
    s_tmp_ = ar.template take<float>(2 * F);
    sz_tmp_ = ar.template take<float>(V);
    partial_ = ar.template take<float>(colreduce_chunks(N) * std::max({C, 2 * F, V}));
    gnorm_ = ar.template take<double>(1);
    gnorm_partial_ = ar.template take<double>(k::kSumSqBlocks);
    tokens_ = ar.template take<std::int32_t>(5 * N + 1);
    rope_cos_ = ar.template take<float>(maxT_ * cfg_.head_dim() / 2);
    rope_sin_ = ar.template take<float>(maxT_ * cfg_.head_dim() / 2);
  }

  // idx, targets, and the positions of each token sorted by token (stable), for
  // the atomic-free embedding backward: one upload of (5N + 1) int32.
  void stage_tokens(const std::int64_t* idx, const std::int64_t* targets, std::int64_t N) {
    const std::int64_t V = cfg_.vocab_size;
    for (std::int64_t i = 0; i < N; ++i) {
      if (idx[i] < 0 || idx[i] >= V || targets[i] < 0 || targets[i] >= V)
        throw Error("cuda::Transformer: token or target at position " + std::to_string(i) +
                    " is outside the vocabulary [0, " + std::to_string(V) + ")");
    }
    host_tokens_.assign(static_cast<std::size_t>(5 * N + 1), 0);
    std::int32_t* hi = host_tokens_.data();
    std::int32_t* ht = hi + N;
    std::int32_t* ho = ht + N;
    std::int32_t* hu = ho + N;
    std::int32_t* hs = hu + N;
    count_.assign(static_cast<std::size_t>(V + 1), 0);
    for (std::int64_t i = 0; i < N; ++i) {
      hi[i] = std::int32_t(idx[i]);
      ht[i] = std::int32_t(targets[i]);
      ++count_[static_cast<std::size_t>(idx[i] + 1)];
    }
    for (std::int64_t v = 0; v < V; ++v) count_[v + 1] += count_[v];  // count_[v] = first slot of token v
    std::vector<std::int32_t>& next = scratch_;
    next.assign(count_.begin(), count_.end() - 1);
    for (std::int64_t i = 0; i < N; ++i) ho[next[static_cast<std::size_t>(idx[i])]++] = std::int32_t(i);
    n_uniq_ = 0;
    for (std::int64_t v = 0; v < V; ++v)
      if (count_[v + 1] > count_[v]) {
        hu[n_uniq_] = std::int32_t(v);
        hs[n_uniq_] = count_[v];
        ++n_uniq_;
      }
    hs[n_uniq_] = std::int32_t(N);
    NORMLAB_CUDA_CHECK(cudaMemcpyAsync(tokens_, hi, host_tokens_.size() * 4, cudaMemcpyHostToDevice, s()));
    tok_idx_ = tokens_;
    tok_tgt_ = tokens_ + N;
    tok_order_ = tokens_ + 2 * N;
    tok_uniq_ = tokens_ + 3 * N;
    tok_starts_ = tokens_ + 4 * N;
  }

  void layer_forward(std::int64_t l) {
    const std::int64_t B = B_, T = T_, N = B * T, C = cfg_.n_embd, H = cfg_.n_head, D = cfg_.head_dim(), F = 4 * C;
    LayerActs& a = acts_[l];
    const LayerOffsets& w = layers_[l];
    void* h_out = (l + 1 < cfg_.n_layer) ? acts_[l + 1].h_in : h_final_;
    const void* x = a.h_in;
    if constexpr (Facts::rmsnorm_inputs) {
      k::rmsnorm_forward(dt, a.xa, a.rstd_a, a.h_in, P(w.ln_att), N, C, float(cfg_.rmsnorm_eps), s());
      x = a.xa;
    }
    be_.linear_forward(dt, a.q, x, Pc(w.wq), N, C, C);
    be_.linear_forward(dt, a.k, x, Pc(w.wk), N, C, C);
    be_.linear_forward(dt, a.v, x, Pc(w.wv), N, C, C);
    if constexpr (kUnitQk) k::effective_scale(s_tmp_, P(w.sqk), sqk_const(), C, false, s());
    const QkKind qk = kUnitQk ? QkKind::unit_scaled : QkKind::none;
    k::qk_forward(dt, qk, a.q, a.qh, a.qn, a.qs, s_tmp_, rope_cos(), rope_sin(), B, T, H, D, s());
    k::qk_forward(dt, qk, a.k, a.kh, a.kn, a.ks, s_tmp_, rope_cos(), rope_sin(), B, T, H, D, s());
    const void* qa = kUnitQk ? a.qs : a.q;
    const void* ka = kUnitQk ? a.ks : a.k;
    k::attention_forward(dt, a.y, a.lse, qa, ka, a.v, B, T, H, D, softmax_scale(), s());
    be_.linear_forward(dt, a.a, a.y, Pc(w.wo), N, C, C, float(attn_factor_));
    if constexpr (Residual::learned_alpha) effective_alpha(w.attn_alpha);
    k::residual_forward(dt, kRes, a.h_mid, a.h_in, a.a, alpha_tmp_, a.res_att, N, C, s());
    const void* xm = a.h_mid;
    if constexpr (Facts::rmsnorm_inputs) {
      k::rmsnorm_forward(dt, a.xm, a.rstd_m, a.h_mid, P(w.ln_mlp), N, C, float(cfg_.rmsnorm_eps), s());
      xm = a.xm;
    }
    be_.linear_forward(dt, a.uv, xm, Pc(w.wfc), N, C, 2 * F);
    if constexpr (Facts::scaled_uv) k::effective_scale(s_tmp_, P(w.suv), suv_const(), 2 * F, false, s());
    k::swiglu_forward(dt, a.act, a.uv, Facts::scaled_uv ? s_tmp_ : nullptr, N, F, s());
    be_.linear_forward(dt, a.m, a.act, Pc(w.wproj), N, F, C, float(mlp_factor_));
    if constexpr (Residual::learned_alpha) effective_alpha(w.mlp_alpha);
    k::residual_forward(dt, kRes, h_out, a.h_mid, a.m, alpha_tmp_, a.res_mlp, N, C, s());
  }

  void head_forward() {
    const std::int64_t N = B_ * T_, C = cfg_.n_embd, V = cfg_.vocab_size;
    const void* hf = h_final_;
    if constexpr (Facts::rmsnorm_inputs) {
      k::rmsnorm_forward(dt, hf_norm_, rstd_f_, h_final_, P(ln_f_), N, C, float(cfg_.rmsnorm_eps), s());
      hf = hf_norm_;
    }
    be_.linear_forward(dt, logits_raw_, hf, Pc(lm_head_), N, C, V);
    if constexpr (Facts::scaled_logits)
      k::effective_scale(sz_tmp_, P(sz_), cfg_.sz_init / cfg_.base_scale, V, false, s());
  }

  static ConstraintKind constraint_kind(WeightConstraint w) {
    switch (w) {
      case WeightConstraint::none: return ConstraintKind::none;
      case WeightConstraint::unit_norm: return ConstraintKind::unit_norm;
      case WeightConstraint::bounded: return ConstraintKind::bounded;
    }
    return ConstraintKind::none;
  }
  void update_tensor(const ParamSpec& sp, const k::AdamHyper& hp, ConstraintKind kind) {
    const std::int64_t R = sp.shape.size() == 2 ? sp.shape[0] : 1;
    const std::int64_t L = std::int64_t(sp.numel) / R;
    const ConstraintAxis axis = sp.axis == NormAxis::rows   ? ConstraintAxis::rows
                                : sp.axis == NormAxis::cols ? ConstraintAxis::cols
                                                            : ConstraintAxis::none;
    void* copy = dt == Dtype::f32 ? nullptr : static_cast<char*>(copy_.get()) + sp.offset * dtype_size(dt);
    k::adamw_constrain(P(sp.offset), m_.as<float>() + sp.offset, v_.as<float>() + sp.offset, G(sp.offset), copy, dt, R,
                       L, axis, kind, hp, s());
  }
  // Constraint only (no update), then the storage copy.
  void sync_copy(ConstraintKind kind) {
    k::AdamHyper hp;
    hp.update = false;
    for (const ParamSpec& sp : specs()) update_tensor(sp, hp, kind);
    be_.synchronize();
  }

  void effective_alpha(std::size_t off) { k::effective_scale(alpha_tmp_, P(off), alpha_const(), cfg_.n_embd, true, s()); }
  double alpha_const() const { return cfg_.alpha_init / cfg_.base_scale; }
  double sqk_const() const { return cfg_.sqk_init / cfg_.base_scale; }
  double suv_const() const { return cfg_.suv_init * std::sqrt(double(cfg_.n_embd)); }
  float softmax_scale() const {
    const double D = double(cfg_.head_dim());
    return float(Facts::sqrt_dk_softmax ? std::sqrt(D) : 1.0 / std::sqrt(D));
  }

  static void fill_normal(float* p, std::size_t n, double stddev, std::mt19937_64& rng) {
    constexpr double two_pi = 6.283185307179586476925286766559;
    auto uniform = [&] { return (double(rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0); };
    for (std::size_t i = 0; i < n; i += 2) {
      const double r = std::sqrt(-2.0 * std::log(uniform())), th = two_pi * uniform();
      p[i] = float(stddev * r * std::cos(th));
      if (i + 1 < n) p[i + 1] = float(stddev * r * std::sin(th));
    }
  }

  void upload(float* dst, const float* src, std::size_t bytes) { be_.upload(dst, src, bytes); }
  std::vector<float> download_f32(const float* src, std::size_t n) const {
    std::vector<float> out(n);
    be_.download(out.data(), src, n * 4);
    return out;
  }
  std::vector<float> download_storage(const void* src, std::int64_t n) const {
    if constexpr (dt == Dtype::f32) {
      return download_f32(static_cast<const float*>(src), std::size_t(n));
    } else {
      std::vector<std::uint16_t> bits(static_cast<std::size_t>(n));
      be_.download(bits.data(), src, std::size_t(n) * 2);
      std::vector<float> out(bits.size());
      for (std::size_t i = 0; i < bits.size(); ++i) out[i] = bf16_bits_to_float(bits[i]);
      return out;
    }
  }

  cudaStream_t s() const { return be_.stream(); }
  float* P(std::size_t off) const { return params_.as<float>() + off; }
  float* G(std::size_t off) const { return grads_.as<float>() + off; }
  // The GEMM operand: the master itself in float32, else the storage copy.
  const void* Pc(std::size_t off) const {
    if constexpr (dt == Dtype::f32) return params_.as<float>() + off;
    else return static_cast<const char*>(copy_.get()) + off * dtype_size(dt);
  }
  const float* rope_cos() const { return rope_cos_; }
  const float* rope_sin() const { return rope_sin_; }

  Backend& be_;
  ModelConfig cfg_;
  std::int64_t maxB_, maxT_;
  ParamStore<float> specs_;  // specs and offsets only (never finalized: no host buffers)
  std::size_t wte_ = 0, lm_head_ = 0, ln_f_ = 0, sz_ = 0;
  std::vector<LayerOffsets> layers_;
  DeviceBuffer params_, grads_, m_, v_, copy_, arena_;
  std::vector<LayerActs> acts_;
  void* h_final_ = nullptr;     // (N,C)
  void* hf_norm_ = nullptr;     // (N,C) [prenorm]
  float* rstd_f_ = nullptr;     // (N)
  void* logits_raw_ = nullptr;  // (N,V) h lm_headᵀ
  void* d_logits_ = nullptr;    // (N,V) written by the cross-entropy kernel in forward()
  float* row_loss_ = nullptr;   // (N)
  void *d_h_ = nullptr, *d_x_ = nullptr, *d_f_ = nullptr, *d_y_ = nullptr;  // (N,C)
  void *d_q_ = nullptr, *d_k_ = nullptr, *d_v_ = nullptr;                   // (N,C)
  void* d_act_ = nullptr;       // (N,F)
  void* d_uv_ = nullptr;        // (N,2F)
  float* dsum_ = nullptr;       // (B,H,T) attention backward scratch
  float* rowdot_ = nullptr;     // (N) residual backward scratch
  float* alpha_tmp_ = nullptr;  // (C) effective α
  float* d_alpha_ = nullptr;    // (C)
  float* s_tmp_ = nullptr;      // (2F) effective s_qk or s_uv
  float* sz_tmp_ = nullptr;     // (V) effective s_z
  float* partial_ = nullptr;    // column-reduction scratch
  double* gnorm_ = nullptr;
  double* gnorm_partial_ = nullptr;
  std::int32_t* tokens_ = nullptr;  // (5N+1) idx | targets | order | uniq | starts
  const std::int32_t *tok_idx_ = nullptr, *tok_tgt_ = nullptr, *tok_order_ = nullptr, *tok_uniq_ = nullptr,
                     *tok_starts_ = nullptr;
  std::int64_t n_uniq_ = 0;
  float* rope_cos_ = nullptr;   // (maxT, D/2)
  float* rope_sin_ = nullptr;
  std::vector<std::int32_t> host_tokens_, count_, scratch_;
  std::vector<float> host_loss_;
  AdamWConfig opt_;
  std::array<GroupSettings, kParamRoles> groups_{};
  double attn_factor_ = 1.0, mlp_factor_ = 1.0;
  std::int64_t B_ = 0, T_ = 0, t_ = 0;
  bool has_forward_ = false;
};

template <class Storage>
using GPT = Transformer<prenorm_rms, residual_add, Storage>;
template <class Storage>
using NGPT = Transformer<sphere, lerp_retract, Storage>;
template <class Storage>
using ANGPT = Transformer<scalar_factors, lerp_nu, Storage>;
template <class Storage>
using ANGPT_ATTNFACTOR = Transformer<scalar_factors_attnfactor, lerp_nu, Storage>;

}  // namespace normlab::cuda
