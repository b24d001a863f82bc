#include "kernels/moe_reference.hpp"

#include <algorithm>

#include "kernels/codec.hpp"
#include "kernels/error.hpp"
#include "kernels/moe_layout.hpp"

namespace qtune {
namespace {

float round_output(const FormatSpec& format, float value) {
  return format.output == OutputType::BF16 ? round_to_bf16(value) : round_to_f16(value);
}

}  // namespace

QuantizedActivations make_moe_activations(const MoeProblem& problem, uint64_t seed) {
  const int64_t rows = problem.input_rows();
  return quantize_activations(problem.format, random_normal(static_cast<size_t>(rows * problem.k), seed), rows, problem.k);
}

QuantizedWeights make_expert_weights(const MoeProblem& problem, int expert, uint64_t seed) {
  const auto weights =
      random_normal(static_cast<size_t>(problem.n * problem.k), seed + 1 + static_cast<uint64_t>(expert), 0.0f, 0.05f);
  return quantize_weights(problem.format, weights, problem.n, problem.k);
}

MoeOperands make_moe_operands(const MoeProblem& problem, const Routing& routing, uint64_t seed, bool every_expert) {
  problem.validate();
  MoeOperands operands;
  operands.routing = routing;
  operands.activations = make_moe_activations(problem, seed);
  const auto counts = routing.pairs_per_expert();
  operands.experts.resize(static_cast<size_t>(problem.experts));
  for (int e = 0; e < problem.experts; ++e) {
    if (!every_expert && counts[static_cast<size_t>(e)] == 0) continue;
    operands.experts[static_cast<size_t>(e)] = make_expert_weights(problem, e, seed);
  }
  return operands;
}

MoeReferenceResult reference_moe(const MoeProblem& problem, const MoeOperands& operands, const ReferenceOptions& options) {
  problem.validate();
  const Routing& routing = operands.routing;
  validate_routing(routing);
  if (routing.experts != problem.experts || routing.top_k != problem.top_k || routing.tokens != problem.tokens) {
    QTUNE_INPUT_ERROR("routing: " + std::to_string(routing.experts) + " experts, top_k " + std::to_string(routing.top_k) + ", " +
                      std::to_string(routing.tokens) + " tokens disagree with the problem " + problem.to_string());
  }
  if (operands.activations.m != problem.input_rows() || operands.activations.k != problem.k) {
    QTUNE_INPUT_ERROR("activations: " + std::to_string(operands.activations.m) + " x " + std::to_string(operands.activations.k) +
                      ", expected " + std::to_string(problem.input_rows()) + " x " + std::to_string(problem.k));
  }
  if (operands.experts.size() != static_cast<size_t>(problem.experts)) {
    QTUNE_INPUT_ERROR("experts: " + std::to_string(operands.experts.size()) + " weights for " + std::to_string(problem.experts) + " experts");
  }
  if (!options.bias.empty()) QTUNE_INPUT_ERROR("bias: a MoE GEMM has no bias");

  const int64_t n = problem.n;
  MoeReferenceResult result;
  result.n = n;
  result.pair_unrounded.assign(static_cast<size_t>(routing.pairs() * n), 0.0f);
  result.pair_output.assign(result.pair_unrounded.size(), 0.0f);
  // One reference GEMM per expert over its pairs' rows (the layout's order; any order gives the same rows).
  const GroupedContiguousLayout grouped = grouped_contiguous_layout(routing, 1);
  for (int e = 0; e < problem.experts; ++e) {
    const int64_t first = grouped.expert_first_row[static_cast<size_t>(e)];
    const int64_t last = grouped.expert_first_row[static_cast<size_t>(e) + 1];
    if (first == last) continue;
    const QuantizedWeights& weights = operands.experts[static_cast<size_t>(e)];
    if (weights.n != n || weights.k != problem.k) {
      QTUNE_INPUT_ERROR("experts[" + std::to_string(e) + "]: weights " + std::to_string(weights.n) + " x " +
                        std::to_string(weights.k) + ", expected " + std::to_string(n) + " x " + std::to_string(problem.k));
    }
    std::vector<int64_t> rows;
    for (int64_t r = first; r < last; ++r) {
      rows.push_back(input_row_of_pair(problem.projection, routing, grouped.row_pair[static_cast<size_t>(r)]));
    }
    const ReferenceResult product = reference_gemm(select_rows(operands.activations, rows), weights, options);
    for (int64_t r = first; r < last; ++r) {
      const int64_t pair = grouped.row_pair[static_cast<size_t>(r)];
      std::copy_n(product.unrounded.begin() + (r - first) * n, n, result.pair_unrounded.begin() + pair * n);
      std::copy_n(product.output.begin() + (r - first) * n, n, result.pair_output.begin() + pair * n);
    }
  }
  if (problem.projection == MoeProjection::GateUp) {
    result.unrounded = result.pair_unrounded;
    result.output = result.pair_output;
  } else {
    result.unrounded = reduce_top_k(routing, result.pair_unrounded, n);
    result.output.resize(result.unrounded.size());
    std::transform(result.unrounded.begin(), result.unrounded.end(), result.output.begin(),
                   [&](float v) { return round_output(problem.format, v); });
  }
  return result;
}

}  // namespace qtune
