#pragma once
// cuda_backend: one NVIDIA GPU as a type the one model is parameterised over,
// Transformer<float, Scheme, Residual, cuda_backend>. The same members as
// cpu_backend (backend/cpu/backend.hpp), so every policy site and the model's
// orchestration run unchanged: memory is device memory (cuda::device_vector,
// the arena over one cudaMalloc), and each leaf op enqueues the kernels of
// kernels.hpp or a cuBLASLt GEMM on the current cuda::DeviceContext's stream.
//
// What differs from the CPU, by design:
//  * float32 only: parameters, gradients, moments and activations (the
//    float64 oracle is the CPU backend; a bf16 activation type is the next step);
//  * tokens arrive as host arrays (the model keeps its own copy, as on the CPU):
//    the embedding and cross-entropy ops stage them, the embedding's backward
//    sorts positions by token on the host so no atomics are needed;
//  * cross_entropy returns after the row losses come back (one sync a step);
//  * attention_probs (diagnostics) copies q, k and lse to the host and runs the
//    CPU's routine there.
//  * a user's policy written with for_rows/column_reduce (host lambdas) does
//    not compile against this backend: those ops are absent on purpose.
// Every temporary is a grow-only scratch buffer of the device context: after the
// first step a step calls no cudaMalloc.
//
// Plain C++ (host compiler); link normlab's kernels (impl.cuh in one .cu file),
// CUDA::cudart and CUDA::cublasLt.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "normlab/backend/cpu/ops.hpp"
#include "normlab/backend/cuda/device_context.hpp"
#include "normlab/backend/cuda/kernels.hpp"
#include "normlab/backend/residual_math.hpp"
#include "normlab/core/error.hpp"
#include "normlab/core/precision.hpp"
#include "normlab/tensor/tensor.hpp"

namespace normlab {
namespace cuda {

// An owning device array with the few members the model uses of a vector.
template <class T>
class device_vector {
  static_assert(std::is_trivially_copyable_v<T>, "normlab::cuda::device_vector holds plain numbers");

 public:
  device_vector() = default;
  // n elements, every one = value (zero by a memset; others by a fill kernel for float).
  void assign(std::size_t n, T value) {
    if (n != n_) {
      buf_ = DeviceBuffer(n * sizeof(T));
      n_ = n;
    }
    if (n == 0) return;
    if (value == T(0)) {
      current().fill_bytes(buf_.get(), 0, n * sizeof(T));
    } else if constexpr (std::is_same_v<T, float>) {
      k::fill(buf_.as<float>(), value, std::int64_t(n), current().stream());
    } else {
      const std::vector<T> host(n, value);
      current().upload(buf_.get(), host.data(), n * sizeof(T));
    }
  }
  T* data() { return buf_.as<T>(); }
  const T* data() const { return buf_.as<T>(); }
  std::size_t size() const { return n_; }

