// `qtune export`: a GPU's tuned winners as a selection table for production code (JSON and/or a C++ header), with a
// nearest-shape fallback whose leave-one-shape-out regret is printed; with --cubins, the table's kernels precompiled for
// libqtune_runtime (tuner/production).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "db/store.hpp"
#include "kernels/error.hpp"
#include "kernels/text_escape.hpp"
#include "reports/humming_table.hpp"
#include "reports/moe_selection.hpp"
#include "reports/selection_build.hpp"
#include "reports/table.hpp"
#include "reports/tuning_data.hpp"
#include "tuner/cli/commands.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/production/cubin_store.hpp"

namespace qtune::cli {

namespace {

namespace fs = std::filesystem;

struct ExportOptions {
  std::string db_path = "qtune.db";
  std::string gpu;
  std::string formats;
  std::vector<std::string> outputs;
  std::string namespace_name = "qtune_table";
  std::string output = "table";
  std::string cubins;  // directory for precompiled kernels; empty: none
  std::string archs;   // comma-separated NVRTC targets for --cubins
  bool cubins_heuristic = false;
  std::size_t jobs = 0;
  std::string humming;  // a Humming table file (reports/humming_table.hpp); empty: none
};

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

struct CubinSummary {
  std::size_t written = 0;
  std::vector<production::CubinSkip> skipped;
  std::vector<production::CubinSkip> failed;
  std::size_t moe_written = 0;  // the MoE winners' kernels
  std::vector<production::MoeCubinSkip> moe_skipped;
  std::vector<production::MoeCubinSkip> moe_failed;
  std::size_t removed = 0;  // stale cubins of an earlier export

