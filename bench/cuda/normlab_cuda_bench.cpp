// GPU benchmarks of the CUDA backend (docs/cuda.md, docs/perf.md):
//  * BM_TrainStep/<variant>: one full training step (forward, backward, clip,
//    AdamW, constraint) of the one model on cuda_backend at d=1024, 24 layers,
//    16 heads, T=1024, vocabulary 50304, batch 8 (--batch=N to change), float32
//    storage (MFU is against the bf16 peak, so low until bf16 is wired in): tokens/s and MFU;
//  * BM_Gemm: a large bf16 GEMM through the same backend (compute ceiling);
//  * BM_Copy: device-to-device copy on the stream (memory ceiling, read + write bytes);
//  * BM_Kernel/<name>: the fused row kernels at the step's shapes, GB/s of the
//    bytes each must move at least (its inputs read once, outputs written once).
// Every benchmark times itself with cudaEvents (UseManualTime). After the run a
// summary table gives MFU of gpt, the ngpt/gpt and angpt/gpt step-time ratios
// and each row kernel as a percentage of the copy bandwidth.
//
// FLOPs per token (docs/perf.md): 6 × (weights in matrix products: W_q, W_k,
// W_v, W_o, W_fc, W_proj of every layer and the LM head) + 6 × layers × T × d.
// MFU = tokens/s × FLOPs per token / peak, the peak being the device's dense
// bf16 tensor-core figure from the table below (--peak_tflops=X overrides).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "normlab/backend/cuda/device_context.hpp"
#include "normlab/backend/cuda/kernels.hpp"
#include "normlab/backend/cuda/cuda_backend.hpp"
#include "normlab/model/transformer.hpp"
#include "normlab/train/step.hpp"
#include "normlab/train/variants.hpp"

using namespace normlab;
using namespace normlab::cuda;

namespace {

struct Options {
  std::int64_t batch = 8;
  double peak_tflops = 0;  // 0: from the table
} opts;

// Dense bf16 tensor-core peaks (no sparsity), TFLOP/s, by device-name substring.
double table_peak(const std::string& name) {
  struct Row {
    const char* key;
    double tflops;
  };
  static const Row rows[] = {{"H200", 989.4}, {"GH200", 989.4}, {"H100 PCIe", 756.0}, {"H100", 989.4},
                             {"H800", 989.4}, {"A100", 312.0},  {"A800", 312.0},      {"L40S", 362.05},
                             {"L4", 121.0},   {"A10", 125.0}};
  for (const Row& r : rows)
    if (name.find(r.key) != std::string::npos) return r.tflops;
  return 0;
}

DeviceContext& backend() {
  static DeviceContext be;  // one per benchmark process
  return be;
}
std::string device_name() {
  cudaDeviceProp p{};
  NORMLAB_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  return p.name;
}
double peak_flops() {
  const double t = opts.peak_tflops > 0 ? opts.peak_tflops : table_peak(device_name());
  return t * 1e12;
}

// Figures for the summary table, filled by the benchmarks.
std::map<std::string, double> figures;

class EventTimer {
 public:
  EventTimer() {
    NORMLAB_CUDA_CHECK(cudaEventCreate(&a_));
    NORMLAB_CUDA_CHECK(cudaEventCreate(&b_));
  }
  ~EventTimer() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }
  void start(cudaStream_t s) { NORMLAB_CUDA_CHECK(cudaEventRecord(a_, s)); }
  double stop_seconds(cudaStream_t s) {
    NORMLAB_CUDA_CHECK(cudaEventRecord(b_, s));
    NORMLAB_CUDA_CHECK(cudaEventSynchronize(b_));
    float ms = 0;
    NORMLAB_CUDA_CHECK(cudaEventElapsedTime(&ms, a_, b_));
    return ms * 1e-3;
  }

 private:
  cudaEvent_t a_ = nullptr, b_ = nullptr;
};

