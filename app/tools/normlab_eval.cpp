// normlab-eval CKPT --data D --seq 256,512,1024 [--batch B] [--batches N] [--bucket P] [--out DIR]
// normlab-eval CKPT --data D --multiples 1,2,4,8   (multiples of the checkpoint's training context)
// Validation loss of a trained checkpoint at several context lengths, overall and
// per position bucket, as a table (and, with --out, eval.md, eval.json and a plot).
// The model is built for the longest length; RoPE extends to it. Where a variant's
// function depends on the context it was built for (angpt_attnfactor's c_att), the
// trained factors are held fixed and the output says so.
// Exit codes: 0 success, 2 bad input (flags, data, checkpoint).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "normlab/core/process.hpp"
#include "normlab/train/checkpoint.hpp"
#include "normlab/app/cli.hpp"
#include "normlab/app/driver.hpp"
#include "normlab/train/eval.hpp"
#include "normlab/train/variants.hpp"

namespace fs = std::filesystem;
using namespace normlab;

namespace {

std::vector<std::int64_t> parse_lengths(const std::string& s, const std::string& flag, std::int64_t lo,
                                        std::int64_t hi) {
  std::vector<std::int64_t> out;
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    std::int64_t v = 0;
    if (!cli::detail::parse_int(tok, v) || v < lo || v > hi)
      throw Error(flag + ": each value must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi) +
                  ", got '" + tok.substr(0, 20) + "'");
    out.push_back(v);
  }
  if (out.empty()) throw Error(flag + ": give at least one value, e.g. " + flag + " 1,2,4");
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string fmt4(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4f", x);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Validation loss of a checkpoint at several context lengths, per position bucket."};
  std::string ckpt, seq_s, multiples_s, out_dir;
  TrainOptions o;
  std::int64_t batch = 0, batches = 8, bucket = 0;
  app.add_option("CKPT", ckpt, "checkpoint (ckpt.safetensors of a train-<variant> run)")->required();
  app.add_option("--data", o.data, "brown | synthetic | a UTF-8 text file | a directory with train.bin/val.bin")
      ->required();
  app.add_option("--data-dir", o.data_dir, "where the Brown corpus is cached")->capture_default_str();
  app.add_option("--vocab", o.vocab, "vocabulary of token shards (default: the checkpoint's)")
      ->check(cli::integer(1, 65536));
  auto* seq_opt = app.add_option("--seq", seq_s, "comma-separated context lengths, e.g. 256,512,1024");
  app.add_option("--multiples", multiples_s,
                 "instead of --seq: multiples of the checkpoint's training context, e.g. 1,2,4,8")
      ->excludes(seq_opt);
  app.add_option("--batch", batch, "windows per batch (default: the training run's --batch, else 4)")
      ->check(cli::integer(1, 4096));
  app.add_option("--batches", batches, "validation batches per length (the trainer's --eval-batches gives the "
                                       "training run's own validation loss at its length)")
      ->capture_default_str()->check(cli::integer(1, 100000));
  app.add_option("--bucket", bucket, "positions per bucket (default: the training length)")
      ->check(cli::integer(1, 1 << 16));
  app.add_option("--out", out_dir, "also write eval.md, eval.json and eval.png/.svg (gnuplot) here");
  if (const auto rc = cli::parse(app, argc, argv)) return *rc;
  try {
    if (seq_s.empty() && multiples_s.empty())
      throw Error("give the context lengths: --seq 256,512,1024, or --multiples 1,2,4,8 of the training context");
    const auto f = io::SafetensorsFile::open(ckpt);
    const std::string variant = f.metadata().count("variant") ? f.metadata_value("variant") : "<none>";
    const ModelConfig mc = checkpoint_config(f);
    mc.validate();
    const std::int64_t trained_T = checkpoint_max_seq(f);
    std::vector<std::int64_t> lengths;
    if (!multiples_s.empty()) {
      if (trained_T <= 0) throw Error(ckpt + ": records no training context, so --multiples has no unit; use --seq");
      for (const auto m : parse_lengths(multiples_s, "--multiples", 1, 64)) lengths.push_back(m * trained_T);
      if (lengths.back() > (1 << 16))
        throw Error("--multiples: " + std::to_string(lengths.back()) + " tokens is over the longest context, 65536");
    } else {
      lengths = parse_lengths(seq_s, "--seq", 2, 1 << 16);
    }
    if (batch == 0) batch = f.metadata().count("run.batch") ? checkpoint_int(f, "run.batch") : 4;
    if (bucket == 0) bucket = trained_T > 0 ? trained_T : lengths.front();
    if (o.vocab == 0) o.vocab = mc.vocab_size;
    const data::TokenData td = detail::load_training_data(o);
    if (td.vocab_size != mc.vocab_size)
      throw Error("--data " + o.data + " has a vocabulary of " + std::to_string(td.vocab_size) + ", the checkpoint " +
                  std::to_string(mc.vocab_size));
    const std::int64_t maxT = lengths.back();

    std::vector<LengthEval> results;
    std::string held;
    bool found = dispatch_variant(variant, [&](auto tag) {
      using Model = typename decltype(tag)::template model<float>;
      TrainOptions plan = o;
      plan.batch = batch;
      plan.seq = maxT;
      plan.d = mc.n_embd;
      plan.layers = mc.n_layer;
      plan_run_memory<Model>(mc, plan);  // refuses a size beyond the machine, with the figures
      Model model(mc, batch, maxT);
      if constexpr (Model::scheme::output_factors::approximate) {
        // The factors the model was trained with, not the ones derived for maxT.
        const double a = checkpoint_double(f, "attn_output_factor"), m = checkpoint_double(f, "mlp_output_factor");
        if (a != model.attn_output_factor())
          held = "held fixed: attn_output_factor " + exact_string(a) + " (derived for the training context " +
                 std::to_string(trained_T) + "; at " + std::to_string(maxT) + " it would be " +
                 exact_string(model.attn_output_factor()) + "), mlp_output_factor " + exact_string(m);
        else
          held = "held fixed: attn_output_factor " + exact_string(a) + " and mlp_output_factor " + exact_string(m) +
                 " (neither depends on the context for this variant)";
        model.hold_output_factors(a, m);
      }
      load_checkpoint(f, model, static_cast<AdamW<float>*>(nullptr));
      results = evaluate_lengths(model, td.val, lengths, batch, batches, bucket);
    });
    if (!found) throw Error(ckpt + ": unknown variant '" + variant + "' (known: " + known_variants() + ")");

    // The table: one row per position bucket, one column per length.
    std::ostringstream md;
    md << "# normlab-eval: " << ckpt << "\n\n"
       << "- Variant: " << variant << "; trained at context " << trained_T << "; data: " << td.description << "\n"
       << "- " << batches << " validation batches of " << batch << " windows per length (data::eval_batch)\n";
    if (!held.empty()) md << "- " << held << "\n";
    md << "- RoPE tables extended to " << maxT << " positions (base " << exact_string(mc.rope_base) << ")\n\n";
    md << "| positions |";
    for (const auto& r : results) md << " T = " << r.length << " |";
    md << "\n|---|";
    for (std::size_t i = 0; i < results.size(); ++i) md << "---:|";
    md << "\n";
    for (std::int64_t b0 = 0; b0 < maxT; b0 += bucket) {
      md << "| " << b0 << "–" << std::min(maxT, b0 + bucket) - 1 << " |";
      for (const auto& r : results) {
        const auto it = std::find(r.bucket_start.begin(), r.bucket_start.end(), b0);
        md << " " << (it == r.bucket_start.end() ? "" : fmt4(r.bucket_loss[it - r.bucket_start.begin()])) << " |";
      }
      md << "\n";
    }
    md << "| all |";
    for (const auto& r : results) md << " " << fmt4(r.loss) << " |";
    md << "\n";
    std::printf("%s", md.str().c_str());

    if (!out_dir.empty()) {
      fs::create_directories(out_dir);
      std::ofstream(fs::path(out_dir) / "eval.md") << md.str();
      nlohmann::json j = {{"checkpoint", ckpt}, {"variant", variant}, {"trained_context", trained_T},
                          {"batch", batch},     {"batches", batches}, {"bucket", bucket},
                          {"held", held}};
      for (const auto& r : results)
        j["lengths"].push_back(
            {{"length", r.length}, {"loss", r.loss}, {"bucket_start", r.bucket_start}, {"bucket_loss", r.bucket_loss}});
      std::ofstream(fs::path(out_dir) / "eval.json") << j.dump(2) << "\n";
      std::ofstream gp(fs::path(out_dir) / "eval.gp");
      gp << "set terminal pngcairo size 1000,600 noenhanced\nset output 'eval.png'\n"
         << "set title 'validation loss per position bucket: " << variant << " trained at T = " << trained_T << "'\n"
         << "set xlabel 'position (bucket start)'\nset ylabel 'validation loss (nats/token)'\nset grid\n"
         << "set key outside right top\n";
      std::string plot = "plot ";
      for (std::size_t i = 0; i < results.size(); ++i) {
        gp << "$len" << i << " << EOD\n";
        for (std::size_t b = 0; b < results[i].bucket_start.size(); ++b)
          gp << results[i].bucket_start[b] << " " << results[i].bucket_loss[b] << "\n";
        gp << "EOD\n";
        plot += std::string(i ? ", " : "") + "$len" + std::to_string(i) + " using 1:2 with linespoints title 'T = " +
                std::to_string(results[i].length) + "'";
      }
      gp << plot << "\nset terminal svg size 1000,600 dynamic noenhanced\nset output 'eval.svg'\nreplot\nunset output\n";
      gp.close();
      const fs::path gnuplot = find_on_path("gnuplot");
      if (!gnuplot.empty() && run_program(gnuplot, {"eval.gp"}, out_dir) == 0)
        std::printf("plots: %s\n", (fs::path(out_dir) / "eval.png").c_str());
      else
        std::printf("plots: not made (gnuplot missing or failed); script %s\n", (fs::path(out_dir) / "eval.gp").c_str());
    }
    return 0;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "normlab-eval: out of memory; lower --batch or the longest --seq\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "normlab-eval: %s\n", e.what());
    return 2;
  }
}
