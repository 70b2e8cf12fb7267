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
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "normlab/core/error.hpp"

namespace normlab::io {

// Raw tensor bytes are memcpy'd straight into host values, which is only
// correct because the format is little-endian and so is the host.
static_assert(std::endian::native == std::endian::little,
              "normlab safetensors I/O assumes a little-endian host");

// ---------------------------------------------------------------------------
// Data types
// ---------------------------------------------------------------------------

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL };

inline constexpr DType kAllDTypes[] = {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64,
                                       DType::I32, DType::I16, DType::I8,  DType::U64,  DType::U32,
                                       DType::U16, DType::U8,  DType::BOOL};

inline std::size_t dtype_size(DType d) {
  switch (d) {
    case DType::F64: case DType::I64: case DType::U64: return 8;
    case DType::F32: case DType::I32: case DType::U32: return 4;
    case DType::F16: case DType::BF16: case DType::I16: case DType::U16: return 2;
    case DType::I8: case DType::U8: case DType::BOOL: return 1;
  }
  // Only reachable with a value cast from an out-of-range integer.
  throw Error("dtype_size: invalid DType value " + std::to_string(static_cast<int>(d)));
}

// Names exactly as they appear in the safetensors "dtype" field.
inline const char* dtype_name(DType d) {
  switch (d) {
    case DType::F64: return "F64";
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::I16: return "I16";
    case DType::I8: return "I8";
    case DType::U64: return "U64";
    case DType::U32: return "U32";
    case DType::U16: return "U16";
    case DType::U8: return "U8";
    case DType::BOOL: return "BOOL";
  }
  throw Error("dtype_name: invalid DType value " + std::to_string(static_cast<int>(d)));
}

inline std::optional<DType> parse_dtype(std::string_view s) {
  for (DType d : kAllDTypes)
    if (s == dtype_name(d)) return d;
  return std::nullopt;
}

// Host types that can be read from / written to a tensor. Character types are
// excluded on purpose: `char` has implementation-defined signedness and is
// almost always a mistake when used as a number.
template <class T>
concept Element =
    std::same_as<T, bool> || std::same_as<T, float> || std::same_as<T, double> ||
    (std::integral<T> && sizeof(T) <= 8 && !std::same_as<T, char> && !std::same_as<T, wchar_t> &&
     !std::same_as<T, char8_t> && !std::same_as<T, char16_t> && !std::same_as<T, char32_t>);

// Maps by size and signedness rather than by exact type so that e.g. both
// `long` and `long long` map to I64.
template <class T>
constexpr DType dtype_of() {
  static_assert(Element<T>, "dtype_of<T>: T must be bool, float, double or a 1/2/4/8-byte integer");
  if constexpr (std::same_as<T, bool>) return DType::BOOL;
  else if constexpr (std::same_as<T, double>) return DType::F64;
  else if constexpr (std::same_as<T, float>) return DType::F32;
  else if constexpr (std::is_signed_v<T>) {
    if constexpr (sizeof(T) == 8) return DType::I64;
    else if constexpr (sizeof(T) == 4) return DType::I32;
    else if constexpr (sizeof(T) == 2) return DType::I16;
    else return DType::I8;
  } else {
    if constexpr (sizeof(T) == 8) return DType::U64;
    else if constexpr (sizeof(T) == 4) return DType::U32;
    else if constexpr (sizeof(T) == 2) return DType::U16;
    else return DType::U8;
  }
}

// ---------------------------------------------------------------------------
// Half-precision conversions (bit-exact, no hardware support needed)
// ---------------------------------------------------------------------------

// bf16 is the top half of an IEEE float, so widening is a shift.
inline float bf16_to_float(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    // NaN: plain truncation could drop every payload bit and yield inf, so
    // keep sign + top payload bits and force the quiet bit.
    return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  }
  // Round to nearest, ties to even: add just under half an ulp, plus one more
  // when the kept lsb is odd. A carry into the exponent is exactly right
  // (including rounding the largest floats up to inf).
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

