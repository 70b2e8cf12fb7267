#pragma once
// The Transformer class template: its policy sites, buffers and small members.
// Its passes and its construction are defined out of the class (transformer_passes.hpp,
// transformer_build.hpp); include model/transformer.hpp, which describes the block.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "normlab/backend/concept.hpp"
#include "normlab/core/error.hpp"
#include "normlab/nn/config.hpp"
#include "normlab/nn/context.hpp"
#include "normlab/nn/hooks.hpp"
#include "normlab/nn/kept.hpp"
#include "normlab/nn/params.hpp"
#include "normlab/nn/policies.hpp"
#include "normlab/tensor/tensor.hpp"

namespace normlab {

template <class T, NormScheme Scheme, ResidualRule Residual, class Backend = cpu_backend>
class Transformer {
  static_assert(check_block_policies<Scheme, Residual>());
  static_assert(std::is_floating_point_v<T>, "normlab: the scalar type must be float or double");
  // Each hook and the backend member by member (nn/hooks.hpp, backend/concept.hpp):
  // a missing member is the first error, naming the hook and the member.
  static_assert(check_model_backend<Backend, T>());
  static_assert(check_norm_site<typename Scheme::input_norm::template site<T, Backend>, T>());
  static_assert(check_norm_site<typename Scheme::output_norm::template site<T, Backend>, T>());
  static_assert(check_norm_site<typename Scheme::final_norm::template site<T, Backend>, T>());
  static_assert(check_norm_site<typename embedding_norm_of<Scheme>::template site<T, Backend>, T>());
  static_assert(check_qk_site<typename Scheme::qk::template site<T, Backend>, T>());
  static_assert(check_activation_site<typename Scheme::mlp_activation::template site<T, Backend>, T>());
  static_assert(check_logit_scale_site<typename Scheme::logit_scale::template site<T, Backend>, T>());
  static_assert(check_residual_site<typename Residual::template site<T, Backend, Scheme::alpha_kind>, T>());
  static_assert(check_output_factors<typename Scheme::output_factors>());
  static_assert(check_constraint<typename Scheme::constraint, T, Backend>());

