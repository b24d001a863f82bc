// Bad input to `qtune tune`'s MoE options (issue 17, item 6): T = 0, a routing file of the wrong length, expert ids
// out of range, top-k above E, MoE options without a MoE GEMM, and --gemms moe on a dense model: each exits 2 with one
// line naming the field, before any database is created.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "db/moe_store.hpp"
#include "tests/common/temp_dir.hpp"
#include "tests/reports/report_test_support.hpp"
#include "tests/tuner/cli/cli_test_support.hpp"
#include "tuner/cli/cli.hpp"

namespace qtune::cli {
namespace {

using test_support::TempDir;
using testing::CliResult;
using testing::run_qtune;

// A MoE tune of DeepSeek-V3's expert GEMMs (256 experts, top-8) with `extra` arguments exits 2, names `field` in one
// line and leaves no database.
void expect_moe_refused(const TempDir& dir, const std::vector<std::string>& extra, const std::string& field) {
  std::vector<std::string> arguments = {"tune", "--gpu", "h200", "--dry-run", "--format", "w4a16-int4-g128", "--model",
                                        "deepseek-v3", "--gemms", "moe", "--db", (dir / "q.db").string()};
  arguments.insert(arguments.end(), extra.begin(), extra.end());
  const CliResult result = run_qtune(arguments);
  std::string command;
  for (const std::string& argument : arguments) command += " " + argument;
  EXPECT_EQ(result.status, kExitBadInput) << "qtune" << command << "\n" << result.err << result.out;
  EXPECT_NE(result.err.find(field), std::string::npos) << "qtune" << command << " does not name " << field << ": " << result.err;
  EXPECT_LE(testing::occurrences(result.err, "\n"), 2u) << "qtune" << command << ": " << result.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "q.db")) << "qtune" << command;
}

std::string routing_file(const TempDir& dir, const nlohmann::json& document) {
  const std::filesystem::path file = dir / "routing.json";
  std::ofstream(file) << document.dump();
  return "file:" + file.string();
}

// `rows` tokens of DeepSeek-V3 routing: token t goes to experts 8t .. 8t + 7 (mod 256).
nlohmann::json deepseek_routing(int rows) {
  nlohmann::json ids = nlohmann::json::array();
  for (int t = 0; t < rows; ++t) {
    nlohmann::json row = nlohmann::json::array();
    for (int slot = 0; slot < 8; ++slot) row.push_back((8 * t + slot) % 256);
    ids.push_back(row);
  }
  return {{"experts", 256}, {"top_k", 8}, {"ids", ids}};
}

TEST(CliMoe, BadTokenCountsAreNamed) {
  TempDir dir;
  expect_moe_refused(dir, {"--tokens", "0"}, "--tokens: T = 0");
  expect_moe_refused(dir, {"--tokens", "1,-4"}, "--tokens");
  expect_moe_refused(dir, {"--moe-layout", "scattered"}, "--moe-layout");
  expect_moe_refused(dir, {"--routing", "zipf:-1"}, "--routing");
  expect_moe_refused(dir, {"--moe-baseline", "cutlass-grouped"}, "--moe-baseline: unknown MoE baseline 'cutlass-grouped'");
}

TEST(CliMoe, BadRoutingFilesAreNamed) {
  TempDir dir;
  // Three tokens of routing for a tune at 4 tokens: the file's length is wrong.
  expect_moe_refused(dir, {"--tokens", "4", "--routing", routing_file(dir, deepseek_routing(3))}, "'ids'");
  nlohmann::json out_of_range = deepseek_routing(2);
  out_of_range["ids"][1][3] = 256;
  expect_moe_refused(dir, {"--tokens", "2", "--routing", routing_file(dir, out_of_range)}, "ids[1][3]");
  nlohmann::json too_many = deepseek_routing(2);
  too_many["top_k"] = 300;
  expect_moe_refused(dir, {"--tokens", "2", "--routing", routing_file(dir, too_many)}, "top_k");
  expect_moe_refused(dir, {"--tokens", "2", "--routing", "file:" + (dir / "missing.json").string()}, "missing.json");
}

TEST(CliMoe, MoeOptionsNeedMoeGemms) {
  TempDir dir;
  const std::string db = (dir / "q.db").string();
  const std::vector<std::vector<std::string>> refused = {
      {"tune", "--gpu", "h200", "--dry-run", "--format", "w4a16-int4-g128", "--shape", "4096,4096", "--tokens", "16", "--db", db},
      {"tune", "--gpu", "h200", "--dry-run", "--format", "w4a16-int4-g128", "--model", "deepseek-v3", "--gemms", "dense",
       "--routing", "zipf", "--db", db},
      {"tune", "--gpu", "h200", "--dry-run", "--format", "w4a16-int4-g128", "--model", "llama-3-70b", "--gemms", "moe", "--db", db},
  };
  const std::vector<std::string> fields = {"--tokens", "--routing", "--gemms: model 'llama-3-70b' has no moe GEMMs"};
  for (std::size_t i = 0; i < refused.size(); ++i) {
    const CliResult result = run_qtune(refused[i]);
    EXPECT_EQ(result.status, kExitBadInput) << result.err;
    EXPECT_NE(result.err.find(fields[i]), std::string::npos) << result.err;
    EXPECT_LE(testing::occurrences(result.err, "\n"), 2u) << result.err;
  }
  EXPECT_FALSE(std::filesystem::exists(db));
}

