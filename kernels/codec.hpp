#pragma once
// Exact codecs for every element type (INT1..INT8, UINT1..UINT8, eXmY of at most 8 bits) and every scale type
// (f32, f16, bf16, ue8m0, e4m3), plus f16/bf16 <-> float helpers. Encoding rounds to nearest, ties to even.
//
// Conventions (docs/formats.md has the full table):
// - A code sits in the low `bits` bits of a uint32_t; higher bits are ignored by decode.
// - Signed integers are two's complement in `bits` bits; they encode by rounding ties-to-even and clamping.
// - Floats are sign | exponent | mantissa, bias 2^(E-1)-1, with subnormals. FloatEncoding decides the top codes:
//   Finite (sub-byte types: every code finite), FiniteNaN (8-bit "fn" types: only all-ones is NaN), Ieee (e5m2).
// - Types without a NaN code (integers, Finite floats) encode NaN as +0; callers that care check isnan first.
// - With no mantissa bits (eXm0 elements, ue8m0) a tie between 2^k and 2^(k+1) goes to 2^(k+1): it is the even
//   multiple of the quantum 2^k, which is what round-half-even on the significand gives.
// - ue8m0 is 2^(code-127), code 0xFF is NaN and there is no zero. Its encoder rounds to the nearest power of two
//   in the linear domain (x >= 1.5 * 2^k goes up), as RNE would with no mantissa bits; it saturates to 2^-127
//   below (zero and negative values included) and to 2^127 above. The RTN quantizer instead sets MX scales the OCP
//   way (shared exponent = floor(log2(amax)) - emax of the element type), see quantize.hpp.
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/format.hpp"

namespace qtune {

// What encode does with a value beyond the largest finite code, including +-inf.
enum class Overflow {
  Saturate,   // clamp to +-max finite (OCP "satfinite"; the only choice for types without inf or NaN)
  Propagate,  // IEEE-style: +-inf where the type has it (e5m2, f16, bf16); NaN for the fn types (e4m3)
};

// ---- Element types ----
uint32_t code_count(const ElementType& type);  // 2^bits
float decode(const ElementType& type, uint32_t code);
uint32_t encode(const ElementType& type, double value, Overflow overflow = Overflow::Saturate);
bool is_nan_code(const ElementType& type, uint32_t code);
bool is_finite_code(const ElementType& type, uint32_t code);  // neither NaN nor inf
double max_finite(const ElementType& type);     // largest finite value (ints: 2^(b-1)-1 signed, 2^b-1 unsigned)
double lowest_finite(const ElementType& type);  // most negative value (ints: -2^(b-1) signed, 0 unsigned)
double round_to(const ElementType& type, double value, Overflow overflow = Overflow::Saturate);  // decode(encode(v))

// Encodes many values of one element type quickly: integer rounding of the double's mantissa bits instead of the
// frexp arithmetic of encode(). Gives exactly what encode() gives.
class ElementEncoder {
 public:
  explicit ElementEncoder(const ElementType& type, Overflow overflow = Overflow::Saturate);
  uint32_t operator()(double value) const;

 private:
  ElementType type_;
  Overflow overflow_;
  double lowest_ = 0.0;  // integers: the clamp range
  double highest_ = 0.0;
  uint32_t sign_bit_ = 0;  // floats
  double largest_ = 0.0;
  uint32_t largest_code_ = 0;
  int min_exponent_ = 0;
  double subnormal_steps_ = 0.0;  // 2^(mantissa_bits - min_exponent): |x| in units of the subnormal quantum
};

// Every code's value, for decoding many elements quickly.
class DecodeTable {
 public:
  explicit DecodeTable(const ElementType& type);
  float operator[](uint32_t code) const { return values_[code & 0xFFu]; }

 private:
  std::array<float, 256> values_{};
};

// ---- Scale types ----
float decode_scale(ScaleType type, uint32_t bits);
uint32_t encode_scale(ScaleType type, double value, Overflow overflow = Overflow::Saturate);
double max_finite(ScaleType type);
double round_to_scale(ScaleType type, double value);  // decode_scale(encode_scale(v)), saturating

// ---- 16-bit floats: IEEE binary16 and bfloat16, exact round-to-nearest-even. ----
// Like hardware conversions these overflow to inf and keep NaN a (quiet) NaN.
uint16_t float_to_f16_bits(float value);
float f16_bits_to_float(uint16_t bits);
uint16_t float_to_bf16_bits(float value);
float bf16_bits_to_float(uint16_t bits);
inline float round_to_f16(float value) { return f16_bits_to_float(float_to_f16_bits(value)); }
inline float round_to_bf16(float value) { return bf16_bits_to_float(float_to_bf16_bits(value)); }
// Values in the output type (f16 or bf16), two little-endian bytes each: a bias buffer as the kernels read it.
std::vector<uint8_t> output_type_bytes(std::span<const float> values, OutputType type);

// ---- Generic IEEE-like float layouts (used by the element codecs; f16 and bf16 fit too) ----
struct FloatLayout {
  int exponent_bits = 0;
  int mantissa_bits = 0;
  FloatEncoding encoding = FloatEncoding::Finite;
  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
  int bits() const { return 1 + exponent_bits + mantissa_bits; }
};
FloatLayout float_layout(const ElementType& type);  // floats only
inline constexpr FloatLayout kF16Layout{5, 10, FloatEncoding::Ieee};
inline constexpr FloatLayout kBF16Layout{8, 7, FloatEncoding::Ieee};
double decode_float(const FloatLayout& layout, uint32_t code);
uint32_t encode_float(const FloatLayout& layout, double value, Overflow overflow);
double max_finite(const FloatLayout& layout);

}  // namespace qtune
