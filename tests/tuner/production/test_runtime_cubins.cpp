// Precompiled kernels for libqtune_runtime without a GPU: architecture matching, the manifest (written, read back,
// malformed), which kernels an export plans per architecture (wgmma and tma for sm_90a on any sm_90 spelling; a
// table's token-indexed MoE winners with the kernels their calls launch beside the GEMM), NVRTC cubins written and
// preferred over the JIT by Runtime::plan() and select_moe(), and `qtune export --cubins`.
#include <gtest/gtest.h>

#include "tests/common/temp_dir.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "db/moe_store.hpp"
#include "kernels/error.hpp"
#include "kernels/families/mma_family.hpp"
#include "kernels/families/mma_moe.hpp"
#include "kernels/families/tma_family.hpp"
#include "tests/reports/report_test_support.hpp"
#include "tests/tuner/production/production_test_support.hpp"
#include "tuner/cli/cli.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/jit/sha256.hpp"
#include "tuner/production/cubin_store.hpp"
#include "tuner/production/qtune_runtime.hpp"
#include "tuner/production/selector.hpp"

namespace qtune::production {
namespace {

namespace fs = std::filesystem;
using runtime_api::KernelOrigin;
using runtime_api::Runtime;
using runtime_api::RuntimeOptions;
using test_support::TempDir;
using namespace testing;

// Six stages of 16 x 128 activations and 256 x 128 int4 weights: fits sm_90's shared memory, not sm_86's.
constexpr const char* kDeepPipeline = "bm=16,bn=256,bk=128,wm=1,wn=8,wk=1,stages=6,split=3,raster=0";

std::string file_bytes(const fs::path& file) {
  std::ifstream stream(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
}

int run_qtune(std::vector<std::string> arguments) {
  arguments.insert(arguments.begin(), "qtune");
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  return cli::run_cli(static_cast<int>(argv.size()), argv.data());
}

// One shape, one config: the smallest table that needs a kernel.
reports::SelectionTable one_config_table() {
  reports::SelectionTable table;
  table.gpu = "h200";
  table.formats[kFormat] = {shape_rules(4096, 4096, {{1, std::nullopt, kSmallM}})};
  return table;
}

// ---------------------------------------------------------------------------------------------------- architectures

TEST(CubinArch, TargetsParseAndRunWhereTheirSassRuns) {
  const ArchTarget hopper = ArchTarget::parse("sm_90a");
  EXPECT_EQ(hopper.sm, 90);
  EXPECT_EQ(hopper.suffix, "a");
  EXPECT_EQ(hopper.name(), "sm_90a");
  EXPECT_TRUE(hopper.runs_on(90));
  EXPECT_FALSE(hopper.runs_on(100));
  const ArchTarget ampere = ArchTarget::parse("sm_80");
  EXPECT_TRUE(ampere.runs_on(80));
  EXPECT_TRUE(ampere.runs_on(86));
  EXPECT_TRUE(ampere.runs_on(89));
  EXPECT_FALSE(ampere.runs_on(90));
  EXPECT_FALSE(ArchTarget::parse("sm_86").runs_on(80));
  EXPECT_TRUE(ArchTarget::parse("sm_100f").runs_on(103));
  EXPECT_EQ(ArchTarget::parse("sm_120a").sm, 120);
  for (const char* bad : {"sm_9", "compute_90", "sm_90x", "90", "sm_"}) {
    EXPECT_EQ(input_error([&] { ArchTarget::parse(bad, "--arch"); }).rfind("--arch: '", 0), 0u) << bad;
  }
}

// ---------------------------------------------------------------------------------------------------- manifest

nlohmann::json valid_manifest() {
  return {{"schema", "qtune-cubins/1"},
          {"weight_layout", 2},
          {"kernels",
           {{{"format", kFormat}, {"family", "mma"}, {"config", kSmallM}, {"arch", "sm_90a"}, {"kernel_name", "qtune_mma_gemm"},
             {"file", "sm_90a/abc.cubin"}, {"sha256", std::string(64, 'a')}, {"origin", "table"}}}}};
}

TEST(CubinManifest, ReadsWhatItWrites) {
  const CubinManifest manifest = CubinManifest::from_json(valid_manifest());
  ASSERT_EQ(manifest.kernels.size(), 1u);
  EXPECT_EQ(manifest.kernels[0].config, KernelConfig::parse(kSmallM));
  EXPECT_EQ(manifest.to_json(), valid_manifest());
}

// A manifest exported before the wgmma family had `overlap` lists configs without it; they mean overlap=0.
TEST(CubinManifest, AParameterAddedLaterMayBeAbsent) {
  nlohmann::json json = valid_manifest();
  json["kernels"][0]["family"] = "wgmma";
  json["kernels"][0]["config"] = "bm=64,bn=128,bk=128,stages=4,split=4,raster=0";
  const CubinManifest manifest = CubinManifest::from_json(json);
  ASSERT_EQ(manifest.kernels.size(), 1u);
  EXPECT_FALSE(manifest.kernels[0].config.params.contains("overlap"));
  json["kernels"][0]["config"] = "bm=64,bn=128,bk=128,stages=4,raster=0";
  EXPECT_EQ(input_error([&] { CubinManifest::from_json(json, "m.json"); }),
            "m.json: field 'kernels[0].config': missing the wgmma family's parameter 'split'");
}

// A manifest from before raw 8-bit weights became core matrices (no "weight_layout": layout 1) still serves the formats
// whose layout did not change; its W8A8 kernels would read the runtime's packing wrong, so it is refused, naming them.
TEST(CubinManifest, KernelsOfAnOlderWeightLayoutAreRefusedWhereTheLayoutChanged) {
  auto message = [](const nlohmann::json& json) { return input_error([&] { CubinManifest::from_json(json, "m.json"); }); };
  nlohmann::json json = valid_manifest();
  json.erase("weight_layout");
  EXPECT_EQ(CubinManifest::from_json(json).kernels.size(), 1u);  // W4A16: the same layout
  json["kernels"][0]["format"] = "w8a8-fp8-ch";
  const std::string refused = message(json);
  EXPECT_EQ(refused.rfind("m.json: field 'kernels[0].format': w8a8-fp8-ch was exported for weight layout 1", 0), 0u) << refused;
  EXPECT_NE(refused.find("re-export"), std::string::npos) << refused;
  json["weight_layout"] = 2;
  EXPECT_EQ(CubinManifest::from_json(json).kernels.size(), 1u);
  json["weight_layout"] = 3;
  EXPECT_EQ(message(json).rfind("m.json: field 'weight_layout': layout 3 is newer than this qtune's (2)", 0), 0u);
  json["weight_layout"] = "two";
  EXPECT_EQ(message(json), "m.json: field 'weight_layout': expected a positive integer");
  json["weight_layout"] = 0;
  EXPECT_EQ(message(json), "m.json: field 'weight_layout': expected a positive integer");
}

TEST(CubinManifest, MalformedManifestNamesTheField) {
  auto message = [](const nlohmann::json& json) { return input_error([&] { CubinManifest::from_json(json, "m.json"); }); };
  nlohmann::json json = valid_manifest();
  json["schema"] = "qtune-cubins/9";
  EXPECT_EQ(message(json), "m.json: field 'schema': expected \"qtune-cubins/1\"");
  json = valid_manifest();
  json["kernels"][0]["sha256"] = "xyz";
  EXPECT_EQ(message(json), "m.json: field 'kernels[0].sha256': expected 64 lowercase hex digits");
  json = valid_manifest();
  json["kernels"][0]["file"] = "../elsewhere.cubin";
  EXPECT_EQ(message(json).rfind("m.json: field 'kernels[0].file': ", 0), 0u);
  json = valid_manifest();
  json["kernels"][0].erase("arch");
  EXPECT_EQ(message(json), "m.json: field 'kernels[0].arch': missing");
  json = valid_manifest();
  json["kernels"][0]["config"] = "bm=16,volume=11";
  EXPECT_EQ(message(json), "m.json: field 'kernels[0].config': the mma family has no parameter 'volume'");
  json = valid_manifest();
  json["kernels"][0]["config"] = "bm=16";
  EXPECT_EQ(message(json), "m.json: field 'kernels[0].config': missing the mma family's parameter 'bn'");
  json = valid_manifest();
  json["kernels"][0]["config"] = "bm=sixteen";
  EXPECT_EQ(message(json).rfind("m.json: field 'kernels[0].config': ", 0), 0u);
  json = valid_manifest();
  json["kernels"][0]["family"] = "tcgen05";
  EXPECT_EQ(message(json).rfind("m.json: field 'kernels[0].family': ", 0), 0u);
  json = valid_manifest();
  json["kernels"][0]["family"] = "wgmma";  // a known family, but the config has the mma family's parameters
  EXPECT_EQ(message(json).rfind("m.json: field 'kernels[0].config': ", 0), 0u);
  json = valid_manifest();
  json["kernels"][0]["format"] = "w9a16-nothing";
  EXPECT_EQ(message(json).rfind("m.json: field 'kernels[0].format': ", 0), 0u);
  EXPECT_EQ(message(nlohmann::json::array()), "m.json: field '': expected an object");

  TempDir dir;
  EXPECT_EQ(input_error([&] { CubinManifest::read(dir.path()); }).rfind("cubins: cannot read", 0), 0u);
  dir.write("manifest.json", "{not json");
  const std::string not_json = input_error([&] { CubinManifest::read(dir.path()); });
  EXPECT_NE(not_json.find("is not JSON"), std::string::npos) << not_json;
  EXPECT_EQ(not_json.find('\n'), std::string::npos) << not_json;
}

TEST(CubinManifest, FindPrefersTheExactTargetThenTheNewestCompatibleOne) {
  CubinManifest manifest;
  for (const char* arch : {"sm_80", "sm_86", "sm_90a"}) {
    manifest.kernels.push_back({kFormat, KernelConfig::parse(kSmallM), arch, "k", std::string(arch) + ".cubin", std::string(64, '0'), "table"});
  }
  const KernelConfig config = KernelConfig::parse(kSmallM);
  EXPECT_EQ(manifest.find(kFormat, config, 90, "sm_90a")->arch, "sm_90a");
  EXPECT_EQ(manifest.find(kFormat, config, 89, "sm_89")->arch, "sm_86");
  EXPECT_EQ(manifest.find(kFormat, config, 80, "sm_80")->arch, "sm_80");
  EXPECT_EQ(manifest.find(kFormat, config, 100, "sm_100a"), nullptr);
  EXPECT_EQ(manifest.find(kFormat, KernelConfig::parse(kLargeM), 90, "sm_90a"), nullptr);
  EXPECT_EQ(manifest.find("w4a16-int4-g128", config, 90, "sm_90a"), nullptr);
}

// ---------------------------------------------------------------------------------------------------- planning

TEST(CubinPlan, EveryTableConfigPerArchitectureUnlessItBreaksThatArchitecturesRules) {
  reports::SelectionTable table;
  table.formats[kFormat] = {shape_rules(4096, 4096, {{1, 16, kDeepPipeline}, {17, std::nullopt, kMiddleM}}),
                            shape_rules(8192, 8192, {{1, std::nullopt, kMiddleM}})};
  const Problem problem{FormatSpec::parse(kFormat), 1, 4096, 4096};
  ASSERT_TRUE(mma_family().check(KernelConfig::parse(kDeepPipeline), problem, ArchLimits::for_sm(90)).valid);
  ASSERT_EQ(mma_family().check(KernelConfig::parse(kDeepPipeline), problem, ArchLimits::for_sm(86)).rule, "smem-per-block");

  const CubinPlan plan = plan_cubins(table, {"sm_90a", "sm_86"}, false);
  std::set<std::string> planned;
  for (const CubinRequest& request : plan.requests) {
    EXPECT_EQ(request.origin, "table");
    EXPECT_EQ(request.format, kFormat);
    planned.insert(request.config.to_string() + " " + request.arch);
  }
  EXPECT_EQ(planned, (std::set<std::string>{std::string(kDeepPipeline) + " sm_90a", std::string(kMiddleM) + " sm_90a",
                                            std::string(kMiddleM) + " sm_86"}));
  ASSERT_EQ(plan.skipped.size(), 1u);
  EXPECT_EQ(plan.skipped[0].request.arch, "sm_86");
  EXPECT_EQ(plan.skipped[0].request.config.to_string(), kDeepPipeline);
  EXPECT_EQ(plan.skipped[0].reason.rfind("smem-per-block: ", 0), 0u) << plan.skipped[0].reason;

  EXPECT_EQ(input_error([&] { plan_cubins(table, {"hopper"}, false); }).rfind("--arch:", 0), 0u);
  EXPECT_EQ(input_error([&] { plan_cubins(table, {}, false); }).rfind("--arch:", 0), 0u);
}

TEST(CubinPlan, HeuristicConfigsForEveryTunedBucketAndRangeStart) {
  const reports::SelectionTable table = sample_table();
  const CubinPlan without = plan_cubins(table, {"sm_90a"}, false);
  const CubinPlan with = plan_cubins(table, {"sm_90a"}, true);
  EXPECT_EQ(without.requests.size(), 4u);
  std::set<std::string> expected;
  for (const CubinRequest& request : without.requests) expected.insert(request.config.to_string());
  const FormatSpec format = FormatSpec::parse(kFormat);
  // Range starts and bucket Ms of sample_table().
  for (const auto& [n, m] : std::vector<std::pair<std::int64_t, std::int64_t>>{{4096, 1}, {4096, 16}, {4096, 17}, {4096, 64},
                                                                             {4096, 65}, {4096, 4096}, {8192, 1}, {8192, 4096}}) {
    // Production's heuristic: the mma family below M = 16, the wgmma family from there on Hopper.
    const Problem problem{format, m, n, n};
    expected.insert(heuristic_family(problem, 90).default_config(problem, ArchLimits::for_sm(90)).to_string());
  }
  std::set<std::string> planned;
  for (const CubinRequest& request : with.requests) {
    EXPECT_TRUE(planned.insert(request.config.to_string()).second) << "planned twice: " << request.config.to_string();
  }
  EXPECT_EQ(planned, expected);
  EXPECT_GT(with.requests.size(), without.requests.size());
}

// wgmma and tma kernels compile for sm_90a only: an export for plain sm_90 (alone or beside sm_90a) plans them for
// sm_90a, once, and the mma family's for the target given.
TEST(CubinPlan, WgmmaAndTmaConfigsAreBuiltForSm90aWhicheverSpellingOfSm90IsGiven) {
  const std::string wgmma_config = "bm=64,bn=128,bk=128,stages=4,split=1,raster=0";
  const Problem fp8_problem{FormatSpec::parse("w8a8-fp8-ch"), 4096, 8192, 8192};
  const KernelConfig tma_config = tma_family().default_config(fp8_problem, ArchLimits::for_sm(90));
  reports::SelectionTable table;
  table.formats[kFormat] = {shape_rules(8192, 8192, {{1, 8, kSmallM}, {9, std::nullopt, "wgmma:" + wgmma_config}})};
  table.formats["w8a8-fp8-ch"] = {shape_rules(8192, 8192, {{1, std::nullopt, "tma:" + tma_config.to_string()}})};
  for (const std::vector<std::string>& archs : {std::vector<std::string>{"sm_90"}, std::vector<std::string>{"sm_90", "sm_90a"}}) {
    const CubinPlan plan = plan_cubins(table, archs, false);
    std::set<std::string> planned;
    for (const CubinRequest& request : plan.requests) planned.insert(request.config.family + " " + request.arch);
    std::set<std::string> expected{"wgmma sm_90a", "tma sm_90a"};
    for (const std::string& arch : archs) expected.insert("mma " + arch);
    EXPECT_EQ(planned, expected) << archs.size();
    EXPECT_EQ(plan.requests.size(), expected.size());
    EXPECT_TRUE(plan.skipped.empty());
  }
}

// ---------------------------------------------------------------------------------------------------- MoE kernels

constexpr const char* kMoeFormat = "w4a16-int4-g128";
constexpr const char* kMoeDecodeTile = "bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=2,raster=0";
constexpr const char* kWgmmaMoeTile = "bm=16,bn=64,bk=128,stages=3,split=1,raster=0,overlap=0";
constexpr const char* kTmaMoeTile =
    "bm=16,bn=64,bk=256,stages=3,split=2,raster=0,cluster=1,multicast=0,persistent=0,overlap=0,promote=128,pingpong=0";

reports::MoeRules moe_entry(const char* format, const char* projection, std::int64_t n, std::int64_t k, const std::string& config,
                            const char* layout = "token-indexed") {
  reports::MoeRules rules;
  rules.format = FormatSpec::parse(format).to_string();
  rules.experts = 256;
  rules.top_k = 8;
  rules.n = n;
  rules.k = k;
  rules.projection = projection;
  rules.layout = layout;
  rules.routing = "uniform";
  rules.ranges = shape_rules(n, k, {{1, 16, config}}).ranges;  // one range tuned at T = 16
  rules.ranges.front().m_max = std::nullopt;
  return rules;
}

// DeepSeek-V3's experts: an mma gate-up winner of W4A16 (its GEMM and alignment), a tma down winner of W4A8 (all four
// kernels: GEMM, alignment, gather, reduction), a wgmma down winner of W4A16, and a grouped-layout entry the runtime
// never launches.
reports::SelectionTable moe_export_table() {
  reports::SelectionTable table = one_config_table();
  table.moe = {moe_entry(kMoeFormat, "gate-up", 4096, 7168, kMoeDecodeTile),
               moe_entry("w4a8-int4-fp8", "down", 7168, 2048, std::string("tma:") + kTmaMoeTile),
               moe_entry(kMoeFormat, "down", 7168, 2048, std::string("wgmma:") + kWgmmaMoeTile),
               moe_entry(kMoeFormat, "down", 7168, 2048, kMoeDecodeTile, "grouped-contiguous")};
  std::sort(table.moe.begin(), table.moe.end(), [](const auto& a, const auto& b) { return a.key() < b.key(); });
  return table;
}

std::set<std::string> planned_moe(const CubinPlan& plan) {
  std::set<std::string> planned;
  for (const MoeCubinRequest& request : plan.moe_requests) {
    EXPECT_EQ(request.origin, "table");
    planned.insert(request.kernel.key());
  }
  return planned;
}

TEST(CubinPlanMoe, TokenIndexedWinnersPlanTheirGemmAndTheKernelsBesideIt) {
  const reports::SelectionTable table = moe_export_table();
  const int threads = mma_moe::align_threads(256, ArchLimits::for_sm(90));
  const std::string align = "moe-align|bm=16,threads=" + std::to_string(threads);
  const std::string fp8 = FormatSpec::parse("w4a8-int4-fp8").to_string();
  const std::string int4 = FormatSpec::parse(kMoeFormat).to_string();
  ASSERT_EQ(FormatSpec::parse("w4a8-int4-fp8").output, OutputType::F16);
  ASSERT_EQ(FormatSpec::parse(kMoeFormat).output, OutputType::F16);
  for (const char* arch : {"sm_90", "sm_90a"}) {
    const CubinPlan plan = plan_cubins(table, {arch}, false);
    const std::string a(arch);
    EXPECT_EQ(planned_moe(plan), (std::set<std::string>{
                                     "moe|" + int4 + "|gate-up|mma:" + kMoeDecodeTile + "|" + a,
                                     "moe|" + fp8 + "|down|tma:" + kTmaMoeTile + "|sm_90a",
                                     "moe|" + int4 + "|down|wgmma:" + kWgmmaMoeTile + "|sm_90a",
                                     align + "|" + a,
                                     "moe-gather|down|sm_90a",
                                     "moe-reduce|f16|" + a}))  // both down formats write f16
        << arch;
    EXPECT_TRUE(plan.moe_skipped.empty()) << plan.moe_skipped.front().what << ": " << plan.moe_skipped.front().reason;
    // What a Runtime for this target would launch for each entry is planned: the same kernels, by the same function.
    for (const reports::MoeRules& rules : table.moe) {
      if (rules.layout != "token-indexed") continue;
      const MoeProblem problem = make_moe_problem(FormatSpec::parse(rules.format), 256, 8, rules.n, rules.k, 16, rules.projection);
      for (const MoeKernelSpec& kernel : moe_call_kernels(rules.ranges.front().config, problem, ArchLimits::for_sm(90), arch)) {
        EXPECT_EQ(planned_moe(plan).count(kernel.key()), 1u) << kernel.key();
      }
    }
  }
  // On Ampere the runtime launches neither the wgmma nor the tma config: skipped with the family's reason; the mma
  // gate-up winner's kernels are built.
  const CubinPlan ampere = plan_cubins(table, {"sm_80"}, false);
  EXPECT_EQ(planned_moe(ampere), (std::set<std::string>{"moe|" + int4 + "|gate-up|mma:" + kMoeDecodeTile + "|sm_80",
                                                        "moe-align|bm=16,threads=" +
                                                            std::to_string(mma_moe::align_threads(256, ArchLimits::for_sm(80))) +
                                                            "|sm_80"}));
  ASSERT_EQ(ampere.moe_skipped.size(), 2u);
  for (const MoeCubinSkip& skip : ampere.moe_skipped) {
    EXPECT_EQ(skip.arch, "sm_80");
    EXPECT_EQ(skip.reason.rfind("family: ", 0), 0u) << skip.what << ": " << skip.reason;
    EXPECT_NE(skip.what.find(" down E=256 top_k=8 n=7168 k=2048 "), std::string::npos) << skip.what;
  }
}

nlohmann::json valid_moe_manifest() {
  nlohmann::json json = valid_manifest();
  const std::string hash(64, 'b');
  json["moe_kernels"] = {
      {{"kernel", "gemm"}, {"format", kMoeFormat}, {"projection", "down"}, {"family", "tma"}, {"config", kTmaMoeTile},
       {"arch", "sm_90a"}, {"kernel_name", "qtune_tma_moe_gemm"}, {"file", "sm_90a/g.cubin"}, {"sha256", hash}, {"origin", "table"}},
      {{"kernel", "align"}, {"bm", 16}, {"threads", 1024}, {"arch", "sm_90a"}, {"kernel_name", "qtune_moe_align"},
       {"file", "sm_90a/a.cubin"}, {"sha256", hash}, {"origin", "table"}},
      {{"kernel", "gather"}, {"projection", "down"}, {"arch", "sm_90a"}, {"kernel_name", "qtune_moe_gather_rows"},
       {"file", "sm_90a/t.cubin"}, {"sha256", hash}, {"origin", "table"}},
      {{"kernel", "reduce"}, {"output", "bf16"}, {"arch", "sm_90"}, {"kernel_name", "qtune_moe_reduce_top_k"},
       {"file", "sm_90/r.cubin"}, {"sha256", hash}, {"origin", "table"}}};
  return json;
}

TEST(CubinManifestMoe, ReadsWhatItWritesAndADenseOnlyManifestHasNoMoeKey) {
  const CubinManifest manifest = CubinManifest::from_json(valid_moe_manifest());
  ASSERT_EQ(manifest.moe_kernels.size(), 4u);
  EXPECT_EQ(manifest.moe_kernels[0].kernel.instance(), "moe|" + FormatSpec::parse(kMoeFormat).to_string() + "|down|tma:" + kTmaMoeTile);
  EXPECT_EQ(manifest.moe_kernels[1].kernel.instance(), "moe-align|bm=16,threads=1024");
  EXPECT_EQ(manifest.moe_kernels[2].kernel.instance(), "moe-gather|down");
  EXPECT_EQ(manifest.moe_kernels[3].kernel.key(), "moe-reduce|bf16|sm_90");
  EXPECT_EQ(manifest.to_json(), valid_moe_manifest());
  EXPECT_FALSE(CubinManifest::from_json(valid_manifest()).to_json().contains("moe_kernels"));
  // The reduction built for sm_90 runs on sm_90 devices; find_moe prefers the exact target, else a compatible one.
  MoeKernelSpec reduce = manifest.moe_kernels[3].kernel;
  reduce.arch = "sm_90a";
  ASSERT_NE(manifest.find_moe(reduce, 90), nullptr);
  EXPECT_EQ(manifest.find_moe(reduce, 90)->kernel.arch, "sm_90");
  EXPECT_EQ(manifest.find_moe(reduce, 80), nullptr);
  MoeKernelSpec other_align = manifest.moe_kernels[1].kernel;
  other_align.threads = 512;
  EXPECT_EQ(manifest.find_moe(other_align, 90), nullptr);
  // A dense lookup never finds a MoE GEMM of the same config.
  EXPECT_EQ(manifest.find(kMoeFormat, KernelConfig::parse(kTmaMoeTile, "tma"), 90, "sm_90a"), nullptr);
}

TEST(CubinManifestMoe, MalformedMoeEntryNamesTheField) {
  auto message = [](const nlohmann::json& json) { return input_error([&] { CubinManifest::from_json(json, "m.json"); }); };
  nlohmann::json json = valid_moe_manifest();
  json["moe_kernels"] = "none";
  EXPECT_EQ(message(json), "m.json: field 'moe_kernels': expected an array");
  json = valid_moe_manifest();
  json["moe_kernels"][1]["bm"] = 0;
  EXPECT_EQ(message(json), "m.json: field 'moe_kernels[1].bm': expected an integer from 1 to 65536");
  json = valid_moe_manifest();
  json["moe_kernels"][1].erase("threads");
  EXPECT_EQ(message(json), "m.json: field 'moe_kernels[1].threads': missing");
  json = valid_moe_manifest();
  json["moe_kernels"][0]["kernel"] = "scatter";
  EXPECT_EQ(message(json).rfind("m.json: field 'moe_kernels[0].kernel': ", 0), 0u) << message(json);
  json = valid_moe_manifest();
  json["moe_kernels"][2]["projection"] = "sideways";
  EXPECT_EQ(message(json).rfind("m.json: field 'moe_kernels[2].projection': ", 0), 0u) << message(json);
  json = valid_moe_manifest();
  json["moe_kernels"][3]["output"] = "f32";
  EXPECT_EQ(message(json).rfind("m.json: field 'moe_kernels[3].output': ", 0), 0u) << message(json);
  json = valid_moe_manifest();
  json["moe_kernels"][0]["config"] = "bm=16";
  EXPECT_EQ(message(json), "m.json: field 'moe_kernels[0].config': missing the tma family's parameter 'bn'");
  json = valid_moe_manifest();
  std::string block_scaled;  // a whole config of a family without a MoE GEMM
  for (const ParameterDomain& domain : find_family("bsmma").parameter_space()) {
    block_scaled += (block_scaled.empty() ? "" : ",") + domain.name + "=" + std::to_string(domain.values.front());
  }
  json["moe_kernels"][0]["family"] = "bsmma";
  json["moe_kernels"][0]["config"] = block_scaled;
  EXPECT_EQ(message(json), "m.json: field 'moe_kernels[0].family': the bsmma family has no MoE GEMM (mma, wgmma and tma have)");
  json = valid_moe_manifest();
  json["moe_kernels"][0]["file"] = "/etc/passwd";
  EXPECT_EQ(message(json), "m.json: field 'moe_kernels[0].file': expected a relative path inside the cubin directory");
  json = valid_moe_manifest();
  json["moe_kernels"][3]["sha256"] = "xyz";
  EXPECT_EQ(message(json), "m.json: field 'moe_kernels[3].sha256': expected 64 lowercase hex digits");
}

// The MoE winners' kernels, compiled by NVRTC into the directory and listed in its manifest; a Runtime reading it
// takes each call's kernels from there (select_moe says "precompiled"), for sm_90a and for plain sm_90, and keeps the
// JIT for a call whose kernels were not exported.
class MoeCubinExportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    directory_ = new TempDir();
    table_path_ = write_table(*directory_ / "table.json", moe_export_table());
    const CubinExport written = write_cubins(plan_cubins(moe_export_table(), {"sm_90a"}, false), *directory_ / "cubins", jit::Compiler());
    failures_ = written.failed.size() + written.moe_failed.size();
    if (!written.moe_failed.empty()) first_failure_ = written.moe_failed.front().what + ": " + written.moe_failed.front().reason.substr(0, 2000);
  }
  static void TearDownTestSuite() {
    delete directory_;
    directory_ = nullptr;
  }
  void SetUp() override { ASSERT_EQ(failures_, 0u) << first_failure_; }
  static fs::path cubins() { return *directory_ / "cubins"; }
  static Runtime runtime_for(const char* arch) {
    return Runtime(RuntimeOptions{.table = table_path_, .cubin_directory = cubins(), .arch = arch});
  }
  static runtime_api::MoeShape deepseek(const char* projection) {
    const bool gate_up = std::string(projection) == "gate-up";
    return {.experts = 256, .top_k = 8, .n = gate_up ? 4096 : 7168, .k = gate_up ? 7168 : 2048, .tokens = 16,
            .projection = projection};
  }
  static inline TempDir* directory_ = nullptr;
  static inline fs::path table_path_;
  static inline std::size_t failures_ = 0;
  static inline std::string first_failure_;
};

TEST_F(MoeCubinExportTest, ManifestListsEveryMoeKernelWithItsFile) {
  const CubinManifest manifest = CubinManifest::read(cubins());
  EXPECT_EQ(manifest.kernels.size(), 1u);  // the dense config
  std::set<std::string> listed;
  for (std::size_t i = 0; i < manifest.moe_kernels.size(); ++i) {
    const MoeCubinEntry& entry = manifest.moe_kernels[i];
    listed.insert(entry.kernel.key());
    EXPECT_EQ(entry.origin, "table");
    EXPECT_EQ(entry.kernel_name, entry.kernel.kernel_name());
    EXPECT_EQ(entry.file, entry.kernel.arch + "/" + entry.sha256 + ".cubin");
    const std::string bytes = file_bytes(cubins() / entry.file);
    ASSERT_GT(bytes.size(), 4u) << entry.file;
    EXPECT_EQ(bytes.substr(0, 4), "\x7f" "ELF") << entry.file;
    EXPECT_EQ(read_cubin(cubins(), entry, i).size(), bytes.size());
  }
  EXPECT_EQ(listed, planned_moe(plan_cubins(moe_export_table(), {"sm_90a"}, false)));
  EXPECT_EQ(listed.size(), 6u);  // 3 GEMMs, 1 alignment (bm = 16, 256 experts), 1 gather, 1 reduction (both output f16)
  // A re-export keeps them all (none is stale) and writes the same manifest.
  const CubinExport again = write_cubins(plan_cubins(moe_export_table(), {"sm_90a"}, false), cubins(), jit::Compiler());
  EXPECT_TRUE(again.removed.empty());
  EXPECT_EQ(file_bytes(cubins() / "manifest.json"), again.manifest.to_json().dump(2) + "\n");
}

TEST_F(MoeCubinExportTest, RuntimeLoadsTheMoeKernelsFromTheCubinDirectory) {
  for (const char* arch : {"sm_90a", "sm_90"}) {
    const Runtime runtime = runtime_for(arch);
    EXPECT_EQ(runtime.precompiled_kernel_count(), 7u) << arch;  // 1 dense and 6 MoE kernels, all for sm_90a
    for (const auto& [format, projection, family] : std::vector<std::tuple<const char*, const char*, const char*>>{
             {kMoeFormat, "gate-up", "mma"}, {"w4a8-int4-fp8", "down", "tma"}, {kMoeFormat, "down", "wgmma"}}) {
      const runtime_api::MoeChoice choice = runtime.select_moe(format, deepseek(projection));
      const std::string label = std::string(arch) + " " + format + " " + projection;
      EXPECT_EQ(choice.choice.source, runtime_api::ConfigSource::Tuned) << label << ": " << choice.choice.detail;
      EXPECT_EQ(choice.choice.family, family) << label;
      EXPECT_EQ(choice.origin, KernelOrigin::Precompiled) << label;
      EXPECT_EQ(choice.arch, "sm_90a") << label;
      ASSERT_FALSE(choice.cubin.empty()) << label;
      EXPECT_TRUE(fs::exists(choice.cubin)) << label;
      EXPECT_EQ(choice.cubin.parent_path(), cubins() / "sm_90a") << label;
    }
  }
  // A manifest without the alignment kernel: the GEMM still comes from its cubin, the call as a whole is not precompiled.
  const fs::path partial_directory = *directory_ / "partial";
  fs::create_directories(partial_directory);
  fs::copy(cubins(), partial_directory, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  nlohmann::json json = nlohmann::json::parse(file_bytes(partial_directory / "manifest.json"));
  nlohmann::json kept = nlohmann::json::array();
  for (const nlohmann::json& entry : json["moe_kernels"]) {
    if (entry["kernel"] != "align") kept.push_back(entry);
  }
  ASSERT_EQ(kept.size() + 1, json["moe_kernels"].size());
  json["moe_kernels"] = kept;
  std::ofstream(partial_directory / "manifest.json", std::ios::trunc) << json.dump(2) << "\n";
  const Runtime partial(RuntimeOptions{.table = table_path_, .cubin_directory = partial_directory, .arch = "sm_90a"});
  const runtime_api::MoeChoice without_align = partial.select_moe(kMoeFormat, deepseek("gate-up"));
  EXPECT_EQ(without_align.origin, KernelOrigin::Jit);
  EXPECT_EQ(without_align.cubin.parent_path(), partial_directory / "sm_90a") << "its GEMM is the exported one";
  // A format without MoE entries: the heuristic's kernels, by JIT.
  const Runtime hopper = runtime_for("sm_90a");
  const runtime_api::MoeChoice heuristic = hopper.select_moe("w8a8-fp8-ch", deepseek("gate-up"));
  EXPECT_EQ(heuristic.origin, KernelOrigin::Jit);
  EXPECT_TRUE(heuristic.cubin.empty());
  // Without the cubin directory the same calls are JIT.
  const Runtime without(RuntimeOptions{.table = table_path_, .arch = "sm_90a"});
  EXPECT_EQ(without.select_moe(kMoeFormat, deepseek("gate-up")).origin, KernelOrigin::Jit);
}

// ---------------------------------------------------------------------------------------------------- cubins

class CubinExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    table_path_ = write_table(dir_ / "table.json", one_config_table());
    cubins_ = dir_ / "cubins";
    const CubinExport written = write_cubins(plan_cubins(one_config_table(), {"sm_90a"}, false), cubins_, jit::Compiler());
    ASSERT_TRUE(written.failed.empty()) << written.failed.front().reason;
    ASSERT_EQ(written.manifest.kernels.size(), 1u);
    entry_ = written.manifest.kernels.front();
  }
  Runtime runtime_for(const std::string& arch) {
    RuntimeOptions options;
    options.table = table_path_;
    options.cubin_directory = cubins_;
    options.arch = arch;
    return Runtime(options);
  }
  TempDir dir_;
  fs::path table_path_;
  fs::path cubins_;
  CubinEntry entry_;
};

