// The one model on the CUDA backend, Transformer<float, Scheme, Residual, cuda_backend>:
//  * its parameter layout is the CPU instantiation's (names, shapes, offsets, roles, axes);
//  * the golden reference files PASS on the GPU in float32, through the same
//    replay as the CPU check (train/golden.hpp), values (logits, loss,
//    gradients) at 5e-5 and parameters at 5e-4: the CPU's float32 replay holds
//    1e-5 with a worst of 6.9e-6 (1.4x margin), and the GPU sums in other
//    orders, so it is held to 5e-5, the bar of every other float32-vs-float64
//    value in this file and the CPU's own (tests/test_precision.cpp);
//  * every variant against the float64 CPU model from the same parameters: loss,
//    every gradient, the clipped gradients, and the parameters after two optimizer
//    steps (AdamW with decay, clipping, the weight constraint), in float32;
//  * the open block's shapes the same way: GPT-2's (LayerNorm with bias on the
//    GPU's layernorm kernels, a plain GELU MLP, biases, learned positions) and
//    a modern one (grouped kv heads, a window shorter than T, ReLU², QK-norm);
//  * every variant in bf16 (--precision bf16) against the float64 CPU model at
//    bars derived from bf16's unit roundoff, built under fp32 and under bf16
//    (the MLP's act then stored in bf16);
//  * KV-cache decoding on the GPU gives the float64 CPU model's logits;
//  * two runs with the same seed give bit-identical losses and parameters.
// Exits 77 (skipped) without a GPU.
#include <cstdio>
#include <cstring>
#include <random>

#include "harness.hpp"
#include "normlab/backend/cuda/cuda_backend.hpp"
#include "normlab/model/transformer.hpp"
#include "normlab/optim/adamw.hpp"
#include "normlab/optim/any_optimizer.hpp"
#include "normlab/train/golden.hpp"
#include "normlab/train/step.hpp"
#include "normlab/train/variants.hpp"

using namespace normlab;
#include "../support.hpp"
using cuda::test::download;
using cuda::test::random_tokens;
using cuda::test::Tally;