 private:
  DeviceBuffer buf_;
  std::size_t n_ = 0;
};

// The residual rules' math on the device (nn/residual.hpp's ResidualMath).
template <ResidualMath M>
struct ResidualKernels {
  static constexpr ResidualKind kind = M == ResidualMath::add            ? ResidualKind::add
                                       : M == ResidualMath::lerp         ? ResidualKind::lerp
                                       : M == ResidualMath::lerp_nu      ? ResidualKind::lerp_nu
                                       : M == ResidualMath::lerp_retract ? ResidualKind::lerp_retract
                                                                         : ResidualKind::slerp;
  struct Cache {
    k::ResidualCache c;
    void bind(Arena<float>& a, std::int64_t N, std::int64_t /*C*/) {
      if constexpr (M == ResidualMath::lerp_retract || M == ResidualMath::slerp) {
        c.nh = a.take(N);
        c.nf = a.take(N);
        c.nz = a.take(N);
      }
      if constexpr (M == ResidualMath::slerp) {
        c.th = a.take(N);
        c.clamped = a.take(N);
      }
    }
  };
  static void forward(Cache& c, float* out, const float* h, const float* f, const float* alpha, std::int64_t N,
                      std::int64_t C) {
    k::residual_forward(Dtype::f32, kind, out, h, f, alpha, c.c, N, C, current().stream());
  }
  // dh may alias dout; dα accumulates.
  static void backward(float* dh, float* df, float* dalpha, const float* dout, const Cache& c, const float* out,
                       const float* h, const float* f, const float* alpha, std::int64_t N, std::int64_t C) {
    DeviceContext& be = current();
    if constexpr (M == ResidualMath::add) {
      NORMLAB_CUDA_CHECK(
          cudaMemcpyAsync(df, dout, std::size_t(N * C) * 4, cudaMemcpyDeviceToDevice, be.stream()));
      if (dh != dout)
        NORMLAB_CUDA_CHECK(
            cudaMemcpyAsync(dh, dout, std::size_t(N * C) * 4, cudaMemcpyDeviceToDevice, be.stream()));
    } else {
      float* rowdot = static_cast<float*>(be.scratch(DeviceContext::kRowDot, std::size_t(N) * 4));
      float* partial = static_cast<float*>(be.scratch(DeviceContext::kPartial, std::size_t(colreduce_chunks(N) * C) * 4));
      k::residual_backward(Dtype::f32, kind, dh, df, dalpha, dout, out, h, f, alpha, c.c, rowdot, N, C, partial,
                           be.stream());
    }
  }
};

}  // namespace cuda

struct cuda_backend {
  static constexpr std::string_view name = "cuda";
  // Memory: device arrays. The model keeps its ParamStore on the host (init,
  // checkpoints) and steps on device copies (Transformer::upload_params/download_params).
  static constexpr bool host_memory = false;
  // ... and the host cannot address them: a communicator must reduce them on the
  // device (NcclComm; dist::reduces_memory_of).
  static constexpr bool device_memory = true;
  template <class T>
  using vector = cuda::device_vector<T>;
  template <ResidualMath M, class T>
  using residual_kernels = std::enable_if_t<std::is_same_v<T, float>, cuda::ResidualKernels<M>>;

  static cuda::DeviceContext& be() { return cuda::current(); }
  // A trainer's first check: a sentence instead of the first cudaMalloc's error.
  static void require_device() {
    std::string why;
    if (cuda::device_count(&why) == 0)
      throw Error("no CUDA device (" + why + "): this executable trains on a GPU; use the CPU trainer instead");
  }
  static cudaStream_t stream() { return be().stream(); }
  // The arithmetic of the products (core/precision.hpp) on the current device.
  static void set_precision(Precision p) { be().set_bf16_products(p == Precision::bf16); }
  static Precision precision() { return be().bf16_products() ? Precision::bf16 : Precision::fp32; }
  static std::string precision_engine() {
    return be().bf16_products() ? "bf16 (cuBLASLt, bf16 operands on the tensor cores, float32 accumulation)"
                                : "fp32 (cuBLASLt, CUBLAS_COMPUTE_32F, no TF32)";
  }
  template <class U>
  static U* scratch(cuda::DeviceContext::Slot slot, std::int64_t n) {
    return static_cast<U*>(be().scratch(slot, std::size_t(std::max<std::int64_t>(n, 1)) * sizeof(U)));
  }
  // x (n floats) rounded to bf16 in scratch, for one product: the stream runs
  // that product before the next call writes the slot again.
  static const bfloat16* bf16_operand(const float* x, std::int64_t n) {
    bfloat16* h = scratch<bfloat16>(cuda::DeviceContext::kBf16Operand, n);
    round_to_bf16(h, x, n);
    return h;
  }
  static float* partial(std::int64_t rows, std::int64_t L) {
    return scratch<float>(cuda::DeviceContext::kPartial, cuda::colreduce_chunks(rows) * L);
  }

