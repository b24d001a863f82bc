// `qtune compile` without a GPU: NVRTC builds the named configurations for sm_90a and sm_80, the table shows their
// ptxas resources, and every compile lands in the database's compiles table; bad input exits 2 naming the flag.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "db/store.hpp"
#include "kernels/family.hpp"
#include "kernels/family_support.hpp"
#include "kernels/format.hpp"
#include "tests/common/temp_dir.hpp"
#include "tests/tuner/cli/cli_test_support.hpp"
#include "tuner/cli/cli.hpp"

namespace qtune::cli {
namespace {

using test_support::TempDir;

using testing::CacheDirectory;
using testing::CliResult;
using testing::occurrences;
using testing::run_qtune;

CliResult run_compile(std::vector<std::string> arguments) {
  arguments.insert(arguments.begin(), "compile");
  return testing::run_qtune(std::move(arguments));
}

// The family's heuristic configuration for w4a16-int4-g128 at M=16, N=K=8192 on `sm`, and the same with another split.
std::vector<KernelConfig> two_configs(const std::string& spec, int sm) {
  const Problem problem{FormatSpec::parse(spec), 16, 8192, 8192, false};
  const ArchLimits limits = ArchLimits::for_sm(sm);
  const KernelFamily& family = find_family("mma");
  const KernelConfig heuristic = family.default_config(problem, limits);
  KernelConfig other = heuristic;
  other.params["split"] = heuristic.get("split") == 1 ? 2 : 1;
  EXPECT_TRUE(family.check(heuristic, problem, limits).valid);
  EXPECT_TRUE(family.check(other, problem, limits).valid) << other.to_string();
  return {heuristic, other};
}

// The line of the text table that shows `config`, split into its cells.
std::vector<std::string> table_row(const std::string& table, const std::string& config) {
  const std::size_t at = table.find(config);
  if (at == std::string::npos) return {};
  const std::size_t begin = table.rfind('\n', at) + 1;
  const std::string line = table.substr(begin, table.find('\n', at) - begin);
  std::vector<std::string> cells;
  std::size_t position = 0;
  while (position < line.size()) {
    const std::size_t start = line.find_first_not_of(' ', position);
    if (start == std::string::npos) break;
    const std::size_t end = std::min(line.find(' ', start), line.size());
    cells.push_back(line.substr(start, end - start));
    position = end;
  }
  return cells;
}

TEST(CompileCommand, CompilesNamedConfigsForHopperIntoTheTableAndTheDatabase) {
  TempDir dir;
  const CacheDirectory cache(dir / "cache");  // empty: the first run compiles everything
  const std::vector<KernelConfig> configs = two_configs("w4a16-int4-g128", 90);
  const std::string db = (dir / "q.db").string();
  std::vector<std::string> arguments = {"--arch", "sm_90a", "--format", "w4a16-int4-g128", "--db", db, "--jobs", "2"};
  for (const KernelConfig& config : configs) arguments.insert(arguments.end(), {"--config", config.to_string()});

  const CliResult first = run_compile(arguments);
  ASSERT_EQ(first.status, 0) << first.err << first.out;
  EXPECT_NE(first.out.find("registers"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("2 configurations of w4a16-int4-g128 for sm_90a: 2 compiled (0 from the cache), 0 failed"),
            std::string::npos)
      << first.out;
  EXPECT_NE(first.err.find("compiling 2/2 instantiations"), std::string::npos) << "no progress shown: " << first.err;
  for (const KernelConfig& config : configs) {
    const std::vector<std::string> cells = table_row(first.out, config.to_string());
    // config, registers, spill stores, spill loads, static smem, dynamic smem, stack, compile ms, cached
    ASSERT_EQ(cells.size(), 9u) << first.out;
    EXPECT_GT(std::stoi(cells[1]), 0) << "registers";
    EXPECT_EQ(cells[2], "0") << "spill stores";
    EXPECT_EQ(cells[3], "0") << "spill loads";
    EXPECT_GT(std::stoi(cells[5]), 0) << "the dynamic shared memory of a multi-stage pipeline";
    EXPECT_GT(std::stod(cells[7]), 0) << "compile ms";
    EXPECT_EQ(cells[8], "no") << "cached";
  }

  // The second run finds both in the cache, and stores a second run of the same configurations.
  const CliResult second = run_compile(arguments);
  ASSERT_EQ(second.status, 0) << second.err << second.out;
  EXPECT_NE(second.out.find("2 compiled (2 from the cache)"), std::string::npos) << second.out;
  for (const KernelConfig& config : configs) EXPECT_EQ(table_row(second.out, config.to_string()).at(8), "yes");

  db::Store store = db::Store::open_read_only(db);
  const std::vector<db::RunRecord> runs = store.list_runs();
  ASSERT_EQ(runs.size(), 2u);
  for (const db::RunRecord& run : runs) {
    EXPECT_EQ(run.kind, "compile");
    EXPECT_EQ(run.status, db::RunStatus::Completed);
    EXPECT_EQ(run.sm, 90);
  }
  const std::vector<db::CompileRecord> compiles = store.list_compiles();
  ASSERT_EQ(compiles.size(), 4u);
  std::vector<db::ConfigId> config_ids;
  for (const db::CompileRecord& compile : compiles) {
    EXPECT_EQ(compile.status, db::CompileStatus::Ok) << compile.message;
    EXPECT_EQ(compile.arch, "sm_90a");
    EXPECT_EQ(compile.format, FormatSpec::parse("w4a16-int4-g128").to_string());
    EXPECT_EQ(compile.cache_key.size(), 64u);
    ASSERT_TRUE(compile.registers.has_value());
    EXPECT_GT(*compile.registers, 0);
    EXPECT_EQ(compile.spill_store_bytes, 0);
    EXPECT_EQ(compile.spill_load_bytes, 0);
    ASSERT_TRUE(compile.stack_bytes.has_value());
    const bool second_run = compile.run == runs[1].id;
    EXPECT_EQ(compile.cache_hit, second_run);
    EXPECT_EQ(compile.compile_seconds.has_value(), !second_run) << "only a compile made now has a compile time";
    config_ids.push_back(compile.config);
  }
  std::sort(config_ids.begin(), config_ids.end());
  EXPECT_EQ(std::unique(config_ids.begin(), config_ids.end()) - config_ids.begin(), 2) << "one config row each";
  const std::vector<db::KernelConfigRecord> stored = store.list_configs();
  ASSERT_EQ(stored.size(), 2u);
  for (const db::KernelConfigRecord& config : stored) {
    const KernelConfig parsed = KernelConfig::from_json(
        nlohmann::json{{"family", config.family}, {"params", nlohmann::json::parse(config.params_json)}});
    EXPECT_NE(std::find(configs.begin(), configs.end(), parsed), configs.end()) << config.params_json;
    EXPECT_FALSE(config.source_hash.empty());
  }
}

TEST(CompileCommand, CompilesForAmpereAsJsonWithoutADatabase) {
  TempDir dir;
  const std::vector<KernelConfig> configs = two_configs("w4a16-int4-g128", 80);
  // The build tree's test cache: a rerun of the suite compiles nothing, so "cached" may be either here.
  const CacheDirectory cache(std::filesystem::path(QTUNE_BINARY_DIR) / "test-cache");
  const CliResult result = run_compile({"--arch", "sm_80", "--format", "w4a16-int4-g128", "--config",
                                        configs[0].to_string(), "--no-db", "--output", "json"});
  ASSERT_EQ(result.status, 0) << result.err << result.out;
  const nlohmann::json rows = nlohmann::json::parse(result.out);
  ASSERT_TRUE(rows.is_array());
  ASSERT_EQ(rows.size(), 1u);
  const nlohmann::json& row = rows[0];
  EXPECT_EQ(row.at("config"), configs[0].to_string());
  EXPECT_GT(row.at("registers").get<int>(), 0);
  EXPECT_EQ(row.at("spill_store_bytes").get<int>(), 0);
  EXPECT_GT(row.at("smem_dynamic_bytes").get<int>(), 0);
  EXPECT_GT(row.at("compile_ms").get<double>(), 0);
  EXPECT_TRUE(row.at("cached") == "yes" || row.at("cached") == "no") << row.dump();
  EXPECT_EQ(row.at("error"), "");
  EXPECT_TRUE(dir.listing().empty());
}

// Issue 18 #13: a cache that cannot be written (QTUNE_CACHE_DIR is a file) is said once, naming the variable, and the
// compile goes on without it: NVRTC's success is a success.
TEST(CompileCommand, AnUnwritableCacheIsSaidOnceAndCompilesGoOn) {
  TempDir dir;
  const std::filesystem::path blocker = dir.write("not-a-directory", "x");
  const CacheDirectory cache(blocker.string());
  const std::vector<KernelConfig> configs = two_configs("w4a16-int4-g128", 90);
  const std::string db = (dir / "q.db").string();
  const CliResult result = run_compile({"--arch", "sm_90a", "--format", "w4a16-int4-g128", "--config", configs[0].to_string(),
                                        "--config", configs[1].to_string(), "--db", db});
  EXPECT_EQ(result.status, 0) << result.err << result.out;
  EXPECT_EQ(testing::occurrences(result.err, "QTUNE_CACHE_DIR"), 1u) << result.err;
  EXPECT_NE(result.err.find("unusable"), std::string::npos) << result.err;
  EXPECT_NE(result.out.find("2 compiled (0 from the cache), 0 failed"), std::string::npos) << result.out;
  db::Store store = db::Store::open_read_only(db);
  const std::vector<db::CompileRecord> compiles = store.list_compiles();
  ASSERT_EQ(compiles.size(), 2u);
  for (const db::CompileRecord& compile : compiles) {
    EXPECT_EQ(compile.status, db::CompileStatus::Ok);
    EXPECT_TRUE(compile.registers.has_value());
  }
}

void expect_bad_input(std::vector<std::string> arguments, const std::string& named) {
  const CliResult result = run_compile(arguments);
  EXPECT_EQ(result.status, kExitBadInput) << result.err;
  EXPECT_NE(result.err.find(named), std::string::npos) << "message does not name " << named << ": " << result.err;
  EXPECT_EQ(result.err.find("compiling"), std::string::npos) << "compiled before rejecting the input: " << result.err;
}

TEST(CompileCommand, BadInputExitsTwoNamingTheFlag) {
  TempDir dir;
  const std::string db = (dir / "q.db").string();
  const std::string good = two_configs("w4a16-int4-g128", 90)[0].to_string();
  const std::vector<std::string> base = {"--format", "w4a16-int4-g128", "--db", db};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> arguments = base;
    arguments.insert(arguments.end(), extra.begin(), extra.end());
    return arguments;
  };
  expect_bad_input(with({"--arch", "sm_91", "--config", good}), "--arch");
  expect_bad_input(with({"--arch", "sm_90x", "--config", good}), "--arch");
  expect_bad_input(with({"--arch", "90a", "--config", good}), "--arch");
  expect_bad_input({"--arch", "sm_90a", "--format", "w4a16-int9", "--config", good, "--db", db}, "--format");
  // int4 activations need an int4 tensor-core MMA, which sm_90 no longer has: the architecture is the problem.
  expect_bad_input({"--arch", "sm_90a", "--format", "w4a4-int4-ch", "--config", good, "--db", db}, "--arch: ");
  expect_bad_input(with({"--arch", "sm_90a", "--config", "bm=16,bn=128"}), "--config");
  expect_bad_input(with({"--arch", "sm_90a", "--config", "bm=sixteen"}), "--config");
  // Valid parameters that do not fit the problem: bn=256 does not divide N=4000.
  expect_bad_input(with({"--arch", "sm_90a", "--config", good, "--shape", "4000,8192"}), "--config");
  expect_bad_input(with({"--arch", "sm_90a", "--config", good, "--shape", "8192"}), "--shape");
  expect_bad_input(with({"--arch", "sm_90a", "--config", good, "--shape", "8192,x"}), "--shape");
  expect_bad_input(with({"--arch", "sm_90a", "--config", good, "--shape", "8192,100"}), "--shape");  // not a group multiple
  expect_bad_input(with({"--arch", "sm_90a", "--config", good, "--m", "0"}), "--m");
  expect_bad_input(with({"--arch", "sm_90a", "--space", "huge"}), "--space");
  expect_bad_input(with({"--arch", "sm_90a", "--param", "bm=17"}), "--param");
  expect_bad_input(with({"--arch", "sm_90a", "--param", "colour=1"}), "--param");
  expect_bad_input(with({"--arch", "sm_90a", "--config", good, "--param", "bm=16"}), "--param");
  expect_bad_input(with({"--arch", "sm_90a", "--config", good, "--output", "xml"}), "--output");
  expect_bad_input(with({"--arch", "sm_90a", "--config", good, "--family", "tcgen05"}), "--family");
  // An mma config given to the wgmma family names the parameter it does not have.
  expect_bad_input(with({"--arch", "sm_90a", "--config", good, "--family", "wgmma"}), "has no parameter 'w");
  // Missing required options are CLI11 parse errors: exit 2 too.
  EXPECT_EQ(run_compile({"--format", "w4a16-int4-g128"}).status, kExitBadInput);
  EXPECT_EQ(run_compile({"--arch", "sm_90a"}).status, kExitBadInput);
  EXPECT_FALSE(std::filesystem::exists(db)) << "bad input created the database";
}

// `compile --help` ends with, per architecture, the families that run preset formats there and why none runs the rest,
// derived from the families' rules: the same answer `formats show` and the refusals give.
TEST(CompileCommand, HelpSaysPerArchitectureWhoRunsTheFormats) {
  const CliResult help = run_qtune({"compile", "--help"});
  EXPECT_EQ(help.status, 0);
  const std::string& text = help.out;
  for (int sm : known_architectures()) EXPECT_NE(text.find("\n  sm_" + std::to_string(sm) + ": "), std::string::npos) << sm;
  EXPECT_NE(text.find("  sm_90: mma "), std::string::npos);
  EXPECT_NE(text.find(", wgmma "), std::string::npos);
  // The reasons are the rules' own, once per reason.
  const std::string fp8_reason = architecture_support(FormatSpec::parse("w8a8-fp8-ch"), 86).reason;
  EXPECT_NE(text.find("w8a8-fp8-ch"), std::string::npos);
  std::size_t without_fp8 = 0;  // sm_80 and sm_86 (and sm_75 where a family runs Turing)
  for (int sm : known_architectures()) {
    const std::string reason = family_support(FormatSpec::parse("w8a8-fp8-ch"), sm).reason;
    without_fp8 += reason.find(fp8_reason) != std::string::npos;
  }
  EXPECT_GE(without_fp8, 2u);
  EXPECT_EQ(occurrences(text, ": " + fp8_reason), without_fp8);
  const std::string int4_reason = architecture_support(FormatSpec::parse("w4a4-int4-ch"), 90).reason;
  EXPECT_EQ(occurrences(text, "none runs w4a4-int4-ch: " + int4_reason), 5u);  // sm_90, 100, 103, 120, 121
  // Each family's reason is said without the format's name, so formats refused alike share a line.
  EXPECT_EQ(text.find("w8a8-fp8-ch is unsupported"), std::string::npos);
  // A refusal for an architecture names --arch and where the family does run the format.
  const CliResult refused = run_qtune({"compile", "--arch", "sm_120a", "--format", "w4a4-int4-ch", "--no-db"});
  EXPECT_EQ(refused.status, 2);
  EXPECT_NE(refused.err.find("--arch: "), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("runs it on sm_"), std::string::npos) << refused.err;
}

}  // namespace
}  // namespace qtune::cli
