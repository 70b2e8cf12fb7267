#pragma once
// Validation loss of a trained model at several context lengths, overall and per
// position bucket (positions 0..b-1, b..2b-1, ...): the length-extrapolation
// ablation of the nGPT paper (QK normalization and extrapolation). The model is
// built for the longest length asked for (RoPE tables cover it); the windows are
// data::eval_batch's, so at the training length and batch the figure is the
// training run's own validation loss on the same batches.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "normlab/core/error.hpp"
#include "normlab/train/data.hpp"

namespace normlab {

struct LengthEval {
  std::int64_t length = 0;
  double loss = 0;                    // mean over every position of every window
  std::vector<double> bucket_loss;    // mean per position bucket
  std::vector<std::int64_t> bucket_start;
};

// Mean cross-entropy per position of the last forward (B rows of T positions),
// from the model's logits, accumulated into sum[t] (double).
template <class Model>
void accumulate_position_losses(const Model& model, const std::int64_t* targets, std::int64_t B, std::int64_t T,
                                std::vector<double>& sum) {
  const std::int64_t V = model.config().vocab_size;
  const auto* logits = model.logits();
  for (std::int64_t i = 0; i < B * T; ++i) {
    const auto* row = logits + i * V;
    double mx = -INFINITY;
    for (std::int64_t v = 0; v < V; ++v) mx = std::max(mx, double(row[v]));
    double z = 0;
    for (std::int64_t v = 0; v < V; ++v) z += std::exp(double(row[v]) - mx);
    sum[static_cast<std::size_t>(i % T)] += mx + std::log(z) - double(row[targets[i]]);
  }
}

// Evaluates `model` (built for max_batch >= batch and max_seq >= every length) on
// `batches` validation batches of `batch` windows at each length.
template <class Model>
std::vector<LengthEval> evaluate_lengths(Model& model, const std::vector<std::uint16_t>& val,
                                         const std::vector<std::int64_t>& lengths, std::int64_t batch,
                                         std::int64_t batches, std::int64_t bucket) {
  if (bucket <= 0) throw Error("evaluate_lengths: the position bucket must be positive");
  std::vector<LengthEval> out;
  for (const std::int64_t L : lengths) {
    if (L > model.max_seq()) throw Error("evaluate_lengths: length " + std::to_string(L) + " exceeds the model's " +
                                         std::to_string(model.max_seq()));
    std::vector<std::int64_t> idx(static_cast<std::size_t>(batch * L)), tgt(idx.size());
    std::vector<double> per_pos(static_cast<std::size_t>(L), 0.0);
    double total = 0;
    for (std::int64_t i = 0; i < batches; ++i) {
      data::eval_batch(val, batch, L, i, idx.data(), tgt.data(), "val");
      total += model.forward(idx.data(), tgt.data(), batch, L);
      accumulate_position_losses(model, tgt.data(), batch, L, per_pos);
    }
    LengthEval e;
    e.length = L;
    e.loss = total / double(batches);
    for (std::int64_t b0 = 0; b0 < L; b0 += bucket) {
      double s = 0;
      const std::int64_t b1 = std::min(L, b0 + bucket);
      for (std::int64_t t = b0; t < b1; ++t) s += per_pos[static_cast<std::size_t>(t)];
      e.bucket_start.push_back(b0);
      e.bucket_loss.push_back(s / double((b1 - b0) * batch * batches));
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace normlab
