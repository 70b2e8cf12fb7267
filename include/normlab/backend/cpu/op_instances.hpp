#pragma once
// The CPU ops' float and double instantiations, listed once: src/cpu_ops.cpp
// compiles them (EXT empty), and a program built against the normlab_cpu_ops
// library (NORMLAB_PREBUILT_CPU_OPS) declares them extern (EXT = extern), so
// it does not compile the kernels again. A signature here that does not match
// ops.hpp fails to compile.
#define NORMLAB_CPU_OP_INSTANCES(EXT, Scalar) \
  EXT template void linear_forward<Scalar>(Scalar* Y, const Scalar* X, const Scalar* W, std::int64_t N, std::int64_t in, std::int64_t out, bool accumulate, Scalar alpha); \
  EXT template void gram<Scalar>(Scalar* C, const Scalar* X, std::int64_t n, std::int64_t k, bool transposed, Scalar alpha); \
  EXT template void linear_backward<Scalar>(Scalar* dX, Scalar* dW, const Scalar* dY, const Scalar* X, const Scalar* W, std::int64_t N, std::int64_t in, std::int64_t out, Scalar alpha); \
  EXT template void embedding_forward<Scalar>(Scalar* out, const std::int64_t* idx, const Scalar* wte, std::int64_t N, std::int64_t C); \
  EXT template void embedding_backward<Scalar>(Scalar* dwte, const std::int64_t* idx, const Scalar* dout, std::int64_t N, std::int64_t C); \
  EXT template void rmsnorm_forward<Scalar>(Scalar* y, Scalar* rstd, const Scalar* x, const Scalar* w, std::int64_t N, std::int64_t C, Scalar eps); \
  EXT template void rmsnorm_backward<Scalar>(Scalar* dx, Scalar* dw, const Scalar* dy, const Scalar* x, const Scalar* w, const Scalar* rstd, std::int64_t N, std::int64_t C); \
  EXT template void l2norm_rows_forward<Scalar>(Scalar* y, Scalar* norm, const Scalar* x, std::int64_t rows, std::int64_t L); \
  EXT template void l2norm_rows_backward<Scalar>(Scalar* dx, const Scalar* dy, const Scalar* y, const Scalar* norm, std::int64_t rows, std::int64_t L); \
  EXT template void rope_table<Scalar>(Scalar* cosv, Scalar* sinv, std::int64_t seq, std::int64_t dk, double base); \
  EXT template void rope_apply<Scalar>(Scalar* x, const Scalar* cosv, const Scalar* sinv, std::int64_t B, std::int64_t seq, std::int64_t H, std::int64_t dk, bool inverse, std::int64_t pos0); \
  EXT template void rope_l2norm_scale_forward<Scalar>(Scalar* x, Scalar* xh, Scalar* norm, Scalar* xs, const Scalar* s, const Scalar* cosv, const Scalar* sinv, std::int64_t B, std::int64_t seq, std::int64_t H, std::int64_t dk, std::int64_t pos0); \
  EXT template void rope_l2norm_scale_backward<Scalar>(Scalar* dx, Scalar* ds, const Scalar* xh, const Scalar* norm, const Scalar* s, const Scalar* cosv, const Scalar* sinv, std::int64_t B, std::int64_t seq, std::int64_t H, std::int64_t dk, Scalar c); \
  EXT template void attention_forward<Scalar>(Scalar* y, Scalar* lse, const Scalar* q, const Scalar* k, const Scalar* v, std::int64_t B, std::int64_t seq, std::int64_t H, std::int64_t dk, Scalar scale, std::int64_t window); \
  EXT template void attention_backward<Scalar>(Scalar* dq, Scalar* dk_, Scalar* dv, const Scalar* dy, const Scalar* y, const Scalar* lse, const Scalar* q, const Scalar* k, const Scalar* v, std::int64_t B, std::int64_t seq, std::int64_t H, std::int64_t dk, Scalar scale, std::int64_t window); \
  EXT template void attention_probs<Scalar>(Scalar* P, const Scalar* lse, const Scalar* q, const Scalar* k, std::int64_t B, std::int64_t seq, std::int64_t H, std::int64_t dk, Scalar scale, std::int64_t window); \
  EXT template void attention_decode<Scalar>(Scalar* y, Scalar* p, const Scalar* q, const Scalar* kc, const Scalar* vc, std::int64_t S, std::int64_t H, std::int64_t dk, Scalar scale); \
  EXT template void kv_repeat<Scalar>(Scalar* y, const Scalar* x, std::int64_t N, std::int64_t H, std::int64_t Hkv, std::int64_t dk); \
  EXT template void kv_group_sum<Scalar>(Scalar* dx, const Scalar* dy, std::int64_t N, std::int64_t H, std::int64_t Hkv, std::int64_t dk); \
  EXT template void pointwise_forward<Scalar>(Pointwise fn, Scalar* act, const Scalar* u, std::int64_t n); \
  EXT template void pointwise_backward<Scalar>(Pointwise fn, Scalar* du, const Scalar* dact, const Scalar* u, std::int64_t n); \
  EXT template void swiglu_forward<Scalar>(Scalar* act, const Scalar* uv, std::int64_t N, std::int64_t F); \
  EXT template void swiglu_backward<Scalar>(Scalar* duv, const Scalar* dact, const Scalar* uv, std::int64_t N, std::int64_t F); \
  EXT template void scaled_swiglu_forward<Scalar>(Scalar* act, const Scalar* uv, const Scalar* s, std::int64_t N, std::int64_t F); \
  EXT template void scaled_swiglu_backward<Scalar>(Scalar* duv, Scalar* ds, const Scalar* dact, const Scalar* uv, const Scalar* s, std::int64_t N, std::int64_t F, Scalar c); \
  EXT template void scale_columns<Scalar>(Scalar* y, const Scalar* x, const Scalar* s, std::int64_t N, std::int64_t L); \
  EXT template void column_dot_accumulate<Scalar>(Scalar* ds, const Scalar* dy, const Scalar* x, std::int64_t N, std::int64_t L, Scalar c); \
  EXT template void column_dot_accumulate_diff<Scalar>(Scalar* ds, const Scalar* dy, const Scalar* a, const Scalar* b, std::int64_t N, std::int64_t L); \
  EXT template double cross_entropy<Scalar>(Scalar* dlogits, const Scalar* logits, const std::int64_t* targets, std::int64_t N, std::int64_t V);