  // The policy sites of one block and of the head.
  using InputNorm = typename Scheme::input_norm::template site<T, Backend>;
  using OutputNorm = typename Scheme::output_norm::template site<T, Backend>;
  using FinalNorm = typename Scheme::final_norm::template site<T, Backend>;
  using EmbeddingNorm = typename embedding_norm_of<Scheme>::template site<T, Backend>;
  static constexpr bool kEmbeddingNorm = !is_identity_norm<embedding_norm_of<Scheme>>;
  // A bias is the backend's add_bias/bias_backward where it has them, else a GEMM
  // with a column of ones (the same sums through primitives every backend has).
  static constexpr bool kFusedBias = requires(T* y, const T* x, std::int64_t n) {
    Backend::add_bias(y, x, n, n);
    Backend::bias_backward(y, x, n, n);
  };
  using Qk = typename Scheme::qk::template site<T, Backend>;
  using Activation = typename Scheme::mlp_activation::template site<T, Backend>;
  using LogitScale = typename Scheme::logit_scale::template site<T, Backend>;
  using ResidualSite = typename Residual::template site<T, Backend, Scheme::alpha_kind>;
  using Factors = typename Scheme::output_factors;
  using Constraint = typename Scheme::constraint;
  static constexpr bool kGated = activation_gated<typename Scheme::mlp_activation>();
  // A float32 model on a backend that reads activations stored in bf16 keeps
  // the MLP's act (read by products only) in bf16 when built under bf16
  // products: half its bytes, the same bits (backend/cpu/backend.hpp).
  static constexpr bool kBf16Storage =
      std::is_same_v<T, float> && requires(float* y, const bfloat16* x, bfloat16* h, std::int64_t n) {
        { Backend::stores_bf16() } -> std::convertible_to<bool>;
        Backend::round_to_bf16(h, static_cast<const float*>(y), n);
        Backend::linear_forward(y, x, static_cast<const float*>(y), n, n, n, false, 1.0f);
        Backend::linear_backward(y, y, static_cast<const float*>(y), x, static_cast<const float*>(y), n, n, n, 1.0f);
      };
  // The bf16 method also keeps uv, the activation's saved input, in bf16 where
  // the activation's backward reads it so (the built-ins on the CPU): stored in
  // bf16 by a float32 model built under bf16 products, else rounded in place
  // (a float32 model built before bf16 was set; the float64 oracle), so that
  // every model of a bf16 run computes the same function.
  static constexpr bool kRoundsUv =
      requires(typename Scheme::mlp_activation::template site<float, Backend>& s, StepContext<float>& c, float* d,
               const bfloat16* x, T* t, std::int64_t n) {
        s.backward(c, d, static_cast<const float*>(d), x, n, n);
      } && RoundsToBf16<T, Backend>;
  static constexpr bool kUvBf16 = kBf16Storage && kRoundsUv;
  // ... and, where the activation has the one-pass forward that stores both, calls it.
  static constexpr bool kKeepsInForward =
      kUvBf16 && requires(Activation& s, StepContext<T>& c, bfloat16* h, const T* x, std::int64_t n) {
        s.forward(c, h, h, x, n, n);
      };
  // ... and where its backward also writes the gradient at uv in bf16 (read by
  // products alone, and by the bias gradient of a model with biases, which keeps
  // it in float32), d_uv is kept so too.
  static constexpr bool kDuvBf16 =
      kKeepsInForward && requires(Activation& s, StepContext<T>& c, bfloat16* h, const T* a, const bfloat16* x,
                                  std::int64_t n) { s.backward(c, h, a, x, n, n); };
  // A q/k site whose backward reads neither q, k nor qa/ka, or that keeps what
  // it reads itself when bound by bind_bf16 (nn/qk.hpp), lets a bf16-storing
  // model keep qa, ka and v in bf16 alone: attention's products are then their
  // only readers (the same bits). Not with grouped kv heads.
  static constexpr bool kQkvBf16 =
      kBf16Storage &&
      (requires { requires !Qk::backward_reads_qk; } ||
       requires(Qk& s, Arena<T>& ar, std::int64_t n, const ModelConfig& cfg) { s.bind_bf16(ar, n, cfg); }) &&
      requires(float* y, const float* x, const bfloat16* h, std::int64_t n, float s) {
        Backend::attention_forward(y, y, h, h, h, n, n, n, n, s, n);
        Backend::attention_backward(y, y, y, x, x, x, h, h, h, n, n, n, n, s, n);
      };
  // Attention's output y, read by the output projection's products and by
  // attention backward's rowsum of dY ⊙ Y, which under bf16 reads it rounded
  // in every model (backend/cpu/attention.hpp): kept in bf16 by a bf16-storing
  // model where the backend's attention backward reads it so.
  static constexpr bool kYBf16 =
      kBf16Storage && requires(float* y, const float* x, const bfloat16* h, std::int64_t n, float s) {
        Backend::attention_backward(y, y, y, x, h, x, x, x, x, n, n, n, n, s, n);
      } && (!kQkvBf16 || requires(float* y, const float* x, const bfloat16* h, std::int64_t n, float s) {
        Backend::attention_backward(y, y, y, x, h, x, h, h, h, n, n, n, n, s, n);
      });
  // A block whose output norms are the identity and whose residual rule's
  // backward reads no branch output (nn/residual.hpp) keeps a_raw and m_raw only
  // until the residual joins them: in backward's scratch, every precision.
  static constexpr bool kBranchInScratch =
      is_identity_norm<typename Scheme::output_norm> && requires { requires !Residual::backward_reads_branch; };
  // Where the output norms are the identity and the residual rule's backward
  // reads the branch output f, the bf16 method keeps f for backward as bf16
  // values: forward's residual reads f in float32, backward's reads it rounded
  // in every model of a bf16 run (stored in bf16, f computed in backward's
  // scratch first, by a float32 model built under bf16 products and widened
  // for the rule; rounded in place by one built before, and by the oracle).
  static constexpr bool kRoundsBranch =
      is_identity_norm<typename Scheme::output_norm> && !kBranchInScratch && RoundsToBf16<T, Backend>;
  using Kept = KeptForBackward<T, Backend>;
  static constexpr bool kBranchBf16 = kBf16Storage && kRoundsBranch && Kept::can_store;
  // A norm site whose output only products read may keep it in bf16 (its
  // optional bind_bf16/forward_bf16, nn/norms.hpp): a bf16-storing model then
  // keeps the input and final norms' outputs so, with the same bits.
  template <class Site>
  static constexpr bool kNormBf16Of =
      kBf16Storage && requires(Site& s, Arena<T>& ar, StepContext<T>& c, const T* x, std::int64_t n) {
        s.bind_bf16(ar, n, n);
        { s.forward_bf16(c, x, n, n) } -> std::same_as<const bfloat16*>;
      };

