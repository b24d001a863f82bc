#include "reports/selection_build.hpp"

#include <algorithm>
#include <set>
#include <tuple>

#include "kernels/error.hpp"
#include "kernels/text_escape.hpp"

namespace qtune::reports {

// ---------------------------------------------------------------------------------------------------- build

SelectionTable build_selection_table(const TuningData& data, const std::string& gpu) {
  const auto found = data.gpus.find(gpu);
  SelectionTable table;
  table.gpu = gpu;
  if (found == data.gpus.end()) {
    std::string known;
    for (const auto& [key, unused] : data.gpus) known += (known.empty() ? "" : ", ") + key;
    QTUNE_INPUT_ERROR("--gpu: no results for GPU " + quote_input(gpu) + " (GPUs in the database: " + (known.empty() ? "none" : known) + ")");
  }
  const GpuData& gpu_data = found->second;
  std::set<std::int64_t> winner_runs;
  std::size_t winner_count = 0;
  std::size_t peer_winners = 0;
  for (const auto& [shape, cells] : gpu_data.shapes()) {
    std::vector<BucketWinner> winners;
    for (const Cell* cell : cells) {
      if (!cell->winner) continue;
      // qtune's runtime runs qtune's kernel families only: a cell a peer won (tune --family humming) is exported
      // with `qtune export --humming`, and here falls to the neighbouring buckets' qtune winners.
      if (family_named(data.config(db::id_value(cell->winner->config)).family) == nullptr) {
        ++peer_winners;
        continue;
      }
      winners.push_back({cell->problem.m, to_kernel_config(data.config(db::id_value(cell->winner->config))), cell->winner->median_us});
      winner_runs.insert(db::id_value(cell->winner->run));
    }
    if (winners.empty()) continue;
    winner_count += winners.size();
    table.formats[shape.format].push_back({shape.n, shape.k, compact_ranges(std::move(winners))});
  }
  if (table.formats.empty()) {
    QTUNE_INPUT_ERROR("--gpu: GPU " + quote_input(gpu) + " has no winners" + " for the selected formats (run `qtune tune` first)");
  }

  std::vector<const db::RunRecord*> runs;
  for (const db::RunRecord& run : gpu_data.runs) {
    if (winner_runs.count(db::id_value(run.id)) > 0) runs.push_back(&run);
  }
  std::sort(runs.begin(), runs.end(), [](const db::RunRecord* a, const db::RunRecord* b) {
    return std::tie(a->started_at, a->uuid) < std::tie(b->started_at, b->uuid);
  });
  nlohmann::json run_list = nlohmann::json::array();
  for (const db::RunRecord* run : runs) {
    run_list.push_back({{"uuid", run->uuid},
                        {"kind", run->kind},
                        {"status", db::to_string(run->status)},
                        {"started_at", run->started_at},
                        {"finished_at", run->finished_at ? nlohmann::json(*run->finished_at) : nlohmann::json(nullptr)},
                        {"tool_version", run->tool_version},
                        {"git_sha", run->git_sha},
                        {"cuda_version", run->cuda_version},
                        {"driver_version", run->driver_version},
                        {"host", run->host},
                        {"gpu_name", run->gpu_name},
                        {"gpu_uuid", run->gpu_uuid},
                        {"shard", run->shard}});
  }
  table.provenance = {{"runs", run_list}, {"winners", winner_count}};
  if (peer_winners > 0) table.provenance["peer_winners_left_out"] = peer_winners;
  return table;
}

// ---------------------------------------------------------------------------------------------------- fallback regret

FallbackRegret evaluate_fallback(const SelectionTable& table, const TuningData& data, const GpuData& gpu_data) {
  FallbackRegret result;
  const auto groups = gpu_data.shapes();
  std::vector<double> all_ratios;
  std::map<std::string, std::vector<double>> nearest_ratios;
  std::map<std::string, std::vector<double>> heuristic_ratios;
  for (const auto& [format, shapes] : table.formats) {
    for (const ShapeRules& held_out : shapes) {
      const auto cells = groups.find(ShapeKey{format, held_out.n, held_out.k});
      if (cells == groups.end()) continue;
      // The heuristic needs no neighbour: it answers every held-out cell where it was measured.
      for (const Cell* cell : cells->second) {
        const std::optional<double> best = cell->best_kernel_us();
        const std::optional<double> heuristic = cell->heuristic_us();
        if (best && heuristic) heuristic_ratios[format].push_back(*heuristic / *best);
      }
      const ShapeRules* neighbour = table.nearest_shape(format, held_out.n, held_out.k, &held_out);
      if (neighbour == nullptr) continue;
      std::vector<double> ratios;
      for (const Cell* cell : cells->second) {
        const std::optional<double> best = cell->best_kernel_us();
        if (!best) continue;
        const KernelConfig& chosen = neighbour->range_for(cell->problem.m).config;
        std::optional<double> time;
        if (const auto config = data.find_kernel_config(chosen)) time = cell->kernel_time(*config);
        if (!time) {
          time = cell->heuristic_us();  // not measured there (pruned or invalid): the runtime takes the heuristic
          if (!time) {
            ++result.skipped_cells;
            continue;
          }
          ++result.heuristic_cells;
        }
        const double ratio = *time / *best;
        ratios.push_back(ratio);
        all_ratios.push_back(ratio);
        nearest_ratios[format].push_back(ratio);
        if (!result.max_regret || ratio - 1 > *result.max_regret) {
          result.max_regret = ratio - 1;
          result.worst_cell = format + " n=" + std::to_string(held_out.n) + " k=" + std::to_string(held_out.k) +
                              " m=" + std::to_string(cell->problem.m);
        }
      }
      if (ratios.empty()) continue;
      ++result.shapes;
      ShapeRegret shape{format, held_out.n, held_out.k, neighbour->n, neighbour->k, static_cast<int>(ratios.size()),
                        *geometric_mean(ratios) - 1, *std::max_element(ratios.begin(), ratios.end()) - 1};
      result.per_shape.push_back(shape);
    }
  }
  result.cells = static_cast<int>(all_ratios.size());
  if (const auto mean = geometric_mean(all_ratios)) result.geomean_regret = *mean - 1;
  const auto summarize = [](const std::vector<double>& ratios) {
    MethodRegret regret;
    regret.cells = static_cast<int>(ratios.size());
    if (const auto mean = geometric_mean(ratios)) regret.geomean_regret = *mean - 1;
    if (!ratios.empty()) regret.max_regret = *std::max_element(ratios.begin(), ratios.end()) - 1;
    return regret;
  };
  for (const auto& [format, ratios] : nearest_ratios) result.nearest_by_format[format] = summarize(ratios);
  for (const auto& [format, ratios] : heuristic_ratios) result.heuristic_by_format[format] = summarize(ratios);
  return result;
}

std::map<std::string, FallbackMethod> choose_fallback_methods(const SelectionTable& table, const FallbackRegret& regret) {
  std::map<std::string, FallbackMethod> methods;
  for (const auto& [format, shapes] : table.formats) {
    const auto nearest = regret.nearest_by_format.find(format);
    const auto heuristic = regret.heuristic_by_format.find(format);
    const bool heuristic_measured = heuristic != regret.heuristic_by_format.end() && heuristic->second.geomean_regret;
    const bool nearest_measured = nearest != regret.nearest_by_format.end() && nearest->second.geomean_regret;
    const bool heuristic_better =
        heuristic_measured && (!nearest_measured || *heuristic->second.geomean_regret < *nearest->second.geomean_regret);
    methods[format] = heuristic_better ? FallbackMethod::Heuristic : FallbackMethod::NearestShape;
  }
  return methods;
}

}  // namespace qtune::reports
