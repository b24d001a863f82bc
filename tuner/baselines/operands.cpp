#include "tuner/baselines/operands.hpp"

#include <Eigen/Core>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <tuple>

#include "kernels/codec.hpp"
#include "kernels/error.hpp"
#include "kernels/parallel.hpp"
#include "kernels/quantize.hpp"
#include "kernels/reference.hpp"
#include "tuner/baselines/lt_layout.hpp"

namespace qtune::baselines {

namespace {

bool is_fp8(BaselineKind kind) {
  return kind == BaselineKind::Fp8Tensor || kind == BaselineKind::Fp8Outer || kind == BaselineKind::Fp8Block128;
}

uint64_t mix(uint64_t a, uint64_t b) {
  RandomGenerator generator(a * 0x9E3779B97F4A7C15ull + b);
  return generator.next();
}

// rows x cols values in [-1, 1), times 2^e when `vary_magnitude`, with e = e_row + e_block + e_group drawn per
// row (-2..2), per 128 x 128 block (-2..2) and per (row, 128-column group) (-1..1). Every scale granularity then
// sees different magnitudes (per channel or token through e_row, per 128x128 block through e_block, per 1x128
// group through all three), so a scale applied to the wrong elements shows as a large error instead of hiding
// among equal scales. Deterministic in `seed`, whatever the thread count.
std::vector<float> random_matrix(int64_t rows, int64_t cols, uint64_t seed, bool vary_magnitude) {
  const auto exponent = [seed](uint64_t salt, uint64_t key, int range) {
    return static_cast<int>(mix(seed ^ salt, key) % static_cast<uint64_t>(2 * range + 1)) - range;
  };
  std::vector<float> values(static_cast<size_t>(rows * cols));
  parallel_for(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
          RandomGenerator generator(mix(seed, static_cast<uint64_t>(row)));
          const int row_exponent = vary_magnitude ? exponent(0x1111, static_cast<uint64_t>(row), 2) : 0;
          float factor = 1.0F;
          for (int64_t col = 0; col < cols; ++col) {
            if (vary_magnitude && col % 128 == 0) {
              const auto group = static_cast<uint64_t>(col / 128);
              const int block_exponent = exponent(0x2222, static_cast<uint64_t>(row / 128) * 1000003u + group, 2);
              const int group_exponent = exponent(0x3333, static_cast<uint64_t>(row) * 1000003u + group, 1);
              factor = std::ldexp(1.0F, row_exponent + block_exponent + group_exponent);
            }
            values[static_cast<size_t>(row * cols + col)] =
                static_cast<float>(2.0 * generator.uniform() - 1.0) * factor;
          }
        }
      },
      0, 16);
  return values;
}

void append_u16(std::vector<uint8_t>& bytes, size_t index, uint16_t bits) {
  std::memcpy(bytes.data() + index * 2, &bits, sizeof(bits));
}

// The reference of the 16-bit baselines (no qtune format describes 16-bit weights): the checked rows of A times W^T,
// accumulated in f64, from the values the GPU sees (already rounded to f16/bf16).
std::vector<float> dense_reference(const std::vector<float>& a, const std::vector<float>& w,
                                   const std::vector<int64_t>& rows, int64_t n, int64_t k) {
  using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const auto row_count = static_cast<int64_t>(rows.size());
  Matrix a_rows(row_count, k);
  for (int64_t r = 0; r < row_count; ++r) {
    for (int64_t col = 0; col < k; ++col) {
      a_rows(r, col) = a[static_cast<size_t>(rows[static_cast<size_t>(r)] * k + col)];
    }
  }
  std::vector<float> c(static_cast<size_t>(row_count * n));
  constexpr int64_t kChunk = 128;
  parallel_for((n + kChunk - 1) / kChunk, [&](int64_t begin, int64_t end) {
    Matrix w_chunk(kChunk, k);
    for (int64_t chunk = begin; chunk < end; ++chunk) {
      const int64_t first = chunk * kChunk;
      const int64_t count = std::min(kChunk, n - first);
      for (int64_t r = 0; r < count; ++r) {
        for (int64_t col = 0; col < k; ++col) w_chunk(r, col) = w[static_cast<size_t>((first + r) * k + col)];
      }
      const Matrix block = a_rows * w_chunk.topRows(count).transpose();
      for (int64_t r = 0; r < row_count; ++r) {
        for (int64_t col = 0; col < count; ++col) {
          c[static_cast<size_t>(r * n + first + col)] = static_cast<float>(block(r, col));
        }
      }
    }
  });
  return c;
}

