// normlab-gradcheck [--variant NAME | --all] [--samples N]
// Whole-model central finite-difference check in float64 on a small config,
// over a sample of entries of every parameter tensor. One row per variant;
// exit 0 only if every variant is within 1e-6.
#include <CLI/CLI.hpp>

#include "normlab/app/cli.hpp"
#include <cstdio>

#include "normlab/train/gradcheck.hpp"
#include "normlab/train/variants.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Check every variant's hand-written backward against finite differences (float64)."};
  std::string variant;
  bool all = false;
  std::size_t samples = 32;
  std::uint64_t seed = 41;
  auto* v = app.add_option("--variant", variant, "one variant (" + normlab::known_variants() + ")");
  app.add_flag("--all", all, "every variant")->excludes(v);
  app.add_option("--samples", samples, "entries checked per parameter tensor (0 = all)")->capture_default_str()
      ->check(normlab::cli::non_negative_integer());
  app.add_option("--seed", seed, "seed of the probe model")->capture_default_str()
      ->check(normlab::cli::non_negative_integer());
  if (const auto rc = normlab::cli::parse(app, argc, argv)) return *rc;
  if (!all && variant.empty()) {
    std::fprintf(stderr, "normlab-gradcheck: give --variant NAME or --all\n");
    return 2;
  }
  constexpr double tol = 1e-6;
  bool ok = true, any = false;
  std::printf("%-16s %8s %10s %16s\n", "variant", "tensors", "entries", "max_rel_error");
  std::apply(
      [&](auto... tags) {
        (
            [&] {
              using Tag = decltype(tags);
              if (!all && Tag::name != variant) return;
              any = true;
              const auto rows = normlab::check_model_gradients<typename Tag::template model<double>>(seed, samples);
              double worst = 0;
              std::size_t entries = 0;
              std::string worst_name;
              for (const auto& r : rows) {
                entries += r.entries_checked;
                if (!(r.rel_error <= worst)) {
                  worst = r.rel_error;
                  worst_name = r.name;
                }
              }
              const bool pass = worst <= tol;
              ok = ok && pass;
              std::printf("%-16s %8zu %10zu %16.3e%s\n", std::string(Tag::name).c_str(), rows.size(), entries, worst,
                          (pass ? "  (" + worst_name + ")" : "  FAIL (" + worst_name + ")").c_str());
            }(),
            ...);
      },
      normlab::all_variants{});
  if (!any) {
    std::fprintf(stderr, "normlab-gradcheck: unknown variant '%s' (known: %s)\n", variant.c_str(),
                 normlab::known_variants().c_str());
    return 2;
  }
  std::printf("gradcheck: %s (tolerance %.0e)\n", ok ? "PASS" : "FAIL", tol);
  return ok ? 0 : 1;
}
