// bench_gemm_libs: float32 GEMM of every candidate library, side by side, at the
// shapes a training step runs, so that the fastest correct GEMM Debian packages
// sits behind cpu::gemm, chosen by measurement.
//
// Each library is dlopen'ed with RTLD_LOCAL, so OpenBLAS and BLIS (both export
// the BLAS symbols) live in one process and are timed interleaved, round by
// round, against normlab's own cpu::gemm. All of them thread through libgomp,
// the runtime the model uses. Per shape and library: median ms of the rounds,
// GFLOP/s, and whether the result has the same bits on 1 and on 2 threads.
//
//   bench_gemm_libs [--rounds R] [--threads n]
//   (OpenBLAS reads OPENBLAS_CORETYPE at load: unset it in the measuring command
//    only, so it picks its best kernels for the CPU.)
#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "normlab/backend/cpu/ops.hpp"

namespace {

// C(M,N) row-major = op(A)(M,K) op(B)(K,N), with op given per operand as in the model:
//  NT: A row-major (M,K), B = Wᵀ with W row-major (N,K)     (linear forward)
//  NN: A row-major (M,K), B row-major (K,N)                  (linear backward, dX)
//  TN: A = dYᵀ with dY row-major (K,M), B row-major (K,N)    (linear backward, dW, accumulate)
enum class Form { NT, NN, TN };
const char* form_name(Form f) { return f == Form::NT ? "NT" : f == Form::NN ? "NN" : "TN"; }

struct Shape {
  const char* what;
  std::int64_t M, N, K;
  Form form;
  bool accumulate;
};

using GemmFn = std::function<void(const Shape&, const float*, const float*, float*)>;

struct Lib {
  std::string name;
  GemmFn fn;
  // Largest error (relative to the largest entry of C) that is not a wrong
  // call: float32's rounding is ~1e-6 here; bf16 operands err by 2^-8 each.
  double bar = 1e-4;
};

// ---- normlab: cpu::gemm as built (its engine: cpu::kFloatGemmEngine), and
// the Eigen-kernel path it replaces when a faster engine is there.
template <bool kEigen>
void normlab_gemm(const Shape& s, const float* A, const float* B, float* C) {
  using namespace normlab::cpu;
  auto run = [&]<int L, int R>(std::int64_t lda, std::int64_t ldb) {
    if constexpr (kEigen)
      detail::eigen_gemm<float, L, R>(s.M, s.N, s.K, A, lda, B, ldb, C, s.N, s.accumulate, 1.0f);
    else
      gemm<float, L, R>(s.M, s.N, s.K, A, lda, B, ldb, C, s.N, s.accumulate);
  };
  switch (s.form) {
    case Form::NT: run.template operator()<Eigen::RowMajor, Eigen::ColMajor>(s.K, s.K); break;
    case Form::NN: run.template operator()<Eigen::RowMajor, Eigen::RowMajor>(s.K, s.N); break;
    case Form::TN: run.template operator()<Eigen::ColMajor, Eigen::RowMajor>(s.M, s.N); break;
  }
}

// ---- CBLAS (OpenBLAS)
enum { CblasRowMajor = 101 };
enum { CblasNoTrans = 111, CblasTrans = 112 };
using cblas_sgemm_t = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                               float*, int);

// ---- BLIS typed API: bli_sgemm(transa, transb, m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc)
using bli_sgemm_t = void (*)(int, int, long, long, long, const float*, const float*, long, long, const float*, long,
                             long, const float*, float*, long, long);
constexpr int BLIS_NO_TRANSPOSE = 0;

// ---- oneDNN: dnnl_sgemm(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), row-major
using dnnl_sgemm_t = int (*)(char, char, long, long, long, float, const float*, long, const float*, long, float,
                             float*, long);

void* open_lib(const char* path) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) std::fprintf(stderr, "bench_gemm_libs: %s not loaded (%s): skipped\n", path, dlerror());
  return h;
}