inline float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f)  // inf / NaN (payload kept in the top mantissa bits)
    return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {  // zero / subnormal: value = mant * 2^-24, exact in float
    const float v = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  // Normal: rebias the exponent from 15 to 127.
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline std::uint16_t float_to_f16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t fexp = (u >> 23) & 0xffu;
  const std::uint32_t mant = u & 0x7fffffu;

  if (fexp == 0xff) {
    if (mant == 0) return sign | 0x7c00u;  // inf
    // NaN: keep the top payload bits, force quiet so it can't become inf.
    return static_cast<std::uint16_t>(sign | 0x7e00u | (mant >> 13));
  }

  const int e = static_cast<int>(fexp) - 127 + 15;  // exponent in f16 bias
  if (e >= 31) return sign | 0x7c00u;              // too large even before rounding
  if (e <= 0) {
    // Result is subnormal (or zero). Values below 2^-25 (half the smallest
    // subnormal) round to zero; 2^-25 itself is a tie that rounds to even 0.
    if (e < -10) return sign;
    const std::uint32_t m = mant | 0x800000u;  // restore the implicit 1
    const int shift = 14 - e;                 // 14..24
    std::uint32_t half = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;  // may become 0x400 = min normal: correct
    return static_cast<std::uint16_t>(sign | half);
  }
  std::uint32_t h = (static_cast<std::uint32_t>(e) << 10) | (mant >> 13);
  const std::uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // carry into exponent / to inf is correct
  return static_cast<std::uint16_t>(sign | h);
}

namespace detail {

// double -> float with IEEE round-to-nearest-even, spelled out for values
// beyond the float range (a plain cast of those is undefined in C++).
inline float narrow_to_float(double d) {
  // 2^128 - 2^103 is the midpoint between FLT_MAX and 2^128; ties go to the
  // "even" 2^128, i.e. inf.
  constexpr double overflow = 0x1.ffffffp127;
  constexpr float inf = std::numeric_limits<float>::infinity();
  constexpr float flt_max = std::numeric_limits<float>::max();
  if (std::isfinite(d)) {
    if (std::fabs(d) >= overflow) return d > 0 ? inf : -inf;
    if (std::fabs(d) > static_cast<double>(flt_max)) return d > 0 ? flt_max : -flt_max;
  }
  return static_cast<float>(d);
}

// double -> float rounding to odd. Converting double -> float (RNE) -> half
// can round twice and land on the wrong neighbour at ties; rounding the first
// step to odd keeps a sticky bit so the final RNE step is exact.
inline float narrow_to_float_round_to_odd(double d) {
  if (std::isnan(d)) return static_cast<float>(d);
  // Finite values beyond the float range: the truncated value is FLT_MAX,
  // whose lsb is already odd; the later half rounding turns it into inf.
  constexpr float flt_max = std::numeric_limits<float>::max();
  if (std::isfinite(d) && std::fabs(d) > static_cast<double>(flt_max)) return d > 0 ? flt_max : -flt_max;
  const float f = static_cast<float>(d);
  if (static_cast<double>(f) == d) return f;  // exact (also covers +-inf)
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  // Sign-magnitude encoding: decrementing moves one ulp toward zero, giving
  // the truncated value when RNE rounded away from zero.
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) u -= 1;
  return std::bit_cast<float>(u | 1u);
}

// Converts `v` to Dst. Returns false when the value cannot be represented:
// integer overflow, NaN/inf or non-integral values into an integer type.
// Floating targets never fail (IEEE rounding / overflow to inf).
template <class Dst, class Src>
bool convert_value(Src v, Dst& out) {
  if constexpr (std::same_as<Dst, bool>) {
    out = (v != Src(0));
    return true;
  } else if constexpr (std::floating_point<Dst>) {
    if constexpr (std::same_as<Src, bool>) out = v ? Dst(1) : Dst(0);
    else if constexpr (std::same_as<Dst, float> && std::same_as<Src, double>) out = narrow_to_float(v);
    else out = static_cast<Dst>(v);
    return true;
  } else if constexpr (std::same_as<Src, bool>) {
    out = v ? Dst(1) : Dst(0);
    return true;
  } else if constexpr (std::integral<Src>) {
    if (!std::in_range<Dst>(v)) return false;
    out = static_cast<Dst>(v);
    return true;
  } else {
    // Floating -> integer: only exact integral values in range are accepted;
    // silently truncating 2.5 to 2 would hide a mismatched tensor.
    const double d = static_cast<double>(v);  // float -> double is exact
    if (!std::isfinite(d) || std::trunc(d) != d) return false;
    // Both bounds are powers of two (or 0), hence exact in double.
    const double lo = static_cast<double>(std::numeric_limits<Dst>::min());
    const double hi = std::ldexp(1.0, std::numeric_limits<Dst>::digits);  // max + 1
    if (d < lo || d >= hi) return false;
    out = static_cast<Dst>(d);
    return true;
  }
}

