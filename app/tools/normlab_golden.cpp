// normlab-golden FILE [--dtype f64|f32]
// Replays a reference run and compares every tensor; exit 0 only on PASS,
// 1 on FAIL or bad input, 2 when the file's variant is not implemented.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "normlab/train/golden.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Replay a golden reference run (safetensors) and compare every tensor it holds."};
  std::string file, dtype = "f64";
  app.add_option("FILE", file, "golden safetensors file")->required();
  app.add_option("--dtype", dtype, "compute precision")->check(CLI::IsMember({"f64", "f32"}))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    const auto f = normlab::io::SafetensorsFile::open(file);
    const normlab::GoldenReport rep = normlab::run_golden(f, dtype);
    std::printf("variant %s, dtype %s\n", rep.variant.c_str(), dtype.c_str());
    std::printf("%-52s %12s %10s\n", "tensor", "rel_error", "tolerance");
    for (const auto& r : rep.rows)
      std::printf("%-52s %12.3e %10.1e%s\n", r.name.c_str(), r.rel_error, r.tolerance, r.ok() ? "" : "  FAIL");
    if (rep.pass()) {
      std::printf("golden: PASS\n");
      return 0;
    }
    std::printf("golden: FAIL (%zu tensors over tolerance)\n", rep.failures());
    return 1;
  } catch (const normlab::UnsupportedVariant& e) {
    std::fprintf(stderr, "normlab-golden: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "normlab-golden: %s\n", e.what());
    std::printf("golden: FAIL (error)\n");
    return 1;
  }
}
