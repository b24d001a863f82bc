#pragma once
// The cuBLASLt baselines qtune compares its kernels with: which exist, what they store, how much memory
// traffic and arithmetic one GEMM costs, and which baseline a quantization format is naturally compared with.
// Problem convention everywhere: C[M,N] = A[M,K] * W[N,K]^T with A, W and C row-major.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/format.hpp"

namespace qtune::baselines {

enum class BaselineKind {
  F16,          // f16 x f16, f32 accumulate, f16 out
  BF16,         // bf16 x bf16, f32 accumulate, bf16 out
  Fp8Tensor,    // e4m3 x e4m3 with one f32 scale per tensor, bf16 out
  Fp8Outer,     // e4m3 x e4m3 with per-channel weight scales and per-token activation scales, bf16 out
  Fp8Block128,  // e4m3 x e4m3 with 128x128 weight-block and 1x128 activation-group scales, bf16 out
  Int8,         // int8 x int8 IMMA, int32 accumulate, int32 out (no scales: see docs/baselines.md)
};

struct GemmProblem {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  friend bool operator==(const GemmProblem&, const GemmProblem&) = default;
};

// Throws InputError naming `field` when a dimension is not positive.
void validate_problem(const GemmProblem& problem, std::string_view field = "shape");

struct BaselineInfo {
  BaselineKind kind;
  std::string id;               // short stable name used on the command line and in the database: "cublaslt-f16"
  std::string description;      // one line for people
  int activation_bits;          // storage bits of one A element
  int weight_bits;              // storage bits of one W element
  int output_bits;              // storage bits of one C element
  std::string activation_type;  // "f16", "bf16", "e4m3", "int8"
  std::string output_type;      // "f16", "bf16", "int32"
};

// Every baseline, in a fixed order.
const std::vector<BaselineInfo>& baseline_catalog();
const BaselineInfo& baseline_info(BaselineKind kind);
const std::string& baseline_id(BaselineKind kind);
// "cublaslt-f16" -> F16. Throws InputError naming `field` and listing the valid ids.
BaselineKind parse_baseline_id(std::string_view id, std::string_view field = "baseline");
// "cublaslt-f16,cublaslt-fp8-tensor" (or "all") -> kinds in the given order, duplicates removed.
std::vector<BaselineKind> parse_baseline_list(std::string_view comma_separated, std::string_view field = "--baseline");

// The baseline that computes the same kind of GEMM as `format` on the tensor cores, if there is one:
// w8a8-fp8 per tensor -> fp8-tensor, per channel x per token -> fp8-outer, 128x128 blocks x 1x128 groups ->
// fp8-block128, w8a8-int8 -> int8, a weight-only format with f16 (bf16) activations -> f16 (bf16), the dense GEMM it
// has to beat. nullopt for formats no cuBLASLt GEMM computes with the same operand types (w4a8, w4a4, fp8 with other
// scalings).
std::optional<BaselineKind> natural_baseline(const FormatSpec& format);

// The qtune format whose quantizer produces this baseline's operands (weight and activation types and scale
// granularities; scales are f32 as cuBLASLt takes them). nullopt for the 16-bit baselines, which quantize nothing.
// natural_baseline(*baseline_format(kind)) == kind for every kind that has one.
std::optional<FormatSpec> baseline_format(BaselineKind kind);

// Memory one GEMM moves at least: A, W and C once each in their storage types, each operand's scales counted
// with it (they are under 1% of the operand for every baseline here).
struct TrafficModel {
  double activation_bytes = 0;  // A plus its scales
  double weight_bytes = 0;      // W plus its scales
  double output_bytes = 0;      // C
  double total() const { return activation_bytes + weight_bytes + output_bytes; }
};
TrafficModel traffic(BaselineKind kind, const GemmProblem& problem);
// 2 * M * N * K.
double gemm_flops(const GemmProblem& problem);

// Rows of C the verification compares with the CPU reference: all of them up to `max_rows`, otherwise `max_rows`
// rows spread evenly over M, always including the first and the last. Sorted and unique. (Rows of a GEMM are
// independent, so a subset checks every column, every K step and both ends of M.)
std::vector<int64_t> verification_rows(int64_t m, int64_t max_rows);

}  // namespace qtune::baselines
