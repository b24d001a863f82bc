#pragma once
// One function per top-level command; each adds its subcommand (and options, and callback) to the app.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "tuner/jit/compiler.hpp"

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

// Range checks of numeric options, made on the text before CLI11 converts it, so that "-1" never wraps into a
// size_t and "nan" never slips past a comparison. The message names the option (CLI11 puts its name in front).
CLI::Validator integer_in(std::int64_t minimum, std::int64_t maximum);
// A finite number in [minimum, maximum], or in (minimum, maximum] with `exclusive_minimum` (durations, fractions).
CLI::Validator real_in(double minimum, double maximum, bool exclusive_minimum = false);
// The upper bound of --jobs: compiler threads beyond the cores only cost memory (the compiler caps them anyway).
inline constexpr std::int64_t kMaxJobs = 1024;
// The upper bound of --seed (seeds are stored as signed 64-bit integers).
inline constexpr std::int64_t kMaxSeed = INT64_MAX;

// The group of old spellings (add_hidden_alias): run_cli's help formatter leaves it out of --help. Not CLI11's hidden
// group "", whose options have no name in error messages.
inline const std::string kOldSpellingsGroup = "Old spellings";

// An earlier spelling of `current` that still works: it sets `value` (the same variable, or one in the old unit),
// errors name it, and --help does not list it.
template <typename T>
CLI::Option* add_hidden_alias(CLI::App& command, const std::string& old_name, T& value, const CLI::Option* current) {
  return command.add_option(old_name, value, "the old spelling of " + current->get_name())->group(kOldSpellingsGroup);
}

// --clock-dip FRACTION: the clock-dip rule of a command's measurements (measure::MeasureOptions::clock_dip_fraction).
CLI::Option* add_clock_dip_option(CLI::App& command, double& fraction);

// A command's compiler settings: `jobs` threads (0: every core) and the kernel cache, unless it cannot be written:
// then one warning line naming QTUNE_CACHE_DIR, and the command compiles without it.
jit::CompilerSettings compiler_settings(std::size_t jobs);

// "a, b, c", in the items' order.
template <typename Strings>
std::string joined(const Strings& items) {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : ", ") + item;
  return text;
}

// "a, b, c" (in the set's order), or "none": the choices an error message lists.
std::string joined_or_none(const std::set<std::string>& items);

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
