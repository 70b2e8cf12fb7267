// Tests for normlab/io/safetensors.hpp: conversions, round trips, every
// malformed-input error, atomic writes and the golden GPT reference file.
#include "normlab/io/safetensors.hpp"
#include "temp_dir.hpp"

#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#ifndef NORMLAB_TEST_DATA_DIR
#error "NORMLAB_TEST_DATA_DIR must be defined (path to tests/data)"
#endif

using normlab::Error;
using namespace normlab::io;
using Catch::Contains;
using Catch::StartsWith;
namespace fs = std::filesystem;

namespace {

constexpr const char* kSrc = "bad.safetensors";

// Builds a safetensors byte image from a literal header and `data_size` zero bytes.
std::vector<std::uint8_t> make_file(const std::string& header, std::size_t data_size) {
  std::vector<std::uint8_t> out;
  out.reserve(8 + header.size() + data_size);
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(n >> (8 * i)));  // little-endian length
  out.insert(out.end(), header.begin(), header.end());
  out.resize(out.size() + data_size, 0);
  return out;
}

SafetensorsFile load(const std::string& header, std::size_t data_size) {
  return SafetensorsFile::from_bytes(make_file(header, data_size), kSrc);
}

// The names in a folder, sorted.
std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Checks that `h` is a correctly rounded (nearest, ties to even) encoding of
// the finite float `f`, given the decoder and the encoding of +inf. Computed
// in double, where all the values involved are exact.
template <class Decode>
void check_nearest(float f, std::uint16_t h, Decode decode, std::uint16_t inf_bits) {
  const double x = std::fabs(static_cast<double>(f));
  const std::uint16_t mag = h & 0x7fffu;
  INFO("f=" << f << " h=" << h);
  REQUIRE((h & 0x8000u) == (std::signbit(f) ? 0x8000u : 0u));
  // Overflow: inf exactly when |x| is at or beyond the midpoint between the
  // largest finite value and the next power of two (that tie goes to inf,
  // because the largest finite value has an odd mantissa).
  const double max_finite = decode(static_cast<std::uint16_t>(inf_bits - 1));
  const double threshold = max_finite + (max_finite - decode(static_cast<std::uint16_t>(inf_bits - 2))) / 2;
  if (mag == inf_bits) {
    REQUIRE(x >= threshold);
    return;
  }
  REQUIRE(x < threshold);
  const double got = decode(mag);
  for (int step : {-1, 1}) {
    if ((mag == 0 && step == -1) || (mag + step) == inf_bits) continue;
    const double other = decode(static_cast<std::uint16_t>(mag + step));
    INFO("neighbour=" << (mag + step));
    REQUIRE(std::fabs(got - x) <= std::fabs(other - x));
    if (std::fabs(got - x) == std::fabs(other - x)) REQUIRE((h & 1u) == 0);  // tie: even mantissa wins
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// dtypes and conversions
// ---------------------------------------------------------------------------

TEST_CASE("safetensors: dtype names, sizes and dtype_of", "[safetensors]") {
  for (DType d : kAllDTypes) {
    REQUIRE(parse_dtype(dtype_name(d)) == d);
  }
  REQUIRE_FALSE(parse_dtype("F8_E4M3").has_value());
  REQUIRE_FALSE(parse_dtype("f32").has_value());
  REQUIRE(dtype_size(DType::F64) == 8);
  REQUIRE(dtype_size(DType::BF16) == 2);
  REQUIRE(dtype_size(DType::BOOL) == 1);
  STATIC_REQUIRE(dtype_of<double>() == DType::F64);
  STATIC_REQUIRE(dtype_of<float>() == DType::F32);
  STATIC_REQUIRE(dtype_of<std::int64_t>() == DType::I64);
  STATIC_REQUIRE(dtype_of<long long>() == DType::I64);
  STATIC_REQUIRE(dtype_of<std::int32_t>() == DType::I32);
  STATIC_REQUIRE(dtype_of<std::int16_t>() == DType::I16);
  STATIC_REQUIRE(dtype_of<std::int8_t>() == DType::I8);
  STATIC_REQUIRE(dtype_of<std::uint64_t>() == DType::U64);
  STATIC_REQUIRE(dtype_of<std::uint32_t>() == DType::U32);
  STATIC_REQUIRE(dtype_of<std::uint16_t>() == DType::U16);
  STATIC_REQUIRE(dtype_of<std::uint8_t>() == DType::U8);
  STATIC_REQUIRE(dtype_of<bool>() == DType::BOOL);
}

TEST_CASE("safetensors: bf16 conversion accuracy, NaN and inf", "[safetensors]") {
  REQUIRE(float_to_bf16(1.0f) == 0x3f80);
  REQUIRE(float_to_bf16(-2.0f) == 0xc000);
  REQUIRE(bf16_to_float(0x3f80) == 1.0f);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (down).
  REQUIRE(float_to_bf16(1.0f + 0x1p-8f) == 0x3f80);
  // 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even): rounds up.
  REQUIRE(float_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82);
  // Just above the tie rounds up.
  REQUIRE(float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81);
  // inf, overflow to inf, NaN (including a NaN whose payload lives only in
  // the low bits, which naive truncation would turn into inf).
  const float inf = std::numeric_limits<float>::infinity();
  REQUIRE(float_to_bf16(inf) == 0x7f80);
  REQUIRE(float_to_bf16(-inf) == 0xff80);
  REQUIRE(std::isinf(bf16_to_float(0x7f80)));
  REQUIRE(float_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);
  REQUIRE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  REQUIRE(std::isnan(bf16_to_float(float_to_bf16(std::bit_cast<float>(0x7f800001u)))));
  REQUIRE(std::isnan(bf16_to_float(0x7fc0)));
  REQUIRE(std::signbit(bf16_to_float(float_to_bf16(-0.0f))));

  // Every bf16 value survives bf16 -> float -> bf16.
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_float(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) {
      REQUIRE(std::isnan(bf16_to_float(float_to_bf16(f))));
    } else {
      REQUIRE(float_to_bf16(f) == h);
    }
  }
  // Sweep floats: each result is the nearest bf16 (ties to even).
  for (std::uint64_t u = 0; u < (1ull << 32); u += 65537) {
    const float f = std::bit_cast<float>(static_cast<std::uint32_t>(u));
    if (!std::isfinite(f)) continue;
    check_nearest(f, float_to_bf16(f), bf16_to_float, 0x7f80);
  }
}

TEST_CASE("safetensors: f16 conversion accuracy, subnormals, NaN and inf", "[safetensors]") {
  const float inf = std::numeric_limits<float>::infinity();
  REQUIRE(float_to_f16(1.0f) == 0x3c00);
  REQUIRE(float_to_f16(-2.0f) == 0xc000);
  REQUIRE(float_to_f16(1.0f + 0x1p-11f) == 0x3c00);      // tie between 1 and 1+2^-10: even (down)
  REQUIRE(float_to_f16(1.0f + 3 * 0x1p-11f) == 0x3c02);  // tie between odd and even: up
  REQUIRE(float_to_f16(1.0f + 0x1p-11f + 0x1p-20f) == 0x3c01);
  REQUIRE(float_to_f16(65504.0f) == 0x7bff);       // largest finite
  REQUIRE(float_to_f16(65519.0f) == 0x7bff);       // below the midpoint
  REQUIRE(float_to_f16(65520.0f) == 0x7c00);       // midpoint: ties to even = inf
  REQUIRE(float_to_f16(1e10f) == 0x7c00);
  REQUIRE(float_to_f16(-inf) == 0xfc00);
  REQUIRE(float_to_f16(0x1p-14f) == 0x0400);       // smallest normal
  REQUIRE(float_to_f16(0x1p-24f) == 0x0001);       // smallest subnormal
  REQUIRE(float_to_f16(0x1p-25f) == 0x0000);       // tie between 0 and 2^-24: even = 0
  REQUIRE(float_to_f16(0x1.8p-25f) == 0x0001);     // above the tie
  REQUIRE(float_to_f16(0x1.8p-24f) == 0x0002);     // tie between 1 and 2 ulps: even = 2
  REQUIRE(float_to_f16(0x1p-30f) == 0x0000);
  REQUIRE(float_to_f16(-0x1p-30f) == 0x8000);      // underflow keeps the sign
  REQUIRE(float_to_f16(0x1.ffcp-15f) == 0x0400);   // largest subnormal + half ulp rounds to min normal
  REQUIRE(f16_to_float(0x0001) == 0x1p-24f);
  REQUIRE(f16_to_float(0x03ff) == 0x1.ff8p-15f);
  REQUIRE(f16_to_float(0x7bff) == 65504.0f);
  REQUIRE(std::isinf(f16_to_float(0x7c00)));
  REQUIRE(std::isnan(f16_to_float(0x7e00)));
  REQUIRE(std::isnan(f16_to_float(0x7c01)));       // signalling NaN stays NaN
  REQUIRE(std::isnan(f16_to_float(float_to_f16(std::numeric_limits<float>::quiet_NaN()))));
  REQUIRE(std::isnan(f16_to_float(float_to_f16(std::bit_cast<float>(0x7f800001u)))));
  REQUIRE(std::signbit(f16_to_float(float_to_f16(-0.0f))));

  // Every f16 value (normals, subnormals, zeros, infs) survives a round trip.
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_float(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) {
      REQUIRE(std::isnan(f16_to_float(float_to_f16(f))));
    } else {
      REQUIRE(float_to_f16(f) == h);
    }
  }
  // Sweep floats: each result is the nearest f16 (ties to even).
  for (std::uint64_t u = 0; u < (1ull << 32); u += 65537) {
    const float f = std::bit_cast<float>(static_cast<std::uint32_t>(u));
    if (!std::isfinite(f)) continue;
    check_nearest(f, float_to_f16(f), f16_to_float, 0x7c00);
  }
}

