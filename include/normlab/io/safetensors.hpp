#pragma once
// normlab::io — reading and writing the safetensors format.
//
// Layout of a safetensors file:
//   [8 bytes]  little-endian uint64 N = length of the JSON header
//   [N bytes]  JSON object (may be padded with trailing spaces)
//   [rest]     data buffer; every tensor's "data_offsets" [begin, end) is
//              relative to the start of this buffer.
// The key "__metadata__" (optional) maps to an object of string -> string.
//
// SafetensorsFile validates the whole file when it is opened, so every later
// accessor can trust the offsets; all errors are normlab::Error with a message
// that starts with the file (or source) name and names the tensor at fault.
// SafetensorsWriter produces deterministic bytes (sorted names, padded header)
// and writes files atomically (temp file + fsync + rename).
//
// POSIX only (open/write/fsync are needed for the atomic write).
//
// The element types (io/dtype.hpp), the value conversions (io/codec.hpp) and the
// file calls (io/posix_file.hpp) are headers of their own; this one is the format.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "normlab/core/error.hpp"
#include "normlab/io/codec.hpp"
#include "normlab/io/dtype.hpp"
#include "normlab/io/posix_file.hpp"

namespace normlab::io {

// The metadata key under which normlab's writer records a hash of the data
// buffer, and the reader checks it: a byte changed on disk is refused by name
// rather than loaded as other weights. Files without it (another writer's, or
// normlab's from before) load as ever.
inline constexpr const char* kDataHashKey = "normlab.data_hash";

namespace detail {
// A 64-bit hash of a byte stream for detecting corruption (not an adversary):
// 8-byte words multiplied and rotated into the state, the tail and the length
// folded in, then a final avalanche; fed in pieces (the writer's tensors) or
// whole (the reader's buffer), the same value. 2.6 GB/s on one core (Intel Xeon).
class DataHash {
 public:
  void update(const std::uint8_t* p, std::size_t n) {
    length_ += n;
    while (n > 0 && fill_ > 0) {  // complete a word left from the last piece
      word_ |= std::uint64_t(*p++) << (8 * fill_);
      --n;
      if (++fill_ == 8) mix(std::exchange(word_, 0)), fill_ = 0;
    }
    for (; n >= 8; p += 8, n -= 8) {
      std::uint64_t w;
      std::memcpy(&w, p, 8);
      mix(w);
    }
    for (; n > 0; --n) word_ |= std::uint64_t(*p++) << (8 * fill_++);
  }
  std::string text() const {
    std::uint64_t h = h_;
    h = rotl(h ^ (word_ * k1), 31) * k2;  // the tail (zero when the length is a multiple of 8)
    h ^= length_;
    h ^= h >> 33;
    h *= k1;
    h ^= h >> 29;
    static const char* digits = "0123456789abcdef";
    std::string s = "h64:";
    for (int b = 60; b >= 0; b -= 4) s += digits[(h >> b) & 15];
    return s;
  }

 private:
  static constexpr std::uint64_t k1 = 0x9E3779B97F4A7C15ull, k2 = 0xC2B2AE3D27D4EB4Full;
  static std::uint64_t rotl(std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
  void mix(std::uint64_t w) { h_ = rotl(h_ ^ (w * k1), 31) * k2; }
  std::uint64_t h_ = k2, word_ = 0, length_ = 0;
  int fill_ = 0;
};
}  // namespace detail

// ---------------------------------------------------------------------------
// Reader
// ---------------------------------------------------------------------------

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::size_t begin = 0, end = 0;  // byte range within the data buffer
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (std::int64_t d : shape) n *= d;
    return n;
  }
};

