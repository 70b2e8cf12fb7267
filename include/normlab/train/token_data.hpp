#pragma once
// TokenData, what every data source returns, and the helpers the sources and the
// samplers share (splitmix64, size and vocabulary checks, whole-file reads).
// Apart so each source includes only this, not the others.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "normlab/core/error.hpp"

namespace normlab::data {

struct TokenData {
  std::vector<std::uint16_t> train, val;  // token ids
  std::int64_t vocab_size = 256;
  std::string description;  // e.g. "brown corpus (data/brown.txt), 6.0M bytes"
  // The SentencePiece model the ids come from (its path); empty for bytes and
  // for shards without one.
  std::string tokenizer;
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

}  // namespace normlab::data
