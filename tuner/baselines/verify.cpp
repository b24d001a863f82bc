#include "tuner/baselines/verify.hpp"

#include <cmath>
#include <cstring>
#include <sstream>

#include "kernels/codec.hpp"
#include "kernels/error.hpp"
#include "kernels/reference.hpp"
#include "kernels/verification.hpp"

namespace qtune::baselines {

uint8_t output_poison_byte(BaselineKind kind) { return kind == BaselineKind::Int8 ? 0x7F : 0xFF; }

namespace {

bool is_poison(BaselineKind kind, const uint8_t* element, size_t element_bytes) {
  const uint8_t poison = output_poison_byte(kind);
  for (size_t i = 0; i < element_bytes; ++i) {
    if (element[i] != poison) return false;
  }
  return true;
}

int32_t read_int32(const uint8_t* bytes) {
  int32_t value = 0;
  std::memcpy(&value, bytes, sizeof(value));
  return value;
}

}  // namespace

VerifyResult compare_with_reference(const HostOperands& operands, const std::vector<uint8_t>& output,
                                    OutputType fp8_output) {
  VerifyResult result;
  result.tolerance = operands.tolerance;
  const int64_t n = operands.problem.n;
  const size_t element_bytes = operands.output_element_bytes();
  const size_t expected_bytes = static_cast<size_t>(operands.executed.m * n) * element_bytes;
  if (output.size() != expected_bytes) {
    QTUNE_THROW(Error,
                "output of " + std::to_string(output.size()) + " bytes, expected " + std::to_string(expected_bytes));
  }

  // Every output of the problem's rows must have been written with a finite value.
  for (int64_t index = 0; index < operands.problem.m * n; ++index) {
    const uint8_t* element = output.data() + static_cast<size_t>(index) * element_bytes;
    if (is_poison(operands.kind, element, element_bytes) ||
        !std::isfinite(decode_output(operands.kind, fp8_output, output.data(), static_cast<size_t>(index)))) {
      ++result.unwritten;
    }
  }

  // The checked rows against the reference: relative error, plus exact equality for the integer GEMM.
  const size_t rows = operands.reference_rows.size();
  std::vector<float> actual(rows * static_cast<size_t>(n));
  for (size_t r = 0; r < rows; ++r) {
    const int64_t row = operands.reference_rows[r];
    for (int64_t col = 0; col < n; ++col) {
      const size_t index = static_cast<size_t>(row * n + col);
      float value = decode_output(operands.kind, fp8_output, output.data(), index);
      if (operands.kind == BaselineKind::Int8) {
        const int32_t exact = operands.exact_reference[r * static_cast<size_t>(n) + static_cast<size_t>(col)];
        if (read_int32(output.data() + index * element_bytes) != exact) ++result.exact_mismatches;
        // The w8a8-int8 format's epilogue, applied on the host: per-token times per-channel scale.
        value *= operands.int8_activation_scales[static_cast<size_t>(row)] *
                 operands.int8_weight_scales[static_cast<size_t>(col)];
      }
      actual[r * static_cast<size_t>(n) + static_cast<size_t>(col)] = value;
    }
  }
  result.rows_checked = static_cast<int64_t>(rows);
  // The one verifier, by the norm alone (no per-element bound for cuBLASLt's outputs).
  const OutputCheck check = compare_output(actual, operands.reference, n, CheckRules{result.tolerance, false});
  result.rel_error = check.relative_error;
  result.passed = result.unwritten == 0 && result.exact_mismatches == 0 && check.passed;

  std::ostringstream message;
  message << (result.passed ? "passed" : "FAILED") << ": relative error " << result.rel_error << " (tolerance "
          << result.tolerance << ") over " << rows << " of " << operands.problem.m << " rows x " << n << " columns";
  if (result.unwritten > 0) {
    message << "; " << result.unwritten << " outputs unwritten (poison) or not finite";
  }
  if (operands.kind == BaselineKind::Int8) {
    message << "; " << result.exact_mismatches << " int32 outputs differ from the exact result";
  }
  if (operands.executed.m != operands.problem.m) {
    message << "; executed M " << operands.executed.m << ", padding rows ignored";
  }
  result.message = message.str();
  return result;
}

}  // namespace qtune::baselines
