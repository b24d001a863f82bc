#pragma once
// Checking a baseline's output against the CPU reference (CPU-only, so it is unit-tested without a GPU).
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/format.hpp"
#include "tuner/baselines/baseline.hpp"
#include "tuner/baselines/operands.hpp"

namespace qtune::baselines {

struct VerifyResult {
  bool passed = false;
  double rel_error = 0;
  double tolerance = 0;
  int64_t rows_checked = 0;
  int64_t unwritten = 0;         // outputs of the problem's rows still holding the poison pattern, or not finite
  int64_t exact_mismatches = 0;  // Int8: outputs of the checked rows that differ from the exact integer result
  std::string message;           // one line: what was compared and how it went
};

// The byte the output buffer is filled with before a verification run: 0xFF is NaN in f16 and bf16; int32 outputs
// get 0x7F7F7F7F, far beyond any int8 GEMM result of K < 2^17.
uint8_t output_poison_byte(BaselineKind kind);

// `output` is the whole D buffer copied back (operands.executed.m x N elements in the output storage type).
// Passes when no output of the problem's rows is poison or non-finite, the checked rows' relative error is within
// operands.tolerance, and (Int8) every checked output equals the exact integer result.
VerifyResult compare_with_reference(const HostOperands& operands, const std::vector<uint8_t>& output,
                                    OutputType fp8_output = OutputType::BF16);

}  // namespace qtune::baselines
