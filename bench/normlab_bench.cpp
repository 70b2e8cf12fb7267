// normlab_bench: Google Benchmark suite for the CPU backend.
//
//   BM_FmaPeak            the cores' arithmetic peak (independent FMAs, every
//                          thread): what no GEMM or step can pass
//   BM_GemmCeiling        a large float32 GEMM through the same backend: the
//                          machine's ceiling, measured in the same run
//   BM_TrainStep/<v>/...   full step (forward, backward, clip, AdamW, constraint)
//   BM_StepPair/<a>/<b>/.. two variants' steps alternated in one loop: their ratio
//   BM_ThreadPair/<v>/..   one variant's one-thread and all-thread steps alternated
//   BM_OptimizerPair/<v>/adamw/muon/..  one variant's AdamW and Muon steps alternated
//                          (muon_fp32ns: its Newton–Schulz products in float32)
//   BM_CeilingPair/<v>/..  one variant's step and OpenBLAS's SGEMM 1024³ alternated
//   BM_<kernel>           per-kernel figures (GB/s or GFLOP/s)
//
//   BM_CeilingPair/open_<shape>/..  the same for the open block's shapes
//                          (grouped kv heads, a window, plain MLPs) at the
//                          reference config
//
// FLOPs per token of a step = 6 × (weights in matrix products, LM head
// included, embedding lookup excluded) + 6 × layers × T × d  (docs/perf.md);
// with a window W the attention term is 12 × layers × d × (the keys a query
// sees on average, Σ_t min(t+1, W) / T), which is the T/2 of the line above
// when W ≥ T.
#include <benchmark/benchmark.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "normlab/normlab.hpp"
#include "normlab/train/variants.hpp"

using namespace normlab;

namespace {

std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Matrix weights used in products, LM head included, embedding excluded.
template <class Model>
double matmul_weights(const Model& m) {
  double n = 0;
  for (const ParamSpec& s : m.params().specs())
    if (s.role == ParamRole::matrix && s.name != "transformer.wte.weight") n += double(s.numel);
  return n;
}

struct StepConfig {
  std::int64_t d, layers, heads, T, B, V;
  int threads = 0;  // 0: OpenMP's default (all cores)
  std::int64_t kv_heads = 0, window = 0;  // ModelConfig's n_kv_heads and attn_window (0: the classic block)
};
constexpr StepConfig kReference{256, 4, 4, 256, 8, 256};
constexpr StepConfig kLarger{512, 6, 8, 512, 4, 256};
constexpr StepConfig kLong{256, 4, 4, 1024, 2, 256};  // the reference model at T = 1024, same tokens per step
constexpr StepConfig kReferenceOneThread{256, 4, 4, 256, 8, 256, 1};

// Sets the OpenMP thread count for one benchmark and restores it after, so a
// one-thread and an all-threads run can be interleaved in the same process.
struct ThreadCount {
  int saved = omp_get_max_threads();
  explicit ThreadCount(int n) {
    if (n > 0) omp_set_num_threads(n);
  }
  ~ThreadCount() { omp_set_num_threads(saved); }
};

// One variant's model, optimizer (AdamW unless Opt says otherwise) and a fixed
// batch of random tokens, ready to step.
template <class Tag, class Opt = AdamW<float>>
struct StepRig {
  using Model = typename Tag::template model<float>;
  StepConfig c;
  Model model;
  Opt opt;
  std::vector<std::int64_t> idx, tgt;

