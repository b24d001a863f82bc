#include "tuner/cli/cli.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>

#include "kernels/error.hpp"
#include "kernels/text_escape.hpp"
#include "tuner/cli/commands.hpp"
#include "tuner/jit/kernel_cache.hpp"
#include "tuner/runtime/build_info.hpp"
#include "tuner/runtime/crash_report.hpp"

namespace qtune::cli {

std::vector<std::int64_t> parse_int_list(const std::string& text, const std::string& field, std::int64_t minimum) {
  std::vector<std::int64_t> values;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    std::size_t used = 0;
    std::int64_t value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || value < minimum) {
      QTUNE_INPUT_ERROR(field + ": " + quote_input(item) + " is not " + (minimum == 1 ? std::string("a positive integer") : "an integer >= " + std::to_string(minimum)) +
                        " (in " + quote_input(text) + ")");
    }
    values.push_back(value);
  }
  if (values.empty() || text.back() == ',') QTUNE_INPUT_ERROR(field + ": expected a comma-separated list, got " + quote_input(text));
  return values;
}

std::vector<std::int64_t> parse_positive_int_list(const std::string& text, const std::string& field) {
  return parse_int_list(text, field, 1);
}

CLI::Validator integer_in(std::int64_t minimum, std::int64_t maximum) {
  const std::string range = "[" + std::to_string(minimum) + ", " + std::to_string(maximum) + "]";
  return CLI::Validator(
      [minimum, maximum, range](const std::string& text) -> std::string {
        std::int64_t value = 0;
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        const bool whole = error == std::errc() && end == text.data() + text.size();
        return whole && value >= minimum && value <= maximum ? "" : "expected an integer in " + range + ", got " + quote_input(text);
      },
      range);
}

CLI::Validator real_in(double minimum, double maximum, bool exclusive_minimum) {
  // "%.15g": 1000000 rather than 1e+06, 0.5 as it is.
  auto shortest = [](double value) {
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "%.15g", value);
    return std::string(buffer);
  };
  std::ostringstream range;
  range << (exclusive_minimum ? "(" : "[") << shortest(minimum) << ", " << shortest(maximum) << "]";
  return CLI::Validator(
      [minimum, maximum, exclusive_minimum, range = range.str()](const std::string& text) -> std::string {
        double value = 0;
        std::istringstream stream(text);
        const bool number = static_cast<bool>(stream >> value) && stream.eof() && std::isfinite(value);
        const bool above = exclusive_minimum ? value > minimum : value >= minimum;
        return number && above && value <= maximum ? "" : "expected a number in " + range + ", got " + quote_input(text);
      },
      range.str());
}

jit::CompilerSettings compiler_settings(std::size_t jobs) {
  jit::CompilerSettings settings;
  settings.threads = jobs;
  const std::filesystem::path directory = jit::KernelCache::default_directory();
  if (const std::optional<std::string> reason = jit::KernelCache(directory).unusable_reason()) {
    std::cerr << "qtune: warning: QTUNE_CACHE_DIR: the kernel cache " << directory.string() << " is unusable (" << *reason
              << "); compiling without it\n";
    settings.use_cache = false;
  }
  return settings;
}

std::string joined_or_none(const std::set<std::string>& items) { return items.empty() ? "none" : joined(items); }

CLI::Option* add_clock_dip_option(CLI::App& command, double& fraction) {
  return command
      .add_option("--clock-dip", fraction,
                  "a measurement during which NVML saw the SM clock below this fraction of the GPU's highest is "
                  "treated as throttled: cooled down and measured again (at most twice); 0 turns the rule off")
      ->check([](const std::string& text) -> std::string {
        double value = -1;
        std::istringstream stream(text);
        const bool number = static_cast<bool>(stream >> value) && stream.eof();
        return number && (value == 0 || (value >= 0.5 && value <= 1)) ? "" : "must be 0 (off) or in [0.5, 1], got " + quote_input(text);
      })
      ->capture_default_str();
}

