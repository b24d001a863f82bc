#pragma once
// The CPU reference every kernel result is checked against:
//   C[M,N] = dequant(A)[M,K] * dequant(W)[N,K]^T (+ bias[N]), rounded to the format's output type.
// Dequantization applies activation scales, weight scales, zero points and global scales exactly as
// quantize.hpp documents; the product runs through Eigen, accumulating in f32 (or f64 for tests).
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/format.hpp"
#include "kernels/quantize.hpp"

namespace qtune {

enum class Accumulation { F32, F64 };

struct ReferenceOptions {
  Accumulation accumulation = Accumulation::F32;
  std::span<const float> bias;  // empty, or N values added to every row before rounding
  int threads = 0;              // 0: every core
};

struct ReferenceResult {
  int64_t m = 0;
  int64_t n = 0;
  std::vector<float> unrounded;      // [m][n] the product plus bias, before rounding to the output type
  std::vector<float> output;         // [m][n] rounded to the output type (f16 or bf16), as float
  std::vector<uint16_t> output_bits; // [m][n] the output type's bit patterns
};

// Throws InputError when A and W disagree (K, format) or the bias has the wrong length.
ReferenceResult reference_gemm(const QuantizedActivations& activations, const QuantizedWeights& weights,
                               const ReferenceOptions& options = {});

// The activations of the given rows only (scales follow their rows, one scale row per row), so that the reference of
// a sample of rows costs rows x N x K (rows of a GEMM are independent), or so that a MoE expert sees its pairs' rows.
// A per-tensor scale stays one scale row covering every selected row. Throws Error for a row outside 0..M-1.
QuantizedActivations select_rows(const QuantizedActivations& activations, std::span<const int64_t> rows);

// ||out - ref|| / ||ref|| (Frobenius, in f64). Any NaN or inf in `out` counts as failure: +inf.
// When ref is all zeros it returns ||out|| (0 when both are zero). Sizes must match.
double relative_error(const std::vector<float>& out, const std::vector<float>& ref);

// The largest relative_error a correct kernel may show for this format against the f32 reference: 5e-3 for f16
// (1e-2 with bf16), 3e-3 for int8/int4 activations (exact integer MMA), 1e-2 for fp8 activations.
double default_tolerance(const FormatSpec& format);

}  // namespace qtune