TEST_CASE("safetensors: storing double as f16 rounds once", "[safetensors]") {
  // x = 1 + 2^-11 + 2^-40 is just above the f16 tie between 1 and 1 + 2^-10,
  // so the correct result rounds up. Going via float first (RNE) would drop
  // the 2^-40 and then round the exact tie down to 1.
  const double x = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  const std::vector<double> v{x, -x};
  SafetensorsWriter w;
  w.add<double>("h", {2}, v, DType::F16);
  w.add<double>("b", {2}, v, DType::BF16);
  const auto f = SafetensorsFile::from_bytes(w.to_bytes(), "mem");
  const auto h = f.read<float>("h");
  REQUIRE(h[0] == 1.0f + 0x1p-10f);
  REQUIRE(h[1] == -(1.0f + 0x1p-10f));
  const auto b = f.read<float>("b");
  REQUIRE(b[0] == 1.0f);  // far from a bf16 tie
}

// ---------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------

namespace {

template <class T>
void round_trip_native(const std::vector<T>& values) {
  SafetensorsWriter w;
  const std::vector<std::int64_t> shape{static_cast<std::int64_t>(values.size())};
  if constexpr (std::is_same_v<T, bool>) {
    // std::vector<bool> is bit-packed and has no span view; copy to an array.
    const auto arr = std::make_unique<bool[]>(values.size());
    std::copy(values.begin(), values.end(), arr.get());
    w.add<bool>("t", shape, std::span<const bool>(arr.get(), values.size()));
  } else {
    w.add<T>("t", shape, values);
  }
  const auto f = SafetensorsFile::from_bytes(w.to_bytes(), "mem");
  const TensorInfo& ti = f.info("t");
  REQUIRE(ti.dtype == dtype_of<T>());
  REQUIRE(ti.shape == std::vector<std::int64_t>{static_cast<std::int64_t>(values.size())});
  REQUIRE(ti.end - ti.begin == values.size() * sizeof(T));
  REQUIRE(f.read<T>("t") == values);
}

}  // namespace

