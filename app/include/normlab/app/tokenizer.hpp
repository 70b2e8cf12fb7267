#pragma once
// Subword tokens through SentencePiece (Debian's libsentencepiece-dev): a BPE
// model trained on a text's training split, and exact encoding and decoding
// with it (decode(encode(text)) == text: identity normalization, whitespace
// kept, characters outside the vocabulary as their UTF-8 bytes). Header-only
// like the rest of the app layer; CMake defines NORMLAB_HAVE_SENTENCEPIECE and
// links the library where it is installed. Built without it, every function
// throws an Error saying how to get it. Only this header sees SentencePiece.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "normlab/core/error.hpp"

#ifdef NORMLAB_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#endif

namespace normlab::tok {

// The file a token directory's model lives in, beside train.bin and val.bin.
inline constexpr const char* kModelFile = "tokenizer.model";

class Tokenizer {
 public:
  // A .model file; an Error names the file when it is missing or is not a
  // SentencePiece model.
  static Tokenizer load(const std::filesystem::path& model_file);
  static Tokenizer from_serialized(const std::string& model, const std::string& what);

  std::int64_t vocab() const;
  const std::string& source() const { return source_; }
  // Line by line, each '\n' as the newline's byte piece: memory stays bounded
  // by the longest line, and the ids are those of the whole text.
  std::vector<std::uint16_t> encode(std::string_view text) const;
  std::string decode(std::span<const std::uint16_t> ids) const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
  std::string source_;
};

// Whether this build has SentencePiece.
bool available();

// Trains a BPE model of `vocab` pieces on the lines of `text` and returns it
// serialized (the bytes of a .model file). `what` names the text in errors.
std::string train_bpe(std::string_view text, std::int64_t vocab, int threads, const std::string& what);

#ifdef NORMLAB_HAVE_SENTENCEPIECE

namespace detail {

// The lines of a text, without their '\n', for the trainer.
class LineIterator final : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(std::string_view text) : text_(text) { advance(); }
  bool done() const override { return done_; }
  void Next() override { advance(); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void advance() {
    // Empty lines carry nothing to learn: skip them.
    while (pos_ < text_.size()) {
      std::size_t end = text_.find('\n', pos_);
      if (end == std::string_view::npos) end = text_.size();
      line_.assign(text_.substr(pos_, end - pos_));
      pos_ = end + 1;
      if (!line_.empty()) return;
    }
    done_ = true;
  }
  std::string_view text_;
  std::size_t pos_ = 0;
  std::string line_;
  bool done_ = false;
};

}  // namespace detail

struct Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
  int newline = -1;
};

inline bool available() { return true; }

inline std::string train_bpe(std::string_view text, std::int64_t vocab, int threads, const std::string& what) {
  // Exact round trips: no normalization, whitespace as written (no dummy
  // prefix, runs of spaces kept), characters outside the vocabulary as their
  // UTF-8 bytes. One id (unk, 0) is reserved; no bos/eos/pad ids.
  const std::unordered_map<std::string, std::string> spec = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(vocab)},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"byte_fallback", "true"},
      {"unk_id", "0"},
      {"bos_id", "-1"},
      {"eos_id", "-1"},
      {"pad_id", "-1"},
      {"num_threads", std::to_string(std::max(1, threads))},
      {"minloglevel", "2"},  // errors come back as the Status
  };
  detail::LineIterator lines(text);
  std::string model;
  const auto st = sentencepiece::SentencePieceTrainer::Train(spec, &lines, &model);
  if (!st.ok()) throw Error(what + ": SentencePiece could not train a " + std::to_string(vocab) + "-piece BPE model: " + st.ToString());
  return model;
}