namespace {

// Edits between two words (insertions, deletions, substitutions and swaps of neighbours: the optimal string
// alignment distance): how a mistyped command is matched to the nearest.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// --help without the old spellings of renamed options (kOldSpellingsGroup).
class HelpWithoutOldSpellings final : public CLI::Formatter {
 public:
  std::string make_group(std::string group, bool is_positional, std::vector<const CLI::Option*> options) const override {
    if (group == kOldSpellingsGroup) return "";
    return CLI::Formatter::make_group(std::move(group), is_positional, std::move(options));
  }
};

// The deepest (sub)command the arguments selected.
CLI::App* selected_command(CLI::App& app) {
  CLI::App* command = &app;
  while (!command->get_subcommands().empty()) command = command->get_subcommands().front();
  return command;
}

// "unknown command 'frobnicate' (did you mean 'formats'?); commands: ..." when `command` (the deepest selected) takes
// subcommands and the first argument left over (passed up to `root` by fallthrough) is none of them; nullopt for
// other parse errors.
std::optional<std::string> unknown_command_message(const CLI::App& root, CLI::App& command) {
  const std::vector<CLI::App*> subcommands = command.get_subcommands([](CLI::App* sub) { return !sub->get_group().empty(); });
  const std::vector<std::string> left = root.remaining(true);
  if (subcommands.empty() || left.empty() || left.front().starts_with("-")) return std::nullopt;
  const std::string& word = left.front();
  std::string names;
  std::string nearest;
  std::size_t nearest_distance = std::string::npos;
  for (const CLI::App* sub : subcommands) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
    const std::size_t distance = edit_distance(word, sub->get_name());
    if (distance < nearest_distance) {
      nearest_distance = distance;
      nearest = sub->get_name();
    }
  }
  // A suggestion only when it is plausibly a typo: at most a third of the word's letters differ.
  const bool close = nearest_distance <= std::max<std::size_t>(1, word.size() / 3);
  const std::string where = command.get_parent() == nullptr ? "" : " of '" + command.get_name() + "'";
  return "unknown command " + quote_input(word) + where + (close ? " (did you mean '" + nearest + "'?)" : "") + "; commands: " + names;
}

}  // namespace

namespace {
int requested_exit_status = 0;
}  // namespace

void set_exit_status(int status) { requested_exit_status = status; }

int run_cli(int argc, char** argv) {
  runtime::install_crash_report("qtune");
  CLI::App app{"qtune: autotuning and benchmarking of quantized GEMM kernels on NVIDIA GPUs", "qtune"};
  app.set_version_flag("--version", std::string(QTUNE_VERSION) + " (" + build_git_sha() + ")");
  app.require_subcommand(1);
  app.fallthrough();
  app.formatter(std::make_shared<HelpWithoutOldSpellings>());  // before the commands: they inherit it
  add_formats_command(app);
  add_db_command(app);
  add_worker_command(app);
  add_bench_command(app);
  add_kernel_sweep_command(app);
  add_export_command(app);
  add_import_command(app);
  add_report_command(app);
  add_tune_command(app);
  add_search_eval_command(app);
  add_compile_command(app);
  requested_exit_status = 0;
  // Flush before exit: output must reach a file even if a library's exit-time teardown fails.
  struct FlushOnReturn {
    ~FlushOnReturn() {
      std::cout.flush();
      std::cerr.flush();
    }
  } flush_on_return;
  try {
    // No command: the help, as a usage error (a command is required).
    if (argc <= 1) {
      std::cout << app.help();
      return kExitBadInput;
    }
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForAllHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForVersion& version) {
    return app.exit(version);
  } catch (const CLI::ParseError& error) {
    CLI::App* command = selected_command(app);
    if (const std::optional<std::string> unknown = unknown_command_message(app, *command)) {
      std::cerr << "qtune: error: " << *unknown << "\n";
      return kExitBadInput;
    }
    // A command that takes a subcommand and got none: its help, so that the choices are in view.
    if (command != &app && command->get_require_subcommand_min() > 0 && command->get_subcommands().empty() &&
        app.remaining(true).empty()) {
      std::cerr << command->help();
      return kExitBadInput;
    }
    app.exit(error);
    return kExitBadInput;
  } catch (const InputError& error) {
    std::cerr << "qtune: error: " << error.what() << "\n";
    return kExitBadInput;
  } catch (const NoGpuError& error) {
    std::cerr << "qtune: no GPU: " << error.what() << "\n";
    return kExitNoGpu;
  } catch (const Error& error) {
    std::cerr << "qtune: error: " << error.located() << "\n";
    return kExitFailure;
  } catch (const std::exception& error) {
    std::cerr << "qtune: error: " << error.what() << "\n";
    return kExitFailure;
  }
  return requested_exit_status;
}

}  // namespace qtune::cli
