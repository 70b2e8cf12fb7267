#pragma once
// Definitions of the launchers declared in kernels.hpp. Include this header
// from exactly one .cu file of a program (tests/cuda/kernels.cu does it for
// normlab's own tests and benchmarks): the kernels are then compiled once, for
// every architecture, and everything else is plain C++.
#include <string>

#include "normlab/backend/cuda/attention.cuh"
#include "normlab/backend/cuda/common.cuh"
#include "normlab/backend/cuda/optim.cuh"
#include "normlab/backend/cuda/rows.cuh"

namespace normlab::cuda::k {

using dev::dispatch;
using dev::flat_blocks;
using dev::row_blocks;

#define NORMLAB_S(ptr) static_cast<S*>(ptr)
#define NORMLAB_CS(ptr) static_cast<const S*>(ptr)

void to_storage(Dtype dt, void* dst, const float* src, std::int64_t n, cudaStream_t s) {
  dispatch(dt, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dev::to_storage_kernel<S><<<flat_blocks(n), 256, 0, s>>>(NORMLAB_S(dst), src, n);
  });
  NORMLAB_CUDA_CHECK_LAUNCH();
}
void to_float(Dtype dt, float* dst, const void* src, std::int64_t n, cudaStream_t s) {
  dispatch(dt, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dev::to_float_kernel<S><<<flat_blocks(n), 256, 0, s>>>(dst, NORMLAB_CS(src), n);
  });
  NORMLAB_CUDA_CHECK_LAUNCH();
}
void effective_scale(float* out, const float* p, double k, std::int64_t n, bool absolute, cudaStream_t s,
                     bool scalar) {
  if (n <= 0) return;
  dev::effective_scale_kernel<<<unsigned((n + 255) / 256), 256, 0, s>>>(out, p, k, n, absolute, scalar);
  NORMLAB_CUDA_CHECK_LAUNCH();
}
void fold_scalar(float* g, const float* d, std::int64_t n, cudaStream_t s) {
  dev::fold_scalar_kernel<<<1, 256, 0, s>>>(g, d, n);
  NORMLAB_CUDA_CHECK_LAUNCH();
}
void alpha_grad_scalar(float* g, float* d_scale, const float* dalpha, const float* p, double k, std::int64_t n,
                       cudaStream_t s) {
  dev::alpha_grad_scalar_kernel<<<1, 256, 0, s>>>(g, d_scale, dalpha, p, k, n);
  NORMLAB_CUDA_CHECK_LAUNCH();
}
void fill(float* x, float value, std::int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  dev::fill_kernel<<<flat_blocks(n), 256, 0, s>>>(x, value, n);
  NORMLAB_CUDA_CHECK_LAUNCH();
}
void add_into(float* dst, const float* src, std::int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  dev::add_into_kernel<<<flat_blocks(n), 256, 0, s>>>(dst, src, n);
  NORMLAB_CUDA_CHECK_LAUNCH();
}
void scale_columns(float* y, const float* x, const float* sc, std::int64_t N, std::int64_t L, cudaStream_t s) {
  if (N * L <= 0) return;
  dev::scale_columns_kernel<<<flat_blocks(N * L), 256, 0, s>>>(y, x, sc, N, L);
  NORMLAB_CUDA_CHECK_LAUNCH();
}
void column_dot(float* ds, const float* dy, const float* x, float c, std::int64_t N, std::int64_t L, float* partial,
                cudaStream_t s) {
  dev::colreduce(ds, true, dev::ColumnDotTerm{dy, x, c, L}, N, L, partial, s);
}
void alpha_grad_to_stored(float* g, const float* dalpha, const float* p, double k, std::int64_t n, cudaStream_t s) {
  dev::alpha_grad_kernel<<<unsigned((n + 255) / 256), 256, 0, s>>>(g, dalpha, p, k, n);
  NORMLAB_CUDA_CHECK_LAUNCH();
}

