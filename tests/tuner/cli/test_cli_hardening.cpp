// Issue 18 (hardening), the command line's part: numeric options are range-checked, unknown commands are named,
// commands that would do nothing say why, absurd shapes are refused, the architecture claims come from the kernel
// families, renamed flags keep their old spelling, --output json is real, qtune-bench's exit status tells, and one
// progress line covers a whole tune. Bad input exits 2 with one line naming the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/family_support.hpp"
#include "kernels/format.hpp"
#include "tests/common/qtune_executable.hpp"
#include "tests/common/temp_dir.hpp"
#include "tests/reports/report_test_support.hpp"
#include "tests/tuner/cli/cli_test_support.hpp"
#include "tuner/cli/cli.hpp"
#include "tuner/jit/thread_pool.hpp"

namespace qtune::cli {
namespace {

using test_support::TempDir;
using testing::CliResult;
using testing::run_qtune;

// The build tree's kernel cache, shared with the other suites: a rerun compiles nothing.
std::string test_cache() { return (std::filesystem::path(QTUNE_BINARY_DIR) / "test-cache").string(); }

// `arguments` exit 2 with a message of one line that names `field`.
void expect_refused(const std::vector<std::string>& arguments, const std::string& field) {
  const CliResult result = run_qtune(arguments);
  std::string command;
  for (const std::string& argument : arguments) command += " " + argument;
  EXPECT_EQ(result.status, kExitBadInput) << "qtune" << command << "\n" << result.err << result.out;
  EXPECT_NE(result.err.find(field), std::string::npos) << "qtune" << command << " does not name " << field << ": " << result.err;
  EXPECT_LE(testing::occurrences(result.err, "\n"), 2u) << "qtune" << command << ": " << result.err;
}

// A tune dry run on the H200 profile over one narrowed configuration per family (cheap to compile).
std::vector<std::string> narrow_dry_run(const std::string& db) {
  return {"tune", "--gpu", "h200", "--dry-run", "--shape", "4096,4096", "--m", "1,16,64", "--db", db, "--jobs", "2",
          "--param", "bm=16", "--param", "bn=128", "--param", "bk=128", "--param", "wm=1", "--param", "wn=4",
          "--param", "wk=1", "--param", "stages=4", "--param", "split=4", "--param", "raster=0"};
}

std::vector<std::string> with(std::vector<std::string> arguments, const std::vector<std::string>& extra) {
  arguments.insert(arguments.end(), extra.begin(), extra.end());
  return arguments;
}

// #3: a negative count no longer wraps into a huge size_t, and every numeric option has a range.
TEST(CliNumbers, NegativeAndOutOfRangeNumbersAreRefusedNamingTheOption) {
  TempDir dir;
  const std::string db = (dir / "q.db").string();
  const std::vector<std::string> compile = {"compile", "--arch", "sm_90a", "--format", "w4a16-int4-ch", "--no-db"};
  expect_refused(with(compile, {"--jobs", "-1"}), "--jobs");
  expect_refused(with(compile, {"--jobs", "100000"}), "--jobs");
  expect_refused(with(compile, {"--m", "-16"}), "--m");
  const std::vector<std::string> tune = {"tune", "--gpu", "h200", "--dry-run", "--format", "w4a16-int4-ch",
                                         "--shape", "4096,4096", "--db", db};
  expect_refused(with(tune, {"--seed", "-5"}), "--seed");
  expect_refused(with(tune, {"--jobs", "-1"}), "--jobs");
  expect_refused(with(tune, {"--tp", "0"}), "--tp");
  expect_refused(with(tune, {"--budget-evals", "-3"}), "--budget-evals");
  expect_refused(with(tune, {"--budget-fraction", "0"}), "--budget-fraction");
  expect_refused(with(tune, {"--budget-fraction", "nan"}), "--budget-fraction");
  expect_refused(with(tune, {"--budget-seconds", "-1"}), "--budget-seconds");
  expect_refused(with(tune, {"--time-budget", "inf"}), "--time-budget");
  expect_refused(with(tune, {"--shard-count", "-2"}), "--shard-count");
  const std::vector<std::string> bench = {"bench", "--baseline", "cublaslt-f16", "--shape", "4096,4096", "--m", "1", "--no-db"};
  expect_refused(with(bench, {"--top-k", "-1"}), "--top-k");
  expect_refused(with(bench, {"--seed", "-1"}), "--seed");
  expect_refused(with(bench, {"--device", "-1"}), "--device");
  expect_refused(with(bench, {"--timeout", "0"}), "--timeout");
  expect_refused(with(bench, {"--min-time", "-0.5"}), "--min-time");
  expect_refused({"kernel-sweep", "--format", "w4a16-int4-ch", "--shape", "4096,4096", "--max-configs", "-1"}, "--max-configs");
  expect_refused({"search-eval", "--db", db, "--repeats", "-1"}, "--repeats");
  expect_refused({"search-eval", "--db", db, "--min-candidates", "-1"}, "--min-candidates");
  expect_refused({"export", "--db", db, "-o", (dir / "t.json").string(), "--jobs", "-4"}, "--jobs");
  EXPECT_FALSE(std::filesystem::exists(db)) << "bad input created the database";
}

TEST(CliNumbers, CompilerThreadsNeverExceedTheCores) {
  EXPECT_EQ(jit::compiler_thread_count(0), jit::default_thread_count());
  EXPECT_EQ(jit::compiler_thread_count(1), 1u);
  EXPECT_EQ(jit::compiler_thread_count(static_cast<std::size_t>(-1)), jit::default_thread_count());
  EXPECT_EQ(jit::compiler_thread_count(100000), jit::default_thread_count());
}

// #12: `qtune` alone prints the help; an unknown command is named, with the nearest one for a typo.
TEST(CliCommands, NoArgumentsPrintTheHelp) {
  const CliResult result = run_qtune({});
  EXPECT_EQ(result.status, kExitBadInput);
  EXPECT_NE(result.out.find("Usage:"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("compile"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("tune"), std::string::npos) << result.out;
}

TEST(CliCommands, AnUnknownCommandIsNamedWithTheNearestOne) {
  CliResult result = run_qtune({"frobnicate"});
  EXPECT_EQ(result.status, kExitBadInput);
  EXPECT_NE(result.err.find("unknown command 'frobnicate'"), std::string::npos) << result.err;
  EXPECT_EQ(result.err.find("did you mean"), std::string::npos) << "no command is near 'frobnicate': " << result.err;
  EXPECT_NE(result.err.find("formats"), std::string::npos) << "the commands are listed: " << result.err;
  EXPECT_EQ(result.err.find("__worker"), std::string::npos) << "the hidden worker is not offered: " << result.err;

  result = run_qtune({"tnue", "--gpu", "h200"});
  EXPECT_EQ(result.status, kExitBadInput);
  EXPECT_NE(result.err.find("unknown command 'tnue' (did you mean 'tune'?)"), std::string::npos) << result.err;

  result = run_qtune({"db", "inof"});
  EXPECT_EQ(result.status, kExitBadInput);
  EXPECT_NE(result.err.find("unknown command 'inof' of 'db' (did you mean 'info'?)"), std::string::npos) << result.err;

  result = run_qtune({"db"});
  EXPECT_EQ(result.status, kExitBadInput);
  EXPECT_NE(result.err.find("merge"), std::string::npos) << "db alone shows its subcommands: " << result.err;

  expect_refused({"formats", "--frobnicate"}, "--frobnicate");
}

// #14: a filter that selects nothing is an error naming the field and what exists, not a silent success.
TEST(CliNothingToDo, TuneRefusesGemmsTheModelDoesNotHave) {
  TempDir dir;
  expect_refused({"tune", "--gpu", "h200", "--dry-run", "--format", "w4a16-int4-ch", "--model", "llama-3-70b", "--gemms",
                  "moe", "--db", (dir / "q.db").string()},
                 "--gemms: model 'llama-3-70b' has no moe GEMMs (it has: dense)");
  EXPECT_FALSE(std::filesystem::exists(dir / "q.db"));
}

// A format the GPU's families cannot run was tuned into nothing with exit 0: it exits 2 before any work, naming
// --format and the families' reasons (--family when a family not chosen runs it there).
TEST(CliNothingToDo, TuneRefusesAFormatNoFamilyRunsOnTheGpu) {
  TempDir dir;
  const std::string db = (dir / "q.db").string();
  const std::string reason = family_support(FormatSpec::parse("w4a4-nvfp4"), 90).reason;
  ASSERT_FALSE(reason.empty());
  const std::vector<std::string> tune = {"tune", "--gpu", "h200", "--dry-run", "--shape", "4096,4096", "--m", "16",
                                         "--db", db};
  expect_refused(with(tune, {"--format", "w4a4-nvfp4"}), "--format: " + reason);
  expect_refused(with(tune, {"--format", "w4a4-nvfp4", "--family", "mma"}), "--format: " + reason);
  expect_refused(with(tune, {"--format", "w4a16-int4-ch,w4a4-nvfp4"}), "--format: " + reason);
  expect_refused(with(tune, {"--format", "w4a16-int4-ch", "--family", "bsmma"}),
                 "--family: w4a16-int4-ch runs on sm_90 in the mma family, not in bsmma");
  EXPECT_FALSE(std::filesystem::exists(db)) << "a refused tune created the database";
}

// `compile` and `kernel-sweep` take one shape (--shape N,K), never a model: no model's moe_expert GEMMs can reach them
// as dense GEMMs. `--model` is refused there naming it (tune is the command that reads a model, dense and MoE apart).
TEST(CliNothingToDo, CompileAndKernelSweepTakeNoModel) {
  expect_refused({"compile", "--arch", "sm_90a", "--format", "w4a16-int4-ch", "--model", "mixtral-8x7b", "--no-db"},
                 "--model");
  expect_refused(
      {"kernel-sweep", "--format", "w4a16-int4-ch", "--shape", "4096,4096", "--model", "mixtral-8x7b", "--m", "16"},
      "--model");
}

TEST(CliNothingToDo, ReportAndExportRefuseAGpuOrFormatWithoutResults) {
  TempDir dir;
  const std::string db = (dir / "q.db").string();
  reports::testing::FixtureSpec spec;
  spec.formats = {"w4a16-int4-ch"};
  spec.shapes = {{8192, 8192}};
  spec.m_buckets = {1, 16};
  reports::testing::write_fixture_db(db, spec);
  const std::string report_dir = (dir / "report").string();
  expect_refused({"report", "--db", db, "-o", report_dir, "--gpu", "nosuch"}, "--gpu: no results for GPU 'nosuch'");
  expect_refused({"report", "--db", db, "-o", report_dir, "--gpu", "nosuch"}, "(GPUs with results: h200)");
  expect_refused({"report", "--db", db, "-o", report_dir, "--format", "w8a8-fp8-ch"}, "(formats with results: w4a16-int4-ch)");
  EXPECT_FALSE(std::filesystem::exists(report_dir)) << "a refused report wrote files";
  const std::string table = (dir / "t.json").string();
  expect_refused({"export", "--db", db, "-o", table, "--format", "w8a8-fp8-ch"},
                 "--format: no winners for w8a8-fp8-ch");
  expect_refused({"export", "--db", db, "-o", table, "--format", "w8a8-fp8-ch"}, "(formats with winners: w4a16-int4-ch)");
  EXPECT_FALSE(std::filesystem::exists(table));
  EXPECT_EQ(run_qtune({"report", "--db", db, "-o", report_dir, "--gpu", "h200"}).status, 0);
}

// #17: shapes beyond what the kernels' int32 indexing addresses are refused by every command that takes shapes.
TEST(CliShapes, AbsurdShapesAreRefusedBeforeAnyWork) {
  TempDir dir;
  const std::string db = (dir / "q.db").string();
  const std::string huge = "1099511627776";  // 2^40
  const std::vector<std::string> compile = {"compile", "--arch", "sm_90a", "--format", "w4a16-int4-ch", "--no-db"};
  expect_refused(with(compile, {"--shape", huge + ",8192"}), "--shape: N = 1099511627776 is outside [1, 1048576]");
  expect_refused(with(compile, {"--shape", "8192," + huge}), "--shape: K = ");
  expect_refused(with(compile, {"--m", "2000000"}), "--m: M = 2000000");
  // Each dimension fits, but C = M x N holds more than 2^31 - 1 elements.
  expect_refused(with(compile, {"--shape", "1048576,1024", "--m", "4096"}), "--m: M*N = ");
  expect_refused(with(compile, {"--shape", "1048576,1048576"}), "--shape: N*K = ");
  const std::vector<std::string> tune = {"tune", "--gpu", "h200", "--dry-run", "--format", "w4a16-int4-ch", "--db", db};
  expect_refused(with(tune, {"--shape", huge + ",8192"}), "--shape: N = ");
  expect_refused(with(tune, {"--shape", "8192,8192", "--m", "1,4194304"}), "--m: M = 4194304");
  expect_refused({"bench", "--baseline", "cublaslt-f16", "--shape", huge + ",8192", "--m", "1", "--no-db"}, "--shape: N = ");
  expect_refused({"kernel-sweep", "--format", "w4a16-int4-ch", "--shape", "8192,8192", "--m", "1,2000000"}, "--m: M = ");
  EXPECT_FALSE(std::filesystem::exists(db));
}

// #19: what `formats show` and `compile` claim comes from the kernel families, not from the tensor cores alone.
TEST(CliArchitectures, FormatsShowSaysWhichFamilyRunsTheFormat) {
  CliResult result = run_qtune({"formats", "show", "w4a16-int4-ch"});
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_NE(result.out.find("yes (mma family)"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("sm_75              yes (mma family)"), std::string::npos) << result.out;
  EXPECT_EQ(result.out.find("yes\n"), std::string::npos) << "a bare yes names no family: " << result.out;
  // Turing runs f16 activations but not bf16: the refusal is the family's, naming the architecture.
  result = run_qtune({"formats", "show", "w4a16-int4-g128-bf16"});
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_NE(result.out.find("is unsupported on sm_75: bf16 activations need sm_80 or later"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("sm_80              yes (mma family)"), std::string::npos) << result.out;
  // Every family that runs it is named: on the H200 W4A8 runs on mma, tma and wgmma (widened).
  result = run_qtune({"formats", "show", "w4a8-int4-fp8"});
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_NE(result.out.find("sm_90              yes (mma, tma, wgmma families)"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("sm_89              yes (mma family)"), std::string::npos) << result.out;

  result = run_qtune({"formats", "show", "w4a4-nvfp4", "--output", "json"});
  ASSERT_EQ(result.status, 0) << result.err;
  const nlohmann::json shown = nlohmann::json::parse(result.out);
  // Only the bsmma family runs fp4 activations, on sm_120; every other architecture says why not.
  for (const nlohmann::json& arch : shown.at("architectures")) {
    const bool consumer_blackwell = arch.at("sm").get<int>() == 120 || arch.at("sm").get<int>() == 121;
    EXPECT_EQ(arch.at("supported").get<bool>(), consumer_blackwell) << arch.dump();
    if (consumer_blackwell) {
      EXPECT_EQ(arch.at("family").get<std::string>(), "bsmma") << arch.dump();
      EXPECT_EQ(arch.at("families"), nlohmann::json::array({"bsmma"})) << arch.dump();
    } else {
      EXPECT_FALSE(arch.at("reason").get<std::string>().empty()) << arch.dump();
    }
  }
}

TEST(CliArchitectures, CompileOffersOnlyArchitecturesAFamilyCompilesFor) {
  const CliResult help = run_qtune({"compile", "--help"});
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("target: sm_75, sm_80"), std::string::npos) << help.out;  // the mma family runs Turing
  EXPECT_NE(help.out.find("sm_90a"), std::string::npos) << help.out;
  EXPECT_EQ(help.out.find("sm_70"), std::string::npos) << help.out;
  expect_refused({"compile", "--arch", "sm_70", "--format", "w4a16-int4-ch", "--no-db"}, "--arch: 'sm_70' is not one of");
  // bf16 runs from sm_80 on: on sm_75 the architecture is the problem.
  expect_refused({"compile", "--arch", "sm_75", "--format", "w4a16-int4-g128-bf16", "--no-db"}, "--arch: ");
  // The format runs on sm_75..sm_89 (int4 MMA): on sm_90 the architecture is the problem.
  expect_refused({"compile", "--arch", "sm_90a", "--format", "w4a4-int4-ch", "--no-db"}, "--arch: ");
  expect_refused({"compile", "--arch", "sm_90a", "--format", "w4a4-int4-ch", "--no-db"}, "runs it on sm_75, sm_80, sm_86, sm_89");
  // fp4 activations run on sm_120a only (the bsmma family): on sm_100a the architecture is the problem, and with
  // --family auto (the default) the family that runs it there compiles it.
  expect_refused({"compile", "--arch", "sm_100a", "--format", "w4a4-nvfp4", "--no-db"}, "--arch: ");
  expect_refused({"compile", "--arch", "sm_100a", "--format", "w4a4-nvfp4", "--no-db"}, "the bsmma family runs it on sm_120");
  // No family runs fp4 weights with int8 activations anywhere: the format is the problem.
  expect_refused({"compile", "--arch", "sm_90a", "--format", "w4a8-fp4-int8", "--no-db"}, "--format: ");
  // wgmma takes weight-only and fp8-activation formats; the mma family runs this int8 one here.
  expect_refused({"compile", "--arch", "sm_90a", "--format", "w8a8-int8-ch", "--family", "wgmma", "--no-db"},
                 "--family: ");
}

// #20: one spelling per idea in --help; the old spellings still work.
TEST(CliFlags, RenamedFlagsShowTheNewNameAndAcceptTheOld) {
  const CliResult help = run_qtune({"tune", "--help"});
  ASSERT_EQ(help.status, 0);
  for (const char* shown : {"--format ", "--device ", "--timeout "}) {
    EXPECT_NE(help.out.find(shown), std::string::npos) << shown << " missing from: " << help.out;
  }
  for (const char* hidden : {"--formats", "--devices", "--timeout-ms"}) {
    EXPECT_EQ(help.out.find(hidden), std::string::npos) << hidden << " is listed: " << help.out;
  }
  const CliResult sweep_help = run_qtune({"kernel-sweep", "--help"});
  EXPECT_NE(sweep_help.out.find("--top-k"), std::string::npos) << sweep_help.out;
  EXPECT_EQ(sweep_help.out.find("--top "), std::string::npos) << sweep_help.out;

  TempDir dir;
  const std::string db = (dir / "q.db").string();
  const std::vector<std::string> tune = {"tune", "--gpu", "h200", "--dry-run", "--shape", "4096,4096", "--db", db};
  // --timeout is in seconds, --timeout-ms in milliseconds; both must exceed the 1 s time budget.
  expect_refused(with(tune, {"--format", "w4a16-int4-ch", "--timeout", "0.5"}), "--timeout: ");
  expect_refused(with(tune, {"--formats", "w4a16-int4-ch", "--timeout-ms", "500"}), "--timeout: ");
  expect_refused(with(tune, {"--format", "w4a16-int9"}), "--format: ");
  expect_refused(with(tune, {"--formats", "w4a16-int9"}), "--format: ");
  expect_refused(with(tune, {"--format", ""}), "--format: empty");
  // Without --format, tune takes the main job's format (so `tune --dry-run --gpu rtx5090 --model llama-3-70b` plans).
  const CliResult tune_help = run_qtune({"tune", "--help"});
  EXPECT_NE(tune_help.out.find("w4a16-int4-ch"), std::string::npos) << tune_help.out;
  expect_refused({"kernel-sweep", "--format", "w4a16-int4-ch", "--shape", "4096,4096", "--top", "0"}, "--top");
}

TEST(CliFlags, NewAndOldSpellingsTuneTheSame) {
  TempDir dir;
  const testing::CacheDirectory cache(test_cache());
  const std::string new_db = (dir / "new.db").string();
  const CliResult renamed = run_qtune(with(narrow_dry_run(new_db), {"--format", "w4a16-int4-ch", "--family", "mma",
                                                                   "--timeout", "20", "--device", "all"}));
  ASSERT_EQ(renamed.status, 0) << renamed.err;
  const std::string old_db = (dir / "old.db").string();
  const CliResult old = run_qtune(with(narrow_dry_run(old_db), {"--formats", "w4a16-int4-ch", "--family", "mma",
                                                               "--timeout-ms", "20000", "--devices", "all"}));
  ASSERT_EQ(old.status, 0) << old.err;
  EXPECT_EQ(renamed.out.substr(0, renamed.out.find("run #")), old.out.substr(0, old.out.find("run #")));
}

// #20: --output json prints one JSON document on every table-printing command, a tune of two families included.
TEST(CliFlags, OutputJsonIsOneDocument) {
  TempDir dir;
  const testing::CacheDirectory cache(test_cache());
  const std::string db = (dir / "q.db").string();
  for (const std::vector<std::string>& arguments :
       {std::vector<std::string>{"formats", "--output", "json"}, {"formats", "show", "nvfp4", "--output", "json"},
        with(narrow_dry_run(db), {"--format", "w4a16-int4-ch", "--output", "json"}), {"db", "info", "--db", db, "--output", "json"}}) {
    const CliResult result = run_qtune(arguments);
    ASSERT_EQ(result.status, 0) << arguments.front() << ": " << result.err;
    EXPECT_TRUE(nlohmann::json::accept(result.out)) << arguments.front() << ": " << result.out;
  }
}

// Also (progress): one progress line for the whole run, across the mma and wgmma families and the compile phase,
// with an ETA, in a dry run too; the whole run reaches 100% once, at the end.
TEST(CliProgress, ADryRunOfTwoFamiliesShowsOneRunWideProgress) {
  TempDir dir;
  const std::string command = "QTUNE_CACHE_DIR='" + test_cache() + "' '" + test_support::qtune_executable().string() + "'";
  std::string arguments;
  for (const std::string& argument : with(narrow_dry_run((dir / "q.db").string()), {"--format", "w4a16-int4-ch"})) {
    arguments += " '" + argument + "'";
  }
  const CliResult result = testing::run_shell(command + arguments + " 2>&1 >/dev/null");
  ASSERT_EQ(result.status, 0) << result.out;
  const std::size_t mma = result.out.find("compiling mma ");
  const std::size_t wgmma = result.out.find("compiling wgmma ");
  ASSERT_NE(mma, std::string::npos) << result.out;
  ASSERT_NE(wgmma, std::string::npos) << result.out;
  EXPECT_LT(mma, wgmma);
  EXPECT_NE(result.out.find("ETA"), std::string::npos) << result.out;
  // The mma family's compile ends before the run does: its last line is short of 100%.
  const std::size_t mma_done = result.out.rfind("run ", wgmma);
  ASSERT_NE(mma_done, std::string::npos) << result.out;
  EXPECT_NE(result.out.compare(mma_done, 8, "run 100%"), 0) << "the mma family's end is not the run's: " << result.out;
  EXPECT_EQ(testing::occurrences(result.out, "run 100%"), 1u) << result.out;
  EXPECT_NE(result.out.rfind("run 100%"), std::string::npos);
  EXPECT_GT(result.out.rfind("run 100%"), wgmma) << result.out;
}

// #21: qtune-bench exits 3 when the GPU benchmarks it was asked for skipped for want of a GPU, 2 for a filter that
// matches nothing.
TEST(CliBenchExecutable, GpuBenchmarksWithoutAGpuExitThree) {
  const std::filesystem::path bench = test_support::qtune_executable().parent_path() / "qtune-bench";
  if (!std::filesystem::exists(bench)) GTEST_SKIP() << "qtune-bench is not built (QTUNE_BUILD_BENCHMARKS=OFF)";
  if (std::filesystem::exists("/dev/nvidia0")) GTEST_SKIP() << "a GPU is present: the benchmark would run";
  CliResult result = testing::run_shell("'" + bench.string() + "' --benchmark_filter=MmaSyncPeak 2>&1");
  EXPECT_EQ(result.status, kExitNoGpu) << result.out;
  EXPECT_NE(result.out.find("no GPU"), std::string::npos) << result.out;
  result = testing::run_shell("'" + bench.string() + "' --benchmark_filter=NoSuchBenchmark 2>&1");
  EXPECT_EQ(result.status, kExitBadInput) << result.out;
}

}  // namespace
}  // namespace qtune::cli