std::vector<Lib> load_libs() {
  std::vector<Lib> libs;
  libs.push_back({"normlab cpu::gemm", normlab_gemm<false>});
  if (normlab::cpu::bf16_engine_available())
    libs.push_back({"normlab cpu::gemm bf16",
                    [](const Shape& s, const float* A, const float* B, float* C) {
                      normlab::cpu::set_matmul_precision(normlab::Precision::bf16);
                      normlab_gemm<false>(s, A, B, C);
                      normlab::cpu::set_matmul_precision(normlab::Precision::fp32);
                    },
                    0x1p-8 * 4});
#if defined(NORMLAB_HAVE_OPENBLAS) || defined(NORMLAB_HAVE_SGEMM_AVX512)
  libs.push_back({"normlab, Eigen kernels", normlab_gemm<true>});
#endif
  if (void* h = open_lib("/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0")) {
    auto f = reinterpret_cast<cblas_sgemm_t>(dlsym(h, "cblas_sgemm"));
#ifdef NORMLAB_HAVE_SGEMM_AVX512
    // Change 17's engine, the one the AVX-512 kernels replaced: cpu::gemm's pieces
    // (≥ 512 rows or columns, multiples of 16, handed out dynamically), each one
    // serial OpenBLAS product (inside the region OpenBLAS does not thread itself).
    if (f)
      libs.push_back({"OpenBLAS serial, normlab pieces", [f](const Shape& s, const float* A, const float* B, float* C) {
                        const int ta = s.form == Form::TN ? CblasTrans : CblasNoTrans;
                        const int tb = s.form == Form::NT ? CblasTrans : CblasNoTrans;
                        const std::int64_t lda = s.form == Form::TN ? s.M : s.K;
                        const std::int64_t ldb = s.form == Form::NT ? s.K : s.N;
                        const bool rows = s.M >= s.N;
                        const std::int64_t len = rows ? s.M : s.N;
                        const std::int64_t pieces = std::clamp<std::int64_t>(len / 512, 2, 8);
                        const std::int64_t step = ((len + pieces - 1) / pieces + 15) / 16 * 16;
                        const std::int64_t count = (len + step - 1) / step;
#pragma omp parallel for schedule(dynamic, 1)
                        for (std::int64_t p = 0; p < count; ++p) {
                          const std::int64_t b = p * step, n = std::min(step, len - b);
                          const float* Ap = rows ? (s.form == Form::TN ? A + b : A + b * lda) : A;
                          const float* Bp = rows ? B : (s.form == Form::NT ? B + b * ldb : B + b);
                          f(CblasRowMajor, ta, tb, int(rows ? n : s.M), int(rows ? s.N : n), int(s.K), 1.0f, Ap,
                            int(lda), Bp, int(ldb), s.accumulate ? 1.0f : 0.0f, rows ? C + b * s.N : C + b, int(s.N));
                        }
                      }});
#endif
    if (f)
      libs.push_back({"OpenBLAS 0.3.21 (openmp)", [f](const Shape& s, const float* A, const float* B, float* C) {
                        const int ta = s.form == Form::TN ? CblasTrans : CblasNoTrans;
                        const int tb = s.form == Form::NT ? CblasTrans : CblasNoTrans;
                        const int lda = s.form == Form::TN ? int(s.M) : int(s.K);
                        const int ldb = s.form == Form::NT ? int(s.K) : int(s.N);
                        f(CblasRowMajor, ta, tb, int(s.M), int(s.N), int(s.K), 1.0f, A, lda, B, ldb,
                          s.accumulate ? 1.0f : 0.0f, C, int(s.N));
                      }});
  }
  if (void* h = open_lib("/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4")) {
    auto f = reinterpret_cast<bli_sgemm_t>(dlsym(h, "bli_sgemm"));
    if (f)
      libs.push_back({"BLIS 0.9.0 (openmp)", [f](const Shape& s, const float* A, const float* B, float* C) {
                        // Strides give every form without a transpose flag.
                        long rsa = s.K, csa = 1, rsb = s.N, csb = 1;
                        if (s.form == Form::TN) rsa = 1, csa = s.M;
                        if (s.form == Form::NT) rsb = 1, csb = s.K;
                        const float one = 1.0f, beta = s.accumulate ? 1.0f : 0.0f;
                        f(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, s.M, s.N, s.K, &one, A, rsa, csa, B, rsb, csb, &beta, C,
                          s.N, 1);
                      }});
  }
  if (void* h = open_lib("libdnnl.so.2")) {
    auto f = reinterpret_cast<dnnl_sgemm_t>(dlsym(h, "dnnl_sgemm"));
    if (f)
      libs.push_back({"oneDNN 2.6.3", [f](const Shape& s, const float* A, const float* B, float* C) {
                        const char ta = s.form == Form::TN ? 'T' : 'N';
                        const char tb = s.form == Form::NT ? 'T' : 'N';
                        const long lda = s.form == Form::TN ? s.M : s.K;
                        const long ldb = s.form == Form::NT ? s.K : s.N;
                        f(ta, tb, s.M, s.N, s.K, 1.0f, A, lda, B, ldb, s.accumulate ? 1.0f : 0.0f, C, s.N);
                      }});
  }
  return libs;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 7, threads = omp_get_max_threads();
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_gemm_libs [--rounds R] [--threads n]\n");
      return 2;
    }
  }
  // The shapes of one step at the reference config (N = B·T = 2048, d = 256, F = 1024,
  // V = 256), of the larger config (N = 2048, d = 512), and the 1024³ anchor.
  const std::vector<Shape> shapes = {
      {"anchor 1024^3", 1024, 1024, 1024, Form::NT, false},
      {"ref q/k/v/o fwd", 2048, 256, 256, Form::NT, false},
      {"ref fc fwd", 2048, 2048, 256, Form::NT, false},
      {"ref proj fwd", 2048, 256, 1024, Form::NT, false},
      {"ref fc dX", 2048, 256, 2048, Form::NN, false},
      {"ref fc dW", 2048, 256, 2048, Form::TN, true},
      {"ref proj dX", 2048, 1024, 256, Form::NN, false},
      {"ref proj dW", 256, 1024, 2048, Form::TN, true},
      {"ref q dW", 256, 256, 2048, Form::TN, true},
      {"big fc fwd", 2048, 4096, 512, Form::NT, false},
      {"big proj dX", 2048, 2048, 512, Form::NN, false},
      {"big fc dW", 4096, 512, 2048, Form::TN, true},
      // attention's blocks (64 queries × 64 keys, dk = 64), one thread each
      {"attn S=QK^T", 64, 64, 64, Form::NT, false},
      {"attn O+=PV", 64, 64, 64, Form::NN, true},
      {"attn dV+=P^TdY", 64, 64, 64, Form::TN, true},
  };
  std::vector<Lib> libs = load_libs();
  double worst_error = 0;
  bool normlab_same_bits = true;
  omp_set_num_threads(threads);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::printf("threads %d, rounds %d (interleaved: every library once per round, in rotating order)\n", threads,
              rounds);
  std::printf("%-16s %-5s %5s %5s %5s", "shape", "form", "M", "N", "K");
  for (const Lib& l : libs) std::printf(" | %24s", l.name.c_str());
  std::printf("\n");
  for (const Shape& s : shapes) {
    const std::int64_t asz = s.M * s.K, bsz = s.K * s.N, csz = s.M * s.N;
    std::vector<float> A(asz), B(bsz), C0(csz);
    for (float& x : A) x = nd(rng);
    for (float& x : B) x = nd(rng);
    for (float& x : C0) x = nd(rng);
    std::vector<float> C(csz), ref(csz);
    // Reference in double for the error column, on up to 64 evenly spaced rows
    // (every column): a wrong call (transpose, stride, beta) shows in any row,
    // and the full float64 product of the big shapes took most of a run.
    std::vector<double> exact(csz);
    std::vector<std::int64_t> rows;
    for (std::int64_t r = 0, n = std::min<std::int64_t>(s.M, 64); r < n; ++r) rows.push_back(r * s.M / n);
    for (const std::int64_t i : rows)
      for (std::int64_t j = 0; j < s.N; ++j) {
        double acc = s.accumulate ? C0[i * s.N + j] : 0.0;
        for (std::int64_t k = 0; k < s.K; ++k) {
          const double a = s.form == Form::TN ? A[k * s.M + i] : A[i * s.K + k];
          const double b = s.form == Form::NT ? B[j * s.K + k] : B[k * s.N + j];
          acc += a * b;
        }
        exact[i * s.N + j] = acc;
      }
    const double flops = 2.0 * double(s.M) * double(s.N) * double(s.K);
    // Repetitions per timing so one timing lasts ≥ ~20 ms.
    const int reps = std::max(1, int(20e-3 / (flops / 200e9)));
    std::vector<std::vector<double>> ms(libs.size());
    std::vector<double> err(libs.size());
    std::vector<bool> same_bits(libs.size(), true);
    for (std::size_t l = 0; l < libs.size(); ++l) {  // warm-up, thread-count check and error
      std::vector<float> one(csz), two(csz);
      omp_set_num_threads(1);
      one = C0;
      libs[l].fn(s, A.data(), B.data(), one.data());
      omp_set_num_threads(threads);
      two = C0;
      libs[l].fn(s, A.data(), B.data(), two.data());
      same_bits[l] = std::memcmp(one.data(), two.data(), csz * sizeof(float)) == 0;
      double e = 0, scale = 0;
      for (const std::int64_t i : rows)
        for (std::int64_t j = 0; j < s.N; ++j) {
          e = std::max(e, std::abs(double(two[i * s.N + j]) - exact[i * s.N + j]));
          scale = std::max(scale, std::abs(exact[i * s.N + j]));
        }
      err[l] = e / scale;
      worst_error = std::max(worst_error, err[l] / libs[l].bar);
      if (l == 0) normlab_same_bits = normlab_same_bits && same_bits[l];
    }
    for (int r = 0; r < rounds; ++r)
      for (std::size_t o = 0; o < libs.size(); ++o) {
        const std::size_t l = (o + std::size_t(r)) % libs.size();
        C = C0;
        const double t0 = now_s();
        for (int i = 0; i < reps; ++i) libs[l].fn(s, A.data(), B.data(), C.data());
        ms[l].push_back((now_s() - t0) * 1e3 / reps);
      }
    std::printf("%-16s %-5s %5lld %5lld %5lld", s.what, form_name(s.form), (long long)s.M, (long long)s.N,
                (long long)s.K);
    for (std::size_t l = 0; l < libs.size(); ++l) {
      std::sort(ms[l].begin(), ms[l].end());
      const double med = ms[l][ms[l].size() / 2];
      std::printf(" | %7.3f ms %6.1f GF/s %s", med, flops / (med * 1e-3) * 1e-9, same_bits[l] ? "=" : "~");
    }
    std::printf("\n");
    std::printf("%-35s", "  max rel. error vs float64 (<=64 rows)");
    for (std::size_t l = 0; l < libs.size(); ++l) std::printf(" | %24.1e", err[l]);
    std::printf("\n");
    std::fflush(stdout);
  }
  std::printf("(= : same bits on 1 and %d threads; ~ : the bits depend on the thread count)\n", threads);
  // A float32 product of N(0,1) data errs by ~1e-6 of the largest entry here; its
  // bar (1e-4; bf16's 2^-6) only catches a wrong call (transposes, strides, beta),
  // never rounding.
  if (worst_error > 1 || !normlab_same_bits) {
    std::fprintf(stderr, "bench_gemm_libs: FAILED: worst relative error %.2f of its bar%s\n", worst_error,
                 normlab_same_bits ? "" : "; normlab's cpu::gemm changed its bits with the thread count");
    return 1;
  }
  return 0;
}
