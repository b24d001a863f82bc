// Everything before measuring works without a GPU: enumeration, static pruning, NVRTC compilation of the distinct
// instantiations and post-compile pruning, all stored; and `qtune tune --dry-run` on the command line.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "db/store.hpp"
#include "kernels/error.hpp"
#include "tests/tuner/tune/tune_test_support.hpp"
#include "tuner/cli/cli.hpp"
#include "tuner/tune/devices.hpp"

namespace qtune::tune {
namespace {

using namespace qtune::tune::testing;

// The test cache of the build tree, so a second run of the suite compiles nothing.
fs::path test_cache() { return fs::path(QTUNE_BINARY_DIR) / "test-cache"; }

// w4a16-int4-ch at N = K = 4096 for M = 1 and 16: the heuristic's configuration and the same without split-K.
TuneOptions tiny_options() {
  TuneOptions options;
  options.problems = build_problem_set({FormatSpec::parse("w4a16-int4-ch")}, {{4096, 4096}}, {1, 16});
  const KernelConfig heuristic = find_family("mma").default_config(options.problems[0], h200_target().limits);
  for (const auto& [name, value] : heuristic.params) options.parameter_values[name] = {value};
  options.parameter_values["split"] = {1, heuristic.get("split") == 1 ? 2 : heuristic.get("split")};
  options.parameter_values["raster"] = {0, 1};  // raster 1 needs several M tiles: pruned before compiling

  options.dry_run = true;
  return options;
}

int run_qtune(std::vector<std::string> arguments) {
  arguments.insert(arguments.begin(), "qtune");
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  return cli::run_cli(static_cast<int>(argv.size()), argv.data());
}

TEST(TuneDryRun, EnumeratesCompilesAndStoresWithoutAGpu) {
  TempDir dir;
  const TuneOptions options = tiny_options();
  jit::CompilerSettings settings;
  settings.cache_directory = test_cache();
  settings.threads = 2;
  NvrtcInstantiationCompiler compiler(settings);
  TuneServices services;
  services.compiler = &compiler;  // no backend: a dry run never measures
  const TuneReport report = run_tune(options, h200_target(), dir / "q.db", services);

  EXPECT_FALSE(report.interrupted);
  EXPECT_EQ(report.instantiations, 2u);  // two configurations, shared by both M: compiled once each
  EXPECT_EQ(report.compile_failures, 0u);
  ASSERT_EQ(report.reports.size(), 2u);
  for (const ProblemReport& problem : report.reports) {
    SCOPED_TRACE(problem_key(problem.problem));
    EXPECT_EQ(problem.after_static_rules, 2u);
    std::size_t removed = 0;
    for (const auto& [rule, count] : problem.pruned_pre_compile) removed += count;
    EXPECT_EQ(removed + problem.after_static_rules, problem.space_total);
    EXPECT_EQ(problem.pruned_pre_compile.at("raster-single-m-tile"), 2u);
    EXPECT_EQ(problem.measured, 0u);
    EXPECT_FALSE(problem.winner.has_value());
  }

  db::Store store = db::Store::open(dir / "q.db");
  EXPECT_TRUE(store.check().empty());
  const auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, db::RunStatus::Completed);
  EXPECT_TRUE(nlohmann::json::parse(runs[0].notes).at("tune").at("dry_run").get<bool>());
  const auto compiles = store.list_compiles();
  ASSERT_EQ(compiles.size(), 2u);
  for (const auto& compile : compiles) {
    EXPECT_EQ(compile.status, db::CompileStatus::Ok) << compile.message;
    EXPECT_EQ(compile.arch, "sm_90a");
    EXPECT_EQ(compile.format, "w4a16-int4-ch");
    ASSERT_TRUE(compile.registers.has_value());
    EXPECT_GT(*compile.registers, 0);
    EXPECT_EQ(compile.cache_key.size(), 64u);
  }
  EXPECT_TRUE(store.list_measurements().empty());
  EXPECT_TRUE(store.list_verifications().empty());
  EXPECT_TRUE(store.list_winners().empty());
  const auto counts = store.list_pruning_counts();
  ASSERT_EQ(counts.size(), 2u);
  for (const auto& count : counts) {
    EXPECT_EQ(count.stage, db::PruningStage::PreCompile);
    EXPECT_EQ(count.rule, "raster-single-m-tile");
    EXPECT_EQ(count.count, 2);
  }