ModelConfig bench_config() {
  ModelConfig c;
  c.vocab_size = 50304;
  c.n_embd = 1024;
  c.n_head = 16;
  c.n_layer = 24;
  return c;
}
constexpr std::int64_t kSeq = 1024;

double flops_per_token(const ModelConfig& c, std::int64_t T) {
  const double d = double(c.n_embd);
  const double weights = double(c.n_layer) * 16.0 * d * d + double(c.vocab_size) * d;
  return 6.0 * weights + 6.0 * double(c.n_layer) * double(T) * d;
}

// The one model on the CUDA backend (float32 storage), one train_step a iteration.
template <class Tag>
void train_step_bench(benchmark::State& state, const char* variant) {
  using Model = typename Tag::template model<float, cuda_backend>;
  DeviceContext& be = backend();
  cuda::use(be);
  const ModelConfig mc = bench_config();
  const std::int64_t B = opts.batch, T = kSeq, N = B * T;
  std::unique_ptr<Model> m;
  try {
    m = std::make_unique<Model>(mc, B, T);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  m->init(1);
  AdamWConfig oc;
  oc.weight_decay = 0.1;
  AdamW<float, cuda_backend> opt(m->params(), oc);
  std::mt19937_64 rng(3);
  std::vector<std::int64_t> idx(N), tgt(N);
  for (auto& x : idx) x = std::int64_t(rng() % std::uint64_t(mc.vocab_size));
  for (auto& x : tgt) x = std::int64_t(rng() % std::uint64_t(mc.vocab_size));
  auto step = [&] { train_step(*m, opt, idx.data(), tgt.data(), B, T, 1e-4, 1.0); };
  step();  // warm-up: cuBLASLt plans, caches
  EventTimer ev;
  double total = 0;
  std::int64_t iters = 0;
  for (auto _ : state) {
    ev.start(be.stream());
    step();
    const double sec = ev.stop_seconds(be.stream());
    state.SetIterationTime(sec);
    total += sec;
    ++iters;
  }
  const double tps = double(N) * double(iters) / total;
  const double mfu = peak_flops() > 0 ? tps * flops_per_token(mc, T) / peak_flops() : 0;
  state.counters["tokens_per_second"] = tps;
  state.counters["TFLOPs"] = tps * flops_per_token(mc, T) * 1e-12;
  state.counters["MFU"] = mfu;
  const auto plan = Model::memory_plan(mc, B, T);
  state.counters["GiB"] = double(plan.total() + 2 * plan.parameters) / double(1u << 30);
  figures[std::string("step_s/") + variant] = total / double(iters);
  figures[std::string("mfu/") + variant] = mfu;
}

void BM_TrainStep_gpt(benchmark::State& s) { train_step_bench<variants::gpt>(s, "gpt"); }
void BM_TrainStep_ngpt(benchmark::State& s) { train_step_bench<variants::ngpt>(s, "ngpt"); }
void BM_TrainStep_angpt(benchmark::State& s) { train_step_bench<variants::angpt>(s, "angpt"); }

// Random values in a storage buffer (uploaded once as float, converted on the device).
void fill(DeviceContext& be, Dtype dt, void* dst, std::int64_t n, double scale, double shift, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> h(static_cast<std::size_t>(n));
  for (float& x : h) x = float(shift + scale * nd(rng));
  DeviceBuffer tmp(h.size() * 4);
  be.upload(tmp.get(), h.data(), h.size() * 4);
  k::to_storage(dt, dst, tmp.as<float>(), n, be.stream());
  be.synchronize();
}

template <class F>
void time_kernel(benchmark::State& state, const std::string& name, double bytes, F&& launch) {
  DeviceContext& be = backend();
  launch();  // warm-up
  EventTimer ev;
  double total = 0;
  std::int64_t iters = 0;
  for (auto _ : state) {
    ev.start(be.stream());
    launch();
    const double sec = ev.stop_seconds(be.stream());
    state.SetIterationTime(sec);
    total += sec;
    ++iters;
  }
  const double gbs = bytes * double(iters) / total * 1e-9;
  state.counters["GB_per_s"] = gbs;
  figures["gbs/" + name] = gbs;
}

void BM_Copy(benchmark::State& state) {
  const std::size_t bytes = std::size_t(1) << 30;
  DeviceBuffer a(bytes), b(bytes);
  DeviceContext& be = backend();
  be.fill_bytes(a.get(), 1, bytes);
  time_kernel(state, "copy", 2.0 * double(bytes), [&] {
    NORMLAB_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, be.stream()));
  });
}

