// `qtune bench` without a GPU: bad input exits 2 naming the option, a missing GPU exits 3 saying so; and the
// format presets map to their natural baselines.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "kernels/format.hpp"
#include "tuner/baselines/baseline.hpp"
#include "tuner/cli/cli.hpp"
#include "tuner/runtime/device.hpp"
#include "tests/common/qtune_executable.hpp"

namespace qtune::baselines {
namespace {

struct CliResult {
  int status = 0;
  std::string err;
};

CliResult run(std::vector<std::string> arguments) {
  arguments.insert(arguments.begin(), {"qtune", "bench"});
  std::vector<char*> argv;
  for (auto& argument : arguments) argv.push_back(argument.data());
  testing::internal::CaptureStderr();
  CliResult result;
  result.status = cli::run_cli(static_cast<int>(argv.size()), argv.data());
  result.err = testing::internal::GetCapturedStderr();
  return result;
}

void expect_bad_input(std::vector<std::string> arguments, const std::string& named) {
  const CliResult result = run(arguments);
  EXPECT_EQ(result.status, cli::kExitBadInput) << result.err;
  EXPECT_NE(result.err.find(named), std::string::npos) << "message does not name " << named << ": " << result.err;
}

TEST(BenchCommand, BadInputExitsTwoNamingTheOption) {
  expect_bad_input({"--baseline", "cublaslt-f16", "--shape", "4096", "--m", "1"}, "--shape");
  expect_bad_input({"--baseline", "cublaslt-f16", "--shape", "4096,x", "--m", "1"}, "--shape");
  expect_bad_input({"--baseline", "cublaslt-f16", "--shape", "4096,4096", "--m", "1,-3"}, "--m");
  expect_bad_input({"--baseline", "cublaslt-f16", "--shape", "4096,4096", "--m", "1,"}, "--m");
  expect_bad_input({"--baseline", "cublaslt-f32", "--shape", "4096,4096", "--m", "1"}, "cublaslt-f32");
  expect_bad_input({"--baseline", "cublaslt-f16", "--shape", "4096,4096", "--m", "1", "--top-k", "0"}, "--top-k");
  expect_bad_input({"--baseline", "cublaslt-f16", "--shape", "4096,4096", "--m", "1", "--output", "xml"}, "xml");
  expect_bad_input({"--baseline", "cublaslt-f16", "--shape", "4096,4096", "--m", "1", "--bandwidth", "guess"},
                   "--bandwidth");
  expect_bad_input({"--shape", "4096,4096", "--m", "1"}, "--baseline");
  expect_bad_input({"--baseline", "cublaslt-f16", "--shape", "4096,4096", "--m", "1", "--blocks", "3"}, "--blocks");
  expect_bad_input({"--baseline", "cublaslt-f16", "--shape", "4096,4096", "--m", "1", "--blocks", "65"}, "--blocks");
  // A format no cuBLASLt GEMM computes has no natural baseline.
  expect_bad_input({"--format", "w4a8-int4-fp8", "--shape", "4096,4096", "--m", "1"}, "--format");
  // Missing required options are CLI11 parse errors: exit 2 too.
  EXPECT_EQ(run({"--baseline", "cublaslt-f16", "--m", "1"}).status, cli::kExitBadInput);
}

bool gpu_present() {
  try {
    runtime::Device::get();
    return true;
  } catch (const NoGpuError&) {
    return false;
  }
}

TEST(BenchCommand, WithoutAGpuExitsThreeInProcess) {
  if (gpu_present()) GTEST_SKIP() << "a GPU is present: the no-GPU exit cannot be observed here";
  const CliResult result =
      run({"--baseline", "cublaslt-f16", "--shape", "256,256", "--m", "1", "--no-db", "--in-process"});
  EXPECT_EQ(result.status, cli::kExitNoGpu) << result.err;
  EXPECT_NE(result.err.find("no GPU"), std::string::npos) << result.err;
}

TEST(BenchCommand, WithoutAGpuExitsThreeThroughTheWorker) {
  if (gpu_present()) GTEST_SKIP() << "a GPU is present: the no-GPU exit cannot be observed here";
  const std::filesystem::path qtune = qtune::test_support::qtune_executable();
  if (!std::filesystem::exists(qtune)) GTEST_SKIP() << qtune << " is not built (ninja qtune)";
  const CliResult result = run({"--baseline", "cublaslt-f16", "--shape", "256,256", "--m", "1", "--no-db",
                                "--worker-executable", qtune.string()});
  EXPECT_EQ(result.status, cli::kExitNoGpu) << result.err;
  EXPECT_NE(result.err.find("no GPU"), std::string::npos) << result.err;
}

TEST(NaturalBaseline, OfThePresets) {
  const std::vector<std::pair<std::string, std::optional<BaselineKind>>> expected = {
      {"w8a8-fp8-tensor", BaselineKind::Fp8Tensor},
      {"w8a8-fp8-ch", BaselineKind::Fp8Outer},
      {"w8a8-fp8-block128x128", BaselineKind::Fp8Block128},
      {"w8a8-int8-ch", BaselineKind::Int8},
      {"w4a16-int4-g128", BaselineKind::F16},
      {"w4a16-int4-ch", BaselineKind::F16},
      {"nvfp4", BaselineKind::F16},
      {"w4a8-int4-fp8", std::nullopt},
      {"w4a8-fp4-fp8", std::nullopt},
      {"w4a4-nvfp4", std::nullopt},
  };
  for (const auto& [spec, kind] : expected) {
    EXPECT_EQ(natural_baseline(FormatSpec::parse(spec)), kind) << spec;
  }
}

TEST(NaturalBaseline, BaselineFormatsAreValidFormats) {
  for (const auto& info : baseline_catalog()) {
    const auto format = baseline_format(info.kind);
    if (!format) continue;
    EXPECT_NO_THROW(format->validate()) << info.id;
    // The canonical text parses back to the same format (it names the database problem).
    EXPECT_EQ(FormatSpec::parse(format->to_string()), *format) << info.id << ": " << format->to_string();
  }
}

}  // namespace
}  // namespace qtune::baselines