  // What a model of this shape needs of the kernels, refused at construction
  // (before anything is allocated) with the sizes named.
  static void check_model_limits(std::int64_t max_batch, std::int64_t max_seq, std::int64_t heads,
                                 std::int64_t n_embd, std::int64_t head_dim) {
    if (head_dim > 128 || head_dim % 2 != 0)
      throw Error("Transformer on cuda_backend: head dimension " + std::to_string(head_dim) +
                  " is not supported by the CUDA kernels (even, at most 128)");
    cuda::check_model_grid_limits(max_batch, max_seq, heads, n_embd);
  }
  static void upload(float* dst, const float* src, std::int64_t n) { be().upload(dst, src, std::size_t(n) * 4); }
  static void download(float* dst, const float* src, std::int64_t n) { be().download(dst, src, std::size_t(n) * 4); }
  static void synchronize() { be().synchronize(); }
  // Free memory on the device (cudaMemGetInfo): the driver's memory plan refuses a
  // run that does not fit with the flags named, before the first cudaMalloc fails.
  // 0 (unknown: not checked) without a device, so --dry-run works on any machine.
  static double device_free_bytes() {
    if (cuda::device_count() == 0) return 0;
    be();  // the device is chosen (and its context made) first
    std::size_t free = 0, total = 0;
    NORMLAB_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return double(free);
  }

  // ---- linear layers (cuBLASLt, float32 compute, no TF32)
  static void linear_forward(float* Y, const float* X, const float* W, std::int64_t N, std::int64_t in,
                             std::int64_t out, bool accumulate = false, float alpha = 1.f) {
    be().linear_forward(cuda::Dtype::f32, Y, X, W, N, in, out, alpha, accumulate ? 1.f : 0.f);
  }
  static void linear_backward(float* dX, float* dW, const float* dY, const float* X, const float* W, std::int64_t N,
                              std::int64_t in, std::int64_t out, float alpha = 1.f) {
    if (dX) be().linear_backward_x(cuda::Dtype::f32, dX, dY, W, N, in, out, alpha, 0.f);
    if (dW) be().linear_backward_w(cuda::Dtype::f32, dW, dY, X, N, in, out, alpha);
  }

  // ---- activations stored in bf16: a float32 model built under bf16 products
  // keeps what only products read (the MLP's act) in bf16, half the bytes.
  // cuBLASLt multiplies two operands of one type, so the other operand (the
  // weight, or the float32 gradient) is rounded to bf16 into scratch for the
  // call, as CUBLAS_COMPUTE_32F_FAST_16BF rounds float32 operands (nearest
  // even); float32 accumulation, C in float32.
  static bool stores_bf16() { return be().bf16_products(); }
  static void round_to_bf16(bfloat16* dst, const float* src, std::int64_t n) {
    cuda::k::to_storage(cuda::Dtype::bf16, dst, src, n, stream());
  }
  static void linear_forward(float* Y, const bfloat16* X, const float* W, std::int64_t N, std::int64_t in,
                             std::int64_t out, bool accumulate = false, float alpha = 1.f) {
    be().gemm(cuda::Dtype::bf16, cuda::Dtype::f32, false, true, N, out, in, X, bf16_operand(W, out * in), Y, alpha,
              accumulate ? 1.f : 0.f);
  }
  static void linear_backward(float* dX, float* dW, const float* dY, const bfloat16* X, const float* W,
                              std::int64_t N, std::int64_t in, std::int64_t out, float alpha = 1.f) {
    if (dX) be().linear_backward_x(cuda::Dtype::f32, dX, dY, W, N, in, out, alpha, 0.f);  // X not read
    if (dW)
      be().gemm(cuda::Dtype::bf16, cuda::Dtype::f32, true, false, out, in, N, bf16_operand(dY, N * out), X, dW,
                alpha, 1.f);
  }

