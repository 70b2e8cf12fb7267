// The one model's paths for a backend with its own memory (a GPU's), checked on
// the CPU with separate_memory_backend (tests/separate_memory_backend.hpp).
// Whatever those paths forget (an upload after init or load, a download before
// a checkpoint, the constraint applied to the host copy instead of the live one)
// changes the numbers, so each test asks for the CPU model's bits.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "normlab/normlab.hpp"
#include "normlab/train/checkpoint.hpp"
#include "normlab/app/driver.hpp"
#include "normlab/train/golden.hpp"
#include "normlab/train/step.hpp"
#include "normlab/train/variants.hpp"
#include "separate_memory_backend.hpp"

using namespace normlab;
#include "support.hpp"

namespace {

using testing::separate_memory_backend;

using test::make_batch;
using test::small_config;

using test::same_bits;

template <class Model, class Opt>
std::vector<double> train(Model& m, Opt& opt, int from, int steps) {
  const std::int64_t B = 2, T = 8;
  std::vector<std::int64_t> idx(B * T), tgt(B * T);
  std::vector<double> out;
  for (int s = from; s < from + steps; ++s) {
    make_batch(idx, tgt, m.config().vocab_size, s);
    const StepResult r = train_step(m, opt, idx.data(), tgt.data(), B, T, 1e-2, 1.0);
    out.push_back(r.loss);
    out.push_back(r.grad_norm);
  }
  return out;
}

template <class Tag>
void same_training_as_the_cpu_model() {
  using Cpu = typename Tag::template model<double>;
  using Sep = typename Tag::template model<double, separate_memory_backend>;
  Cpu a(small_config(), 2, 8);
  Sep b(small_config(), 2, 8);
  a.init(5);
  b.init(5);
  REQUIRE(same_bits(a.params().values(), b.params().values()));
  const aligned_vector<double> initial = b.params().values();
  AdamW<double> oa(a.params(), AdamWConfig{});
  AdamW<double, separate_memory_backend> ob(b.params(), AdamWConfig{});
  const std::vector<double> la = train(a, oa, 0, 4), lb = train(b, ob, 0, 4);
  INFO(Tag::name);
  CHECK(same_bits(la, lb));  // losses and gradient norms of 4 steps
  // The step ran on the live copy: the host store still holds the initial values ...
  CHECK(same_bits(b.params().values(), initial));
  // ... until it is downloaded, and then it holds the CPU model's parameters.
  b.download_params();
  CHECK(same_bits(a.params().values(), b.params().values()));
}

}  // namespace

TEST_CASE("backend memory: every variant trains on separate memory exactly as the CPU model", "[backend]") {
  std::apply([](auto... tags) { (same_training_as_the_cpu_model<decltype(tags)>(), ...); }, all_variants{});
}

TEST_CASE("backend memory: checkpoints move between a separate-memory model and the CPU model", "[backend]") {
  namespace fs = std::filesystem;
  using Cpu = variants::ngpt::model<double>;
  using Sep = variants::ngpt::model<double, separate_memory_backend>;
  const fs::path dir = fs::temp_directory_path() / "normlab_test_backend_memory";
  fs::create_directories(dir);
  // Reference: 6 uninterrupted steps on the CPU model.
  Cpu ref(small_config(), 2, 8);
  ref.init(9);
  AdamW<double> oref(ref.params(), AdamWConfig{});
  const std::vector<double> whole = train(ref, oref, 0, 6);
  // 3 steps on separate memory, a checkpoint, 3 more steps on the CPU model ...
  Sep a(small_config(), 2, 8);
  a.init(9);
  AdamW<double, separate_memory_backend> oa(a.params(), AdamWConfig{});
  std::vector<double> pieced = train(a, oa, 0, 3);
  save_checkpoint(dir / "sep.safetensors", a, &oa);
  Cpu b(small_config(), 2, 8);
  AdamW<double> ob(b.params(), AdamWConfig{});
  load_checkpoint(io::SafetensorsFile::open(dir / "sep.safetensors"), b, &ob);
  CHECK(ob.steps_taken() == 3);
  const std::vector<double> rest = train(b, ob, 3, 3);
  pieced.insert(pieced.end(), rest.begin(), rest.end());
  CHECK(same_bits(whole, pieced));
  // ... and the other way: the CPU model's checkpoint after 3 steps, resumed on separate memory.
  Cpu c(small_config(), 2, 8);
  c.init(9);
  AdamW<double> oc(c.params(), AdamWConfig{});
  std::vector<double> back = train(c, oc, 0, 3);
  save_checkpoint(dir / "cpu.safetensors", c, &oc);
  Sep d(small_config(), 2, 8);
  AdamW<double, separate_memory_backend> od(d.params(), AdamWConfig{});
  load_checkpoint(io::SafetensorsFile::open(dir / "cpu.safetensors"), d, &od);
  const std::vector<double> rest2 = train(d, od, 3, 3);
  back.insert(back.end(), rest2.begin(), rest2.end());
  CHECK(same_bits(whole, back));
  fs::remove_all(dir);
}

