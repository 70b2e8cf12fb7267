#pragma once
// What several tests build the same way: a small model shape, a deterministic
// batch, and a bitwise comparison. One definition, so a test that changes them
// says so here.
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "normlab/nn/config.hpp"

namespace normlab::test {

// A model small enough for float64 checks in milliseconds; vocabulary, width,
// heads and layers as given (the defaults: the CPU tests' shape).
inline ModelConfig small_config(std::int64_t vocab = 23, std::int64_t d = 24, std::int64_t heads = 3,
                                std::int64_t layers = 2) {
  ModelConfig c;
  c.vocab_size = vocab;
  c.n_embd = d;
  c.n_head = heads;
  c.n_layer = layers;
  return c;
}

// Tokens and targets of step `step`: a fixed pattern over the vocabulary V, a
// different one each step, the same on every run.
inline void make_batch(std::vector<std::int64_t>& idx, std::vector<std::int64_t>& tgt, std::int64_t V, int step) {
  for (std::size_t i = 0; i < idx.size(); ++i) {
    idx[i] = std::int64_t((i * 5 + step * 3) % V);
    tgt[i] = std::int64_t((i * 7 + step + 1) % V);
  }
}

// The float64-against-float32 checks' start: m64 from init(11) with every
// parameter perturbed by N(0, 0.01) (the learned scales and α start constant:
// each gradient path then carries distinct values) and constrained, the same
// numbers copied to m32 and back (both models hold float32's values), and a
// random batch of tokens below V; all drawn from rng.
template <class M64, class M32>
void perturbed_start(M64& m64, M32& m32, std::mt19937_64& rng, std::vector<std::int64_t>& idx,
                     std::vector<std::int64_t>& tgt, std::int64_t V) {
  m64.init(11);
  std::normal_distribution<double> noise(0.0, 0.01);
  for (double& p : m64.params().values()) p += noise(rng);
  m64.apply_constraint();
  for (std::size_t i = 0; i < m64.params().size(); ++i) m32.params().values()[i] = float(m64.params().values()[i]);
  for (std::size_t i = 0; i < m64.params().size(); ++i) m64.params().values()[i] = double(m32.params().values()[i]);
  for (std::size_t i = 0; i < idx.size(); ++i) {
    idx[i] = std::int64_t(rng() % std::uint64_t(V));
    tgt[i] = std::int64_t(rng() % std::uint64_t(V));
  }
}

// The same values to the bit (sizes included).
template <class Vec>
bool same_bits(const Vec& a, const Vec& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
}

}  // namespace normlab::test
