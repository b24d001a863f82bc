#include "kernels/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "kernels/codec.hpp"
#include "kernels/error.hpp"
#include "kernels/parallel.hpp"

namespace qtune {
namespace {

// How one matrix is quantized; weights and activations both reduce to this.
struct Plan {
  ElementType element;
  ZeroPoint zero_point = ZeroPoint::None;
  bool scaled = true;
  ScaleType scale_type = ScaleType::F32;
  int64_t rows_per_scale = 1;
  int64_t cols_per_scale = 1;
  bool global = false;
};

struct Quantized {
  std::vector<uint8_t> codes;
  ScaleGrid scales;
  std::vector<uint32_t> zero_point_bits;
  std::vector<float> zero_points;
  float global_scale = 1.0f;
};

// The code magnitude Q that the cell's largest value R maps to.
double largest_code(const ElementType& element, ZeroPoint zero_point) {
  if (zero_point != ZeroPoint::None) return std::ldexp(1.0, element.bits) - 1.0;
  if (element.kind == ElementKind::SignedInt) return std::max(std::ldexp(1.0, element.bits - 1) - 1.0, 1.0);
  return max_finite(element);
}

int floor_log2(double positive) {
  int exponent = 0;
  std::frexp(positive, &exponent);  // positive = f * 2^exponent with f in [0.5, 1)
  return exponent - 1;
}

// The value R that must map to the largest code: max|x| when symmetric, the range including 0 with a zero point.
double cell_extent(float low, float high, ZeroPoint zero_point) {
  if (zero_point != ZeroPoint::None) return static_cast<double>(high) - static_cast<double>(low);
  return std::max(-static_cast<double>(low), static_cast<double>(high));
}

Quantized quantize_matrix(const float* data, int64_t rows, int64_t cols, const Plan& plan) {
  Quantized result;
  result.codes.resize(static_cast<size_t>(rows * cols));
  const ElementEncoder encode_element(plan.element);
  if (!plan.scaled) {
    parallel_for(rows * cols, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) result.codes[i] = static_cast<uint8_t>(encode_element(data[i]));
    }, 0, 4096);
    return result;
  }

  ScaleGrid& grid = result.scales;
  grid.type = plan.scale_type;
  grid.rows_per_scale = plan.rows_per_scale;
  grid.cols_per_scale = plan.cols_per_scale;
  grid.rows = rows / plan.rows_per_scale;
  grid.cols = cols / plan.cols_per_scale;
  const int64_t cell_count = grid.rows * grid.cols;