void embedding_forward(Dtype dt, void* out, const std::int32_t* idx, const void* wte, std::int64_t N,
                       std::int64_t C, cudaStream_t s) {
  dispatch(dt, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dev::embedding_fwd_kernel<S><<<flat_blocks(N * C), 256, 0, s>>>(NORMLAB_S(out), idx, NORMLAB_CS(wte), N, C);
  });
  NORMLAB_CUDA_CHECK_LAUNCH();
}
void embedding_backward(Dtype dt, float* dwte, const std::int32_t* uniq, const std::int32_t* starts,
                        const std::int32_t* order, std::int64_t n_uniq, const void* dout, std::int64_t C,
                        cudaStream_t s) {
  if (n_uniq <= 0) return;
  check_grid_y((C + 127) / 128, "embedding_backward", "n_embd " + std::to_string(C));
  dispatch(dt, [&](auto tag) {
    using S = typename decltype(tag)::type;
    const dim3 grid(unsigned(n_uniq), unsigned((C + 127) / 128));
    dev::embedding_bwd_kernel<S><<<grid, 128, 0, s>>>(dwte, uniq, starts, order, NORMLAB_CS(dout), C);
  });
  NORMLAB_CUDA_CHECK_LAUNCH();
}

void rmsnorm_forward(Dtype dt, void* y, float* rstd, const void* x, const float* w, std::int64_t N, std::int64_t C,
                     float eps, cudaStream_t s) {
  dispatch(dt, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dev::rmsnorm_fwd_kernel<S><<<row_blocks(N), 256, 0, s>>>(NORMLAB_S(y), rstd, NORMLAB_CS(x), w, N, C, eps);
  });
  NORMLAB_CUDA_CHECK_LAUNCH();
}
void rmsnorm_backward(Dtype dt, void* dx, float* dw, const void* dy, const void* x, const float* w, const float* rstd,
                      std::int64_t N, std::int64_t C, bool accumulate, float* partial, cudaStream_t s) {
  dispatch(dt, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dev::rmsnorm_bwd_kernel<S><<<row_blocks(N), 256, 0, s>>>(NORMLAB_S(dx), NORMLAB_CS(dy), NORMLAB_CS(x), w, rstd,
                                                             N, C, accumulate);
    NORMLAB_CUDA_CHECK_LAUNCH();
    dev::colreduce(dw, true, dev::RmsDwTerm<S>{NORMLAB_CS(dy), NORMLAB_CS(x), rstd, C}, N, C, partial, s);
  });
}

void layernorm_forward(Dtype dt, void* y, float* mean, float* rstd, const void* x, const float* w, const float* b,
                       std::int64_t N, std::int64_t C, float eps, cudaStream_t s) {
  dispatch(dt, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dev::layernorm_fwd_kernel<S><<<row_blocks(N), 256, 0, s>>>(NORMLAB_S(y), mean, rstd, NORMLAB_CS(x), w, b, N, C,
                                                               eps);
  });
  NORMLAB_CUDA_CHECK_LAUNCH();
}
void layernorm_backward(Dtype dt, void* dx, float* dw, float* db, const void* dy, const void* x, const float* w,
                        const float* mean, const float* rstd, std::int64_t N, std::int64_t C, float* partial,
                        cudaStream_t s) {
  dispatch(dt, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dev::layernorm_bwd_kernel<S><<<row_blocks(N), 256, 0, s>>>(NORMLAB_S(dx), NORMLAB_CS(dy), NORMLAB_CS(x), w, mean,
                                                               rstd, N, C);
    NORMLAB_CUDA_CHECK_LAUNCH();
    // One scratch for both reductions: the stream runs them one after the other.
    dev::colreduce(dw, true, dev::LnDwTerm<S>{NORMLAB_CS(dy), NORMLAB_CS(x), mean, rstd, C}, N, C, partial, s);
    if (db) dev::colreduce(db, true, dev::RowsTerm<S>{NORMLAB_CS(dy), C}, N, C, partial, s);
  });
}