 public:
  using scalar_type = T;
  using scheme = Scheme;
  using residual = Residual;
  using backend = Backend;
  // Buffers in the backend's memory (host arrays on the CPU, device memory on a GPU).
  using buffer = typename Backend::template vector<T>;

  // Counts every buffer first (the constructor memory_plan uses), then allocates.
  Transformer(ModelConfig cfg, std::int64_t max_batch, std::int64_t max_seq);

  // One model owns one arena its pointers point into: a copy would share (and a
  // moved-from object would keep) pointers into another model's buffers.
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;
  Transformer(Transformer&&) = delete;
  Transformer& operator=(Transformer&&) = delete;

  // Bytes a model of this config needs for max_batch × max_seq tokens, counted by
  // the same layout code as the real allocation (nothing but the parameter
  // specs is allocated): what a driver checks against the machine's
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
  // The parameters' specs and their host copy. On a backend with its own memory
  // the step reads and writes param_values()/param_grads() instead: move values
  // across with upload_params()/download_params() (no-ops on the CPU).
  ParamStore<T>& params() { return params_; }
  const ParamStore<T>& params() const { return params_; }
  T* param_values() { return ctx_.values; }
  const T* param_values() const { return ctx_.values; }
  T* param_grads() { return ctx_.grads; }
  const T* param_grads() const { return ctx_.grads; }
  void upload_params() { Backend::upload(ctx_.values, params_.value(), std::int64_t(params_.size())); }
  void download_params() { Backend::download(params_.value(), ctx_.values, std::int64_t(params_.size())); }
  void download_grads() { Backend::download(params_.grad(), ctx_.grads, std::int64_t(params_.size())); }
  std::int64_t max_batch() const { return maxB_; }
  std::int64_t max_seq() const { return maxT_; }
  // "prenorm_rms+add" — stored in checkpoints so a mismatched load can name both.
  static std::string variant_signature() {
    return std::string(Scheme::name) + "+" + std::string(Residual::name);
  }
  // Every policy by its name, so two schemes of one name that differ in a member
  // (a user's derived scheme) are told apart when a checkpoint is loaded.
  static std::string architecture() {
    return "input_norm=" + policy_name<typename Scheme::input_norm>() +
           ";output_norm=" + policy_name<typename Scheme::output_norm>() +
           ";final_norm=" + policy_name<typename Scheme::final_norm>() + ";qk=" + policy_name<typename Scheme::qk>() +
           ";mlp_activation=" + policy_name<typename Scheme::mlp_activation>() +
           ";logit_scale=" + policy_name<typename Scheme::logit_scale>() +
           ";output_factors=" + policy_name<typename Scheme::output_factors>() + ";residual=" + policy_name<Residual>() +
           // only where a scheme has one: the built-in variants' older checkpoints record no embedding_norm
           (kEmbeddingNorm ? ";embedding_norm=" + policy_name<embedding_norm_of<Scheme>>() : std::string());
  }

  // Fresh initialisation as each parameter's declaring policy asked (ParamSpec::init):
  // normal draws in declaration order from one generator (Box–Muller on
  // mt19937_64, the same numbers on every platform), constants filled; then the
  // scheme's constraint (nGPT fixes and anGPT bounds the norms; both start at 1).
  void init(std::uint64_t seed);

  // The scheme's weight constraint on the live parameters (the master copy).
  void apply_constraint();

  // The scheme's constant output factors (1 unless it has them), see docs/angpt.md.
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
  double forward(const std::int64_t* idx, const std::int64_t* targets, std::int64_t B, std::int64_t seq);

