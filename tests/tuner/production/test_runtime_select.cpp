// libqtune_runtime without a GPU: which configuration select() picks (tuned table, M range boundaries, nearest-shape
// fallback, the heuristic), the target its kernel compiles for (wgmma and tma: sm_90a on any sm_90 spelling, compiled
// with NVRTC), CPU prepacking, and the one-line errors for bad input.
#include <gtest/gtest.h>

#include "tests/common/temp_dir.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "kernels/families/mma_family.hpp"
#include "kernels/families/tma_family.hpp"
#include "kernels/families/wgmma_family.hpp"
#include "kernels/quantize.hpp"
#include "tests/tuner/kernel/kernel_test_support.hpp"
#include "tests/tuner/production/production_test_support.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/production/kernel_sources.hpp"
#include "tuner/production/qtune_runtime.hpp"
#include "tuner/production/selector.hpp"

namespace qtune::production {
namespace {

using runtime_api::ConfigSource;
using runtime_api::Runtime;
using runtime_api::PackedActivations;
using runtime_api::RuntimeOptions;
using test_support::TempDir;
using namespace testing;

ArchLimits hopper() { return ArchLimits::for_sm(90); }

class RuntimeSelect : public ::testing::Test {
 protected:
  void SetUp() override {
    table_path_ = write_table(dir_ / "table.json", sample_table());
    RuntimeOptions options;
    options.table = table_path_;
    options.arch = "sm_90a";
    runtime_ = std::make_unique<Runtime>(options);
  }
  TempDir dir_;
  std::filesystem::path table_path_;
  std::unique_ptr<Runtime> runtime_;
};

TEST(RuntimeSelectFixture, TableConfigsPassTheFamilyRulesOnHopperAtTheirBuckets) {
  // The tests below rely on the table's configs being valid where they were tuned.
  for (const auto& [config, m] : std::vector<std::pair<const char*, std::int64_t>>{{kSmallM, 16}, {kMiddleM, 64}, {kLargeM, 4096}}) {
    const RuleVerdict verdict = mma_family().check(KernelConfig::parse(config), {FormatSpec::parse(kFormat), m, 4096, 4096}, hopper());
    EXPECT_TRUE(verdict.valid) << config << ": " << verdict.rule << ": " << verdict.detail;
  }
  EXPECT_TRUE(mma_family().check(KernelConfig::parse(kBigShape), {FormatSpec::parse(kFormat), 4096, 8192, 8192}, hopper()).valid);
}

TEST_F(RuntimeSelect, TallTileBelowItsBucketKeepsTheTunedConfig) {
  // bm=128 at M=1 breaks the family's search-pruning rule "bm-over-m", yet it is what the table says for M=1 (the
  // exported header's select() returns it too): M only sizes the grid, so the runtime keeps it.
  const Problem problem{FormatSpec::parse(kFormat), 1, 8192, 8192};
  ASSERT_EQ(mma_family().check(KernelConfig::parse(kBigShape), problem, hopper()).rule, "bm-over-m");
  const runtime_api::Choice choice = runtime_->select(kFormat, 1, 8192, 8192);
  EXPECT_EQ(choice.source, ConfigSource::Tuned);
  EXPECT_EQ(choice.config, kBigShape);
}

TEST_F(RuntimeSelect, TunedShapeTakesTheConfigOfTheMRangeHoldingM) {
  const runtime_api::Choice choice = runtime_->select(kFormat, 1, 4096, 4096);
  EXPECT_EQ(choice.source, ConfigSource::Tuned);
  EXPECT_EQ(choice.family, "mma");
  EXPECT_EQ(choice.config, kSmallM);
  EXPECT_EQ(choice.params.at("split"), 4);
  EXPECT_NE(choice.detail.find("tuned shape n=4096 k=4096, M range [1, 16]"), std::string::npos) << choice.detail;
  EXPECT_EQ(runtime_->select(kFormat, 1, 8192, 8192).config, kBigShape);
  EXPECT_EQ(runtime_->table_gpu(), "h200");
  EXPECT_EQ(runtime_->arch(), "sm_90a");
}

TEST_F(RuntimeSelect, MRangeBoundariesAreInclusiveAndTheLastRangeHasNoEnd) {
  const std::vector<std::pair<std::int64_t, const char*>> expected = {
      {1, kSmallM}, {16, kSmallM}, {17, kMiddleM}, {64, kMiddleM}, {65, kLargeM}, {4096, kLargeM}, {1000000, kLargeM}};
  for (const auto& [m, config] : expected) {
    const runtime_api::Choice choice = runtime_->select(kFormat, m, 4096, 4096);
    EXPECT_EQ(choice.config, config) << "M=" << m;
    EXPECT_EQ(choice.source, ConfigSource::Tuned) << "M=" << m;
  }
}

TEST_F(RuntimeSelect, UntunedShapeTakesTheNearestTunedShapesRanges) {
  // 5120 x 4096 is nearer to 4096 x 4096 than to 8192 x 8192 in (ln N, ln K); 16384 x 16384 is nearer to 8192 x 8192.
  const runtime_api::Choice near_small = runtime_->select(kFormat, 20, 5120, 4096);
  EXPECT_EQ(near_small.source, ConfigSource::Fallback);
  EXPECT_EQ(near_small.config, kMiddleM);
  EXPECT_NE(near_small.detail.find("nearest tuned shape n=4096 k=4096"), std::string::npos) << near_small.detail;
  const runtime_api::Choice near_big = runtime_->select(kFormat, 1, 16384, 16384);
  EXPECT_EQ(near_big.source, ConfigSource::Fallback);
  EXPECT_EQ(near_big.config, kBigShape);
}

TEST_F(RuntimeSelect, FallbackConfigThatBreaksARuleGivesWayToTheHeuristic) {
  // N = 4160 is not a multiple of bn=128: the nearest shape's config cannot run it.
  const Problem problem{FormatSpec::parse(kFormat), 1, 4160, 4096};
  const runtime_api::Choice choice = runtime_->select(kFormat, 1, 4160, 4096);
  EXPECT_EQ(choice.source, ConfigSource::Heuristic);
  EXPECT_EQ(choice.config, mma_family().default_config(problem, hopper()).to_string());
  EXPECT_NE(choice.detail.find("bn-divides-n"), std::string::npos) << choice.detail;
  EXPECT_TRUE(mma_family().check(KernelConfig::parse(choice.config), problem, hopper()).valid);
}

TEST_F(RuntimeSelect, FormatNotInTheTableUsesTheHeuristic) {
  const Problem problem{FormatSpec::parse("w4a16-int4-g128-zp"), 1, 4096, 4096};
  const runtime_api::Choice choice = runtime_->select("w4a16-int4-g128-zp", 1, 4096, 4096);
  EXPECT_EQ(choice.source, ConfigSource::Heuristic);
  EXPECT_EQ(choice.config, mma_family().default_config(problem, hopper()).to_string());
  EXPECT_NE(choice.detail.find("no shape of"), std::string::npos) << choice.detail;
}

TEST(RuntimeSelectWithoutTable, HeuristicForTheArchitecturesLimits) {
  RuntimeOptions options;
  options.arch = "sm_80";
  const Runtime runtime(options);
  for (const std::int64_t m : {1, 16, 37, 300, 4096}) {
    const Problem problem{FormatSpec::parse(kFormat), m, 8192, 8192};
    const runtime_api::Choice choice = runtime.select(kFormat, m, 8192, 8192);
    EXPECT_EQ(choice.source, ConfigSource::Heuristic);
    EXPECT_EQ(choice.detail, "no table");
    EXPECT_EQ(choice.config, mma_family().default_config(problem, ArchLimits::for_sm(80)).to_string()) << "M=" << m;
  }
  EXPECT_EQ(runtime.table_gpu(), "");
  EXPECT_EQ(runtime.arch(), "sm_80");
}

// On Hopper the heuristic for weight-only formats is the wgmma family from M = 16 on, the tma family from M = 32 on
// and the mma family below 16 (heuristic_family); quantized activations go to the tma family from M = 32 on (W4A8 to
// wgmma below it). The
// weights are packed once, for the mma layout all three read.
TEST(RuntimeSelectWithoutTable, HopperHeuristicIsWgmmaFromSixteenRowsAndTmaFromThirtyTwo) {
  RuntimeOptions options;
  options.arch = "sm_90a";
  const Runtime runtime(options);
  for (const std::int64_t m : {1, 8, 16, 31, 32, 64, 255, 256, 300, 4096}) {
    const Problem problem{FormatSpec::parse(kFormat), m, 8192, 8192};
    const runtime_api::Choice choice = runtime.select(kFormat, m, 8192, 8192);
    EXPECT_EQ(choice.source, ConfigSource::Heuristic);
    const KernelFamily& expected = m >= 32   ? static_cast<const KernelFamily&>(tma_family())
                                   : m >= 16 ? static_cast<const KernelFamily&>(wgmma_family())
                                             : mma_family();
    EXPECT_EQ(choice.family, expected.name()) << "M=" << m;
    EXPECT_EQ(choice.config, expected.default_config(problem, hopper()).to_string()) << "M=" << m;
  }
  // A format wgmma cannot run: the mma heuristic below M = 32, the tma family from there.
  EXPECT_EQ(runtime.select("w8a8-fp8-ch", 16, 8192, 8192).family, "mma");
  EXPECT_EQ(runtime.select("w8a8-fp8-ch", 300, 8192, 8192).family, "tma");
  // W4A8 below tma's start: wgmma with the fp8 activations widened to f16.
  EXPECT_EQ(runtime.select("w4a8-int4-fp8", 1, 8192, 8192).family, "wgmma");
  EXPECT_EQ(runtime.select("w4a8-int4-fp8", 64, 8192, 8192).family, "tma");
  EXPECT_EQ(packing_family(FormatSpec::parse(kFormat), 90).name(), "mma");
}

// A table of both families: a wgmma config runs on the mma-packed weights (same layout) and is taken as tuned.
TEST(RuntimeSelectMixedTable, WgmmaConfigsOfATableAreSelected) {
  TempDir dir;
  reports::SelectionTable table;
  table.gpu = "h200";
  const std::string wgmma_config = "bm=64,bn=128,bk=128,stages=4,split=1,raster=0";
  table.formats[kFormat] = {shape_rules(8192, 8192, {{1, 8, kSmallM}, {9, std::nullopt, "wgmma:" + wgmma_config}})};
  RuntimeOptions options;
  options.table = write_table(dir / "table.json", table);
  options.arch = "sm_90a";
  const Runtime runtime(options);
  const runtime_api::Choice small = runtime.select(kFormat, 4, 8192, 8192);
  EXPECT_EQ(small.family, "mma");
  EXPECT_EQ(small.source, ConfigSource::Tuned);
  const runtime_api::Choice large = runtime.select(kFormat, 256, 8192, 8192);
  EXPECT_EQ(large.family, "wgmma");
  EXPECT_EQ(large.source, ConfigSource::Tuned) << large.detail;
  EXPECT_EQ(large.config, wgmma_config);
  // On sm_80 the wgmma config cannot run: the heuristic takes over and says why.
  options.arch = "sm_80";
  const Runtime ampere(options);
  const runtime_api::Choice fallback = ampere.select(kFormat, 256, 8192, 8192);
  EXPECT_EQ(fallback.source, ConfigSource::Heuristic);
  EXPECT_EQ(fallback.family, "mma");
  EXPECT_NE(fallback.detail.find("format-unsupported-on-arch"), std::string::npos) << fallback.detail;
}

// wgmma and tma kernels exist only as sm_90a code (their instantiation refuses plain sm_90): a Runtime given either
// spelling of Hopper plans them for sm_90a, and what it would compile (the family's instantiation for the plan's arch,
// production::gemm_compile_request as Runtime::load builds it) compiles with NVRTC; an mma plan keeps the arch given.
// Tuned configs of both families from a table, and the heuristic's (wgmma from M = 16, tma from M = 256).
TEST(RuntimeCompile, DenseWgmmaAndTmaPlansOfAnySm90SpellingCompileForSm90a) {
  TempDir dir;
  const std::string wgmma_config = "bm=64,bn=128,bk=128,stages=4,split=1,raster=0";
  const Problem fp8_problem{FormatSpec::parse("w8a8-fp8-ch"), 4096, 8192, 8192};
  const KernelConfig tma_config = tma_family().default_config(fp8_problem, hopper());
  ASSERT_TRUE(tma_family().check(tma_config, fp8_problem, hopper()).valid);
  reports::SelectionTable table;
  table.gpu = "h200";
  table.formats[kFormat] = {shape_rules(8192, 8192, {{1, 8, kSmallM}, {9, std::nullopt, "wgmma:" + wgmma_config}})};
  table.formats["w8a8-fp8-ch"] = {shape_rules(8192, 8192, {{1, std::nullopt, "tma:" + tma_config.to_string()}})};
  const std::filesystem::path table_path = write_table(dir / "table.json", table);

  std::vector<jit::CompileRequest> requests;
  std::vector<std::string> labels;
  for (const char* arch : {"sm_90", "sm_90a"}) {
    const Runtime tuned({.table = table_path, .arch = arch});
    const Runtime untuned({.arch = arch});
    auto add = [&](const Runtime& runtime, const char* format, std::int64_t m, const char* family, ConfigSource source,
                   const std::string& expected_arch) {
      const runtime_api::KernelPlan plan = runtime.plan(format, m, 8192, 8192);
      const std::string label = std::string(arch) + " " + format + " M=" + std::to_string(m) + " " + plan.choice.family + ":" +
                                plan.choice.config;
      ASSERT_EQ(plan.choice.family, family) << label << ": " << plan.choice.detail;
      ASSERT_EQ(plan.choice.source, source) << label << ": " << plan.choice.detail;
      EXPECT_EQ(plan.arch, expected_arch) << label;
      EXPECT_EQ(plan.origin, runtime_api::KernelOrigin::Jit) << label;
      // What the JIT would be asked for: plain sm_90 made wgmma and tma refuse the request (UnsupportedError).
      requests.push_back(gemm_compile_request(KernelConfig::parse(plan.choice.config, plan.choice.family),
                                              FormatSpec::parse(format), plan.arch));
      labels.push_back(label);
    };
    add(tuned, kFormat, 64, "wgmma", ConfigSource::Tuned, "sm_90a");
    add(tuned, "w8a8-fp8-ch", 512, "tma", ConfigSource::Tuned, "sm_90a");
    add(tuned, kFormat, 4, "mma", ConfigSource::Tuned, arch);
    if (std::string(arch) == "sm_90") {  // the heuristic's choices compile alike (once: the same kernels for sm_90a)
      add(untuned, kFormat, 16, "wgmma", ConfigSource::Heuristic, "sm_90a");
      add(untuned, kFormat, 64, "tma", ConfigSource::Heuristic, "sm_90a");
      add(untuned, kFormat, 300, "tma", ConfigSource::Heuristic, "sm_90a");
    }
  }
  EXPECT_EQ(kernel_arch("wgmma", "sm_90"), "sm_90a");
  EXPECT_EQ(kernel_arch("tma", "sm_90a"), "sm_90a");
  EXPECT_EQ(kernel_arch("mma", "sm_90"), "sm_90");
  EXPECT_EQ(kernel_arch("wgmma", "sm_80"), "sm_80");  // no such kernel runs there: its own UnsupportedError says so
  test_support::check_each_compiled(requests, labels, [](const std::string& label, const jit::CompiledKernel& kernel) {
    EXPECT_FALSE(kernel.cubin.empty()) << label;
    EXPECT_EQ(kernel.arch, label.find(" mma:") != std::string::npos ? label.substr(0, label.find(' ')) : "sm_90a") << label;
  });
}

TEST_F(RuntimeSelect, SpecSpellingsOfOneFormatSelectAlike) {
  const std::string canonical = FormatSpec::parse(kFormat).to_string();
  EXPECT_EQ(runtime_->select(canonical, 1, 4096, 4096).config, kSmallM);
}

TEST_F(RuntimeSelect, PlanWithoutCubinsIsJitForTheTarget) {
  const runtime_api::KernelPlan plan = runtime_->plan(kFormat, 1, 4096, 4096);
  EXPECT_EQ(plan.origin, runtime_api::KernelOrigin::Jit);
  EXPECT_EQ(plan.arch, "sm_90a");
  EXPECT_TRUE(plan.cubin.empty());
  EXPECT_FALSE(plan.loaded);
  EXPECT_EQ(plan.choice.config, kSmallM);
  EXPECT_EQ(runtime_->precompiled_kernel_count(), 0u);
  EXPECT_EQ(runtime_->loaded_kernel_count(), 0u);
}

// ---------------------------------------------------------------------------------------------------- bad input

TEST_F(RuntimeSelect, BadShapesAndSpecsNameTheField) {
  EXPECT_EQ(input_error([&] { runtime_->select(kFormat, 0, 4096, 4096); }).rfind("m:", 0), 0u);
  EXPECT_EQ(input_error([&] { runtime_->select(kFormat, 1, -5, 4096); }).rfind("n:", 0), 0u);
  EXPECT_EQ(input_error([&] { runtime_->select(kFormat, 1, 4096, 0); }).rfind("k:", 0), 0u);
  EXPECT_NE(input_error([&] { runtime_->select("w4a16-int4-g128", 1, 4096, 4000); }).find("4000"), std::string::npos);
  EXPECT_FALSE(input_error([&] { runtime_->select("w9a16-bogus", 1, 4096, 4096); }).empty());
}

TEST(RuntimeSelectWithoutTable, FormatTheFamilyCannotRunIsUnsupported) {
  RuntimeOptions options;
  options.arch = "sm_80";  // no fp8 tensor cores before sm_89
  const Runtime runtime(options);
  EXPECT_THROW(runtime.select("w8a8-fp8-ch", 1, 4096, 4096), UnsupportedError);
  options.arch = "sm_87";  // a target NVRTC knows, but qtune has no limits for
  EXPECT_EQ(input_error([&] { Runtime{options}; }).rfind("arch:", 0), 0u);
  options.arch = "hopper";
  EXPECT_EQ(input_error([&] { Runtime{options}; }).rfind("arch:", 0), 0u);
}

TEST(RuntimeTableErrors, MalformedTableIsOneLineNamingTheField) {
  TempDir dir;
  nlohmann::json table = sample_table().to_json();
  table["formats"][kFormat]["shapes"][0]["ranges"][1].erase("config");
  RuntimeOptions options;
  options.arch = "sm_90a";
  options.table = dir.write("table.json", table.dump());
  std::string message = input_error([&] { Runtime{options}; });
  EXPECT_NE(message.find("field 'formats." + std::string(kFormat) + ".shapes[0].ranges[1].config': missing"), std::string::npos) << message;
  EXPECT_NE(message.find("table.json"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;

  table = sample_table().to_json();
  table["formats"][kFormat]["shapes"][0]["ranges"][1]["m_min"] = 20;  // leaves M 17..19 uncovered
  options.table = dir.write("gap.json", table.dump());
  message = input_error([&] { Runtime{options}; });
  EXPECT_NE(message.find("ranges[1]'"), std::string::npos) << message;

  options.table = dir.write("broken.json", "{\"schema\": ");
  message = input_error([&] { Runtime{options}; });
  EXPECT_NE(message.find("broken.json is not JSON"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;

  options.table = dir / "missing.json";
  EXPECT_EQ(input_error([&] { Runtime{options}; }).rfind("table: cannot read", 0), 0u);
}

// ---------------------------------------------------------------------------------------------------- header

// The output of a shell command (stderr included) and its exit status.
std::string command_output(const std::string& command, int* status) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    *status = -1;
    return output;
  }
  char buffer[4096];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  *status = ::pclose(pipe);
  return output;
}

TEST(RuntimeHeader, CompilesAloneWithWarningsAsErrorsAndIncludesNoThirdPartyHeader) {
  TempDir dir;
  // What production code writes: designated initializers that leave fields out must not warn either.
  const std::filesystem::path program = dir.write("use.cpp", R"(#include "tuner/production/qtune_runtime.hpp"
namespace rt = qtune::runtime_api;
int use(rt::Runtime& runtime, const void* a, void* c, CUstream_st* stream) {
  std::vector<std::uint8_t> codes(16);
  std::vector<std::uint32_t> scales(1);
  const rt::PackedWeights packed = runtime.prepack("w4a16-int4-ch", 1, 16, {.codes = codes, .scale_bits = scales});
  runtime.gemm("w4a16-int4-ch", 1, 1, 16, {.a = a, .weights = packed.weights.data(), .c = c}, stream);
  return rt::Runtime({.table = "t.json", .arch = "sm_90a"}).select("w4a16-int4-ch", 1, 1, 16).source == rt::ConfigSource::Tuned;
}
)");
  const std::string compiler = std::getenv("CXX") != nullptr ? std::getenv("CXX") : "c++";
  const std::string flags = " -std=c++20 -Wall -Wextra -Wpedantic -Wshadow -Wold-style-cast -Werror -I" + std::string(QTUNE_SOURCE_DIR);
  int status = 0;
  std::string log = command_output(compiler + flags + " -fsyntax-only " + program.string(), &status);
  ASSERT_EQ(status, 0) << log;
  // Every header it pulls in: the two qtune headers and the standard library, nothing else.
  log = command_output(compiler + flags + " -M " + program.string(), &status);
  ASSERT_EQ(status, 0) << log;
  std::set<std::string> qtune_headers;
  std::istringstream words(log);
  for (std::string word; words >> word;) {
    if (word.find(QTUNE_SOURCE_DIR) == 0) qtune_headers.insert(word.substr(std::string(QTUNE_SOURCE_DIR).size()));
    for (const char* forbidden : {"cuda", "sqlite", "CLI", "cupti", "nvml", "nlohmann", "eigen"}) {
      EXPECT_EQ(word.find(forbidden), std::string::npos) << word;
    }
  }
  EXPECT_EQ(qtune_headers, (std::set<std::string>{"/tuner/production/qtune_runtime.hpp", "/kernels/error.hpp"}));
}

// ---------------------------------------------------------------------------------------------------- prepack

TEST(RuntimePrepack, CodesAndScalesPackLikeTheFamilyAndRoundTrip) {
  RuntimeOptions options;
  options.arch = "sm_90a";
  const Runtime runtime(options);
  for (const char* spec : {"w4a16-int4-ch", "w4a16-int4-g128-zp", "w8a16-int8-ch"}) {
    SCOPED_TRACE(spec);
    const FormatSpec format = FormatSpec::parse(spec);
    const std::int64_t n = 256, k = 512;
    const std::vector<float> values = random_normal(static_cast<std::size_t>(n * k), 7, 0.0f, 0.02f);
    const QuantizedWeights quantized = quantize_weights(format, values, n, k);
    const runtime_api::PackedWeights packed =
        runtime.prepack(spec, n, k, {quantized.codes, quantized.scales.bits, quantized.zero_point_bits, quantized.global_scale});
    const KernelConfig any = mma_family().default_config({format, 1, n, k}, hopper());
    const PackedBuffers expected = mma_family().prepack_weights(quantized, any);
    EXPECT_EQ(packed.format, format.to_string());
    EXPECT_EQ(packed.family, "mma");
    EXPECT_EQ(packed.weights, expected.at("weights"));
    EXPECT_EQ(packed.scales, expected.at("scales"));
    EXPECT_EQ(packed.global_scale, expected.at("global_scale"));
    EXPECT_EQ(packed.zeros, expected.count("zeros") ? expected.at("zeros") : std::vector<std::uint8_t>{});
    EXPECT_EQ(format.zero_point != ZeroPoint::None, !packed.zeros.empty());
    // The RTN path packs the same bytes, and the packed codes unpack to the original ones.
    const runtime_api::PackedWeights from_floats = runtime.quantize_and_prepack(spec, n, k, values);
    EXPECT_EQ(from_floats.weights, packed.weights);
    EXPECT_EQ(from_floats.scales, packed.scales);
    PackedBuffers buffers = {{"weights", packed.weights}, {"scales", packed.scales}, {"global_scale", packed.global_scale}};
    if (!packed.zeros.empty()) buffers["zeros"] = packed.zeros;
    EXPECT_EQ(mma_family().unpack_weights(buffers, format, n, k, any).codes, quantized.codes);
  }
}

TEST(RuntimePrepack, WrongSizesNameTheField) {
  RuntimeOptions options;
  options.arch = "sm_90a";
  const Runtime runtime(options);
  const FormatSpec format = FormatSpec::parse("w4a16-int4-g128");
  const QuantizedWeights quantized = quantize_weights(format, random_normal(256 * 512, 3, 0.0f, 0.02f), 256, 512);
  std::vector<std::uint32_t> short_scales(quantized.scales.bits.begin(), quantized.scales.bits.end() - 1);
  EXPECT_EQ(input_error([&] { runtime.prepack("w4a16-int4-g128", 256, 512, {.codes = quantized.codes, .scale_bits = short_scales}); }).rfind("weights.scales:", 0), 0u);
  std::vector<std::uint8_t> short_codes(quantized.codes.begin(), quantized.codes.end() - 1);
  EXPECT_EQ(input_error([&] { runtime.prepack("w4a16-int4-g128", 256, 512, {.codes = short_codes, .scale_bits = quantized.scales.bits}); }).rfind("weights.codes:", 0), 0u);
  std::vector<std::uint8_t> wide_codes = quantized.codes;
  wide_codes[5] = 0x1F;  // a fifth bit in an int4 code: packed two per byte, or sign-extended
  EXPECT_EQ(input_error([&] { runtime.prepack("w4a16-int4-g128", 256, 512, {.codes = wide_codes, .scale_bits = quantized.scales.bits}); }).rfind("weights.codes:", 0), 0u);
  const std::vector<std::uint32_t> zeros(quantized.scales.bits.size(), 8);
  EXPECT_EQ(input_error([&] { runtime.prepack("w4a16-int4-g128", 256, 512, {.codes = quantized.codes, .scale_bits = quantized.scales.bits, .zero_point_bits = zeros}); })
                .rfind("weights.zero_points:", 0), 0u);
}

// Activations for gemm(): f16 bits for weight-only formats, fp8 codes and per-token f32 scales for W4A8, each decoding
// to what the quantizer stored; a wrong count names the field.
TEST(RuntimePrepack, ActivationsQuantizeIntoTheLayoutTheGemmReads) {
  RuntimeOptions options;
  options.arch = "sm_90a";
  const Runtime runtime(options);
  const std::int64_t m = 5, n = 256, k = 512;
  const std::vector<float> values = random_normal(static_cast<size_t>(m * k), 11, 0.0f, 1.0f);
  const PackedActivations half = runtime.quantize_activations("w4a16-int4-ch", m, n, k, values);
  EXPECT_EQ(half.a.size(), static_cast<size_t>(m * k * 2));
  EXPECT_TRUE(half.a_scales.empty());
  const QuantizedActivations w4a8 = quantize_activations(FormatSpec::parse("w4a8-int4-fp8"), values, m, k);
  const PackedActivations fp8 = runtime.quantize_activations("w4a8-int4-fp8", m, n, k, values);
  ASSERT_EQ(fp8.a.size(), static_cast<size_t>(m * k));
  EXPECT_TRUE(std::equal(fp8.a.begin(), fp8.a.end(), w4a8.codes.begin()));
  ASSERT_EQ(fp8.a_scales.size(), static_cast<size_t>(m) * sizeof(float));
  for (std::int64_t row = 0; row < m; ++row) {
    float scale = 0;
    std::memcpy(&scale, fp8.a_scales.data() + row * sizeof(float), sizeof(float));
    EXPECT_GT(scale, 0.0f) << row;
    EXPECT_FLOAT_EQ(scale, w4a8.scales.at(row, 0) * w4a8.global_scale) << row;  // the row's scale, global folded in
  }
  EXPECT_EQ(input_error([&] { runtime.quantize_activations("w4a8-int4-fp8", m, n, k, std::span(values).first(values.size() - 1)); })
                .rfind("activations:", 0), 0u);
}

TEST(RuntimePrepack, WeightsFromCodesDecodesWhatTheQuantizerStored) {
  for (const char* spec : {"w4a16-int4-g128-zp", "w4a16-int4-ch", "w8a16-int8-ch"}) {
    SCOPED_TRACE(spec);
    const FormatSpec format = FormatSpec::parse(spec);
    const QuantizedWeights quantized = quantize_weights(format, random_normal(128 * 256, 11, 0.0f, 0.02f), 128, 256);
    const QuantizedWeights rebuilt = weights_from_codes(format, 128, 256, quantized.codes, quantized.scales.bits,
                                                        quantized.zero_point_bits, quantized.global_scale);
    EXPECT_EQ(rebuilt.scales.values, quantized.scales.values);
    EXPECT_EQ(rebuilt.zero_points, quantized.zero_points);
    EXPECT_EQ(rebuilt.scales.index(100, 200), quantized.scales.index(100, 200));
    EXPECT_EQ(dequantize(rebuilt), dequantize(quantized));
  }
}

}  // namespace
}  // namespace qtune::production
