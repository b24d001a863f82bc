#pragma once
// The CPU reference of a MoE GEMM (kernels/moe.hpp), built on reference_gemm: per expert, the activation rows of its
// pairs (quantized as the format says, over the whole input: a per-tensor scale is the input's) times the expert's
// dequantized weights. It is the same for every layout: a layout only decides where a kernel reads and writes rows,
// and MoeRowMap (kernels/moe_layout.hpp) maps a kernel's rows back to pairs to compare.
#include <cstdint>
#include <vector>

#include "kernels/moe.hpp"
#include "kernels/quantize.hpp"
#include "kernels/reference.hpp"

namespace qtune {

// Everything a MoE GEMM reads, on the host.
struct MoeOperands {
  Routing routing;
  QuantizedActivations activations;       // [problem.input_rows()][K]
  std::vector<QuantizedWeights> experts;  // [E] of [N][K]; experts no pair routes to are empty (n = 0) unless asked for
};

// Seeded random operands: activations N(0, 1), weights N(0, 0.05) per expert (seed + 1 + e), quantized to the format.
// `every_expert`: also quantize the experts no pair routes to (a kernel never reads them; tests may poison them).
MoeOperands make_moe_operands(const MoeProblem& problem, const Routing& routing, uint64_t seed, bool every_expert = false);
// Its pieces, for a caller that keeps experts between problems of the same format, N, K and seed: the activations
// [input_rows][K], and expert e's weights (the same for every token count and routing).
QuantizedActivations make_moe_activations(const MoeProblem& problem, uint64_t seed);
QuantizedWeights make_expert_weights(const MoeProblem& problem, int expert, uint64_t seed);

struct MoeReferenceResult {
  int64_t n = 0;
  // Per pair p: A[input row of p] · W_{expert of p}ᵀ, without router weights: [pairs][n].
  std::vector<float> pair_unrounded;
  std::vector<float> pair_output;  // rounded to the output type: the gate-up's output, the down's intermediate rows
  // The projection's output: gate-up [pairs][n] (= pair_*), down [tokens][n] (reduce_top_k of pair_unrounded).
  std::vector<float> unrounded;
  std::vector<float> output;  // rounded to the output type
};

// Throws InputError when the operands disagree with the problem (rows, K, N, format, experts, routing).
MoeReferenceResult reference_moe(const MoeProblem& problem, const MoeOperands& operands,
                                 const ReferenceOptions& options = {});

}  // namespace qtune
