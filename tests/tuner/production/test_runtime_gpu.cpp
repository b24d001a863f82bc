// libqtune_runtime on a GPU (skipped with the reason when there is none): Runtime::gemm for w4a16-int4-ch at M = 1 and
// M = 37, N = K = 1024, with split-K configurations from a tuned table, against the CPU reference; random data, the
// output poisoned with NaN before every launch. On sm_90, a Runtime made for plain "sm_90" runs the wgmma and tma
// families' kernels (compiled for sm_90a), from its heuristic and from a table.
#include <gtest/gtest.h>

#include "tests/common/temp_dir.hpp"

#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/families/mma_family.hpp"
#include "kernels/families/wgmma_family.hpp"
#include "kernels/reference.hpp"
#include "tests/tuner/production/production_test_support.hpp"
#include "tests/tuner/runtime/gpu_test_support.hpp"
#include "tuner/gemm/gemm_runner.hpp"
#include "tuner/production/qtune_runtime.hpp"
#include "tuner/runtime/device.hpp"
#include "tuner/runtime/memory.hpp"
#include "tuner/runtime/stream.hpp"

namespace qtune::production {
namespace {

using runtime_api::ConfigSource;
using runtime_api::Runtime;
using runtime_api::RuntimeOptions;
using namespace testing;

// Both split-K, with different workspace layouts, so switching between them must re-zero the tile counters.
constexpr const char* kDecode = "bm=16,bn=64,bk=256,wm=1,wn=2,wk=2,stages=4,split=2,raster=0";
constexpr const char* kPrefill = "bm=64,bn=128,bk=128,wm=2,wn=4,wk=1,stages=3,split=2,raster=0";
constexpr std::int64_t kSize = 1024;

TEST(RuntimeApiGpuFixture, TableConfigsAreValidSplitKConfigsOnHopper) {
  for (const char* config : {kDecode, kPrefill}) {
    const Problem problem{FormatSpec::parse(kFormat), 37, kSize, kSize};
    const RuleVerdict verdict = mma_family().check(KernelConfig::parse(config), problem, ArchLimits::for_sm(90));
    EXPECT_TRUE(verdict.valid) << config << ": " << verdict.rule << ": " << verdict.detail;
    EXPECT_GT(mma_family().launch_geometry(KernelConfig::parse(config), problem).workspace_bytes, 0u) << config;
  }
}

// The problem's data on the device: weights packed by the Runtime from codes and scale bits, activations and bias as-is.
struct DeviceOperands {
  runtime::DeviceBuffer a, weights, scales, zeros, global_scale, bias, c;
};

DeviceOperands upload(const Runtime& runtime, const gemm::GemmData& data) {
  const QuantizedWeights& w = data.weights;
  const runtime_api::PackedWeights packed =
      runtime.prepack(kFormat, w.n, w.k, {w.codes, w.scales.bits, w.zero_point_bits, w.global_scale});
  DeviceOperands operands;
  operands.a = runtime::make_device_buffer(data.activations.bits16);
  operands.weights = runtime::make_device_buffer(packed.weights);
  operands.scales = runtime::make_device_buffer(packed.scales);
  operands.global_scale = runtime::make_device_buffer(packed.global_scale);
  if (!packed.zeros.empty()) operands.zeros = runtime::make_device_buffer(packed.zeros);
  if (!data.bias.empty()) operands.bias = runtime::make_device_buffer(mma_family().pack_bias(data.bias, data.problem.format));
  operands.c = runtime::DeviceBuffer(static_cast<std::size_t>(data.problem.m * data.problem.n) * 2);
  runtime::Device::get().synchronize();  // pageable uploads may still be in flight when cuMemcpyHtoD returns
  return operands;
}

// Poisons C, runs the GEMM through the Runtime, and returns C's bits.
std::vector<uint16_t> run_gemm(Runtime& runtime, const gemm::GemmData& data, DeviceOperands& operands, const runtime::Stream& stream) {
  operands.c.fill_bytes(0xFF);  // NaN in f16: an element the kernel never writes shows up
  runtime::Device::get().synchronize();  // the memset is asynchronous and the test stream does not wait for it
  runtime_api::GemmArguments arguments;
  arguments.a = operands.a.as<void>();
  arguments.weights = operands.weights.as<void>();
  arguments.scales = operands.scales.as<void>();
  arguments.zeros = operands.zeros.bytes() > 0 ? operands.zeros.as<void>() : nullptr;
  arguments.global_scale = operands.global_scale.as<void>();
  arguments.bias = operands.bias.bytes() > 0 ? operands.bias.as<void>() : nullptr;
  arguments.c = operands.c.as<void>();
  runtime.gemm(kFormat, data.problem.m, data.problem.n, data.problem.k, arguments, stream.get());
  stream.synchronize();
  return operands.c.download<uint16_t>(static_cast<std::size_t>(data.problem.m * data.problem.n));
}

TEST(RuntimeApiGpu, GemmMatchesTheReferenceAtM1AndM37WithSplitK) {
  QTUNE_REQUIRE_GPU();
  test_support::TempDir dir;
  reports::SelectionTable table;
  table.gpu = "h200";
  table.formats[kFormat] = {shape_rules(kSize, kSize, {{1, 16, kDecode}, {17, std::nullopt, kPrefill}})};
  RuntimeOptions options;
  options.table = write_table(dir / "table.json", table);
  options.cache_directory = dir / "cache";
  Runtime runtime(options);

  const FormatSpec format = FormatSpec::parse(kFormat);
  const gemm::GemmData decode = gemm::make_gemm_data({format, 1, kSize, kSize, false}, 101);
  const gemm::GemmData prefill = gemm::make_gemm_data({format, 37, kSize, kSize, true}, 202);
  EXPECT_EQ(runtime.select(kFormat, 1, kSize, kSize).config, kDecode);
  EXPECT_EQ(runtime.select(kFormat, 37, kSize, kSize, true).config, kPrefill);
  EXPECT_EQ(runtime.select(kFormat, 37, kSize, kSize, true).source, ConfigSource::Tuned);
  DeviceOperands decode_operands = upload(runtime, decode);
  DeviceOperands prefill_operands = upload(runtime, prefill);
  const runtime::Stream stream;
  const double tolerance = default_tolerance(format);

  const std::vector<uint16_t> first = run_gemm(runtime, decode, decode_operands, stream);
  const gemm::Verification decode_check = gemm::verify_output(first, format.output, gemm::reference_for(decode), tolerance);
  EXPECT_TRUE(decode_check.passed) << "M=1: " << decode_check.summary();
  const std::vector<uint16_t> wide = run_gemm(runtime, prefill, prefill_operands, stream);
  const gemm::Verification prefill_check = gemm::verify_output(wide, format.output, gemm::reference_for(prefill), tolerance);
  EXPECT_TRUE(prefill_check.passed) << "M=37 with bias: " << prefill_check.summary();
  // Back to the first layout: the workspace must have been re-zeroed for it, and the reduction is deterministic.
  EXPECT_EQ(run_gemm(runtime, decode, decode_operands, stream), first);
  EXPECT_EQ(run_gemm(runtime, prefill, prefill_operands, stream), wide);

  EXPECT_EQ(runtime.loaded_kernel_count(), 2u);
  const runtime_api::KernelPlan plan = runtime.plan(kFormat, 1, kSize, kSize);
  EXPECT_TRUE(plan.loaded);
  EXPECT_EQ(plan.origin, runtime_api::KernelOrigin::Jit);
}

TEST(RuntimeApiGpu, HeuristicGemmOnTheDefaultStreamWithoutATable) {
  QTUNE_REQUIRE_GPU();
  test_support::TempDir dir;
  RuntimeOptions options;
  options.cache_directory = dir / "cache";
  Runtime runtime(options);
  const FormatSpec format = FormatSpec::parse(kFormat);
  const gemm::GemmData data = gemm::make_gemm_data({format, 37, kSize, kSize, false}, 303);
  EXPECT_EQ(runtime.select(kFormat, 37, kSize, kSize).source, ConfigSource::Heuristic);
  DeviceOperands operands = upload(runtime, data);
  operands.c.fill_bytes(0xFF);
  runtime::Device::get().synchronize();
  runtime_api::GemmArguments arguments;
  arguments.a = operands.a.as<void>();
  arguments.weights = operands.weights.as<void>();
  arguments.scales = operands.scales.as<void>();
  arguments.global_scale = operands.global_scale.as<void>();
  arguments.c = operands.c.as<void>();
  runtime.load(kFormat, 37, kSize, kSize);
  EXPECT_EQ(runtime.loaded_kernel_count(), 1u);
  runtime.gemm(kFormat, 37, kSize, kSize, arguments, nullptr);
  runtime::Device::get().synchronize();
  const std::vector<uint16_t> bits = operands.c.download<uint16_t>(static_cast<std::size_t>(37 * kSize));
  const gemm::Verification check = gemm::verify_output(bits, format.output, gemm::reference_for(data), default_tolerance(format));
  EXPECT_TRUE(check.passed) << check.summary();
  // A missing required pointer is bad input, not a launch.
  arguments.weights = nullptr;
  EXPECT_THROW(runtime.gemm(kFormat, 37, kSize, kSize, arguments, nullptr), InputError);
}

// The plain-sm_90 test's table config and heuristic choices: what it expects to run on Hopper.
constexpr const char* kWgmmaTile = "bm=64,bn=128,bk=128,stages=4,split=1,raster=0";

TEST(RuntimeApiGpuFixture, PlainSm90TestRunsAWgmmaTableConfigAndTheWgmmaAndTmaHeuristics) {
  const FormatSpec format = FormatSpec::parse(kFormat);
  const RuleVerdict verdict =
      wgmma_family().check(KernelConfig::parse(kWgmmaTile, "wgmma"), {format, 64, kSize, kSize}, ArchLimits::for_sm(90));
  EXPECT_TRUE(verdict.valid) << verdict.rule << ": " << verdict.detail;
  const Runtime runtime({.arch = "sm_90"});
  EXPECT_EQ(runtime.plan(kFormat, 16, kSize, kSize).choice.family, "wgmma");
  EXPECT_EQ(runtime.plan(kFormat, 64, kSize, kSize).choice.family, "tma");
  EXPECT_EQ(runtime.plan(kFormat, 300, kSize, kSize).choice.family, "tma");
  EXPECT_EQ(runtime.plan(kFormat, 300, kSize, kSize).arch, "sm_90a");
}

// wgmma and tma kernels exist only as sm_90a code: a Runtime told "sm_90" (not "sm_90a") compiles them for sm_90a and
// runs them. The heuristic's choices at M = 16 (wgmma), M = 64, 200 and 300 (tma: streaming, one-wave with a group in
// flight, persistent), and a table's wgmma config, against the reference.
TEST(RuntimeApiGpu, PlainSm90RuntimeRunsWgmmaAndTmaKernels) {
  QTUNE_REQUIRE_GPU();
  if (gemm::device_limits().sm != 90) GTEST_SKIP() << "not an sm_90 GPU: no wgmma or tma kernel runs here";
  test_support::TempDir dir;
  reports::SelectionTable table;
  table.gpu = "h200";
  table.formats[kFormat] = {shape_rules(kSize, kSize, {{1, std::nullopt, std::string("wgmma:") + kWgmmaTile}})};
  Runtime heuristic({.cache_directory = dir / "cache", .arch = "sm_90"});
  Runtime tuned({.table = write_table(dir / "table.json", table), .cache_directory = dir / "cache", .arch = "sm_90"});
  const FormatSpec format = FormatSpec::parse(kFormat);
  const runtime::Stream stream;
  std::set<std::string> families;
  for (const auto& [runtime, m, seed] : std::vector<std::tuple<Runtime*, std::int64_t, std::uint64_t>>{
           {&heuristic, 16, 303}, {&heuristic, 64, 404}, {&heuristic, 200, 707}, {&heuristic, 300, 505}, {&tuned, 48, 606}}) {
    const runtime_api::KernelPlan plan = runtime->plan(kFormat, m, kSize, kSize);
    const std::string label = "M=" + std::to_string(m) + " " + plan.choice.family + ":" + plan.choice.config;
    const Problem problem{format, m, kSize, kSize};
    if (runtime == &heuristic) {
      EXPECT_EQ(plan.choice.family, heuristic_family(problem, 90).name()) << label;
    } else {
      EXPECT_EQ(plan.choice.source, ConfigSource::Tuned) << label << ": " << plan.choice.detail;
    }
    families.insert(plan.choice.family);
    EXPECT_EQ(plan.arch, plan.choice.family == "mma" ? "sm_90" : "sm_90a") << label;
    const gemm::GemmData data = gemm::make_gemm_data({format, m, kSize, kSize, false}, seed);
    DeviceOperands operands = upload(*runtime, data);
    const std::vector<uint16_t> bits = run_gemm(*runtime, data, operands, stream);
    const gemm::Verification check = gemm::verify_output(bits, format.output, gemm::reference_for(data), default_tolerance(format));
    EXPECT_TRUE(check.passed) << label << ": " << check.summary();
  }
  EXPECT_TRUE(families.count("wgmma") > 0) << "no wgmma kernel was run";
  EXPECT_TRUE(families.count("tma") > 0) << "no tma kernel was run (the heuristic at M = 300 on N = K = 1024)";
}

}  // namespace
}  // namespace qtune::production
