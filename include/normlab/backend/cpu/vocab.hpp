#pragma once
// The model's two ends on the vocabulary: the embedding lookup (and its
// deterministic scatter-add backward) and the mean cross-entropy over logits.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "normlab/backend/cpu/primitives.hpp"

namespace normlab::cpu {

// ---------------------------------------------------------------- embedding
// out(N,C) = wte[idx]
template <class T>
void embedding_forward(T* out, const std::int64_t* idx, const T* wte, std::int64_t N, std::int64_t C) {
  parallel_for(N, N * C > kParallelGrain, [&](std::int64_t i) { std::copy_n(wte + idx[i] * C, C, out + i * C); });
}

// dwte[idx] += dout. Repeated tokens must add in a fixed order: threads split
// the columns, and each walks the tokens in order (the same bits as serial).
template <class T>
void embedding_backward(T* dwte, const std::int64_t* idx, const T* dout, std::int64_t N, std::int64_t C) {
  constexpr std::int64_t kBlock = 64;
  const std::int64_t blocks = (C + kBlock - 1) / kBlock;
  parallel_for(blocks, N * C > kParallelGrain, [&](std::int64_t b) {
    const std::int64_t c0 = b * kBlock, c1 = std::min(C, c0 + kBlock);
    for (std::int64_t i = 0; i < N; ++i) {
      T* row = dwte + idx[i] * C;
      const T* g = dout + i * C;
      for (std::int64_t c = c0; c < c1; ++c) row[c] += g[c];
    }
  });
}

// ---------------------------------------------------------------- cross-entropy
// Mean over N rows. Returns the loss (accumulated in double); if dlogits is not
// null writes d loss / d logits = (softmax − onehot)/N. dlogits may alias logits.
template <class T>
double cross_entropy(T* dlogits, const T* logits, const std::int64_t* targets, std::int64_t N, std::int64_t V) {
  double* row_loss = detail::thread_scratch<double, detail::kRowLoss>(static_cast<std::size_t>(N));
  parallel_for(N, N * V > kParallelGrain, [&](std::int64_t i) {
    const T* l = logits + i * V;
    CArrayRow<T> row(l, V);
    const T mx = row.maxCoeff();
    const T lse = mx + std::log((row - mx).exp().sum());
    row_loss[i] = double(lse - l[targets[i]]);
    if (dlogits) {
      const T invN = T(1) / T(N);
      ArrayRow<T>(dlogits + i * V, V) = (row - lse).exp() * invN;
      dlogits[i * V + targets[i]] -= invN;
    }
  });
  double total = 0;
  for (std::int64_t i = 0; i < N; ++i) total += row_loss[i];
  return total / double(N);
}

}  // namespace normlab::cpu