void residual_forward(Dtype dt, ResidualKind kind, void* out, const void* h, const void* f, const float* alpha,
                      ResidualCache c, std::int64_t N, std::int64_t C, cudaStream_t s) {
  dispatch(dt, [&](auto tag) {
    using S = typename decltype(tag)::type;
    if (kind == ResidualKind::lerp_retract)
      dev::lerp_retract_fwd_kernel<S><<<row_blocks(N), 256, 0, s>>>(NORMLAB_S(out), NORMLAB_CS(h), NORMLAB_CS(f),
                                                                    alpha, c.nh, c.nf, c.nz, N, C);
    else if (kind == ResidualKind::slerp)
      dev::slerp_fwd_kernel<S><<<row_blocks(N), 256, 0, s>>>(NORMLAB_S(out), NORMLAB_CS(h), NORMLAB_CS(f), alpha, c,
                                                             N, C);
    else
      dev::residual_elementwise_fwd<S><<<flat_blocks(N * C), 256, 0, s>>>(kind, NORMLAB_S(out), NORMLAB_CS(h),
                                                                          NORMLAB_CS(f), alpha, N, C);
  });
  NORMLAB_CUDA_CHECK_LAUNCH();
}

void residual_backward(Dtype dt, ResidualKind kind, void* dh, void* df, float* dalpha, const void* dout,
                       const void* out, const void* h, const void* f, const float* alpha, ResidualCache c,
                       float* rowdot, std::int64_t N, std::int64_t C, float* partial, cudaStream_t s) {
  if (kind == ResidualKind::add) return;  // df = dh = dout: the caller uses dout
  dispatch(dt, [&](auto tag) {
    using S = typename decltype(tag)::type;
    const S *go = NORMLAB_CS(dout), *o = NORMLAB_CS(out), *hh = NORMLAB_CS(h), *ff = NORMLAB_CS(f);
    // dα first: dh may alias dout, which the reduction reads.
    if (kind == ResidualKind::slerp) {
      dev::rowdot_kernel<S><<<row_blocks(N), 256, 0, s>>>(rowdot, o, go, N, C);
      NORMLAB_CUDA_CHECK_LAUNCH();
      dev::colreduce(dalpha, true, dev::SlerpAlphaTerm<S>{go, o, hh, ff, alpha, rowdot, c, C}, N, C, partial, s);
      dev::slerp_bwd_kernel<S><<<row_blocks(N), 256, 0, s>>>(NORMLAB_S(dh), NORMLAB_S(df), go, o, hh, ff, alpha, c,
                                                             rowdot, N, C);
    } else if (kind == ResidualKind::lerp_retract) {
      dev::rowdot_kernel<S><<<row_blocks(N), 256, 0, s>>>(rowdot, o, go, N, C);
      NORMLAB_CUDA_CHECK_LAUNCH();
      dev::colreduce(dalpha, true, dev::RetractAlphaTerm<S>{go, o, hh, ff, rowdot, c.nh, c.nf, c.nz, C}, N, C,
                     partial, s);
      dev::lerp_retract_bwd_kernel<S><<<row_blocks(N), 256, 0, s>>>(NORMLAB_S(dh), NORMLAB_S(df), go, o, hh, ff,
                                                                    alpha, c.nh, c.nf, c.nz, rowdot, N, C);
    } else if (kind == ResidualKind::lerp) {
      dev::colreduce(dalpha, true, dev::LerpAlphaTerm<S>{go, hh, ff, C}, N, C, partial, s);
      dev::lerp_bwd_kernel<S><<<flat_blocks(N * C), 256, 0, s>>>(false, NORMLAB_S(dh), NORMLAB_S(df), go, alpha, N, C);
    } else {
      dev::colreduce(dalpha, true, dev::NuAlphaTerm<S>{go, hh, ff, alpha, C}, N, C, partial, s);
      dev::lerp_bwd_kernel<S><<<flat_blocks(N * C), 256, 0, s>>>(true, NORMLAB_S(dh), NORMLAB_S(df), go, alpha, N, C);
    }
  });
  NORMLAB_CUDA_CHECK_LAUNCH();
}

static void check_head_dim(std::int64_t D, const char* who) {
  if (D > dev::kAttMaxD || D % 2 != 0 || D <= 0)
    throw Error(std::string(who) + ": head dimension " + std::to_string(D) +
                " is not supported by the CUDA kernels (even, at most 128)");
}

