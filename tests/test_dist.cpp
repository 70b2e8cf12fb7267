// Data parallelism without MPI: the bucket logic of GradientSync against a
// recording communicator, ZeRO-1's shard cuts, and a sharded AdamW against the
// whole one. (The MPI jobs themselves: tests/dist/*.sh.)
#include <catch2/catch.hpp>

#include <cmath>
#include <tuple>
#include <vector>

#include "normlab/dist/grad_sync.hpp"
#include "normlab/app/driver.hpp"

using namespace normlab;

namespace {
// Records every collective it is asked for; rank 0 of `n`.
struct RecordingComm : dist::SingleProcess {
  struct Request {
    int id = 0;
  };
  int n = 2;
  // (offset into the buffer, count, root: -1 for an all-reduce)
  std::vector<std::tuple<std::size_t, std::size_t, int>> issued;
  const float* base = nullptr;
  int progressed = 0, waited = 0;
  int size() const { return n; }
  template <class T>
  Request start_allreduce_sum(T* p, std::size_t c) {
    return record(p, c, -1);
  }
  template <class T>
  Request start_reduce_sum(T* p, std::size_t c, int root) {
    return record(p, c, root);
  }
  template <class T>
  Request record(T* p, std::size_t c, int root) {
    issued.emplace_back(std::size_t(reinterpret_cast<const float*>(p) - base), c, root);
    return {int(issued.size())};
  }
  void progress(std::vector<Request>&) { ++progressed; }
  void wait_all(std::vector<Request>& r) {
    ++waited;
    r.clear();
  }
};
}  // namespace

TEST_CASE("dist: GradientSync starts a bucket once enough gradients are final, and covers all once", "[dist]") {
  RecordingComm comm;
  std::vector<float> g(1000);
  comm.base = g.data();
  dist::GradientSync<float, RecordingComm> sync(comm, g.size(), nullptr, /*min_bucket=*/300);
  sync.begin(g.data());
  sync.ready(900);  // 100 final: not yet a bucket
  CHECK(comm.issued.empty());
  sync.ready(600);  // 400 final: [600, 1000)
  REQUIRE(comm.issued.size() == 1);
  CHECK(comm.issued[0] == std::make_tuple(std::size_t(600), std::size_t(400), -1));
  sync.ready(500);
  CHECK(comm.issued.size() == 1);
  sync.ready(0);  // the rest, whatever its size
  REQUIRE(comm.issued.size() == 2);
  CHECK(comm.issued[1] == std::make_tuple(std::size_t(0), std::size_t(600), -1));
  CHECK(comm.progressed == 4);  // every report lets the engine progress
  sync.finish();
  CHECK(comm.waited == 1);
  CHECK(sync.buckets() == 2);
  // Offsets must decrease as backward goes down.
  sync.begin(g.data());
  sync.ready(500);
  CHECK_THROWS_WITH(sync.ready(700), Catch::Contains("decrease"));
}

TEST_CASE("dist: GradientSync under ZeRO-1 reduces each piece of a bucket to its shard's owner", "[dist]") {
  RecordingComm comm;
  std::vector<float> g(1000);
  comm.base = g.data();
  const std::vector<std::size_t> shards = {0, 400, 1000};
  dist::GradientSync<float, RecordingComm> sync(comm, g.size(), &shards, 300);
  sync.begin(g.data());
  sync.ready(600);
  sync.ready(100);
  const double waited = sync.finish();  // the last 100 are reduced at finish
  CHECK(waited >= 0);
  using R = std::tuple<std::size_t, std::size_t, int>;
  const std::vector<R> want = {R{600, 400, 1}, R{100, 300, 0}, R{400, 200, 1}, R{0, 100, 0}};
  CHECK(comm.issued == want);
  const std::vector<std::size_t> wrong = {0, 400, 900};
  CHECK_THROWS_WITH((dist::GradientSync<float, RecordingComm>(comm, g.size(), &wrong)),
                    Catch::Contains("do not cover"));
}

TEST_CASE("dist: ZeRO-1 shards are whole tensors, each cut at the bound nearest an equal split", "[dist]") {
  ParamStore<float> s;
  s.add("a", {100}, ParamRole::gain);
  s.add("b", {10, 10}, ParamRole::matrix);
  s.add("c", {100}, ParamRole::gain);
  s.add("d", {7, 100}, ParamRole::matrix);
  s.finalize();
  RecordingComm comm;  // 2 ranks
  TrainOptions o;
  o.batch = 4;
  detail::DataParallel<RecordingComm> dp(comm, o);
  CHECK(dp.local_batch == 2);
  dp.make_shards(s);
  CHECK(dp.shards == std::vector<std::size_t>{0, 300, 1000});  // 300 is the bound nearest 500
  comm.n = 4;
  detail::DataParallel<RecordingComm> dp4(comm, o);
  dp4.make_shards(s);
  // Wanted 250, 500, 750: bounds 200, 300, 1000 (d's 700 values are one tensor); an empty shard is allowed.
  CHECK(dp4.shards == std::vector<std::size_t>{0, 200, 300, 1000, 1000});
  comm.n = 3;
  CHECK_THROWS_WITH((detail::DataParallel<RecordingComm>(comm, o)), Catch::Contains("does not split over 3 ranks"));
}