// Any element value -> float for storing as F16/BF16, rounding only once
// (exact for integers up to 2^53).
template <class T>
float to_float_for_half(T v) {
  if constexpr (std::same_as<T, bool>) return v ? 1.0f : 0.0f;
  else if constexpr (std::same_as<T, float>) return v;
  else return narrow_to_float_round_to_odd(static_cast<double>(v));
}

template <class T>
std::string value_string(T v) {
  std::ostringstream os;
  os.precision(17);
  if constexpr (std::same_as<T, bool>) os << (v ? "true" : "false");
  else os << +v;  // unary + prints 8-bit integers as numbers
  return os.str();
}

// Product of dims; nullopt for a negative dim or int64 overflow.
inline std::optional<std::int64_t> checked_numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d != 0 && n > std::numeric_limits<std::int64_t>::max() / d) return std::nullopt;
    n *= d;
  }
  return n;
}

inline std::optional<std::size_t> checked_mul(std::size_t a, std::size_t b) {
  if (a != 0 && b > std::numeric_limits<std::size_t>::max() / a) return std::nullopt;
  return a * b;
}

inline std::string quoted(const std::string& name) { return "tensor '" + name + "'"; }

// Decodes `out.size()` stored elements starting at `src` into `out`.
// `decode` maps the raw stored value to its natural host value.
template <class Stored, class Dst, class Decode>
void decode_loop(const std::uint8_t* src, std::span<Dst> out, DType stored, const std::string& where,
                 Decode decode) {
  for (std::size_t i = 0; i < out.size(); ++i) {
    Stored s;
    std::memcpy(&s, src + i * sizeof(Stored), sizeof(Stored));
    const auto v = decode(s);
    if (!convert_value(v, out[i]))
      throw Error(where + ": element " + std::to_string(i) + " (" + dtype_name(stored) + " value " +
                  value_string(v) + ") cannot be represented as " + dtype_name(dtype_of<Dst>()));
  }
}

template <class Dst>
void decode_into(DType dt, const std::uint8_t* src, std::span<Dst> out, const std::string& where) {
  auto same = [](auto v) { return v; };
  switch (dt) {
    case DType::F64: return decode_loop<double>(src, out, dt, where, same);
    case DType::F32: return decode_loop<float>(src, out, dt, where, same);
    case DType::F16: return decode_loop<std::uint16_t>(src, out, dt, where, f16_to_float);
    case DType::BF16: return decode_loop<std::uint16_t>(src, out, dt, where, bf16_to_float);
    case DType::I64: return decode_loop<std::int64_t>(src, out, dt, where, same);
    case DType::I32: return decode_loop<std::int32_t>(src, out, dt, where, same);
    case DType::I16: return decode_loop<std::int16_t>(src, out, dt, where, same);
    case DType::I8: return decode_loop<std::int8_t>(src, out, dt, where, same);
    case DType::U64: return decode_loop<std::uint64_t>(src, out, dt, where, same);
    case DType::U32: return decode_loop<std::uint32_t>(src, out, dt, where, same);
    case DType::U16: return decode_loop<std::uint16_t>(src, out, dt, where, same);
    case DType::U8: return decode_loop<std::uint8_t>(src, out, dt, where, same);
    case DType::BOOL: return decode_loop<std::uint8_t>(src, out, dt, where, [](std::uint8_t b) { return b != 0; });
  }
  throw Error(where + ": invalid DType value");
}

// Encodes `in` as `Stored` values appended to `out`. `encode(value, stored&)`
// returns false when the value cannot be represented.
template <class Stored, class T, class Encode>
void encode_loop(std::span<const T> in, std::vector<std::uint8_t>& out, DType dt, const std::string& where,
                 Encode encode) {
  const std::size_t start = out.size();
  out.resize(start + in.size() * sizeof(Stored));
  for (std::size_t i = 0; i < in.size(); ++i) {
    Stored s{};
    if (!encode(in[i], s))
      throw Error(where + ": element " + std::to_string(i) + " (value " + value_string(in[i]) +
                  ") cannot be represented as " + dtype_name(dt));
    std::memcpy(out.data() + start + i * sizeof(Stored), &s, sizeof(Stored));
  }
}