// The exact int32 results of the checked rows: sums of products of the int8 codes.
std::vector<int32_t> exact_int8_rows(const QuantizedActivations& a, const QuantizedWeights& w,
                                     const std::vector<int64_t>& rows) {
  const int64_t n = w.n;
  const int64_t k = w.k;
  std::vector<int32_t> c(rows.size() * static_cast<size_t>(n));
  parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        for (size_t r = 0; r < rows.size(); ++r) {
          const uint8_t* a_row = a.codes.data() + static_cast<size_t>(rows[r] * k);
          for (int64_t col = begin; col < end; ++col) {
            const uint8_t* w_row = w.codes.data() + static_cast<size_t>(col * k);
            int64_t sum = 0;
            for (int64_t i = 0; i < k; ++i) {
              sum += static_cast<int64_t>(static_cast<int8_t>(a_row[i])) *
                     static_cast<int64_t>(static_cast<int8_t>(w_row[i]));
            }
            c[r * static_cast<size_t>(n) + static_cast<size_t>(col)] = static_cast<int32_t>(sum);
          }
        }
      },
      0, 64);
  return c;
}

// What a weight is drawn from: the same key gives the same bytes.
struct WeightKey {
  BaselineKind kind = BaselineKind::F16;
  int64_t n = 0;
  int64_t k = 0;
  uint64_t seed = 0;
  bool operator==(const WeightKey& other) const {
    return std::tie(kind, n, k, seed) == std::tie(other.kind, other.n, other.k, other.seed);
  }
};

// A bench draws the same N x K weight for every M of a baseline, and drawing it is most of the host's work: the last
// weight of each type is kept per process (one entry, so memory stays at one weight).
template <typename Weight, typename Make>
std::shared_ptr<const Weight> last_weight(const WeightKey& key, const Make& make) {
  static std::mutex mutex;
  static WeightKey cached_key;
  static std::shared_ptr<const Weight> cached;
  const std::lock_guard<std::mutex> lock(mutex);
  if (!cached || !(cached_key == key)) {
    cached.reset();  // release the old weight before drawing the new one
    cached = std::make_shared<const Weight>(make());
    cached_key = key;
  }
  return cached;
}

// A 16-bit weight: its bits as uploaded and the values they round to, which the reference multiplies.
struct Dense16Weight {
  std::vector<uint8_t> bits;
  std::vector<float> values;
};

void make_16bit(HostOperands& operands, uint64_t seed) {
  const bool bf16 = operands.kind == BaselineKind::BF16;
  const int64_t m = operands.executed.m;
  const int64_t n = operands.problem.n;
  const int64_t k = operands.problem.k;
  const auto to_bits = [bf16](float value) { return bf16 ? float_to_bf16_bits(value) : float_to_f16_bits(value); };
  const auto from_bits = [bf16](uint16_t bits) { return bf16 ? bf16_bits_to_float(bits) : f16_bits_to_float(bits); };

  // Rounds in place so that the reference sees exactly what the GPU reads.
  const auto rounded = [&](std::vector<float>& values, std::vector<uint8_t>& bits) {
    bits.resize(values.size() * 2);
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t value_bits = to_bits(values[i]);
      append_u16(bits, i, value_bits);
      values[i] = from_bits(value_bits);
    }
  };
  std::vector<float> a = random_matrix(m, k, mix(seed, 1), false);
  rounded(a, operands.activation);
  const std::shared_ptr<const Dense16Weight> w =
      last_weight<Dense16Weight>(WeightKey{operands.kind, n, k, seed}, [&] {
        Dense16Weight weight;
        weight.values = random_matrix(n, k, mix(seed, 2), false);
        rounded(weight.values, weight.bits);
        return weight;
      });
  operands.weight = w->bits;
  operands.reference = dense_reference(a, w->values, operands.reference_rows, n, k);
  FormatSpec format;  // default_tolerance only looks at the output and activation types
  format.activation = bf16 ? ActivationType::BF16 : ActivationType::F16;
  format.output = bf16 ? OutputType::BF16 : OutputType::F16;
  operands.tolerance = default_tolerance(format);
}