  static ModelConfig model_config(const StepConfig& c) {
    ModelConfig mc;
    mc.vocab_size = c.V;
    mc.n_embd = c.d;
    mc.n_head = c.heads;
    mc.n_layer = c.layers;
    mc.n_kv_heads = c.kv_heads;
    mc.attn_window = c.window;
    return mc;
  }
  static auto optimizer_config(Precision ns) {
    const double wd = keeps_unit_hidden<typename Model::scheme> ? 0.0 : 0.1;
    if constexpr (std::is_same_v<Opt, Muon<float>>) {
      MuonConfig mc;
      mc.ns_precision = ns;
      mc.weight_decay = wd;
      mc.lr_ratio = 20.0;  // the reference's 0.02 over the step's 1e-3
      return mc;
    } else {
      AdamWConfig oc;
      oc.weight_decay = wd;
      return oc;
    }
  }
  // The weights are initialized before the optimizer is built over them (the comma
  // in opt's initializer), as BM_TrainStep did before StepRig.
  explicit StepRig(StepConfig cfg, Precision ns = Precision::bf16)
      : c(cfg), model(model_config(cfg), cfg.B, cfg.T), opt((model.init(1), model.params()), optimizer_config(ns)) {
    idx.resize(std::size_t(c.B * c.T));
    tgt.resize(idx.size());
    std::mt19937_64 rng(2);
    for (std::size_t i = 0; i < idx.size(); ++i) {
      idx[i] = std::int64_t(rng() % std::uint64_t(c.V));
      tgt[i] = std::int64_t(rng() % std::uint64_t(c.V));
    }
  }
  float step() { return train_step(model, opt, idx.data(), tgt.data(), c.B, c.T, 1e-3, 1.0).loss; }
  double flops_per_token() const {
    if (c.window <= 0 || c.window >= c.T) return 6.0 * matmul_weights(model) + 6.0 * double(c.layers * c.T * c.d);
    double keys = 0;  // Σ_t min(t+1, W): the keys every query sees, summed
    for (std::int64_t t = 0; t < c.T; ++t) keys += double(std::min(t + 1, c.window));
    return 6.0 * matmul_weights(model) + 12.0 * double(c.layers * c.d) * keys / double(c.T);
  }
};

template <class Tag>
void BM_TrainStep(benchmark::State& state, StepConfig c) {
  const ThreadCount threads(c.threads);
  StepRig<Tag> rig(c);
  for (auto _ : state) benchmark::DoNotOptimize(rig.step());
  const double tokens = double(c.B * c.T) * double(state.iterations());
  state.counters["tokens_per_second"] = benchmark::Counter(tokens, benchmark::Counter::kIsRate);
  state.counters["gflops"] = benchmark::Counter(tokens * rig.flops_per_token() * 1e-9, benchmark::Counter::kIsRate);
}

double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The median over pairs of num[i] / den[i]: a slowdown of the host that lasts a
// pair cancels in its ratio.
double median_ratio(const std::vector<double>& num, const std::vector<double>& den) {
  std::vector<double> r(num.size());
  for (std::size_t i = 0; i < num.size(); ++i) r[i] = num[i] / den[i];
  return median(std::move(r));
}

// The fastest of the samples. The host's interference only ever adds time, so
// over 10-20 samples the fastest is the estimate of a step with none (an episode
// that lasts the whole loop still moves it, as it moves every statistic).
double fastest(const std::vector<double>& v) {
  return v.empty() ? std::numeric_limits<double>::quiet_NaN() : *std::min_element(v.begin(), v.end());
}

// f(), timed (ms).
template <class F>
double timed_ms(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// One training step of rig, timed (ms).
template <class Rig>
double step_ms(Rig& rig) {
  return timed_ms([&] { benchmark::DoNotOptimize(rig.step()); });
}

// Two variants' steps alternated in one loop (A, B, A, B, ...), each step timed
// on its own: both see the same state of a shared host, step by step, so their
// ratio is not at the mercy of drift between two benchmarks seconds apart (on
// the EPYC host, separate BM_TrainStep runs of gpt and ngpt moved by up to 10%
// between rounds of one run, more than the difference being measured).
// Counters: each variant's median step (ms); b_over_a, the ratio of the medians;
// b_over_a_paired, the median over pairs of B's step over the A step just
// before it (a slowdown of the host that lasts a pair cancels in its ratio);
// b_over_a_best, the ratio of the two fastest steps.
template <class TagA, class TagB>
void BM_StepPair(benchmark::State& state, StepConfig c) {
  StepRig<TagA> a(c);
  StepRig<TagB> b(c);
  benchmark::DoNotOptimize(a.step());  // first touch of each arena, outside the timings
  benchmark::DoNotOptimize(b.step());
  std::vector<double> ta, tb;
  for (auto _ : state) {
    ta.push_back(step_ms(a));
    tb.push_back(step_ms(b));
  }
  const double ma = median(ta), mb = median(tb);
  state.counters["a_ms"] = ma;
  state.counters["b_ms"] = mb;
  state.counters["b_over_a"] = mb / ma;
  state.counters["b_over_a_paired"] = median_ratio(tb, ta);
  state.counters["b_over_a_best"] = fastest(tb) / fastest(ta);
}

// One variant's step with AdamW (a) and with Muon (b), alternated in one loop as
// BM_StepPair: b_over_a_paired is what Muon's Newton-Schulz (5 iterations, three
// GEMMs each, on every hidden matrix) adds to a whole step; its products in
// ns (bf16 operands, Muon's default, or fp32).
template <class Tag, Precision ns>
void BM_OptimizerPair(benchmark::State& state, StepConfig c) {
  StepRig<Tag> a(c);
  StepRig<Tag, Muon<float>> b(c, ns);
  benchmark::DoNotOptimize(a.step());
  benchmark::DoNotOptimize(b.step());
  std::vector<double> ta, tb;
  for (auto _ : state) {
    ta.push_back(step_ms(a));
    tb.push_back(step_ms(b));
  }
  state.counters["adamw_ms"] = median(ta);
  state.counters["muon_ms"] = median(tb);
  state.counters["b_over_a_paired"] = median_ratio(tb, ta);
  state.counters["b_over_a_best"] = fastest(tb) / fastest(ta);
}

// One variant's step on one thread and on all threads, alternated in one loop
// (one, all, one, all, ...), each step timed on its own: the thread-scaling bar
// measured the way BM_StepPair measures the overhead bars. The separate
// BM_TrainStep …/reference_1thread run is seconds away from …/reference, and on
// the EPYC host their ratio moved by more than the bar's margin between rounds.
// Counters: one_ms, all_ms (median steps); speedup, the ratio of the medians;
// speedup_paired, the median over pairs of the one-thread step over the
// all-threads step just after it; speedup_best, the ratio of the fastest ones.
template <class Tag>
void BM_ThreadPair(benchmark::State& state, StepConfig c) {
  const int all = omp_get_max_threads();
  StepRig<Tag> rig(c);
  {
    const ThreadCount one(1);
    benchmark::DoNotOptimize(rig.step());
  }
  benchmark::DoNotOptimize(rig.step());  // every thread's scratch touched, outside the timings
  std::vector<double> t1, tn;
  for (auto _ : state) {
    {
      const ThreadCount one(1);
      t1.push_back(step_ms(rig));
    }
    tn.push_back(step_ms(rig));
  }
  const double m1 = median(t1), mn = median(tn);
  state.counters["omp_threads"] = all;  // not "threads": Google Benchmark's JSON has that field
  state.counters["one_ms"] = m1;
  state.counters["all_ms"] = mn;
  state.counters["speedup"] = m1 / mn;
  state.counters["speedup_paired"] = median_ratio(t1, tn);
  state.counters["speedup_best"] = fastest(t1) / fastest(tn);
}

#ifdef NORMLAB_HAVE_OPENBLAS
// The ceiling's GEMM: Y(n,n) = X Wᵀ through cblas_sgemm, threading itself on the
// OpenMP team (BM_OpenBlasSgemm and BM_CeilingPair).
void openblas_sgemm_nt(float* Y, const float* X, const float* W, int n) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, X, n, W, n, 0.0f, Y, n);
  benchmark::ClobberMemory();
}