TEST_F(CubinExportTest, WritesACubinPerKernelAndAManifestThatMatchesIt) {
  const CubinManifest manifest = CubinManifest::read(cubins_);
  ASSERT_EQ(manifest.kernels.size(), 1u);
  const CubinEntry& entry = manifest.kernels.front();
  EXPECT_EQ(entry.format, kFormat);
  EXPECT_EQ(entry.config.to_string(), kSmallM);
  EXPECT_EQ(entry.arch, "sm_90a");
  EXPECT_EQ(entry.kernel_name, mma_family().kernel_name(entry.config, FormatSpec::parse(kFormat)));
  EXPECT_EQ(entry.origin, "table");
  const std::string cubin = file_bytes(cubins_ / entry.file);
  ASSERT_GT(cubin.size(), 4u);
  EXPECT_EQ(cubin.substr(0, 4), "\x7f" "ELF");
  EXPECT_EQ(jit::sha256_hex(cubin), entry.sha256);
  EXPECT_EQ(entry.file, "sm_90a/" + entry.sha256 + ".cubin");
  EXPECT_EQ(read_cubin(cubins_, entry, 0).size(), cubin.size());

  // The same plan again gives the same bytes.
  const fs::path again = dir_ / "again";
  write_cubins(plan_cubins(one_config_table(), {"sm_90a"}, false), again, jit::Compiler());
  EXPECT_EQ(file_bytes(again / "manifest.json"), file_bytes(cubins_ / "manifest.json"));
  EXPECT_EQ(file_bytes(again / entry.file), cubin);
}

