#include "tuner/baselines/baseline_pin.hpp"

#include <map>
#include <tuple>

#include "kernels/error.hpp"
#include "tuner/baselines/baseline_bench.hpp"

namespace qtune::baselines {

std::string StoredChoice::origin() const {
  return "run " + std::to_string(db::id_value(run)) + " of " + started_at;
}

std::optional<StoredChoice> latest_stored_choice(db::Store& store, const StoredChoiceQuery& query) {
  const std::optional<db::ProblemId> problem = store.find_problem(query.problem);
  if (!problem) return std::nullopt;
  db::RowFilter filter;
  filter.problem = *problem;
  std::map<int64_t, std::optional<db::RunRecord>> runs;
  std::map<int64_t, std::optional<db::KernelConfigRecord>> configs;
  std::optional<db::MeasurementRecord> latest;
  std::optional<db::RunRecord> latest_run;
  std::optional<db::KernelConfigRecord> latest_config;
  for (db::MeasurementRecord& measurement : store.list_measurements(filter)) {
    if (measurement.status != db::MeasurementStatus::Ok || measurement.l2_mode != query.l2_mode) continue;
    if (measurement.phase != kBestOfTopKPhase && measurement.phase != kPinnedPhase) continue;
    const int64_t run_id = db::id_value(measurement.run);
    if (!runs.contains(run_id)) runs[run_id] = store.get_run(measurement.run);
    const std::optional<db::RunRecord>& run = runs[run_id];
    if (!run || run->kind != "bench" || run->status != db::RunStatus::Completed || run->gpu_name != query.gpu_name) {
      continue;
    }
    const int64_t config_id = db::id_value(measurement.config);
    if (!configs.contains(config_id)) configs[config_id] = store.get_config(measurement.config);
    const std::optional<db::KernelConfigRecord>& config = configs[config_id];
    if (!config || config->kind != db::ConfigKind::Baseline || config->family != query.family) continue;
    const auto order = [](const db::RunRecord& r, const db::MeasurementRecord& m) {
      return std::make_tuple(r.started_at, db::id_value(r.id), db::id_value(m.id));
    };
    if (!latest || order(*latest_run, *latest) < order(*run, measurement)) {
      latest = std::move(measurement);
      latest_run = run;
      latest_config = config;
    }
  }
  if (!latest) return std::nullopt;
  StoredChoice choice;
  try {
    choice.algorithm = algo_info_from_json(latest_config->params_json);
  } catch (const InputError& error) {
    QTUNE_THROW(Error, "stored config " + std::to_string(db::id_value(latest_config->id)) + " of " +
                           latest_run->started_at + " is not a cuBLASLt algorithm: " + error.what());
  }
  choice.run = latest_run->id;
  choice.started_at = latest_run->started_at;
  choice.gpu_uuid = latest_run->gpu_uuid;
  choice.phase = latest->phase;
  choice.median_us = latest->stats ? latest->stats->median_us : 0;
  return choice;
}

}  // namespace qtune::baselines
