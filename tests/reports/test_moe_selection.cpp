// MoE rules in the selection table: the store's MoE winners of a GPU become token ranges per (format, experts,
// top_k, n, k, projection, layout), select_moe answers any token count by the M rule, the JSON round-trips (and a
// table without MoE winners writes no "moe" field), and a malformed entry is refused naming its field.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "db/moe_store.hpp"
#include "tests/common/expect_error.hpp"
#include "tests/common/temp_dir.hpp"
#include "reports/moe_selection.hpp"

namespace qtune::reports {
namespace {

db::MoeProblemKey key_at(std::int64_t tokens, const std::string& routing = "uniform") {
  return {.format = "w4a16-int4-g128", .experts = 256, .top_k = 8, .tokens = tokens, .n = 4096, .k = 7168,
          .projection = "gate-up", .layout = "token-indexed", .routing = routing, .seed = 1};
}

// A store with MoE winners at T = 1, 16 (bm 16) and 64 (bm 64) on h200, and a zipf-routed winner at T = 1.
void fill(db::Store& store) {
  db::RunInfo info;
  info.kind = "tune-moe";
  info.tool_version = "test";
  info.git_sha = "test";
  info.gpu_profile = "h200";
  const db::RunId run = store.insert_run(info);
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

}  // namespace
}  // namespace qtune::reports
