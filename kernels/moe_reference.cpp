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

MoeOperands make_moe_operands(const MoeProblem& problem, const Routing& routing, uint64_t seed, bool every_expert) {
  problem.validate();
  MoeOperands operands;
  operands.routing = routing;
  const int64_t rows = problem.input_rows();
  operands.activations = quantize_activations(problem.format, random_normal(static_cast<size_t>(rows * problem.k), seed),
                                              rows, problem.k);
  const auto counts = routing.pairs_per_expert();
  operands.experts.resize(static_cast<size_t>(problem.experts));
  for (int e = 0; e < problem.experts; ++e) {
    if (!every_expert && counts[static_cast<size_t>(e)] == 0) continue;
    const auto weights = random_normal(static_cast<size_t>(problem.n * problem.k), seed + 1 + static_cast<uint64_t>(e), 0.0f, 0.05f);
    operands.experts[static_cast<size_t>(e)] = quantize_weights(problem.format, weights, problem.n, problem.k);
  }
  return operands;
}

QuantizedActivations select_activation_rows(const QuantizedActivations& activations, std::span<const int64_t> rows) {
  QuantizedActivations out;
  out.format = activations.format;
  out.m = static_cast<int64_t>(rows.size());
  out.k = activations.k;
  out.global_scale = activations.global_scale;
  const size_t k = static_cast<size_t>(activations.k);
  auto copy_rows = [&](const auto& source, auto& target, size_t width) {
    if (source.empty()) return;
    target.reserve(rows.size() * width);
    for (int64_t row : rows) {
      if (row < 0 || row >= activations.m) {
        QTUNE_INPUT_ERROR("rows: row " + std::to_string(row) + " is outside the " + std::to_string(activations.m) + " activation rows");
      }
      target.insert(target.end(), source.begin() + static_cast<int64_t>(static_cast<size_t>(row) * width),
                    source.begin() + static_cast<int64_t>(static_cast<size_t>(row + 1) * width));
    }
  };
  copy_rows(activations.codes, out.codes, k);
  copy_rows(activations.values, out.values, k);
  copy_rows(activations.bits16, out.bits16, k);
  out.scales = activations.scales;
  if (!activations.scales.empty() && activations.scales.rows_per_scale == 1) {
    // Per-token or per-group scales: one scale row per activation row.
    out.scales.bits.clear();
    out.scales.values.clear();
    out.scales.rows = out.m;
    copy_rows(activations.scales.bits, out.scales.bits, static_cast<size_t>(activations.scales.cols));
    copy_rows(activations.scales.values, out.scales.values, static_cast<size_t>(activations.scales.cols));
  } else if (!activations.scales.empty()) {
    // One scale for the whole tensor: row r / rows_per_scale must stay 0.
    out.scales.rows_per_scale = std::max<int64_t>(out.m, 1);
  }
  return out;
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
    const ReferenceResult product = reference_gemm(select_activation_rows(operands.activations, rows), weights, options);
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
