#pragma once
// cuda::DeviceContext: the stream, the cuBLASLt handle, its workspace, a cache of
// matmul descriptors and algorithms and the ops' grow-only scratch, held by one
// object. cuda_backend's static ops run on cuda::current() (below): the DeviceContext
// given to cuda::use(), else one on device 0. Plain C++: host code compiled by
// g++ uses it; link CUDA::cudart and CUDA::cublasLt.
//
// GEMM layout. normlab stores row-major matrices and uses PyTorch's Linear
// layout, Y(N,out) = X(N,in) Wᵀ with W(out,in). cuBLASLt is column-major. A
// row-major (r×c) buffer read as column-major is the (c×r) matrix, i.e. its
// transpose, so the row-major product C = op(A)·op(B) is computed as the
// column-major product Cᵀ = op(B)ᵀ·op(A)ᵀ: swap the operands, keep each
// operand's transpose flag, and swap M and N:
//   row-major  C(M×N) = op(A)(M×K) · op(B)(K×N)
//   cuBLASLt   m = N, n = M, k = K, A' = B (op = transB), B' = A (op = transA), ldc = N
// with each operand's column-major layout being its stored row-major shape read
// backwards: B stored (K×N) [transB = N] → rows N, cols K, ld N; stored (N×K)
// [transB = T] → rows K, cols N, ld K (and the same for A with M).
// The three GEMMs of a linear layer are then
//   forward   Y  = X Wᵀ     : gemm(transA=N, transB=T, M=N,   N=out, K=in)
//   input grad dX = dY W    : gemm(transA=N, transB=N, M=N,   N=in,  K=out)
//   weight grad dW += dYᵀ X : gemm(transA=T, transB=N, M=out, N=in,  K=N)
//
// Precision: float32 data use CUBLAS_COMPUTE_32F, which never uses TF32 (the
// golden check needs ~1e-6 relative), or, under Precision::bf16,
// CUBLAS_COMPUTE_32F_FAST_16BF (bf16 operands, float32 accumulation); bf16 data use bf16 inputs with float32
// accumulation (also CUBLAS_COMPUTE_32F), and weight gradients are written
// in float32 (C/D type CUDA_R_32F with bf16 A/B).
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "normlab/backend/cuda/check.hpp"
#include "normlab/backend/cuda/kernels.hpp"

namespace normlab::cuda {

// Number of CUDA devices, or 0 with the runtime's reason in `why`.
inline int device_count(std::string* why = nullptr) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky error
    return 0;
  }
  if (why && n == 0) *why = "0 devices";
  return n;
}

// Owning device allocation (cudaMalloc'd once; moves, never copies).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes) NORMLAB_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { release(); }
  void* get() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  void release() {
    if (ptr_) cudaFree(ptr_);  // no throw from a destructor
    ptr_ = nullptr;
  }
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

class DeviceContext {
 public:
  static constexpr std::size_t kWorkspaceBytes = 32u << 20;