TEST_CASE("backend memory: the golden replay and decoding run on separate memory", "[backend]") {
  const auto f = io::SafetensorsFile::open(std::string(NORMLAB_TEST_DATA_DIR) + "/golden/ngpt_small.safetensors");
  const GoldenReport rep =
      detail::run_golden_model<variants::ngpt::model<double, separate_memory_backend>>(f, "ngpt");
  CHECK(rep.pass());
  CHECK(rep.rows.size() > 10);
  // Decoding: the same logits as the CPU model token by token (same kernels: same bits).
  using Cpu = variants::angpt::model<double>;
  using Sep = variants::angpt::model<double, separate_memory_backend>;
  Cpu a(small_config(), 1, 8);
  Sep b(small_config(), 1, 8);
  a.init(2);
  b.init(2);
  auto ca = a.make_kv_cache();
  auto cb = b.make_kv_cache();
  for (std::int64_t t : {3, 1, 4, 1, 5}) {
    const double* la = a.decode_step(t, ca);
    const double* lb = b.decode_step(t, cb);
    CHECK(std::memcmp(la, lb, sizeof(double) * std::size_t(small_config().vocab_size)) == 0);
  }
}

namespace {
// A backend with its own memory that reports 64 MiB free on its device.
struct small_device_backend : separate_memory_backend {
  static double device_free_bytes() { return 64.0 * 1024 * 1024; }
};
}  // namespace

TEST_CASE("backend memory: a run is planned against the device's free memory, the host keeps the store", "[backend]") {
  using Dev = variants::ngpt::model<float, small_device_backend>;
  TrainOptions o;
  o.d = 64;
  o.layers = 2;
  o.heads = 4;
  o.batch = 4;
  o.seq = 64;
  ModelConfig mc;
  mc.vocab_size = 256;
  mc.n_embd = o.d;
  mc.n_head = o.heads;
  mc.n_layer = o.layers;
  // Small: a few MiB on the device, fits.
  const RunMemory fits = plan_run_memory<Dev>(mc, o);
  CHECK(fits.activations > 0);
  CHECK(fits.activations + fits.parameters < 64.0 * 1024 * 1024);
  // Large activations (batch 64 x seq 1024: about 1.5 GiB on the device) are refused
  // with the flags and the device named, before anything is allocated.
  o.batch = 64;
  o.seq = 1024;
  std::string msg;
  try {
    plan_run_memory<Dev>(mc, o);
  } catch (const Error& e) {
    msg = e.what();
  }
  INFO(msg);
  CHECK(msg.find("memory: --batch 64 x --seq 1024") != std::string::npos);
  CHECK(msg.find("of cpu-separate-memory device memory") != std::string::npos);
  CHECK(msg.find("more than the device's free memory, 64.0 MiB") != std::string::npos);
  // --max-memory bounds each side. At exactly the device's share the device run fits (the
  // host holds only the store and the batches), while the CPU run, which holds everything
  // in one memory, does not; a byte less and the device run is refused too.
  o.batch = 4;
  o.seq = 64;
  const double device = fits.parameters + double(Dev::memory_plan(mc, 4, 64).gradients) + fits.optimizer +
                        fits.activations;
  o.max_memory = device;
  CHECK_NOTHROW(plan_run_memory<Dev>(mc, o));
  using Cpu = variants::ngpt::model<float>;
  CHECK_THROWS_WITH(plan_run_memory<Cpu>(mc, o), Catch::Contains("more than the --max-memory limit"));
  o.max_memory = device - 1;
  CHECK_THROWS_WITH(plan_run_memory<Dev>(mc, o), Catch::Contains("device memory") && Catch::Contains("--max-memory"));
}
