#pragma once
// Host-side operands of a baseline GEMM: random inputs (never zeros), quantized with qtune's own quantizer where the
// baseline needs it, laid out as cuBLASLt reads them, plus the CPU reference for the rows verification checks.
// Everything here runs without a GPU, so the data preparation and scale layouts are unit-tested on CPU machines.
#include <cstdint>
#include <vector>

#include "tuner/baselines/baseline.hpp"

namespace qtune::baselines {

struct HostOperands {
  BaselineKind kind = BaselineKind::F16;
  GemmProblem problem;              // what was asked
  GemmProblem executed;             // what cuBLASLt multiplies (M may be padded, see executed_m)
  std::vector<uint8_t> activation;  // executed.m x K elements, row-major, storage type (f16/bf16 bits, e4m3, int8)
  std::vector<uint8_t> weight;      // N x K elements, row-major, storage type
  // f32 scales in the layout cuBLASLt reads (empty for the unscaled kinds): one value each for Fp8Tensor,
  // N (weight) and executed.m (activation) values for Fp8Outer, Block128ScaleLayout for Fp8Block128.
  std::vector<float> weight_scales;
  std::vector<float> activation_scales;
  // Per-channel and per-token f32 scales that the host applies to Int8's int32 output to compare it with the
  // reference of the w8a8-int8 format; empty for the other kinds.
  std::vector<float> int8_weight_scales;
  std::vector<float> int8_activation_scales;

  std::vector<int64_t> reference_rows;   // rows of C verification compares (all < problem.m)
  std::vector<float> reference;          // reference_rows.size() x N, row-major: C from the same quantized operands
  std::vector<int32_t> exact_reference;  // Int8 only: the exact int32 results for reference_rows x N
  double tolerance = 0;                  // largest relative error that passes

  size_t activation_bytes() const { return activation.size(); }
  size_t weight_bytes() const { return weight.size(); }
  size_t output_element_bytes() const;  // 2 for f16/bf16, 4 for int32
};

struct OperandOptions {
  OutputType fp8_output = OutputType::BF16;
  int64_t max_verify_rows = 32;
};

// Deterministic for a given (kind, problem, executed_m, seed). Throws InputError for a non-positive shape.
HostOperands make_host_operands(BaselineKind kind, const GemmProblem& problem, int64_t executed_m, uint64_t seed,
                                const OperandOptions& options = {});

// Decodes output element `index` of a D buffer copied back from the GPU (f16, bf16 or int32 bits) to float.
float decode_output(BaselineKind kind, OutputType fp8_output, const uint8_t* d_buffer, size_t index);

}  // namespace qtune::baselines