void BM_Gemm(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  DeviceContext& be = backend();
  DeviceBuffer x(n * n * 2), w(n * n * 2), y(n * n * 2);
  fill(be, Dtype::bf16, x.get(), n * n, 1.0, 0.0, 1);
  fill(be, Dtype::bf16, w.get(), n * n, 1.0, 0.0, 2);
  be.linear_forward(Dtype::bf16, y.get(), x.get(), w.get(), n, n, n);
  EventTimer ev;
  double total = 0;
  std::int64_t iters = 0;
  for (auto _ : state) {
    ev.start(be.stream());
    be.linear_forward(Dtype::bf16, y.get(), x.get(), w.get(), n, n, n);
    const double sec = ev.stop_seconds(be.stream());
    state.SetIterationTime(sec);
    total += sec;
    ++iters;
  }
  const double tf = 2.0 * double(n) * double(n) * double(n) * double(iters) / total * 1e-12;
  state.counters["TFLOPs"] = tf;
  state.counters["of_peak"] = peak_flops() > 0 ? tf * 1e12 / peak_flops() : 0;
  figures["gemm_tflops"] = tf;
}

// The fused row kernels at the training step's shapes (bf16, N = 8·1024 tokens).
void BM_Kernel(benchmark::State& state, const std::string& name) {
  DeviceContext& be = backend();
  const Dtype dt = Dtype::bf16;
  const std::int64_t N = opts.batch * kSeq, C = 1024, H = 16, D = 64, F = 4 * C, V = 50304;
  const double es = 2;
  cudaStream_t s = be.stream();
  DeviceBuffer partial(colreduce_chunks(N) * std::max<std::int64_t>(2 * F, V) * 4);
  if (name == "rmsnorm_fwd" || name == "rmsnorm_bwd") {
    DeviceBuffer x(N * C * 2), y(N * C * 2), dy(N * C * 2), w(C * 4), dw(C * 4), r(N * 4);
    fill(be, dt, x.get(), N * C, 1, 0, 1);
    fill(be, dt, dy.get(), N * C, 1, 0, 2);
    fill(be, Dtype::f32, w.get(), C, 0.1, 1, 3);
    k::rmsnorm_forward(dt, y.get(), r.as<float>(), x.get(), w.as<float>(), N, C, 1e-6f, s);
    if (name == "rmsnorm_fwd")
      time_kernel(state, name, 2 * N * C * es, [&] {
        k::rmsnorm_forward(dt, y.get(), r.as<float>(), x.get(), w.as<float>(), N, C, 1e-6f, s);
      });
    else
      time_kernel(state, name, 3 * N * C * es, [&] {
        k::rmsnorm_backward(dt, y.get(), dw.as<float>(), dy.get(), x.get(), w.as<float>(), r.as<float>(), N, C, false,
                            partial.as<float>(), s);
      });
  } else if (name == "lerp_retract_fwd" || name == "lerp_retract_bwd") {
    DeviceBuffer h(N * C * 2), f(N * C * 2), out(N * C * 2), g(N * C * 2), df(N * C * 2), al(C * 4), da(C * 4);
    DeviceBuffer nh(N * 4), nf(N * 4), nz(N * 4), rd(N * 4);
    fill(be, dt, h.get(), N * C, 0.03, 0, 1);
    fill(be, dt, f.get(), N * C, 0.03, 0, 2);
    fill(be, dt, g.get(), N * C, 1, 0, 3);
    fill(be, Dtype::f32, al.get(), C, 0.01, 0.05, 4);
    const k::ResidualCache c{nh.as<float>(), nf.as<float>(), nz.as<float>()};
    k::residual_forward(dt, ResidualKind::lerp_retract, out.get(), h.get(), f.get(), al.as<float>(), c, N, C, s);
    if (name == "lerp_retract_fwd")
      time_kernel(state, name, 3 * N * C * es, [&] {
        k::residual_forward(dt, ResidualKind::lerp_retract, out.get(), h.get(), f.get(), al.as<float>(), c, N, C, s);
      });
    else  // reads dout, out, h, f; writes dh, df (dh over dout, as in the model)
      time_kernel(state, name, 6 * N * C * es, [&] {
        k::residual_backward(dt, ResidualKind::lerp_retract, g.get(), df.get(), da.as<float>(), g.get(), out.get(),
                             h.get(), f.get(), al.as<float>(), c, rd.as<float>(), N, C, partial.as<float>(), s);
      });
  } else if (name == "qk_fwd") {
    DeviceBuffer q(N * C * 2), qh(N * C * 2), qs(N * C * 2), qn(N * H * 4), sq(C * 4), cs(kSeq * D / 2 * 4),
        sn(kSeq * D / 2 * 4);
    fill(be, dt, q.get(), N * C, 1, 0, 1);
    fill(be, Dtype::f32, sq.get(), C, 0.1, 1, 2);
    fill(be, Dtype::f32, cs.get(), kSeq * D / 2, 0.5, 0, 3);
    fill(be, Dtype::f32, sn.get(), kSeq * D / 2, 0.5, 0, 4);
    time_kernel(state, name, 4 * N * C * es, [&] {
      k::qk_forward(dt, QkKind::unit_scaled, q.get(), qh.get(), qn.as<float>(), qs.get(), sq.as<float>(),
                    cs.as<float>(), sn.as<float>(), opts.batch, kSeq, H, D, s);
    });
  } else if (name == "swiglu_fwd") {
    DeviceBuffer uv(N * 2 * F * 2), act(N * F * 2), su(2 * F * 4);
    fill(be, dt, uv.get(), N * 2 * F, 1, 0, 1);
    fill(be, Dtype::f32, su.get(), 2 * F, 0.1, 1, 2);
    time_kernel(state, name, 3 * N * F * es,
                [&] { k::swiglu_forward(dt, act.get(), uv.get(), su.as<float>(), N, F, s); });
  } else if (name == "cross_entropy") {
    DeviceBuffer lg(N * V * 2), dl(N * V * 2), loss(N * 4), sz(V * 4), tg(N * 4);
    fill(be, dt, lg.get(), N * V, 1, 0, 1);
    fill(be, Dtype::f32, sz.get(), V, 0.1, 1, 2);
    be.fill_bytes(tg.get(), 0, N * 4);
    time_kernel(state, name, 2 * double(N) * double(V) * es, [&] {
      k::cross_entropy(dt, dl.get(), loss.as<float>(), lg.get(), sz.as<float>(), tg.as<std::int32_t>(), N, V, s);
    });
  } else if (name == "adamw_rows") {  // a (8C, C) matrix: 8M parameters
    const std::int64_t R = 8 * C, L = C;
    DeviceBuffer p(R * L * 4), m(R * L * 4), v(R * L * 4), g(R * L * 4), cp(R * L * 2);
    fill(be, Dtype::f32, p.get(), R * L, 0.03, 0, 1);
    fill(be, Dtype::f32, g.get(), R * L, 0.001, 0, 2);
    be.fill_bytes(m.get(), 0, R * L * 4);
    be.fill_bytes(v.get(), 0, R * L * 4);
    k::AdamHyper hp;
    hp.step_size = 1e-4f;
    time_kernel(state, name, double(R * L) * (16 + 12 + 2), [&] {
      k::adamw_constrain(p.as<float>(), m.as<float>(), v.as<float>(), g.as<float>(), cp.get(), dt, R, L,
                         ConstraintAxis::rows, ConstraintKind::unit_norm, hp, s);
    });
  }
}

