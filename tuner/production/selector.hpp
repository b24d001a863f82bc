#pragma once
// How the production runtime picks a configuration (internal to libqtune_runtime and `qtune export --cubins`):
// the tuned table (exact shape, then the nearest shape), checked against the family's rules on the target, else the
// family heuristic.
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/family.hpp"
#include "kernels/moe.hpp"
#include "reports/selection_table.hpp"
#include "tuner/production/qtune_runtime.hpp"

namespace qtune::production {

// An exported table (`qtune export -o table.json`); InputError naming the file when it cannot be read or parsed.
reports::SelectionTable read_selection_table(const std::filesystem::path& path);

// A problem from user input: InputError naming "m", "n" or "k" for a non-positive size, or the spec field.
Problem make_problem(const FormatSpec& format, std::int64_t m, std::int64_t n, std::int64_t k, bool has_bias);

struct Selection {
  KernelConfig config;
  const KernelFamily* family = nullptr;
  runtime_api::ConfigSource source = runtime_api::ConfigSource::Heuristic;
  std::string detail;

  runtime_api::Choice choice() const;
};

// The problem to check a table config of `range` against for `problem`: M only sizes the grid, and the family's
// M-dependent rules are search pruning (a tile too tall for M is slower, not wrong), so a config is checked at the
// largest M it was tuned for in its range (or M itself when larger). N, K and the device's limits are checked as they are.
Problem rule_check_problem(const reports::MRange& range, const Problem& problem);

// The configuration for `problem` on a GPU with `limits`; `table` may be null. A table config that fails the family's
// rules (rule_check_problem) gives way to the heuristic. Throws UnsupportedError when the format cannot run on limits.sm.
Selection select_config(const reports::SelectionTable* table, const Problem& problem, const ArchLimits& limits);

// A token-indexed MoE problem from user input (the routing is the caller's, on the device): InputError naming
// "projection", "experts", "top_k", "tokens", "n", "k" or the spec's field.
MoeProblem make_moe_problem(const FormatSpec& format, int experts, int top_k, std::int64_t n, std::int64_t k,
                            std::int64_t tokens, std::string_view projection);

// The expected rows per touched expert under uniform routing: pairs / (E · (1 − (1 − top_k/E)^T)), at least 1.
std::int64_t expected_rows_per_expert(const MoeProblem& problem);

// The family of a MoE config that the runtime launches on `sm`: mma; wgmma where that family runs the format (sm_90,
// weight-only formats); tma where that family runs it (sm_90, no 4-bit compute: W4A8, W8A8 fp8/int8, weight-only; its
// token-indexed kernel reads rows a gather kernel copied into layout order through a TMA tensor map). nullptr
// otherwise, with why in *why_not: the wgmma or tma family's reason elsewhere; any other family, named.
const KernelFamily* runtime_moe_family(const KernelConfig& config, const FormatSpec& format, int sm, std::string* why_not = nullptr);

// The configuration for a token-indexed MoE problem, by the dense rules: the table's `moe` entry of the exact key
// (format, experts, top_k, n, k, projection, token-indexed), its token range holding T; else the nearest entry of the
// format and projection in (ln n, ln k, ln experts, ln top_k), its range for T; else the heuristic
// (moe_heuristic_config). A table config gives way to the heuristic, with rule "family", when the runtime does not
// launch its family here (runtime_moe_family), or when it fails mma_moe::check at the largest token count tuned in
// its range (or T when larger). Selection::family is the config's (mma, wgmma or tma). UnsupportedError when the mma
// family cannot run the format on limits.sm (every MoE kernel reads its layout).
Selection select_moe_config(const reports::SelectionTable* table, const MoeProblem& problem, const ArchLimits& limits);

// A hand-written config at the expected rows per expert: on sm_90 for weight-only formats first the wgmma family's
// dense config (split-K at most the wgmma-moe space's: 4 up to 64 rows per expert, 2 beyond), then the mma family's;
// each with its K split lowered while the MoE launch's live tiles (N tiles × expected blocks) already give 1.5 CTAs
// per SM, then with split 1; then three small mma streaming tiles. The first that passes mma_moe::check.
// UnsupportedError when none passes.
KernelConfig moe_heuristic_config(const MoeProblem& problem, const ArchLimits& limits);

}  // namespace qtune::production