  // ---- embedding: host tokens staged as int32
  static void embedding_forward(float* out, const std::int64_t* idx, const float* wte, std::int64_t N,
                                std::int64_t C) {
    cuda::k::embedding_forward(cuda::Dtype::f32, out, stage_tokens(idx, N), wte, N, C, stream());
  }
  // dwte[idx] += dout, each token's positions summed in order (sorted here on the host).
  static void embedding_backward(float* dwte, const std::int64_t* idx, const float* dout, std::int64_t N,
                                 std::int64_t C) {
    std::vector<std::int64_t>& keys = host_keys();
    keys.resize(std::size_t(N));
    for (std::int64_t i = 0; i < N; ++i) keys[std::size_t(i)] = idx[i] * N + i;  // (token, position)
    std::sort(keys.begin(), keys.end());
    std::vector<std::int32_t>& h = host_tokens();
    h.assign(std::size_t(3 * N + 1), 0);
    std::int32_t* order = h.data();
    std::int32_t* uniq = order + N;
    std::int32_t* starts = uniq + N;
    std::int64_t n_uniq = 0;
    for (std::int64_t k = 0; k < N; ++k) {
      const std::int64_t tok = keys[std::size_t(k)] / N;
      order[k] = std::int32_t(keys[std::size_t(k)] % N);
      if (k == 0 || tok != keys[std::size_t(k - 1)] / N) {
        uniq[n_uniq] = std::int32_t(tok);
        starts[n_uniq] = std::int32_t(k);
        ++n_uniq;
      }
    }
    starts[n_uniq] = std::int32_t(N);
    std::int32_t* d = scratch<std::int32_t>(cuda::DeviceContext::kTokens, 3 * N + 1);
    be().upload(d, h.data(), std::size_t(3 * N + 1) * 4);
    cuda::k::embedding_backward(cuda::Dtype::f32, dwte, d + N, d + 2 * N, d, n_uniq, dout, C, stream());
  }