  // Keys and values of every layer for incremental decoding: (L, max_seq, KV) each,
  // keys as attention sees them (after RoPE and the scheme's QK transform); with
  // grouped-query attention KV = n_kv_heads·head_dim, the cache n_head/n_kv_heads
  // times smaller than multi-head attention's.
  struct KVCache {
    buffer k, v;
    buffer scratch;  // (max_seq) attention weights
    buffer kx, vx;   // (max_seq, C) the window's keys/values widened to every head (grouped only)
    std::int64_t length = 0;  // positions filled
  };
  KVCache make_kv_cache() const {
    KVCache c;
    c.k.assign(static_cast<std::size_t>(cfg_.n_layer * maxT_ * cfg_.kv_dim()), T(0));
    c.v.assign(c.k.size(), T(0));
    c.scratch.assign(static_cast<std::size_t>(maxT_), T(0));
    if (cfg_.grouped_kv()) {
      c.kx.assign(static_cast<std::size_t>(maxT_ * cfg_.n_embd), T(0));
      c.vx.assign(c.kx.size(), T(0));
    }
    return c;
  }
  // Feeds the next token (at position cache.length) and returns its logits (V).
  // Equal to the last row of a full forward over the same prefix (tested).
  const T* decode_step(std::int64_t token, KVCache& cache);

  // Gradients of the mean cross-entropy of the last forward(), written into
  // params().grads() (zeroed first unless `accumulate`, for gradient accumulation).
  void backward(bool accumulate = false);
  // The same, reporting as it goes down the layers the offset from which
  // params().grads() are final: `ready(from)` means grads[from, size) will not
  // change in this backward (parameters are laid out embedding, layer 0 .. L-1,
  // head, and backward visits them in reverse). Data-parallel training starts
  // each bucket's all-reduce there (dist::GradientSync), overlapping backward.
  // The callback is a std::function (a few calls a step) so that backward, like
  // forward, is one out-of-line function: compiled once where the model is.
  void backward(bool accumulate, const std::function<void(std::size_t)>& ready);

  // (B,T,V) logits of the last forward (after s_z where the scheme has it).
  const T* logits() const { return logits_; }
  // Residual stream after layer l (l = n_layer-1 is the last block's output).
  const T* block_output(std::int64_t l) const {
    return (l + 1 < cfg_.n_layer) ? acts_[l + 1].h_in : h_final_;
  }
  // Whether the MLP's act is kept in bf16 (built under bf16 products on a
  // backend that reads it): then the model runs only under bf16 products.
  bool stores_act_bf16() const { return act_bf16_; }
  std::int64_t last_batch() const { return B_; }
  std::int64_t last_seq() const { return seq_; }
  // Attention probabilities of layer l from the last forward(): (B,H,T,T) with
  // B = last_batch(), T = last_seq(), contiguous; causal softmax rows, zeros
  // outside the mask (above the diagonal, before a window). Recomputed from the
  // stored q, k and log-sum-exp (training keeps no T×T matrix); for diagnostics,
  // not valid after decode_step.
  std::vector<T> attention_probs(std::int64_t l) const;

