// Precompiled kernels for libqtune_runtime without a GPU: architecture matching, the manifest (written, read back,
// malformed), which kernels an export plans per architecture, NVRTC cubins written and preferred over the JIT by
// Runtime::plan(), and `qtune export --cubins`.
#include <gtest/gtest.h>

#include "tests/common/temp_dir.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "kernels/families/mma_family.hpp"
#include "tests/reports/report_test_support.hpp"
#include "tests/tuner/production/production_test_support.hpp"
#include "tuner/cli/cli.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/jit/sha256.hpp"
#include "tuner/production/cubin_store.hpp"
#include "tuner/production/qtune_runtime.hpp"

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
