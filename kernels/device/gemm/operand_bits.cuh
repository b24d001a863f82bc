#pragma once
// Bit formulas that turn weight codes into 8-bit or 4-bit tensor-core operands (quantized activations). Plain C++
// apart from the qualifiers, so host tests run the very same formulas on prepacked words; the device uses them in
// dequant.cuh (operand_slot). Each lane of a 32-bit register holds one value: 4 lanes of 8 bits or 8 lanes of 4 bits.
#if defined(__CUDACC__)
#define QTUNE_OPERAND_FUNCTION __host__ __device__ __forceinline__ constexpr
#else
#define QTUNE_OPERAND_FUNCTION inline constexpr
#endif

namespace qtune {
namespace device {
namespace operand_bits {

// 0x01010101 for 8-bit lanes, 0x11111111 for 4-bit lanes.
QTUNE_OPERAND_FUNCTION unsigned int lane_ones(int lane_bits) { return lane_bits == 8 ? 0x01010101u : 0x11111111u; }

// Offset-binary integer codes (code + 2^(bits-1)) in the low `bits` of each lane -> the signed lane value
// code * 2^(lane_bits - bits): the code moves to the top of the lane and its top bit flips back to two's complement.
QTUNE_OPERAND_FUNCTION unsigned int integer_operand(unsigned int codes, int lane_bits, int bits) {
  return (codes << (lane_bits - bits)) ^ (lane_ones(lane_bits) << (lane_bits - 1));
}

// Float codes (sign | exponent | mantissa, `bits` wide, `mantissa_bits` of mantissa) in the low bits of each 8-bit
// lane -> an fp8 lane with `operand_mantissa_bits` (3: e4m3, 2: e5m2): the sign moves to bit 7 and exponent|mantissa
// to the top of the fp8 mantissa, so the lane holds value * 2^(bias - fp8 bias) exactly (subnormals included).
QTUNE_OPERAND_FUNCTION unsigned int float_operand(unsigned int codes, int bits, int mantissa_bits, int operand_mantissa_bits) {
  const int shift = operand_mantissa_bits - mantissa_bits;
  const unsigned int magnitude_mask = (((1u << (bits - 1)) - 1u) << shift) * 0x01010101u;
  return ((codes << (8 - bits)) & 0x80808080u) | ((codes << shift) & magnitude_mask);
}

// The fp8 byte (e4m3 or e5m2) of a small integer, exact while |value| <= 2^(mantissa bits + 1): lookup-table entries.
QTUNE_OPERAND_FUNCTION unsigned int fp8_byte_of_integer(int value, bool e5m2) {
  const int magnitude = value < 0 ? -value : value;
  const int mantissa_bits = e5m2 ? 2 : 3;
  const int bias = e5m2 ? 15 : 7;
  int exponent = 0;  // floor(log2(magnitude))
  while ((2 << exponent) <= magnitude) ++exponent;
  const unsigned int bits =
      magnitude == 0 ? 0u
                     : static_cast<unsigned int>(((exponent + bias) << mantissa_bits) | (((magnitude - (1 << exponent)) << mantissa_bits) >> exponent));
  return (value < 0 ? 0x80u : 0u) | bits;
}

// Four table bytes, the fp8 magnitudes of first, first + step, ..., packed as one byte-permutation source register.
QTUNE_OPERAND_FUNCTION unsigned int fp8_magnitude_table(int first, int step, bool e5m2) {
  unsigned int table = 0;
  for (int i = 0; i < 4; ++i) table |= fp8_byte_of_integer(first + step * i, e5m2) << (8 * i);
  return table;
}

// prmt.b32 (default mode) in plain C++, for host tests: selector nibble i picks byte (nibble & 7) of {b, a} (0-3 from
// a) into byte i, or with the nibble's top bit set that byte's sign replicated.
QTUNE_OPERAND_FUNCTION unsigned int byte_permute(unsigned int a, unsigned int b, unsigned int selector) {
  const unsigned long long bytes = (static_cast<unsigned long long>(b) << 32) | a;
  unsigned int result = 0;
  for (int i = 0; i < 4; ++i) {
    const unsigned int nibble = (selector >> (4 * i)) & 0xFu;
    unsigned int byte = static_cast<unsigned int>(bytes >> (8 * (nibble & 7u))) & 0xFFu;
    if (nibble & 8u) byte = (byte & 0x80u) ? 0xFFu : 0x00u;
    result |= byte << (8 * i);
  }
  return result;
}

// Offset-binary int4 codes (c = q + 8) of two 8-bit-lane registers sharing one word (register 0 in the low nibble of
// every byte, register 1 in the high one) -> the fp8 operands q, exact, by byte permutation instead of arithmetic:
// nibble by nibble, selector c ^ 8 picks |q| from the table of 0..7 and selector c picks 8 - c from the table of
// 8..1; a selector's top bit set gives its byte's sign replicated, 0 for these tables, so OR-ing the two lookups keeps
// the one that applies. The sign (c < 8) is the code's top bit inverted, moved to bit 7 of its byte. `permute` is prmt.
template <class Permute>
QTUNE_OPERAND_FUNCTION void int4_fp8_pair(unsigned int word, bool e5m2, const Permute& permute, unsigned int& r0, unsigned int& r1) {
  const unsigned int positive_low = fp8_magnitude_table(0, 1, e5m2), positive_high = fp8_magnitude_table(4, 1, e5m2);
  const unsigned int negative_low = fp8_magnitude_table(8, -1, e5m2), negative_high = fp8_magnitude_table(4, -1, e5m2);
  const unsigned int flipped = word ^ 0x88888888u;
  // Nibbles 0-3 (bytes 0-1 of the word) and 4-7 (bytes 2-3): bytes [r0 lane i, r1 lane i, r0 lane i + 1, r1 lane i + 1].
  const unsigned int low = permute(positive_low, positive_high, flipped) | permute(negative_low, negative_high, word);
  const unsigned int high = permute(positive_low, positive_high, flipped >> 16) | permute(negative_low, negative_high, word >> 16);
  r0 = permute(low, high, 0x6420u) | (~(word << 4) & 0x80808080u);
  r1 = permute(low, high, 0x7531u) | (~word & 0x80808080u);
}

}  // namespace operand_bits
}  // namespace device
}  // namespace qtune