class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::filesystem::path& path) {
    return from_bytes(detail::read_whole_file(path), path.string());
  }
  static SafetensorsFile from_bytes(std::vector<std::uint8_t> bytes, std::string source_name) {
    SafetensorsFile f;
    f.source_ = std::move(source_name);
    f.bytes_ = std::move(bytes);
    f.parse();
    return f;
  }

  const std::string& source() const { return source_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  std::string metadata_value(const std::string& key) const {
    auto it = metadata_.find(key);
    if (it == metadata_.end()) fail("missing metadata key '" + key + "'");
    return it->second;
  }

  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }

  const TensorInfo& info(const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) fail("missing tensor '" + name + "'");
    return it->second;
  }

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    out.reserve(tensors_.size());
    for (const auto& kv : tensors_) out.push_back(kv.first);  // std::map: already sorted
    return out;
  }

  template <class T>
  std::vector<T> read(const std::string& name) const {
    static_assert(Element<T>, "read<T>: unsupported element type");
    const TensorInfo& ti = info(name);
    std::vector<T> out(static_cast<std::size_t>(ti.numel()));
    if constexpr (std::same_as<T, bool>) {
      // std::vector<bool> has no contiguous storage; decode via a plain array.
      std::unique_ptr<bool[]> buf(new bool[out.size()]);
      detail::decode_into(ti.dtype, tensor_data(ti), std::span<bool>(buf.get(), out.size()), where(name));
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = buf[i];
    } else {
      detail::decode_into(ti.dtype, tensor_data(ti), std::span<T>(out), where(name));
    }
    return out;
  }

  template <class T>
  void read_into(const std::string& name, const std::vector<std::int64_t>& expected_shape,
                 std::span<T> out) const {
    static_assert(Element<std::remove_const_t<T>> && !std::is_const_v<T>, "read_into: unsupported element type");
    const TensorInfo& ti = info(name);
    if (ti.shape != expected_shape)
      fail(detail::quoted(name) + ": shape mismatch: expected " + shape_string(expected_shape) + ", file has " +
           shape_string(ti.shape));
    if (out.size() != static_cast<std::size_t>(ti.numel()))
      fail(detail::quoted(name) + ": output buffer has " + std::to_string(out.size()) + " elements, tensor has " +
           std::to_string(ti.numel()));
    detail::decode_into(ti.dtype, tensor_data(ti), out, where(name));
  }

 private:
  SafetensorsFile() = default;

  [[noreturn]] void fail(const std::string& msg) const { throw Error(source_ + ": " + msg); }
  std::string where(const std::string& name) const { return source_ + ": " + detail::quoted(name); }
  const std::uint8_t* tensor_data(const TensorInfo& ti) const { return bytes_.data() + data_start_ + ti.begin; }

  // Largest header accepted; same limit as the reference implementation.
  // Guards against allocating/parsing absurd headers from corrupt files.
  static constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

  void parse();  // defined below (compiled once under NORMLAB_PREBUILT_IO)

  void parse_metadata(const nlohmann::json& m) {
    if (!m.is_object()) fail("__metadata__ is not a JSON object");
    for (const auto& [k, v] : m.items()) {
      if (!v.is_string()) fail("metadata value for key '" + k + "' is not a string");
      metadata_.emplace(k, v.get<std::string>());
    }
  }

  TensorInfo parse_entry(const std::string& name, const nlohmann::json& e, std::size_t data_size) const {
    const std::string t = detail::quoted(name);
    if (!e.is_object()) fail(t + ": header entry is not a JSON object");

    TensorInfo ti;
    ti.name = name;

    auto dt = e.find("dtype");
    if (dt == e.end()) fail(t + ": missing \"dtype\"");
    if (!dt->is_string()) fail(t + ": \"dtype\" is not a string");
    const auto parsed = parse_dtype(dt->get<std::string>());
    if (!parsed) fail(t + ": unknown dtype '" + dt->get<std::string>() + "'");
    ti.dtype = *parsed;

    auto sh = e.find("shape");
    if (sh == e.end()) fail(t + ": missing \"shape\"");
    if (!sh->is_array()) fail(t + ": \"shape\" is not an array");
    for (const auto& d : *sh) {
      if (!d.is_number_integer()) fail(t + ": shape " + sh->dump() + " contains a non-integer dimension");
      if (d.is_number_unsigned()) {
        const auto u = d.get<std::uint64_t>();
        if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
          fail(t + ": shape dimension " + std::to_string(u) + " is too large");
        ti.shape.push_back(static_cast<std::int64_t>(u));
      } else {
        const auto s = d.get<std::int64_t>();
        if (s < 0) fail(t + ": shape " + sh->dump() + " has a negative dimension");
        ti.shape.push_back(s);
      }
    }

    auto off = e.find("data_offsets");
    if (off == e.end()) fail(t + ": missing \"data_offsets\"");
    auto non_negative = [](const nlohmann::json& j) -> std::optional<std::uint64_t> {
      if (j.is_number_unsigned()) return j.get<std::uint64_t>();
      if (j.is_number_integer() && j.get<std::int64_t>() >= 0) return static_cast<std::uint64_t>(j.get<std::int64_t>());
      return std::nullopt;
    };
    if (!off->is_array() || off->size() != 2 || !non_negative((*off)[0]) || !non_negative((*off)[1]))
      fail(t + ": \"data_offsets\" must be two non-negative integers, got " + off->dump());
    const std::uint64_t begin = *non_negative((*off)[0]);
    const std::uint64_t end = *non_negative((*off)[1]);
    if (begin > end)
      fail(t + ": data_offsets begin " + std::to_string(begin) + " is after end " + std::to_string(end));
    if (end > data_size)
      fail(t + ": offsets out of range: [" + std::to_string(begin) + ", " + std::to_string(end) +
           ") but the data buffer has " + std::to_string(data_size) + " bytes");
    ti.begin = static_cast<std::size_t>(begin);
    ti.end = static_cast<std::size_t>(end);

    const auto numel = detail::checked_numel(ti.shape);
    if (!numel) fail(t + ": element count of shape " + shape_string(ti.shape) + " overflows");
    const auto nbytes = detail::checked_mul(static_cast<std::size_t>(*numel), dtype_size(ti.dtype));
    if (!nbytes) fail(t + ": byte size of shape " + shape_string(ti.shape) + " overflows");
    if (*nbytes != ti.end - ti.begin)
      fail(t + ": byte size " + std::to_string(ti.end - ti.begin) + " from data_offsets does not match shape " +
           shape_string(ti.shape) + " x " + dtype_name(ti.dtype) + " (" + std::to_string(*nbytes) + " bytes)");
    return ti;
  }

  // Tensors must tile the data buffer exactly: no overlaps (which would alias
  // two tensors) and no holes (unexplained bytes usually mean corruption).
  void check_coverage(std::size_t data_size) const {
    std::vector<const TensorInfo*> order;
    order.reserve(tensors_.size());
    for (const auto& kv : tensors_) order.push_back(&kv.second);
    std::sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) {
      return std::tie(a->begin, a->end, a->name) < std::tie(b->begin, b->end, b->name);
    });
    std::size_t cursor = 0;              // end of the furthest tensor seen so far
    const TensorInfo* last = nullptr;    // the tensor that ends at `cursor`
    for (const TensorInfo* ti : order) {
      if (ti->begin < cursor)
        fail(detail::quoted(ti->name) + " [" + std::to_string(ti->begin) + ", " + std::to_string(ti->end) +
             ") overlaps " + detail::quoted(last->name) + " [" + std::to_string(last->begin) + ", " +
             std::to_string(last->end) + ")");
      if (ti->begin > cursor)
        fail("hole in data buffer: bytes [" + std::to_string(cursor) + ", " + std::to_string(ti->begin) +
             ") before " + detail::quoted(ti->name) + " are not covered by any tensor");
      cursor = ti->end;
      last = ti;
    }
    if (cursor != data_size)
      fail("hole in data buffer: bytes [" + std::to_string(cursor) + ", " + std::to_string(data_size) +
           ") at the end are not covered by any tensor");
  }

  std::string source_;
  std::vector<std::uint8_t> bytes_;
  std::size_t data_start_ = 0;  // offset of the data buffer within bytes_
  std::map<std::string, std::string> metadata_;
  std::map<std::string, TensorInfo> tensors_;
};