void qk_forward(Dtype dt, QkKind kind, void* q, void* qh, float* qn, void* qs, const float* s_eff, const float* cosv,
                const float* sinv, std::int64_t B, std::int64_t T, std::int64_t H, std::int64_t D,
                cudaStream_t stream, std::int64_t pos0) {
  check_head_dim(D, "qk_forward");
  const std::int64_t rows = B * T * H;
  dispatch(dt, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dev::qk_fwd_kernel<S><<<row_blocks(rows), 256, 0, stream>>>(kind == QkKind::unit_scaled, NORMLAB_S(q),
                                                                NORMLAB_S(qh), qn, NORMLAB_S(qs), s_eff, cosv, sinv,
                                                                rows, T, H, D, pos0);
  });
  NORMLAB_CUDA_CHECK_LAUNCH();
}
void qk_backward(Dtype dt, QkKind kind, void* dq, const void* qh, const float* qn, const float* s_eff,
                 const float* cosv, const float* sinv, std::int64_t B, std::int64_t T, std::int64_t H, std::int64_t D,
                 cudaStream_t stream) {
  check_head_dim(D, "qk_backward");
  const std::int64_t rows = B * T * H;
  dispatch(dt, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dev::qk_bwd_kernel<S><<<row_blocks(rows), 256, 0, stream>>>(kind == QkKind::unit_scaled, NORMLAB_S(dq),
                                                                NORMLAB_CS(qh), qn, s_eff, cosv, sinv, rows, T, H, D);
  });
  NORMLAB_CUDA_CHECK_LAUNCH();
}
void qk_scale_grad(Dtype dt, float* ds, const void* dq, const void* qh, const void* dk, const void* kh, float c,
                   std::int64_t N, std::int64_t C, float* partial, cudaStream_t s) {
  dispatch(dt, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dev::colreduce(ds, true, dev::QkScaleTerm<S>{NORMLAB_CS(dq), NORMLAB_CS(qh), NORMLAB_CS(dk), NORMLAB_CS(kh), c, C},
                   N, C, partial, s);
  });
}

void attention_forward(Dtype dt, void* y, float* lse, const void* q, const void* k, const void* v, std::int64_t B,
                       std::int64_t T, std::int64_t H, std::int64_t D, float scale, std::int64_t window,
                       cudaStream_t s) {
  if (window >= T) window = 0;
  check_head_dim(D, "attention_forward");
  check_grid_y(B * H, "attention_forward", "batch " + std::to_string(B) + " x heads " + std::to_string(H));
  const dim3 grid(unsigned((T + dev::kAttWarps - 1) / dev::kAttWarps), unsigned(B * H));
  dispatch(dt, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dev::attention_fwd_kernel<S><<<grid, dev::kAttWarps * 32, dev::attention_fwd_smem(int(D)), s>>>(
        NORMLAB_S(y), lse, NORMLAB_CS(q), NORMLAB_CS(k), NORMLAB_CS(v), int(T), int(H), int(D), scale, int(window));
  });
  NORMLAB_CUDA_CHECK_LAUNCH();
}
void attention_backward(Dtype dt, void* dq, void* dk, void* dv, float* dsum, const void* dy, const void* y,
                        const void* q, const void* k, const void* v, const float* lse, std::int64_t B, std::int64_t T,
                        std::int64_t H, std::int64_t D, float scale, std::int64_t window, cudaStream_t s) {
  if (window >= T) window = 0;
  check_head_dim(D, "attention_backward");
  check_grid_y(B * H, "attention_backward", "batch " + std::to_string(B) + " x heads " + std::to_string(H));
  const dim3 grid(unsigned((T + dev::kAttWarps - 1) / dev::kAttWarps), unsigned(B * H));
  dispatch(dt, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dev::attention_dsum_kernel<S><<<row_blocks(B * T * H), 256, 0, s>>>(dsum, NORMLAB_CS(dy), NORMLAB_CS(y),
                                                                        B * T * H, int(T), int(H), int(D));
    NORMLAB_CUDA_CHECK_LAUNCH();
    dev::attention_dq_kernel<S><<<grid, dev::kAttWarps * 32, dev::attention_dq_smem(int(D)), s>>>(
        NORMLAB_S(dq), NORMLAB_CS(dy), NORMLAB_CS(q), NORMLAB_CS(k), NORMLAB_CS(v), lse, dsum, int(T), int(H), int(D),
        scale, int(window));
    NORMLAB_CUDA_CHECK_LAUNCH();
    dev::attention_dkv_kernel<S><<<grid, dev::kAttWarps * 32, dev::attention_dkv_smem(int(D)), s>>>(
        NORMLAB_S(dk), NORMLAB_S(dv), NORMLAB_CS(dy), NORMLAB_CS(q), NORMLAB_CS(k), NORMLAB_CS(v), lse, dsum, int(T),
        int(H), int(D), scale, int(window));
  });
  NORMLAB_CUDA_CHECK_LAUNCH();
}

