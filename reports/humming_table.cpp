#include "reports/humming_table.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "kernels/error.hpp"
#include "kernels/text_escape.hpp"

namespace qtune::reports {

namespace {

constexpr std::string_view kFileFormat = "qtune-humming-table";
constexpr int kFileVersion = 1;

std::string cell_name(const HummingCell& cell) {
  return cell.format + " m=" + std::to_string(cell.m) + " n=" + std::to_string(cell.n) + " k=" + std::to_string(cell.k);
}

template <typename T>
T field(const nlohmann::json& json, const std::string& name, const std::string& where) {
  if (!json.is_object() || !json.contains(name)) QTUNE_INPUT_ERROR(where + name + ": missing");
  try {
    return json.at(name).get<T>();
  } catch (const nlohmann::json::exception& error) {
    QTUNE_INPUT_ERROR(where + name + ": " + error.what());
  }
}

}  // namespace

nlohmann::json HummingLayerRules::tuning_config() const {
  nlohmann::json list = nlohmann::json::array();
  for (const MRange& range : ranges) {
    list.push_back({range.m_min - 1, range.m_max.value_or(kHummingUnboundedM),
                    search::HummingSpace::tuning_config(range.config)});
  }
  return list;
}

HummingTable build_humming_table(std::string gpu, std::string device_name, int sm, std::vector<HummingCell> cells) {
  HummingTable table{std::move(gpu), std::move(device_name), sm, {}};
  const ArchLimits limits = [&] {
    try {
      return ArchLimits::for_sm(sm);
    } catch (const InputError&) {
      ArchLimits unknown;
      unknown.sm = sm;
      return unknown;
    }
  }();
  std::map<std::tuple<std::string, std::int64_t, std::int64_t>, std::vector<BucketWinner>> by_shape;
  for (const HummingCell& cell : cells) {
    const Problem problem{FormatSpec::parse(cell.format), cell.m, cell.n, cell.k};
    const RuleVerdict verdict = search::HummingSpace::check(cell.config, problem, limits);
    // Only the format and parameter rules matter here: a measured config passed Humming's own checks on the GPU.
    if (!verdict.valid && (verdict.rule == "format-unsupported" || verdict.rule == "missing-parameter")) {
      QTUNE_INPUT_ERROR("humming table: " + cell_name(cell) + ": " + verdict.detail);
    }
    by_shape[{problem.format.to_string(), cell.n, cell.k}].push_back({cell.m, cell.config, cell.median_us});
  }
  for (auto& [key, winners] : by_shape) {
    const auto& [format, n, k] = key;
    HummingLayerRules rules;
    rules.format = format;
    rules.layer = search::humming_layer_for(FormatSpec::parse(format), n, k);
    rules.ranges = compact_ranges(std::move(winners));
    table.layers.push_back(std::move(rules));
  }
  return table;
}

HummingCells humming_cells_from_store(db::Store& store, const std::string& gpu) {
  HummingCells result;
  for (const db::RunRecord& run : store.list_runs()) {
    if (run.gpu_key() != gpu) continue;
    if (result.device_name.empty()) result.device_name = run.gpu_name;
    if (result.sm == 0) result.sm = run.sm;
  }
  if (result.device_name.empty() && result.sm == 0) {
    QTUNE_INPUT_ERROR("gpu: the database has no run on " + quote_input(gpu));
  }
  std::map<std::int64_t, KernelConfig> humming_configs;
  for (const db::KernelConfigRecord& record : store.list_configs()) {
    if (record.family == search::kHummingFamily && record.kind == db::ConfigKind::Kernel) {
      humming_configs.emplace(db::id_value(record.id), db::to_kernel_config(record));
    }
  }
  // (problem, config) -> passed at least once and never failed on this GPU.
  std::map<std::pair<std::int64_t, std::int64_t>, bool> verified;
  db::RowFilter on_gpu;
  on_gpu.gpu = gpu;
  for (const db::VerificationRecord& check : store.list_verifications(on_gpu)) {
    const auto key = std::pair{db::id_value(check.problem), db::id_value(check.config)};
    const bool passed = check.status == db::VerificationStatus::Passed;
    const auto [slot, inserted] = verified.emplace(key, passed);
    if (!inserted) slot->second = slot->second && passed;
  }
  std::map<std::int64_t, HummingCell> best;
  for (const db::MeasurementRecord& measurement : store.list_measurements(on_gpu)) {
    const auto config = humming_configs.find(db::id_value(measurement.config));
    if (config == humming_configs.end() || measurement.status != db::MeasurementStatus::Ok ||
        measurement.l2_mode != db::L2Mode::Cold || !measurement.stats) {
      continue;
    }
    const auto check = verified.find({db::id_value(measurement.problem), db::id_value(measurement.config)});
    if (check == verified.end() || !check->second) continue;
    const double median = measurement.stats->median_us;
    const auto found = best.find(db::id_value(measurement.problem));
    if (found != best.end() && found->second.median_us <= median) continue;
    const std::optional<db::ProblemRecord> problem = store.get_problem(measurement.problem);
    if (!problem) continue;
    best[db::id_value(measurement.problem)] =
        HummingCell{problem->format, problem->m, problem->n, problem->k, config->second, median};
  }
  for (auto& [problem, cell] : best) result.cells.push_back(std::move(cell));
  return result;
}

nlohmann::json humming_table_json(const HummingTable& table) {
  nlohmann::json layers = nlohmann::json::array();
  for (const HummingLayerRules& rules : table.layers) {
    nlohmann::json measured = nlohmann::json::array();
    for (std::size_t i = 0; i < rules.ranges.size(); ++i) {
      for (const TunedBucket& bucket : rules.ranges[i].buckets) {
        measured.push_back({{"m", bucket.m}, {"median_us", bucket.median_us}, {"range", i}});
      }
    }
    layers.push_back({{"format", rules.format},
                      {"layer", rules.layer.to_json()},
                      {"tuning_config", rules.tuning_config()},
                      {"measured", measured}});
  }
  return {{"format", kFileFormat}, {"version", kFileVersion}, {"gpu", table.gpu}, {"device_name", table.device_name},
          {"sm", table.sm},        {"layers", layers}};
}

HummingTable humming_table_from_json(const nlohmann::json& json) {
  if (field<std::string>(json, "format", "") != kFileFormat) {
    QTUNE_INPUT_ERROR("format: expected '" + std::string(kFileFormat) + "'");
  }
  if (field<int>(json, "version", "") != kFileVersion) {
    QTUNE_INPUT_ERROR("version: this qtune reads version " + std::to_string(kFileVersion));
  }
  HummingTable table{field<std::string>(json, "gpu", ""), field<std::string>(json, "device_name", ""),
                     field<int>(json, "sm", ""), {}};
  const nlohmann::json layers = field<nlohmann::json>(json, "layers", "");
  if (!layers.is_array()) QTUNE_INPUT_ERROR("layers: expected a list");
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const std::string where = "layers[" + std::to_string(i) + "].";
    HummingLayerRules rules;
    rules.format = FormatSpec::parse(field<std::string>(layers[i], "format", where)).to_string();
    const nlohmann::json layer = field<nlohmann::json>(layers[i], "layer", where);
    rules.layer = search::humming_layer_for(FormatSpec::parse(rules.format), field<std::int64_t>(layer, "shape_n", where + "layer."),
                                            field<std::int64_t>(layer, "shape_k", where + "layer."));
    if (rules.layer.to_json() != layer) QTUNE_INPUT_ERROR(where + "layer: does not describe " + rules.format);
    const nlohmann::json list = field<nlohmann::json>(layers[i], "tuning_config", where);
    if (!list.is_array() || list.empty()) QTUNE_INPUT_ERROR(where + "tuning_config: expected a non-empty list");
    std::int64_t previous_high = 0;
    for (std::size_t r = 0; r < list.size(); ++r) {
      const std::string item = where + "tuning_config[" + std::to_string(r) + "]";
      const nlohmann::json& entry = list[r];
      if (!entry.is_array() || entry.size() != 3 || !entry[0].is_number_integer() || !entry[1].is_number_integer()) {
        QTUNE_INPUT_ERROR(item + ": expected [m_lo, m_hi, config]");
      }
      const auto low = entry[0].get<std::int64_t>();
      const auto high = entry[1].get<std::int64_t>();
      if (low != previous_high || high <= low) QTUNE_INPUT_ERROR(item + ": ranges must follow each other from 0");
      MRange range;
      range.m_min = low + 1;
      if (high < kHummingUnboundedM) range.m_max = high;
      range.config = search::HummingSpace::from_tuning_config(entry[2]);
      rules.ranges.push_back(std::move(range));
      previous_high = high;
    }
    if (previous_high != kHummingUnboundedM) {
      QTUNE_INPUT_ERROR(where + "tuning_config: the last range must end at " + std::to_string(kHummingUnboundedM));
    }
    for (const nlohmann::json& bucket : field<nlohmann::json>(layers[i], "measured", where)) {
      const auto index = field<std::size_t>(bucket, "range", where + "measured.");
      if (index >= rules.ranges.size()) QTUNE_INPUT_ERROR(where + "measured.range: no such range");
      rules.ranges[index].buckets.push_back(
          {field<std::int64_t>(bucket, "m", where + "measured."), field<double>(bucket, "median_us", where + "measured.")});
    }
    table.layers.push_back(std::move(rules));
  }
  return table;
}

void write_humming_table(const HummingTable& table, const std::filesystem::path& path) {
  write_file_atomically(path, json_text(humming_table_json(table), 2) + "\n");
}

}  // namespace qtune::reports