TEST_F(CubinExportTest, AReExportRemovesStaleCubinsAndNothingElse) {
  // An earlier export's cubin that the new plan no longer needs, and files that are not export cubins.
  const fs::path stale = cubins_ / "sm_80" / (std::string(64, 'a') + ".cubin");
  const fs::path notes = cubins_ / "sm_90a" / "README.txt";
  const fs::path short_name = cubins_ / "sm_90a" / "abc.cubin";
  for (const fs::path& file : {stale, notes, short_name}) {
    fs::create_directories(file.parent_path());
    std::ofstream(file) << "x";
  }
  const CubinExport again = write_cubins(plan_cubins(one_config_table(), {"sm_90a"}, false), cubins_, jit::Compiler());
  ASSERT_EQ(again.removed.size(), 1u);
  EXPECT_EQ(again.removed.front(), stale.lexically_normal());
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(notes));
  EXPECT_TRUE(fs::exists(short_name));
  EXPECT_TRUE(fs::exists(cubins_ / entry_.file));  // still listed: kept
}

TEST_F(CubinExportTest, RuntimePrefersTheCubinOverTheJit) {
  const Runtime hopper = runtime_for("sm_90a");
  EXPECT_EQ(hopper.precompiled_kernel_count(), 1u);
  const runtime_api::KernelPlan tuned = hopper.plan(kFormat, 1, 4096, 4096);
  EXPECT_EQ(tuned.origin, KernelOrigin::Precompiled);
  EXPECT_EQ(tuned.cubin, cubins_ / entry_.file);
  EXPECT_EQ(tuned.arch, "sm_90a");
  EXPECT_EQ(tuned.choice.config, kSmallM);
  // A shape the table does not have falls back to its config: the same cubin.
  EXPECT_EQ(hopper.plan(kFormat, 1, 8192, 8192).origin, KernelOrigin::Precompiled);
  // The heuristic's config of another format was not exported: JIT.
  const runtime_api::KernelPlan other = hopper.plan("w4a16-int4-g128", 1, 4096, 4096);
  EXPECT_EQ(other.choice.source, runtime_api::ConfigSource::Heuristic);
  EXPECT_EQ(other.origin, KernelOrigin::Jit);
  EXPECT_TRUE(other.cubin.empty());

  // Plain sm_90 takes the sm_90a cubin (it runs there); sm_80 cannot.
  const runtime_api::KernelPlan plain = runtime_for("sm_90").plan(kFormat, 1, 4096, 4096);
  EXPECT_EQ(plain.origin, KernelOrigin::Precompiled);
  EXPECT_EQ(plain.arch, "sm_90a");
  const Runtime ampere = runtime_for("sm_80");
  EXPECT_EQ(ampere.precompiled_kernel_count(), 0u);
  const runtime_api::KernelPlan jit = ampere.plan(kFormat, 1, 4096, 4096);
  EXPECT_EQ(jit.origin, KernelOrigin::Jit);
  EXPECT_EQ(jit.arch, "sm_80");
}