void print_summary() {
  auto get = [](const std::string& k) {
    auto it = figures.find(k);
    return it == figures.end() ? -1.0 : it->second;
  };
  std::printf("\n==== normlab CUDA summary (%s, peak %.1f TFLOP/s bf16, batch %lld x T %lld) ====\n",
              device_name().c_str(), peak_flops() * 1e-12, (long long)opts.batch, (long long)kSeq);
  std::printf("| figure | value | target |\n|---|---:|---|\n");
  const double copy = get("gbs/copy");
  std::printf("| device-to-device copy | %.0f GB/s | (memory ceiling) |\n", copy);
  std::printf("| bf16 GEMM 8192^3 | %.1f TFLOP/s | (compute ceiling) |\n", get("gemm_tflops"));
  for (const char* v : {"gpt", "ngpt", "angpt"})
    std::printf("| %s step | %.1f ms, MFU %.1f%% | %s |\n", v, get(std::string("step_s/") + v) * 1e3,
                get(std::string("mfu/") + v) * 100, std::strcmp(v, "gpt") == 0 ? ">= 45%" : "");
  const double g = get("step_s/gpt");
  if (g > 0) {
    std::printf("| ngpt / gpt step time | %.3f | <= 1.05 |\n", get("step_s/ngpt") / g);
    std::printf("| angpt / gpt step time | %.3f | |\n", get("step_s/angpt") / g);
  }
  for (const auto& [key, val] : figures)
    if (key.rfind("gbs/", 0) == 0 && key != "gbs/copy")
      std::printf("| %s | %.0f GB/s = %.0f%% of copy | >= 80%% |\n", key.substr(4).c_str(), val,
                  copy > 0 ? 100.0 * val / copy : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  std::string why;
  if (device_count(&why) == 0) {
    std::printf("SKIP: normlab_cuda_bench: no CUDA device (cudaGetDeviceCount: %s)\n", why.c_str());
    return 77;
  }
  // Our flags first (Google Benchmark rejects flags it does not know).
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--batch=", 0) == 0) opts.batch = std::stoll(a.substr(8));
    else if (a.rfind("--peak_tflops=", 0) == 0) opts.peak_tflops = std::stod(a.substr(14));
    else rest.push_back(argv[i]);
  }
  int rargc = int(rest.size());
  benchmark::Initialize(&rargc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rargc, rest.data())) return 1;

  benchmark::RegisterBenchmark("BM_Copy", BM_Copy)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(20);
  benchmark::RegisterBenchmark("BM_Gemm", BM_Gemm)->Arg(8192)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(10);
  for (const char* kname : {"rmsnorm_fwd", "rmsnorm_bwd", "lerp_retract_fwd", "lerp_retract_bwd", "qk_fwd", "swiglu_fwd",
                            "cross_entropy", "adamw_rows"})
    benchmark::RegisterBenchmark((std::string("BM_Kernel/") + kname).c_str(),
                                 [n = std::string(kname)](benchmark::State& s) { BM_Kernel(s, n); })
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->Iterations(20);
  benchmark::RegisterBenchmark("BM_TrainStep/gpt", BM_TrainStep_gpt)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);
  benchmark::RegisterBenchmark("BM_TrainStep/ngpt", BM_TrainStep_ngpt)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);
  benchmark::RegisterBenchmark("BM_TrainStep/angpt", BM_TrainStep_angpt)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  print_summary();
  return 0;
}