// A dry run of Mixtral-8x7B's expert GEMMs: planned and compiled as MoE problems (gate-up and down at one token
// bucket), stored as MoE problems, nothing measured, and no dense problem tuned with --gemms moe.
TEST(CliMoe, DryRunPlansTheExpertGemmsAsMoeProblems) {
  TempDir dir;
  const std::string db = (dir / "q.db").string();
  const CliResult result = run_qtune(
      {"tune", "--gpu", "h200", "--dry-run", "--format", "w4a16-int4-g128", "--model", "mixtral-8x7b", "--gemms", "moe",
       "--family", "mma", "--tokens", "16", "--db", db, "--jobs", "2", "--output", "json", "--param", "bm=16", "--param", "bn=128",
       "--param", "bk=128", "--param", "wm=1", "--param", "wn=4", "--param", "wk=1", "--param", "stages=4",
       "--param", "split=1", "--param", "raster=0", "--param", "gscale=0"});
  ASSERT_EQ(result.status, 0) << result.err << result.out;
  const nlohmann::json rows = nlohmann::json::parse(result.out);
  ASSERT_EQ(rows.size(), 2u) << result.out;
  for (const nlohmann::json& row : rows) {
    EXPECT_EQ(row.at("experts"), 8) << row;
    EXPECT_EQ(row.at("top_k"), 2) << row;
    EXPECT_EQ(row.at("tokens"), 16) << row;
    EXPECT_EQ(row.at("candidates"), 1) << row;
    EXPECT_EQ(row.at("winner"), "") << row;
  }
  db::Store store = db::Store::open_read_only(db);
  EXPECT_EQ(db::list_moe_problems(store).size(), 2u);
  EXPECT_TRUE(store.list_problems().empty()) << "--gemms moe tunes no dense GEMM";
  EXPECT_TRUE(db::list_moe_winners(store).empty());
}

// A model with dense and MoE GEMMs, --output json: one JSON document (an array whose rows say their "gemm"), not the
// dense array followed by the MoE array.
TEST(CliMoe, OutputJsonOfDenseAndMoeGemmsIsOneDocument) {
  TempDir dir;
  const std::string db = (dir / "q.db").string();
  const CliResult result = run_qtune(
      {"tune", "--gpu", "h200", "--dry-run", "--format", "w4a16-int4-g128", "--model", "mixtral-8x7b", "--family", "mma",
       "--m", "16", "--tokens", "16", "--db", db, "--jobs", "2", "--output", "json", "--param", "bm=16", "--param",
       "bn=128", "--param", "bk=128", "--param", "wm=1", "--param", "wn=4", "--param", "wk=1", "--param", "stages=4",
       "--param", "split=1", "--param", "raster=0"});
  ASSERT_EQ(result.status, 0) << result.err << result.out;
  ASSERT_TRUE(nlohmann::json::accept(result.out)) << "not one JSON document: " << result.out;
  const nlohmann::json rows = nlohmann::json::parse(result.out);
  ASSERT_TRUE(rows.is_array()) << result.out;
  std::size_t dense = 0;
  std::size_t moe = 0;
  for (const nlohmann::json& row : rows) {
    const std::string gemm = row.at("gemm");
    (gemm == "dense" ? dense : moe) += 1;
    EXPECT_TRUE(gemm == "dense" || gemm == "moe") << row;
    if (gemm == "moe") {
      EXPECT_EQ(row.at("experts"), 8) << row;
    } else {
      EXPECT_EQ(row.at("m"), 16) << row;
    }
  }
  EXPECT_EQ(dense, 2u) << "qkv_proj and o_proj at M = 16: " << result.out;
  EXPECT_EQ(moe, 2u) << "gate-up and down at T = 16: " << result.out;
}

// `qtune export` carries the GPU's MoE winners into the table's "moe" entries (token ranges per MoE key).
TEST(CliMoe, ExportWritesMoeEntries) {
  TempDir dir;
  const std::string db = (dir / "q.db").string();
  reports::testing::FixtureSpec spec;
  spec.formats = {"w4a16-int4-ch"};
  spec.shapes = {{8192, 8192}};
  spec.m_buckets = {1, 16};
  reports::testing::write_fixture_db(db, spec);
  {
    db::Store store = db::Store::open(db);
    db::RunInfo info = reports::testing::fixture_run(spec);
    info.uuid = "00000000-0000-4000-8000-000000000002";
    info.kind = "tune-moe";
    const db::RunId run = store.insert_run(info);
    store.finish_run(run, db::RunStatus::Completed);
    const db::ConfigId config = store.upsert_config({db::ConfigKind::Kernel, "mma-moe", R"({"bm":16,"bn":128})", "h"});
    for (std::int64_t tokens : {1, 16}) {
      const db::MoeProblemId problem = db::upsert_moe_problem(
          store, {.format = "w4a16-int4-g128", .experts = 256, .top_k = 8, .tokens = tokens, .n = 4096, .k = 7168,
                  .projection = "gate-up", .layout = "token-indexed", .routing = "uniform", .seed = 1});
      db::insert_moe_result(store, {.run = run, .problem = problem, .config = config, .outcome = "measured",
                                    .verified = true, .median_us = 10.0 * static_cast<double>(tokens)});
      db::set_moe_winner(store, {run, problem, config, 10.0 * static_cast<double>(tokens), "fastest"});
    }
  }
  const std::string table = (dir / "t.json").string();
  const CliResult result = run_qtune({"export", "--db", db, "-o", table});
  ASSERT_EQ(result.status, 0) << result.err << result.out;
  std::ifstream file(table);
  const nlohmann::json json = nlohmann::json::parse(file);
  ASSERT_TRUE(json.contains("moe")) << json.dump();
  ASSERT_EQ(json["moe"].size(), 1u);
  EXPECT_EQ(json["moe"][0]["experts"], 256);
  EXPECT_EQ(json["moe"][0]["ranges"].size(), 1u) << "one config for both token buckets: one range";
  EXPECT_EQ(json["moe"][0]["ranges"][0]["family"], "mma");
}

}  // namespace
}  // namespace qtune::cli