  // ---- RMSNorm with gain
  static void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, std::int64_t N, std::int64_t C,
                              float eps) {
    cuda::k::rmsnorm_forward(cuda::Dtype::f32, y, rstd, x, w, N, C, eps, stream());
  }
  static void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                               const float* rstd, std::int64_t N, std::int64_t C) {
    cuda::k::rmsnorm_backward(cuda::Dtype::f32, dx, dw, dy, x, w, rstd, N, C, false, partial(N, C), stream());
  }

  // ---- LayerNorm with gain and optional bias (b, db null: none)
  static void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* w, const float* b,
                                std::int64_t N, std::int64_t C, float eps) {
    cuda::k::layernorm_forward(cuda::Dtype::f32, y, mean, rstd, x, w, b, N, C, eps, stream());
  }
  static void layernorm_backward(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                                 const float* mean, const float* rstd, std::int64_t N, std::int64_t C) {
    cuda::k::layernorm_backward(cuda::Dtype::f32, dx, dw, db, dy, x, w, mean, rstd, N, C, partial(N, C), stream());
  }

  // ---- RoPE, and the fused RoPE + per-head unit norm + s_qk
  static void rope_apply(float* x, const float* cosv, const float* sinv, std::int64_t B, std::int64_t seq,
                         std::int64_t H, std::int64_t D, bool inverse, std::int64_t pos0 = 0) {
    if (inverse) {
      if (pos0 != 0) throw Error("cuda_backend::rope_apply: the inverse rotation runs from position 0 only");
      cuda::k::qk_backward(cuda::Dtype::f32, cuda::QkKind::none, x, nullptr, nullptr, nullptr, cosv, sinv, B, seq, H, D,
                           stream());
    } else {
      cuda::k::qk_forward(cuda::Dtype::f32, cuda::QkKind::none, x, nullptr, nullptr, nullptr, nullptr, cosv, sinv, B,
                          seq, H, D, stream(), pos0);
    }
  }
  static void rope_l2norm_scale_forward(float* x, float* xh, float* norm, float* xs, const float* s,
                                        const float* cosv, const float* sinv, std::int64_t B, std::int64_t seq,
                                        std::int64_t H, std::int64_t D, std::int64_t pos0 = 0) {
    cuda::k::qk_forward(cuda::Dtype::f32, cuda::QkKind::unit_scaled, x, xh, norm, xs, s, cosv, sinv, B, seq, H, D,
                        stream(), pos0);
  }
  // ds += c Σ_rows dxs ⊙ xh first (dx still holds d xs), then dx in place back to before RoPE.
  static void rope_l2norm_scale_backward(float* dx, float* ds, const float* xh, const float* norm, const float* s,
                                         const float* cosv, const float* sinv, std::int64_t B, std::int64_t seq,
                                         std::int64_t H, std::int64_t D, float c) {
    const std::int64_t N = B * seq, C = H * D;
    cuda::k::column_dot(ds, dx, xh, c, N, C, partial(N, C), stream());
    cuda::k::qk_backward(cuda::Dtype::f32, cuda::QkKind::unit_scaled, dx, xh, norm, s, cosv, sinv, B, seq, H, D,
                         stream());
  }

  // ---- attention
  static void attention_forward(float* y, float* lse, const float* q, const float* k, const float* v, std::int64_t B,
                                std::int64_t seq, std::int64_t H, std::int64_t D, float scale,
                                std::int64_t window = 0) {
    cuda::k::attention_forward(cuda::Dtype::f32, y, lse, q, k, v, B, seq, H, D, scale, window, stream());
  }
  static void attention_backward(float* dq, float* dk, float* dv, const float* dy, const float* y, const float* lse,
                                 const float* q, const float* k, const float* v, std::int64_t B, std::int64_t seq,
                                 std::int64_t H, std::int64_t D, float scale, std::int64_t window = 0) {
    float* dsum = scratch<float>(cuda::DeviceContext::kAttnSum, B * H * seq);
    cuda::k::attention_backward(cuda::Dtype::f32, dq, dk, dv, dsum, dy, y, q, k, v, lse, B, seq, H, D, scale, window,
                                stream());
  }
  static void kv_repeat(float* y, const float* x, std::int64_t N, std::int64_t H, std::int64_t Hkv, std::int64_t D) {
    cuda::k::kv_repeat(y, x, N, H, Hkv, D, stream());
  }
  static void kv_group_sum(float* dx, const float* dy, std::int64_t N, std::int64_t H, std::int64_t Hkv,
                           std::int64_t D) {
    cuda::k::kv_group_sum(dx, dy, N, H, Hkv, D, stream());
  }
  // p: the model's (max_seq) scratch is too small for every head at once; the weights go to (H, S) scratch.
  static void attention_decode(float* y, float* /*p*/, const float* q, const float* kc, const float* vc,
                               std::int64_t S, std::int64_t H, std::int64_t D, float scale) {
    float* w = scratch<float>(cuda::DeviceContext::kDecode, H * S);
    cuda::k::attention_decode(y, w, q, kc, vc, S, H, D, scale, stream());
  }
  // P is a host array (diagnostics): q, k and lse come to the host and the CPU routine runs there.
  static void attention_probs(float* P, const float* lse, const float* q, const float* k, std::int64_t B,
                              std::int64_t seq, std::int64_t H, std::int64_t D, float scale,
                              std::int64_t window = 0) {
    const std::size_t nq = std::size_t(B * seq * H * D), nl = std::size_t(B * H * seq);
    std::vector<float> hq(nq), hk(nq), hl(nl);
    be().download(hq.data(), q, nq * 4);
    be().download(hk.data(), k, nq * 4);
    be().download(hl.data(), lse, nl * 4);
    cpu::attention_probs(P, hl.data(), hq.data(), hk.data(), B, seq, H, D, scale, window);
  }

  // ---- MLP activations
  static void pointwise_forward(Pointwise fn, float* act, const float* u, std::int64_t n) {
    cuda::k::pointwise_forward(fn, act, u, n, stream());
  }
  static void pointwise_backward(Pointwise fn, float* du, const float* dact, const float* u, std::int64_t n) {
    cuda::k::pointwise_backward(fn, du, dact, u, n, stream());
  }
  static void swiglu_forward(float* act, const float* uv, std::int64_t N, std::int64_t F) {
    cuda::k::swiglu_forward(cuda::Dtype::f32, act, uv, nullptr, N, F, stream());
  }
  static void swiglu_backward(float* duv, const float* dact, const float* uv, std::int64_t N, std::int64_t F) {
    cuda::k::swiglu_backward(cuda::Dtype::f32, duv, dact, uv, nullptr, N, F, stream());
  }
  static void scaled_swiglu_forward(float* act, const float* uv, const float* s, std::int64_t N, std::int64_t F) {
    cuda::k::swiglu_forward(cuda::Dtype::f32, act, uv, s, N, F, stream());
  }
  // duv at the scaled pre-activation first, then ds += c Σ duv ⊙ uv and duv ⊙= s in one pass.
  static void scaled_swiglu_backward(float* duv, float* ds, const float* dact, const float* uv, const float* s,
                                     std::int64_t N, std::int64_t F, float c) {
    cuda::k::swiglu_backward(cuda::Dtype::f32, duv, dact, uv, s, N, F, stream());
    cuda::k::scale_grad_inplace(cuda::Dtype::f32, ds, duv, uv, s, c, N, 2 * F, partial(N, 2 * F), stream());
  }

  // ---- per-column scales
  static void scale_columns(float* y, const float* x, const float* s, std::int64_t N, std::int64_t L) {
    cuda::k::scale_columns(y, x, s, N, L, stream());
  }
  static void column_dot_accumulate(float* ds, const float* dy, const float* x, std::int64_t N, std::int64_t L,
                                    float c = 1.f) {
    cuda::k::column_dot(ds, dy, x, c, N, L, partial(N, L), stream());
  }

  // Mean cross-entropy over N rows (targets on the host); d loss/d logits when dlogits is not null.
  static double cross_entropy(float* dlogits, const float* logits, const std::int64_t* targets, std::int64_t N,
                              std::int64_t V) {
    const std::int32_t* d = stage_tokens(targets, N);
    float* loss = scratch<float>(cuda::DeviceContext::kRowLoss, N);
    cuda::k::cross_entropy(cuda::Dtype::f32, dlogits, loss, logits, nullptr, d, N, V, stream());
    std::vector<float>& hl = host_losses();
    hl.resize(std::size_t(N));
    be().download(hl.data(), loss, std::size_t(N) * 4);
    double total = 0;
    for (float x : hl) total += double(x);
    return total / double(N);
  }

  // ---- elementwise
  static void add_into(float* dst, const float* src, std::int64_t n) { cuda::k::add_into(dst, src, n, stream()); }
  static void fill(float* dst, std::int64_t n, float value) { cuda::k::fill(dst, value, n, stream()); }
  static void copy(float* dst, const float* src, std::int64_t n) {
    if (n > 0 && dst != src)
      NORMLAB_CUDA_CHECK(cudaMemcpyAsync(dst, src, std::size_t(n) * 4, cudaMemcpyDeviceToDevice, stream()));
  }
  static void rope_table(float* cosv, float* sinv, std::int64_t seq, std::int64_t dk, double base) {
    std::vector<float> c(std::size_t(seq * dk / 2)), s(c.size());
    cpu::rope_table(c.data(), s.data(), seq, dk, base);
    be().upload(cosv, c.data(), c.size() * 4);
    be().upload(sinv, s.data(), s.size() * 4);
  }

  // ---- learned scales and α (nn/scale.hpp, nn/residual.hpp)
  static void effective_scale(float* out, const float* p, double k, std::int64_t n, bool scalar, bool absolute) {
    cuda::k::effective_scale(out, p, k, n, absolute, stream(), scalar);
  }
  static void fold_scale_grad(float* g, const float* d, std::int64_t n, bool scalar) {
    if (scalar) cuda::k::fold_scalar(g, d, n, stream());
    else cuda::k::add_into(g, d, n, stream());
  }
  static void alpha_grad_to_stored(float* g, float* d_scale, const float* dalpha, const float* p, double k,
                                   std::int64_t C, bool scalar) {
    if (scalar) cuda::k::alpha_grad_scalar(g, d_scale, dalpha, p, k, C, stream());
    else cuda::k::alpha_grad_to_stored(g, dalpha, p, k, C, stream());
  }

  // ---- weight constraint and optimizer (nn/constraint.hpp, optim/adamw.hpp)
  // Rows (or columns) of W (R, L) to norm 1, or only those above 1 shrunk.
  static void constrain_matrix(float* W, std::int64_t R, std::int64_t L, bool rows, bool shrink_only) {
    cuda::k::AdamHyper hp;
    hp.update = false;
    cuda::k::adamw_constrain(W, nullptr, nullptr, nullptr, nullptr, cuda::Dtype::f32, R, L,
                             rows ? cuda::ConstraintAxis::rows : cuda::ConstraintAxis::cols,
                             shrink_only ? cuda::ConstraintKind::bounded : cuda::ConstraintKind::unit_norm, hp,
                             stream());
  }
  // One AdamW update of n values (PyTorch order; optim/adamw.hpp).
  static void adamw_update(float* p, float* m, float* v, const float* g, std::int64_t n, double decay, bool decayed,
                           double step_size, double beta1, double beta2, double eps, double sqrt_bc2) {
    cuda::k::AdamHyper hp;
    hp.decay = float(decay);
    hp.decayed = decayed;
    hp.step_size = float(step_size);
    hp.beta1 = float(beta1);
    hp.beta2 = float(beta2);
    hp.eps = float(eps);
    hp.sqrt_bc2 = float(sqrt_bc2);
    cuda::k::adamw_constrain(p, m, v, g, nullptr, cuda::Dtype::f32, 1, n, cuda::ConstraintAxis::none,
                             cuda::ConstraintKind::none, hp, stream());
  }
  // Lion (optim/lion.hpp) and Muon's momentum (optim/muon.hpp): the CPU's expressions.
  static void lion_update(float* p, float* m, const float* g, std::int64_t n, double decay, bool decayed, double lr,
                          double beta1, double beta2) {
    cuda::k::lion_update(p, m, g, n, float(decay), decayed, float(lr), float(beta1), float(beta2), stream());
  }
  static void muon_momentum(float* u, float* m, const float* g, std::int64_t n, double beta, bool nesterov) {
    cuda::k::muon_momentum(u, m, g, n, float(beta), nesterov, stream());
  }
  static void muon_apply(float* p, const float* u, std::int64_t n, double decay, double step) {
    cuda::k::muon_apply(p, u, n, float(decay), float(step), stream());
  }
  static void muon_quintic(float* B, const float* A, std::int64_t k, double a, double b, double c) {
    cuda::k::muon_quintic(B, A, k, float(a), float(b), float(c), stream());
  }
  // Σ x² in double with a fixed reduction tree (the global gradient norm).
  static double sum_squares(const float* x, std::int64_t n) {
    double* part = scratch<double>(cuda::DeviceContext::kNormPartial, cuda::k::kSumSqBlocks);
    double* out = scratch<double>(cuda::DeviceContext::kNormOut, 1);
    cuda::k::sum_squares(out, part, x, n, stream());
    double h = 0;
    be().download(&h, out, sizeof(double));
    return h;
  }
  static void scale(float* x, std::int64_t n, float c) { cuda::k::scale_inplace(x, c, n, stream()); }

 private:
  // N host token ids as int32 in the tokens scratch (sized for embedding_backward's
  // 3N + 1), on the device when this returns.
  static const std::int32_t* stage_tokens(const std::int64_t* ids, std::int64_t N) {
    std::vector<std::int32_t>& h = host_tokens();
    h.resize(std::size_t(N));
    for (std::int64_t i = 0; i < N; ++i) h[std::size_t(i)] = std::int32_t(ids[i]);
    std::int32_t* d = scratch<std::int32_t>(cuda::DeviceContext::kTokens, 3 * N + 1);
    be().upload(d, h.data(), std::size_t(N) * 4);
    return d;
  }
  static std::vector<std::int32_t>& host_tokens() {
    static std::vector<std::int32_t> v;
    return v;
  }
  static std::vector<std::int64_t>& host_keys() {
    static std::vector<std::int64_t> v;
    return v;
  }
  static std::vector<float>& host_losses() {
    static std::vector<float> v;
    return v;
  }
};

}  // namespace normlab
