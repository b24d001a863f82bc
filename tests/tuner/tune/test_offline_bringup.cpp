// Bring-up of a GPU qtune has no access to, on a machine with no GPU (issue 19): `qtune tune --dry-run --gpu PROFILE
// --model M` enumerates, prunes and compiles the model's whole plan for the profile's architecture with NVRTC, and
// `qtune export --cubins DIR --arch ...` writes the kernels a tuned table needs for other architectures, so the new
// machine starts from a warm cache. The spaces are narrowed to one configuration so that CI stays quick.
#include <gtest/gtest.h>

#include "tests/common/temp_dir.hpp"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "db/store.hpp"
#include "kernels/families/mma_family.hpp"
#include "kernels/family.hpp"
#include "search/config_files.hpp"
#include "search/model_shapes.hpp"
#include "tests/reports/report_test_support.hpp"
#include "tuner/cli/cli.hpp"
#include "tuner/production/cubin_store.hpp"
#include "reports/selection_table.hpp"

namespace qtune::tune {
namespace {

namespace fs = std::filesystem;
using test_support::TempDir;

fs::path test_cache() { return fs::path(QTUNE_BINARY_DIR) / "test-cache"; }

int run_qtune(std::vector<std::string> arguments) {
  arguments.insert(arguments.begin(), "qtune");
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  return cli::run_cli(static_cast<int>(argv.size()), argv.data());
}

// One configuration that fits every architecture from sm_75 (64 KiB of shared memory) up: 2 stages of 16 x 128
// activations and 128 x 128 int4 weights.
const std::vector<std::string> kOneConfig = {"--param", "bm=16",    "--param", "bn=128",  "--param", "bk=128",
                                             "--param", "wm=1",     "--param", "wn=4",    "--param", "wk=1",
                                             "--param", "stages=2", "--param", "split=1", "--param", "raster=0"};

// The command, for the RTX 5090 (sm_120a), a DGX Spark (sm_121a) and a B300 (sm_103a): every GEMM of the
// model is a problem, the kernels are compiled for the profile's architecture, and nothing is measured.
TEST(OfflineBringUp, DryRunCompilesAModelsPlanForAProfileWithoutAGpu) {
  ASSERT_EQ(setenv("QTUNE_CACHE_DIR", test_cache().c_str(), 1), 0);
  const search::ModelShapes model = search::load_model_shapes(search::config_dir() / "models" / "llama-3-70b.json");
  const std::vector<search::GemmShape> shapes = search::distinct_shapes(model, 1);
  const std::map<std::string, std::string> arch_of = {{"rtx5090", "sm_120a"}, {"gb10", "sm_121a"}, {"b300", "sm_103a"}};
  for (const auto& [gpu, arch] : arch_of) {
    SCOPED_TRACE(gpu);
    TempDir dir;
    const fs::path db = dir / "bringup.db";
    std::vector<std::string> arguments = {"tune",   "--dry-run", "--gpu",  gpu,    "--model", "llama-3-70b", "--format",
                                          "w4a16-int4-ch", "--m", "1,16", "--family", "mma", "--jobs", "2", "--db",
                                          db.string()};
    arguments.insert(arguments.end(), kOneConfig.begin(), kOneConfig.end());
    ASSERT_EQ(run_qtune(arguments), 0);

    db::Store store = db::Store::open(db);
    const auto runs = store.list_runs();
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].gpu_profile, gpu);
    EXPECT_EQ(runs[0].status, db::RunStatus::Completed);
    EXPECT_EQ(store.list_problems().size(), 2 * shapes.size());  // every GEMM of the model at both M
    const auto compiles = store.list_compiles();
    ASSERT_FALSE(compiles.empty());  // the configuration (and the heuristic's, which the report compares with)
    for (const auto& compile : compiles) {
      EXPECT_EQ(compile.status, db::CompileStatus::Ok) << compile.message;
      EXPECT_EQ(compile.arch, arch);
    }
    EXPECT_TRUE(store.list_measurements().empty());
    EXPECT_TRUE(store.list_winners().empty());
  }
}

// A table tuned elsewhere (the H200 fixture) exported for two architectures the build machine lacks, with the
// heuristic's kernels (--cubins-heuristic): per architecture, the table's configurations that the family's rules admit
// there and the heuristic's configuration for each tuned M are written, each a cubin for that architecture listed in
// the manifest, and nothing the rules refuse. The H200's tiles exceed sm_75's 64 KiB of shared memory, so there the
// heuristic's kernels are what the new machine starts from.
TEST(OfflineBringUp, ExportWritesTheTablesKernelsForOtherArchitectures) {
  ASSERT_EQ(setenv("QTUNE_CACHE_DIR", test_cache().c_str(), 1), 0);
  TempDir dir;
  reports::testing::FixtureSpec spec;
  spec.formats = {"w4a16-int4-ch"};
  spec.shapes = {{4096, 4096}};
  spec.m_buckets = {1, 4096};
  spec.baselines = false;
  const std::string db = (dir / "qtune.db").string();
  reports::testing::write_fixture_db(db, spec);
  const fs::path table_file = dir / "table.json";
  const fs::path cubins = dir / "cubins";
  ASSERT_EQ(run_qtune({"export", "--db", db, "-o", table_file.string(), "--cubins", cubins.string(), "--arch",
                       "sm_120a,sm_75", "--cubins-heuristic", "--jobs", "2"}),
            0);

  std::ifstream stream(table_file);
  const std::string text{std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
  const reports::SelectionTable table = reports::SelectionTable::from_json(nlohmann::json::parse(text), table_file.string());
  const FormatSpec format = FormatSpec::parse("w4a16-int4-ch");
  std::map<std::string, std::set<std::string>> written;
  for (const production::CubinEntry& entry : production::CubinManifest::read(cubins).kernels) {
    written[entry.arch].insert(entry.config.to_string());
    EXPECT_TRUE(fs::exists(cubins / entry.file)) << entry.file;
  }
  for (const auto& [arch, sm] : std::map<std::string, int>{{"sm_120a", 120}, {"sm_75", 75}}) {
    SCOPED_TRACE(arch);
    const ArchLimits limits = ArchLimits::for_sm(sm);
    std::set<std::string> admitted;  // table configs the rules admit at their tuned M, and the heuristic's there
    for (const reports::ShapeRules& shape : table.formats.at(format.to_string())) {
      for (const reports::MRange& range : shape.ranges) {
        const KernelFamily& family = find_family(range.config.family);
        for (const reports::TunedBucket& bucket : range.buckets) {
          const Problem problem{format, bucket.m, shape.n, shape.k, false};
          if (family.supports(format, sm).supported && family.check(range.config, problem, limits).valid) {
            admitted.insert(range.config.to_string());
          }
          admitted.insert(heuristic_family(problem, sm).default_config(problem, limits).to_string());
        }
      }
    }
    EXPECT_FALSE(written[arch].empty());
    for (const std::string& config : admitted) EXPECT_TRUE(written[arch].count(config) == 1) << config;
    for (const std::string& config : written[arch]) {
      const Problem any_m{format, 1, 4096, 4096, false};
      const KernelConfig parsed = KernelConfig::parse(config, "mma");
      EXPECT_TRUE(mma_family().check(parsed, any_m, limits).valid || mma_family().check(parsed, Problem{format, 4096, 4096, 4096, false}, limits).valid) << config;
    }
  }
}

}  // namespace
}  // namespace qtune::tune
