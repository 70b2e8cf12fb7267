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