// The ceiling bar measured the way BM_StepPair measures the overhead bars: one
// variant's step and OpenBLAS's SGEMM 1024³ (BM_OpenBlasSgemm's call) alternated
// in one loop, each timed on its own. The separate BM_TrainStep and
// BM_OpenBlasSgemm runs are seconds to minutes apart, and on the EPYC host one
// variant's step moved by up to 51% between rounds while the ceiling did not
// (docs/perf.md, 2026-12-03 08:50). Each pair runs the SGEMM twice and times
// the second, so its operands are as warm as in BM_OpenBlasSgemm's loop (the
// step before it sweeps the caches); the step needs no such care (its working
// set is larger than the caches either way).
// Counters: step_gflops and sgemm_gflops (medians); of_ceiling, their ratio;
// of_ceiling_paired, the median over pairs of each step's GFLOP/s over the
// SGEMM's just before it; of_ceiling_best, the fastest step's over the fastest SGEMM's.
template <class Tag>
void BM_CeilingPair(benchmark::State& state, StepConfig c) {
  const int n = 1024;
  auto X = random_floats(std::size_t(n) * n, 1), W = random_floats(std::size_t(n) * n, 2);
  std::vector<float> Y(std::size_t(n) * n);
  auto sgemm = [&] { openblas_sgemm_nt(Y.data(), X.data(), W.data(), n); };
  StepRig<Tag> rig(c);
  benchmark::DoNotOptimize(rig.step());  // first touch of the arena, outside the timings
  sgemm();                               // OpenBLAS's buffers and threads, likewise
  const double step_gflop = double(c.B * c.T) * rig.flops_per_token() * 1e-9, sgemm_gflop = 2.0 * n * n * n * 1e-9;
  std::vector<double> tg, ts;  // ms
  for (auto _ : state) {
    sgemm();
    tg.push_back(timed_ms(sgemm));
    ts.push_back(step_ms(rig));
  }
  const double mg = median(tg), ms = median(ts);
  state.counters["step_gflops"] = step_gflop / (ms * 1e-3);
  state.counters["sgemm_gflops"] = sgemm_gflop / (mg * 1e-3);
  state.counters["of_ceiling"] = (step_gflop / ms) / (sgemm_gflop / mg);
  // step GFLOP/s over SGEMM GFLOP/s, pair by pair: (step_gflop / ts[i]) / (sgemm_gflop / tg[i])
  state.counters["of_ceiling_paired"] = median_ratio(tg, ts) * step_gflop / sgemm_gflop;
  state.counters["of_ceiling_best"] = (step_gflop / fastest(ts)) / (sgemm_gflop / fastest(tg));
}
#endif