template <class T>
void encode_into(DType dt, std::span<const T> in, std::vector<std::uint8_t>& out, const std::string& where) {
  auto plain = [](T v, auto& s) { return convert_value(v, s); };
  switch (dt) {
    case DType::F64: return encode_loop<double>(in, out, dt, where, plain);
    case DType::F32: return encode_loop<float>(in, out, dt, where, plain);
    case DType::F16:
      return encode_loop<std::uint16_t>(in, out, dt, where, [](T v, std::uint16_t& s) {
        s = float_to_f16(to_float_for_half(v));
        return true;
      });
    case DType::BF16:
      return encode_loop<std::uint16_t>(in, out, dt, where, [](T v, std::uint16_t& s) {
        s = float_to_bf16(to_float_for_half(v));
        return true;
      });
    case DType::I64: return encode_loop<std::int64_t>(in, out, dt, where, plain);
    case DType::I32: return encode_loop<std::int32_t>(in, out, dt, where, plain);
    case DType::I16: return encode_loop<std::int16_t>(in, out, dt, where, plain);
    case DType::I8: return encode_loop<std::int8_t>(in, out, dt, where, plain);
    case DType::U64: return encode_loop<std::uint64_t>(in, out, dt, where, plain);
    case DType::U32: return encode_loop<std::uint32_t>(in, out, dt, where, plain);
    case DType::U16: return encode_loop<std::uint16_t>(in, out, dt, where, plain);
    case DType::U8: return encode_loop<std::uint8_t>(in, out, dt, where, plain);
    case DType::BOOL:
      return encode_loop<std::uint8_t>(in, out, dt, where, [](T v, std::uint8_t& s) {
        bool b = false;
        convert_value(v, b);
        s = b ? 1 : 0;
        return true;
      });
  }
  throw Error(where + ": invalid DType value");
}

inline std::string errno_string(int err) { return std::strerror(err); }

// Reads a whole regular file. Errors name the path and the OS reason.
inline std::vector<std::uint8_t> read_whole_file(const std::filesystem::path& path) {
  const std::string shown = path.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(shown + ": cannot open file: " + errno_string(errno));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(shown + ": cannot stat file: " + errno_string(errno));
  if (!S_ISREG(st.st_mode)) throw Error(shown + ": not a regular file");
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(shown + ": read failed: " + errno_string(errno));
    }
    if (n == 0) break;  // file shrank while reading; validation will report truncation
    done += static_cast<std::size_t>(n);
  }
  bytes.resize(done);
  return bytes;
}

// Writes `bytes` to `path` atomically: a reader sees either the old file or
// the complete new one, never a partial write. On failure the temp file is
// removed and any previous file at `path` is untouched.
inline void write_file_atomic(const std::filesystem::path& path, std::span<const std::uint8_t> bytes) {
  namespace fs = std::filesystem;
  const std::string shown = path.string();
  fs::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());  // same directory, so rename() is atomic

  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(shown + ": cannot create temporary file '" + tmp.string() + "': " + errno_string(errno));

  // Always throws: close + remove the temp file, then report.
  auto abandon = [&](const std::string& what, int err) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(shown + ": " + what + ": " + errno_string(err));
  };

  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      abandon("write failed", errno);
    }
    done += static_cast<std::size_t>(n);
  }
  // fsync before rename: otherwise a crash can leave the new name pointing
  // at an empty or partial file on some filesystems.
  if (::fsync(fd) != 0) abandon("fsync failed", errno);
  const int close_rc = ::close(fd);
  fd = -1;  // closed (even on error, per POSIX on Linux); don't close again
  if (close_rc != 0) abandon("close failed", errno);

  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    ::unlink(tmp.c_str());
    throw Error(shown + ": cannot rename temporary file into place: " + ec.message());
  }

  // fsync the directory so the rename itself survives a crash.
  fs::path dir = path.parent_path();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    throw Error(shown + ": file written, but cannot open directory to sync it: " + errno_string(errno));
  // EINVAL: the filesystem does not support syncing directories; nothing to do.
  if (::fsync(dfd) != 0 && errno != EINVAL) {
    const int err = errno;
    ::close(dfd);
    throw Error(shown + ": file written, but syncing the directory failed: " + errno_string(err));
  }
  ::close(dfd);
}

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

  void parse() {
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
  }

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

  std::vector<std::uint8_t> to_bytes() const {
    using nlohmann::json;
    // nlohmann::json objects are std::map-backed, so keys (and hence the
    // header text) come out sorted; offsets are assigned in the same order.
    json header = json::object();
    if (!metadata_.empty()) header["__metadata__"] = metadata_;
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
  static void check_utf8(const std::string& s, const std::string& what) {
    try {
      (void)nlohmann::json(s).dump();
    } catch (const nlohmann::json::exception&) {
      throw Error("safetensors writer: " + what + " is not valid UTF-8");
    }
  }

  std::map<std::string, std::string> metadata_;
  std::map<std::string, Entry> tensors_;
};

}  // namespace normlab::io