TEST_CASE("safetensors: round trip of every dtype", "[safetensors]") {
  constexpr double dinf = std::numeric_limits<double>::infinity();
  constexpr float finf = std::numeric_limits<float>::infinity();

  SECTION("F64") { round_trip_native<double>({0.0, -1.5, 1e300, -dinf, dinf, 5e-324}); }
  SECTION("F32") { round_trip_native<float>({0.0f, -1.5f, 3.4e38f, finf, -finf, 1e-45f}); }
  SECTION("I64") {
    round_trip_native<std::int64_t>(
        {0, -1, std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()});
  }
  SECTION("I32") { round_trip_native<std::int32_t>({0, -7, std::numeric_limits<std::int32_t>::min(), 123456}); }
  SECTION("I16") { round_trip_native<std::int16_t>({0, -7, -32768, 32767}); }
  SECTION("I8") { round_trip_native<std::int8_t>({0, -128, 127, 5}); }
  SECTION("U64") { round_trip_native<std::uint64_t>({0, std::numeric_limits<std::uint64_t>::max(), 42}); }
  SECTION("U32") { round_trip_native<std::uint32_t>({0, 4294967295u, 42}); }
  SECTION("U16") { round_trip_native<std::uint16_t>({0, 65535, 42}); }
  SECTION("U8") { round_trip_native<std::uint8_t>({0, 255, 42}); }
  SECTION("BOOL") { round_trip_native<bool>({true, false, true, true}); }

  SECTION("F64 NaN") {
    SafetensorsWriter w;
    const std::vector<double> v{std::nan("")};
    w.add<double>("n", {1}, v);
    const auto f = SafetensorsFile::from_bytes(w.to_bytes(), "mem");
    REQUIRE(std::isnan(f.read<double>("n")[0]));
  }

  SECTION("BF16 and F16 from float, including NaN and inf") {
    const std::vector<float> v{1.0f, -0.5f, 3.140625f, 1e-3f, finf, -finf, std::nanf(""), 0.0f, 65504.0f, 1e5f};
    SafetensorsWriter w;
    w.add<float>("b", {2, 5}, v, DType::BF16);
    w.add<float>("h", {2, 5}, v, DType::F16);
    const auto f = SafetensorsFile::from_bytes(w.to_bytes(), "mem");
    REQUIRE(f.info("b").dtype == DType::BF16);
    REQUIRE(f.info("h").dtype == DType::F16);
    REQUIRE(f.info("b").end - f.info("b").begin == 20);
    const auto b = f.read<float>("b");
    const auto h = f.read<float>("h");
    for (std::size_t i = 0; i < v.size(); ++i) {
      INFO("i=" << i << " v=" << v[i]);
      if (std::isnan(v[i])) {
        REQUIRE(std::isnan(b[i]));
        REQUIRE(std::isnan(h[i]));
        continue;
      }
      REQUIRE(b[i] == bf16_to_float(float_to_bf16(v[i])));
      REQUIRE(h[i] == f16_to_float(float_to_f16(v[i])));
      if (std::isfinite(v[i]) && std::fabs(v[i]) <= 65504.0f) {
        // relative error bounds: bf16 has 8 significand bits, f16 11 (or absolute
        // 2^-25 in the subnormal range).
        REQUIRE(std::fabs(b[i] - v[i]) <= std::fabs(v[i]) * 0x1p-8f);
        REQUIRE(std::fabs(h[i] - v[i]) <= std::max(std::fabs(v[i]) * 0x1p-11f, 0x1p-25f));
      }
    }
    REQUIRE(b[0] == 1.0f);
    REQUIRE(h[2] == 3.140625f);           // exact in f16
    REQUIRE(std::isinf(h[9]));            // 1e5 overflows f16
    REQUIRE(b[9] == 99840.0f);            // but not bf16
    REQUIRE(std::isinf(b[4]));
    REQUIRE(std::isinf(h[5]));
    REQUIRE(h[5] < 0);
  }

  SECTION("scalar and empty tensors") {
    SafetensorsWriter w;
    const std::vector<float> scalar{2.5f};
    const std::vector<float> empty;
    w.add<float>("scalar", {}, scalar);
    w.add<float>("empty", {0, 3}, empty);
    const auto f = SafetensorsFile::from_bytes(w.to_bytes(), "mem");
    REQUIRE(f.info("scalar").shape.empty());
    REQUIRE(f.info("scalar").numel() == 1);
    REQUIRE(f.read<float>("scalar") == scalar);
    REQUIRE(f.info("empty").numel() == 0);
    REQUIRE(f.read<float>("empty").empty());
  }
}