// --quick (CI): every benchmark runs once, the train steps and pairs at a small
// config (named "smoke" in place of "reference"), so the binary is exercised end
// to end in seconds; figures come from full runs only.
bool g_quick = false;
constexpr StepConfig kSmoke{64, 2, 2, 64, 2, 256};
StepConfig reference_config() { return g_quick ? kSmoke : kReference; }
std::string reference_name() { return g_quick ? "smoke" : "reference"; }

template <class Tag>
void register_steps() {
  const std::string n(Tag::name);
  auto add = [&](const std::string& name, StepConfig c) {
    auto* b = benchmark::RegisterBenchmark(("BM_TrainStep/" + n + "/" + name).c_str(), BM_TrainStep<Tag>, c)
                  ->Unit(benchmark::kMillisecond)
                  ->UseRealTime();
    if (g_quick)
      b->Iterations(1);
    else
      b->MinTime(2.0);
  };
  add(reference_name(), reference_config());
  benchmark::RegisterBenchmark(("BM_ThreadPair/" + n + "/" + reference_name()).c_str(), BM_ThreadPair<Tag>,
                               reference_config())
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->Iterations(g_quick ? 1 : 10);
#ifdef NORMLAB_HAVE_OPENBLAS
  benchmark::RegisterBenchmark(("BM_CeilingPair/" + n + "/" + reference_name()).c_str(), BM_CeilingPair<Tag>,
                               reference_config())
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->Iterations(g_quick ? 1 : 10);
#endif
  if (g_quick) return;
  add("larger", kLarger);
  add("long", kLong);
  add("reference_1thread", kReferenceOneThread);  // the thread-scaling figure
}

// The open block's built-in shapes, each a change of one thing from GPT+
// (gpt_qknorm) or GPT at the reference config, for the ceiling bar.
struct qknorm_relu2 : prenorm_rms_qknorm {
  static constexpr std::string_view name = "qknorm_relu2";
  using mlp_activation = relu2;
};
struct prenorm_gelu_tanh : prenorm_rms {
  static constexpr std::string_view name = "prenorm_gelu_tanh";
  using mlp_activation = gelu_tanh;
};
#define NORMLAB_BENCH_SHAPE(NAME, SCHEME)              \
  struct NAME {                                         \
    static constexpr std::string_view name = #NAME;     \
    template <class T>                                  \
    using model = Transformer<T, SCHEME, residual_add>; \
  };