  // A second dry run takes both kernels from the cache.
  const TuneReport again = run_tune(options, h200_target(), dir / "q.db", services);
  EXPECT_EQ(again.cache_hits, 2u);
}

TEST(TuneCommand, DryRunOnTheCommandLine) {
  TempDir dir;
  ASSERT_EQ(setenv("QTUNE_CACHE_DIR", test_cache().c_str(), 1), 0);
  const TuneOptions options = tiny_options();
  std::vector<std::string> arguments = {"tune", "--gpu", "h200", "--dry-run", "--formats", "w4a16-int4-ch", "--shape",
                                        "4096,4096", "--m", "1,16", "--db", (dir / "cli.db").string(), "--jobs", "2",
                                        "--family", "mma"};
  for (const auto& [name, values] : options.parameter_values) {
    std::string text = name + "=";
    for (size_t i = 0; i < values.size(); ++i) text += (i ? "," : "") + std::to_string(values[i]);
    arguments.push_back("--param");
    arguments.push_back(text);
  }
  EXPECT_EQ(run_qtune(arguments), 0);
  db::Store store = db::Store::open(dir / "cli.db");
  EXPECT_EQ(store.list_compiles().size(), 2u);
  EXPECT_EQ(store.list_problems().size(), 2u);
  EXPECT_EQ(store.list_runs().at(0).gpu_profile, "h200");
  EXPECT_FALSE(store.list_runs().at(0).command_line.empty());
}

// --family auto (the default) on Hopper tunes the mma family, then tma (M = 64: weight-only formats from M = 32), then
// wgmma, one run each; --param narrows each family by the parameters it has.
TEST(TuneCommand, FamilyAutoTunesMmaThenWgmmaOnHopper) {
  TempDir dir;
  ASSERT_EQ(setenv("QTUNE_CACHE_DIR", test_cache().c_str(), 1), 0);
  const std::vector<std::string> arguments = {
      "tune", "--gpu", "h200", "--dry-run", "--formats", "w4a16-int4-ch", "--shape", "4096,4096", "--m", "1,16,64",
      "--db", (dir / "cli.db").string(), "--jobs", "2", "--param", "bm=16", "--param", "bn=128", "--param", "bk=128",
      "--param", "wm=1", "--param", "wn=4", "--param", "wk=1", "--param", "stages=4", "--param", "split=4",
      "--param", "raster=0"};
  EXPECT_EQ(run_qtune(arguments), 0);
  db::Store store = db::Store::open(dir / "cli.db");
  ASSERT_EQ(store.list_runs().size(), 3u);
  std::set<std::string> families;
  for (const auto& compile : store.list_compiles()) {
    const auto config = store.get_config(compile.config);
    ASSERT_TRUE(config.has_value());
    families.insert(config->family);
  }
  EXPECT_EQ(families, (std::set<std::string>{"mma", "tma", "wgmma"}));
  // Each family tunes the M range where it can win: mma M = 1 and 16, wgmma M = 16 and 64.
  const std::vector<Problem> problems = build_problem_set({FormatSpec::parse("w4a16-int4-ch")}, {{4096, 4096}}, {1, 16, 64});
  const std::vector<const KernelFamily*> both = {&find_family("mma"), &find_family("wgmma")};
  auto ms_of = [&](const char* family, bool split) {
    std::set<std::int64_t> ms;
    for (const Problem& problem : problems_for_family(find_family(family), both, problems, 90, split)) ms.insert(problem.m);
    return ms;
  };
  EXPECT_EQ(ms_of("mma", true), (std::set<std::int64_t>{1, 16}));
  EXPECT_EQ(ms_of("wgmma", true), (std::set<std::int64_t>{16, 64}));
  EXPECT_EQ(ms_of("mma", false), (std::set<std::int64_t>{1, 16, 64}));  // an explicit list tunes everything
  // A format wgmma cannot run (int8 activations) stays with mma at every M.
  const std::vector<Problem> int8 = build_problem_set({FormatSpec::parse("w8a8-int8-ch")}, {{4096, 4096}}, {1, 64});
  EXPECT_EQ(problems_for_family(find_family("mma"), both, int8, 90, true).size(), 2u);
  EXPECT_TRUE(problems_for_family(find_family("wgmma"), both, int8, 90, true).empty());
  // fp8 activations, which wgmma widens to f16, from M = 1 (W4A8 M = 1 on the H200: wgmma 15.06 us, mma 26.48).
  const std::vector<Problem> fp8 = build_problem_set({FormatSpec::parse("w4a8-int4-fp8")}, {{4096, 4096}}, {1, 64});
  EXPECT_EQ(problems_for_family(find_family("wgmma"), both, fp8, 90, true).size(), 2u);
  EXPECT_EQ(run_qtune({"tune", "--gpu", "h200", "--dry-run", "--formats", "w4a16-int4-ch", "--shape", "4096,4096",
                       "--db", (dir / "cli.db").string(), "--family", "mma,tcgen05"}),
            2);
  EXPECT_EQ(run_qtune({"tune", "--gpu", "h200", "--dry-run", "--formats", "w4a16-int4-ch", "--shape", "4096,4096",
                       "--db", (dir / "cli.db").string(), "--param", "colour=1"}),
            2);
}

TEST(TuneCommand, BadInputExitsWithTwo) {
  TempDir dir;
  const std::string db = (dir / "bad.db").string();
  EXPECT_EQ(run_qtune({"tune", "--gpu", "h200", "--dry-run", "--formats", "w4a16-int4-ch", "--shape", "4096", "--db", db}), 2);
  EXPECT_EQ(run_qtune({"tune", "--gpu", "h200", "--dry-run", "--formats", "w4a16-int4-ch", "--shape", "4096,4096",
                       "--shard", "3/2", "--db", db}),
            2);
  EXPECT_EQ(run_qtune({"tune", "--gpu", "nosuchgpu", "--dry-run", "--formats", "w4a16-int4-ch", "--shape", "4096,4096",
                       "--db", db}),
            2);
  EXPECT_EQ(run_qtune({"tune", "--gpu", "h200", "--dry-run", "--formats", "w4a16-int4-ch", "--shape", "4096,4096",
                       "--strategy", "annealing", "--db", db}),
            2);
  EXPECT_EQ(run_qtune({"tune", "--gpu", "h200", "--dry-run", "--formats", "w4a16-int4-ch", "--model", "llama-3-70b",
                       "--shape", "4096,4096", "--db", db}),
            2);
  for (const char* fraction : {"0.3", "1.5", "x"}) {
    EXPECT_EQ(run_qtune({"tune", "--gpu", "h200", "--dry-run", "--formats", "w4a16-int4-ch", "--shape", "4096,4096",
                         "--clock-dip", fraction, "--db", db}),
              2)
        << fraction;
  }
}

TEST(TuneCommand, AutoWithoutAGpuExitsWithThree) {
  try {
    probe_devices();
    GTEST_SKIP() << "a GPU is present: `--gpu auto` would tune on it";
  } catch (const NoGpuError&) {
  }
  TempDir dir;
  EXPECT_EQ(run_qtune({"tune", "--gpu", "auto", "--formats", "w4a16-int4-ch", "--shape", "4096,4096", "--m", "1", "--db",
                       (dir / "q.db").string()}),
            3);
}

}  // namespace
}  // namespace qtune::tune