  explicit DeviceContext(int device = 0) {
    NORMLAB_CUDA_CHECK(cudaSetDevice(device));
    NORMLAB_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    NORMLAB_CUBLAS_CHECK(cublasLtCreate(&lt_));
    workspace_ = DeviceBuffer(kWorkspaceBytes);
  }
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;
  ~DeviceContext() {
    for (auto& [key, plan] : plans_) destroy(plan);
    if (lt_) cublasLtDestroy(lt_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  cudaStream_t stream() const { return stream_; }
  void synchronize() const { NORMLAB_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  // Host <-> device copies and fills, ordered on this backend's stream and complete
  // when they return. The stream is non-blocking, so it does not wait for work on
  // the legacy default stream: a plain cudaMemcpy from pageable memory may return
  // once the data is staged, before the DMA lands, and a kernel on our stream
  // could then read stale memory. Every transfer goes through these (a CTest,
  // "cuda: every host-device copy is ordered on the backend's stream", refuses
  // cudaMemcpy/cudaMemset calls elsewhere).
  void upload(void* dst, const void* src, std::size_t bytes) const {
    if (bytes == 0) return;
    NORMLAB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    synchronize();
  }
  void download(void* dst, const void* src, std::size_t bytes) const {
    if (bytes == 0) return;
    NORMLAB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    synchronize();
  }
  // Byte fill (0 for zeros), enqueued on the stream; later work on the stream sees it.
  void fill_bytes(void* dst, int value, std::size_t bytes) const {
    if (bytes == 0) return;
    NORMLAB_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, stream_));
  }
  std::size_t cached_plans() const { return plans_.size(); }
  // Precision::bf16: float32 products run on the tensor cores with their
  // operands rounded to bf16 and float32 accumulation
  // (CUBLAS_COMPUTE_32F_FAST_16BF); fp32: CUBLAS_COMPUTE_32F, never TF32.
  void set_bf16_products(bool on) { bf16_products_ = on; }
  bool bf16_products() const { return bf16_products_; }

  // Grow-only device scratch, one buffer per slot: the temporaries of the
  // model's ops (column-reduction partials, row dots, staged tokens, …). The
  // first step sizes them; later steps allocate nothing. Growing waits for the
  // stream first, so no kernel still reads the buffer being replaced.
  enum Slot { kPartial, kRowDot, kAttnSum, kRowLoss, kTokens, kDecode, kNormPartial, kNormOut, kBf16Operand, kSlots };
  void* scratch(Slot slot, std::size_t bytes) {
    DeviceBuffer& b = scratch_[slot];
    if (b.bytes() < bytes) {
      synchronize();
      b = DeviceBuffer(bytes);
    }
    return b.get();
  }

  // Row-major C(M×N) = alpha·op(A)(M×K)·op(B)(K×N) + beta·C (see the mapping above).
  // ab: type of A and B; c: type of C (= D, written in place).
  void gemm(Dtype ab, Dtype c, bool transA, bool transB, std::int64_t M, std::int64_t N, std::int64_t K,
            const void* A, const void* B, void* C, float alpha, float beta) {
    if (M <= 0 || N <= 0 || K <= 0) throw Error("cuda::DeviceContext::gemm: empty product");
    const Key key{int(ab), int(c), transA, transB, M, N, K, align(A), align(B), align(C),
                  bf16_products_ && ab == Dtype::f32};
    auto it = plans_.find(key);
    if (it == plans_.end()) it = plans_.emplace(key, make_plan(key)).first;
    const Plan& p = it->second;
    // cuBLASLt operands: A' = B, B' = A (column-major view of the row-major product).
    NORMLAB_CUBLAS_CHECK(cublasLtMatmul(lt_, p.desc, &alpha, B, p.a, A, p.b, &beta, C, p.c, C, p.c, &p.algo,
                                        workspace_.get(), kWorkspaceBytes, stream_));
  }

  // Y(N,out) = alpha · X(N,in) W(out,in)ᵀ + beta · Y
  void linear_forward(Dtype dt, void* Y, const void* X, const void* W, std::int64_t N, std::int64_t in,
                      std::int64_t out, float alpha = 1.f, float beta = 0.f) {
    gemm(dt, dt, false, true, N, out, in, X, W, Y, alpha, beta);
  }
  // dX(N,in) = alpha · dY(N,out) W(out,in) + beta · dX
  void linear_backward_x(Dtype dt, void* dX, const void* dY, const void* W, std::int64_t N, std::int64_t in,
                         std::int64_t out, float alpha = 1.f, float beta = 0.f) {
    gemm(dt, dt, false, false, N, in, out, dY, W, dX, alpha, beta);
  }
  // dW(out,in) += alpha · dY(N,out)ᵀ X(N,in), dW in float32 whatever dt.
  void linear_backward_w(Dtype dt, float* dW, const void* dY, const void* X, std::int64_t N, std::int64_t in,
                         std::int64_t out, float alpha = 1.f) {
    gemm(dt, Dtype::f32, true, false, out, in, N, dY, X, dW, alpha, 1.f);
  }

 private:
  // (ab, c, transA, transB, M, N, K, alignment of A, B, C): the heuristic's answer
  // depends on pointer alignment, so it is part of the key.
  using Key = std::tuple<int, int, bool, bool, std::int64_t, std::int64_t, std::int64_t, std::uint32_t,
                         std::uint32_t, std::uint32_t, bool>;
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A', B', C
    cublasLtMatmulAlgo_t algo{};
  };