NORMLAB_BENCH_SHAPE(open_gqa, prenorm_rms_qknorm)       // 4 query heads over 2 kv heads
NORMLAB_BENCH_SHAPE(open_window, prenorm_rms_qknorm)    // a causal window of 64 at T = 256
NORMLAB_BENCH_SHAPE(open_relu2, qknorm_relu2)           // a plain ReLU² MLP of width 4C
NORMLAB_BENCH_SHAPE(open_gelu_tanh, prenorm_gelu_tanh)  // GPT-2's plain GELU (tanh) MLP of width 4C
#undef NORMLAB_BENCH_SHAPE

template <class Tag>
void register_open_shape([[maybe_unused]] StepConfig c) {
#ifdef NORMLAB_HAVE_OPENBLAS
  benchmark::RegisterBenchmark(("BM_CeilingPair/" + std::string(Tag::name) + "/" + reference_name()).c_str(),
                               BM_CeilingPair<Tag>, c)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->Iterations(g_quick ? 1 : 10);
#endif
}
void register_open_shapes() {
  const StepConfig ref = reference_config();
  StepConfig gqa = ref, window = ref;
  gqa.kv_heads = 2;
  window.window = ref.T / 4;
  register_open_shape<open_gqa>(gqa);
  register_open_shape<open_window>(window);
  register_open_shape<open_relu2>(ref);
  register_open_shape<open_gelu_tanh>(ref);
}

// ---------------------------------------------------------------- ceiling and kernels

void gemm_flops(benchmark::State& state, double flops_per_iter) {
  state.counters["gflops"] =
      benchmark::Counter(flops_per_iter * double(state.iterations()) * 1e-9, benchmark::Counter::kIsRate);
}
void bytes_rate(benchmark::State& state, double bytes_per_iter) {
  state.counters["GB/s"] =
      benchmark::Counter(bytes_per_iter * double(state.iterations()) * 1e-9, benchmark::Counter::kIsRate);
}

// Y(N,out) = X(N,in) Wᵀ with N = in = out = size.
void BM_GemmCeiling(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  auto X = random_floats(n * n, 1), W = random_floats(n * n, 2);
  std::vector<float> Y(n * n);
  for (auto _ : state) {
    cpu::linear_forward(Y.data(), X.data(), W.data(), n, n, n);
    benchmark::ClobberMemory();
  }
  gemm_flops(state, 2.0 * double(n) * n * n);
}
BENCHMARK(BM_GemmCeiling)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();

#ifdef NORMLAB_HAVE_OPENBLAS
// The machine's best SGEMM from Debian's libraries (the ceiling anchor): OpenBLAS
// called directly, threading itself on the OpenMP team. Run the measuring command
// with OPENBLAS_CORETYPE unset so OpenBLAS picks its best kernels for the CPU.
void BM_OpenBlasSgemm(benchmark::State& state) {
  const int n = int(state.range(0));
  auto X = random_floats(std::size_t(n) * n, 1), W = random_floats(std::size_t(n) * n, 2);
  std::vector<float> Y(std::size_t(n) * n);
  for (auto _ : state) openblas_sgemm_nt(Y.data(), X.data(), W.data(), n);
  gemm_flops(state, 2.0 * double(n) * n * n);
}
BENCHMARK(BM_OpenBlasSgemm)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

// The cores' arithmetic peak: every thread of the team runs independent fused
// multiply-adds on the widest vectors this build targets (12 accumulators, more than
// FMA latency × throughput, so no chain waits), nothing from memory. The figure no
// GEMM and no step can pass; docs/perf.md compares the ceiling and the step with it.
void BM_FmaPeak(benchmark::State& state) {
#if defined(__AVX512F__)
  using V = __m512;
  constexpr int kLanes = 16;
  auto fma = [](V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); };
  auto splat = [](float x) { return _mm512_set1_ps(x); };
  auto first = [](V a) { return _mm512_cvtss_f32(a); };