TEST_CASE("safetensors: metadata round trip", "[safetensors]") {
  SafetensorsWriter w;
  w.set_metadata("variant", "gpt");
  w.set_metadata("lr", "0.003");
  w.set_metadata("empty", "");
  w.set_metadata("unicode", "\xce\xbb=0.5");
  w.set_metadata("lr", "0.001");  // later value wins
  const std::vector<float> v{1, 2};
  w.add<float>("w", {2}, v);
  const auto f = SafetensorsFile::from_bytes(w.to_bytes(), "mem.safetensors");
  REQUIRE(f.source() == "mem.safetensors");
  REQUIRE(f.metadata().size() == 5);  // and the data hash the writer adds
  REQUIRE(f.metadata().count(kDataHashKey) == 1);
  REQUIRE(f.metadata_value("variant") == "gpt");
  REQUIRE(f.metadata_value("lr") == "0.001");
  REQUIRE(f.metadata_value("empty").empty());
  REQUIRE(f.metadata_value("unicode") == "\xce\xbb=0.5");
  REQUIRE_THROWS_AS(f.metadata_value("nope"), Error);
  REQUIRE_THROWS_WITH(f.metadata_value("nope"), StartsWith("mem.safetensors") && Contains("nope"));

  // No metadata set: the writer's "__metadata__" holds only the data hash; a file
  // with no "__metadata__" (another writer's) reads an empty map.
  SafetensorsWriter w2;
  w2.add<float>("w", {2}, v);
  REQUIRE(SafetensorsFile::from_bytes(w2.to_bytes(), "m").metadata().size() == 1);
  const auto bare = load(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8);
  REQUIRE(bare.metadata().empty());
}

TEST_CASE("safetensors: a byte changed after writing is refused, naming the file, the hash is the same fed in pieces",
          "[safetensors]") {
  std::vector<float> a(1000), b(37);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = float(i) * 0.25f;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = -float(i);
  const std::vector<std::uint8_t> c = {1, 2, 3};  // an odd byte count: the words straddle tensors
  SafetensorsWriter w;
  w.set_metadata("variant", "gpt");
  w.add<float>("a", {1000}, a);
  w.add<float>("b", {37}, b);
  w.add<std::uint8_t>("c", {3}, c);
  const std::vector<std::uint8_t> bytes = w.to_bytes();
  const auto f = SafetensorsFile::from_bytes(bytes, "ok.safetensors");
  REQUIRE(f.read<float>("b") == b);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const std::size_t data = 8 + n, size = bytes.size() - data;
  // Every byte of the data buffer, one bit flipped at a time at a few places: refused.
  for (const std::size_t at : {std::size_t(0), std::size_t(7), size / 2, size - 4, size - 1}) {
    std::vector<std::uint8_t> bad = bytes;
    bad[data + at] ^= 0x10;
    INFO("byte " << at << " of " << size);
    REQUIRE_THROWS_WITH(SafetensorsFile::from_bytes(bad, "flipped.safetensors"),
                        StartsWith("flipped.safetensors: ") && Contains("changed or damaged") &&
                            Contains(kDataHashKey));
  }
  // The hash of the whole buffer equals the one fed tensor by tensor, and in random pieces.
  normlab::io::detail::DataHash whole;
  whole.update(bytes.data() + data, size);
  REQUIRE(whole.text() == f.metadata_value(kDataHashKey));
  std::mt19937 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    normlab::io::detail::DataHash pieces;
    for (std::size_t at = 0; at < size;) {
      const std::size_t len = std::min<std::size_t>(size - at, std::uniform_int_distribution<std::size_t>(0, 19)(rng));
      pieces.update(bytes.data() + data + at, len);
      at += len;
    }
    REQUIRE(pieces.text() == whole.text());
  }
  // Metadata copied from a written file into a writer of other data gets the new data's hash.
  const std::vector<float> other(1000, 1.0f);
  SafetensorsWriter copy;
  for (const auto& [k, v] : f.metadata()) copy.set_metadata(k, v);
  copy.add<float>("a", {1000}, other);
  REQUIRE_NOTHROW(SafetensorsFile::from_bytes(copy.to_bytes(), "copy.safetensors"));
}

TEST_CASE("safetensors: writer output is deterministic, sorted and padded", "[safetensors]") {
  const std::vector<float> a{1, 2, 3};
  const std::vector<std::int64_t> b{7};
  SafetensorsWriter w1, w2;
  w1.add<float>("zeta", {3}, a);
  w1.add<std::int64_t>("alpha", {1}, b);
  w1.set_metadata("k", "v");
  w2.set_metadata("k", "v");
  w2.add<std::int64_t>("alpha", {1}, b);
  w2.add<float>("zeta", {3}, a);
  const auto bytes = w1.to_bytes();
  REQUIRE(bytes == w2.to_bytes());
  REQUIRE(bytes == w1.to_bytes());

  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  REQUIRE(n % 8 == 0);
  REQUIRE(bytes.size() == 8 + n + 8 + 12);

  const auto f = SafetensorsFile::from_bytes(bytes, "mem");
  REQUIRE(f.names() == std::vector<std::string>{"alpha", "zeta"});
  REQUIRE(f.info("alpha").begin == 0);   // data in sorted-name order
  REQUIRE(f.info("zeta").begin == 8);
  REQUIRE(f.contains("alpha"));
  REQUIRE_FALSE(f.contains("beta"));
}