  // Per (row, scale column) minimum and maximum, both including 0 (every rule below wants 0 in the range).
  std::vector<float> row_low(static_cast<size_t>(rows * grid.cols), 0.0f);
  std::vector<float> row_high(row_low.size(), 0.0f);
  parallel_for(rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t c = 0; c < grid.cols; ++c) {
        float low = 0.0f;
        float high = 0.0f;
        const float* segment = data + r * cols + c * plan.cols_per_scale;
        for (int64_t i = 0; i < plan.cols_per_scale; ++i) {
          low = std::min(low, segment[i]);
          high = std::max(high, segment[i]);
        }
        row_low[r * grid.cols + c] = low;
        row_high[r * grid.cols + c] = high;
      }
    }
  }, 0, 16);
  std::vector<float> cell_low(static_cast<size_t>(cell_count), 0.0f);
  std::vector<float> cell_high(cell_low.size(), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < grid.cols; ++c) {
      int64_t cell = (r / plan.rows_per_scale) * grid.cols + c;
      cell_low[cell] = std::min(cell_low[cell], row_low[r * grid.cols + c]);
      cell_high[cell] = std::max(cell_high[cell], row_high[r * grid.cols + c]);
    }
  }

  const double largest = largest_code(plan.element, plan.zero_point);
  if (plan.global) {
    double tensor_extent = 0.0;
    for (int64_t cell = 0; cell < cell_count; ++cell) {
      tensor_extent = std::max(tensor_extent, cell_extent(cell_low[cell], cell_high[cell], plan.zero_point));
    }
    // The global scale stretches the narrow scale type over the tensor's range (NVFP4: amax / (6 * 448)).
    float global = static_cast<float>(tensor_extent / (largest * max_finite(plan.scale_type)));
    result.global_scale = (global > 0.0f && std::isfinite(global)) ? global : 1.0f;
  }
  const double global = result.global_scale;

  grid.bits.resize(static_cast<size_t>(cell_count));
  grid.values.resize(static_cast<size_t>(cell_count));
  if (plan.zero_point != ZeroPoint::None) {
    result.zero_point_bits.resize(static_cast<size_t>(cell_count));
    result.zero_points.resize(static_cast<size_t>(cell_count));
  }
  const ElementEncoder encode_e4m3_scale(ElementType::floating(4, 3));
  parallel_for(cell_count, [&](int64_t begin, int64_t end) {
    for (int64_t cell = begin; cell < end; ++cell) {
      double extent = cell_extent(cell_low[cell], cell_high[cell], plan.zero_point);
      uint32_t bits = 0;
      if (plan.scale_type == ScaleType::UE8M0) {
        // OCP MX: the shared exponent is floor(log2(amax)) minus the largest exponent of the element type.
        int exponent = extent > 0.0 ? floor_log2(extent) - floor_log2(largest) : -127;
        bits = static_cast<uint32_t>(std::clamp(exponent + 127, 0, 254));
      } else if (plan.scale_type == ScaleType::E4M3) {
        bits = encode_e4m3_scale(extent / largest / global);  // NVFP4 has a scale per 16 weights: keep it quick
      } else {
        bits = encode_scale(plan.scale_type, extent / largest / global);
      }
      float scale = decode_scale(plan.scale_type, bits);
      grid.bits[cell] = bits;
      grid.values[cell] = scale;
      const double effective = static_cast<double>(scale) * global;
      if (plan.zero_point == ZeroPoint::Integer) {
        double zero = effective > 0.0 ? -static_cast<double>(cell_low[cell]) / effective : 0.0;
        uint32_t code = encode(plan.element, zero);  // rounds ties-to-even and clamps to [0, 2^b - 1]
        result.zero_point_bits[cell] = code;
        result.zero_points[cell] = static_cast<float>(code);
      } else if (plan.zero_point == ZeroPoint::Float) {
        double zero = effective > 0.0 ? -static_cast<double>(cell_low[cell]) / effective : 0.0;
        uint32_t code = encode_scale(plan.scale_type, zero);
        result.zero_point_bits[cell] = code;
        result.zero_points[cell] = decode_scale(plan.scale_type, code);
      }
    }
  }, 0, 256);

  parallel_for(rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t c0 = 0; c0 < cols; c0 += plan.cols_per_scale) {
        const int64_t cell = grid.index(r, c0);
        const double effective = static_cast<double>(grid.values[cell]) * global;
        // With a zero point the element type is unsigned: encode rounds q = x + z and clamps to [0, 2^b - 1].
        const bool shifted = plan.zero_point != ZeroPoint::None;
        const double zero = shifted ? result.zero_points[cell] : 0.0;
        const float* in = data + r * cols + c0;
        uint8_t* out = result.codes.data() + r * cols + c0;
        for (int64_t i = 0; i < plan.cols_per_scale; ++i) {
          double scaled = effective > 0.0 ? static_cast<double>(in[i]) / effective : 0.0;
          if (shifted) scaled += zero;  // only then: adding +0 would turn -0 into +0
          out[i] = static_cast<uint8_t>(encode_element(scaled));
        }
      }
    }
  }, 0, 4);
  return result;
}

void check_size(size_t actual, int64_t rows, int64_t cols, const char* what) {
  if (static_cast<int64_t>(actual) != rows * cols) {
    QTUNE_INPUT_ERROR(std::string(what) + ": holds " + std::to_string(actual) + " values, not " +
                      std::to_string(rows) + " x " + std::to_string(cols));
  }
}

template <typename T>
void dequantize_codes(const std::vector<uint8_t>& codes, int64_t cols, const DecodeTable& table, const ScaleGrid& grid,
                      const std::vector<float>& zero_points, float global_scale, int64_t first_row, int64_t row_count,
                      T* out) {
  const T global = static_cast<T>(global_scale);
  for (int64_t r = first_row; r < first_row + row_count; ++r) {
    const uint8_t* row_codes = codes.data() + r * cols;
    T* row_out = out + (r - first_row) * cols;
    if (grid.empty()) {
      for (int64_t c = 0; c < cols; ++c) row_out[c] = static_cast<T>(table[row_codes[c]]);
      continue;
    }
    for (int64_t c0 = 0; c0 < cols; c0 += grid.cols_per_scale) {
      const int64_t cell = grid.index(r, c0);
      const T scale = static_cast<T>(grid.values[cell]);
      const T zero = zero_points.empty() ? T(0) : static_cast<T>(zero_points[cell]);
      const int64_t c_end = std::min(cols, c0 + grid.cols_per_scale);
      for (int64_t c = c0; c < c_end; ++c) row_out[c] = (static_cast<T>(table[row_codes[c]]) - zero) * scale * global;
    }
  }
}