#elif defined(__AVX2__) && defined(__FMA__)
  using V = __m256;
  constexpr int kLanes = 8;
  auto fma = [](V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); };
  auto splat = [](float x) { return _mm256_set1_ps(x); };
  auto first = [](V a) { return _mm256_cvtss_f32(a); };
#else
  state.SkipWithError("BM_FmaPeak: this build targets no FMA vector unit (AVX2+FMA or AVX-512)");
  for (auto _ : state) {
  }
  return;
#endif
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
  constexpr int kAcc = 12;
  constexpr std::int64_t kIters = 1 << 20;  // per thread per benchmark iteration
  int threads = 1;  // the team actually formed (OMP_DYNAMIC or a thread limit may shrink it)
  float sink = 0;
  for (auto _ : state) {
#pragma omp parallel reduction(+ : sink)
    {
#pragma omp single nowait
      threads = omp_get_num_threads();
      V acc[kAcc];
      for (int i = 0; i < kAcc; ++i) acc[i] = splat(1.0f + 1e-3f * float(i + omp_get_thread_num()));
      const V b = splat(0.999999f), c = splat(1e-7f);
      for (std::int64_t k = 0; k < kIters; ++k)
        for (int i = 0; i < kAcc; ++i) acc[i] = fma(acc[i], b, c);
      for (int i = 0; i < kAcc; ++i) {
        benchmark::DoNotOptimize(acc[i]);  // every lane stays live, not only the first
        sink += first(acc[i]);
      }
    }
    benchmark::DoNotOptimize(sink);
  }
  gemm_flops(state, 2.0 * kLanes * kAcc * double(kIters) * threads);
#endif
}
BENCHMARK(BM_FmaPeak)->UseRealTime();

// The model's GEMM shapes at the reference config (N = B·T = 2048 tokens):
// args (in, out): qkv/o (256,256), fc (256,2048), proj (1024,256), lm head (256,256).
void BM_Linear(benchmark::State& state) {
  const std::int64_t N = 2048, in = state.range(0), out = state.range(1);
  auto X = random_floats(N * in, 1), W = random_floats(out * in, 2), dY = random_floats(N * out, 3);
  std::vector<float> Y(N * out), dX(N * in), dW(out * in);
  const bool backward = state.range(2) != 0;
  for (auto _ : state) {
    if (backward)
      cpu::linear_backward(dX.data(), dW.data(), dY.data(), X.data(), W.data(), N, in, out);
    else
      cpu::linear_forward(Y.data(), X.data(), W.data(), N, in, out);
    benchmark::ClobberMemory();
  }
  gemm_flops(state, (backward ? 4.0 : 2.0) * double(N) * in * out);
}
BENCHMARK(BM_Linear)
    ->ArgsProduct({{256}, {256, 2048}, {0, 1}})
    ->Args({1024, 256, 0})
    ->Args({1024, 256, 1})
    ->UseRealTime();

void BM_RowNormalize(benchmark::State& state) {
  const std::int64_t N = 2048, C = state.range(0);
  auto x = random_floats(N * C, 1);
  std::vector<float> y(N * C), n(N);
  for (auto _ : state) {
    cpu::l2norm_rows_forward(y.data(), n.data(), x.data(), N, C);
    benchmark::ClobberMemory();
  }
  bytes_rate(state, 2.0 * 4 * N * C);
}
BENCHMARK(BM_RowNormalize)->Arg(256)->Arg(1024)->UseRealTime();

