// Element and scale codecs against closed forms written independently of kernels/codec.cpp (which builds f32 bit
// patterns): here values come from ldexp over the sign/exponent/mantissa fields.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "kernels/codec.hpp"
#include "kernels/quantize.hpp"

namespace qtune {
namespace {

struct FloatCase {
  int exponent_bits;
  int mantissa_bits;
};

// Every signed eXmY of at most 8 bits with at least one exponent bit.
std::vector<FloatCase> all_float_types() {
  std::vector<FloatCase> cases;
  for (int e = 1; e <= 7; ++e)
    for (int m = 0; 1 + e + m <= 8; ++m) cases.push_back({e, m});
  return cases;
}

FloatEncoding expected_encoding(int e, int m) {
  if (1 + e + m < 8) return FloatEncoding::Finite;
  return (e == 5 && m == 2) ? FloatEncoding::Ieee : FloatEncoding::FiniteNaN;
}

// The textbook value of a sign/exponent/mantissa code.
double closed_form(int e, int m, FloatEncoding encoding, uint32_t code) {
  const int bits = 1 + e + m;
  const bool negative = (code >> (bits - 1)) & 1u;
  const int exponent_field = static_cast<int>((code >> m) & ((1u << e) - 1u));
  const int mantissa = static_cast<int>(code & ((1u << m) - 1u));
  const int bias = (1 << (e - 1)) - 1;
  const bool top_exponent = exponent_field == (1 << e) - 1;
  if (encoding == FloatEncoding::Ieee && top_exponent) {
    if (mantissa != 0) return std::numeric_limits<double>::quiet_NaN();
    return negative ? -HUGE_VAL : HUGE_VAL;
  }
  if (encoding == FloatEncoding::FiniteNaN && top_exponent && mantissa == (1 << m) - 1) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  double magnitude = exponent_field == 0 ? std::ldexp(mantissa, 1 - bias - m)
                                         : std::ldexp((1 << m) + mantissa, exponent_field - bias - m);
  return negative ? -magnitude : magnitude;
}

bool same_value(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

// Distinct finite values of a type, ascending (-0 folded into +0).
std::vector<double> sorted_finite_values(const std::vector<double>& values) {
  std::vector<double> finite;
  for (double v : values)
    if (std::isfinite(v)) finite.push_back(v == 0.0 ? 0.0 : v);
  std::sort(finite.begin(), finite.end());
  finite.erase(std::unique(finite.begin(), finite.end()), finite.end());
  return finite;
}

// Of two neighbours a < b of one sign, the tie winner under round-half-even is the even multiple of (b - a).
double tie_winner(double a, double b) {
  double quantum = b - a;
  double a_steps = std::fabs(a) / quantum;
  return std::fmod(a_steps, 2.0) == 0.0 ? a : b;
}

TEST(ElementCodec, FloatDecodeMatchesClosedFormForEveryCode) {
  int checked = 0;
  for (auto [e, m] : all_float_types()) {
    ElementType type = ElementType::floating(e, m);
    ASSERT_EQ(type.float_encoding(), expected_encoding(e, m)) << type.name();
    ASSERT_EQ(code_count(type), 1u << (1 + e + m));
    for (uint32_t code = 0; code < code_count(type); ++code) {
      double expected = closed_form(e, m, type.float_encoding(), code);
      double actual = decode(type, code);
      ASSERT_TRUE(same_value(actual, expected)) << type.name() << " code " << code << ": " << actual << " vs " << expected;
      EXPECT_EQ(is_nan_code(type, code), std::isnan(expected));
      EXPECT_EQ(is_finite_code(type, code), std::isfinite(expected));
      ++checked;
    }
  }
  EXPECT_GT(checked, 2000);
}

TEST(ElementCodec, IntegerDecodeForEveryCode) {
  for (int bits = 1; bits <= 8; ++bits) {
    ElementType signed_type = ElementType::signed_int(bits);
    ElementType unsigned_type = ElementType::unsigned_int(bits);
    for (uint32_t code = 0; code < (1u << bits); ++code) {
      double expected_signed = code < (1u << (bits - 1)) ? code : static_cast<double>(code) - std::ldexp(1.0, bits);
      EXPECT_EQ(decode(signed_type, code), expected_signed) << "int" << bits << " code " << code;
      EXPECT_EQ(decode(unsigned_type, code), static_cast<double>(code));
      EXPECT_EQ(encode(signed_type, expected_signed), code);
      EXPECT_EQ(encode(unsigned_type, code), code);
    }
    EXPECT_EQ(max_finite(signed_type), std::ldexp(1.0, bits - 1) - 1);
    EXPECT_EQ(lowest_finite(signed_type), -std::ldexp(1.0, bits - 1));
    EXPECT_EQ(max_finite(unsigned_type), std::ldexp(1.0, bits) - 1);
  }
}

TEST(ElementCodec, KnownValues) {
  ElementType e2m1 = ElementType::floating(2, 1);
  std::vector<float> e2m1_values;
  for (uint32_t code = 0; code < 8; ++code) e2m1_values.push_back(decode(e2m1, code));
  EXPECT_EQ(e2m1_values, (std::vector<float>{0, 0.5f, 1, 1.5f, 2, 3, 4, 6}));
  ElementType e4m3 = ElementType::floating(4, 3);
  EXPECT_EQ(max_finite(e4m3), 448.0);
  EXPECT_EQ(decode(e4m3, 0x7E), 448.0f);
  EXPECT_EQ(decode(e4m3, 0x01), std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(decode(e4m3, 0x7F)));
  EXPECT_TRUE(std::isnan(decode(e4m3, 0xFF)));
  EXPECT_EQ(decode(e4m3, 0x78), 256.0f);  // 0x78 is finite in the fn encoding
  ElementType e5m2 = ElementType::floating(5, 2);
  EXPECT_EQ(max_finite(e5m2), 57344.0);
  EXPECT_EQ(decode(e5m2, 0x7C), HUGE_VALF);
  EXPECT_EQ(decode(e5m2, 0xFC), -HUGE_VALF);
  EXPECT_TRUE(std::isnan(decode(e5m2, 0x7D)));
  EXPECT_EQ(max_finite(ElementType::floating(3, 2)), 28.0);
  EXPECT_EQ(max_finite(ElementType::floating(2, 3)), 7.5);
  EXPECT_EQ(max_finite(ElementType::floating(7, 0)), std::ldexp(1.0, 63));  // 0x7F is NaN, 0x7E is 2^63
  EXPECT_EQ(decode(ElementType::signed_int(4), 0xF), -1.0f);
  EXPECT_EQ(decode(ElementType::signed_int(4), 0xF7), 7.0f);  // bits above the type are ignored
}

TEST(ElementCodec, EncodeOfDecodeIsIdentityForEveryFiniteCode) {
  for (auto [e, m] : all_float_types()) {
    ElementType type = ElementType::floating(e, m);
    for (uint32_t code = 0; code < code_count(type); ++code) {
      float value = decode(type, code);
      if (std::isnan(value)) {
        EXPECT_TRUE(is_nan_code(type, encode(type, value))) << type.name();
      } else if (std::isinf(value)) {
        EXPECT_EQ(encode(type, value, Overflow::Propagate), code) << type.name();
      } else {
        ASSERT_EQ(encode(type, value), code) << type.name() << " value " << value;  // -0 keeps its sign
      }
    }
  }
}

TEST(ElementCodec, MidpointsRoundToEvenAndNeighboursToNearest) {
  int ties = 0;
  for (auto [e, m] : all_float_types()) {
    ElementType type = ElementType::floating(e, m);
    std::vector<double> codes_values;
    for (uint32_t code = 0; code < code_count(type); ++code) codes_values.push_back(closed_form(e, m, type.float_encoding(), code));
    std::vector<double> values = sorted_finite_values(codes_values);
    for (size_t i = 0; i + 1 < values.size(); ++i) {
      double a = values[i];
      double b = values[i + 1];
      double midpoint = (a + b) / 2;  // exact in double
      double winner = a >= 0 || b <= 0 ? tie_winner(a, b) : 0.0;
      ASSERT_EQ(round_to(type, midpoint), winner) << type.name() << " between " << a << " and " << b;
      EXPECT_EQ(round_to(type, std::nextafter(midpoint, a)), a) << type.name();
      EXPECT_EQ(round_to(type, std::nextafter(midpoint, b)), b) << type.name();
      ++ties;
    }
  }
  EXPECT_GT(ties, 1000);
  // Spot checks of the rule itself.
  ElementType e2m1 = ElementType::floating(2, 1);
  EXPECT_EQ(round_to(e2m1, 2.5), 2.0);   // between 2 (even) and 3
  EXPECT_EQ(round_to(e2m1, 3.5), 4.0);   // between 3 and 4 (even)
  EXPECT_EQ(round_to(e2m1, 5.0), 4.0);   // between 4 (even) and 6
  EXPECT_EQ(round_to(e2m1, 0.25), 0.0);  // between 0 and 0.5
  EXPECT_EQ(round_to(e2m1, 0.75), 1.0);
  ElementType int4 = ElementType::signed_int(4);
  EXPECT_EQ(round_to(int4, 2.5), 2.0);
  EXPECT_EQ(round_to(int4, 3.5), 4.0);
  EXPECT_EQ(round_to(int4, -2.5), -2.0);
  EXPECT_EQ(round_to(int4, -0.5), 0.0);
  EXPECT_EQ(round_to(int4, 2.5000001), 3.0);
}

TEST(ElementCodec, SaturationAndOverflow) {
  for (auto [e, m] : all_float_types()) {
    ElementType type = ElementType::floating(e, m);
    double largest = max_finite(type);
    EXPECT_EQ(round_to(type, largest * 4), largest) << type.name();
    EXPECT_EQ(round_to(type, HUGE_VAL), largest) << type.name();
    EXPECT_EQ(round_to(type, -HUGE_VAL), -largest) << type.name();
    double beyond = round_to(type, largest * 4, Overflow::Propagate);
    switch (type.float_encoding()) {
      case FloatEncoding::Finite: EXPECT_EQ(beyond, largest) << type.name(); break;
      case FloatEncoding::FiniteNaN: EXPECT_TRUE(std::isnan(beyond)) << type.name(); break;
      case FloatEncoding::Ieee: EXPECT_EQ(beyond, HUGE_VAL) << type.name(); break;
    }
  }
  ElementType e4m3 = ElementType::floating(4, 3);
  EXPECT_EQ(round_to(e4m3, 464.0, Overflow::Propagate), 448.0);  // tie between 448 (even) and 480: stays finite
  EXPECT_TRUE(std::isnan(round_to(e4m3, 464.01, Overflow::Propagate)));
  EXPECT_EQ(round_to(e4m3, 464.01), 448.0);
  EXPECT_EQ(encode(e4m3, 1e9), 0x7Eu);
  EXPECT_EQ(encode(e4m3, -1e9), 0xFEu);
  ElementType e5m2 = ElementType::floating(5, 2);
  EXPECT_EQ(round_to(e5m2, 61439.0, Overflow::Propagate), 57344.0);
  EXPECT_EQ(encode(e5m2, 61440.0, Overflow::Propagate), 0x7Cu);  // tie goes to 2^16: overflow to inf
  EXPECT_EQ(encode(e5m2, 61440.0), 0x7Bu);                        // saturating: max finite
  EXPECT_EQ(encode(ElementType::signed_int(4), 100.0), 0x7u);
  EXPECT_EQ(encode(ElementType::signed_int(4), -100.0), 0x8u);
  EXPECT_EQ(encode(ElementType::unsigned_int(4), -3.0), 0x0u);
  EXPECT_EQ(encode(ElementType::unsigned_int(4), HUGE_VAL), 0xFu);
  EXPECT_EQ(encode(ElementType::signed_int(8), -HUGE_VAL), 0x80u);
}

TEST(ElementCodec, NaNHandling) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  ElementType e4m3 = ElementType::floating(4, 3);
  EXPECT_TRUE(is_nan_code(e4m3, encode(e4m3, nan)));
  EXPECT_TRUE(is_nan_code(e4m3, encode(e4m3, nan, Overflow::Propagate)));  // NaN stays NaN in either mode
  ElementType e5m2 = ElementType::floating(5, 2);
  EXPECT_TRUE(is_nan_code(e5m2, encode(e5m2, nan)));
  EXPECT_TRUE(std::isnan(decode(e5m2, encode(e5m2, -nan))));
  // Types without a NaN code encode NaN as +0 (documented).
  EXPECT_EQ(encode(ElementType::floating(2, 1), nan), 0u);
  EXPECT_EQ(encode(ElementType::signed_int(8), nan), 0u);
  EXPECT_EQ(encode(ElementType::floating(2, 1), -0.0), 0x8u);  // -0 keeps its sign
}

TEST(ElementCodec, ElementEncoderMatchesEncode) {
  std::vector<ElementType> types;
  for (auto [e, m] : all_float_types()) types.push_back(ElementType::floating(e, m));
  for (int bits = 1; bits <= 8; ++bits) {
    types.push_back(ElementType::signed_int(bits));
    types.push_back(ElementType::unsigned_int(bits));
  }
  RandomGenerator random(99);
  for (const ElementType& type : types) {
    for (Overflow overflow : {Overflow::Saturate, Overflow::Propagate}) {
      ElementEncoder fast(type, overflow);
      std::vector<double> probes = {0.0, -0.0, HUGE_VAL, -HUGE_VAL, std::numeric_limits<double>::quiet_NaN(), 1e300};
      std::vector<double> values;
      for (uint32_t code = 0; code < code_count(type); ++code) values.push_back(decode(type, code));
      std::vector<double> sorted = sorted_finite_values(values);
      for (size_t i = 0; i + 1 < sorted.size(); ++i) {
        double midpoint = (sorted[i] + sorted[i + 1]) / 2;
        for (double probe : {sorted[i], midpoint, std::nextafter(midpoint, -HUGE_VAL), std::nextafter(midpoint, HUGE_VAL)}) {
          probes.push_back(probe);
        }
      }
      double largest = max_finite(type);
      for (double factor : {1.0, 1.01, 1.06, 1.1, 1.5, 2.0}) {
        probes.push_back(largest * factor);
        probes.push_back(-largest * factor);
      }
      for (int i = 0; i < 2000; ++i) probes.push_back((random.uniform() * 2 - 1) * largest * 1.2);
      for (double probe : probes) {
        uint32_t expected = encode(type, probe, overflow);
        uint32_t actual = fast(probe);
        if (std::isnan(probe) && type.is_float() && type.float_encoding() != FloatEncoding::Finite) {
          ASSERT_TRUE(is_nan_code(type, actual)) << type.name();
        } else {
          ASSERT_EQ(actual, expected) << type.name() << " at " << probe;
        }
      }
    }
  }
}

TEST(ElementCodec, DecodeTableMatchesDecode) {
  for (ElementType type : {ElementType::signed_int(3), ElementType::unsigned_int(4), ElementType::floating(4, 3),
                           ElementType::floating(2, 1)}) {
    DecodeTable table(type);
    for (uint32_t code = 0; code < 256; ++code) {
      EXPECT_TRUE(same_value(table[code], decode(type, code))) << type.name() << " " << code;
    }
  }
}

// ---- 16-bit floats

void check_16_bit_layout(const FloatLayout& layout, float (*to_float)(uint16_t), uint16_t (*from_float)(float)) {
  std::vector<double> values;
  for (uint32_t code = 0; code < 65536; ++code) {
    double expected = closed_form(layout.exponent_bits, layout.mantissa_bits, FloatEncoding::Ieee, code);
    float actual = to_float(static_cast<uint16_t>(code));
    ASSERT_TRUE(same_value(actual, expected)) << "code " << code;
    ASSERT_TRUE(same_value(decode_float(layout, code), expected)) << "generic decode of " << code;
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(to_float(from_float(actual))));
    } else {
      ASSERT_EQ(from_float(actual), code) << "round trip of " << actual;
      ASSERT_EQ(encode_float(layout, actual, Overflow::Propagate), code);
    }
    values.push_back(expected);
  }
  // Every midpoint between neighbours is exact in f32 (12 or 9 significant bits) and rounds to even.
  std::vector<double> sorted = sorted_finite_values(values);
  for (size_t i = 0; i + 1 < sorted.size(); ++i) {
    double a = sorted[i];
    double b = sorted[i + 1];
    float midpoint = static_cast<float>((a + b) / 2);
    ASSERT_EQ(static_cast<double>(midpoint), (a + b) / 2);
    double winner = a >= 0 || b <= 0 ? tie_winner(a, b) : 0.0;
    ASSERT_EQ(to_float(from_float(midpoint)), winner) << "between " << a << " and " << b;
    ASSERT_EQ(to_float(from_float(std::nextafter(midpoint, static_cast<float>(b)))), b);
  }
  // The fast conversion agrees with the generic encoder over the whole f32 range (random bit patterns).
  RandomGenerator random(7);
  for (int i = 0; i < 200000; ++i) {
    float value = std::bit_cast<float>(static_cast<uint32_t>(random.next()));
    if (std::isnan(value)) continue;
    ASSERT_EQ(from_float(value), encode_float(layout, value, Overflow::Propagate)) << value;
  }
  float largest = static_cast<float>(max_finite(layout));
  EXPECT_EQ(to_float(from_float(largest * 2)), HUGE_VALF);
  EXPECT_EQ(to_float(from_float(-HUGE_VALF)), -HUGE_VALF);
  EXPECT_TRUE(std::isnan(to_float(from_float(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(HalfCodec, F16EveryCodeRoundTripsAndRoundsToEven) {
  check_16_bit_layout(kF16Layout, f16_bits_to_float, float_to_f16_bits);
  EXPECT_EQ(f16_bits_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_bits_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(float_to_f16_bits(65519.99f), 0x7BFFu);
  EXPECT_EQ(float_to_f16_bits(65520.0f), 0x7C00u);
  EXPECT_EQ(round_to_f16(1.0f + std::ldexp(1.0f, -11)), 1.0f);  // tie to even
}

TEST(HalfCodec, BF16EveryCodeRoundTripsAndRoundsToEven) {
  check_16_bit_layout(kBF16Layout, bf16_bits_to_float, float_to_bf16_bits);
  EXPECT_EQ(round_to_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  EXPECT_EQ(round_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
}

// ---- Scale types

TEST(ScaleCodec, Ue8m0EveryCode) {
  for (uint32_t code = 0; code < 255; ++code) {
    float value = decode_scale(ScaleType::UE8M0, code);
    ASSERT_EQ(static_cast<double>(value), std::ldexp(1.0, static_cast<int>(code) - 127)) << code;
    ASSERT_EQ(encode_scale(ScaleType::UE8M0, value), code);
  }
  EXPECT_TRUE(std::isnan(decode_scale(ScaleType::UE8M0, 0xFF)));
  EXPECT_EQ(encode_scale(ScaleType::UE8M0, std::numeric_limits<double>::quiet_NaN()), 0xFFu);
  EXPECT_EQ(encode_scale(ScaleType::UE8M0, 0.0), 0x00u);  // no zero: the smallest scale
  EXPECT_EQ(encode_scale(ScaleType::UE8M0, 1e-60), 0x00u);
  EXPECT_EQ(encode_scale(ScaleType::UE8M0, 1e60), 0xFEu);
  EXPECT_EQ(encode_scale(ScaleType::UE8M0, 1e60, Overflow::Propagate), 0xFFu);
  EXPECT_EQ(encode_scale(ScaleType::UE8M0, 1.49), 127u);
  EXPECT_EQ(encode_scale(ScaleType::UE8M0, 1.5), 128u);  // the tie goes up to 2
  EXPECT_EQ(encode_scale(ScaleType::UE8M0, 3.0), 129u);  // between 2 and 4: tie goes to 4
  EXPECT_EQ(encode_scale(ScaleType::UE8M0, 2.99), 128u);
  EXPECT_EQ(encode_scale(ScaleType::UE8M0, 0.74), 126u);
  EXPECT_EQ(max_finite(ScaleType::UE8M0), std::ldexp(1.0, 127));
}

TEST(ScaleCodec, OtherScaleTypesMatchTheirElementCodecs) {
  ElementType e4m3 = ElementType::floating(4, 3);
  for (uint32_t code = 0; code < 256; ++code) {
    EXPECT_TRUE(same_value(decode_scale(ScaleType::E4M3, code), decode(e4m3, code)));
  }
  EXPECT_EQ(encode_scale(ScaleType::E4M3, 1000.0), 0x7Eu);  // saturates to 448
  for (uint32_t code : {0x0000u, 0x0001u, 0x3C00u, 0x7BFFu, 0x8400u}) {
    EXPECT_EQ(decode_scale(ScaleType::F16, code), f16_bits_to_float(static_cast<uint16_t>(code)));
    EXPECT_EQ(encode_scale(ScaleType::F16, decode_scale(ScaleType::F16, code)), code);
    EXPECT_EQ(decode_scale(ScaleType::BF16, code), bf16_bits_to_float(static_cast<uint16_t>(code)));
    EXPECT_EQ(encode_scale(ScaleType::BF16, decode_scale(ScaleType::BF16, code)), code);
  }
  EXPECT_EQ(decode_scale(ScaleType::F16, encode_scale(ScaleType::F16, 1e6)), 65504.0f);  // saturating by default
  EXPECT_EQ(decode_scale(ScaleType::F16, encode_scale(ScaleType::F16, 1e6, Overflow::Propagate)), HUGE_VALF);
  EXPECT_EQ(decode_scale(ScaleType::F32, encode_scale(ScaleType::F32, 1e300)), std::numeric_limits<float>::max());
  EXPECT_EQ(decode_scale(ScaleType::F32, encode_scale(ScaleType::F32, 0.1)), 0.1f);
  EXPECT_EQ(round_to_scale(ScaleType::BF16, 1.0 + std::ldexp(1.0, -8)), 1.0);
  EXPECT_EQ(max_finite(ScaleType::E4M3), 448.0);
  EXPECT_EQ(max_finite(ScaleType::F16), 65504.0);
  EXPECT_EQ(max_finite(ScaleType::BF16), static_cast<double>(bf16_bits_to_float(0x7F7F)));
}

}  // namespace
}  // namespace qtune
