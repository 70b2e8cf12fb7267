#pragma once
// What several tests build the same way: a small model shape, a deterministic
// batch, and a bitwise comparison. One definition, so a test that changes them
// says so here.
#include <cstdint>
#include <cstring>
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

// The same values to the bit (sizes included).
template <class Vec>
bool same_bits(const Vec& a, const Vec& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
}

}  // namespace normlab::test