 private:
  struct LayerOffsets {
    std::size_t begin = 0;  // the layer's first parameter (its own and its sites' follow contiguously)
    std::size_t wq = 0, wk = 0, wv = 0, wo = 0, wfc = 0, wproj = 0;
    std::size_t bq = kNone, bk = kNone, bv = kNone, bo = kNone, bfc = kNone, bproj = kNone;  // with config.bias
  };
  static constexpr std::size_t kNone = std::size_t(-1);
  // One block's activations and its policy sites (each holds its parameters'
  // offsets and what it saves for backward).
  struct LayerActs {
    T* h_in = nullptr;   // (N,C) residual stream entering the layer
    InputNorm in_att;    // xa = input_norm(h_in)
    const T* xa = nullptr;
    const bfloat16* xa16 = nullptr;  // xa where the norm keeps it in bf16 (kNormBf16Of), xa then null
    T* q = nullptr;      // (N,C) projections (the qk site applies RoPE in place)
    T* k = nullptr;      // (N,KV)
    T* v = nullptr;      // (N,KV)
    bfloat16 *q16 = nullptr, *k16 = nullptr, *v16 = nullptr;  // qa, ka, v kept in bf16 (qkv_bf16()): q, k, v null
    Qk qk;               // qa(), ka(): q, k as attention sees them
    T* lse = nullptr;    // (B,H,T) log-sum-exp of each attention row
    T* y = nullptr;      // (N,C) heads concatenated, or nullptr when y is kept in bf16:
    bfloat16* y16 = nullptr;  // (N,C) y in bf16 (y_bf16())
    T* a_raw = nullptr;  // (N,C) c_att · y W_oᵀ (null where kBranchInScratch or kept in bf16)
    Kept a_kept;         // a_raw as the residual's backward reads it (kRoundsBranch)
    OutputNorm out_att;  // a = output_norm(a_raw)
    const T* a = nullptr;
    ResidualSite res_att;
    T* h_mid = nullptr;  // (N,C) after the attention residual
    InputNorm in_mlp;    // xm = input_norm(h_mid)
    const T* xm = nullptr;
    const bfloat16* xm16 = nullptr;  // as xa16
    T* uv = nullptr;     // (N,UV) x W_fcᵀ, or nullptr when uv is stored in bf16:
    bfloat16* uv16 = nullptr;  // (N,UV) uv in bf16 (uv_bf16())
    Activation activation;
    T* act = nullptr;    // (N,F), or nullptr when act is stored in bf16:
    bfloat16* act16 = nullptr;  // (N,F) act in bf16 (act_bf16_)
    T* m_raw = nullptr;  // (N,C) c_mlp · act W_projᵀ (as a_raw)
    Kept m_kept;         // as a_kept
    OutputNorm out_mlp;  // m = output_norm(m_raw)
    const T* m = nullptr;
    ResidualSite res_mlp;
  };

  static ModelConfig resolve(ModelConfig c) {
    if (c.base_scale == 0) c.base_scale = Scheme::hidden_on_sphere ? 1.0 / std::sqrt(double(c.n_embd)) : 0.02;
    return c;
  }

  // Declares the parameters (allocated only with allocate_params) and counts the
  // arena: all of memory_plan's model, and the first half of the real constructor.
  struct PlanOnly {};
  Transformer(PlanOnly, ModelConfig cfg, std::int64_t max_batch, std::int64_t max_seq, bool allocate_params = false);

  // The block's matrices (the reference's names, init N(0, bs), the two output
  // projections N(0, bs/√(2L))), then each policy site's own parameters.
  void declare_params(bool allocate);

  // Every buffer of a step, from one arena; called twice (count, then bind).
  void layout(Arena<T>& ar);

  void zero_grads() { Backend::fill(ctx_.grads, std::int64_t(params_.size()), T(0)); }

  void set_sizes(std::int64_t B, std::int64_t seq, std::int64_t pos0) {
    ctx_.B = B;
    ctx_.seq = seq;
    ctx_.pos0 = pos0;
  }

  // One block over ctx_'s (B,T) tokens; with a cache, a single token at position ctx_.pos0.
  void layer_forward(std::int64_t l, KVCache* cache);

  // The residual stream entering layer 0 for B×seq tokens at positions pos0…:
  // token rows, plus the learned position rows, through the embedding norm.
  void embed(const std::int64_t* idx, std::int64_t B, std::int64_t seq, std::int64_t pos0) {
    const std::int64_t C = cfg_.n_embd, N = B * seq;
    T* e = kEmbeddingNorm ? emb_raw_ : acts_[0].h_in;
    Backend::embedding_forward(e, idx, P(wte_), N, C);
    if (cfg_.positions == Positions::learned)
      for (std::int64_t b = 0; b < B; ++b) Backend::add_into(e + b * seq * C, P(wpe_) + pos0 * C, seq * C);
    if constexpr (kEmbeddingNorm) Backend::copy(acts_[0].h_in, embedding_norm_.forward(ctx_, e, N, C), N * C);
  }
  // d_h_ (the gradient entering layer 0) back to the tables; position rows
  // summed over the batch in order.
  void embed_backward(std::int64_t B, std::int64_t seq) {
    const std::int64_t C = cfg_.n_embd, N = B * seq;
    const T* de = d_h_;
    if constexpr (kEmbeddingNorm) de = embedding_norm_.backward(ctx_, d_x_, d_h_, emb_raw_, N, C);
    if (cfg_.positions == Positions::learned)
      for (std::int64_t b = 0; b < B; ++b) Backend::add_into(G(wpe_), de + b * seq * C, seq * C);
    Backend::embedding_backward(G(wte_), idx_, de, N, C);
  }

