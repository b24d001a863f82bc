#pragma once
// Round-to-nearest (RTN) quantization of weights and activations into a FormatSpec, the matching dequantizers,
// and deterministic random data for tests.
//
// Layout (all row-major):
// - codes: ONE CODE PER BYTE, [rows][cols] (weights [N][K], activations [M][K]). The raw bit pattern sits in the
//   low `bits` bits: two's complement for signed ints, the unsigned value for zero-point ints, sign|exp|mantissa
//   for floats. Kernels pack them as they like.
// - scales: a ScaleGrid of [scale rows][scale cols]; element (r, c) uses scales.index(r, c) =
//   (r / rows_per_scale) * cols + c / cols_per_scale. Per granularity, for W[N][K]:
//     tensor: 1 x 1 (rows_per_scale N, cols_per_scale K)      channel: N x 1 (1, K)
//     group G: N x K/G (1, G)                                  block Gn x Gk: N/Gn x K/Gk (Gn, Gk)
//   and for A[M][K]: tensor 1 x 1 (M, K), token M x 1 (1, K), group G: M x K/G (1, G), none: no scales.
// - zero points: same layout as the scales. Integer zero points hold the unsigned code z in [0, 2^b - 1];
//   float zero points are stored in the weight scale type.
// - global scale: one f32 (1 when the format has none).
// Dequantized value: w = (decode(q) - z) * s * global   (z = 0 without zero points).
//
// How scales are chosen (per scale cell; R is the value that must map to the largest code Q):
// - symmetric: R = max|w|, Q = 2^(b-1)-1 for signed ints (1 for int1), max finite for floats;
// - zero point: the range [min(w,0), max(w,0)] maps to [0, 2^b-1]: s = (max-min)/(2^b-1), z = -min/s
//   (rounded to an integer and clamped for -zp; stored in the scale type for -fzp);
// - s = R / Q / global rounded to the scale type (RNE, saturating); codes are quantized with the rounded scale and
//   saturate;
// - ue8m0 scales follow OCP MX: s = 2^(floor(log2 R) - floor(log2 Q)), so the largest values may clamp;
// - global scale (g<G>+t, NVFP4): global = max|W| / (Q * max finite of the scale type) (= amax / (6 * 448) for NVFP4).
#include <cstdint>
#include <vector>

#include "kernels/format.hpp"

namespace qtune {

struct ScaleGrid {
  ScaleType type = ScaleType::F32;
  int64_t rows = 0;  // scale rows and columns; 0 x 0 when the matrix has no scales
  int64_t cols = 0;
  int64_t rows_per_scale = 1;  // matrix rows and columns one scale covers
  int64_t cols_per_scale = 1;
  std::vector<uint32_t> bits;  // encoded in `type` (f16/bf16/e4m3/ue8m0 in the low bits)
  std::vector<float> values;   // decoded

  bool empty() const { return values.empty(); }
  int64_t index(int64_t row, int64_t col) const { return (row / rows_per_scale) * cols + col / cols_per_scale; }
  float at(int64_t row, int64_t col) const { return empty() ? 1.0f : values[static_cast<size_t>(index(row, col))]; }
};

struct QuantizedWeights {
  FormatSpec format;
  int64_t n = 0;
  int64_t k = 0;
  std::vector<uint8_t> codes;  // [n][k], one code per byte
  ScaleGrid scales;
  std::vector<uint32_t> zero_point_bits;  // per scale; empty without zero points
  std::vector<float> zero_points;         // decoded, per scale
  float global_scale = 1.0f;

  float dequantize(int64_t row, int64_t col) const;
};

struct QuantizedActivations {
  FormatSpec format;
  int64_t m = 0;
  int64_t k = 0;
  // Quantized activations (int8, int4, e4m3, e5m2, e2m1): codes [m][k] and their scales.
  std::vector<uint8_t> codes;
  ScaleGrid scales;
  float global_scale = 1.0f;
  // f16/bf16 activations: the values rounded to the type, and their 16-bit patterns. Empty otherwise.
  std::vector<float> values;
  std::vector<uint16_t> bits16;

  float dequantize(int64_t row, int64_t col) const;
};

// Throws InputError when the shape does not fit the format (FormatSpec::validate_shape) or the sizes disagree.
QuantizedWeights quantize_weights(const FormatSpec& format, const std::vector<float>& weights, int64_t n, int64_t k);
QuantizedActivations quantize_activations(const FormatSpec& format, const std::vector<float>& activations, int64_t m,
                                          int64_t k);

// The scale grid of an N x K weight in `format` (type, rows, cols, rows and columns per scale), without values.
// Throws InputError when the shape does not fit the format.
ScaleGrid weight_scale_layout(const FormatSpec& format, int64_t n, int64_t k);
// Weights quantized elsewhere (a checkpoint's codes and scales) in the layout above: codes [n][k] one per byte, and the
// bit patterns of the scales (the format's scale type) and zero points (unsigned codes, or the scale type for float
// zero points), one per scale cell in weight_scale_layout's order. Decodes the values. Throws InputError naming the
// field whose size or content is wrong.
QuantizedWeights weights_from_codes(const FormatSpec& format, int64_t n, int64_t k, std::vector<uint8_t> codes,
                                    std::vector<uint32_t> scale_bits, std::vector<uint32_t> zero_point_bits = {},
                                    float global_scale = 1.0f);

std::vector<float> dequantize(const QuantizedWeights& weights);         // [n][k]
std::vector<float> dequantize(const QuantizedActivations& activations);  // [m][k]
// Rows [first_row, first_row + row_count) into out[row_count][k], in f32 or f64 arithmetic.
void dequantize_rows(const QuantizedWeights& weights, int64_t first_row, int64_t row_count, float* out);
void dequantize_rows(const QuantizedWeights& weights, int64_t first_row, int64_t row_count, double* out);
void dequantize_rows(const QuantizedActivations& activations, int64_t first_row, int64_t row_count, float* out);
void dequantize_rows(const QuantizedActivations& activations, int64_t first_row, int64_t row_count, double* out);

// ---- Deterministic random data (the same on every platform: splitmix64 + Box-Muller) ----
class RandomGenerator {
 public:
  explicit RandomGenerator(uint64_t seed) : state_(seed) {}
  uint64_t next();
  double uniform();  // in (0, 1]
  double normal();   // standard normal

 private:
  uint64_t state_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};
void fill_random_normal(std::vector<float>& values, uint64_t seed, float mean = 0.0f, float stddev = 1.0f);
void fill_random_uniform(std::vector<float>& values, uint64_t seed, float low = -1.0f, float high = 1.0f);
std::vector<float> random_normal(size_t count, uint64_t seed, float mean = 0.0f, float stddev = 1.0f);

}  // namespace qtune
