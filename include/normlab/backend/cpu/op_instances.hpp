#pragma once
// The CPU ops' float and double instantiations, listed once: src/cpu_ops.cpp
// compiles them (EXT empty), and a program built against the normlab_cpu_ops
// library (NORMLAB_PREBUILT_CPU_OPS) declares them extern (EXT = extern), so
// it does not compile the kernels again. A signature here that does not match
// ops.hpp fails to compile.
#define NORMLAB_CPU_OP_INSTANCES(EXT, T_) \
  EXT template void linear_forward<T_>(T_* Y, const T_* X, const T_* W, std::int64_t N, std::int64_t in, std::int64_t out, bool accumulate, T_ alpha); \
  EXT template void linear_backward<T_>(T_* dX, T_* dW, const T_* dY, const T_* X, const T_* W, std::int64_t N, std::int64_t in, std::int64_t out, T_ alpha); \
  EXT template void embedding_forward<T_>(T_* out, const std::int64_t* idx, const T_* wte, std::int64_t N, std::int64_t C); \
  EXT template void embedding_backward<T_>(T_* dwte, const std::int64_t* idx, const T_* dout, std::int64_t N, std::int64_t C); \
  EXT template void rmsnorm_forward<T_>(T_* y, T_* rstd, const T_* x, const T_* w, std::int64_t N, std::int64_t C, T_ eps); \
  EXT template void rmsnorm_backward<T_>(T_* dx, T_* dw, const T_* dy, const T_* x, const T_* w, const T_* rstd, std::int64_t N, std::int64_t C); \
  EXT template void l2norm_rows_forward<T_>(T_* y, T_* norm, const T_* x, std::int64_t rows, std::int64_t L); \
  EXT template void l2norm_rows_backward<T_>(T_* dx, const T_* dy, const T_* y, const T_* norm, std::int64_t rows, std::int64_t L); \
  EXT template void rope_table<T_>(T_* cosv, T_* sinv, std::int64_t Tn, std::int64_t dk, double base); \
  EXT template void rope_apply<T_>(T_* x, const T_* cosv, const T_* sinv, std::int64_t B, std::int64_t Tn, std::int64_t H, std::int64_t dk, bool inverse, std::int64_t pos0); \
  EXT template void rope_l2norm_scale_forward<T_>(T_* x, T_* xh, T_* norm, T_* xs, const T_* s, const T_* cosv, const T_* sinv, std::int64_t B, std::int64_t Tn, std::int64_t H, std::int64_t dk, std::int64_t pos0); \
  EXT template void rope_l2norm_scale_backward<T_>(T_* dx, T_* ds, const T_* xh, const T_* norm, const T_* s, const T_* cosv, const T_* sinv, std::int64_t B, std::int64_t Tn, std::int64_t H, std::int64_t dk, T_ c); \
  EXT template void attention_forward<T_>(T_* y, T_* lse, const T_* q, const T_* k, const T_* v, std::int64_t B, std::int64_t Tn, std::int64_t H, std::int64_t dk, T_ scale, std::int64_t window); \
  EXT template void attention_backward<T_>(T_* dq, T_* dk_, T_* dv, const T_* dy, const T_* y, const T_* lse, const T_* q, const T_* k, const T_* v, std::int64_t B, std::int64_t Tn, std::int64_t H, std::int64_t dk, T_ scale, std::int64_t window); \
  EXT template void attention_probs<T_>(T_* P, const T_* lse, const T_* q, const T_* k, std::int64_t B, std::int64_t Tn, std::int64_t H, std::int64_t dk, T_ scale, std::int64_t window); \
  EXT template void attention_decode<T_>(T_* y, T_* p, const T_* q, const T_* kc, const T_* vc, std::int64_t S, std::int64_t H, std::int64_t dk, T_ scale); \
  EXT template void kv_repeat<T_>(T_* y, const T_* x, std::int64_t N, std::int64_t H, std::int64_t Hkv, std::int64_t dk); \
  EXT template void kv_group_sum<T_>(T_* dx, const T_* dy, std::int64_t N, std::int64_t H, std::int64_t Hkv, std::int64_t dk); \
  EXT template void pointwise_forward<T_>(Pointwise fn, T_* act, const T_* u, std::int64_t n); \
  EXT template void pointwise_backward<T_>(Pointwise fn, T_* du, const T_* dact, const T_* u, std::int64_t n); \
  EXT template void swiglu_forward<T_>(T_* act, const T_* uv, std::int64_t N, std::int64_t F); \
  EXT template void swiglu_backward<T_>(T_* duv, const T_* dact, const T_* uv, std::int64_t N, std::int64_t F); \
  EXT template void scaled_swiglu_forward<T_>(T_* act, const T_* uv, const T_* s, std::int64_t N, std::int64_t F); \
  EXT template void scaled_swiglu_backward<T_>(T_* duv, T_* ds, const T_* dact, const T_* uv, const T_* s, std::int64_t N, std::int64_t F, T_ c); \
  EXT template void scale_columns<T_>(T_* y, const T_* x, const T_* s, std::int64_t N, std::int64_t L); \
  EXT template void column_dot_accumulate<T_>(T_* ds, const T_* dy, const T_* x, std::int64_t N, std::int64_t L, T_ c); \
  EXT template void column_dot_accumulate_diff<T_>(T_* ds, const T_* dy, const T_* a, const T_* b, std::int64_t N, std::int64_t L); \
  EXT template double cross_entropy<T_>(T_* dlogits, const T_* logits, const std::int64_t* targets, std::int64_t N, std::int64_t V);
