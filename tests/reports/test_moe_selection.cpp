// MoE rules in the selection table: the store's MoE winners of a GPU become token ranges per (format, experts,
// top_k, n, k, projection, layout), select_moe answers any token count by the M rule, the JSON round-trips (and a
// table without MoE winners writes no "moe" field), a malformed entry is refused naming its field, and the exported C++
// header's select_moe() answers like the library (and a header without MoE entries has none).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "db/moe_store.hpp"
#include "tests/common/expect_error.hpp"
#include "tests/common/temp_dir.hpp"
#include "reports/moe_selection.hpp"
#include "tests/reports/report_test_support.hpp"

namespace qtune::reports {
namespace {

db::MoeProblemKey key_at(std::int64_t tokens, const std::string& routing = "uniform") {
  return {.format = "w4a16-int4-g128", .experts = 256, .top_k = 8, .tokens = tokens, .n = 4096, .k = 7168,
          .projection = "gate-up", .layout = "token-indexed", .routing = routing, .seed = 1};
}

// A tune-moe run on h200, the run every winner below belongs to.
db::RunId insert_tune_moe_run(db::Store& store) {
  db::RunInfo info;
  info.kind = "tune-moe";
  info.tool_version = "test";
  info.git_sha = "test";
  info.gpu_profile = "h200";
  return store.insert_run(info);
}

// A store with MoE winners at T = 1, 16 (bm 16) and 64 (bm 64) on h200, and a zipf-routed winner at T = 1.
void fill(db::Store& store) {
  const db::RunId run = insert_tune_moe_run(store);
  const db::ConfigId small = store.upsert_config({db::ConfigKind::Kernel, "mma-moe", R"({"bm":16,"bn":128})", "h"});
  const db::ConfigId tall = store.upsert_config({db::ConfigKind::Kernel, "mma-moe", R"({"bm":64,"bn":128})", "h"});
  const auto win = [&](const db::MoeProblemKey& key, db::ConfigId config, double us) {
    const db::MoeProblemId problem = db::upsert_moe_problem(store, key);
    db::insert_moe_result(store, {.run = run, .problem = problem, .config = config, .outcome = "measured", .verified = true,
                                  .median_us = us});
    db::set_moe_winner(store, {run, problem, config, us, "fastest"});
  };
  win(key_at(1), small, 20);
  win(key_at(16), small, 40);
  win(key_at(64), tall, 90);
  win(key_at(1, "zipf:1.2"), tall, 25);
}

TEST(MoeSelection, WinnersBecomeTokenRanges) {
  test_support::TempDir dir;
  db::Store store = db::Store::open(dir / "q.db");
  fill(store);
  SelectionTable table;
  table.gpu = "h200";
  add_moe_rules(table, store, "h200");
  ASSERT_EQ(table.moe.size(), 1u);
  const MoeRules& rules = table.moe.front();
  EXPECT_EQ(rules.routing, "uniform");  // the uniform routing's winners, not zipf's
  ASSERT_EQ(rules.ranges.size(), 2u);
  EXPECT_EQ(rules.ranges[0].m_min, 1);
  EXPECT_EQ(rules.ranges[0].m_max, 16);
  EXPECT_FALSE(rules.ranges[1].m_max.has_value());
  const auto bm_at = [&](std::int64_t tokens) {
    const KernelConfig* config = table.select_moe("w4a16-int4-g128", 256, 8, 4096, 7168, "gate-up", "token-indexed", tokens);
    return config == nullptr ? -1 : config->get("bm");
  };
  EXPECT_EQ(bm_at(1), 16);
  EXPECT_EQ(bm_at(16), 16);
  EXPECT_EQ(bm_at(17), 64);
  EXPECT_EQ(bm_at(100000), 64);
  EXPECT_EQ(table.select_moe("w4a16-int4-g128", 256, 8, 4096, 7168, "down", "token-indexed", 1), nullptr);
  EXPECT_EQ(table.select_moe("w4a16-int4-g128", 256, 8, 4096, 7168, "gate-up", "grouped-masked", 1), nullptr);
  EXPECT_EQ(table.select_moe(rules.format, 256, 8, 4096, 7168, "gate-up", "token-indexed", 1)->family, "mma");
  SelectionTable other_gpu;
  add_moe_rules(other_gpu, store, "l40s");
  EXPECT_TRUE(other_gpu.moe.empty());
  SelectionTable other_format;
  add_moe_rules(other_format, store, "h200", {"w8a8-fp8-ch"});
  EXPECT_TRUE(other_format.moe.empty());
}

// A winner is stored under its provider's name; the table's config is of that provider's family (the MoE kernel that
// won), which libqtune_runtime's select_moe reads to launch the right kernel.
TEST(MoeSelection, WinnersKeepTheirProvidersFamily) {
  test_support::TempDir dir;
  db::Store store = db::Store::open(dir / "q.db");
  const db::RunId run = insert_tune_moe_run(store);
  const auto win = [&](db::MoeProblemKey key, const std::string& provider, const std::string& params) {
    const db::ConfigId config = store.upsert_config({db::ConfigKind::Kernel, provider, params, provider + params});
    const db::MoeProblemId problem = db::upsert_moe_problem(store, key);
    db::insert_moe_result(store, {.run = run, .problem = problem, .config = config, .outcome = "measured", .verified = true,
                                  .median_us = 10});
    db::set_moe_winner(store, {run, problem, config, 10, "fastest"});
  };
  db::MoeProblemKey down = key_at(1);
  down.projection = "down";
  db::MoeProblemKey fp8 = key_at(1);
  fp8.format = "w4a8-int4-fp8";
  win(key_at(1), "wgmma-moe", R"({"bm":16,"bn":128,"bk":256,"stages":4,"split":1,"raster":0,"overlap":0})");
  win(down, "mma-moe", R"({"bm":16,"bn":128})");
  win(fp8, "tma-moe", R"({"bm":16,"bn":64})");
  SelectionTable table;
  table.gpu = "h200";
  add_moe_rules(table, store, "h200");
  ASSERT_EQ(table.moe.size(), 3u);
  const auto family_of = [&](const std::string& format, const std::string& projection) {
    const KernelConfig* config = table.select_moe(format, 256, 8, 4096, 7168, projection, "token-indexed", 1);
    return config == nullptr ? std::string("none") : config->family + ":" + config->to_string();
  };
  EXPECT_EQ(family_of("w4a16-int4-g128", "gate-up"), "wgmma:bm=16,bn=128,bk=256,stages=4,split=1,raster=0,overlap=0");
  EXPECT_EQ(family_of("w4a16-int4-g128", "down").substr(0, 4), "mma:");
  EXPECT_EQ(family_of("w4a8-int4-fp8", "gate-up").substr(0, 4), "tma:");
  // And through the JSON a Runtime reads.
  const SelectionTable back = SelectionTable::from_json(table.to_json(), "t.json");
  EXPECT_EQ(back.select_moe("w4a16-int4-g128", 256, 8, 4096, 7168, "gate-up", "token-indexed", 1)->family, "wgmma");
}

TEST(MoeSelection, JsonRoundTripsAndRefusesMalformedEntries) {
  test_support::TempDir dir;
  db::Store store = db::Store::open(dir / "q.db");
  fill(store);
  SelectionTable table;
  table.gpu = "h200";
  EXPECT_FALSE(table.to_json().contains("moe")) << "a table without MoE winners writes what it wrote before";
  add_moe_rules(table, store, "h200");
  const nlohmann::json json = table.to_json();
  ASSERT_TRUE(json.contains("moe"));
  EXPECT_EQ(json["moe"][0]["ranges"][1]["t_max"], nullptr);
  const SelectionTable back = SelectionTable::from_json(json, "t.json");
  EXPECT_EQ(back.to_json(), json);
  nlohmann::json bad = json;
  bad["moe"][0]["top_k"] = 300;
  test_support::expect_input_error([&] { SelectionTable::from_json(bad, "t.json"); }, {"t.json", "moe[0].top_k"});
  bad = json;
  bad["moe"][0]["ranges"][0]["t_min"] = 2;
  test_support::expect_input_error([&] { SelectionTable::from_json(bad, "t.json"); }, {"moe[0].ranges[0]", "t_min"});
  bad = json;
  bad["moe"][0].erase("layout");
  test_support::expect_input_error([&] { SelectionTable::from_json(bad, "t.json"); }, {"moe[0].layout", "missing"});
}

std::string command_output(const std::string& command, int* status) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return "popen failed";
  char buffer[4096];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  *status = ::pclose(pipe);
  return output;
}

TEST(MoeSelection, GeneratedHeaderSelectsMoeLikeTheTable) {
  test_support::TempDir dir;
  db::Store store = db::Store::open(dir / "q.db");
  fill(store);
  SelectionTable table;
  table.gpu = "h200";
  ShapeRules dense;
  dense.n = 4096;
  dense.k = 4096;
  MRange all;
  all.config = KernelConfig::parse("bm=32,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=2,raster=0", "mma");
  all.buckets = {{64, 10.0}};
  dense.ranges = {all};
  table.formats["w4a16-int4-ch"] = {dense};
  const std::string without = table.to_cpp_header("tuned");
  EXPECT_EQ(without.find("select_moe"), std::string::npos) << "a table without MoE winners writes what it wrote before";
  add_moe_rules(table, store, "h200");
  ASSERT_EQ(table.moe.size(), 1u);
  const std::string header = table.to_cpp_header("tuned");
  testing::write_text(dir / "tuned_table.hpp", header);

  struct Query {
    std::string format;
    int experts, top_k;
    std::int64_t n, k;
    std::string projection, layout;
    std::int64_t tokens;
  };
  std::vector<Query> queries;
  for (const std::int64_t tokens : {1, 2, 16, 17, 64, 65, 4096, 1000000}) {
    queries.push_back({"w4a16-int4-g128", 256, 8, 4096, 7168, "gate-up", "token-indexed", tokens});
  }
  queries.push_back({"w4a16-int4-g128", 256, 8, 4096, 7168, "down", "token-indexed", 16});           // no such entry
  queries.push_back({"w4a16-int4-g128", 256, 8, 4096, 7168, "gate-up", "grouped-contiguous", 16});  // nor this
  queries.push_back({"w4a16-int4-g128", 128, 8, 4096, 7168, "gate-up", "token-indexed", 16});       // nor this
  queries.push_back({"w4a16-int4-ch", 256, 8, 4096, 7168, "gate-up", "token-indexed", 16});         // a dense-only format

  std::ostringstream program;
  program << "#include \"tuned_table.hpp\"\n#include <cstdio>\n\n"
          << "struct Query { std::string_view format; int experts, top_k; std::int64_t n, k; std::string_view projection, layout; "
             "std::int64_t tokens; };\n"
          << "static constexpr Query kQueries[] = {\n";
  std::ostringstream expected;
  for (const Query& q : queries) {
    program << "    {\"" << q.format << "\", " << q.experts << ", " << q.top_k << ", " << q.n << ", " << q.k << ", \"" << q.projection
            << "\", \"" << q.layout << "\", " << q.tokens << "},\n";
    const KernelConfig* config = table.select_moe(q.format, q.experts, q.top_k, q.n, q.k, q.projection, q.layout, q.tokens);
    expected << (config != nullptr ? config->to_string() : std::string("none")) << "\n";
  }
  program << "};\n\n"
          << "static_assert(tuned::select_moe(\"w4a16-int4-g128\", 256, 8, 4096, 7168, \"gate-up\", \"token-indexed\", 1) != nullptr,\n"
          << "              \"select_moe() is constexpr and finds the tuned key\");\n"
          << "static_assert(tuned::kMoeEntries[0].routing == \"uniform\", \"the routing the winners were tuned with\");\n\n"
          << "int main() {\n"
          << "  for (const Query& q : kQueries) {\n"
          << "    const tuned::Config* config = tuned::select_moe(q.format, q.experts, q.top_k, q.n, q.k, q.projection, q.layout, q.tokens);\n"
          << "    if (config == nullptr) { std::printf(\"none\\n\"); continue; }\n"
          << "    std::printf(\"%.*s\\n\", static_cast<int>(config->text.size()), config->text.data());\n"
          << "  }\n  return 0;\n}\n";
  testing::write_text(dir / "main.cpp", program.str());
  const std::string compiler = std::getenv("CXX") != nullptr ? std::getenv("CXX") : "c++";
  int status = 0;
  const std::string build_log = command_output(compiler + " -std=c++17 -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Werror -O1 -I" +
                                                   dir.path().string() + " " + (dir / "main.cpp").string() + " -o " + (dir / "select").string(),
                                               &status);
  ASSERT_EQ(status, 0) << "the generated header did not compile with " << compiler << ":\n" << build_log << "\n" << header;
  const std::string output = command_output((dir / "select").string(), &status);
  ASSERT_EQ(status, 0) << output;
  EXPECT_EQ(output, expected.str());
  EXPECT_NE(expected.str().find("bm=16"), std::string::npos);  // the queries reach both token ranges and a miss
  EXPECT_NE(expected.str().find("bm=64"), std::string::npos);
  EXPECT_NE(expected.str().find("none"), std::string::npos);
}

}  // namespace
}  // namespace qtune::reports
