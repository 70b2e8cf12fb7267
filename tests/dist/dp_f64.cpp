// dp_f64 VARIANT STEPS ACCUM ZERO OUT.jsonl [OPTIMIZER]: the driver's data-parallel step
// (detail::accumulate_gradients over the MPI communicator, then clipping, the
// optimizer (AdamW unless OPTIMIZER: lion, muon) and the weight constraint in
// DataParallel::update; ZERO = 1: ZeRO-1) in float64, on whatever ranks mpirun gives it. Rank 0
// writes each step's loss and gradient norm; the same program on 1 and on 2
// ranks must agree to 1e-10 (tests/dist/equivalence_f64.sh): in float64 the
// only difference, the order of the gradient sums, is ~1e-16 relative.
#include <cstdio>
#include <fstream>
#include <string>
#include <tuple>

#include "normlab/dist/mpi.hpp"
#include "normlab/app/driver.hpp"

// The variants this build instantiates (a sanitized build takes only its trainers').
#ifndef NORMLAB_DP_F64_VARIANTS
#define NORMLAB_DP_F64_VARIANTS normlab::all_variants
#endif

int main(int argc, char** argv) {
  using namespace normlab;
  dist::MpiComm comm(&argc, &argv);
  if (argc != 6 && argc != 7) {
    std::fprintf(stderr, "usage: dp_f64 VARIANT STEPS ACCUM ZERO OUT.jsonl [OPTIMIZER]\n");
    return 2;
  }
  const std::string variant = argv[1];
  TrainOptions o;
  o.steps = std::stoll(argv[2]);
  o.accum = std::stoll(argv[3]);
  o.zero = std::stoi(argv[4]);
  o.batch = 4;
  o.seq = 32;
  o.d = 32;
  o.layers = 2;
  o.heads = 2;
  o.dp_bucket = 512;  // many buckets, started while backward runs
  int rc = 0;
  bool found = false;
  auto run = [&](auto tag) {
    using Model = typename decltype(tag)::template model<double>;
    const data::TokenData td = data::make_synthetic(200'000, 20'000, 1);
    detail::DataParallel<dist::MpiComm> dp(comm, o);
    data::BatchSampler sampler(td.train, o.batch, o.seq, 7, "train");
    std::vector<std::int64_t> idx(std::size_t(o.batch * o.seq)), tgt(idx.size());
    Model model(detail::model_config(o, td.vocab_size), dp.local_batch, o.seq);
    OptimizerOptions oo;
    oo.name = argc == 7 ? argv[6] : "adamw";
    oo.weight_decay = keeps_unit_hidden<typename Model::scheme> ? 0.0 : 0.1;
    oo.peak_lr = 1e-2;
    auto opt = detail::make_named_optimizer<builtin_optimizers>(model, oo, dp, o);
    model.init(3);
    std::ofstream out;
    if (comm.rank() == 0) out.open(argv[5], std::ios::trunc);
    for (std::int64_t step = 1; step <= o.steps; ++step) {
      const double loss = detail::accumulate_gradients(model, sampler, o, idx, tgt, dp);
      const double gnorm = dp.grad_norm(model);
      dp.update(model, opt, 1.0, gnorm, 1e-2);
      if (comm.rank() == 0) {
        char line[160];
        std::snprintf(line, sizeof line, "{\"step\": %lld, \"train_loss\": %.17g, \"grad_norm\": %.17g}\n",
                      static_cast<long long>(step), loss, gnorm);
        out << line;
      }
    }
    if (comm.rank() == 0 && !out) rc = 2;
  };
  std::apply([&](auto... tags) { ((!found && decltype(tags)::name == variant ? (run(tags), found = true) : false), ...); },
             NORMLAB_DP_F64_VARIANTS{});
  if (!found) {
    std::fprintf(stderr, "dp_f64: variant %s is not in this build (all: %s)\n", variant.c_str(), known_variants().c_str());
    return 2;
  }
  return rc;
}