// cpu::gemm itself for both scalars and every storage order: the bf16 overloads
// below, attention's portable path, the tests and the benchmarks call it directly.
#define NORMLAB_CPU_GEMM_INSTANCE(EXT, Scalar, Lhs, Rhs) \
  EXT template void gemm<Scalar, Lhs, Rhs>(std::int64_t M, std::int64_t N, std::int64_t K, const Scalar* A, std::int64_t lda, const Scalar* B, std::int64_t ldb, Scalar* C, std::int64_t ldc, bool accumulate, Scalar alpha);
#define NORMLAB_CPU_GEMM_INSTANCES(EXT, Scalar) \
  NORMLAB_CPU_GEMM_INSTANCE(EXT, Scalar, Eigen::RowMajor, Eigen::RowMajor) \
  NORMLAB_CPU_GEMM_INSTANCE(EXT, Scalar, Eigen::RowMajor, Eigen::ColMajor) \
  NORMLAB_CPU_GEMM_INSTANCE(EXT, Scalar, Eigen::ColMajor, Eigen::RowMajor) \
  NORMLAB_CPU_GEMM_INSTANCE(EXT, Scalar, Eigen::ColMajor, Eigen::ColMajor)

// What a bf16 run's overloads (operands and activations kept in bf16) run on:
// the stored-operand products, the activations' and RMSNorm's backward reading
// bf16, and (with the AVX-512 attention) attention over bf16 q, k, v or y. Only
// where the build has the bf16 engine (NORMLAB_HAVE_BF16GEMM_AVX512).
#define NORMLAB_CPU_BF16_STORED_GEMM(EXT, Lhs, Rhs, TA, TB) \
  EXT template void gemm_bf16_stored<Lhs, Rhs, TA, TB>(std::int64_t M, std::int64_t N, std::int64_t K, const TA* A, std::int64_t lda, const TB* B, std::int64_t ldb, float* C, std::int64_t ldc, bool accumulate, float alpha);
#define NORMLAB_CPU_BF16_MLP_BACKWARD(EXT, D) \
  EXT template void pointwise_backward<float, bfloat16, D>(Pointwise fn, D* du, const float* dact, const bfloat16* u, std::int64_t n); \
  EXT template void swiglu_backward<float, bfloat16, D>(D* duv, const float* dact, const bfloat16* uv, std::int64_t N, std::int64_t F); \
  EXT template void scaled_swiglu_backward<float, bfloat16, D>(D* duv, float* ds, const float* dact, const bfloat16* uv, const float* s, std::int64_t N, std::int64_t F, float c);
#define NORMLAB_CPU_BF16_OP_INSTANCES(EXT) \
  NORMLAB_CPU_BF16_STORED_GEMM(EXT, Eigen::RowMajor, Eigen::ColMajor, bfloat16, float) \
  NORMLAB_CPU_BF16_STORED_GEMM(EXT, Eigen::ColMajor, Eigen::RowMajor, float, bfloat16) \
  NORMLAB_CPU_BF16_STORED_GEMM(EXT, Eigen::RowMajor, Eigen::RowMajor, bfloat16, float) \
  NORMLAB_CPU_BF16_STORED_GEMM(EXT, Eigen::ColMajor, Eigen::RowMajor, bfloat16, float) \
  NORMLAB_CPU_BF16_STORED_GEMM(EXT, Eigen::ColMajor, Eigen::RowMajor, bfloat16, bfloat16) \
  NORMLAB_CPU_BF16_MLP_BACKWARD(EXT, float) \
  NORMLAB_CPU_BF16_MLP_BACKWARD(EXT, bfloat16) \
  EXT template void detail::rmsnorm_backward<float, bfloat16>(float* dx, float* dw, const float* dy, const bfloat16* x, const float* w, const float* rstd, std::int64_t N, std::int64_t C);
#define NORMLAB_CPU_BF16_ATTENTION_BACKWARD(EXT, TQ, TY) \
  EXT template void detail::attention_backward_heads<TQ, TY>(float* dq, float* dk_, float* dv, const float* dy, const TY* y, const float* lse, const TQ* q, const TQ* k, const TQ* v, std::int64_t B, std::int64_t seq, std::int64_t H, std::int64_t dk, float scale, std::int64_t window, bool bf16);
#define NORMLAB_CPU_BF16_ATTENTION_INSTANCES(EXT) \
  EXT template void detail::attention_forward_heads<bfloat16>(float* y, float* lse, const bfloat16* q, const bfloat16* k, const bfloat16* v, std::int64_t B, std::int64_t seq, std::int64_t H, std::int64_t dk, float scale, std::int64_t window, bool bf16); \
  NORMLAB_CPU_BF16_ATTENTION_BACKWARD(EXT, float, bfloat16) \
  NORMLAB_CPU_BF16_ATTENTION_BACKWARD(EXT, bfloat16, float) \
  NORMLAB_CPU_BF16_ATTENTION_BACKWARD(EXT, bfloat16, bfloat16)