// ---------------------------------------------------------------------------
// Writer
// ---------------------------------------------------------------------------

class SafetensorsWriter {
 public:
  void set_metadata(const std::string& key, const std::string& value) {
    check_utf8(key, "metadata key");
    check_utf8(value, "metadata value for key '" + key + "'");
    metadata_[key] = value;
  }

  template <class T>
  void add(const std::string& name, const std::vector<std::int64_t>& shape, std::span<const T> data,
           std::optional<DType> stored = std::nullopt) {
    static_assert(Element<T>, "add<T>: unsupported element type");
    const std::string t = detail::quoted(name);
    if (name == "__metadata__") throw Error("safetensors writer: '__metadata__' is reserved and cannot name a tensor");
    check_utf8(name, "tensor name");
    if (tensors_.count(name)) throw Error("safetensors writer: " + t + " added twice");
    const auto numel = detail::checked_numel(shape);
    if (!numel) throw Error("safetensors writer: " + t + ": invalid shape " + shape_string(shape));
    if (static_cast<std::uint64_t>(*numel) != data.size())
      throw Error("safetensors writer: " + t + ": shape " + shape_string(shape) + " needs " + std::to_string(*numel) +
                  " elements, got " + std::to_string(data.size()));
    Entry e;
    e.dtype = stored.value_or(dtype_of<T>());
    e.shape = shape;
    e.bytes.reserve(data.size() * dtype_size(e.dtype));
    detail::encode_into(e.dtype, data, e.bytes, "safetensors writer: " + t);
    tensors_.emplace(name, std::move(e));
  }

  std::vector<std::uint8_t> to_bytes() const;  // defined below

  void write_atomic(const std::filesystem::path& path) const {
    const std::vector<std::uint8_t> bytes = to_bytes();
    detail::write_file_atomic(path, bytes);
  }

 private:
  struct Entry {
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape;
    std::vector<std::uint8_t> bytes;  // already converted to `dtype`
  };

  // JSON strings must be valid UTF-8; reject bad names now rather than when
  // to_bytes() is called far away from the offending add().
  static void check_utf8(const std::string& s, const std::string& what);  // defined below

  std::map<std::string, std::string> metadata_;
  std::map<std::string, Entry> tensors_;
};

