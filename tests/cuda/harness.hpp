#pragma once
// A tiny harness for the CUDA tests: plain mains registered with CTest, which
// exit 77 (SKIP_RETURN_CODE) when no CUDA device is present, so a machine
// without a GPU reports them as skipped, never as passed or failed.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "normlab/backend/cuda/device_context.hpp"
#include "normlab/backend/cuda/kernels.hpp"

namespace normlab::cuda::test {

inline constexpr int kSkip = 77;

// 0 when a device is present; otherwise prints the reason and returns kSkip.
inline int skip_without_device(const char* what) {
  std::string why;
  if (device_count(&why) > 0) return 0;
  std::printf("SKIP: %s: no CUDA device (cudaGetDeviceCount: %s)\n", what, why.c_str());
  return kSkip;
}

// The CPU oracle's buffers (parameters, optimizer moments) are 64-byte-aligned
// vectors; the harness compares plain ones.
template <class Vec>
std::vector<double> plain(const Vec& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Each check prints its own PASS/FAIL line and flushes it before the next
// starts, so a run cut off or killed still shows every check it finished. After
// each check the device is synchronized: a fault an earlier kernel left (it
// surfaces at the next synchronize) fails that check, and the binary stops with
// a sentence naming it (exit 1) rather than aborting every check after it
// unreported; the other test binaries still run (scripts/gpu-check.sh).
struct Tally {
  int checks = 0, failures = 0;
  const char* test = "cuda test";
  // ‖got − ref‖₂ / ‖ref‖₂ (absolute when ref is all zeros) against tol; NaN fails.
  void rel(const std::string& name, const std::vector<double>& got, const std::vector<double>& ref, double tol) {
    require_healthy_device(name);
    ++checks;
    double num = 0, den = 0;
    const bool size_ok = got.size() == ref.size();
    for (std::size_t i = 0; size_ok && i < ref.size(); ++i) {
      num += (got[i] - ref[i]) * (got[i] - ref[i]);
      den += ref[i] * ref[i];
    }
    const double e = !size_ok ? INFINITY : (den > 0 ? std::sqrt(num / den) : std::sqrt(num));
    const bool ok = e <= tol;
    failures += ok ? 0 : 1;
    std::printf("%-4s %-60s rel %.3e  tol %.1e\n", ok ? "PASS" : "FAIL", name.c_str(), e, tol);
    std::fflush(stdout);
  }
  void truth(const std::string& name, bool ok) {
    require_healthy_device(name);
    ++checks;
    failures += ok ? 0 : 1;
    std::printf("%-4s %s\n", ok ? "PASS" : "FAIL", name.c_str());
    std::fflush(stdout);
  }
  // Synchronizes the device; on a fault, FAIL for this check and stop the binary.
  void require_healthy_device(const std::string& name) {
    static const bool have_device = device_count() > 0;  // test_cuda_limits runs without one
    if (!have_device) return;
    std::string fault;
    try {
      current().synchronize();
    } catch (const std::exception& e) {
      fault = e.what();
    }
    if (fault.empty()) return;
    ++checks;
    ++failures;
    std::printf("FAIL %s: device fault at this check's synchronize: %s\n", name.c_str(), fault.c_str());
    std::printf("%s: stopped after a device fault in check '%s' (%d checks, %d failures): FAIL\n", test,
                name.c_str(), checks, failures);
    std::fflush(stdout);
    std::exit(1);
  }
  int finish(const char* what) const {
    std::printf("%s: %d checks, %d failures: %s\n", what, checks, failures, failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
  }
};

// Runs body() unless there is no device; exceptions fail the test with their message.
template <class F>
int run_test(const char* what, F&& body) {
  if (const int rc = skip_without_device(what)) return rc;
  try {
    return body();
  } catch (const std::exception& e) {
    std::printf("FAIL: %s: %s\n", what, e.what());
    std::fflush(stdout);
    return 1;
  }
}

// Host rounding to the storage type (round to nearest even, as __float2bfloat16).
inline double round_to(Dtype dt, double x) {
  const float f = float(x);
  if (dt == Dtype::f32) return f;
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

// n token ids in [0, V) (the model-level tests' batches).
inline std::vector<std::int64_t> random_tokens(std::mt19937_64& rng, std::size_t n, std::int64_t V) {
  std::vector<std::int64_t> v(n);
  for (auto& x : v) x = std::int64_t(rng() % std::uint64_t(V));
  return v;
}
// n floats of device memory, on the host (on cuda::current()'s stream, complete on return).
inline std::vector<float> download(const float* dev, std::size_t n) {
  std::vector<float> h(n);
  current().download(h.data(), dev, n * sizeof(float));
  return h;
}

inline std::vector<double> random_vec(std::mt19937_64& rng, std::size_t n, double scale = 1.0, double shift = 0.0) {
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> v(n);
  for (double& x : v) x = shift + scale * nd(rng);
  return v;
}

// A device tensor in storage dt (or float32 when dt is f32 and `as_f32`), filled from host doubles.
class DTensor {
 public:
  DTensor(DeviceContext& be, Dtype dt, std::size_t n) : be_(&be), dt_(dt), n_(n), buf_(n * dtype_size(dt)) {}
  DTensor(DeviceContext& be, Dtype dt, const std::vector<double>& host) : DTensor(be, dt, host.size()) { set(host); }
  void set(const std::vector<double>& host) {
    std::vector<float> f(host.begin(), host.end());
    DeviceBuffer tmp(f.size() * 4);
    be_->upload(tmp.get(), f.data(), f.size() * 4);
    k::to_storage(dt_, buf_.get(), tmp.as<float>(), std::int64_t(n_), be_->stream());
    be_->synchronize();
  }
  std::vector<double> get() const {
    DeviceBuffer tmp(n_ * 4);
    k::to_float(dt_, tmp.as<float>(), buf_.get(), std::int64_t(n_), be_->stream());
    std::vector<float> f(n_);
    be_->download(f.data(), tmp.get(), n_ * 4);
    return std::vector<double>(f.begin(), f.end());
  }
  void* ptr() const { return buf_.get(); }
  float* f() const { return buf_.as<float>(); }  // only for float32 tensors
  std::size_t size() const { return n_; }

 private:
  DeviceContext* be_;
  Dtype dt_;
  std::size_t n_;
  DeviceBuffer buf_;
};

// The values as the device holds them: rounded to the storage type.
inline std::vector<double> rounded(Dtype dt, std::vector<double> v) {
  for (double& x : v) x = round_to(dt, x);
  return v;
}

}  // namespace normlab::cuda::test
