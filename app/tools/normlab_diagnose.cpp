// normlab-diagnose CKPT [--json] [--post-hoc-normalize] [--data brown|synthetic|FILE|DIR
//                        [--data-dir DIR] [--vocab V] [--batches N] [--batch B]] [--plots DIR]
// normlab-diagnose --compare A B ... [same options]
//
// Spectral and norm diagnostics of a checkpoint (docs/diagnostics.md): per
// layer the singular values, condition number and effective rank of every
// weight matrix; embedding row norms and covariance spectrum; learned scales;
// with --data, hidden-state norms and attention entropy on validation batches.
// --compare puts the headline figures of several checkpoints side by side as a
// markdown table. Exit codes: 0 success, 2 bad input (flags, files, data).
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "normlab/core/process.hpp"
#include "normlab/app/diag_report.hpp"
#include "normlab/app/driver.hpp"

namespace fs = std::filesystem;
using namespace normlab;

namespace {

// A string as a gnuplot single-quoted literal (a quote inside is doubled).
std::string gnuplot_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// Writes DIR/stem.dat (the spectra, one gnuplot data block per matrix) and
// DIR/stem.gp, then renders DIR/stem.png and DIR/stem.svg with gnuplot: one
// line per matrix type per layer (colour = type, dash = layer), log-scale y.
// yrange: [lo, hi] of the log-scale y axis, shared by every plot of one --compare
// so they can be compared by eye (0, 0: gnuplot's autoscale).
void write_plots(const diag::Report& r, const fs::path& dir, const std::string& stem, double ylo = 0,
                 double yhi = 0) {
  fs::create_directories(dir);
  const fs::path dat = dir / (stem + ".dat");
  const fs::path gp = dir / (stem + ".gp");
  {
    std::ofstream out(dat, std::ios::trunc);
    if (!out) throw Error("--plots: cannot write " + dat.string());
    for (const auto& m : r.matrices) {
      out << "# layer " << m.layer << " " << m.type << " " << m.rows << "x" << m.cols << "\n";
      for (std::size_t i = 0; i < m.singular_values.values.size(); ++i)
        out << i + 1 << " " << diag::detail::num(m.singular_values.values[i], 17) << "\n";
      out << "\n\n";
    }
    if (!out) throw Error("--plots: write error on " + dat.string());
  }
  static const char* colours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"};
  const auto& types = diag::matrix_types();
  {
    std::ofstream out(gp, std::ios::trunc);
    if (!out) throw Error("--plots: cannot write " + gp.string());
    std::string plot;
    for (std::size_t b = 0; b < r.matrices.size(); ++b) {
      const auto& m = r.matrices[b];
      const std::size_t t = static_cast<std::size_t>(
          std::find(types.begin(), types.end(), m.type) - types.begin());
      plot += std::string(plot.empty() ? "plot " : ", \\\n     ") + gnuplot_quote(stem + ".dat") + " index " + std::to_string(b) +
              " with lines lw 1.5 lc rgb '" + colours[t % 7] + "' dt " + std::to_string(m.layer % 5 + 1) +
              " title 'L" + std::to_string(m.layer) + " " + m.type + "'";
    }
    std::string title = r.variant + (r.post_hoc_normalized ? " (post-hoc normalized)" : "") + ": singular values, " +
                        r.source;
    std::replace(title.begin(), title.end(), '\'', '"');  // the script quotes it with '...'

    for (const char* term : {"pngcairo size 1400,900 noenhanced", "svg size 1400,900 noenhanced dynamic"}) {
      const bool png = std::string(term).starts_with("png");
      out << "set terminal " << term << "\n"
          << "set output " << gnuplot_quote(stem + (png ? ".png" : ".svg")) << "\n"
          << (ylo > 0 && yhi > ylo ? "set yrange [" + diag::detail::num(ylo, 6) + ":" + diag::detail::num(yhi, 6) + "]\n"
                                   : std::string())
          << "set logscale y\nset format y '%.0e'\nset grid\nset xlabel 'index i (descending)'\nset ylabel 'sigma_i'\n"
          << "set title '" << title << "'\nset key outside right top\n"
          << plot << "\nunset output\n";
    }
    if (!out) throw Error("--plots: write error on " + gp.string());
  }
  const fs::path gnuplot = normlab::find_on_path("gnuplot");
  if (gnuplot.empty()) {
    std::fprintf(stderr, "normlab-diagnose: gnuplot is not installed (not on PATH); plots skipped, spectra written to %s\n",
                 dat.c_str());
    return;
  }
  const fs::path log = dir / (stem + ".gnuplot.log");
  std::error_code ec;
  fs::remove(log, ec);
  // No shell: the directory and stem are arguments, whatever characters they hold.
  if (normlab::run_program(gnuplot, {stem + ".gp"}, dir, log) != 0) {
    std::fprintf(stderr, "normlab-diagnose: gnuplot failed (see %s); spectra are in %s\n", log.c_str(), dat.c_str());
    return;
  }
  fs::remove(log, ec);  // empty on success
  std::fprintf(stderr, "normlab-diagnose: wrote %s and %s\n", (dir / (stem + ".png")).c_str(),
               (dir / (stem + ".svg")).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Spectral and norm diagnostics of a normlab checkpoint (docs/diagnostics.md)."};
  std::string ckpt;
  std::vector<std::string> compare;
  bool json = false, post_hoc = false;
  std::string data_arg, data_dir = normlab::data::default_data_dir(), plots;
  std::int64_t vocab = 0, batches = 8, batch = 4;
  auto* ckpt_opt = app.add_option("CKPT", ckpt, "checkpoint (ckpt.safetensors of a train-<variant> run)");
  app.add_option("--compare", compare, "headline figures of several checkpoints side by side (markdown)")
      ->excludes(ckpt_opt);
  app.add_flag("--json", json, "print one JSON document instead of the table");
  app.add_flag("--post-hoc-normalize", post_hoc,
               "normalize every matrix along the embedding dimension first (as the nGPT paper's comparison)");
  auto* data_opt = app.add_option("--data", data_arg,
                                  "brown | synthetic | a UTF-8 text file | a directory with train.bin/val.bin: adds "
                                  "hidden-state norms and attention entropy on validation batches");
  app.add_option("--data-dir", data_dir, "where the Brown corpus is cached ($NORMLAB_DATA_DIR, else $XDG_CACHE_HOME/normlab, else ~/.cache/normlab)")->capture_default_str()->needs(data_opt);
  app.add_option("--vocab", vocab, "vocabulary of train.bin/val.bin shards (default: the checkpoint's)")
      ->needs(data_opt)->check(normlab::cli::integer(1, 65536));
  app.add_option("--batches", batches, "validation batches for --data")->capture_default_str()
      ->check(normlab::cli::integer(1, 100000))->needs(data_opt);
  app.add_option("--batch", batch, "sequences per validation batch (each run.seq tokens long)")
      ->capture_default_str()->check(normlab::cli::integer(1, 4096))->needs(data_opt);
  app.add_option("--plots", plots, "write singular-value spectra plots (PNG and SVG via gnuplot) into this directory");
  if (const auto rc = normlab::cli::parse(app, argc, argv)) return *rc;
  if (ckpt.empty() && compare.empty()) {
    std::fprintf(stderr, "normlab-diagnose: give a checkpoint, or --compare A B ... (see --help)\n");
    return 2;
  }
  const std::vector<std::string> files = compare.empty() ? std::vector<std::string>{ckpt} : compare;
  try {
    std::optional<data::TokenData> td;
    if (!data_arg.empty()) {
      TrainOptions o;
      o.data = data_arg;
      o.data_dir = data_dir;
      o.vocab = vocab;
      if (o.vocab == 0 && fs::is_directory(data_arg)) {
        // Token shards carry no vocabulary: take the checkpoint's.
        const auto f = io::SafetensorsFile::open(files.front());
        o.vocab = diag::detail::meta_int(f, "vocab_size", 1, 65536);
      }
      td = normlab::detail::load_training_data(o);
    }
    diag::DiagnoseOptions opt;
    opt.post_hoc_normalize = post_hoc;
    opt.batches = td ? batches : 0;
    opt.batch_size = batch;
    std::vector<diag::Report> reports;
    for (const auto& f : files) reports.push_back(diag::diagnose_checkpoint(f, opt, td ? &*td : nullptr));

    if (!plots.empty()) {
      // One y range for every checkpoint's plot (positive singular values only: log scale).
      double ylo = 0, yhi = 0;
      for (const auto& r : reports)
        for (const auto& m : r.matrices)
          for (double v : m.singular_values.values)
            if (v > 0 && std::isfinite(v)) {
              ylo = ylo > 0 ? std::min(ylo, v) : v;
              yhi = std::max(yhi, v);
            }
      if (ylo > 0) {
        ylo *= 0.8;
        yhi *= 1.25;
      }
      for (std::size_t i = 0; i < reports.size(); ++i) {
        const std::string stem = reports.size() == 1
                                     ? std::string("singular_values")
                                     : "singular_values_" + std::to_string(i + 1) + "_" + reports[i].variant;
        write_plots(reports[i], plots, stem, ylo, yhi);
      }
    }
    if (json) {
      if (compare.empty()) {
        std::printf("%s\n", diag::to_json(reports.front()).dump(2).c_str());
      } else {
        nlohmann::json all = nlohmann::json::array();
        for (const auto& r : reports) all.push_back(diag::to_json(r));
        std::printf("%s\n", nlohmann::json{{"checkpoints", all}}.dump(2).c_str());
      }
    } else if (compare.empty()) {
      std::printf("%s", diag::format_table(reports.front()).c_str());
    } else {
      std::printf("%s", diag::compare_markdown(reports).c_str());
    }
    return 0;
  } catch (const normlab::Error& e) {
    std::fprintf(stderr, "normlab-diagnose: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "normlab-diagnose: unexpected error: %s\n", e.what());
    return 1;
  }
}