void check_rows(int64_t first_row, int64_t row_count, int64_t rows) {
  if (first_row < 0 || row_count < 0 || first_row + row_count > rows) {
    QTUNE_THROW(Error, "rows [" + std::to_string(first_row) + ", " + std::to_string(first_row + row_count) +
                           ") are outside a matrix of " + std::to_string(rows) + " rows");
  }
}

template <typename T>
void dequantize_weight_rows(const QuantizedWeights& weights, int64_t first_row, int64_t row_count, T* out) {
  check_rows(first_row, row_count, weights.n);
  DecodeTable table(weights.format.weight);
  dequantize_codes(weights.codes, weights.k, table, weights.scales, weights.zero_points, weights.global_scale, first_row,
                   row_count, out);
}

template <typename T>
void dequantize_activation_rows(const QuantizedActivations& activations, int64_t first_row, int64_t row_count, T* out) {
  check_rows(first_row, row_count, activations.m);
  if (!activations.format.activation_is_quantized()) {
    const float* values = activations.values.data() + first_row * activations.k;
    std::transform(values, values + row_count * activations.k, out, [](float v) { return static_cast<T>(v); });
    return;
  }
  DecodeTable table(element_type_of(activations.format.activation));
  dequantize_codes(activations.codes, activations.k, table, activations.scales, {}, activations.global_scale,
                   first_row, row_count, out);
}

}  // namespace

QuantizedWeights quantize_weights(const FormatSpec& format, const std::vector<float>& weights, int64_t n, int64_t k) {
  format.validate_shape(n, k);
  check_size(weights.size(), n, k, "weights");
  const ScaleGrid layout = weight_scale_layout(format, n, k);
  Plan plan;
  plan.element = format.weight;
  plan.zero_point = format.zero_point;
  plan.scale_type = format.weight_scale.type;
  plan.global = format.weight_scale.global_scale;
  plan.rows_per_scale = layout.rows_per_scale;
  plan.cols_per_scale = layout.cols_per_scale;
  Quantized quantized = quantize_matrix(weights.data(), n, k, plan);
  QuantizedWeights result;
  result.format = format;
  result.n = n;
  result.k = k;
  result.codes = std::move(quantized.codes);
  result.scales = std::move(quantized.scales);
  result.zero_point_bits = std::move(quantized.zero_point_bits);
  result.zero_points = std::move(quantized.zero_points);
  result.global_scale = quantized.global_scale;
  return result;
}

ScaleGrid weight_scale_layout(const FormatSpec& format, int64_t n, int64_t k) {
  format.validate_shape(n, k);
  ScaleGrid grid;
  grid.type = format.weight_scale.type;
  switch (format.weight_scale.granularity) {
    case WeightScaleGranularity::PerTensor: grid.rows_per_scale = n; grid.cols_per_scale = k; break;
    case WeightScaleGranularity::PerChannel: grid.rows_per_scale = 1; grid.cols_per_scale = k; break;
    case WeightScaleGranularity::PerGroup: grid.rows_per_scale = 1; grid.cols_per_scale = format.weight_scale.group_k; break;
    case WeightScaleGranularity::PerBlock:
      grid.rows_per_scale = format.weight_scale.group_n;
      grid.cols_per_scale = format.weight_scale.group_k;
      break;
  }
  grid.rows = n / grid.rows_per_scale;
  grid.cols = k / grid.cols_per_scale;
  return grid;
}

