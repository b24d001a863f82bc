#include "tuner/production/selector.hpp"

#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include "kernels/error.hpp"
#include "kernels/input_file.hpp"

namespace qtune::production {

namespace {

std::string range_text(const reports::MRange& range) {
  return "M range [" + std::to_string(range.m_min) + ", " + (range.m_max ? std::to_string(*range.m_max) : "inf") + "]";
}

}  // namespace

reports::SelectionTable read_selection_table(const std::filesystem::path& path) {
  return reports::SelectionTable::from_json(read_json_file(path, "table", "write it with `qtune export -o table.json`"),
                                            path.string());
}

Problem make_problem(const FormatSpec& format, std::int64_t m, std::int64_t n, std::int64_t k, bool has_bias) {
  if (m < 1) QTUNE_INPUT_ERROR("m: must be positive, got " + std::to_string(m));
  if (n < 1) QTUNE_INPUT_ERROR("n: must be positive, got " + std::to_string(n));
  if (k < 1) QTUNE_INPUT_ERROR("k: must be positive, got " + std::to_string(k));
  format.validate_shape(n, k);
  return Problem{format, m, n, k, has_bias};
}

Problem rule_check_problem(const reports::MRange& range, const Problem& problem) {
  Problem checked = problem;
  if (!range.buckets.empty()) checked.m = std::max(problem.m, range.buckets.back().m);
  return checked;
}

runtime_api::Choice Selection::choice() const {
  runtime_api::Choice choice;
  choice.family = config.family;
  choice.params = config.params;
  choice.config = config.to_string();
  choice.source = source;
  choice.detail = detail;
  return choice;
}

Selection select_config(const reports::SelectionTable* table, const Problem& problem, const ArchLimits& limits) {
  const KernelFamily& family = packing_family(problem.format, limits.sm);
  Selection selection;
  std::string why_not_table = "no table";
  if (table != nullptr) {
    const std::string format = problem.format.to_string();
    const reports::SelectionTable::Selection found = table->select(format, problem.m, problem.n, problem.k);
    if (found.config == nullptr) {
      const auto method = table->fallback_methods.find(format);
      const bool heuristic_fallback = table->formats.count(format) > 0 && method != table->fallback_methods.end() &&
                                      method->second == reports::FallbackMethod::Heuristic;
      why_not_table = heuristic_fallback ? "n=" + std::to_string(problem.n) + " k=" + std::to_string(problem.k) +
                                               " is not tuned and the table's fallback for " + format + " is the heuristic"
                                         : "the table has no shape of " + format;
    } else {
      const reports::MRange& range = found.shape->range_for(problem.m);
      const std::string origin = (found.tuned_shape ? "tuned shape n=" : "nearest tuned shape n=") + std::to_string(found.shape->n) +
                                 " k=" + std::to_string(found.shape->k) + ", " + range_text(range);
      // Weights are packed for the format's family: a config runs only on a family that reads that layout.
      const KernelFamily* config_family = family_named(found.config->family);
      const RuleVerdict verdict =
          config_family == nullptr ? RuleVerdict::fail("family", "this build has no kernel family '" + found.config->family + "'")
          : config_family->weight_layout() != family.weight_layout()
              ? RuleVerdict::fail("family", "the config is of family '" + found.config->family + "', the weights are packed for '" +
                                                family.name() + "' (layout '" + family.weight_layout() + "')")
              : config_family->check(*found.config, rule_check_problem(range, problem), limits);
      if (verdict.valid) {
        selection.family = config_family;
        selection.config = *found.config;
        selection.source = found.tuned_shape ? runtime_api::ConfigSource::Tuned : runtime_api::ConfigSource::Fallback;
        selection.detail = origin;
        return selection;
      }
      why_not_table = "the table's config " + found.config->to_string() + " (" + origin + ") fails rule '" + verdict.rule +
                      "' here: " + verdict.detail;
    }
  }
  const KernelFamily& heuristic = heuristic_family(problem, limits.sm);
  selection.family = &heuristic;
  selection.config = heuristic.default_config(problem, limits);
  selection.source = runtime_api::ConfigSource::Heuristic;
  selection.detail = why_not_table;
  return selection;
}

}  // namespace qtune::production
