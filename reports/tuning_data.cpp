#include "reports/tuning_data.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "kernels/error.hpp"
#include "kernels/text_escape.hpp"
#include "kernels/format.hpp"
#include "search/gpu_profile.hpp"

namespace qtune::reports {

bool is_dense_format(std::string_view format) { return format == "f16" || format == "bf16"; }

std::string canonical_format_text(std::string_view text, std::string_view field) {
  std::string lowered;
  for (const char c : text) {
    if (c != ' ' && c != '\t') lowered += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (is_dense_format(lowered)) return lowered;
  try {
    return FormatSpec::parse(text).to_string();
  } catch (const InputError& error) {
    QTUNE_INPUT_ERROR(std::string(field) + ": " + error.what());
  }
}

std::vector<std::string> parse_format_list(std::string_view text, std::string_view field) {
  std::vector<std::string> formats;
  for (const std::string& piece : split_format_list(text, field)) {
    const std::string format = canonical_format_text(piece, field);
    if (std::find(formats.begin(), formats.end(), format) == formats.end()) formats.push_back(format);
  }
  return formats;
}

std::string gpu_key_for(std::string_view gpu_name) {
  // Profiles are read once: a report or an import asks for many names.
  static const std::vector<search::GpuProfile> profiles = search::load_gpu_profiles();
  if (const search::GpuProfile* profile = search::find_gpu_profile(profiles, gpu_name)) return profile->name;
  return std::string(gpu_name);
}


ProblemCost problem_cost(const db::Problem& problem) {
  const double m = static_cast<double>(problem.m);
  const double n = static_cast<double>(problem.n);
  const double k = static_cast<double>(problem.k);
  ProblemCost cost;
  cost.flops = 2.0 * m * n * k;
  if (is_dense_format(problem.format)) {
    cost.bytes = 2.0 * (m * k + n * k + m * n);
    return cost;
  }
  const FormatSpec format = FormatSpec::parse(problem.format);
  const double weight_bytes = format.bits_per_weight(problem.n, problem.k) * n * k / 8.0;
  double activation_bytes = m * k * format.activation_bits() / 8.0;
  const double scale_bytes = bits_of(format.activation_scale.type) / 8.0;
  switch (format.activation_scale.granularity) {
    case ActivationScaleGranularity::None: break;
    case ActivationScaleGranularity::PerTensor: activation_bytes += scale_bytes; break;
    case ActivationScaleGranularity::PerToken: activation_bytes += m * scale_bytes; break;
    case ActivationScaleGranularity::PerGroup:
      activation_bytes += m * std::ceil(k / std::max(1, format.activation_scale.group_k)) * scale_bytes;
      break;
  }
  cost.bytes = weight_bytes + activation_bytes + 2.0 * m * n;  // f16/bf16 output
  return cost;
}

std::optional<double> Cell::kernel_time(std::int64_t config) const {
  const auto found = kernel_us.find(config);
  if (found == kernel_us.end()) return std::nullopt;
  return found->second;
}

std::optional<double> Cell::heuristic_us() const {
  if (!heuristic_config) return std::nullopt;
  return kernel_time(*heuristic_config);
}

std::optional<double> Cell::best_kernel_us() const {
  std::optional<double> best;
  for (const auto& [config, time] : kernel_us) {
    if (!best || time < *best) best = time;
  }
  return best;
}

std::map<ShapeKey, std::vector<const Cell*>> GpuData::shapes() const {
  std::map<ShapeKey, std::vector<const Cell*>> groups;
  for (const Cell& cell : cells) groups[{cell.problem.format, cell.problem.n, cell.problem.k}].push_back(&cell);
  return groups;  // cells are sorted by (format, n, k, m), so every group is sorted by M
}

const db::KernelConfigRecord& TuningData::config(std::int64_t id) const {
  const auto found = configs.find(id);
  if (found == configs.end()) QTUNE_THROW(Error, "kernel config " + std::to_string(id) + " is not in the store");
  return found->second;
}

std::optional<std::int64_t> TuningData::find_kernel_config(const KernelConfig& wanted) const {
  const auto found = kernel_config_ids.find(wanted);
  if (found == kernel_config_ids.end()) return std::nullopt;
  return found->second;
}

namespace {

struct CellIndex {
  std::map<std::pair<std::string, std::int64_t>, Cell> cells;  // (gpu, problem id)
};

Cell& cell_for(CellIndex& index, const std::string& gpu, const db::ProblemRecord& problem) {
  auto [position, inserted] = index.cells.try_emplace({gpu, db::id_value(problem.id)});
  if (inserted) position->second.problem = problem;
  return position->second;
}

}  // namespace

TuningData load_tuning_data(db::Store& store, const DataFilter& filter) {
  store.require_readable();  // a damaged file is named as such, not met as a missing row half-way through
  TuningData data;
  for (auto& config : store.list_configs()) data.configs.emplace(db::id_value(config.id), std::move(config));
  // Parsed once here: the heuristic relabelling and the fallback regret look configs up per cell.
  for (const auto& [id, record] : data.configs) {
    if (record.kind == db::ConfigKind::Kernel) data.kernel_config_ids.emplace(to_kernel_config(record), id);
  }

  std::map<std::int64_t, db::ProblemRecord> problems;
  for (auto& problem : store.list_problems()) problems.emplace(db::id_value(problem.id), std::move(problem));

  std::set<std::string> formats(filter.formats.begin(), filter.formats.end());
  auto wanted_problem = [&](const db::ProblemRecord& problem) {
    return formats.empty() || formats.count(problem.format) > 0 || is_dense_format(problem.format);
  };
  const std::optional<std::string> gpu_filter = filter.gpu ? std::optional<std::string>(gpu_key_for(*filter.gpu)) : std::nullopt;
  auto wanted_gpu = [&](const std::string& gpu) { return !gpu_filter || *gpu_filter == gpu; };

  std::map<std::int64_t, db::RunRecord> runs;
  for (auto& run : store.list_runs()) runs.emplace(db::id_value(run.id), std::move(run));
  auto gpu_of_run = [&](db::RunId run) -> std::string {
    const auto found = runs.find(db::id_value(run));
    if (found == runs.end()) QTUNE_THROW(Error, "run " + std::to_string(db::id_value(run)) + " is not in the store");
    return found->second.gpu_key();
  };
  auto problem_of = [&](db::ProblemId id) -> const db::ProblemRecord& {
    const auto found = problems.find(db::id_value(id));
    if (found == problems.end()) QTUNE_THROW(Error, "problem " + std::to_string(db::id_value(id)) + " is not in the store");
    return found->second;
  };

  // (gpu, problem, config) with a verification that did not pass: such a config never counts (as in best_measurement).
  std::set<std::tuple<std::string, std::int64_t, std::int64_t>> failed;
  for (const auto& verification : store.list_verifications()) {
    if (verification.status == db::VerificationStatus::Passed) continue;
    failed.emplace(gpu_of_run(verification.run), db::id_value(verification.problem), db::id_value(verification.config));
  }

  CellIndex index;
  std::map<std::string, std::set<std::int64_t>> runs_by_gpu;
  for (const auto& measurement : store.list_measurements()) {
    const std::string gpu = gpu_of_run(measurement.run);
    const db::ProblemRecord& problem = problem_of(measurement.problem);
    if (!wanted_gpu(gpu) || !wanted_problem(problem)) continue;
    if (measurement.status != db::MeasurementStatus::Ok || !measurement.stats || measurement.l2_mode != db::L2Mode::Cold) continue;
    const std::int64_t config_id = db::id_value(measurement.config);
    const db::KernelConfigRecord& config = data.config(config_id);
    Cell& cell = cell_for(index, gpu, problem);
    runs_by_gpu[gpu].insert(db::id_value(measurement.run));
    const double median = measurement.stats->median_us;
    if (config.kind == db::ConfigKind::Baseline) {
      auto [position, inserted] = cell.baseline_us.try_emplace(config.family, median);
      if (!inserted) position->second = std::min(position->second, median);
      continue;
    }
    if (failed.count({gpu, db::id_value(problem.id), config_id}) > 0) continue;
    auto [position, inserted] = cell.kernel_us.try_emplace(config_id, median);
    if (!inserted) position->second = std::min(position->second, median);
    if (measurement.phase == kHeuristicPhase) cell.heuristic_config = config_id;
  }

  for (auto& winner : store.list_winners(gpu_filter)) {
    const db::ProblemRecord& problem = problem_of(winner.problem);
    if (!wanted_problem(problem)) continue;
    runs_by_gpu[winner.gpu].insert(db::id_value(winner.run));
    const std::string gpu = winner.gpu;
    cell_for(index, gpu, problem).winner = std::move(winner);
  }

  for (auto& result : store.list_external_results()) {
    const db::ProblemRecord& problem = problem_of(result.problem);
    if (!wanted_gpu(result.gpu) || !wanted_problem(problem)) continue;
    const std::string gpu = result.gpu;
    cell_for(index, gpu, problem).external.push_back(std::move(result));
  }

  // The heuristic is what the family's rules pick today, which a tune only labels when it measures that config anew:
  // prefer today's pick wherever it was measured on the cell (the same config, measured in any phase).
  std::map<std::string, std::optional<ArchLimits>> limits_by_gpu;
  for (auto& [key, cell] : index.cells) {
    auto [limits, inserted] = limits_by_gpu.try_emplace(key.first);
    if (inserted) {
      try {
        limits->second = search::limits_of_profile(search::gpu_profile_by_name(key.first));
      } catch (const Error&) {
        // Not a known profile (a GPU named only by its device name): keep the labelled heuristic.
      }
    }
    if (!limits->second || !cell.winner) continue;
    try {
      const Problem problem{FormatSpec::parse(cell.problem.format), cell.problem.m, cell.problem.n, cell.problem.k, false};
      // Production's heuristic for the problem (its family may differ from the winner's).
      const KernelConfig today = heuristic_family(problem, limits->second->sm).default_config(problem, *limits->second);
      if (const auto id = data.find_kernel_config(today); id && cell.kernel_us.count(*id) > 0) cell.heuristic_config = *id;
    } catch (const Error&) {
      // No heuristic for this problem today (an unsupported format or family): keep the labelled one.
    }
  }

  for (auto& [key, cell] : index.cells) {
    GpuData& gpu = data.gpus[key.first];
    gpu.gpu = key.first;
    gpu.cells.push_back(std::move(cell));
  }
  for (auto& [gpu_key, gpu] : data.gpus) {
    std::sort(gpu.cells.begin(), gpu.cells.end(), [](const Cell& a, const Cell& b) {
      return std::tie(a.problem.format, a.problem.n, a.problem.k, a.problem.m) <
             std::tie(b.problem.format, b.problem.n, b.problem.k, b.problem.m);
    });
    for (const std::int64_t run : runs_by_gpu[gpu_key]) gpu.runs.push_back(runs.at(run));
  }
  return data;
}

std::optional<double> geometric_mean(const std::vector<double>& values) {
  if (values.empty()) return std::nullopt;
  double log_sum = 0;
  for (const double value : values) log_sum += std::log(value);
  return std::exp(log_sum / static_cast<double>(values.size()));
}

}  // namespace qtune::reports
