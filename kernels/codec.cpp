#include "kernels/codec.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "kernels/error.hpp"

namespace qtune {
namespace {

// Round a double to the nearest integer, ties to even, independent of the FPU rounding mode.
double round_half_even(double value) {
  double floor_value = std::floor(value);
  double fraction = value - floor_value;
  if (fraction > 0.5) return floor_value + 1.0;
  if (fraction == 0.5 && std::fmod(floor_value, 2.0) != 0.0) return floor_value + 1.0;
  return floor_value;
}

uint32_t low_mask(int bits) { return bits >= 32 ? 0xFFFFFFFFu : (1u << bits) - 1u; }

// Top exponent field that holds finite values, and the largest mantissa there.
int max_finite_exponent_field(const FloatLayout& layout) {
  int all_ones = (1 << layout.exponent_bits) - 1;
  switch (layout.encoding) {
    case FloatEncoding::Finite: return all_ones;
    case FloatEncoding::FiniteNaN: return layout.mantissa_bits == 0 ? all_ones - 1 : all_ones;
    case FloatEncoding::Ieee: return all_ones - 1;
  }
  return all_ones;
}

uint32_t max_finite_mantissa_field(const FloatLayout& layout) {
  uint32_t all_ones = low_mask(layout.mantissa_bits);
  if (layout.encoding == FloatEncoding::FiniteNaN && layout.mantissa_bits > 0) return all_ones - 1;
  return all_ones;
}

uint32_t max_finite_code(const FloatLayout& layout) {
  return (static_cast<uint32_t>(max_finite_exponent_field(layout)) << layout.mantissa_bits) |
         max_finite_mantissa_field(layout);
}

uint32_t nan_code(const FloatLayout& layout) {
  uint32_t exponent_ones = low_mask(layout.exponent_bits) << layout.mantissa_bits;
  if (layout.encoding == FloatEncoding::FiniteNaN) return exponent_ones | low_mask(layout.mantissa_bits);
  // Ieee: a quiet NaN has the top mantissa bit set.
  return exponent_ones | (1u << (layout.mantissa_bits - 1));
}

uint32_t infinity_code(const FloatLayout& layout) { return low_mask(layout.exponent_bits) << layout.mantissa_bits; }

// Builds the f32 bit pattern directly from the fields (no ldexp), so the tests' closed form stays independent.
float float_from_fields(const FloatLayout& layout, uint32_t sign, uint32_t exponent_field, uint32_t mantissa) {
  const int mantissa_bits = layout.mantissa_bits;
  const int min_exponent = 1 - layout.bias();
  uint32_t bits = sign << 31;
  if (exponent_field == 0) {
    if (mantissa == 0) return std::bit_cast<float>(bits);
    if (min_exponent == -126) {
      // The layout's subnormals are f32 subnormals too (bf16): the mantissa lines up directly.
      return std::bit_cast<float>(bits | (mantissa << (23 - mantissa_bits)));
    }
    // Normalize: the highest set mantissa bit becomes the implicit one.
    int top = std::bit_width(mantissa) - 1;
    int exponent = min_exponent - mantissa_bits + top;
    uint32_t fraction = (mantissa & ~(1u << top)) << (23 - top);
    return std::bit_cast<float>(bits | (static_cast<uint32_t>(exponent + 127) << 23) | fraction);
  }
  int exponent = static_cast<int>(exponent_field) - layout.bias();
  return std::bit_cast<float>(bits | (static_cast<uint32_t>(exponent + 127) << 23) | (mantissa << (23 - mantissa_bits)));
}

void check_layout(const FloatLayout& layout) {
  if (layout.exponent_bits < 1 || layout.exponent_bits > 8 || layout.mantissa_bits < 0 || layout.mantissa_bits > 23) {
    QTUNE_THROW(Error, "float layout e" + std::to_string(layout.exponent_bits) + "m" +
                           std::to_string(layout.mantissa_bits) + " is outside what the codec handles");
  }
}

}  // namespace

// ---------------------------------------------------------------- generic float layouts

FloatLayout float_layout(const ElementType& type) {
  if (!type.is_float()) QTUNE_THROW(Error, type.name() + " is not a floating-point type");
  return FloatLayout{type.exponent_bits, type.mantissa_bits, type.float_encoding()};
}

double max_finite(const FloatLayout& layout) {
  return decode_float(layout, max_finite_code(layout));
}

double decode_float(const FloatLayout& layout, uint32_t code) {
  check_layout(layout);
  const int mantissa_bits = layout.mantissa_bits;
  const uint32_t exponent_ones = low_mask(layout.exponent_bits);
  uint32_t sign = (code >> (layout.exponent_bits + mantissa_bits)) & 1u;
  uint32_t exponent_field = (code >> mantissa_bits) & exponent_ones;
  uint32_t mantissa = code & low_mask(mantissa_bits);
  if (exponent_field == exponent_ones) {
    if (layout.encoding == FloatEncoding::Ieee) {
      if (mantissa != 0) return std::numeric_limits<double>::quiet_NaN();
      return sign ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    }
    if (layout.encoding == FloatEncoding::FiniteNaN && mantissa == low_mask(mantissa_bits)) {
      return std::numeric_limits<double>::quiet_NaN();
    }
  }
  return float_from_fields(layout, sign, exponent_field, mantissa);
}

uint32_t encode_float(const FloatLayout& layout, double value, Overflow overflow) {
  check_layout(layout);
  const int mantissa_bits = layout.mantissa_bits;
  const uint32_t sign = std::signbit(value) ? 1u << (layout.exponent_bits + mantissa_bits) : 0u;
  if (std::isnan(value)) return layout.encoding == FloatEncoding::Finite ? 0u : (sign | nan_code(layout));
  const bool saturate = overflow == Overflow::Saturate || layout.encoding == FloatEncoding::Finite;
  auto overflowed = [&]() -> uint32_t {
    if (saturate) return sign | max_finite_code(layout);
    return sign | (layout.encoding == FloatEncoding::Ieee ? infinity_code(layout) : nan_code(layout));
  };
  double magnitude = std::fabs(value);
  if (std::isinf(magnitude)) return overflowed();
  if (magnitude == 0.0) return sign;

  // Round at the binade of the value as if the exponent range were unbounded, then check for overflow.
  const int min_exponent = 1 - layout.bias();
  int frexp_exponent = 0;
  std::frexp(magnitude, &frexp_exponent);
  int exponent = std::max(frexp_exponent - 1, min_exponent);
  double quantum = std::ldexp(1.0, exponent - mantissa_bits);
  double steps = round_half_even(magnitude / quantum);  // exact: the quotient is a power-of-two rescaling
  if (steps * quantum > max_finite(layout)) return overflowed();
  if (steps == 0.0) return sign;

  uint32_t significand = static_cast<uint32_t>(steps);
  const uint32_t implicit_one = 1u << mantissa_bits;
  if (significand < implicit_one) return sign | significand;  // subnormal (only possible at min_exponent)
  if (significand == 2 * implicit_one) {                      // rounded up into the next binade
    significand = implicit_one;
    ++exponent;
  }
  uint32_t exponent_field = static_cast<uint32_t>(exponent + layout.bias());
  return sign | (exponent_field << mantissa_bits) | (significand - implicit_one);
}

// ---------------------------------------------------------------- element types

uint32_t code_count(const ElementType& type) { return 1u << type.bits; }

float decode(const ElementType& type, uint32_t code) {
  code &= low_mask(type.bits);
  switch (type.kind) {
    case ElementKind::UnsignedInt: return static_cast<float>(code);
    case ElementKind::SignedInt: {
      int32_t value = static_cast<int32_t>(code);
      if (code & (1u << (type.bits - 1))) value -= static_cast<int32_t>(1u << type.bits);
      return static_cast<float>(value);
    }
    case ElementKind::Float: return static_cast<float>(decode_float(float_layout(type), code));
  }
  return 0.0f;
}

uint32_t encode(const ElementType& type, double value, Overflow overflow) {
  if (type.is_float()) return encode_float(float_layout(type), value, overflow);
  if (std::isnan(value)) return 0u;
  double clamped = std::clamp(round_half_even(value), lowest_finite(type), max_finite(type));
  return static_cast<uint32_t>(static_cast<int32_t>(clamped)) & low_mask(type.bits);
}

bool is_nan_code(const ElementType& type, uint32_t code) {
  return type.is_float() && std::isnan(decode_float(float_layout(type), code & low_mask(type.bits)));
}

bool is_finite_code(const ElementType& type, uint32_t code) {
  return !type.is_float() || std::isfinite(decode_float(float_layout(type), code & low_mask(type.bits)));
}

double max_finite(const ElementType& type) {
  switch (type.kind) {
    case ElementKind::SignedInt: return std::ldexp(1.0, type.bits - 1) - 1.0;
    case ElementKind::UnsignedInt: return std::ldexp(1.0, type.bits) - 1.0;
    case ElementKind::Float: return max_finite(float_layout(type));
  }
  return 0.0;
}

double lowest_finite(const ElementType& type) {
  switch (type.kind) {
    case ElementKind::SignedInt: return -std::ldexp(1.0, type.bits - 1);
    case ElementKind::UnsignedInt: return 0.0;
    case ElementKind::Float: return -max_finite(float_layout(type));
  }
  return 0.0;
}

double round_to(const ElementType& type, double value, Overflow overflow) {
  return decode(type, encode(type, value, overflow));
}

ElementEncoder::ElementEncoder(const ElementType& type, Overflow overflow) : type_(type), overflow_(overflow) {
  if (type.is_integer()) {
    lowest_ = lowest_finite(type);
    highest_ = max_finite(type);
    return;
  }
  const FloatLayout layout = float_layout(type);
  sign_bit_ = 1u << (type.bits - 1);
  largest_code_ = max_finite_code(layout);
  largest_ = decode_float(layout, largest_code_);
  min_exponent_ = 1 - layout.bias();
  subnormal_steps_ = std::ldexp(1.0, layout.mantissa_bits - min_exponent_);
}

uint32_t ElementEncoder::operator()(double value) const {
  if (type_.is_integer()) {
    if (std::isnan(value)) return 0u;
    double clamped = std::clamp(round_half_even(value), lowest_, highest_);
    return static_cast<uint32_t>(static_cast<int32_t>(clamped)) & low_mask(type_.bits);
  }
  const uint32_t sign = std::signbit(value) ? sign_bit_ : 0u;
  const double magnitude = std::fabs(value);
  if (!(magnitude < largest_)) {  // NaN, inf, and values at or beyond the largest finite one
    if (magnitude == largest_ || (overflow_ == Overflow::Saturate && !std::isnan(value))) return sign | largest_code_;
    return encode(type_, value, overflow_);
  }
  const uint64_t bits = std::bit_cast<uint64_t>(magnitude);
  const int exponent = static_cast<int>(bits >> 52) - 1023;
  if (exponent < min_exponent_) {
    // Subnormal range of the type: count quanta (an exact power-of-two rescaling) and round that count.
    return sign | static_cast<uint32_t>(round_half_even(magnitude * subnormal_steps_));
  }
  // Round the 52-bit mantissa to the type's width, ties to even; a carry moves into the exponent field, and the
  // result cannot pass the largest code because |value| is below the largest value.
  const int shift = 52 - type_.mantissa_bits;
  const uint64_t mantissa = bits & ((uint64_t{1} << 52) - 1);
  const uint64_t kept_lowest_bit = ((mantissa | (uint64_t{1} << 52)) >> shift) & 1u;  // the implicit 1 when m = 0
  const uint64_t rounded = mantissa + ((uint64_t{1} << (shift - 1)) - 1) + kept_lowest_bit;
  const uint64_t exponent_field = static_cast<uint64_t>(exponent - min_exponent_ + 1);
  return sign | static_cast<uint32_t>(((exponent_field << 52) + rounded) >> shift);
}

DecodeTable::DecodeTable(const ElementType& type) {
  for (uint32_t code = 0; code < code_count(type); ++code) values_[code] = decode(type, code);
  // Codes above 2^bits alias the low bits, matching decode().
  for (uint32_t code = code_count(type); code < 256; ++code) values_[code] = values_[code & low_mask(type.bits)];
}

// ---------------------------------------------------------------- scale types

namespace {
const ElementType& e4m3_type() {
  static const ElementType type = ElementType::floating(4, 3);
  return type;
}
}  // namespace

float decode_scale(ScaleType type, uint32_t bits) {
  switch (type) {
    case ScaleType::F32: return std::bit_cast<float>(bits);
    case ScaleType::F16: return f16_bits_to_float(static_cast<uint16_t>(bits));
    case ScaleType::BF16: return bf16_bits_to_float(static_cast<uint16_t>(bits));
    case ScaleType::E4M3: return decode(e4m3_type(), bits);
    case ScaleType::UE8M0: {
      bits &= 0xFFu;
      if (bits == 0xFFu) return std::numeric_limits<float>::quiet_NaN();
      // 2^(bits-127): exponent field `bits` with an empty mantissa; code 0 is the f32 subnormal 2^-127.
      return bits == 0 ? std::bit_cast<float>(0x00400000u) : std::bit_cast<float>(bits << 23);
    }
  }
  return 0.0f;
}

uint32_t encode_scale(ScaleType type, double value, Overflow overflow) {
  switch (type) {
    case ScaleType::F32: {
      float rounded = static_cast<float>(value);  // IEEE conversion: round to nearest even
      if (overflow == Overflow::Saturate && std::isinf(rounded)) {
        rounded = std::copysign(std::numeric_limits<float>::max(), rounded);
      }
      return std::bit_cast<uint32_t>(rounded);
    }
    case ScaleType::F16: return encode_float(kF16Layout, value, overflow);
    case ScaleType::BF16: return encode_float(kBF16Layout, value, overflow);
    case ScaleType::E4M3: return encode(e4m3_type(), value, overflow);
    case ScaleType::UE8M0: {
      if (std::isnan(value)) return 0xFFu;
      if (!(value > 0.0)) return 0x00u;  // no zero or negative values: the smallest scale
      if (std::isinf(value)) return overflow == Overflow::Saturate ? 0xFEu : 0xFFu;
      int frexp_exponent = 0;
      double fraction = std::frexp(value, &frexp_exponent);  // value = fraction * 2^e, fraction in [0.5, 1)
      int exponent = frexp_exponent - 1;                     // value in [2^exponent, 2^(exponent+1))
      double position = fraction * 2.0;                      // in [1, 2)
      // Ties (1.5 * 2^k) go up: 2^(k+1) is the even multiple of 2^k, as RNE does for any eXm0 type.
      if (position >= 1.5) ++exponent;
      int code = exponent + 127;
      if (code < 0) return 0x00u;
      if (code > 254) return overflow == Overflow::Saturate ? 0xFEu : 0xFFu;
      return static_cast<uint32_t>(code);
    }
  }
  return 0u;
}

double max_finite(ScaleType type) {
  switch (type) {
    case ScaleType::F32: return std::numeric_limits<float>::max();
    case ScaleType::F16: return max_finite(kF16Layout);
    case ScaleType::BF16: return max_finite(kBF16Layout);
    case ScaleType::E4M3: return max_finite(e4m3_type());
    case ScaleType::UE8M0: return std::ldexp(1.0, 127);
  }
  return 0.0;
}

double round_to_scale(ScaleType type, double value) { return decode_scale(type, encode_scale(type, value)); }

// ---------------------------------------------------------------- f16 / bf16

uint16_t float_to_f16_bits(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x1FFu));
  if (magnitude >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 rounds to inf
  if (magnitude >= 0x38800000u) {                                                // >= 2^-14: normal f16
    // Add just under half an f16 ulp plus the kept LSB (ties to even), then drop 13 bits and rebias 127 -> 15.
    uint32_t rounded = magnitude + 0x0FFFu + ((magnitude >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
  }
  // Subnormal or zero: adding 0.5 puts the f16 subnormal quantum 2^-24 at the f32 ulp, so the FPU rounds (RNE).
  float shifted = std::bit_cast<float>(magnitude) + 0.5f;
  return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(0.5f)));
}

float f16_bits_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1Fu) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {
    if (mantissa == 0) return std::bit_cast<float>(sign);
    return static_cast<float>(decode_float(kF16Layout, bits));  // subnormal: normalized by the generic decoder
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

std::vector<uint8_t> output_type_bytes(std::span<const float> values, OutputType type) {
  std::vector<uint8_t> bytes(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t bits = type == OutputType::F16 ? float_to_f16_bits(values[i]) : float_to_bf16_bits(values[i]);
    bytes[2 * i] = static_cast<uint8_t>(bits & 0xFF);
    bytes[2 * i + 1] = static_cast<uint8_t>(bits >> 8);
  }
  return bytes;
}

uint16_t float_to_bf16_bits(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN
  // Ties to even at bit 16; a carry into the exponent is the correct next binade (or inf on overflow).
  uint32_t rounded = bits + 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

float bf16_bits_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

}  // namespace qtune