QuantizedWeights weights_from_codes(const FormatSpec& format, int64_t n, int64_t k, std::vector<uint8_t> codes,
                                    std::vector<uint32_t> scale_bits, std::vector<uint32_t> zero_point_bits,
                                    float global_scale) {
  QuantizedWeights weights;
  weights.format = format;
  weights.n = n;
  weights.k = k;
  weights.scales = weight_scale_layout(format, n, k);
  check_size(codes.size(), n, k, "weights.codes");
  const size_t cells = static_cast<size_t>(weights.scales.rows * weights.scales.cols);
  if (scale_bits.size() != cells) {
    QTUNE_INPUT_ERROR("weights.scales: holds " + std::to_string(scale_bits.size()) + " values, the format needs " +
                      std::to_string(cells) + " (" + std::to_string(weights.scales.rows) + " x " +
                      std::to_string(weights.scales.cols) + ")");
  }
  const size_t zero_cells = format.zero_point == ZeroPoint::None ? 0 : cells;
  if (zero_point_bits.size() != zero_cells) {
    QTUNE_INPUT_ERROR("weights.zero_points: holds " + std::to_string(zero_point_bits.size()) + " values, the format needs " +
                      std::to_string(zero_cells));
  }
  if (!(std::isfinite(global_scale) && global_scale > 0.0f)) {
    QTUNE_INPUT_ERROR("weights.global_scale: must be a positive finite number");
  }
  if (!format.weight_scale.global_scale && global_scale != 1.0f) {
    QTUNE_INPUT_ERROR("weights.global_scale: the format has no global scale, so it must be 1");
  }
  const uint32_t code_mask = (1u << format.weight.bits) - 1u;
  for (size_t i = 0; i < codes.size(); ++i) {
    if ((codes[i] & ~code_mask) != 0) {
      QTUNE_INPUT_ERROR("weights.codes: element " + std::to_string(i) + " has bits above the " +
                        std::to_string(format.weight.bits) + "-bit code");
    }
  }
  weights.codes = std::move(codes);
  weights.scales.values.reserve(cells);
  for (uint32_t bits : scale_bits) weights.scales.values.push_back(decode_scale(weights.scales.type, bits));
  weights.scales.bits = std::move(scale_bits);
  for (uint32_t bits : zero_point_bits) {
    if (format.zero_point == ZeroPoint::Integer && bits > code_mask) {
      QTUNE_INPUT_ERROR("weights.zero_points: " + std::to_string(bits) + " is not a " + std::to_string(format.weight.bits) +
                        "-bit code");
    }
    weights.zero_points.push_back(format.zero_point == ZeroPoint::Integer ? static_cast<float>(bits)
                                                                          : decode_scale(weights.scales.type, bits));
  }
  weights.zero_point_bits = std::move(zero_point_bits);
  weights.global_scale = global_scale;
  return weights;
}

QuantizedActivations quantize_activations(const FormatSpec& format, const std::vector<float>& activations, int64_t m,
                                          int64_t k) {
  format.validate();
  if (m < 1) QTUNE_INPUT_ERROR("M: must be positive, got " + std::to_string(m));
  if (k < 1) QTUNE_INPUT_ERROR("K: must be positive, got " + std::to_string(k));
  if (format.activation_scale.granularity == ActivationScaleGranularity::PerGroup &&
      k % format.activation_scale.group_k != 0) {
    QTUNE_INPUT_ERROR("act-scale: group size " + std::to_string(format.activation_scale.group_k) +
                      " does not divide K=" + std::to_string(k));
  }
  check_size(activations.size(), m, k, "activations");
  QuantizedActivations result;
  result.format = format;
  result.m = m;
  result.k = k;
  if (!format.activation_is_quantized()) {
    const bool bf16 = format.activation == ActivationType::BF16;
    result.bits16.resize(activations.size());
    result.values.resize(activations.size());
    for (size_t i = 0; i < activations.size(); ++i) {
      result.bits16[i] = bf16 ? float_to_bf16_bits(activations[i]) : float_to_f16_bits(activations[i]);
      result.values[i] = bf16 ? bf16_bits_to_float(result.bits16[i]) : f16_bits_to_float(result.bits16[i]);
    }
    return result;
  }
  Plan plan;
  plan.element = element_type_of(format.activation);
  plan.scale_type = format.activation_scale.type;
  plan.global = format.activation_scale.global_scale;
  switch (format.activation_scale.granularity) {
    case ActivationScaleGranularity::None: plan.scaled = false; break;
    case ActivationScaleGranularity::PerTensor: plan.rows_per_scale = m; plan.cols_per_scale = k; break;
    case ActivationScaleGranularity::PerToken: plan.rows_per_scale = 1; plan.cols_per_scale = k; break;
    case ActivationScaleGranularity::PerGroup:
      plan.rows_per_scale = 1;
      plan.cols_per_scale = format.activation_scale.group_k;
      break;
  }
  Quantized quantized = quantize_matrix(activations.data(), m, k, plan);
  result.codes = std::move(quantized.codes);
  result.scales = std::move(quantized.scales);
  result.global_scale = quantized.global_scale;
  return result;
}

