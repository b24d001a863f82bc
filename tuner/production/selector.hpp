#pragma once
// How the production runtime picks a configuration (internal to libqtune_runtime and `qtune export --cubins`):
// the tuned table (exact shape, then the nearest shape), checked against the family's rules on the target, else the
// family heuristic.
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/family.hpp"
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

}  // namespace qtune::production