  static std::uint32_t align(const void* p) {
    const auto v = reinterpret_cast<std::uintptr_t>(p);
    std::uint32_t a = 256;
    while (a > 1 && (v % a) != 0) a /= 2;
    return a;
  }
  static cudaDataType_t cuda_type(Dtype d) { return d == Dtype::f32 ? CUDA_R_32F : CUDA_R_16BF; }

  Plan make_plan(const Key& key) {
    const auto [ab_i, c_i, transA, transB, M, N, K, alA, alB, alC, fast_bf16] = key;
    const cudaDataType_t tab = cuda_type(Dtype(ab_i)), tc = cuda_type(Dtype(c_i));
    Plan p;
    NORMLAB_CUBLAS_CHECK(cublasLtMatmulDescCreate(
        &p.desc, fast_bf16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t opA2 = transB ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt A' = row-major B
    const cublasOperation_t opB2 = transA ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt B' = row-major A
    NORMLAB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA2, sizeof(opA2)));
    NORMLAB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB2, sizeof(opB2)));
    // A' (= B): stored row-major (K×N) or, transposed, (N×K); column-major rows = stored row length.
    const std::uint64_t a_rows = std::uint64_t(transB ? K : N), a_cols = std::uint64_t(transB ? N : K);
    const std::uint64_t b_rows = std::uint64_t(transA ? M : K), b_cols = std::uint64_t(transA ? K : M);
    NORMLAB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, tab, a_rows, a_cols, std::int64_t(a_rows)));
    NORMLAB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, tab, b_rows, b_cols, std::int64_t(b_rows)));
    NORMLAB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, tc, std::uint64_t(N), std::uint64_t(M), N));

    cublasLtMatmulPreference_t pref = nullptr;
    NORMLAB_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const std::uint64_t ws = kWorkspaceBytes;
    NORMLAB_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    // The operands swap places: cuBLASLt's A is our B.
    const std::uint32_t al_a = alB, al_b = alA, al_c = alC;
    NORMLAB_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
    NORMLAB_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
    NORMLAB_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
    NORMLAB_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(lt_, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
      destroy(p);
      throw Error(std::string("cuda::DeviceContext::gemm: cuBLASLt has no algorithm for ") + dtype_name(Dtype(ab_i)) +
                  "->" + dtype_name(Dtype(c_i)) + " M=" + std::to_string(M) + " N=" + std::to_string(N) +
                  " K=" + std::to_string(K) + (transA ? " A^T" : "") + (transB ? " B^T" : "") +
                  " (status " + cublasLtGetStatusName(st) + ")");
    }
    p.algo = result.algo;
    return p;
  }
  static void destroy(Plan& p) {
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.c) cublasLtMatrixLayoutDestroy(p.c);
    if (p.desc) cublasLtMatmulDescDestroy(p.desc);
    p = Plan{};
  }

  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  DeviceBuffer workspace_;
  std::map<Key, Plan> plans_;
  bool bf16_products_ = false;
  DeviceBuffer scratch_[kSlots];
};

// The DeviceContext the static ops of normlab::cuda_backend run on: the one given to
// use(), or else one on device 0 created at first use. It is never destroyed
// (models may outlive any scope that could own it, and the CUDA runtime's
// teardown at exit must not race a handle's destruction).
inline DeviceContext*& current_slot() {
  static DeviceContext* current = nullptr;
  return current;
}
inline DeviceContext& current() {
  DeviceContext*& b = current_slot();
  if (!b) b = new DeviceContext(0);
  return *b;
}
inline void use(DeviceContext& be) { current_slot() = &be; }

}  // namespace normlab::cuda