// The parts that instantiate nlohmann-json's parser and serializer. Under
// NORMLAB_PREBUILT_IO (set by the normlab_cpu_ops library for what links it)
// they are compiled once, in src/io.cpp; otherwise here, inline (header-only).
#if !defined(NORMLAB_PREBUILT_IO) || defined(NORMLAB_IO_IMPLEMENTATION)
#ifdef NORMLAB_IO_IMPLEMENTATION
#define NORMLAB_IO_FN
#else
#define NORMLAB_IO_FN inline
#endif
NORMLAB_IO_FN void SafetensorsFile::parse() {
  using nlohmann::json;
  if (bytes_.size() < 8)
    fail("truncated file: " + std::to_string(bytes_.size()) + " bytes, need at least 8 for the header length");
  std::uint64_t n = 0;
  std::memcpy(&n, bytes_.data(), 8);
  if (n > bytes_.size() - 8) {
    // A text file or other format reads as an absurd length: say what it likely is.
    if (n > (std::uint64_t(1) << 40))
      fail("not a safetensors file: its first 8 bytes are not a plausible header length (they read as more "
           "than 1 TiB, the file has " + std::to_string(bytes_.size()) + " bytes)");
    fail("header length " + std::to_string(n) + " is beyond the file size (" + std::to_string(bytes_.size()) +
         " bytes): truncated or not a safetensors file");
  }
  if (n > kMaxHeaderBytes)
    fail("header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(kMaxHeaderBytes) +
         " bytes");
  data_start_ = 8 + static_cast<std::size_t>(n);
  const std::size_t data_size = bytes_.size() - data_start_;

  // Duplicate top-level keys would silently shadow each other in the parsed
  // object, so catch them during parsing (top-level keys are at depth 1).
  std::set<std::string> seen;
  std::optional<std::string> duplicate;
  auto on_event = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::key && depth == 1 && !seen.insert(parsed.get<std::string>()).second &&
        !duplicate)
      duplicate = parsed.get<std::string>();
    return true;
  };
  json header;
  try {
    const auto* first = reinterpret_cast<const char*>(bytes_.data() + 8);
    header = json::parse(first, first + n, on_event);
  } catch (const json::exception& e) {
    fail(std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail("header is not a JSON object");
  if (duplicate) fail("header lists '" + *duplicate + "' more than once");

  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      parse_metadata(value);
      continue;
    }
    tensors_.emplace(key, parse_entry(key, value, data_size));
  }
  check_coverage(data_size);
  if (const auto it = metadata_.find(kDataHashKey); it != metadata_.end()) {
    detail::DataHash hash;
    hash.update(bytes_.data() + data_start_, data_size);
    const std::string got = hash.text();
    if (got != it->second)
      fail("the tensor data does not match the hash its header recorded when it was written (" +
           std::string(kDataHashKey) + " " + it->second + ", the data now hashes to " + got +
           "): the file was changed or damaged after it was written");
  }
}

NORMLAB_IO_FN std::vector<std::uint8_t> SafetensorsWriter::to_bytes() const {
  using nlohmann::json;
  // nlohmann::json objects are std::map-backed, so keys (and hence the
  // header text) come out sorted; offsets are assigned in the same order.
  json header = json::object();
  detail::DataHash hash;  // over the data buffer: the tensors in the header's (sorted) order
  for (const auto& kv : tensors_) hash.update(kv.second.bytes.data(), kv.second.bytes.size());
  // Recomputed on every write: metadata copied from another file never carries its hash over.
  std::map<std::string, std::string> metadata = metadata_;
  metadata[kDataHashKey] = hash.text();
  header["__metadata__"] = metadata;
  std::size_t offset = 0;
  for (const auto& [name, e] : tensors_) {
    header[name] = json{{"dtype", dtype_name(e.dtype)},
                        {"shape", e.shape},
                        {"data_offsets", json::array({offset, offset + e.bytes.size()})}};
    offset += e.bytes.size();
  }
  std::string text = header.dump();
  // Pad so the data buffer starts 8-byte aligned (8 + N with N % 8 == 0).
  text.append((8 - text.size() % 8) % 8, ' ');

  std::vector<std::uint8_t> out;
  out.reserve(8 + text.size() + offset);
  const std::uint64_t n = text.size();
  out.resize(8);
  std::memcpy(out.data(), &n, 8);
  out.insert(out.end(), text.begin(), text.end());
  for (const auto& kv : tensors_) out.insert(out.end(), kv.second.bytes.begin(), kv.second.bytes.end());
  return out;
}

NORMLAB_IO_FN void SafetensorsWriter::check_utf8(const std::string& s, const std::string& what) {
  try {
    (void)nlohmann::json(s).dump();
  } catch (const nlohmann::json::exception&) {
    throw Error("safetensors writer: " + what + " is not valid UTF-8");
  }
}
#undef NORMLAB_IO_FN
#endif

}  // namespace normlab::io
