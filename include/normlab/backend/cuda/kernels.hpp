#pragma once
// The CUDA backend's fused kernels, as plain C++ declarations: host code
// compiled by g++ calls these; their definitions (kernels.cuh, nvcc only) are
// compiled once, by including normlab/backend/cuda/impl.cuh in one .cu file.
//
// Conventions (as the CPU backend, backend/cpu/ops.hpp):
//  * row-major buffers; N rows (B*T tokens), C = d, H heads, D = C/H, F = 4C, V vocab;
//  * "S" buffers hold the storage type of activations (float or bf16, `Dtype`),
//    passed as void*; statistics, parameters and their gradients are float;
//  * all math inside a kernel is float32, whatever the storage;
//  * parameter gradients accumulate (+=); activation gradients are written (=);
//  * every reduction over rows into a parameter gradient goes through a
//    fixed-shape two-stage column reduction (no atomics), so a run is bitwise
//    reproducible;
//  * every function enqueues on `stream` and returns without synchronizing.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "normlab/core/error.hpp"
#include "normlab/core/pointwise.hpp"

namespace normlab::cuda {

enum class Dtype { f32, bf16 };
inline std::size_t dtype_size(Dtype d) { return d == Dtype::f32 ? 4 : 2; }
inline const char* dtype_name(Dtype d) { return d == Dtype::f32 ? "f32" : "bf16"; }

enum class ResidualKind { add, lerp, lerp_nu, lerp_retract, slerp };
enum class QkKind { none, unit_scaled };  // RoPE only, or RoPE + N(·) per head + s_qk
enum class ConstraintKind { none, unit_norm, bounded };
enum class ConstraintAxis { none, rows, cols };

// Scratch for the deterministic column reductions: (colreduce_chunks(N), L) floats.
inline constexpr std::int64_t kColReduceRows = 256;
inline std::int64_t colreduce_chunks(std::int64_t N) { return (N + kColReduceRows - 1) / kColReduceRows; }

// CUDA caps a grid's y (and z) dimension at 65535 blocks. The launchers that put
// a size on y (attention: batch × heads; column reductions: ⌈rows / 256⌉;
// embedding backward: ⌈C / 128⌉) refuse a larger one with the sizes named,
// before anything is enqueued, instead of failing the launch or, worse, silently
// covering only part of the grid after a narrowing cast.
inline constexpr std::int64_t kMaxGridY = 65535;
inline void check_grid_y(std::int64_t blocks, const char* who, const std::string& what) {
  if (blocks > kMaxGridY)
    throw Error(std::string(who) + ": " + what + " needs " + std::to_string(blocks) +
                " blocks on the grid's y axis; CUDA allows at most 65535");
}
// The limits a model of max_batch × max_seq tokens and `heads` heads must meet.
inline void check_model_grid_limits(std::int64_t max_batch, std::int64_t max_seq, std::int64_t heads,
                                    std::int64_t n_embd) {
  check_grid_y(max_batch * heads, "Transformer on cuda_backend", "attention over batch " + std::to_string(max_batch) +
                                                           " x heads " + std::to_string(heads));
  check_grid_y(colreduce_chunks(max_batch * max_seq), "Transformer on cuda_backend",
               "a column reduction over " + std::to_string(max_batch * max_seq) + " tokens (batch x seq)");
  check_grid_y((n_embd + 127) / 128, "Transformer on cuda_backend", "the embedding backward at n_embd " + std::to_string(n_embd));
}

namespace k {

// ---- conversions and small vector ops
void to_storage(Dtype dt, void* dst, const float* src, std::int64_t n, cudaStream_t s);
void to_float(Dtype dt, float* dst, const void* src, std::int64_t n, cudaStream_t s);
// out(n) = float(double(p[c]) * k), |·| when `absolute` (the re-parameterised scales and α);
// p[0] broadcast when `scalar`.
void effective_scale(float* out, const float* p, double k, std::int64_t n, bool absolute, cudaStream_t s,
                     bool scalar = false);
// g[0] += Σ d(n) in a fixed tree (the gradient of a learned scalar broadcast over n).
void fold_scalar(float* g, const float* d, std::int64_t n, cudaStream_t s);
// A learned scalar α: d_scale(n) = dalpha · sign(p[0] k) · k, then g[0] += Σ d_scale.
void alpha_grad_scalar(float* g, float* d_scale, const float* dalpha, const float* p, double k, std::int64_t n,
                       cudaStream_t s);
// x(n) = value; dst(n) += src(n); y(N,L) = x ⊙ s (s broadcast over rows; y may alias x).
void fill(float* x, float value, std::int64_t n, cudaStream_t s);
void add_into(float* dst, const float* src, std::int64_t n, cudaStream_t s);
void scale_columns(float* y, const float* x, const float* sc, std::int64_t N, std::int64_t L, cudaStream_t s);
// ds(L) += c Σ_rows dy ⊙ x (the two-stage column reduction).
void column_dot(float* ds, const float* dy, const float* x, float c, std::int64_t N, std::int64_t L, float* partial,
                cudaStream_t s);
// g(n) += float(double(dalpha) * sign(p k) * k): d|p k|/dp, 0 at 0 as torch.abs.
void alpha_grad_to_stored(float* g, const float* dalpha, const float* p, double k, std::int64_t n, cudaStream_t s);

// ---- embedding
// out(N,C) = wte[idx]
void embedding_forward(Dtype dt, void* out, const std::int32_t* idx, const void* wte, std::int64_t N,
                       std::int64_t C, cudaStream_t s);
// dwte[uniq[u]] += Σ dout[order[k]] for k in [starts[u], starts[u+1]), in order: the
// positions of each token, sorted on the host, so no atomics are needed.
void embedding_backward(Dtype dt, float* dwte, const std::int32_t* uniq, const std::int32_t* starts,
                        const std::int32_t* order, std::int64_t n_uniq, const void* dout, std::int64_t C,
                        cudaStream_t s);

// ---- RMSNorm: y = x / sqrt(mean(x²) + eps) ⊙ w
void rmsnorm_forward(Dtype dt, void* y, float* rstd, const void* x, const float* w, std::int64_t N,
                     std::int64_t C, float eps, cudaStream_t s);
// dx = r(dy⊙w) − x r³/C Σ(dy⊙w⊙x) (written, or added to dx when accumulate); dw += Σ_rows dy⊙x r.
void rmsnorm_backward(Dtype dt, void* dx, float* dw, const void* dy, const void* x, const float* w,
                      const float* rstd, std::int64_t N, std::int64_t C, bool accumulate, float* partial,
                      cudaStream_t s);

// ---- LayerNorm: y = (x − μ) r ⊙ w + b, r = 1/√(var + eps); b may be null
void layernorm_forward(Dtype dt, void* y, float* mean, float* rstd, const void* x, const float* w, const float* b,
                       std::int64_t N, std::int64_t C, float eps, cudaStream_t s);
// dx = r (g − mean(g) − x̂ mean(g ⊙ x̂)), g = dy ⊙ w; dw += Σ_rows dy ⊙ x̂; db += Σ_rows dy (db may be null).
void layernorm_backward(Dtype dt, void* dx, float* dw, float* db, const void* dy, const void* x, const float* w,
                        const float* mean, const float* rstd, std::int64_t N, std::int64_t C, float* partial,
                        cudaStream_t s);

// ---- residual rules (nn/residual.hpp): out from h and f; α is the effective step (C).
// lerp_retract keeps the row norms ‖h‖, ‖f‖, ‖z‖ (N each) for backward; slerp
// also the angle θ (clamped) and whether the clamp was hit (N each).
struct ResidualCache {
  float* nh = nullptr;
  float* nf = nullptr;
  float* nz = nullptr;
  float* th = nullptr;
  float* clamped = nullptr;
};
void residual_forward(Dtype dt, ResidualKind kind, void* out, const void* h, const void* f, const float* alpha,
                      ResidualCache c, std::int64_t N, std::int64_t C, cudaStream_t s);
// dh may alias dout. dalpha(C) accumulates (+=). rowdot: (N) scratch.
// For `add` the caller uses dout as df and nothing is launched.
void residual_backward(Dtype dt, ResidualKind kind, void* dh, void* df, float* dalpha, const void* dout,
                       const void* out, const void* h, const void* f, const float* alpha, ResidualCache c,
                       float* rowdot, std::int64_t N, std::int64_t C, float* partial, cudaStream_t s);

// ---- RoPE (rotate-half) + QK-norm + s_qk, in place on q (B,T,H,D):
// q ← RoPE(q); unit_scaled also writes qh = N(q) per head, qn = ‖q‖ (N*H) and qs = s ⊙ qh.
// cosv/sinv: (Tmax, D/2) tables.
// pos0: the position of the first token (incremental decoding).
void qk_forward(Dtype dt, QkKind kind, void* q, void* qh, float* qn, void* qs, const float* s_eff,
                const float* cosv, const float* sinv, std::int64_t B, std::int64_t T, std::int64_t H,
                std::int64_t D, cudaStream_t stream, std::int64_t pos0 = 0);
// In place on dq: from d(attention input) to d(q before RoPE). unit_scaled: through
// s ⊙ N(·) first (the s_qk gradient is qk_scale_grad's, taken before this call).
void qk_backward(Dtype dt, QkKind kind, void* dq, const void* qh, const float* qn, const float* s_eff,
                 const float* cosv, const float* sinv, std::int64_t B, std::int64_t T, std::int64_t H,
                 std::int64_t D, cudaStream_t stream);
// ds(C) += c Σ_rows (dq ⊙ qh + dk ⊙ kh)
void qk_scale_grad(Dtype dt, float* ds, const void* dq, const void* qh, const void* dk, const void* kh, float c,
                   std::int64_t N, std::int64_t C, float* partial, cudaStream_t s);

// ---- causal attention, flash style: no (T,T) matrix is ever stored.
// q,k,v,y: (B,T,H,D); lse: (B,H,T) log-sum-exp of the scaled scores, kept for backward. D <= 128.
// window > 0: causal sliding window of that many positions (0: full causal).
void attention_forward(Dtype dt, void* y, float* lse, const void* q, const void* k, const void* v, std::int64_t B,
                       std::int64_t T, std::int64_t H, std::int64_t D, float scale, std::int64_t window,
                       cudaStream_t s);
// Recomputes the probabilities; dq, dk, dv written. dsum: (B,H,T) scratch.
void attention_backward(Dtype dt, void* dq, void* dk, void* dv, float* dsum, const void* dy, const void* y,
                        const void* q, const void* k, const void* v, const float* lse, std::int64_t B,
                        std::int64_t T, std::int64_t H, std::int64_t D, float scale, std::int64_t window,
                        cudaStream_t s);
// Grouped-query attention: kv rows (N, Hkv·D) widened to (N, H·D), and the group sums back.
void kv_repeat(float* y, const float* x, std::int64_t N, std::int64_t H, std::int64_t Hkv, std::int64_t D,
               cudaStream_t s);
void kv_group_sum(float* dx, const float* dy, std::int64_t N, std::int64_t H, std::int64_t Hkv, std::int64_t D,
                  cudaStream_t s);
// Plain MLP activations, elementwise over n values.
void pointwise_forward(Pointwise fn, float* act, const float* u, std::int64_t n, cudaStream_t s);
void pointwise_backward(Pointwise fn, float* du, const float* dact, const float* u, std::int64_t n, cudaStream_t s);

// One query (H, D) against S cached keys and values (S, H, D): incremental
// decoding. p: (H, S) scratch for the weights. One block per head.
void attention_decode(float* y, float* p, const float* q, const float* kc, const float* vc, std::int64_t S,
                      std::int64_t H, std::int64_t D, float scale, cudaStream_t s);

// ---- scaled SwiGLU: uv (N,2F) = [u | g]; with s (2F) non-null, uv ⊙ s first. act (N,F) = u ⊙ silu(g).
void swiglu_forward(Dtype dt, void* act, const void* uv, const float* s_uv, std::int64_t N, std::int64_t F,
                    cudaStream_t s);
// duv (N,2F): gradient with respect to the *scaled* uv when s_uv is non-null (then
// call scale_grad_inplace), else with respect to uv.
void swiglu_backward(Dtype dt, void* duv, const void* dact, const void* uv, const float* s_uv, std::int64_t N,
                     std::int64_t F, cudaStream_t s);

// For y = x ⊙ s (s broadcast over rows) given dy in d: ds(L) += c Σ_rows dy ⊙ x, and
// d ← dy ⊙ s in place, in the same pass (s_uv, s_z).
void scale_grad_inplace(Dtype dt, float* ds, void* d, const void* x, const float* s_eff, float c, std::int64_t N,
                        std::int64_t L, float* partial, cudaStream_t s);

// ---- cross-entropy on logits = raw ⊙ s_z (s_z may be null): one kernel per row
// writes row_loss (N) and dlogits = (softmax − onehot)/N with respect to the
// *scaled* logits (not written when dlogits is null); the probabilities are never stored.
void cross_entropy(Dtype dt, void* dlogits, float* row_loss, const void* raw, const float* s_z,
                   const std::int32_t* targets, std::int64_t N, std::int64_t V, cudaStream_t s);

// ---- optimizer
// out[0] = Σ x² over n floats, in double, with a fixed reduction tree (deterministic).
// partial: kSumSqBlocks doubles.
inline constexpr int kSumSqBlocks = 1024;
void sum_squares(double* out, double* partial, const float* x, std::int64_t n, cudaStream_t s);
// x ← c·x in place (float32).
void scale_inplace(float* x, float c, std::int64_t n, cudaStream_t s);

// Lion's update (optim/lion.hpp) and Muon's momentum (optim/muon.hpp), elementwise.
void lion_update(float* p, float* m, const float* g, std::int64_t n, float decay, bool decayed, float lr, float beta1,
                 float beta2, cudaStream_t s);
void muon_momentum(float* u, float* m, const float* g, std::int64_t n, float beta, bool nesterov, cudaStream_t s);
// p ← decay·p + step·u (Muon's update, optim/muon.hpp).
void muon_apply(float* p, const float* u, std::int64_t n, float decay, float step, cudaStream_t s);
// B(k,k) ← c·B + b·A + a·I (Muon's quintic, optim/muon.hpp).
void muon_quintic(float* B, const float* A, std::int64_t k, float a, float b, float c, cudaStream_t s);

struct AdamHyper {
  float decay = 1;       // 1 − lr·wd (applied only when `decayed`)
  bool decayed = false;
  float step_size = 0;   // lr / (1 − β₁ᵗ)
  float beta1 = 0.9f, beta2 = 0.95f;
  float eps = 1e-8f;
  float sqrt_bc2 = 1;    // √(1 − β₂ᵗ)
  float grad_scale = 1;  // clipping coefficient (1 = no clipping)
  bool update = true;    // false: apply only the constraint (initialisation)
};
// One pass over a (R, L) tensor (R = 1 for vectors): AdamW on the float master p,
// then the constraint along `axis`, then the storage copy (null when storage is f32).
void adamw_constrain(float* p, float* m, float* v, const float* g, void* copy, Dtype copy_dt, std::int64_t R,
                     std::int64_t L, ConstraintAxis axis, ConstraintKind kind, AdamHyper hp, cudaStream_t s);

}  // namespace k
}  // namespace normlab::cuda