float QuantizedWeights::dequantize(int64_t row, int64_t col) const {
  float element = qtune::decode(format.weight, codes.at(static_cast<size_t>(row * k + col)));
  float zero = zero_points.empty() ? 0.0f : zero_points[static_cast<size_t>(scales.index(row, col))];
  return (element - zero) * scales.at(row, col) * global_scale;
}

float QuantizedActivations::dequantize(int64_t row, int64_t col) const {
  size_t index = static_cast<size_t>(row * k + col);
  if (!format.activation_is_quantized()) return values.at(index);
  return qtune::decode(element_type_of(format.activation), codes.at(index)) * scales.at(row, col) * global_scale;
}

std::vector<float> dequantize(const QuantizedWeights& weights) {
  std::vector<float> out(static_cast<size_t>(weights.n * weights.k));
  parallel_for(weights.n, [&](int64_t begin, int64_t end) {
    dequantize_weight_rows(weights, begin, end - begin, out.data() + begin * weights.k);
  }, 0, 16);
  return out;
}

std::vector<float> dequantize(const QuantizedActivations& activations) {
  std::vector<float> out(static_cast<size_t>(activations.m * activations.k));
  dequantize_activation_rows(activations, 0, activations.m, out.data());
  return out;
}

void dequantize_rows(const QuantizedWeights& weights, int64_t first_row, int64_t row_count, float* out) {
  dequantize_weight_rows(weights, first_row, row_count, out);
}
void dequantize_rows(const QuantizedWeights& weights, int64_t first_row, int64_t row_count, double* out) {
  dequantize_weight_rows(weights, first_row, row_count, out);
}
void dequantize_rows(const QuantizedActivations& activations, int64_t first_row, int64_t row_count, float* out) {
  dequantize_activation_rows(activations, first_row, row_count, out);
}
void dequantize_rows(const QuantizedActivations& activations, int64_t first_row, int64_t row_count, double* out) {
  dequantize_activation_rows(activations, first_row, row_count, out);
}

// ---------------------------------------------------------------- random data

uint64_t RandomGenerator::next() {
  // splitmix64: small, fast, and the same sequence everywhere.
  state_ += 0x9E3779B97F4A7C15ull;
  uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double RandomGenerator::uniform() { return static_cast<double>((next() >> 11) + 1) * 0x1.0p-53; }

double RandomGenerator::normal() {
  // Box-Muller gives two independent normals per pair of uniforms; the second is kept for the next call.
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  double radius = std::sqrt(-2.0 * std::log(uniform()));
  double angle = 2.0 * std::numbers::pi * uniform();
  spare_ = radius * std::sin(angle);
  has_spare_ = true;
  return radius * std::cos(angle);
}

namespace {
// Values are drawn in fixed blocks, each from its own generator, so large fills run in parallel and still give the
// same numbers on any number of threads.
constexpr int64_t kRandomBlock = 1 << 16;

template <typename Draw>
void fill_in_blocks(std::vector<float>& values, uint64_t seed, const Draw& draw) {
  const int64_t block_count = (static_cast<int64_t>(values.size()) + kRandomBlock - 1) / kRandomBlock;
  parallel_for(block_count, [&](int64_t begin, int64_t end) {
    for (int64_t block = begin; block < end; ++block) {
      RandomGenerator generator(RandomGenerator(seed ^ (0xD1B54A32D192ED03ull * static_cast<uint64_t>(block))).next());
      const size_t first = static_cast<size_t>(block * kRandomBlock);
      const size_t last = std::min(values.size(), first + static_cast<size_t>(kRandomBlock));
      for (size_t i = first; i < last; ++i) values[i] = draw(generator);
    }
  });
}
}  // namespace

void fill_random_normal(std::vector<float>& values, uint64_t seed, float mean, float stddev) {
  fill_in_blocks(values, seed, [&](RandomGenerator& generator) {
    return static_cast<float>(mean + stddev * generator.normal());
  });
}

void fill_random_uniform(std::vector<float>& values, uint64_t seed, float low, float high) {
  fill_in_blocks(values, seed, [&](RandomGenerator& generator) {
    return static_cast<float>(low + (high - low) * (1.0 - generator.uniform()));
  });
}

std::vector<float> random_normal(size_t count, uint64_t seed, float mean, float stddev) {
  std::vector<float> values(count);
  fill_random_normal(values, seed, mean, stddev);
  return values;
}

}  // namespace qtune
