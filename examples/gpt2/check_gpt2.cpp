// GPT-2's block and nGPT on the same shapes, checked from outside normlab:
// float64 finite-difference gradients of every parameter (LayerNorm gains and
// biases, every linear bias, the position table) at T = 11, and decoding with
// the KV cache against the full forward. Exit 0 only when each model's worst
// relative gradient error is at most 1e-6 (normlab's bar for its variants) and
// decoding matches to 1e-12 (float64: the same sums in another order).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <normlab/train/gradcheck.hpp>

#include "gpt2.hpp"

template <class Tag>
bool check(const char* label) {
  using Model = typename Tag::template model<double>;
  normlab::GradcheckShape shape;
  shape.config.vocab_size = 13;
  shape.config.n_embd = 16;
  shape.config.n_head = 4;
  shape.config.n_layer = 2;
  Tag::configure(shape.config);
  shape.seq = 11;
  if (shape.config.positions == normlab::Positions::learned) shape.config.n_positions = shape.seq;
  double worst = 0;
  std::string where;
  std::size_t n = 0;
  std::string vanishing;  // zero by symmetry (the key biases), checked as ‖analytic‖ against the rounding floor
  for (const auto& r : normlab::check_model_gradients<Model>(3, shape)) {
    ++n;
    if (r.vanishing) vanishing += (vanishing.empty() ? "" : ", ") + r.name;
    if (r.rel_error >= worst) {
      worst = r.rel_error;
      where = r.name;
    }
  }
  const bool grad_ok = worst <= 1e-6 && n > 0;
  std::printf("%s gradcheck: %zu tensors, T %lld, positions %s, bias %d: max_rel_error %.3e (%s) %s\n", label, n,
              (long long)shape.seq, normlab::positions_name(shape.config.positions), int(shape.config.bias), worst,
              where.c_str(), grad_ok ? "PASS" : "FAIL");
  if (!vanishing.empty()) std::printf("%s gradcheck: zero by symmetry: %s\n", label, vanishing.c_str());

  const std::int64_t T = 24;
  normlab::ModelConfig c = shape.config;
  c.vocab_size = 29;
  c.n_positions = c.positions == normlab::Positions::learned ? T : 0;
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
  std::printf("%s decode: %lld tokens: max |decode - forward| %.3e %s\n", label, (long long)T, diff,
              decode_ok ? "PASS" : "FAIL");
  return grad_ok && decode_ok;
}

int main() {
  const bool a = check<my::gpt2>("gpt2");
  const bool b = check<my::ngpt_gpt2>("ngpt_gpt2");
  return a && b ? 0 : 1;
}
