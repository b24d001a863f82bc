#pragma once
// One function per top-level command; each adds its subcommand (and options, and callback) to the app.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/error.hpp"

namespace qtune::cli {

void add_formats_command(CLI::App& app);
void add_db_command(CLI::App& app);
void add_worker_command(CLI::App& app);  // hidden: `qtune __worker --fd N`, the measuring worker process
void add_bench_command(CLI::App& app);
void add_kernel_sweep_command(CLI::App& app);  // `qtune kernel-sweep`: time a kernel family's configurations
void add_export_command(CLI::App& app);  // `qtune export`: tuned winners as table.json / table.hpp
void add_import_command(CLI::App& app);  // `qtune import`: external results (Humming JSON, JSON, CSV)
void add_report_command(CLI::App& app);  // `qtune report`: HTML + Markdown + CSV report
void add_tune_command(CLI::App& app);  // `qtune tune`: search, verify, measure and store winners
void add_search_eval_command(CLI::App& app);  // `qtune search-eval`: replay strategies against stored results
void add_compile_command(CLI::App& app);  // `qtune compile`: compile configurations for an arch, store resources

// "1,16,256" -> {1, 16, 256}; InputError naming `field` for an empty list, a trailing comma or an item below `minimum`.
std::vector<std::int64_t> parse_int_list(const std::string& text, const std::string& field, std::int64_t minimum);
// parse_int_list with minimum 1.
std::vector<std::int64_t> parse_positive_int_list(const std::string& text, const std::string& field);

// --clock-dip FRACTION: the clock-dip rule of a command's measurements (measure::MeasureOptions::clock_dip_fraction).
CLI::Option* add_clock_dip_option(CLI::App& command, double& fraction);

// Re-throws an InputError from a parser with the flag's name in front (parsers name their own field).
template <typename Parse>
decltype(auto) naming_flag(const std::string& flag, Parse parse) {
  try {
    return parse();
  } catch (const InputError& error) {
    QTUNE_INPUT_ERROR(flag + ": " + error.what());
  }
}

}  // namespace qtune::cli
