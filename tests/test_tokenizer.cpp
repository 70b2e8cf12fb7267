// The SentencePiece tokenizer (app/tokenizer.hpp): exact round trips, the
// vocabulary it was asked for, subword compression, and errors that name the
// file at fault. Skipped (exit 77) only in a build without SentencePiece.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "normlab/app/tokenizer.hpp"
#include "normlab/core/error.hpp"

using namespace normlab;

namespace {

void skip_without_sentencepiece() {
  if (!tok::available()) {
    std::fprintf(stderr, "SKIP: this build has no SentencePiece (libsentencepiece-dev)\n");
    std::exit(77);
  }
}

// A made-up language of 60 words in sentences and lines, deterministic: enough
// repetition for BPE to learn whole words, nothing read from disk.
std::string made_up_text(std::uint64_t seed, int lines) {
  const char* syll[] = {"ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "po", "de", "an", "or"};
  std::mt19937_64 rng(seed);
  std::vector<std::string> words;
  for (int w = 0; w < 60; ++w) {
    std::string s;
    for (int k = 0, n = 1 + int(rng() % 3); k < n; ++k) s += syll[rng() % 12];
    words.push_back(s);
  }
  std::string text;
  for (int l = 0; l < lines; ++l) {
    for (int w = 0, n = 4 + int(rng() % 9); w < n; ++w) {
      if (w) text += (rng() % 11 == 0) ? "  " : " ";  // runs of spaces must survive
      text += words[rng() % words.size()];
    }
    text += (l % 7 == 6) ? ".\n\n" : ".\n";  // empty lines too
  }
  return text;
}

}  // namespace

TEST_CASE("tokenizer: BPE round-trips every text exactly, unseen characters as bytes", "[tokenizer]") {
  skip_without_sentencepiece();
  const std::string train = made_up_text(1, 3000);
  const tok::Tokenizer t = tok::Tokenizer::from_serialized(tok::train_bpe(train, 400, 2, "made-up text"), "test model");
  CHECK(t.vocab() == 400);
  const std::vector<std::uint16_t> ids = t.encode(train);
  CHECK(t.decode(ids) == train);
  CHECK(*std::max_element(ids.begin(), ids.end()) < 400);
  // Whole words are merged: at least 2.5 bytes per token on the words it saw
  // (bytes alone would be 1.0; the words average ~4 bytes plus a space).
  CHECK(double(train.size()) / double(ids.size()) > 2.5);
  // Held out: other sentences, tabs, accents, CJK and an emoji (4-byte UTF-8),
  // no trailing newline, a leading space.
  // Appended piece by piece: GCC 12 reports a false -Wrestrict on "literal" + std::string&&.
  std::string held(" ");
  held.append(made_up_text(2, 20)).append("na\xC3\xAFve\tcaf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x99\x82 end");
  CHECK(t.decode(t.encode(held)) == held);
  CHECK(t.decode(t.encode("")).empty());
  CHECK(t.decode(t.encode("\n\n")) == "\n\n");
}

TEST_CASE("tokenizer: bad models and vocabularies are refused with the file named", "[tokenizer]") {
  skip_without_sentencepiece();
  const auto dir = std::filesystem::temp_directory_path() / "normlab_test_tokenizer";
  std::filesystem::create_directories(dir);
  const auto bogus = dir / "tokenizer.model";
  std::ofstream(bogus) << "this is not a protobuf\n";
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  const std::string not_model = message([&] { tok::Tokenizer::load(bogus); });
  CHECK(not_model.find(bogus.string()) != std::string::npos);
  CHECK(not_model.find("not a SentencePiece model") != std::string::npos);
  const std::string missing = message([&] { tok::Tokenizer::load(dir / "absent.model"); });
  CHECK(missing.find("absent.model does not exist") != std::string::npos);
  // More pieces than a tiny text can make: SentencePiece's reason, named.
  const std::string too_many = message([] { tok::train_bpe("ab ab ab\n", 5000, 1, "tiny text"); });
  CHECK(too_many.find("tiny text") != std::string::npos);
  CHECK(too_many.find("5000") != std::string::npos);
  std::filesystem::remove_all(dir);
}