void attention_decode(float* y, float* p, const float* q, const float* kc, const float* vc, std::int64_t S,
                      std::int64_t H, std::int64_t D, float scale, cudaStream_t s) {
  check_grid_y(1, "attention_decode", "");
  dev::attention_decode_kernel<<<unsigned(H), 128, 0, s>>>(y, p, q, kc, vc, S, H, D, scale);
  NORMLAB_CUDA_CHECK_LAUNCH();
}
void kv_repeat(float* y, const float* x, std::int64_t N, std::int64_t H, std::int64_t Hkv, std::int64_t D,
               cudaStream_t s) {
  dev::kv_repeat_kernel<<<flat_blocks(N * H * D), 256, 0, s>>>(y, x, N, int(H), int(Hkv), int(D));
  NORMLAB_CUDA_CHECK_LAUNCH();
}
void kv_group_sum(float* dx, const float* dy, std::int64_t N, std::int64_t H, std::int64_t Hkv, std::int64_t D,
                  cudaStream_t s) {
  dev::kv_group_sum_kernel<<<flat_blocks(N * Hkv * D), 256, 0, s>>>(dx, dy, N, int(H), int(Hkv), int(D));
  NORMLAB_CUDA_CHECK_LAUNCH();
}
void pointwise_forward(Pointwise fn, float* act, const float* u, std::int64_t n, cudaStream_t s) {
  dev::pointwise_fwd_kernel<<<flat_blocks(n), 256, 0, s>>>(act, u, n, int(fn));
  NORMLAB_CUDA_CHECK_LAUNCH();
}
void pointwise_backward(Pointwise fn, float* du, const float* dact, const float* u, std::int64_t n, cudaStream_t s) {
  dev::pointwise_bwd_kernel<<<flat_blocks(n), 256, 0, s>>>(du, dact, u, n, int(fn));
  NORMLAB_CUDA_CHECK_LAUNCH();
}
void swiglu_forward(Dtype dt, void* act, const void* uv, const float* s_uv, std::int64_t N, std::int64_t F,
                    cudaStream_t s) {
  dispatch(dt, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dev::swiglu_fwd_kernel<S><<<flat_blocks(N * F), 256, 0, s>>>(NORMLAB_S(act), NORMLAB_CS(uv), s_uv, N, F);
  });
  NORMLAB_CUDA_CHECK_LAUNCH();
}
void swiglu_backward(Dtype dt, void* duv, const void* dact, const void* uv, const float* s_uv, std::int64_t N,
                     std::int64_t F, cudaStream_t s) {
  dispatch(dt, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dev::swiglu_bwd_kernel<S><<<flat_blocks(N * F), 256, 0, s>>>(NORMLAB_S(duv), NORMLAB_CS(dact), NORMLAB_CS(uv),
                                                                 s_uv, N, F);
  });
  NORMLAB_CUDA_CHECK_LAUNCH();
}
void scale_grad_inplace(Dtype dt, float* ds, void* d, const void* x, const float* s_eff, float c, std::int64_t N,
                        std::int64_t L, float* partial, cudaStream_t s) {
  dispatch(dt, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dev::colreduce(ds, true, dev::ScaleInplaceTerm<S>{NORMLAB_S(d), NORMLAB_CS(x), s_eff, c, L}, N, L, partial, s);
  });
}

