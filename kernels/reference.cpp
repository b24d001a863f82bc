#include "kernels/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <Eigen/Core>

#include "kernels/codec.hpp"
#include "kernels/error.hpp"
#include "kernels/parallel.hpp"

namespace qtune {
namespace {

template <typename T>
using RowMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Weight rows are dequantized and multiplied in chunks, so memory stays small and chunks run in parallel.
constexpr int64_t kRowsPerChunk = 128;

template <typename T>
std::vector<T> product(const QuantizedActivations& activations, const QuantizedWeights& weights, int threads) {
  const int64_t m = activations.m;
  const int64_t n = weights.n;
  const int64_t k = weights.k;
  RowMajorMatrix<T> a(m, k);
  dequantize_rows(activations, 0, m, a.data());
  std::vector<T> c(static_cast<size_t>(m * n));
  const int64_t chunk_count = (n + kRowsPerChunk - 1) / kRowsPerChunk;
  parallel_for(chunk_count, [&](int64_t begin, int64_t end) {
    RowMajorMatrix<T> w_chunk(kRowsPerChunk, k);
    for (int64_t chunk = begin; chunk < end; ++chunk) {
      const int64_t first_row = chunk * kRowsPerChunk;
      const int64_t rows = std::min(kRowsPerChunk, n - first_row);
      dequantize_rows(weights, first_row, rows, w_chunk.data());
      Eigen::Map<RowMajorMatrix<T>, 0, Eigen::OuterStride<>> c_block(c.data() + first_row, m, rows,
                                                                       Eigen::OuterStride<>(n));
      c_block.noalias() = a * w_chunk.topRows(rows).transpose();
    }
  }, threads);
  return c;
}

}  // namespace

ReferenceResult reference_gemm(const QuantizedActivations& activations, const QuantizedWeights& weights,
                               const ReferenceOptions& options) {
  if (activations.k != weights.k) {
    QTUNE_INPUT_ERROR("K: activations have K=" + std::to_string(activations.k) + " but weights K=" +
                      std::to_string(weights.k));
  }
  if (activations.format != weights.format) {
    QTUNE_INPUT_ERROR("format: activations were quantized as " + activations.format.to_string() + " but weights as " +
                      weights.format.to_string());
  }
  if (!options.bias.empty() && static_cast<int64_t>(options.bias.size()) != weights.n) {
    QTUNE_INPUT_ERROR("bias: has " + std::to_string(options.bias.size()) + " values for N=" + std::to_string(weights.n));
  }
  ReferenceResult result;
  result.m = activations.m;
  result.n = weights.n;
  const size_t count = static_cast<size_t>(result.m * result.n);
  result.unrounded.resize(count);
  auto add_bias = [&](auto& c) {
    for (int64_t row = 0; row < result.m; ++row) {
      for (int64_t col = 0; col < result.n; ++col) {
        auto value = c[static_cast<size_t>(row * result.n + col)];
        if (!options.bias.empty()) value += options.bias[static_cast<size_t>(col)];
        result.unrounded[static_cast<size_t>(row * result.n + col)] = static_cast<float>(value);
      }
    }
  };
  if (options.accumulation == Accumulation::F64) {
    std::vector<double> c = product<double>(activations, weights, options.threads);
    add_bias(c);
  } else {
    std::vector<float> c = product<float>(activations, weights, options.threads);
    add_bias(c);
  }
  const bool bf16 = weights.format.output == OutputType::BF16;
  result.output.resize(count);
  result.output_bits.resize(count);
  for (size_t i = 0; i < count; ++i) {
    result.output_bits[i] = bf16 ? float_to_bf16_bits(result.unrounded[i]) : float_to_f16_bits(result.unrounded[i]);
    result.output[i] = bf16 ? bf16_bits_to_float(result.output_bits[i]) : f16_bits_to_float(result.output_bits[i]);
  }
  return result;
}

double relative_error(const std::vector<float>& out, const std::vector<float>& ref) {
  if (out.size() != ref.size()) {
    QTUNE_THROW(Error, "relative_error: " + std::to_string(out.size()) + " outputs against " +
                           std::to_string(ref.size()) + " reference values");
  }
  double difference = 0.0;
  double reference = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return std::numeric_limits<double>::infinity();
    double delta = static_cast<double>(out[i]) - static_cast<double>(ref[i]);
    difference += delta * delta;
    reference += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
  }
  if (reference == 0.0) return std::sqrt(difference);
  return std::sqrt(difference / reference);
}

double default_tolerance(const FormatSpec& format) {
  // Output rounding (2^-11 f16 / 2^-8 bf16 relative) plus kernels dequantizing weights into the 16-bit type stay
  // well below these, while a wrong scale, zero point or layout gives errors of 10% and more.
  const bool bf16 = format.output == OutputType::BF16 || format.activation == ActivationType::BF16;
  if (format.activation == ActivationType::Int8 || format.activation == ActivationType::Int4) {
    return bf16 ? 1e-2 : 3e-3;  // exact integer dot products: only the scales' f32 products and the output rounding
  }
  if (format.activation == ActivationType::E4M3 || format.activation == ActivationType::E5M2) {
    return 1e-2;  // fp8 tensor cores add their products with less than f32 precision
  }
  return bf16 ? 1e-2 : 5e-3;
}

QuantizedActivations select_rows(const QuantizedActivations& activations, std::span<const int64_t> rows) {
  QuantizedActivations selected;
  selected.format = activations.format;
  selected.m = static_cast<int64_t>(rows.size());
  selected.k = activations.k;
  selected.global_scale = activations.global_scale;
  for (int64_t row : rows) {
    if (row < 0 || row >= activations.m) {
      QTUNE_THROW(Error, "select_rows: row " + std::to_string(row) + " outside 0.." + std::to_string(activations.m - 1));
    }
  }
  // The selected rows, `width` values each, of `source` appended to `target`.
  auto copy_rows = [&rows](const auto& source, auto& target, size_t width) {
    if (source.empty()) return;
    target.reserve(rows.size() * width);
    for (int64_t row : rows) {
      const size_t first = static_cast<size_t>(row) * width;
      target.insert(target.end(), source.begin() + static_cast<std::ptrdiff_t>(first),
                    source.begin() + static_cast<std::ptrdiff_t>(first + width));
    }
  };
  const auto k = static_cast<size_t>(activations.k);
  copy_rows(activations.codes, selected.codes, k);
  copy_rows(activations.values, selected.values, k);
  copy_rows(activations.bits16, selected.bits16, k);
  const ScaleGrid& scales = activations.scales;
  selected.scales = scales;
  if (scales.empty()) return selected;
  if (scales.rows_per_scale > 1) {
    // One scale for the whole tensor: kept as it is, covering every selected row (a device packs one scale).
    selected.scales.rows_per_scale = std::max<int64_t>(selected.m, 1);
    return selected;
  }
  // Per-token or per-group scales: each selected row gets a copy of the scale row it used.
  selected.scales.values.clear();
  selected.scales.bits.clear();
  selected.scales.rows = selected.m;
  selected.scales.rows_per_scale = 1;
  const auto cols = static_cast<size_t>(scales.cols);
  copy_rows(scales.values, selected.scales.values, cols);
  copy_rows(scales.bits, selected.scales.bits, cols);
  return selected;
}

}  // namespace qtune