TEST_CASE("dist: a sharded AdamW updates its tensors exactly as the whole one, and refuses a cut tensor", "[dist]") {
  ParamStore<double> s;
  s.add("w", {3, 4}, ParamRole::matrix);
  s.add("g", {5}, ParamRole::gain);
  s.add("v", {2, 3}, ParamRole::matrix);
  s.finalize();
  for (std::size_t i = 0; i < s.size(); ++i) s.values()[i] = std::cos(double(i));
  ParamStore<double> a = s, b = s;  // a: whole optimizer; b: two shards
  AdamWConfig cfg;
  cfg.weight_decay = 0.1;
  AdamW<double> whole(a, cfg), lo(b, cfg, 0, 12), hi(b, cfg, 12, s.size());
  for (int t = 1; t <= 3; ++t) {
    for (std::size_t i = 0; i < s.size(); ++i) a.grads()[i] = b.grads()[i] = std::sin(double(i * t + 1));
    whole.step(a, 0.01);
    lo.step(b, 0.01);
    hi.step(b, 0.01);
  }
  for (std::size_t i = 0; i < s.size(); ++i) CHECK(b.values()[i] == a.values()[i]);  // bit for bit
  for (std::size_t i = 0; i < 12; ++i) CHECK(lo.exp_avg()[i] == whole.exp_avg()[i]);
  for (std::size_t i = 12; i < s.size(); ++i) CHECK(hi.exp_avg_sq()[i - 12] == whole.exp_avg_sq()[i]);
  CHECK_THROWS_WITH((AdamW<double>(s, cfg, 0, 10)), Catch::Contains("cuts tensor w"));
  // A checkpoint needs the whole state: a shard is refused (the driver gathers first).
  ModelConfig mc;
  mc.vocab_size = 16;
  mc.n_embd = 8;
  mc.n_head = 2;
  mc.n_layer = 1;
  variants::gpt::model<double> model(mc, 1, 8);
  AdamW<double> shard(model.params(), cfg, 0, model.params().specs()[1].offset);
  CHECK_THROWS_WITH(save_checkpoint(std::filesystem::temp_directory_path() / "normlab_shard.safetensors", model, &shard),
                    Catch::Contains("ZeRO shard"));
}

TEST_CASE("dist: backward reports an offset only once every gradient above it is final, for every variant",
          "[dist]") {
  // The contract GradientSync relies on: after ready(from), grads[from, n) never
  // change in that backward. Each report's snapshot must equal the final gradients.
  ModelConfig mc;
  mc.vocab_size = 32;
  mc.n_embd = 16;
  mc.n_head = 2;
  mc.n_layer = 3;
  std::apply(
      [&](auto... tags) {
        (
            [&] {
              using Model = typename decltype(tags)::template model<double>;
              INFO(std::string(decltype(tags)::name));
              Model model(mc, 2, 8);
              model.init(5);
              std::vector<std::int64_t> idx(16), tgt(16);
              for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = std::int64_t(i * 7 % 32), tgt[i] = std::int64_t(i * 5 % 32);
              model.forward(idx.data(), tgt.data(), 2, 8);
              const auto& g = model.params().grads();
              std::vector<std::pair<std::size_t, std::vector<double>>> snaps;
              model.backward(false, [&](std::size_t from) {
                snaps.emplace_back(from, std::vector<double>(g.begin() + std::ptrdiff_t(from), g.end()));
              });
              REQUIRE(snaps.size() == std::size_t(mc.n_layer) + 2);  // head, each layer, embedding
              CHECK(snaps.back().first == 0);
              for (std::size_t k = 0; k < snaps.size(); ++k) {
                if (k) CHECK(snaps[k].first < snaps[k - 1].first);
                const auto& [from, v] = snaps[k];
                bool same = true;
                for (std::size_t i = 0; i < v.size(); ++i) same = same && v[i] == g[from + i];
                CHECK(same);
              }
              // And the gradients are not all zero above the first report (it is not vacuous).
              double above = 0;
              for (std::size_t i = snaps.front().first; i < g.size(); ++i) above += std::fabs(g[i]);
              CHECK(above > 0);
            }(),
            ...);
      },
      all_variants{});
}