void cross_entropy(Dtype dt, void* dlogits, float* row_loss, const void* raw, const float* s_z,
                   const std::int32_t* targets, std::int64_t N, std::int64_t V, cudaStream_t s) {
  dispatch(dt, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dev::cross_entropy_kernel<S><<<unsigned(N), dev::kCeThreads, 0, s>>>(NORMLAB_S(dlogits), row_loss,
                                                                         NORMLAB_CS(raw), s_z, targets, N, V);
  });
  NORMLAB_CUDA_CHECK_LAUNCH();
}

void sum_squares(double* out, double* partial, const float* x, std::int64_t n, cudaStream_t s) {
  dev::sumsq_partial_kernel<<<kSumSqBlocks, 256, 0, s>>>(partial, x, n);
  NORMLAB_CUDA_CHECK_LAUNCH();
  dev::sumsq_final_kernel<<<1, kSumSqBlocks, 0, s>>>(out, partial);
  NORMLAB_CUDA_CHECK_LAUNCH();
}

void scale_inplace(float* x, float c, std::int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  dev::scale_inplace_kernel<<<flat_blocks(n), 256, 0, s>>>(x, c, n);
  NORMLAB_CUDA_CHECK_LAUNCH();
}

void lion_update(float* p, float* m, const float* g, std::int64_t n, float decay, bool decayed, float lr, float beta1,
                 float beta2, cudaStream_t s) {
  if (n <= 0) return;
  dev::lion_kernel<<<flat_blocks(n), 256, 0, s>>>(p, m, g, n, decay, decayed, lr, beta1, beta2);
  NORMLAB_CUDA_CHECK_LAUNCH();
}

void muon_momentum(float* u, float* m, const float* g, std::int64_t n, float beta, bool nesterov, cudaStream_t s) {
  if (n <= 0) return;
  dev::muon_momentum_kernel<<<flat_blocks(n), 256, 0, s>>>(u, m, g, n, beta, nesterov);
  NORMLAB_CUDA_CHECK_LAUNCH();
}

void muon_quintic(float* B, const float* A, std::int64_t k, float a, float b, float c, cudaStream_t s) {
  if (k <= 0) return;
  dev::muon_quintic_kernel<<<flat_blocks(k * k), 256, 0, s>>>(B, A, k, a, b, c);
  NORMLAB_CUDA_CHECK_LAUNCH();
}

void muon_apply(float* p, const float* u, std::int64_t n, float decay, float step, cudaStream_t s) {
  if (n <= 0) return;
  dev::muon_apply_kernel<<<flat_blocks(n), 256, 0, s>>>(p, u, n, decay, step);
  NORMLAB_CUDA_CHECK_LAUNCH();
}

void adamw_constrain(float* p, float* m, float* v, const float* g, void* copy, Dtype copy_dt, std::int64_t R,
                     std::int64_t L, ConstraintAxis axis, ConstraintKind kind, AdamHyper hp, cudaStream_t s) {
  if (kind == ConstraintKind::none) axis = ConstraintAxis::none;
  dispatch(copy_dt, [&](auto tag) {
    using S = typename decltype(tag)::type;
    S* c = NORMLAB_S(copy);
    if (axis == ConstraintAxis::none)
      dev::adam_flat_kernel<S><<<flat_blocks(R * L), 256, 0, s>>>(p, m, v, g, c, R * L, hp);
    else if (axis == ConstraintAxis::rows)
      dev::adam_rows_kernel<S><<<unsigned(R), 256, 0, s>>>(p, m, v, g, c, L, kind, hp);
    else
      dev::adam_cols_kernel<S><<<unsigned((L + 31) / 32), dim3(32, 8), 0, s>>>(p, m, v, g, c, R, L, kind, hp);
  });
  NORMLAB_CUDA_CHECK_LAUNCH();
}

#undef NORMLAB_S
#undef NORMLAB_CS

}  // namespace normlab::cuda::k
