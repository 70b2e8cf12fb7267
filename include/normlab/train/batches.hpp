#pragma once
// Deterministic batches of (input, target) windows: the training sampler whose state
// is two integers (so a resume draws the same batches) and the fixed evaluation
// batches. Apart: what a run draws from a split, whatever its source.
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "normlab/core/error.hpp"
#include "normlab/train/token_data.hpp"

namespace normlab::data {

// ---------------------------------------------------------------------------
// Batches.

struct SamplerState {
  std::uint64_t seed = 0;
  std::uint64_t batches_drawn = 0;
};

namespace detail {

inline void check_batch_shape(std::size_t n_tokens, std::int64_t B, std::int64_t T, std::string_view split_name) {
  if (B < 1 || T < 1) {
    std::ostringstream os;
    os << split_name << " split: batch size B=" << B << " and context length T=" << T << " must be positive";
    throw Error(os.str());
  }
  if (n_tokens < static_cast<std::uint64_t>(T) + 1) {
    std::ostringstream os;
    os << split_name << " split has " << n_tokens << " tokens, too few for one window of T+1 = " << T + 1
       << " tokens (T=" << T << ")";
    throw Error(os.str());
  }
}

// Copies window [start, start+T] into row b: idx gets tokens start..start+T-1,
// targets the same shifted by one.
inline void fill_row(const std::vector<std::uint16_t>& tokens, std::uint64_t start, std::int64_t b, std::int64_t T,
                     std::int64_t* idx, std::int64_t* targets) {
  const std::uint16_t* src = tokens.data() + start;
  std::int64_t* row_idx = idx + b * T;
  std::int64_t* row_tgt = targets + b * T;
  for (std::int64_t t = 0; t < T; ++t) {
    row_idx[t] = src[t];
    row_tgt[t] = src[t + 1];
  }
}

}  // namespace detail

// Random training windows whose whole state is (seed, batches_drawn): window b
// of batch k starts at hash(seed, k, b) mod (number of start positions), so a
// checkpoint that stores state() resumes with exactly the batches an
// uninterrupted run would have drawn.
//
// Keeps a pointer to `tokens`, which must outlive the sampler (a temporary
// vector is rejected at compile time).
class BatchSampler {
 public:
  BatchSampler(const std::vector<std::uint16_t>& tokens, std::int64_t B, std::int64_t T, std::uint64_t seed,
               std::string split_name = "train")
      : tokens_(&tokens), B_(B), T_(T), state_{seed, 0}, split_name_(std::move(split_name)) {
    detail::check_batch_shape(tokens.size(), B, T, split_name_);
  }
  BatchSampler(const std::vector<std::uint16_t>&& tokens, std::int64_t B, std::int64_t T, std::uint64_t seed,
               std::string split_name = "train") = delete;

  // Fills idx and targets, each B*T int64 in row-major (B, T) order.
  void next(std::int64_t* idx, std::int64_t* targets) {
    const std::uint64_t n_starts = tokens_->size() - static_cast<std::uint64_t>(T_);  // starts 0..N-T-1
    const std::uint64_t batch_key = detail::mix64(detail::mix64(state_.seed) ^ detail::mix64(state_.batches_drawn + 1));
    for (std::int64_t b = 0; b < B_; ++b) {
      const std::uint64_t h = detail::mix64(batch_key + 0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(b + 1));
      const auto start = static_cast<std::uint64_t>((static_cast<detail::u128>(h) * n_starts) >> 64);
      detail::fill_row(*tokens_, start, b, T_, idx, targets);
    }
    ++state_.batches_drawn;
  }

  SamplerState state() const { return state_; }
  void restore(const SamplerState& s) { state_ = s; }

  std::int64_t batch_size() const { return B_; }
  std::int64_t context_length() const { return T_; }
  const std::string& split_name() const { return split_name_; }

 private:
  const std::vector<std::uint16_t>* tokens_;
  std::int64_t B_, T_;
  SamplerState state_;
  std::string split_name_;
};

// Fixed evaluation batches: batch i holds windows i*B .. i*B+B-1, and window
// j starts at (j*T) mod (N-T), i.e. consecutive non-overlapping windows that
// walk through the split and wrap around at its end. Identical on every call,
// so evaluation losses of different runs and steps are directly comparable.
inline void eval_batch(const std::vector<std::uint16_t>& tokens, std::int64_t B, std::int64_t T, std::int64_t i,
                       std::int64_t* idx, std::int64_t* targets, std::string_view split_name = "val") {
  detail::check_batch_shape(tokens.size(), B, T, split_name);
  if (i < 0) throw Error(std::string(split_name) + " split: eval batch index " + std::to_string(i) + " is negative");
  const std::uint64_t n_starts = tokens.size() - static_cast<std::uint64_t>(T);
  for (std::int64_t b = 0; b < B; ++b) {
    // 128-bit product so large batch indices cannot overflow before the modulo.
    const detail::u128 offset = (static_cast<detail::u128>(i) * static_cast<std::uint64_t>(B) +
                                      static_cast<std::uint64_t>(b)) *
                                     static_cast<std::uint64_t>(T);
    detail::fill_row(tokens, static_cast<std::uint64_t>(offset % n_starts), b, T, idx, targets);
  }
}

}  // namespace normlab::data
