#pragma once
// A generated order-2 Markov language whose entropy rate (the loss floor) is known
// exactly, so a run can be judged without any download. Apart: a data source that
// needs no file.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "normlab/core/error.hpp"
#include "normlab/train/token_data.hpp"

namespace normlab::data {

// ---------------------------------------------------------------------------
// A generated language with a known entropy rate, so a training run can be
// judged against the true optimum (the loss floor) without any download.
//
// Order-2 Markov source over kAlphabet: the state is the last two symbols, and
// each state has 2..6 possible successors with random weights. The successor
// sets always contain the next symbol of a de Bruijn sequence B(K, 2) — a cycle
// through all K*K pairs — so every state can reach every other: the chain is
// irreducible, its stationary distribution is unique, and a long sample's
// statistics converge to it from any start.
class SyntheticLanguage {
 public:
  static constexpr std::string_view kAlphabet = " abcdefghijklmnopqrstuvwxyz.";  // 28 printable bytes
  static constexpr int K = static_cast<int>(kAlphabet.size());
  static constexpr int kStates = K * K;
  static constexpr int kMaxSucc = 6;

  explicit SyntheticLanguage(std::uint64_t seed) : seed_(seed) {
    build_transitions();
    entropy_rate_ = compute_entropy_rate();
  }

  std::uint64_t seed() const { return seed_; }

  // Exact entropy rate in nats/token: sum_s pi(s) H(P(.|s)).
  double entropy_rate_nats() const { return entropy_rate_; }

  // n_tokens byte ids (< 256) from the chain. The start state is drawn from
  // `seed` and then 256 steps are discarded, so the text starts "inside" the
  // language rather than at an arbitrary pair.
  std::vector<std::uint16_t> generate(std::size_t n_tokens, std::uint64_t seed) const {
    detail::SplitMix64 rng(detail::mix64(seed ^ 0x5eed0f7e47ULL) ^ seed_);
    int state = static_cast<int>(rng.below(kStates));
    for (int i = 0; i < 256; ++i) state = step(state, rng.uniform()).first;
    std::vector<std::uint16_t> out(n_tokens);
    for (auto& tok : out) {
      const auto [next_state, symbol] = step(state, rng.uniform());
      tok = static_cast<unsigned char>(kAlphabet[static_cast<std::size_t>(symbol)]);
      state = next_state;
    }
    return out;
  }

 private:
  struct Row {
    int n = 0;
    std::array<int, kMaxSucc> symbol{};
    std::array<double, kMaxSucc> prob{};
  };

  std::uint64_t seed_;
  std::array<Row, kStates> rows_{};
  double entropy_rate_ = 0.0;

  // One transition from `state` = a*K + b given a uniform u: emits c and moves to (b, c).
  std::pair<int, int> step(int state, double u) const {
    const Row& r = rows_[static_cast<std::size_t>(state)];
    int c = r.symbol[static_cast<std::size_t>(r.n - 1)];  // if rounding leaves u past the last bin
    double acc = 0.0;
    for (int k = 0; k < r.n; ++k) {
      acc += r.prob[static_cast<std::size_t>(k)];
      if (u < acc) {
        c = r.symbol[static_cast<std::size_t>(k)];
        break;
      }
    }
    return {(state % K) * K + c, c};
  }

  // De Bruijn sequence B(K, 2) by the FKM (Lyndon word) algorithm: a cyclic
  // sequence of length K*K in which every pair of symbols occurs exactly once.
  static std::vector<int> de_bruijn() {
    std::vector<int> seq, a(2 * K + 1, 0);
    const int n = 2;
    auto db = [&](auto&& self, int t, int p) -> void {
      if (t > n) {
        if (n % p == 0) seq.insert(seq.end(), a.begin() + 1, a.begin() + p + 1);
      } else {
        a[static_cast<std::size_t>(t)] = a[static_cast<std::size_t>(t - p)];
        self(self, t + 1, p);
        for (int j = a[static_cast<std::size_t>(t - p)] + 1; j < K; ++j) {
          a[static_cast<std::size_t>(t)] = j;
          self(self, t + 1, t);
        }
      }
    };
    db(db, 1, 1);
    return seq;
  }