namespace {

std::string golden(const std::string& name) { return std::string(NORMLAB_TEST_DATA_DIR) + "/golden/" + name; }

ModelConfig small_config() { return test::small_config(67, 64, 4, 2); }

// The open block's shapes, as a user's tags would name them (examples/gpt2,
// examples/modern), with the config each needs.
struct gpt2_scheme : prenorm_rms {
  static constexpr std::string_view name = "gpt2";
  using input_norm = layer_norm;
  using final_norm = layer_norm;
  using mlp_activation = gelu_tanh;
};
struct modern_scheme : prenorm_rms_qknorm {
  static constexpr std::string_view name = "modern";
  using mlp_activation = relu2;
};
struct gpt2 {
  static constexpr std::string_view name = "gpt2";
  template <class T, class Backend = cpu_backend>
  using model = Transformer<T, gpt2_scheme, residual_add, Backend>;
  static ModelConfig config() {
    ModelConfig c = small_config();
    c.positions = Positions::learned;
    c.n_positions = 32;
    c.bias = true;
    c.rmsnorm_eps = 1e-5;
    return c;
  }
};
struct modern {
  static constexpr std::string_view name = "modern";
  template <class T, class Backend = cpu_backend>
  using model = Transformer<T, modern_scheme, residual_add, Backend>;
  static ModelConfig config() {
    ModelConfig c = small_config();
    c.n_kv_heads = 2;
    c.attn_window = 8;  // < T = 24 of check_against_cpu: the window slides
    c.d_ff = 96;
    return c;
  }
};

template <class Tag>
using GpuModel = typename Tag::template model<float, cuda_backend>;
template <class Tag>
using CpuOracle = typename Tag::template model<double>;

std::vector<double> to_double(const float* p, std::size_t n) { return std::vector<double>(p, p + n); }
// ‖a − b‖₂ / ‖b‖₂, as Tally::rel.
double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

template <class Tag>
void check_layout(Tally& t) {
  CpuOracle<Tag> cpu(small_config(), 1, 8);
  GpuModel<Tag> gpu(small_config(), 1, 8);
  bool same = cpu.params().specs().size() == gpu.params().specs().size() && cpu.params().size() == gpu.params().size();
  for (std::size_t i = 0; same && i < gpu.params().specs().size(); ++i) {
    const ParamSpec &a = cpu.params().specs()[i], &b = gpu.params().specs()[i];
    same = a.name == b.name && a.shape == b.shape && a.offset == b.offset && a.role == b.role && a.axis == b.axis;
  }
  t.truth(std::string(Tag::name) + ": parameter layout equals the CPU instantiation's", same);
}

template <class Tag>
void check_golden(const std::string& file, Tally& t) {
  const auto f = io::SafetensorsFile::open(golden(file));
  const GoldenReport rep = detail::run_golden_model<GpuModel<Tag>>(f, std::string(Tag::name), GoldenTolerance{5e-5, 5e-4});
  double worst = 0;
  for (const GoldenRow& r : rep.rows) {
    worst = std::max(worst, r.rel_error);
    if (!r.ok()) std::printf("     golden %s: %s rel %.3e > %.1e\n", file.c_str(), r.name.c_str(), r.rel_error, r.tolerance);
  }
  std::size_t expected = 0;
  for (const std::string& n : f.names())
    expected += !(n.starts_with("init/") || n.ends_with("/idx") || n.ends_with("/targets"));
  t.truth("golden " + file + " on the GPU in float32: " + std::to_string(rep.rows.size()) + " tensors, worst " +
              std::to_string(worst) + ", " + std::to_string(rep.failures()) + " failures",
          rep.pass() && rep.rows.size() == expected);
}

// One optimizer step of a model on its own backend, written once for both sides.
template <class Model, class Opt>
double clip_and_step(Model& m, Opt& opt, double lr, double clip) {
  using B = typename Model::backend;
  const double norm = clip_grad_norm<B>(m.param_grads(), std::int64_t(m.params().size()), clip);
  opt.step(m.params(), m.param_values(), m.param_grads(), lr);
  m.apply_constraint();
  return norm;
}

// The GPU model against the float64 CPU model from the same (float32-rounded)
// parameters. Tolerances: values 5e-5, the CPU's own float32-vs-float64 bar
// (tests/test_precision.cpp; the GPU sums in other orders, so it cannot be held
// tighter than the CPU's float32 path); parameters after two steps 5e-4, the
// golden check's. Step 0 clips hard (max norm 1e-2, far below a fresh model's
// gradient norm), so the clipped gradients are compared too.
// Both models from the same parameters: the CPU model's initial values rounded
// to float32, on the GPU too.
template <class Cpu, class Gpu>
void start_equal(Cpu& cpu, Gpu& gpu) {
  for (std::size_t i = 0; i < cpu.params().size(); ++i) {
    gpu.params().values()[i] = float(cpu.params().values()[i]);
    cpu.params().values()[i] = double(gpu.params().values()[i]);
  }
  gpu.upload_params();
}

template <class Tag>
void check_against_cpu(Tally& t, int steps, const ModelConfig& mc = small_config()) {
  const std::int64_t B = 2, T = 24;
  CpuOracle<Tag> cpu(mc, B, T);
  cpu.init(7);
  GpuModel<Tag> gpu(mc, B, T);
  start_equal(cpu, gpu);
  const std::vector<float> p0(gpu.params().values().begin(), gpu.params().values().end());
  AdamWConfig oc;
  oc.weight_decay = 0.1;
  AdamW<double> opt_cpu(cpu.params(), oc);
  AdamW<float, cuda_backend> opt_gpu(gpu.params(), oc);
  std::mt19937_64 rng(99);
  const std::string nm = std::string(Tag::name) + "@cuda";
  for (int s = 0; s < steps; ++s) {
    const auto idx = random_tokens(rng, B * T, mc.vocab_size), tgt = random_tokens(rng, B * T, mc.vocab_size);
    const double lc = cpu.forward(idx.data(), tgt.data(), B, T);
    const double lg = gpu.forward(idx.data(), tgt.data(), B, T);
    cpu.backward();
    gpu.backward();
    if (s == 0) {
      t.rel(nm + " loss vs float64 CPU", {lg}, {lc}, 5e-5);
      const std::vector<float> lgts = download(gpu.logits(), std::size_t(B * T * mc.vocab_size));
      t.rel(nm + " logits", to_double(lgts.data(), lgts.size()),
            std::vector<double>(cpu.logits(), cpu.logits() + lgts.size()), 5e-5);
      gpu.download_grads();
      for (const ParamSpec& sp : gpu.params().specs())
        t.rel(nm + " grad " + sp.name, to_double(gpu.params().grad(sp.offset), sp.numel),
              std::vector<double>(cpu.params().grad(sp.offset), cpu.params().grad(sp.offset) + sp.numel), 5e-5);
    }
    const double clip = s == 0 ? 1e-2 : 1.0;
    const double norm_cpu = clip_and_step(cpu, opt_cpu, 1e-3, clip);
    const double norm_gpu = clip_and_step(gpu, opt_gpu, 1e-3, clip);
    if (s == 0) {
      t.rel(nm + " gradient norm before clipping", {norm_gpu}, {norm_cpu}, 5e-5);
      t.truth(nm + " step 0 clips (norm " + std::to_string(norm_cpu) + " > 1e-2)", norm_cpu > clip);
      gpu.download_grads();
      t.rel(nm + " gradients after clipping (in place)", to_double(gpu.params().grad(), gpu.params().size()),
            std::vector<double>(cpu.params().grads().begin(), cpu.params().grads().end()), 5e-5);
    }
  }
  gpu.download_params();
  for (const ParamSpec& sp : gpu.params().specs())
    t.rel(nm + " param after " + std::to_string(steps) + " steps " + sp.name,
          to_double(gpu.params().value(sp.offset), sp.numel),
          std::vector<double>(cpu.params().value(sp.offset), cpu.params().value(sp.offset) + sp.numel), 5e-4);
  bool moved = false;
  for (std::size_t i = 0; i < p0.size() && !moved; ++i) moved = gpu.params().values()[i] != p0[i];
  t.truth(nm + ": the optimizer moved the parameters", moved);
}

// Precision::bf16 on the GPU (cuBLASLt's CUBLAS_COMPUTE_32F_FAST_16BF: every
// product's operands rounded to bf16, float32 accumulation) against the float64
// CPU model: the CPU bf16 engine's bars against the exact oracle
// (tests/test_bf16_model.cpp), derived from bf16's unit roundoff u = 2^-8: a gradient
// passes through P = 4·layers + 2 rounded products in series, each rounding two
// operands, so 2·P·u normwise; the loss and logits the same. Then fp32 again,
// and the float32 check above must still hold (the plan cache keys on it).
template <class Tag>
void check_bf16_against_cpu(Tally& t) {
  const ModelConfig mc = small_config();
  const std::int64_t B = 2, T = 24;
  CpuOracle<Tag> cpu(mc, B, T);
  cpu.init(7);
  GpuModel<Tag> gpu(mc, B, T);
  start_equal(cpu, gpu);
  std::mt19937_64 rng(99);
  const auto idx = random_tokens(rng, B * T, mc.vocab_size), tgt = random_tokens(rng, B * T, mc.vocab_size);
  const double lc = cpu.forward(idx.data(), tgt.data(), B, T);
  cpu.backward();
  cuda_backend::set_precision(Precision::bf16);
  const double lg = gpu.forward(idx.data(), tgt.data(), B, T);
  gpu.backward();
  cuda_backend::set_precision(Precision::fp32);
  const double tol = 2.0 * (4.0 * double(mc.n_layer) + 2.0) * 0x1p-8;
  const std::string nm = std::string(Tag::name) + "@cuda bf16";
  t.rel(nm + " loss vs float64 CPU", {lg}, {lc}, tol);
  gpu.download_grads();
  for (const ParamSpec& sp : gpu.params().specs())
    t.rel(nm + " grad " + sp.name, to_double(gpu.params().grad(sp.offset), sp.numel),
          std::vector<double>(cpu.params().grad(sp.offset), cpu.params().grad(sp.offset) + sp.numel), tol);
  // Not float32 in disguise: the rounding must show somewhere in the gradients.
  const double lg32 = gpu.forward(idx.data(), tgt.data(), B, T);
  t.truth(nm + ": bf16 products change the loss's bits", lg32 != lg);
  // Built under bf16 products, the model keeps the MLP's act in bf16 (its
  // products read it as a bf16 operand, the other operand rounded for the call):
  // the plan is smaller by half of each layer's act, and loss and gradients meet
  // the same bars against the float64 model.
  cuda_backend::set_precision(Precision::bf16);
  {
    // The arena takes whole 64-byte lines (16 floats); a bf16 buffer of n values takes ⌈n/2⌉ floats.
    auto lines = [](std::int64_t floats) { return (floats + 15) / 16 * 16; };
    const std::int64_t n_act = B * T * mc.ff_dim();
    const std::int64_t half_act =
        mc.n_layer * (lines(n_act) - lines((n_act + 1) / 2)) * std::int64_t(sizeof(float));
    const auto plan16 = GpuModel<Tag>::memory_plan(mc, B, T);
    cuda_backend::set_precision(Precision::fp32);
    const auto plan32 = GpuModel<Tag>::memory_plan(mc, B, T);
    cuda_backend::set_precision(Precision::bf16);
    t.truth(nm + ": a model built under bf16 plans half of each layer's act fewer bytes",
            std::int64_t(plan32.activations) - std::int64_t(plan16.activations) == half_act);
    GpuModel<Tag> gpu16(mc, B, T);
    t.truth(nm + ": a model built under bf16 keeps act in bf16", gpu16.stores_act_bf16());
    gpu16.params().values() = gpu.params().values();
    gpu16.upload_params();
    const double l16 = gpu16.forward(idx.data(), tgt.data(), B, T);
    gpu16.backward();
    t.rel(nm + " (act stored in bf16) loss vs float64 CPU", {l16}, {lc}, tol);
    gpu16.download_grads();
    for (const ParamSpec& sp : gpu16.params().specs())
      t.rel(nm + " (act stored in bf16) grad " + sp.name, to_double(gpu16.params().grad(sp.offset), sp.numel),
            std::vector<double>(cpu.params().grad(sp.offset), cpu.params().grad(sp.offset) + sp.numel), tol);
  }
  cuda_backend::set_precision(Precision::fp32);
}

// Lion and Muon on the GPU (their kernels, Muon's Newton-Schulz on cuBLASLt)
// against the same optimizer on the float64 CPU model, three steps from the
// same parameters. Muon: parameters at 5e-4 (the iteration is smooth in its
// input). Lion: 1e-2, because sign(c) of an interpolation c within float32
// noise of 0 can differ between the two (each such entry moves by 2·lr).
template <class Tag>
void check_optimizer_against_cpu(Tally& t, const std::string& name, double tol) {
  const ModelConfig mc = small_config();
  const std::int64_t B = 2, T = 24;
  CpuOracle<Tag> cpu(mc, B, T);
  cpu.init(7);
  GpuModel<Tag> gpu(mc, B, T);
  start_equal(cpu, gpu);
  OptimizerOptions oo;
  oo.name = name;
  oo.weight_decay = 0.1;
  oo.peak_lr = 1e-3;
  // Muon's iteration in float32 on both sides: the arithmetic compared here. Its
  // bf16 products amplify the operands' roundings through five steps (the
  // iteration's band under bf16 is checked on the CPU engine, tests/test_bf16.cpp).
  oo.ns_precision = Precision::fp32;
  auto opt_cpu = make_optimizer_named<double, cpu_backend>(builtin_optimizers{}, cpu.params(), oo, 0,
                                                           cpu.params().size());
  auto opt_gpu = make_optimizer_named<float, cuda_backend>(builtin_optimizers{}, gpu.params(), oo, 0,
                                                           gpu.params().size());
  std::mt19937_64 rng(17);
  for (int s = 0; s < 3; ++s) {
    const auto idx = random_tokens(rng, B * T, mc.vocab_size), tgt = random_tokens(rng, B * T, mc.vocab_size);
    cpu.forward(idx.data(), tgt.data(), B, T);
    gpu.forward(idx.data(), tgt.data(), B, T);
    cpu.backward();
    gpu.backward();
    clip_and_step(cpu, opt_cpu, 1e-3, 1.0);
    clip_and_step(gpu, opt_gpu, 1e-3, 1.0);
  }
  gpu.download_params();
  const std::string nm = std::string(Tag::name) + "@cuda " + name;
  for (const ParamSpec& sp : gpu.params().specs())
    t.rel(nm + " param after 3 steps " + sp.name, to_double(gpu.params().value(sp.offset), sp.numel),
          std::vector<double>(cpu.params().value(sp.offset), cpu.params().value(sp.offset) + sp.numel), tol);
}

// Decoding token by token on the GPU against the float64 CPU model decoding the
// same prefix from the same parameters (5e-5, as the forward).
template <class Tag>
void check_decode(Tally& t, const ModelConfig& mc = small_config()) {
  CpuOracle<Tag> cpu(mc, 1, 16);
  cpu.init(11);
  GpuModel<Tag> gpu(mc, 1, 16);
  start_equal(cpu, gpu);
  auto kc = cpu.make_kv_cache();
  auto kg = gpu.make_kv_cache();
  double worst = 0;
  std::mt19937_64 rng(3);
  bool ok = true;
  for (int pos = 0; pos < 12; ++pos) {
    const std::int64_t tok = std::int64_t(rng() % std::uint64_t(mc.vocab_size));
    const double* lc = cpu.decode_step(tok, kc);
    const std::vector<float> lg = download(gpu.decode_step(tok, kg), std::size_t(mc.vocab_size));
    const double e = rel_err(to_double(lg.data(), lg.size()), std::vector<double>(lc, lc + lg.size()));
    worst = std::max(worst, e);
    ok = ok && e <= 5e-5;
  }
  t.truth(std::string(Tag::name) + "@cuda: 12 decoded tokens match the float64 CPU decoder (worst rel " +
              std::to_string(worst) + " <= 5e-5)",
          ok);
}

template <class Tag>
void check_deterministic(Tally& t) {
  ModelConfig mc = small_config();
  mc.vocab_size = 300;
  const std::int64_t B = 4, T = 64;
  auto run = [&](std::vector<double>& losses, std::vector<float>& params) {
    GpuModel<Tag> m(mc, B, T);
    m.init(1234);
    AdamW<float, cuda_backend> opt(m.params(), AdamWConfig{});
    std::mt19937_64 rng(5);
    for (int s = 0; s < 3; ++s) {
      const auto idx = random_tokens(rng, B * T, mc.vocab_size), tgt = random_tokens(rng, B * T, mc.vocab_size);
      losses.push_back(train_step(m, opt, idx.data(), tgt.data(), B, T, 3e-3, 1.0).loss);
    }
    m.download_params();
    params.assign(m.params().values().begin(), m.params().values().end());
  };
  std::vector<double> l1, l2;
  std::vector<float> p1, p2;
  run(l1, p1);
  run(l2, p2);
  const std::string nm = std::string(Tag::name) + "@cuda";
  t.truth(nm + ": two runs with the same seed give bit-identical losses (3 steps)",
          l1.size() == 3 && std::memcmp(l1.data(), l2.data(), l1.size() * sizeof(double)) == 0);
  t.truth(nm + ": ... and bit-identical parameters",
          p1.size() == p2.size() && std::memcmp(p1.data(), p2.data(), p1.size() * sizeof(float)) == 0);
  bool finite = true;
  for (double x : l1) finite = finite && std::isfinite(x);
  t.truth(nm + ": losses finite", finite);
}

}  // namespace