template <class Rule>
void BM_Residual(benchmark::State& state) {
  using Ops = cpu::ResidualKernels<Rule::math, float>;
  const std::int64_t N = 2048, C = 256;
  auto h = random_floats(N * C, 1), f = random_floats(N * C, 2), g = random_floats(N * C, 3);
  std::vector<float> alpha(C, 0.05f), out(N * C), dh(N * C), df(N * C), da(C);
  Arena<float> counting;
  typename Ops::Cache cache;
  cache.bind(counting, N, C);
  Arena<float> arena(counting.used());
  cache.bind(arena, N, C);
  const bool backward = state.range(0) != 0;
  Ops::forward(cache, out.data(), h.data(), f.data(), alpha.data(), N, C);
  for (auto _ : state) {
    if (backward)
      Ops::backward(dh.data(), df.data(), da.data(), g.data(), cache, out.data(), h.data(), f.data(), alpha.data(), N,
                    C);
    else
      Ops::forward(cache, out.data(), h.data(), f.data(), alpha.data(), N, C);
    benchmark::ClobberMemory();
  }
  // forward reads h, f and writes out (+ caches); backward reads dout, out, caches and writes dh, df
  bytes_rate(state, (backward ? 5.0 : 5.0) * 4 * N * C);
}
BENCHMARK(BM_Residual<lerp_retract>)->Arg(0)->Arg(1)->UseRealTime();
BENCHMARK(BM_Residual<lerp_nu>)->Arg(0)->Arg(1)->UseRealTime();
BENCHMARK(BM_Residual<slerp>)->Arg(0)->Arg(1)->UseRealTime();

// RoPE + per-head normalization + s_qk, fused as the sphere scheme runs them
// (arg 0 forward, 1 backward with the s_qk gradient).
void BM_QkNormRope(benchmark::State& state) {
  const std::int64_t B = 8, T = 256, H = 4, D = 64, C = H * D, N = B * T;
  auto q = random_floats(N * C, 1), s = random_floats(C, 2), g = random_floats(N * C, 3);
  std::vector<float> cs(T * D / 2), sn(T * D / 2), qh(N * C), qs(N * C), nrm(N * H), ds(C), dq(N * C);
  cpu::rope_table(cs.data(), sn.data(), T, D);
  const bool backward = state.range(0) != 0;
  cpu::rope_l2norm_scale_forward(q.data(), qh.data(), nrm.data(), qs.data(), s.data(), cs.data(), sn.data(), B, T, H,
                                 D);
  for (auto _ : state) {
    if (backward) {
      std::copy(g.begin(), g.end(), dq.begin());
      cpu::rope_l2norm_scale_backward(dq.data(), ds.data(), qh.data(), nrm.data(), s.data(), cs.data(), sn.data(), B,
                                      T, H, D, 1.0f);
    } else {
      cpu::rope_l2norm_scale_forward(q.data(), qh.data(), nrm.data(), qs.data(), s.data(), cs.data(), sn.data(), B,
                                     T, H, D);
    }
    benchmark::ClobberMemory();
  }
  // forward: read q, write q, qh, qs; backward: copy in (r+w), read qh, read+write dq
  bytes_rate(state, 4.0 * 4 * N * C);
}
BENCHMARK(BM_QkNormRope)->Arg(0)->Arg(1)->UseRealTime();

void BM_ScaledSwiGLU(benchmark::State& state) {
  const std::int64_t N = 2048, F = 1024;
  auto uv = random_floats(N * 2 * F, 1), s = random_floats(2 * F, 2), dact = random_floats(N * F, 3);
  std::vector<float> act(N * F), duv(N * 2 * F), ds(2 * F);
  const bool backward = state.range(0) != 0;
  for (auto _ : state) {
    if (backward)
      cpu::scaled_swiglu_backward(duv.data(), ds.data(), dact.data(), uv.data(), s.data(), N, F, 1.0f);
    else
      cpu::scaled_swiglu_forward(act.data(), uv.data(), s.data(), N, F);
    benchmark::ClobberMemory();
  }
  // Bytes that must move: forward reads uv (2F) and writes act (F) per row;
  // backward reads uv and dact, writes duv (2F + F + 2F).
  bytes_rate(state, backward ? 5.0 * 4 * N * F : 3.0 * 4 * N * F);
}
BENCHMARK(BM_ScaledSwiGLU)->Arg(0)->Arg(1)->UseRealTime();

void BM_CrossEntropy(benchmark::State& state) {
  const std::int64_t N = 2048, V = 256;
  auto logits = random_floats(N * V, 1);
  std::vector<float> d(N * V);
  std::vector<std::int64_t> tgt(N);
  for (std::int64_t i = 0; i < N; ++i) tgt[i] = i % V;
  for (auto _ : state) {
    benchmark::DoNotOptimize(cpu::cross_entropy(d.data(), logits.data(), tgt.data(), N, V));
    benchmark::ClobberMemory();
  }
  bytes_rate(state, 2.0 * 4 * N * V);
}
BENCHMARK(BM_CrossEntropy)->UseRealTime();