  void build_transitions() {
    const std::vector<int> cycle = de_bruijn();  // size K*K
    const std::size_t L = cycle.size();
    detail::SplitMix64 rng(detail::mix64(seed_ ^ 0x1a46a6e5ULL));
    for (std::size_t i = 0; i < L; ++i) {
      const int state = cycle[i] * K + cycle[(i + 1) % L];
      Row& r = rows_[static_cast<std::size_t>(state)];
      r.n = 2 + static_cast<int>(rng.below(kMaxSucc - 1));  // 2..6 successors
      r.symbol[0] = cycle[(i + 2) % L];                     // the de Bruijn successor (connectivity)
      for (int k = 1; k < r.n; ++k) {
        int c;
        do c = static_cast<int>(rng.below(K));
        while (std::find(r.symbol.begin(), r.symbol.begin() + k, c) != r.symbol.begin() + k);
        r.symbol[static_cast<std::size_t>(k)] = c;
      }
      // Weights uniform in (0.05, 1]: skewed enough that some successors are
      // clearly preferred, floored so no successor is practically unreachable.
      double total = 0.0;
      for (int k = 0; k < r.n; ++k) total += (r.prob[static_cast<std::size_t>(k)] = 0.05 + 0.95 * rng.uniform());
      for (int k = 0; k < r.n; ++k) r.prob[static_cast<std::size_t>(k)] /= total;
    }
  }

  double compute_entropy_rate() const {
    // Stationary distribution over pair states by power iteration on the lazy
    // chain (I + P) / 2: same stationary distribution as P, but aperiodic, so
    // the iteration converges even if P happened to be periodic.
    std::vector<double> pi(kStates, 1.0 / kStates), next(kStates);
    bool converged = false;
    for (int iter = 0; iter < 1000000 && !converged; ++iter) {
      for (int s = 0; s < kStates; ++s) next[static_cast<std::size_t>(s)] = 0.5 * pi[static_cast<std::size_t>(s)];
      for (int s = 0; s < kStates; ++s) {
        const Row& r = rows_[static_cast<std::size_t>(s)];
        const double mass = 0.5 * pi[static_cast<std::size_t>(s)];
        for (int k = 0; k < r.n; ++k)
          next[static_cast<std::size_t>((s % K) * K + r.symbol[static_cast<std::size_t>(k)])] +=
              mass * r.prob[static_cast<std::size_t>(k)];
      }
      // Renormalise so rounding cannot make the total mass drift over many iterations.
      double total = 0.0;
      for (double v : next) total += v;
      double change = 0.0;
      for (int s = 0; s < kStates; ++s) {
        next[static_cast<std::size_t>(s)] /= total;
        change = std::max(change, std::abs(next[static_cast<std::size_t>(s)] - pi[static_cast<std::size_t>(s)]));
      }
      pi.swap(next);
      converged = change < 1e-15;
    }
    if (!converged)
      throw Error("SyntheticLanguage(seed " + std::to_string(seed_) +
                  "): stationary distribution did not converge");
    double h = 0.0;
    for (int s = 0; s < kStates; ++s) {
      const Row& r = rows_[static_cast<std::size_t>(s)];
      double hs = 0.0;
      for (int k = 0; k < r.n; ++k) hs -= r.prob[static_cast<std::size_t>(k)] * std::log(r.prob[static_cast<std::size_t>(k)]);
      h += pi[static_cast<std::size_t>(s)] * hs;
    }
    return h;
  }
};

// n_train training tokens followed by n_val validation tokens of one
// continuous stream (validation continues where training stops), vocabulary
// 256 (byte ids), with the language's exact entropy rate as the loss floor.
inline TokenData make_synthetic(std::size_t n_train, std::size_t n_val, std::uint64_t seed) {
  if (n_train == 0 || n_val == 0)
    throw Error("make_synthetic: n_train (" + std::to_string(n_train) + ") and n_val (" + std::to_string(n_val) +
                ") must both be positive");
  const SyntheticLanguage lang(seed);
  std::vector<std::uint16_t> all = lang.generate(n_train + n_val, seed);
  TokenData d;
  d.vocab_size = 256;
  d.val.assign(all.begin() + static_cast<std::ptrdiff_t>(n_train), all.end());
  all.resize(n_train);
  d.train = std::move(all);
  d.entropy_floor_nats = lang.entropy_rate_nats();
  char rate[32];
  std::snprintf(rate, sizeof rate, "%.4f", d.entropy_floor_nats);
  d.description = "synthetic order-2 Markov language (seed " + std::to_string(seed) + ", " +
                  std::to_string(SyntheticLanguage::K) + " symbols, entropy rate " + rate + " nats/token)";
  return d;
}

}  // namespace normlab::data
