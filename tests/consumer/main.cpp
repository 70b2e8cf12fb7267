// Builds a tiny GPT through the installed headers and checks one step lowers nothing to NaN.
#include <cmath>
#include <cstdio>
#include <vector>

#include <normlab/normlab.hpp>

int main() {
  normlab::ModelConfig cfg;
  cfg.vocab_size = 16;
  cfg.n_embd = 16;
  cfg.n_head = 2;
  cfg.n_layer = 1;
  normlab::GPT<float> model(cfg, 1, 8);
  model.init(7);
  normlab::AdamW<float> opt(model.params(), {});
  std::vector<std::int64_t> idx(8), tgt(8);
  for (int i = 0; i < 8; ++i) {
    idx[i] = i;
    tgt[i] = (i + 1) % 16;
  }
  const auto r = normlab::train_step(model, opt, idx.data(), tgt.data(), 1, 8, 1e-3, 1.0);
  std::printf("consumer: loss %.4f\n", r.loss);
  return std::isfinite(r.loss) ? 0 : 1;
}