void make_quantized(HostOperands& operands, uint64_t seed, OutputType fp8_output) {
  FormatSpec format = *baseline_format(operands.kind);
  if (is_fp8(operands.kind)) format.output = fp8_output;
  const int64_t m = operands.executed.m;
  const int64_t n = operands.problem.n;
  const int64_t k = operands.problem.k;

  // The weight's quantization does not depend on the output type, so the key need not hold it.
  const std::shared_ptr<const QuantizedWeights> cached =
      last_weight<QuantizedWeights>(WeightKey{operands.kind, n, k, seed},
                                    [&] { return quantize_weights(format, random_matrix(n, k, mix(seed, 2), true), n, k); });
  const QuantizedWeights& w = *cached;
  const QuantizedActivations a = quantize_activations(format, random_matrix(m, k, mix(seed, 1), true), m, k);
  operands.weight = w.codes;
  operands.activation = a.codes;

  ReferenceOptions reference_options;
  reference_options.accumulation = Accumulation::F64;
  const ReferenceResult reference = reference_gemm(select_rows(a, operands.reference_rows), w, reference_options);
  // The exact product: the GPU's own rounding to bf16/f16 is what the tolerance allows for.
  operands.reference = reference.unrounded;
  operands.tolerance = default_tolerance(format);

  switch (operands.kind) {
    case BaselineKind::Fp8Tensor:
      operands.weight_scales = {w.scales.values.at(0)};
      operands.activation_scales = {a.scales.values.at(0)};
      break;
    case BaselineKind::Fp8Outer:
      // OUTER_VEC_32F: cuBLASLt's A (our W) takes one scale per its row (our N), B (our A) one per its column (M).
      operands.weight_scales = w.scales.values;
      operands.activation_scales = a.scales.values;
      break;
    case BaselineKind::Fp8Block128: {
      const Block128ScaleLayout layout = block128_scale_layout(operands.executed);
      // Padding slots of the weight scale tensor are never read; 1 keeps them harmless if they were.
      operands.weight_scales.assign(layout.weight_elements(), 1.0F);
      for (int64_t n_block = 0; n_block < w.scales.rows; ++n_block) {
        for (int64_t k_block = 0; k_block < w.scales.cols; ++k_block) {
          operands.weight_scales[layout.weight_index(n_block, k_block)] =
              w.scales.values[static_cast<size_t>(n_block * w.scales.cols + k_block)];
        }
      }
      operands.activation_scales.assign(layout.activation_elements(), 1.0F);
      for (int64_t row = 0; row < a.scales.rows; ++row) {
        for (int64_t k_block = 0; k_block < a.scales.cols; ++k_block) {
          operands.activation_scales[layout.activation_index(row, k_block)] =
              a.scales.values[static_cast<size_t>(row * a.scales.cols + k_block)];
        }
      }
      break;
    }
    case BaselineKind::Int8:
      operands.int8_weight_scales = w.scales.values;
      operands.int8_activation_scales = a.scales.values;
      operands.exact_reference = exact_int8_rows(a, w, operands.reference_rows);
      break;
    case BaselineKind::F16:
    case BaselineKind::BF16:
      break;
  }
}

}  // namespace

size_t HostOperands::output_element_bytes() const { return kind == BaselineKind::Int8 ? 4 : 2; }

HostOperands make_host_operands(BaselineKind kind, const GemmProblem& problem, int64_t executed_m, uint64_t seed,
                                const OperandOptions& options) {
  validate_problem(problem);
  if (executed_m < problem.m) {
    QTUNE_THROW(Error,
                "executed M " + std::to_string(executed_m) + " below the problem's M " + std::to_string(problem.m));
  }
  HostOperands operands;
  operands.kind = kind;
  operands.problem = problem;
  operands.executed = {executed_m, problem.n, problem.k};
  operands.reference_rows = verification_rows(problem.m, options.max_verify_rows);
  if (kind == BaselineKind::F16 || kind == BaselineKind::BF16) {
    make_16bit(operands, seed);
  } else {
    make_quantized(operands, seed, options.fp8_output);
  }
  return operands;
}

float decode_output(BaselineKind kind, OutputType fp8_output, const uint8_t* d_buffer, size_t index) {
  if (kind == BaselineKind::Int8) {
    int32_t value = 0;
    std::memcpy(&value, d_buffer + index * 4, sizeof(value));
    return static_cast<float>(value);
  }
  uint16_t bits = 0;
  std::memcpy(&bits, d_buffer + index * 2, sizeof(bits));
  const bool bf16 = kind == BaselineKind::BF16 || (is_fp8(kind) && fp8_output == OutputType::BF16);
  return bf16 ? bf16_bits_to_float(bits) : f16_bits_to_float(bits);
}

}  // namespace qtune::baselines