int main() {
  return cuda::test::run_test("test_cuda_model", [] {
    cuda::DeviceContext be;
    cuda::use(be);
    Tally t;
    t.test = "test_cuda_model";
    std::apply([&](auto... tags) { (check_layout<decltype(tags)>(t), ...); }, all_variants{});
    check_golden<variants::gpt>("gpt_small.safetensors", t);
    check_golden<variants::ngpt>("ngpt_small.safetensors", t);
    std::apply([&](auto... tags) { (check_against_cpu<decltype(tags)>(t, 2), ...); }, all_variants{});
    check_against_cpu<gpt2>(t, 2, gpt2::config());
    std::apply([&](auto... tags) { (check_bf16_against_cpu<decltype(tags)>(t), ...); }, all_variants{});
    check_against_cpu<modern>(t, 2, modern::config());
    check_optimizer_against_cpu<variants::gpt>(t, "muon", 5e-4);
    check_optimizer_against_cpu<variants::ngpt>(t, "muon", 5e-4);
    check_optimizer_against_cpu<variants::gpt>(t, "lion", 1e-2);
    check_optimizer_against_cpu<variants::ngpt>(t, "lion", 1e-2);
    check_decode<variants::gpt>(t);
    check_decode<variants::ngpt>(t);
    check_decode<variants::angpt>(t);
    check_decode<gpt2>(t, gpt2::config());
    check_decode<modern>(t, modern::config());  // 12 tokens past a window of 8
    check_deterministic<variants::gpt>(t);
    check_deterministic<variants::ngpt>(t);
    check_deterministic<variants::ngpt_slerp>(t);
    check_deterministic<variants::angpt>(t);
    return t.finish("test_cuda_model");
  });
}