namespace detail {
inline std::shared_ptr<Tokenizer::Impl> finish(std::shared_ptr<Tokenizer::Impl> impl, const std::string& what) {
  impl->newline = impl->sp.PieceToId("<0x0A>");
  if (impl->sp.IsUnknown(impl->newline))
    throw Error(what + ": the SentencePiece model has no byte pieces (it was not trained with byte_fallback, as "
                       "normlab-tokenize trains), so it cannot encode every text exactly");
  if (impl->sp.GetPieceSize() > 65536)
    throw Error(what + ": the SentencePiece model has " + std::to_string(impl->sp.GetPieceSize()) +
                " pieces, more than uint16 token ids hold (65536)");
  return impl;
}
}  // namespace detail

inline Tokenizer Tokenizer::load(const std::filesystem::path& model_file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(model_file, ec))
    throw Error("tokenizer " + model_file.string() + " does not exist (a SentencePiece model, as normlab-tokenize writes)");
  auto impl = std::make_shared<Impl>();
  if (const auto st = impl->sp.Load(model_file.string()); !st.ok())
    throw Error("tokenizer " + model_file.string() + " is not a SentencePiece model: " + st.ToString());
  Tokenizer t;
  t.impl_ = detail::finish(std::move(impl), "tokenizer " + model_file.string());
  t.source_ = model_file.string();
  return t;
}

inline Tokenizer Tokenizer::from_serialized(const std::string& model, const std::string& what) {
  auto impl = std::make_shared<Impl>();
  if (const auto st = impl->sp.LoadFromSerializedProto(model); !st.ok())
    throw Error(what + ": not a SentencePiece model: " + st.ToString());
  Tokenizer t;
  t.impl_ = detail::finish(std::move(impl), what);
  t.source_ = what;
  return t;
}

inline std::int64_t Tokenizer::vocab() const { return impl_->sp.GetPieceSize(); }

inline std::vector<std::uint16_t> Tokenizer::encode(std::string_view text) const {
  std::vector<std::uint16_t> out;
  out.reserve(text.size() / 3);
  std::vector<int> ids;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    const bool newline = end != std::string_view::npos;
    if (!newline) end = text.size();
    if (end > pos) {
      if (const auto st = impl_->sp.Encode(text.substr(pos, end - pos), &ids); !st.ok())
        throw Error(source_ + ": cannot encode a line at byte " + std::to_string(pos) + ": " + st.ToString());
      for (int id : ids) out.push_back(static_cast<std::uint16_t>(id));
    }
    if (newline) out.push_back(static_cast<std::uint16_t>(impl_->newline));
    pos = end + 1;
  }
  return out;
}

inline std::string Tokenizer::decode(std::span<const std::uint16_t> ids) const {
  const std::vector<int> v(ids.begin(), ids.end());
  for (std::size_t i = 0; i < v.size(); ++i)
    if (v[i] >= impl_->sp.GetPieceSize())
      throw Error(source_ + ": token " + std::to_string(v[i]) + " at position " + std::to_string(i) +
                  " is outside the vocabulary of " + std::to_string(impl_->sp.GetPieceSize()));
  std::string text;
  if (const auto st = impl_->sp.Decode(v, &text); !st.ok()) throw Error(source_ + ": cannot decode: " + st.ToString());
  return text;
}

#else  // built without SentencePiece

struct Tokenizer::Impl {};

namespace detail {
[[noreturn]] inline void missing(const std::string& what) {
  throw Error(what + ": this build of normlab has no SentencePiece; install libsentencepiece-dev "
                     "(scripts/bootstrap.sh does) and configure again");
}
}  // namespace detail

inline bool available() { return false; }
inline std::string train_bpe(std::string_view, std::int64_t, int, const std::string& what) { detail::missing(what); }
inline Tokenizer Tokenizer::load(const std::filesystem::path& f) { detail::missing("tokenizer " + f.string()); }
inline Tokenizer Tokenizer::from_serialized(const std::string&, const std::string& what) { detail::missing(what); }
inline std::int64_t Tokenizer::vocab() const { detail::missing(source_); }
inline std::vector<std::uint16_t> Tokenizer::encode(std::string_view) const { detail::missing(source_); }
inline std::string Tokenizer::decode(std::span<const std::uint16_t>) const { detail::missing(source_); }

#endif

}  // namespace normlab::tok