  // y(N,M) += bias b (no-op for a layer without one).
  void add_bias(T* y, std::size_t b, std::int64_t N, std::int64_t M) {
    if (b == kNone) return;
    if constexpr (kFusedBias) Backend::add_bias(y, P(b), N, M);
    else Backend::linear_forward(y, static_cast<const T*>(ones_.data()), P(b), N, 1, M, true, T(1));
  }
  void bias_grad(std::size_t b, const T* dy, std::int64_t N, std::int64_t M) {
    if (b == kNone) return;
    if constexpr (kFusedBias) Backend::bias_backward(G(b), dy, N, M);
    else Backend::linear_backward(static_cast<T*>(nullptr), G(b), dy, static_cast<const T*>(ones_.data()), P(b), N, 1, M,
                                  T(1));
  }

  // Final norm, LM head and logit scale over the first N rows.
  void head_forward(std::int64_t N) {
    const std::int64_t C = cfg_.n_embd, V = cfg_.vocab_size;
    norm_forward(final_norm_, hf_, hf16_, h_final_, N, C);
    with_normed(hf_, hf16_, [&](auto x) { Backend::linear_forward(logits_raw_, x, P(lm_head_), N, C, V); });
    logits_ = logit_scale_.forward(ctx_, logits_raw_, N, V);
  }

