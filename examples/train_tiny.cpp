// A small end-to-end example: trains GPT and nGPT (one type each) on generated
// tokens from a fixed random bigram language, prints both losses falling and
// the entropy floor the losses approach.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "normlab/normlab.hpp"

namespace {
// A first-order Markov source: each token's successor distribution is a random
// softmax over the vocabulary, sharp enough that there is something to learn.
struct BigramSource {
  std::int64_t V;
  std::vector<double> P;  // (V,V) row-stochastic
  explicit BigramSource(std::int64_t vocab, std::uint64_t seed) : V(vocab), P(vocab * vocab) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> n(0.0, 2.5);
    for (std::int64_t a = 0; a < V; ++a) {
      double z = 0;
      for (std::int64_t b = 0; b < V; ++b) z += P[a * V + b] = std::exp(n(rng));
      for (std::int64_t b = 0; b < V; ++b) P[a * V + b] /= z;
    }
  }
  // Entropy rate in nats under the stationary distribution (power iteration).
  double entropy_rate() const {
    std::vector<double> pi(V, 1.0 / V), next(V);
    for (int it = 0; it < 2000; ++it) {
      std::fill(next.begin(), next.end(), 0.0);
      for (std::int64_t a = 0; a < V; ++a)
        for (std::int64_t b = 0; b < V; ++b) next[b] += pi[a] * P[a * V + b];
      pi = next;
    }
    double h = 0;
    for (std::int64_t a = 0; a < V; ++a)
      for (std::int64_t b = 0; b < V; ++b)
        if (P[a * V + b] > 0) h -= pi[a] * P[a * V + b] * std::log(P[a * V + b]);
    return h;
  }
  void sample(std::vector<std::int64_t>& seq, std::mt19937_64& rng) const {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::int64_t cur = std::int64_t(rng() % std::uint64_t(V));
    for (auto& t : seq) {
      double r = u(rng), acc = 0;
      std::int64_t nxt = V - 1;
      for (std::int64_t b = 0; b < V; ++b)
        if ((acc += P[cur * V + b]) > r) {
          nxt = b;
          break;
        }
      t = cur = nxt;
    }
  }
};

template <class Model>
void train(const char* label, const normlab::ModelConfig& cfg, const BigramSource& src, int steps, std::int64_t B,
           std::int64_t Tn, double lr, double wd, std::uint64_t seed) {
  Model model(cfg, B, Tn);
  model.init(seed);
  normlab::AdamWConfig oc;
  oc.weight_decay = wd;
  normlab::AdamW<float> opt(model.params(), oc);
  std::mt19937_64 data_rng(seed + 1);
  std::vector<std::int64_t> seq(B * (Tn + 1)), idx(B * Tn), tgt(B * Tn);
  for (int step = 0; step < steps; ++step) {
    for (std::int64_t b = 0; b < B; ++b) {
      std::vector<std::int64_t> row(Tn + 1);
      src.sample(row, data_rng);
      for (std::int64_t t = 0; t < Tn; ++t) {
        idx[b * Tn + t] = row[t];
        tgt[b * Tn + t] = row[t + 1];
      }
    }
    const auto r = normlab::train_step(model, opt, idx.data(), tgt.data(), B, Tn, lr, 1.0);
    if (step % 20 == 0 || step == steps - 1)
      std::printf("%-5s step %4d  loss %.4f  grad_norm %.3f\n", label, step, r.loss, r.grad_norm);
  }
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train GPT and nGPT on a generated bigram language and print the losses."};
  int steps = 200;
  std::int64_t d = 64, layers = 2, heads = 4, vocab = 32, B = 8, Tn = 32;
  std::uint64_t seed = 1;
  app.add_option("--steps", steps, "optimizer steps per model")->capture_default_str();
  app.add_option("--d", d, "embedding dimension")->capture_default_str();
  app.add_option("--layers", layers, "transformer blocks")->capture_default_str();
  app.add_option("--heads", heads, "attention heads")->capture_default_str();
  app.add_option("--vocab", vocab, "vocabulary of the generated language")->capture_default_str();
  app.add_option("--batch", B, "sequences per step")->capture_default_str();
  app.add_option("--seq", Tn, "tokens per sequence")->capture_default_str();
  app.add_option("--seed", seed, "seed of data and initialisation")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    normlab::ModelConfig cfg;
    cfg.vocab_size = vocab;
    cfg.n_embd = d;
    cfg.n_head = heads;
    cfg.n_layer = layers;
    const BigramSource src(vocab, 12345);
    std::printf("generated bigram language: vocabulary %lld, entropy floor %.4f nats, uniform %.4f\n",
                static_cast<long long>(vocab), src.entropy_rate(), std::log(double(vocab)));
    // Papers' defaults: GPT with weight decay; nGPT without, and a larger lr (no warmup in either here).
    train<normlab::GPT<float>>("gpt", cfg, src, steps, B, Tn, 3e-3, 0.1, seed);
    train<normlab::NGPT<float>>("ngpt", cfg, src, steps, B, Tn, 1e-2, 0.0, seed);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_tiny: %s\n", e.what());
    return 1;
  }
  return 0;
}