TEST_CASE("safetensors: writer rejects bad input", "[safetensors]") {
  SafetensorsWriter w;
  const std::vector<float> v{1, 2, 3};
  REQUIRE_THROWS_WITH(w.add<float>("w", {2, 2}, v), Contains("'w'") && Contains("[2, 2]") && Contains("got 3"));
  REQUIRE_THROWS_WITH(w.add<float>("w", {-3}, v), Contains("'w'") && Contains("invalid shape"));
  w.add<float>("w", {3}, v);
  REQUIRE_THROWS_WITH(w.add<float>("w", {3}, v), Contains("'w'") && Contains("twice"));
  REQUIRE_THROWS_WITH(w.add<float>("__metadata__", {3}, v), Contains("reserved"));
  REQUIRE_THROWS_WITH(w.add<float>("bad\xff", {3}, v), Contains("UTF-8"));
  // Values that do not fit the stored integer type are refused, naming the element.
  const std::vector<float> frac{1.0f, 2.5f};
  REQUIRE_THROWS_WITH(w.add<float>("i", {2}, frac, DType::I32), Contains("'i'") && Contains("element 1"));
  const std::vector<std::int32_t> big{300};
  REQUIRE_THROWS_WITH(w.add<std::int32_t>("u8", {1}, big, DType::U8), Contains("'u8'") && Contains("U8"));
}

TEST_CASE("safetensors: read with conversion", "[safetensors]") {
  SafetensorsWriter w;
  const std::vector<double> d{1.5, -2.25, 1e40};
  const std::vector<std::int32_t> i{-3, 0, 70000};
  const std::vector<float> whole{1.0f, -4.0f};
  const std::vector<bool> flags{true, false};
  w.add<double>("d", {3}, d);
  w.add<std::int32_t>("i", {3}, i);
  w.add<float>("whole", {2}, whole);
  const bool flag_array[] = {true, false};  // std::vector<bool> has no span view
  w.add<bool>("flags", {2}, flag_array);
  w.add<float>("bf", {2}, whole, DType::BF16);
  const auto f = SafetensorsFile::from_bytes(w.to_bytes(), "conv.safetensors");

  const auto df = f.read<float>("d");
  REQUIRE(df[0] == 1.5f);
  REQUIRE(df[1] == -2.25f);
  REQUIRE(std::isinf(df[2]));  // beyond float range: IEEE overflow to inf
  REQUIRE(f.read<double>("i") == std::vector<double>{-3, 0, 70000});
  REQUIRE(f.read<std::int64_t>("i") == std::vector<std::int64_t>{-3, 0, 70000});
  REQUIRE(f.read<std::int64_t>("whole") == std::vector<std::int64_t>{1, -4});
  REQUIRE(f.read<double>("bf") == std::vector<double>{1.0, -4.0});
  REQUIRE(f.read<bool>("flags") == flags);
  REQUIRE(f.read<float>("flags") == std::vector<float>{1.0f, 0.0f});
  REQUIRE(f.read<bool>("i") == std::vector<bool>{true, false, true});

  // Lossy integer conversions are refused, naming file, tensor and element.
  REQUIRE_THROWS_WITH(f.read<std::int16_t>("i"), StartsWith("conv.safetensors") && Contains("'i'") &&
                                                     Contains("element 2") && Contains("70000"));
  REQUIRE_THROWS_WITH(f.read<std::uint32_t>("i"), Contains("'i'") && Contains("element 0"));
  REQUIRE_THROWS_WITH(f.read<std::int64_t>("d"), Contains("'d'") && Contains("element 0"));

  // read_into with the right shape converts into the caller's buffer.
  std::vector<double> out(3);
  f.read_into<double>("i", {3}, out);
  REQUIRE(out == std::vector<double>{-3, 0, 70000});
}

