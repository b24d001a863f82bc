#include "tuner/cli/cli.hpp"

#include <iostream>
#include <sstream>

#include "kernels/error.hpp"
#include "kernels/text_escape.hpp"
#include "tuner/cli/commands.hpp"
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

int run_cli(int argc, char** argv) {
  runtime::install_crash_report("qtune");
  CLI::App app{"qtune: autotuning and benchmarking of quantized GEMM kernels on NVIDIA GPUs", "qtune"};
  app.set_version_flag("--version", std::string(QTUNE_VERSION) + " (" + build_git_sha() + ")");
  app.require_subcommand(1);
  app.fallthrough();
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
  // Flush before exit: output must reach a file even if a library's exit-time teardown fails.
  struct FlushOnReturn {
    ~FlushOnReturn() {
      std::cout.flush();
      std::cerr.flush();
    }
  } flush_on_return;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForAllHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForVersion& version) {
    return app.exit(version);
  } catch (const CLI::ParseError& error) {
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
  return 0;
}

}  // namespace qtune::cli
