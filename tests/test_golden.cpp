// Whole-model checks against the authors' reference implementation: every
// tensor of every step, at the tolerances of tests/data/golden/README.md.
#include <catch2/catch.hpp>

#include "normlab/train/golden.hpp"

using namespace normlab;

namespace {
std::string golden(const std::string& name) { return std::string(NORMLAB_TEST_DATA_DIR) + "/golden/" + name; }

double worst(const GoldenReport& r) {
  double w = 0;
  for (const auto& row : r.rows) w = std::max(w, row.rel_error);
  return w;
}
}  // namespace

TEST_CASE("golden: reference files pass in float64 and float32", "[golden]") {
  for (const std::string file : {"gpt_small.safetensors", "ngpt_small.safetensors"}) {
    const auto f = io::SafetensorsFile::open(golden(file));
    for (const std::string dtype : {"f64", "f32"}) {
      const GoldenReport rep = run_golden(f, dtype);
      INFO(file << " " << dtype << ": worst relative error " << worst(rep) << ", failures " << rep.failures());
      // every tensor the file holds except inputs (init/, idx, targets) was compared
      std::size_t expected = 0;
      for (const std::string& n : f.names())
        expected += !(n.starts_with("init/") || n.ends_with("/idx") || n.ends_with("/targets"));
      CHECK(rep.rows.size() == expected);
      CHECK(rep.pass());
    }
  }
}

TEST_CASE("golden: a perturbed reference tensor is reported as a failure", "[golden]") {
  // The checker must be able to fail: rewrite the file with one parameter of
  // the last step nudged by 1e-6 relative and expect exactly that row to fail in f64.
  const auto f = io::SafetensorsFile::open(golden("gpt_small.safetensors"));
  io::SafetensorsWriter w;
  for (const auto& [k, v] : f.metadata()) w.set_metadata(k, v);
  const std::string victim = "step2/param/lm_head.weight";
  for (const std::string& name : f.names()) {
    const auto& info = f.info(name);
    if (info.dtype == io::DType::I64) {
      const auto data = f.read<std::int64_t>(name);
      w.add<std::int64_t>(name, info.shape, std::span<const std::int64_t>(data));
    } else {
      auto data = f.read<double>(name);
      if (name == victim)
        for (double& x : data) x *= 1.0 + 1e-6;
      w.add<double>(name, info.shape, std::span<const double>(data));
    }
  }
  const auto bad = io::SafetensorsFile::from_bytes(w.to_bytes(), "perturbed.safetensors");
  const GoldenReport rep = run_golden(bad, "f64");
  REQUIRE(rep.failures() == 1);
  for (const auto& row : rep.rows)
    if (!row.ok()) CHECK(row.name == victim);
}

TEST_CASE("golden: an unknown variant is reported as not implemented", "[golden]") {
  const auto f = io::SafetensorsFile::open(std::string(NORMLAB_TEST_DATA_DIR) + "/unknown_variant.safetensors");
  REQUIRE_THROWS_AS(run_golden(f, "f64"), UnsupportedVariant);
  REQUIRE_THROWS_WITH(run_golden(f, "f64"), Catch::Contains("hybrid_not_a_variant") && Catch::Contains("not implemented"));
}
