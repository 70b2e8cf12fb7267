// normlab-tokenize: subword tokens for the trainers. Splits a UTF-8 text into
// training and validation parts (at a line boundary), trains a SentencePiece
// BPE model on the training part only, and writes DIR/tokenizer.model,
// DIR/train.bin and DIR/val.bin (little-endian uint16, the loader's format):
//   normlab-tokenize --input corpus.txt --vocab 4096 --out data/bpe4096
//   train-ngpt --data data/bpe4096 ...      (the vocabulary is read from DIR)
#include <cstdio>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "normlab/app/cli.hpp"
#include "normlab/app/tokenizer.hpp"
#include "normlab/core/error.hpp"
#include "normlab/io/posix_file.hpp"
#include "normlab/train/token_data.hpp"

namespace {
using normlab::Error;

// The first byte offset where `s` stops being UTF-8, or npos.
std::size_t invalid_utf8_at(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return i;
    for (int k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return i;
    i += n;
  }
  return std::string_view::npos;
}

// Where validation starts: the first line that begins at or after the wanted
// fraction of the bytes (else the last line break before it, else the nearest
// character boundary), so no line is split between the two parts.
std::size_t split_point(std::string_view text, double val_fraction) {
  const auto want = static_cast<std::size_t>(double(text.size()) * (1.0 - val_fraction));
  if (const std::size_t nl = text.find('\n', want == 0 ? 0 : want - 1); nl != std::string_view::npos && nl + 1 < text.size())
    return nl + 1;
  if (const std::size_t nl = text.rfind('\n', want); nl != std::string_view::npos && nl > 0) return nl + 1;
  std::size_t cut = want;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) >> 6) == 0x2) --cut;
  return cut;
}

void write_tokens(const std::filesystem::path& path, const std::vector<std::uint16_t>& ids) {
  std::vector<std::uint8_t> bytes(ids.size() * 2);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    bytes[2 * i] = static_cast<std::uint8_t>(ids[i] & 0xFF);
    bytes[2 * i + 1] = static_cast<std::uint8_t>(ids[i] >> 8);
  }
  normlab::io::detail::write_file_atomic(path, bytes);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace normlab;
  CLI::App app{"Trains a SentencePiece BPE tokenizer on a text's training split and writes the token files."};
  std::string input, out;
  std::int64_t vocab = 4096;
  double val_fraction = 0.1;
  app.add_option("--input", input, "a UTF-8 text file")->required();
  app.add_option("--out", out, "directory for tokenizer.model, train.bin and val.bin (created if missing)")->required();
  app.add_option("--vocab", vocab, "pieces in the vocabulary: 260 (the 256 byte pieces, unk and a few merges) "
                                   "to 65536 (uint16 ids)")
      ->capture_default_str()->check(cli::integer(260, 65536));
  app.add_option("--val-fraction", val_fraction, "the text's last fraction, from a line start, kept for validation")
      ->capture_default_str()->check(cli::real(0, true, 0.5));
  if (const auto rc = cli::parse(app, argc, argv)) return *rc;
  try {
    if (!tok::available()) tok::train_bpe("", vocab, 1, "normlab-tokenize");  // throws, saying what to install
    const std::string text = data::detail::read_file_bytes(input, "--input");
    if (text.empty()) throw Error("--input " + input + " is empty");
    if (const std::size_t bad = invalid_utf8_at(text); bad != std::string_view::npos)
      throw Error("--input " + input + " is not UTF-8 text (byte " + std::to_string(bad) + ")");
    const std::size_t cut = split_point(text, val_fraction);
    const std::string_view all(text), train_text = all.substr(0, cut), val_text = all.substr(cut);
    if (train_text.find_first_not_of(" \t\r\n") == std::string_view::npos ||
        val_text.find_first_not_of(" \t\r\n") == std::string_view::npos)
      throw Error("--input " + input + " (" + std::to_string(text.size()) + " bytes) leaves an empty " +
                  (cut == 0 || train_text.find_first_not_of(" \t\r\n") == std::string_view::npos ? "training"
                                                                                                  : "validation") +
                  " part at --val-fraction " + std::to_string(val_fraction));
    const int threads = int(std::max(1u, std::thread::hardware_concurrency()));
    std::fprintf(stderr, "tokenize: training a %lld-piece BPE model on %zu bytes of %s\n", (long long)vocab,
                 train_text.size(), input.c_str());
    const std::string model = tok::train_bpe(train_text, vocab, threads, "--input " + input);
    const tok::Tokenizer t = tok::Tokenizer::from_serialized(model, "the trained model");
    const std::vector<std::uint16_t> train = t.encode(train_text), val = t.encode(val_text);
    // The trained model must give back the text it encodes, byte for byte.
    if (t.decode(val) != val_text) throw Error("--input " + input + ": the validation text does not round-trip");
    const std::filesystem::path dir(out);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw Error("--out " + out + ": cannot create the directory: " + ec.message());
    write_tokens(dir / "train.bin", train);
    write_tokens(dir / "val.bin", val);
    io::detail::write_file_atomic(dir / tok::kModelFile,
                          {reinterpret_cast<const std::uint8_t*>(model.data()), model.size()});
    std::printf("tokenize: %s: %zu + %zu bytes -> %zu train + %zu val tokens (%.2f bytes/token), vocab %lld\n",
                input.c_str(), train_text.size(), val_text.size(), train.size(), val.size(),
                double(text.size()) / double(train.size() + val.size()), (long long)t.vocab());
    std::printf("tokenize: wrote %s, train.bin, val.bin in %s\n", tok::kModelFile, out.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "normlab-tokenize: %s\n", e.what());
    return 2;
  }
}