  // The keys and values attention reads for layer a's N rows: the layer's own
  // with as many kv heads as query heads, else widened into the shared kx_/vx_.
  std::pair<const T*, const T*> attention_kv(const LayerActs& a, std::int64_t N) {
    if (!cfg_.grouped_kv()) return {a.qk.ka(), a.v};
    repeat_kv(kx_, a.qk.ka(), N);
    repeat_kv(vx_, a.v, N);
    return {kx_, vx_};
  }
  // (rows, KV) -> (rows, C): query head h reads kv head h / (H/Hkv). A backend
  // without kv_repeat/kv_group_sum gets the same from copy and add_into.
  void repeat_kv(T* wide, const T* narrow, std::int64_t rows) const {
    const std::int64_t H = cfg_.n_head, Hkv = cfg_.kv_heads(), D = cfg_.head_dim();
    if constexpr (requires { Backend::kv_repeat(wide, narrow, rows, H, Hkv, D); }) {
      Backend::kv_repeat(wide, narrow, rows, H, Hkv, D);
    } else {
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t h = 0; h < H; ++h) Backend::copy(wide + (i * H + h) * D, narrow + (i * Hkv + h / (H / Hkv)) * D, D);
    }
  }
  void group_sum_kv(T* narrow, const T* wide, std::int64_t rows) const {
    const std::int64_t H = cfg_.n_head, Hkv = cfg_.kv_heads(), D = cfg_.head_dim(), group = H / Hkv;
    if constexpr (requires { Backend::kv_group_sum(narrow, wide, rows, H, Hkv, D); }) {
      Backend::kv_group_sum(narrow, wide, rows, H, Hkv, D);
    } else {
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t g = 0; g < Hkv; ++g) {
          T* out = narrow + (i * Hkv + g) * D;
          Backend::copy(out, wide + (i * H + g * group) * D, D);
          for (std::int64_t r = 1; r < group; ++r) Backend::add_into(out, wide + (i * H + g * group + r) * D, D);
        }
    }
  }

  void check_tokens(const std::int64_t* ids, std::int64_t n, const char* what) const {
    for (std::int64_t i = 0; i < n; ++i)
      if (ids[i] < 0 || ids[i] >= cfg_.vocab_size)
        throw Error(std::string("Transformer: ") + what + " id " + std::to_string(ids[i]) + " at position " +
                    std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(cfg_.vocab_size) + ")");
  }

  // uv is stored in bf16 where act is and the activation's backward reads bf16.
  bool uv_bf16() const { return kUvBf16 && act_bf16_; }
  // Calls f with act, and g with uv, as this model stores them (const bfloat16*
  // or T*): the products and the activation's backward read either.
  template <class F>
  void with_stored_act(const LayerActs& a, F&& f) const {
    if constexpr (kBf16Storage)
      if (act_bf16_) return f(static_cast<const bfloat16*>(a.act16));
    f(static_cast<const T*>(a.act));
  }
  template <class F>
  void with_stored_uv(const LayerActs& a, F&& f) const {
    if constexpr (kUvBf16)
      if (uv_bf16()) return f(static_cast<const bfloat16*>(a.uv16));
    f(static_cast<const T*>(a.uv));
  }
  void mlp_activation_forward(StepContext<T>& c, LayerActs& a, T* uv, std::int64_t N, std::int64_t F);
  bool qkv_bf16() const { return kQkvBf16 && act_bf16_ && !cfg_.grouped_kv(); }
  bool y_bf16() const { return kYBf16 && act_bf16_; }
  template <class F>
  void with_stored_y(const LayerActs& a, F&& f) const {
    if constexpr (kYBf16)
      if (y_bf16()) return f(static_cast<const bfloat16*>(a.y16));
    f(static_cast<const T*>(a.y));
  }
  // d_uv is kept in bf16 where uv is, the activation writes it so, and no bias reads it.
  bool duv_bf16() const { return kDuvBf16 && uv_bf16() && !cfg_.bias; }
  // The activation's backward and the input projection's two products (and its bias).
  void mlp_fc_backward(StepContext<T>& c, LayerActs& a, const LayerOffsets& w, std::int64_t N, std::int64_t F);

  // A norm site bound, run and read as this model keeps its output: in bf16
  // (y16 set, y null) where kNormBf16Of holds in a bf16-storing model, else in T.
  template <class Site>
  void bind_norm(Site& s, Arena<T>& ar, std::int64_t rows, std::int64_t C) {
    if constexpr (kNormBf16Of<Site>)
      if (act_bf16_) return s.bind_bf16(ar, rows, C);
    s.bind(ar, rows, C);
  }
  template <class Site>
  void norm_forward(Site& s, const T*& y, const bfloat16*& y16, const T* x, std::int64_t rows, std::int64_t C) {
    if constexpr (kNormBf16Of<Site>)
      if (act_bf16_) {
        y16 = s.forward_bf16(ctx_, x, rows, C);
        return;
      }
    y = s.forward(ctx_, x, rows, C);
  }
  template <class F>
  static void with_normed(const T* y, const bfloat16* y16, F&& f) {
    if constexpr (kNormBf16Of<InputNorm> || kNormBf16Of<FinalNorm>)
      if (y16) return f(y16);
    f(y);
  }

  bool branch_bf16() const { return kBranchBf16 && act_bf16_; }
  // A branch output's buffer: kept in bf16 (f then computed in backward's scratch), or float32.
  void bind_branch(Arena<T>& ar, Kept& kept, T*& raw, std::int64_t n) {
    if constexpr (kBranchBf16)
      if (branch_bf16()) return kept.bind_bf16(ar, n);
    raw = ar.take(n);
  }
  // The branch output f as the residual's backward reads it: kept as the bf16
  // method keeps it (kRoundsBranch; widened into the start of backward's scratch
  // region, free while a residual's backward runs), else f.
  const T* branch_for_backward(const Kept& kept, const T* f, std::int64_t n) {
    if constexpr (kRoundsBranch) return kept.read(d_q_, n);
    return f;
  }

  // Whether this forward rounds uv (the bf16 method; see kRoundsUv).
  bool rounds_uv_now() const { return kRoundsUv && bf16_method_now<T, Backend>(); }

  // A model whose act is kept in bf16 runs only while products read bf16.
  void check_storage() const {
    if constexpr (kBf16Storage)
      if (act_bf16_ && !Backend::stores_bf16())
        throw Error(
            "Transformer: built under bf16 products (its MLP activations kept in bf16) but run with float32 "
            "products: build the model under the precision it runs in");
  }

  void check_sizes(std::int64_t B, std::int64_t seq) const {
    if (B <= 0 || B > maxB_ || seq <= 0 || seq > maxT_)
      throw Error("Transformer: batch " + std::to_string(B) + " x seq " + std::to_string(seq) +
                  " exceeds the sizes the model was built for (" + std::to_string(maxB_) + " x " +
                  std::to_string(maxT_) + ")");
  }

  T softmax_scale() const { return T(softmax_scale_of<Scheme>(cfg_.head_dim())); }

  template <class P>
  static std::string policy_name() {
    if constexpr (requires { std::string_view(P::name); }) return std::string(P::name);
    else return "unnamed";
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

  T* P(std::size_t off) { return ctx_.values + off; }
  const T* P(std::size_t off) const { return ctx_.values + off; }
  T* G(std::size_t off) { return ctx_.grads + off; }

  ModelConfig cfg_;
  std::int64_t maxB_, maxT_;
  ParamStore<T> params_;
  std::size_t wte_ = 0, lm_head_ = 0, wpe_ = 0;
  std::size_t head_begin_ = 0;  // the first parameter after the last layer's
  std::vector<LayerOffsets> layers_;
  buffer arena_memory_;
  Arena<T> arena_;
  buffer live_values_, live_grads_;  // the step's parameters where the backend has its own memory
  std::vector<LayerActs> acts_;
  FinalNorm final_norm_;
  EmbeddingNorm embedding_norm_;
  T* emb_raw_ = nullptr;  // (N,C) embedding before the embedding norm (a scheme with one only)
  buffer ones_;           // (maxB·maxT) ones: the bias GEMM's column where the backend has no add_bias
  LogitScale logit_scale_;
  StepContext<T> ctx_;
  buffer rope_cos_, rope_sin_;  // (maxT, D/2)
  T* h_final_ = nullptr;       // (N,C) residual stream after the last block
  const T* hf_ = nullptr;      // (N,C) final_norm(h_final)
  const bfloat16* hf16_ = nullptr;  // the same kept in bf16 (kNormBf16Of), hf_ then null
  T* logits_raw_ = nullptr;    // (N,V) hf lm_headᵀ
  const T* logits_ = nullptr;  // (N,V) logit_scale(logits_raw)
  T* d_logits_ = nullptr;      // (N,V)
  // (N,C) gradients: d_h_ of the residual stream, d_x_ and d_y_ of a branch's input and
  // output; d_work_ is backward's scratch (a branch output's gradient, then each input
  // projection's share of d_x_).
  T *d_h_ = nullptr, *d_x_ = nullptr, *d_work_ = nullptr, *d_y_ = nullptr;
  T *d_q_ = nullptr, *d_k_ = nullptr, *d_v_ = nullptr;                   // (N,C)
  T* d_act_ = nullptr;      // (N,F); forward's act in float32 before it is stored in bf16
  bool act_bf16_ = false;   // act stored in bf16: decided as the model is built (kBf16Storage)
  T* d_uv_ = nullptr;       // (N,UV), or null where it is kept in bf16 (duv_bf16()):
  bfloat16* d_uv16_ = nullptr;
  T* uv_f32_ = nullptr;     // (N,UV) forward's float32 uv where uv is stored in bf16 (d_uv_, or d_act_ and d_uv16_)
  T *kx_ = nullptr, *vx_ = nullptr;      // (N,C) k, v widened to every query head (grouped-query only)
  T *d_kc_ = nullptr, *d_vc_ = nullptr;  // (N,KV) their gradients summed per kv head (grouped-query only)
  double attn_factor_ = 1.0, mlp_factor_ = 1.0;  // the scheme's output factors
  std::int64_t B_ = 0, seq_ = 0;
  std::vector<std::int64_t> tokens_;        // (2, maxB·maxT): inputs | targets of the last forward
  const std::int64_t* idx_ = nullptr;       // into tokens_
  const std::int64_t* targets_ = nullptr;   // into tokens_, null after a forward without targets
  MemoryPlan plan_;                         // what the counting constructor counted
};

}  // namespace normlab
