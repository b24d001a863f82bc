// Google Benchmark's main for qtune-bench; the benchmarks live in the other files of tuner/bench/. Unlike
// BENCHMARK_MAIN, the exit status tells what happened, as qtune's does: 3 when a selected benchmark was skipped for
// want of a GPU, 1 when one was skipped with another error, 2 when the filter selects no benchmark.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tuner/cli/cli.hpp"

namespace {

// What the skipped-with-error runs said, seen as the display reporter prints them.
struct SkippedRuns {
  bool any = false;
  bool no_gpu = false;
};

// `Base` (the console, JSON or CSV reporter --benchmark_format asks for) that also records skipped runs.
template <typename Base>
class RecordingReporter final : public Base {
 public:
  template <typename... Arguments>
  explicit RecordingReporter(SkippedRuns& skipped, Arguments... arguments) : Base(arguments...), skipped_(skipped) {}

  void ReportRuns(const std::vector<benchmark::BenchmarkReporter::Run>& runs) override {
    for (const benchmark::BenchmarkReporter::Run& run : runs) {
      if (!run.error_occurred) continue;
      skipped_.any = true;
      // The GPU benchmarks skip with "no GPU: <why>" (a NoGpuError).
      if (std::string_view(run.error_message).starts_with("no GPU")) skipped_.no_gpu = true;
    }
    Base::ReportRuns(runs);
  }

 private:
  SkippedRuns& skipped_;
};

// --benchmark_format's value (console, json or csv); console when not given.
std::string requested_format(int argc, char** argv) {
  constexpr std::string_view kFlag = "--benchmark_format=";
  std::string format = "console";
  for (int i = 1; i < argc; ++i) {
    const std::string_view argument = argv[i];
    if (argument.starts_with(kFlag)) format = std::string(argument.substr(kFlag.size()));
  }
  return format;
}

std::unique_ptr<benchmark::BenchmarkReporter> make_reporter(const std::string& format, SkippedRuns& skipped) {
  if (format == "json") return std::make_unique<RecordingReporter<benchmark::JSONReporter>>(skipped);
  if (format == "csv") {
    // Deprecated upstream but still what --benchmark_format=csv means (Google Benchmark's own main does the same).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    return std::make_unique<RecordingReporter<benchmark::CSVReporter>>(skipped);
#pragma GCC diagnostic pop
  }
  const auto options = isatty(STDOUT_FILENO) != 0 ? benchmark::ConsoleReporter::OO_ColorTabular : benchmark::ConsoleReporter::OO_Tabular;
  return std::make_unique<RecordingReporter<benchmark::ConsoleReporter>>(skipped, options);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string format = requested_format(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return qtune::cli::kExitBadInput;
  SkippedRuns skipped;
  const std::unique_ptr<benchmark::BenchmarkReporter> reporter = make_reporter(format, skipped);
  const std::size_t ran = benchmark::RunSpecifiedBenchmarks(reporter.get());
  benchmark::Shutdown();
  if (ran == 0) return qtune::cli::kExitBadInput;  // the filter matched nothing (Google Benchmark said so)
  if (skipped.no_gpu) return qtune::cli::kExitNoGpu;
  return skipped.any ? qtune::cli::kExitFailure : 0;
}