void BM_Attention(benchmark::State& state) {
  const std::int64_t B = 8, T = state.range(0), H = 4, D = 64, C = H * D, N = B * T;
  auto q = random_floats(N * C, 1, 0.1f), k = random_floats(N * C, 2, 0.1f), v = random_floats(N * C, 3),
       dy = random_floats(N * C, 4);
  std::vector<float> y(N * C), lse(B * H * T), dq(N * C), dk(N * C), dv(N * C);
  const bool backward = state.range(1) != 0;
  cpu::attention_forward(y.data(), lse.data(), q.data(), k.data(), v.data(), B, T, H, D, 0.125f);
  for (auto _ : state) {
    if (backward)
      cpu::attention_backward(dq.data(), dk.data(), dv.data(), dy.data(), y.data(), lse.data(), q.data(), k.data(),
                              v.data(), B, T, H, D, 0.125f);
    else
      cpu::attention_forward(y.data(), lse.data(), q.data(), k.data(), v.data(), B, T, H, D, 0.125f);
    benchmark::ClobberMemory();
  }
  // Useful FLOPs of causal attention (the lower triangle, T(T+1)/2 scores per
  // (b, h)): 2 products forward, 4 backward (plus the recomputed scores, not counted).
  gemm_flops(state, (backward ? 4.0 : 2.0) * 2.0 * double(B * H) * (T * (T + 1) / 2.0) * D);
}
BENCHMARK(BM_Attention)->ArgsProduct({{256, 1024, 2048}, {0, 1}})->UseRealTime();

void BM_AdamWConstraint(benchmark::State& state) {
  ModelConfig mc;
  mc.vocab_size = 256;
  mc.n_embd = 256;
  mc.n_head = 4;
  mc.n_layer = 4;
  NGPT<float> model(mc, 1, 8);
  model.init(1);
  AdamW<float> opt(model.params(), {});
  auto g = random_floats(model.params().size(), 3, 1e-3f);
  std::copy(g.begin(), g.end(), model.params().grads().begin());
  for (auto _ : state) {
    opt.step(model.params(), 1e-3);
    model.apply_constraint();
    benchmark::ClobberMemory();
  }
  // reads p, g, m, v; writes p, m, v; the constraint reads and writes p again
  bytes_rate(state, 9.0 * 4 * double(model.params().size()));
}
BENCHMARK(BM_AdamWConstraint)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args(argv, argv + argc);
  static char quick_time[] = "--benchmark_min_time=0.001";
  for (auto it = args.begin() + 1; it != args.end(); ++it)
    if (std::string(*it) == "--quick") {
      g_quick = true;
      *it = quick_time;
      break;
    }
  std::apply([](auto... tags) { (register_steps<decltype(tags)>(), ...); }, all_variants{});
  register_open_shapes();
  // ngpt/gpt and angpt/gpt, the overhead bars, step-interleaved (BM_StepPair).
  auto pair = [](const char* name, auto fn) {
    const std::string full = std::string(name) + "/" + reference_name();
    auto* b = benchmark::RegisterBenchmark(full.c_str(), fn, reference_config())->Unit(benchmark::kMillisecond)->UseRealTime();
    b->Iterations(g_quick ? 1 : 20);
  };
  pair("BM_StepPair/gpt/ngpt", BM_StepPair<variants::gpt, variants::ngpt>);
  pair("BM_StepPair/gpt/angpt", BM_StepPair<variants::gpt, variants::angpt>);
  // Muon's whole step over AdamW's (the optimizers' speed bar: <= 1.15).
  pair("BM_OptimizerPair/gpt/adamw/muon", BM_OptimizerPair<variants::gpt, Precision::bf16>);
  pair("BM_OptimizerPair/ngpt/adamw/muon", BM_OptimizerPair<variants::ngpt, Precision::bf16>);
  pair("BM_OptimizerPair/gpt/adamw/muon_fp32ns", BM_OptimizerPair<variants::gpt, Precision::fp32>);
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
