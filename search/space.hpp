#pragma once
// The configuration space of one problem: every point of a family's parameter space, pruned in two passes
// (the family's static rules before compiling, the ptxas resource report after), with counts per rule.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kernels/family.hpp"

namespace qtune::search {

struct SpaceEnumeration {
  std::vector<KernelConfig> candidates;          // valid after static rules, in canonical enumeration order
  size_t total = 0;                              // points in the parameter space
  std::map<std::string, size_t> removed_by_rule; // rule name -> candidates it removed (first failing rule counts)
};

// Calls visit with every combination of one value from each list (an odometer, the last list fastest); nothing
// when a list is empty, one empty combination when there are no lists.
void for_each_combination(const std::vector<std::vector<int>>& values,
                          const std::function<void(const std::vector<int>&)>& visit);

// The one enumerator of candidates: the cartesian product of the family's parameter domains, each replaced by the
// values `ranges` gives for it (a family's curated_ranges, --param or --bm values; names the family lacks are
// ignored), in canonical order (the last parameter fastest), keeping what passes family.check() and counting what
// each rule removed. Throws InputError "ranges.<name>: no values" for an empty list in `ranges`.
SpaceEnumeration enumerate_space(const KernelFamily& family, const Problem& problem, const ArchLimits& limits,
                                 const ParameterRanges& ranges = {});

// At most `count` of `candidates`, spread evenly over the list and in its order (candidates[i * size / count]);
// all of them when count is 0 or at least their number.
std::vector<KernelConfig> spread_evenly(std::vector<KernelConfig> candidates, std::size_t count);

// What the compiler reported for one candidate (a plain copy of the JIT's resource report; search/ has no CUDA).
struct CompiledResources {
  int registers = 0;
  int spill_bytes = 0;  // stores + loads
  int static_shared_bytes = 0;
  int stack_frame_bytes = 0;
};

// Second pass, after compiling: spills, zero occupancy (registers or shared memory per SM), shared memory per block.
// Rules: "spills", "registers-per-sm", "smem-after-compile", "threads-per-sm".
RuleVerdict check_compiled(const KernelConfig& config, const Problem& problem, const ArchLimits& limits,
                           const LaunchGeometry& geometry, const CompiledResources& resources);

// Blocks of this kernel that fit on one SM (0: none), from registers, shared memory and threads.
int resident_blocks_per_sm(const ArchLimits& limits, const LaunchGeometry& geometry, const CompiledResources& resources);

// The part of the cost features every space shares: log2 M, N, K, log2 of the work units (CTAs, or output tiles),
// waves of units over `slots`, their efficiency, the M tile's efficiency, and log2 of bytes per flop.
std::vector<double> tiling_features(const Problem& problem, double units, double slots, double m_tile_efficiency);

// Features for cost models; comparable across problems and GPUs of a family, so a model can carry over.
// Problem size (log m, n, k), each parameter (log2), waves and wave efficiency, tile padding efficiency, bytes per FLOP.
std::vector<double> cost_features(const KernelFamily& family, const KernelConfig& config, const Problem& problem,
                                  const ArchLimits& limits);
std::vector<std::string> cost_feature_names(const KernelFamily& family);

}  // namespace qtune::search
