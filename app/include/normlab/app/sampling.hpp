#pragma once
// Text from a trained checkpoint, token by token with the KV cache
// (train-<variant> --sample): bytes for a byte-level model, else through the
// SentencePiece model its tokens came from.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "normlab/core/error.hpp"
#include "normlab/io/safetensors.hpp"
#include "normlab/optim/any_optimizer.hpp"
#include "normlab/train/checkpoint.hpp"
#include "normlab/train/data.hpp"
#include "normlab/app/run_options.hpp"
#include "normlab/app/tokenizer.hpp"

namespace normlab {

// Generates text from a checkpoint with the KV cache; returns the text.
template <class Tag>
std::string run_sampling(const SampleOptions& s) {
  using Model = typename Tag::template model<float>;
  const auto f = io::SafetensorsFile::open(s.ckpt);
  // The whole recorded config, so the model computes the function that was trained.
  const ModelConfig mc = checkpoint_config(f);
  const std::int64_t T = checkpoint_max_seq(f);
  if (T <= 0)
    throw Error(s.ckpt + ": the checkpoint does not record its context length (metadata max_seq or run.seq); "
                "save it with normlab::save_checkpoint, which records max_seq");
  // The tokenizer: --tokenizer, else the one the checkpoint names, else bytes.
  std::string tokenizer = s.tokenizer;
  if (tokenizer.empty() && f.metadata().count("data.tokenizer")) {
    tokenizer = f.metadata_value("data.tokenizer");
    if (!std::filesystem::exists(tokenizer))
      throw Error(s.ckpt + ": its tokens came from " + tokenizer + ", which no longer exists: give --tokenizer FILE");
  }
  std::optional<tok::Tokenizer> tk;
  if (!tokenizer.empty()) {
    tk = tok::Tokenizer::load(tokenizer);
    if (tk->vocab() != mc.vocab_size)
      throw Error(s.ckpt + ": the model's vocabulary is " + std::to_string(mc.vocab_size) + ", the tokenizer " +
                  tokenizer + " has " + std::to_string(tk->vocab()) + " pieces");
  } else if (mc.vocab_size != 256) {
    throw Error(s.ckpt + ": a model of vocabulary " + std::to_string(mc.vocab_size) +
                " needs the SentencePiece model of its tokens, and the checkpoint names none: give --tokenizer FILE");
  }
  mc.validate();
  if (T > (1 << 20) || mc.n_embd > (1 << 16) || mc.n_layer > 4096)
    throw Error(s.ckpt + ": metadata max_seq = " + std::to_string(T) + ", n_embd = " + std::to_string(mc.n_embd) +
                ", n_layer = " + std::to_string(mc.n_layer) + " is implausibly large");
  const double need = double(Model::memory_plan(mc, 1, T).total()), avail = detail::available_memory_bytes();
  if (avail > 0 && need > avail)
    throw Error(s.ckpt + ": the model it describes needs " + detail::gib(need) + ", more than the " +
                detail::gib(avail) + " available");
  Model model(mc, 1, T);
  // No optimizer state is read; the type is the one training's loader already
  // instantiates for this model (model_adapter.hpp), so sampling adds no second loader.
  load_checkpoint(f, model, static_cast<AnyOptimizer<float, typename Model::backend>*>(nullptr));
  if (s.temperature < 0) throw Error("--temperature must be >= 0");
  const std::vector<std::uint16_t> prompt = tk ? tk->encode(s.prompt) : data::encode_bytes(s.prompt);
  if (prompt.empty()) throw Error("--prompt must not be empty");
  if (std::int64_t(prompt.size()) >= T)
    throw Error("--prompt is " + std::to_string(prompt.size()) + " tokens; the model's context is " +
                std::to_string(T));
  auto cache = model.make_kv_cache();
  const float* logits = nullptr;
  for (std::uint16_t t : prompt) logits = model.decode_step(t, cache);
  std::mt19937_64 rng(s.seed);
  std::vector<std::uint16_t> out;
  std::vector<std::pair<float, int>> cand(static_cast<std::size_t>(mc.vocab_size));
  const std::int64_t room = T - std::int64_t(prompt.size());
  for (std::int64_t i = 0; i < std::min(s.tokens, room); ++i) {
    for (int j = 0; j < mc.vocab_size; ++j) cand[j] = {logits[j], j};
    std::sort(cand.begin(), cand.end(), [](auto& a, auto& b) { return a.first > b.first; });
    int next = cand[0].second;
    if (s.temperature > 0) {
      const std::size_t k = s.top_k > 0 ? std::min<std::size_t>(s.top_k, cand.size()) : cand.size();
      std::vector<double> w(k);
      for (std::size_t j = 0; j < k; ++j) w[j] = std::exp((cand[j].first - cand[0].first) / s.temperature);
      next = cand[std::discrete_distribution<std::size_t>(w.begin(), w.end())(rng)].second;
    }
    out.push_back(std::uint16_t(next));
    if (i + 1 < std::min(s.tokens, room)) logits = model.decode_step(next, cache);
  }
  if (s.tokens > room)
    std::fprintf(stderr, "sample: stopped after %lld tokens, the model's context (%lld) is full\n",
                 (long long)room, (long long)T);
  return s.prompt + (tk ? tk->decode(out) : data::decode_bytes(out));
}

}  // namespace normlab