TEST_F(CubinExportTest, DamagedCubinIsRefusedNamingTheManifestField) {
  std::string cubin = file_bytes(cubins_ / entry_.file);
  cubin[cubin.size() / 2] = static_cast<char>(cubin[cubin.size() / 2] ^ 0x40);
  std::ofstream(cubins_ / entry_.file, std::ios::binary | std::ios::trunc) << cubin;
  const std::string message = input_error([&] { read_cubin(cubins_, entry_, 0); });
  EXPECT_NE(message.find("field 'kernels[0].sha256'"), std::string::npos) << message;
  fs::remove(cubins_ / entry_.file);
  EXPECT_NE(input_error([&] { read_cubin(cubins_, entry_, 0); }).find("field 'kernels[0].file'"), std::string::npos);
}

TEST_F(CubinExportTest, MissingManifestIsAnInputError) {
  RuntimeOptions options;
  options.arch = "sm_90a";
  options.cubin_directory = dir_ / "nowhere";
  EXPECT_EQ(input_error([&] { Runtime{options}; }).rfind("cubins: cannot read", 0), 0u);
}

// ---------------------------------------------------------------------------------------------------- qtune export

TEST(ExportCubinsCommand, PrecompilesEveryConfigOfTheExportedTable) {
  TempDir dir;
  reports::testing::FixtureSpec spec;
  spec.formats = {kFormat};
  spec.shapes = {{4096, 4096}};
  spec.m_buckets = {1, 4096};
  spec.baselines = false;
  const std::string db = (dir / "qtune.db").string();
  reports::testing::write_fixture_db(db, spec);
  const fs::path table = dir / "table.json";
  const fs::path cubins = dir / "cubins";
  ASSERT_EQ(run_qtune({"export", "--db", db, "-o", table.string(), "--cubins", cubins.string(), "--arch", "sm_90a"}), 0);

  const reports::SelectionTable exported =
      reports::SelectionTable::from_json(nlohmann::json::parse(file_bytes(table)), table.string());
  std::set<std::string> table_configs;
  for (const reports::MRange& range : exported.formats.at(kFormat).front().ranges) table_configs.insert(range.config.to_string());
  std::set<std::string> manifest_configs;
  for (const CubinEntry& entry : CubinManifest::read(cubins).kernels) {
    EXPECT_EQ(entry.arch, "sm_90a");
    manifest_configs.insert(entry.config.to_string());
  }
  EXPECT_EQ(manifest_configs, table_configs);

  RuntimeOptions options;
  options.table = table;
  options.cubin_directory = cubins;
  options.arch = "sm_90a";
  const Runtime runtime(options);
  for (const std::int64_t m : {1, 4096}) {
    const runtime_api::KernelPlan plan = runtime.plan(kFormat, m, 4096, 4096);
    EXPECT_EQ(plan.choice.source, runtime_api::ConfigSource::Tuned) << "M=" << m;
    EXPECT_EQ(plan.origin, KernelOrigin::Precompiled) << "M=" << m;
  }
}

