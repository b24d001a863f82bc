#include "search/space.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/error.hpp"

namespace qtune::search {

void for_each_combination(const std::vector<std::vector<int>>& values,
                          const std::function<void(const std::vector<int>&)>& visit) {
  for (const std::vector<int>& list : values) {
    if (list.empty()) return;
  }
  std::vector<size_t> index(values.size(), 0);
  std::vector<int> combination(values.size());
  while (true) {
    for (size_t i = 0; i < values.size(); ++i) combination[i] = values[i][index[i]];
    visit(combination);
    size_t position = values.size();
    while (true) {
      if (position == 0) return;  // the first list wrapped: every combination was visited
      --position;
      if (++index[position] < values[position].size()) break;
      index[position] = 0;
    }
  }
}

SpaceEnumeration enumerate_space(const KernelFamily& family, const Problem& problem, const ArchLimits& limits,
                                 const ParameterRanges& ranges) {
  const auto domains = family.parameter_space();
  std::vector<std::vector<int>> values;
  for (const auto& domain : domains) {
    const auto chosen = ranges.find(domain.name);
    if (chosen == ranges.end()) {
      values.push_back(domain.values);
      continue;
    }
    if (chosen->second.empty()) QTUNE_INPUT_ERROR("ranges." + domain.name + ": no values");
    values.push_back(chosen->second);
  }
  SpaceEnumeration space;
  for_each_combination(values, [&](const std::vector<int>& combination) {
    KernelConfig config{family.name(), {}};
    for (size_t d = 0; d < domains.size(); ++d) config.params[domains[d].name] = combination[d];
    ++space.total;
    RuleVerdict verdict = family.check(config, problem, limits);
    if (verdict.valid) {
      space.candidates.push_back(std::move(config));
    } else {
      ++space.removed_by_rule[verdict.rule];
    }
  });
  return space;
}

std::vector<KernelConfig> spread_evenly(std::vector<KernelConfig> candidates, std::size_t count) {
  if (count == 0 || candidates.size() <= count) return candidates;
  std::vector<KernelConfig> spread;
  spread.reserve(count);
  for (std::size_t i = 0; i < count; ++i) spread.push_back(std::move(candidates[candidates.size() * i / count]));
  return spread;
}

namespace {
uint64_t block_threads(const LaunchGeometry& geometry) {
  return uint64_t{geometry.block[0]} * geometry.block[1] * geometry.block[2];
}
}  // namespace

int resident_blocks_per_sm(const ArchLimits& limits, const LaunchGeometry& geometry, const CompiledResources& resources) {
  return limits.resident_blocks_per_sm(block_threads(geometry), resources.registers,
                                       uint64_t(geometry.dynamic_shared_bytes) + uint64_t(resources.static_shared_bytes));
}

RuleVerdict check_compiled(const KernelConfig& config, const Problem&, const ArchLimits& limits,
                           const LaunchGeometry& geometry, const CompiledResources& resources) {
  const std::string name = config.to_string();
  if (resources.spill_bytes > 0) {
    return RuleVerdict::fail("spills", name + ": " + std::to_string(resources.spill_bytes) + " bytes of register spills");
  }
  const uint64_t shared = uint64_t(geometry.dynamic_shared_bytes) + uint64_t(resources.static_shared_bytes);
  if (shared > uint64_t(limits.max_shared_per_block)) {
    return RuleVerdict::fail("smem-after-compile", name + ": " + std::to_string(shared) + " bytes of shared memory > " +
                                                       std::to_string(limits.max_shared_per_block) + " per block");
  }
  if (block_threads(geometry) > uint64_t(limits.max_threads_per_sm)) {
    return RuleVerdict::fail("threads-per-sm", name + ": block larger than an SM holds");
  }
  if (resident_blocks_per_sm(limits, geometry, resources) == 0) {
    return RuleVerdict::fail("registers-per-sm", name + ": " + std::to_string(resources.registers) +
                                                     " registers per thread leave no block resident on an SM");
  }
  return RuleVerdict::ok();
}

std::vector<std::string> cost_feature_names(const KernelFamily& family) {
  std::vector<std::string> names = {"log2_m", "log2_n", "log2_k", "log2_ctas", "waves", "wave_efficiency",
                                    "m_tile_efficiency", "log2_bytes_per_flop"};
  for (const auto& domain : family.parameter_space()) names.push_back("log2_" + domain.name);
  return names;
}

std::vector<double> tiling_features(const Problem& problem, double units, double slots, double m_tile_efficiency) {
  slots = std::max(slots, 1.0);
  const double waves = units / slots;
  const double weight_bytes = double(problem.n) * double(problem.k) * problem.format.bits_per_weight() / 8.0;
  const double activation_bytes = double(problem.m) * double(problem.k) * problem.format.activation_bits() / 8.0;
  const double flops = 2.0 * double(problem.m) * double(problem.n) * double(problem.k);
  return {std::log2(double(problem.m)),
          std::log2(double(problem.n)),
          std::log2(double(problem.k)),
          std::log2(std::max(units, 1.0)),
          waves,
          units / (std::ceil(waves) * slots),
          m_tile_efficiency,
          std::log2((weight_bytes + activation_bytes) / flops)};
}

std::vector<double> cost_features(const KernelFamily& family, const KernelConfig& config, const Problem& problem,
                                  const ArchLimits& limits) {
  const LaunchGeometry geometry = family.launch_geometry(config, problem);
  const double ctas = double(geometry.grid[0]) * geometry.grid[1] * geometry.grid[2];
  double m_tile_efficiency = 1.0;
  if (auto it = config.params.find("bm"); it != config.params.end() && it->second > 0) {
    const double bm = it->second;
    m_tile_efficiency = double(problem.m) / (std::ceil(double(problem.m) / bm) * bm);
  }
  std::vector<double> features = tiling_features(problem, ctas, limits.sm_count, m_tile_efficiency);
  for (const auto& domain : family.parameter_space()) {
    features.push_back(std::log2(double(std::max(domain.value_in(config), 0)) + 1.0));
  }
  return features;
}

}  // namespace qtune::search