TEST_CASE("safetensors: read_into shape mismatch error", "[safetensors]") {
  SafetensorsWriter w;
  const std::vector<float> v(6, 1.0f);
  w.add<float>("proj.weight", {2, 3}, v);
  const auto f = SafetensorsFile::from_bytes(w.to_bytes(), "model.safetensors");
  std::vector<float> out(6);
  // Same numel, different shape: still an error — the shape must match exactly.
  REQUIRE_THROWS_AS(f.read_into<float>("proj.weight", {3, 2}, out), Error);
  REQUIRE_THROWS_WITH(f.read_into<float>("proj.weight", {3, 2}, out),
                      StartsWith("model.safetensors") && Contains("'proj.weight'") && Contains("expected [3, 2]") &&
                          Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(f.read_into<float>("proj.weight", {6}, out), Contains("expected [6]"));
  // Right shape, wrong buffer size.
  std::vector<float> small(5);
  REQUIRE_THROWS_WITH(f.read_into<float>("proj.weight", {2, 3}, small),
                      StartsWith("model.safetensors") && Contains("'proj.weight'") && Contains("5"));
  REQUIRE_NOTHROW(f.read_into<float>("proj.weight", {2, 3}, out));
}

// ---------------------------------------------------------------------------
// Malformed input: one case per validation rule
// ---------------------------------------------------------------------------

TEST_CASE("safetensors: malformed: truncated file", "[safetensors]") {
  const std::vector<std::uint8_t> five{1, 2, 3, 4, 5};
  REQUIRE_THROWS_AS(SafetensorsFile::from_bytes(five, kSrc), Error);
  REQUIRE_THROWS_WITH(SafetensorsFile::from_bytes(five, kSrc), StartsWith(kSrc) && Contains("truncated"));
  REQUIRE_THROWS_WITH(SafetensorsFile::from_bytes({}, kSrc), StartsWith(kSrc) && Contains("truncated"));
}

TEST_CASE("safetensors: malformed: header length beyond file", "[safetensors]") {
  auto bytes = make_file("{}", 0);
  const std::uint64_t n = 1000;
  std::memcpy(bytes.data(), &n, 8);
  REQUIRE_THROWS_WITH(SafetensorsFile::from_bytes(bytes, kSrc),
                      StartsWith(kSrc) && Contains("header length 1000") && Contains("beyond"));
  // A huge length must not overflow the 8 + N computation.
  const std::uint64_t huge = std::numeric_limits<std::uint64_t>::max();
  std::memcpy(bytes.data(), &huge, 8);
  REQUIRE_THROWS_WITH(SafetensorsFile::from_bytes(bytes, kSrc), StartsWith(kSrc) && Contains("not a safetensors file"));
  // A text file: its first 8 bytes read as ~7e18. Say what it is, not that number.
  const std::string text = "This is a text file, not tensors.\n";
  const std::vector<std::uint8_t> tb(text.begin(), text.end());
  REQUIRE_THROWS_WITH(SafetensorsFile::from_bytes(tb, kSrc),
                      StartsWith(kSrc) && Contains("not a safetensors file") && !Contains("7310"));
}

TEST_CASE("safetensors: malformed: invalid JSON", "[safetensors]") {
  REQUIRE_THROWS_WITH(load(R"({"w": {"dtype": "F32", )", 0), StartsWith(kSrc) && Contains("not valid JSON"));
  REQUIRE_THROWS_WITH(load("[1, 2]", 0), StartsWith(kSrc) && Contains("not a JSON object"));
  // Header padding with trailing spaces is fine.
  REQUIRE(load("{}      ", 0).names().empty());
}

TEST_CASE("safetensors: malformed: header entry structure", "[safetensors]") {
  REQUIRE_THROWS_WITH(load(R"({"w": 5})", 0), StartsWith(kSrc) && Contains("'w'") && Contains("not a JSON object"));
  REQUIRE_THROWS_WITH(load(R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", 4),
                      StartsWith(kSrc) && Contains("'w'") && Contains("dtype"));
  REQUIRE_THROWS_WITH(load(R"({"w": {"dtype": 3, "shape": [1], "data_offsets": [0, 4]}})", 4),
                      StartsWith(kSrc) && Contains("'w'") && Contains("dtype"));
  REQUIRE_THROWS_WITH(load(R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", 4),
                      StartsWith(kSrc) && Contains("'w'") && Contains("shape"));
  REQUIRE_THROWS_WITH(load(R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4),
                      StartsWith(kSrc) && Contains("'w'") && Contains("non-integer"));
  REQUIRE_THROWS_WITH(load(R"({"w": {"dtype": "F32", "shape": [1]}})", 4),
                      StartsWith(kSrc) && Contains("'w'") && Contains("data_offsets"));
  REQUIRE_THROWS_WITH(load(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4),
                      StartsWith(kSrc) && Contains("'w'") && Contains("two non-negative integers"));
  REQUIRE_THROWS_WITH(load(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", 4),
                      StartsWith(kSrc) && Contains("'w'") && Contains("two non-negative integers"));
  REQUIRE_THROWS_WITH(load(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", 4),
                      StartsWith(kSrc) && Contains("'w'") && Contains("after end"));
  REQUIRE_THROWS_WITH(load(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                           R"( "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                           4),
                      StartsWith(kSrc) && Contains("'w'") && Contains("more than once"));
}

TEST_CASE("safetensors: malformed: negative dims and numel overflow", "[safetensors]") {
  REQUIRE_THROWS_WITH(load(R"({"w": {"dtype": "F32", "shape": [-1, -4], "data_offsets": [0, 16]}})", 16),
                      StartsWith(kSrc) && Contains("'w'") && Contains("negative"));
  // 2^32 * 2^32 elements overflows int64; 2^62 F32 elements overflows the byte count.
  REQUIRE_THROWS_WITH(
      load(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", 0),
      StartsWith(kSrc) && Contains("'w'") && Contains("overflows"));
  REQUIRE_THROWS_WITH(load(R"({"w": {"dtype": "F32", "shape": [4611686018427387904], "data_offsets": [0, 0]}})", 0),
                      StartsWith(kSrc) && Contains("'w'") && Contains("overflows"));
  REQUIRE_THROWS_WITH(load(R"({"w": {"dtype": "F32", "shape": [18446744073709551615], "data_offsets": [0, 0]}})", 0),
                      StartsWith(kSrc) && Contains("'w'") && Contains("too large"));
}

TEST_CASE("safetensors: malformed: metadata", "[safetensors]") {
  REQUIRE_THROWS_WITH(load(R"({"__metadata__": {"steps": 3}})", 0),
                      StartsWith(kSrc) && Contains("steps") && Contains("not a string"));
  REQUIRE_THROWS_WITH(load(R"({"__metadata__": [1]})", 0), StartsWith(kSrc) && Contains("__metadata__"));
}

TEST_CASE("safetensors: malformed: offsets out of range", "[safetensors]") {
  REQUIRE_THROWS_WITH(load(R"({"emb": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 12),
                      StartsWith(kSrc) && Contains("'emb'") && Contains("offsets out of range"));
}

TEST_CASE("safetensors: malformed: overlapping offsets", "[safetensors]") {
  REQUIRE_THROWS_WITH(load(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                           R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                           12),
                      StartsWith(kSrc) && Contains("'a'") && Contains("'b'") && Contains("overlaps"));
  // Identical ranges overlap too.
  REQUIRE_THROWS_WITH(load(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                           R"( "b": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]}})",
                           8),
                      StartsWith(kSrc) && Contains("'a'") && Contains("'b'") && Contains("overlaps"));
}

TEST_CASE("safetensors: malformed: unknown dtype", "[safetensors]") {
  REQUIRE_THROWS_WITH(load(R"({"w": {"dtype": "F8_E5M2", "shape": [1], "data_offsets": [0, 1]}})", 1),
                      StartsWith(kSrc) && Contains("'w'") && Contains("unknown dtype") && Contains("F8_E5M2"));
}

TEST_CASE("safetensors: malformed: byte size not matching shape", "[safetensors]") {
  REQUIRE_THROWS_WITH(load(R"({"w": {"dtype": "F64", "shape": [2, 2], "data_offsets": [0, 16]}})", 16),
                      StartsWith(kSrc) && Contains("'w'") && Contains("byte size 16") && Contains("[2, 2]") &&
                          Contains("32 bytes"));
}

TEST_CASE("safetensors: malformed: holes in the data buffer", "[safetensors]") {
  // Gap between two tensors.
  REQUIRE_THROWS_WITH(load(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                           R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                           12),
                      StartsWith(kSrc) && Contains("hole") && Contains("[4, 8)") && Contains("'b'"));
  // Gap at the start.
  REQUIRE_THROWS_WITH(load(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8),
                      StartsWith(kSrc) && Contains("hole") && Contains("'a'"));
  // Unused bytes at the end.
  REQUIRE_THROWS_WITH(load(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 6),
                      StartsWith(kSrc) && Contains("hole") && Contains("[4, 6)"));
  REQUIRE_THROWS_WITH(load("{}", 3), StartsWith(kSrc) && Contains("hole"));
}

TEST_CASE("safetensors: malformed: missing tensor", "[safetensors]") {
  const auto f = load(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 4);
  REQUIRE_THROWS_AS(f.info("lm_head.weight"), Error);
  REQUIRE_THROWS_WITH(f.info("lm_head.weight"),
                      StartsWith(kSrc) && Contains("missing tensor") && Contains("lm_head.weight"));
  REQUIRE_THROWS_WITH(f.read<float>("lm_head.weight"), StartsWith(kSrc) && Contains("lm_head.weight"));
  std::vector<float> out(1);
  REQUIRE_THROWS_WITH(f.read_into<float>("lm_head.weight", {1}, out),
                      StartsWith(kSrc) && Contains("lm_head.weight"));
}

TEST_CASE("safetensors: malformed: wrong shape", "[safetensors]") {
  const auto f = load(R"({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}})", 16);
  std::vector<float> out(4);
  REQUIRE_THROWS_WITH(f.read_into<float>("a", {4}, out),
                      StartsWith(kSrc) && Contains("'a'") && Contains("expected [4]") && Contains("[2, 2]"));
}

TEST_CASE("safetensors: open() names the path in errors", "[safetensors]") {
  normlab::test::TempDir dir("normlab_st_open_");
  const fs::path missing = dir.path / "nope.safetensors";
  REQUIRE_THROWS_WITH(SafetensorsFile::open(missing), StartsWith(missing.string()) && Contains("cannot open"));
  REQUIRE_THROWS_WITH(SafetensorsFile::open(dir.path), StartsWith(dir.path.string()));

  const fs::path bad = dir.path / "bad.safetensors";
  {
    std::ofstream out(bad, std::ios::binary);
    out << "abc";
  }
  REQUIRE_THROWS_WITH(SafetensorsFile::open(bad), StartsWith(bad.string()) && Contains("truncated"));
}

// ---------------------------------------------------------------------------
// Atomic writes
// ---------------------------------------------------------------------------

TEST_CASE("safetensors: write_atomic", "[safetensors]") {
  normlab::test::TempDir dir("normlab_st_atomic_");
  SafetensorsWriter w;
  const std::vector<float> v{1, 2, 3, 4};
  w.add<float>("w", {2, 2}, v);
  w.set_metadata("gen", "1");

  SECTION("directory does not exist: throws naming the path, leaves nothing") {
    const fs::path target = dir.path / "missing_dir" / "out.safetensors";
    REQUIRE_THROWS_AS(w.write_atomic(target), Error);
    REQUIRE_THROWS_WITH(w.write_atomic(target), Contains(target.string()));
    REQUIRE_FALSE(fs::exists(dir.path / "missing_dir"));
    REQUIRE(entries(dir.path).empty());
  }

  SECTION("creates, then replaces an existing file; no temp file remains") {
    const fs::path target = dir.path / "out.safetensors";
    w.write_atomic(target);
    REQUIRE(entries(dir.path) == std::vector<std::string>{"out.safetensors"});
    REQUIRE(SafetensorsFile::open(target).metadata_value("gen") == "1");

    SafetensorsWriter w2;
    const std::vector<double> d{9.0};
    w2.add<double>("other", {1}, d);
    w2.set_metadata("gen", "2");
    w2.write_atomic(target);
    REQUIRE(entries(dir.path) == std::vector<std::string>{"out.safetensors"});
    const auto f = SafetensorsFile::open(target);
    REQUIRE(f.source() == target.string());
    REQUIRE(f.metadata_value("gen") == "2");
    REQUIRE(f.names() == std::vector<std::string>{"other"});
    REQUIRE(f.read<double>("other") == d);

    // The file on disk is exactly to_bytes().
    std::ifstream in(target, std::ios::binary);
    const std::vector<std::uint8_t> on_disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    REQUIRE(on_disk == w2.to_bytes());
  }

  SECTION("target is a directory: throws, temp file removed") {
    const fs::path target = dir.path / "sub";
    fs::create_directory(target);
    fs::create_directory(target / "keep");  // non-empty, so rename() must fail
    REQUIRE_THROWS_WITH(w.write_atomic(target), Contains(target.string()));
    REQUIRE(entries(dir.path) == std::vector<std::string>{"sub"});
  }

  SECTION("write failure (file size limit): throws, previous file intact, temp file removed") {
    const fs::path target = dir.path / "out.safetensors";
    w.write_atomic(target);
    const auto before = w.to_bytes();

    SafetensorsWriter big;
    const std::vector<double> lots(4096, 1.0);
    big.add<double>("lots", {4096}, lots);

    // Simulate a full disk: RLIMIT_FSIZE makes write() fail with EFBIG once
    // the temp file would exceed 1 KiB (SIGXFSZ ignored so we see the error).
    rlimit old_limit{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
    auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = old_limit;
    small.rlim_cur = 1024;
    bool threw = false;
    std::string message;
    if (::setrlimit(RLIMIT_FSIZE, &small) == 0) {
      try {
        big.write_atomic(target);
      } catch (const Error& e) {
        threw = true;
        message = e.what();
      }
      ::setrlimit(RLIMIT_FSIZE, &old_limit);
    }
    std::signal(SIGXFSZ, old_handler);

    REQUIRE(threw);
    REQUIRE_THAT(message, StartsWith(target.string()) && Contains("write failed"));
    REQUIRE(entries(dir.path) == std::vector<std::string>{"out.safetensors"});
    const auto f = SafetensorsFile::open(target);
    REQUIRE(f.metadata_value("gen") == "1");
    REQUIRE(f.read<float>("w") == v);
    REQUIRE(fs::file_size(target) == before.size());
  }
}

// ---------------------------------------------------------------------------
// Golden reference file
// ---------------------------------------------------------------------------

TEST_CASE("safetensors: golden gpt_small file", "[safetensors]") {
  const auto f = SafetensorsFile::open(NORMLAB_TEST_DATA_DIR "/golden/gpt_small.safetensors");
  REQUIRE(f.metadata_value("variant") == "gpt");
  const std::int64_t batch = std::stoll(f.metadata_value("batch"));
  const std::int64_t seq_len = std::stoll(f.metadata_value("seq_len"));
  const std::int64_t vocab = std::stoll(f.metadata_value("vocab_size"));

  const TensorInfo& logits = f.info("step0/logits");
  REQUIRE(logits.shape == std::vector<std::int64_t>{batch, seq_len, vocab});
  std::vector<double> buf(static_cast<std::size_t>(logits.numel()));
  f.read_into<double>("step0/logits", {batch, seq_len, vocab}, buf);
  for (double x : buf) REQUIRE(std::isfinite(x));

  const TensorInfo& idx = f.info("step0/idx");
  REQUIRE(idx.dtype == DType::I64);
  REQUIRE(idx.shape == std::vector<std::int64_t>{batch, seq_len});
  const auto tokens = f.read<std::int64_t>("step0/idx");
  REQUIRE(tokens.size() == static_cast<std::size_t>(batch * seq_len));
  for (std::int64_t t : tokens) {
    REQUIRE(t >= 0);
    REQUIRE(t < vocab);
  }

  // Every tensor decodes; re-encoding through the writer reproduces it.
  SafetensorsWriter w;
  for (const auto& name : f.names()) {
    const TensorInfo& ti = f.info(name);
    if (ti.dtype == DType::I64) {
      const auto v = f.read<std::int64_t>(name);
      w.add<std::int64_t>(name, ti.shape, v);
    } else {
      const auto v = f.read<double>(name);
      w.add<double>(name, ti.shape, v, ti.dtype);
    }
  }
  const auto copy = SafetensorsFile::from_bytes(w.to_bytes(), "copy");
  REQUIRE(copy.names() == f.names());
  REQUIRE(copy.read<double>("step0/logits") == f.read<double>("step0/logits"));
  REQUIRE(copy.read<std::int64_t>("step0/idx") == tokens);
}
