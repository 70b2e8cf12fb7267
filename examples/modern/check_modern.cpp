// The modern block's checks, from outside normlab: float64 finite-difference
// gradients of every parameter at a shape where each policy acts (8 q / 2 kv
// heads, the window cut to 4 so that T = 11 spans several windows at a size a
// finite-difference check affords), and decoding with the KV cache against the
// full forward past the real window of 16. Exit 0 only when the worst
// relative gradient error is at most 1e-6 (normlab's bar for its variants) and
// decoding matches to 1e-12 (float64, the same sums in another order).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <normlab/train/gradcheck.hpp>

#include "modern.hpp"

int main() {
  normlab::GradcheckShape shape;
  shape.config.vocab_size = 13;
  shape.config.n_embd = 32;
  shape.config.n_head = 8;
  shape.config.n_layer = 2;
  my::modern::configure(shape.config);
  shape.config.attn_window = 4;  // T = 11 spans several windows at a probe size a gradcheck can afford
  shape.seq = 11;
  using Model = my::modern::model<double>;
  double worst = 0;
  std::string where;
  std::size_t n = 0;
  for (const auto& r : normlab::check_model_gradients<Model>(3, shape)) {
    ++n;
    if (r.rel_error >= worst) {
      worst = r.rel_error;
      where = r.name;
    }
  }
  const bool grad_ok = worst <= 1e-6;
  std::printf("modern gradcheck: %zu tensors, heads %lld / kv heads %lld, window %lld, T %lld: max_rel_error %.3e (%s) %s\n",
              n, (long long)shape.config.n_head, (long long)shape.config.kv_heads(),
              (long long)shape.config.attn_window, (long long)shape.seq, worst, where.c_str(),
              grad_ok ? "PASS" : "FAIL");

  // Decode one token at a time past the window, against one full forward.
  const std::int64_t T = 24;
  normlab::ModelConfig c = shape.config;
  c.attn_window = 16;
  c.vocab_size = 29;
  Model m(c, 1, T);
  m.init(7);
  std::vector<std::int64_t> idx(T);
  for (std::int64_t i = 0; i < T; ++i) idx[i] = (i * 7 + 3) % c.vocab_size;
  m.forward(idx.data(), nullptr, 1, T);
  const std::vector<double> full(m.logits(), m.logits() + T * c.vocab_size);
  auto cache = m.make_kv_cache();
  double diff = 0;
  for (std::int64_t t = 0; t < T; ++t) {
    const double* row = m.decode_step(idx[t], cache);
    for (std::int64_t v = 0; v < c.vocab_size; ++v) diff = std::max(diff, std::abs(row[v] - full[t * c.vocab_size + v]));
  }
  const bool decode_ok = diff <= 1e-12;
  std::printf("modern decode: %lld tokens, window 16, KV cache %zu values (multi-head: %lld): max |decode - forward| "
              "%.3e %s\n",
              (long long)T, cache.k.size(), (long long)(c.n_layer * T * c.n_embd), diff, decode_ok ? "PASS" : "FAIL");
  return grad_ok && decode_ok ? 0 : 1;
}