// A database with MoE winners (a tune-moe run: W4A16 mma gate-up, W4A8 tma down, as the tune stores them under their
// providers' names): `qtune export --cubins` writes their kernels beside the dense ones, and a Runtime reading the
// exported table and directory runs both MoE calls from cubins.
TEST(ExportCubinsCommand, PrecompilesTheMoeWinnersKernels) {
  TempDir dir;
  reports::testing::FixtureSpec spec;
  spec.formats = {kFormat};
  spec.shapes = {{4096, 4096}};
  spec.m_buckets = {1};
  spec.baselines = false;
  const std::string db = (dir / "qtune.db").string();
  reports::testing::write_fixture_db(db, spec);
  {
    db::Store store = db::Store::open(db);
    db::RunInfo info = reports::testing::fixture_run(spec);
    info.uuid = "00000000-0000-4000-8000-000000000002";
    info.kind = "tune-moe";
    const db::RunId run = store.insert_run(info);
    store.finish_run(run, db::RunStatus::Completed);
    auto win = [&](const char* format, const char* projection, std::int64_t n, std::int64_t k, const char* provider,
                   const char* config_text, const char* family) {
      nlohmann::json params = nlohmann::json::object();
      for (const auto& [name, value] : KernelConfig::parse(config_text, family).params) params[name] = value;
      const db::ConfigId config = store.upsert_config({db::ConfigKind::Kernel, provider, params.dump(), provider + params.dump()});
      for (std::int64_t tokens : {1, 16}) {
        const db::MoeProblemId problem = db::upsert_moe_problem(
            store, {.format = format, .experts = 256, .top_k = 8, .tokens = tokens, .n = n, .k = k, .projection = projection,
                    .layout = "token-indexed", .routing = "uniform", .seed = 1});
        db::insert_moe_result(store, {.run = run, .problem = problem, .config = config, .outcome = "measured", .verified = true,
                                      .median_us = 10.0 * static_cast<double>(tokens)});
        db::set_moe_winner(store, {run, problem, config, 10.0 * static_cast<double>(tokens), "fastest"});
      }
    };
    win(kMoeFormat, "gate-up", 4096, 7168, "mma-moe", kMoeDecodeTile, "mma");
    win("w4a8-int4-fp8", "down", 7168, 2048, "tma-moe", kTmaMoeTile, "tma");
  }
  const fs::path table = dir / "table.json";
  const fs::path cubins = dir / "cubins";
  ASSERT_EQ(run_qtune({"export", "--db", db, "-o", table.string(), "--cubins", cubins.string(), "--arch", "sm_90a"}), 0);

  const CubinManifest manifest = CubinManifest::read(cubins);
  EXPECT_EQ(manifest.kernels.size(), 1u);
  std::set<std::string> kinds;
  for (const MoeCubinEntry& entry : manifest.moe_kernels) {
    kinds.insert(std::string(to_string(entry.kernel.kind)) + (entry.kernel.kind == MoeKernelKind::Gemm ? " " + entry.kernel.config.family : ""));
    EXPECT_TRUE(fs::exists(cubins / entry.file)) << entry.file;
    EXPECT_EQ(entry.kernel.arch, "sm_90a");
  }
  EXPECT_EQ(kinds, (std::set<std::string>{"gemm mma", "gemm tma", "align", "gather", "reduce"}));
  EXPECT_EQ(manifest.moe_kernels.size(), 5u);  // both winners have bm = 16 and 256 experts: one alignment kernel

  const Runtime runtime(RuntimeOptions{.table = table, .cubin_directory = cubins, .arch = "sm_90a"});
  const runtime_api::MoeChoice gate_up = runtime.select_moe(
      kMoeFormat, {.experts = 256, .top_k = 8, .n = 4096, .k = 7168, .tokens = 16, .projection = "gate-up"});
  EXPECT_EQ(gate_up.choice.source, runtime_api::ConfigSource::Tuned) << gate_up.choice.detail;
  EXPECT_EQ(gate_up.origin, KernelOrigin::Precompiled);
  const runtime_api::MoeChoice down = runtime.select_moe(
      "w4a8-int4-fp8", {.experts = 256, .top_k = 8, .n = 7168, .k = 2048, .tokens = 16, .projection = "down"});
  EXPECT_EQ(down.choice.source, runtime_api::ConfigSource::Tuned) << down.choice.detail;
  EXPECT_EQ(down.choice.family, "tma");
  EXPECT_EQ(down.origin, KernelOrigin::Precompiled);
}

TEST(ExportCubinsCommand, RefusesIncompleteOptions) {
  TempDir dir;
  reports::testing::FixtureSpec spec;
  spec.formats = {kFormat};
  spec.shapes = {{4096, 4096}};
  spec.m_buckets = {1};
  spec.baselines = false;
  const std::string db = (dir / "qtune.db").string();
  reports::testing::write_fixture_db(db, spec);
  const std::string cubins = (dir / "cubins").string();
  EXPECT_EQ(run_qtune({"export", "--db", db, "--cubins", cubins}), 2);
  EXPECT_EQ(run_qtune({"export", "--db", db, "-o", (dir / "t.json").string(), "--arch", "sm_90a"}), 2);
  EXPECT_EQ(run_qtune({"export", "--db", db, "--cubins", cubins, "--arch", "sm_90a,hopper"}), 2);
  EXPECT_EQ(run_qtune({"export", "--db", db}), 2);
  EXPECT_FALSE(fs::exists(dir / "cubins" / "manifest.json"));
}

}  // namespace
}  // namespace qtune::production