  std::size_t failures() const { return failed.size() + moe_failed.size(); }
};

// Precompiles the table's kernels into options.cubins (NVRTC only: no GPU needed).
CubinSummary export_cubins(const ExportOptions& options, const reports::SelectionTable& table) {
  const production::CubinPlan plan = production::plan_cubins(table, split_list(options.archs), options.cubins_heuristic);
  const jit::Compiler compiler(compiler_settings(options.jobs));
  const production::CubinExport written = production::write_cubins(plan, options.cubins, compiler);
  return {written.manifest.kernels.size(), plan.skipped, written.failed, written.manifest.moe_kernels.size(),
          plan.moe_skipped, written.moe_failed, written.removed.size()};
}

std::string describe(const production::CubinRequest& request) {
  return request.format + " " + request.config.to_string() + " " + request.arch;
}

std::string describe(const production::MoeCubinSkip& skip) { return "MoE " + skip.what + " " + skip.arch; }

enum class ArtefactKind { Json, Header };

ArtefactKind artefact_kind(const fs::path& path) {
  const std::string extension = path.extension().string();
  if (extension == ".json") return ArtefactKind::Json;
  if (extension == ".hpp" || extension == ".h") return ArtefactKind::Header;
  QTUNE_INPUT_ERROR("-o: " + quote_input(path.string()) + ": expected a .json, .hpp or .h file");
}

std::string percent(double fraction) { return (fraction >= 0 ? "+" : "") + fixed(100 * fraction, 2) + "%"; }

// --format names only formats with winners (on any GPU): else one line with the formats that have them, rather than
// a complaint about --gpu.
void check_formats_have_winners(db::Store& store, const ExportOptions& options, const std::vector<std::string>& formats) {
  std::map<std::int64_t, std::string> format_of_problem;
  for (const db::ProblemRecord& problem : store.list_problems()) format_of_problem[db::id_value(problem.id)] = problem.format;
  std::set<std::string> with_winners;
  for (const db::WinnerRecord& winner : store.list_winners()) with_winners.insert(format_of_problem[db::id_value(winner.problem)]);
  for (const std::string& format : formats) {
    if (with_winners.count(format) == 0) {
      QTUNE_INPUT_ERROR("--format: no winners for " + format + " in " + options.db_path + " (formats with winners: " +
                        joined_or_none(with_winners) + ")");
    }
  }
}

// The GPU to export: --gpu, else the only GPU with winners.
std::string chosen_gpu(const ExportOptions& options, const reports::TuningData& data) {
  if (!options.gpu.empty()) return reports::gpu_key_for(options.gpu);
  std::vector<std::string> with_winners;
  for (const auto& [gpu, gpu_data] : data.gpus) {
    for (const auto& cell : gpu_data.cells) {
      if (cell.winner) {
        with_winners.push_back(gpu);
        break;
      }
    }
  }
  if (with_winners.size() == 1) return with_winners.front();
  std::string known;
  for (const auto& gpu : with_winners) known += (known.empty() ? "" : ", ") + gpu;
  QTUNE_INPUT_ERROR("--gpu: required" + (known.empty() ? std::string(" (the database has no winners)") : " (GPUs with winners: " + known + ")"));
}

void print_regret(const reports::FallbackRegret& regret, const std::map<std::string, reports::FallbackMethod>& methods) {
  // Per format: both fallbacks' leave-one-shape-out regret, and the one the table uses.
  auto text = [](const std::map<std::string, reports::MethodRegret>& by_format, const std::string& format) {
    const auto found = by_format.find(format);
    if (found == by_format.end() || !found->second.geomean_regret) return std::string("not measured");
    return "geomean " + percent(*found->second.geomean_regret) + ", max " + percent(*found->second.max_regret) + " over " +
           std::to_string(found->second.cells) + " cells";
  };
  for (const auto& [format, method] : methods) {
    std::cout << "fallback for untuned shapes of " << format << ": " << reports::to_string(method) << " (nearest shape: "
              << text(regret.nearest_by_format, format) << "; heuristic: " << text(regret.heuristic_by_format, format) << ")\n";
  }
  if (!regret.geomean_regret) {
    std::cout << "fallback regret: not measurable (no format has two tuned shapes with measurements)\n";
    return;
  }
  std::cout << "fallback regret on held-out shapes (leave-one-shape-out, " << regret.shapes << " shapes, " << regret.cells
            << " cells): geomean " << percent(*regret.geomean_regret) << ", max " << percent(*regret.max_regret) << " at "
            << regret.worst_cell << "\n";
  if (regret.heuristic_cells > 0 || regret.skipped_cells > 0) {
    std::cout << "  " << regret.heuristic_cells << " cell(s) timed with the heuristic (the neighbour's config was not measured there), "
              << regret.skipped_cells << " skipped (neither measured)\n";
  }
}

// The GPU keys of the store's runs that measured a Humming configuration.
std::set<std::string> gpus_with_humming(db::Store& store) {
  std::set<std::int64_t> humming_configs;
  for (const db::KernelConfigRecord& config : store.list_configs()) {
    if (config.kind == db::ConfigKind::Kernel && config.family == search::kHummingFamily) humming_configs.insert(db::id_value(config.id));
  }
  std::map<std::int64_t, std::string> gpu_of_run;
  for (const db::RunRecord& run : store.list_runs()) gpu_of_run[db::id_value(run.id)] = run.gpu_key();
  std::set<std::string> gpus;
  for (const db::MeasurementRecord& measurement : store.list_measurements()) {
    if (humming_configs.count(db::id_value(measurement.config)) > 0) gpus.insert(gpu_of_run[db::id_value(measurement.run)]);
  }
  return gpus;
}

// `--humming OUT`: the fastest verified Humming configuration of every tuned problem on the GPU, as the table
// Humming's loader installs (tuner/peers/python/qtune_peers/humming_table.py), written atomically.
void export_humming(const ExportOptions& options, reports::OutputStyle style) {
  db::Store store = db::Store::open_read_only(options.db_path);
  const std::set<std::string> measured = gpus_with_humming(store);
  std::string gpu;
  if (!options.gpu.empty()) {
    gpu = reports::gpu_key_for(options.gpu);
  } else if (measured.size() == 1) {
    gpu = *measured.begin();
  } else {
    QTUNE_INPUT_ERROR("--gpu: required (GPUs with Humming results in " + options.db_path + ": " + joined_or_none(measured) + ")");
  }
  if (measured.count(gpu) == 0) {
    QTUNE_INPUT_ERROR("--gpu: no Humming results for GPU " + quote_input(gpu) + " in " + options.db_path +
                      " (GPUs with Humming results: " + joined_or_none(measured) + "; run `qtune tune --family humming`)");
  }
  reports::HummingCells cells = reports::humming_cells_from_store(store, gpu);
  if (cells.cells.empty()) {
    QTUNE_INPUT_ERROR("--gpu: no verified Humming measurement for GPU " + quote_input(gpu) + " in " + options.db_path);
  }
  const std::size_t problems = cells.cells.size();
  const reports::HummingTable table =
      reports::build_humming_table(gpu, cells.device_name, cells.sm, std::move(cells.cells));
  reports::write_humming_table(table, options.humming);
  if (style == reports::OutputStyle::Text) {
    std::cout << "wrote " << options.humming << ": " << table.layers.size() << " Humming layer(s) from " << problems
              << " tuned problem(s) on " << gpu << "\n";
  }
}

void run_export(const ExportOptions& options) {
  if (!options.humming.empty()) {
    export_humming(options, reports::parse_output_style(options.output));
    if (options.outputs.empty() && options.cubins.empty()) return;
  }
  if (options.outputs.empty() && options.cubins.empty()) {
    QTUNE_INPUT_ERROR("-o: give at least one output file (table.json or table.hpp), or --cubins DIR, or --humming FILE");
  }
  if (!options.cubins.empty() && split_list(options.archs).empty()) QTUNE_INPUT_ERROR("--arch: required with --cubins (e.g. sm_90a,sm_80)");
  if (options.cubins.empty() && !options.archs.empty()) QTUNE_INPUT_ERROR("--arch: only with --cubins DIR");
  if (options.cubins.empty() && options.cubins_heuristic) QTUNE_INPUT_ERROR("--cubins-heuristic: only with --cubins DIR");
  for (const std::string& arch : split_list(options.archs)) production::ArchTarget::parse(arch, "--arch");
  std::vector<ArtefactKind> kinds;
  for (const auto& output : options.outputs) kinds.push_back(artefact_kind(output));
  if (std::find(kinds.begin(), kinds.end(), ArtefactKind::Header) != kinds.end()) reports::check_cpp_namespace(options.namespace_name);
  if (std::set<std::string>(options.outputs.begin(), options.outputs.end()).size() != options.outputs.size()) {
    QTUNE_INPUT_ERROR("-o: the same file is given twice");
  }
  const reports::OutputStyle style = reports::parse_output_style(options.output);

  db::Store store = db::Store::open_read_only(options.db_path);
  reports::DataFilter filter;
  if (!options.gpu.empty()) filter.gpu = options.gpu;
  if (!options.formats.empty()) filter.formats = reports::parse_format_list(options.formats);
  check_formats_have_winners(store, options, filter.formats);
  const reports::TuningData data = reports::load_tuning_data(store, filter);
  const std::string gpu = chosen_gpu(options, data);
  if (data.gpus.count(gpu) == 0) {
    std::set<std::string> known;
    for (const auto& winner : store.list_winners()) known.insert(winner.gpu);
    std::string list;
    for (const auto& name : known) list += (list.empty() ? "" : ", ") + name;
    QTUNE_INPUT_ERROR("--gpu: no winners for GPU " + quote_input(gpu) + " in " + options.db_path + " (GPUs with winners: " + (list.empty() ? "none" : list) + ")");
  }
  reports::SelectionTable table = reports::build_selection_table(data, gpu);
  table.fallback_regret = reports::evaluate_fallback(table, data, data.gpus.at(gpu));
  table.fallback_methods = reports::choose_fallback_methods(table, *table.fallback_regret);
  reports::add_moe_rules(table, store, gpu, filter.formats);

  // Every output is rendered before any is written, and then all are written or none.
  std::vector<reports::FileText> artefacts;
  for (std::size_t i = 0; i < options.outputs.size(); ++i) {
    artefacts.push_back({options.outputs[i], kinds[i] == ArtefactKind::Json ? json_text(table.to_json(), 2) + "\n"
                                                                            : table.to_cpp_header(options.namespace_name)});
  }
  reports::write_files_atomically(artefacts);
  std::optional<CubinSummary> cubins;
  if (!options.cubins.empty()) cubins = export_cubins(options, table);
  // Compile failures are errors, but only after everything else is written and reported.
  auto check_cubins = [&] {
    if (!cubins || cubins->failures() == 0) return;
    const std::string first = !cubins->failed.empty()
                                  ? describe(cubins->failed.front().request) + ": " + cubins->failed.front().reason
                                  : describe(cubins->moe_failed.front()) + ": " + cubins->moe_failed.front().reason;
    QTUNE_THROW(Error, "--cubins: " + std::to_string(cubins->failures()) + " kernel(s) failed to compile; first: " + first);
  };

  reports::Table summary({"format", "n", "k", "tuned buckets", "ranges", "configs"});
  for (const auto& [format, shapes] : table.formats) {
    for (const auto& shape : shapes) {
      std::size_t buckets = 0;
      std::vector<std::string> configs;
      for (const auto& range : shape.ranges) {
        buckets += range.buckets.size();
        const std::string text = range.config.to_string();
        if (std::find(configs.begin(), configs.end(), text) == configs.end()) configs.push_back(text);
      }
      summary.add_row({format, std::to_string(shape.n), std::to_string(shape.k), std::to_string(buckets), std::to_string(shape.ranges.size()),
                       std::to_string(configs.size())});
    }
  }
  if (style == reports::OutputStyle::Json) {
    nlohmann::json out = {{"gpu", gpu}, {"outputs", options.outputs}, {"fallback_regret", table.fallback_regret->to_json()}};
    std::ostringstream shapes;
    summary.print_json(shapes);
    out["shapes"] = nlohmann::json::parse(shapes.str());
    if (cubins) {
      auto list = [](const std::vector<production::CubinSkip>& items) {
        nlohmann::json json = nlohmann::json::array();
        for (const auto& item : items) {
          json.push_back({{"format", item.request.format}, {"config", item.request.config.to_string()}, {"arch", item.request.arch},
                          {"origin", item.request.origin}, {"reason", item.reason}});
        }
        return json;
      };
      auto moe_list = [](const std::vector<production::MoeCubinSkip>& items) {
        nlohmann::json json = nlohmann::json::array();
        for (const auto& item : items) {
          json.push_back({{"moe", item.what}, {"arch", item.arch}, {"origin", item.origin}, {"reason", item.reason}});
        }
        return json;
      };
      out["cubins"] = {{"directory", options.cubins}, {"kernels", cubins->written}, {"skipped", list(cubins->skipped)},
                       {"failed", list(cubins->failed)}, {"moe_kernels", cubins->moe_written},
                       {"moe_skipped", moe_list(cubins->moe_skipped)}, {"moe_failed", moe_list(cubins->moe_failed)},
                       {"removed_stale", cubins->removed}};
    }
    std::cout << json_text(out, 2) << "\n";
    check_cubins();
    return;
  }
  if (style == reports::OutputStyle::Csv) {
    summary.print_csv(std::cout);
    check_cubins();
    return;
  }
  summary.print_text(std::cout);
  std::cout << "\n";
  print_regret(*table.fallback_regret, table.fallback_methods);
  for (const auto& output : options.outputs) std::cout << "wrote " << output << "\n";
  if (cubins) {
    std::cout << "wrote " << cubins->written << " cubin(s)"
              << (cubins->moe_written > 0 ? " and " + std::to_string(cubins->moe_written) + " MoE kernel cubin(s)" : "") << " for "
              << options.archs << " and their manifest into " << options.cubins
              << (cubins->removed > 0 ? ", removed " + std::to_string(cubins->removed) + " stale cubin(s) of an earlier export" : "") << "\n";
    for (const auto& skip : cubins->skipped) std::cout << "  not built: " << describe(skip.request) << ": " << skip.reason << "\n";
    for (const auto& skip : cubins->moe_skipped) std::cout << "  not built: " << describe(skip) << ": " << skip.reason << "\n";
    for (const auto& failure : cubins->failed) std::cout << "  FAILED: " << describe(failure.request) << ": " << failure.reason << "\n";
    for (const auto& failure : cubins->moe_failed) std::cout << "  FAILED: " << describe(failure) << ": " << failure.reason << "\n";
  }
  check_cubins();
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto options = std::make_shared<ExportOptions>();
  CLI::App* command = app.add_subcommand(
      "export", "Export a GPU's tuned winners as a selection table: JSON and/or a self-contained C++ header with select()");
  command->add_option("--db", options->db_path, "database file (default: $QTUNE_DB, else ./qtune.db)")->envname("QTUNE_DB");
  command->add_option("--gpu", options->gpu, "GPU profile or name whose winners to export (default: the only GPU with winners)");
  command->add_option("--format", options->formats, "comma-separated format specs to export (default: every tuned format)");
  command->add_option("-o", options->outputs, "output file: table.json or table.hpp (give -o twice for both)");
  command->add_option("--namespace", options->namespace_name, "C++ namespace of the generated header")->capture_default_str();
  command->add_option("--output", options->output, "summary style: table, json or csv")->capture_default_str();
  command->add_option("--cubins", options->cubins,
                      "also precompile every kernel of the table with NVRTC (no GPU needed) into this directory, with a "
                      "manifest.json that libqtune_runtime reads: the dense configs, and the token-indexed MoE winners' "
                      "GEMMs with the kernels their calls launch beside them (alignment, tma's gather, down's reduction)");
  command->add_option("--arch", options->archs, "comma-separated NVRTC targets for --cubins, e.g. sm_90a,sm_80");
  command->add_flag("--cubins-heuristic", options->cubins_heuristic,
                    "with --cubins, also precompile the heuristic's configs for the table's shapes and tuned M buckets");
  command->add_option("--jobs", options->jobs, "NVRTC threads for --cubins (0: every core; at most the cores)")
      ->check(integer_in(0, kMaxJobs))
      ->capture_default_str();
  command->add_option("--humming", options->humming,
                      "also (or only) write the GPU's Humming table: per layer shape and dtypes the [[m_lo, m_hi, "
                      "config], ...] list Humming's forward_layer(tuning_config=...) takes, from `qtune tune --family "
                      "humming` (docs/peers.md: installing it)");
  command->callback([options] { run_export(*options); });
}

}  // namespace qtune::cli
