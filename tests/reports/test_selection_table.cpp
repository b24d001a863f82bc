// Export: M-range compaction, select() round trips, determinism, the nearest-shape fallback and its regret, and a
// C++ program built against the generated header.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <set>

#include "kernels/error.hpp"
#include "reports/selection_build.hpp"
#include "reports/tuning_data.hpp"
#include "tests/common/expect_error.hpp"
#include "tests/reports/report_test_support.hpp"

namespace qtune::reports {
namespace {

using test_support::expect_input_error;

namespace fs = std::filesystem;
using testing::FixtureSpec;
using testing::TempDir;

KernelConfig config_of(const std::string& text) { return KernelConfig::parse(text, "mma"); }

TEST(CompactRanges, MergesEqualNeighboursAndCoversEveryM) {
  const KernelConfig a = config_of("bm=16,bn=128"), b = config_of("bm=64,bn=128"), c = config_of("bm=128,bn=256");
  // Given out of order: compaction sorts by M first.
  const std::vector<MRange> ranges = compact_ranges({{8, b, 12.0}, {1, a, 10.0}, {2, a, 10.5}, {4, b, 11.0}, {64, c, 30.0}, {16, b, 13.0}});
  ASSERT_EQ(ranges.size(), 3u);
  EXPECT_EQ(ranges[0].m_min, 1);
  EXPECT_EQ(ranges[0].m_max, 2);
  EXPECT_EQ(ranges[0].config, a);
  EXPECT_EQ(ranges[1].m_min, 3);
  EXPECT_EQ(ranges[1].m_max, 16);
  EXPECT_EQ(ranges[1].config, b);
  ASSERT_EQ(ranges[1].buckets.size(), 3u);
  EXPECT_EQ(ranges[1].buckets[0].m, 4);
  EXPECT_DOUBLE_EQ(ranges[1].buckets[0].median_us, 11.0);
  EXPECT_EQ(ranges[2].m_min, 17);
  EXPECT_FALSE(ranges[2].m_max.has_value());

  const ShapeRules rules{8192, 8192, ranges};
  // The smallest tuned bucket >= M decides (search::m_bucket_for); beyond the last bucket, the last range.
  EXPECT_EQ(rules.range_for(1).config, a);
  EXPECT_EQ(rules.range_for(2).config, a);
  EXPECT_EQ(rules.range_for(3).config, b);
  EXPECT_EQ(rules.range_for(16).config, b);
  EXPECT_EQ(rules.range_for(17).config, c);
  EXPECT_EQ(rules.range_for(1'000'000).config, c);
}

TEST(CompactRanges, RefusesTwoWinnersForOneM) {
  EXPECT_THROW(compact_ranges({{4, config_of("bm=16"), 1.0}, {4, config_of("bm=32"), 1.0}}), Error);
}

TEST(NaturalLog, MatchesTheLibraryLog) {
  for (const double x : {1.0, 2.0, 3.0, 1000.0, 4096.0, 8192.0, 28672.0, 57344.0, 1e9, 0.37}) {
    EXPECT_NEAR(natural_log(x), std::log(x), 1e-13 * std::max(1.0, std::abs(std::log(x)))) << x;
  }
}

class ExportFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::write_fixture_db(dir_ / "qtune.db", spec_);
    store_.emplace(db::Store::open_read_only(dir_ / "qtune.db"));
    data_ = load_tuning_data(*store_);
    table_ = build_selection_table(data_, "h200");
  }

  FixtureSpec spec_;
  TempDir dir_;
  std::optional<db::Store> store_;
  TuningData data_;
  SelectionTable table_;
};

TEST_F(ExportFixture, SelectReturnsTheStoredWinnerOfEveryProblemAndBucket) {
  ASSERT_EQ(table_.formats.size(), spec_.formats.size());
  const auto winners = store_->list_winners(std::string("h200"));
  ASSERT_EQ(winners.size(), spec_.formats.size() * spec_.shapes.size() * spec_.m_buckets.size());
  // The winners change with M, so compaction had something to merge and something to keep apart.
  EXPECT_GT(table_.range_count(), table_.shape_count());
  EXPECT_LT(table_.range_count(), winners.size());

  const SelectionTable reloaded = SelectionTable::from_json(nlohmann::json::parse(table_.to_json().dump()), "round-trip");
  for (const auto& winner : winners) {
    const auto problem = store_->get_problem(winner.problem);
    ASSERT_TRUE(problem);
    const KernelConfig expected = to_kernel_config(*store_->get_config(winner.config));
    for (const SelectionTable* table : {static_cast<const SelectionTable*>(&table_), &reloaded}) {
      const auto selection = table->select(problem->format, problem->m, problem->n, problem->k);
      ASSERT_NE(selection.config, nullptr) << problem->format;
      EXPECT_TRUE(selection.tuned_shape);
      EXPECT_EQ(*selection.config, expected) << problem->format << " m=" << problem->m << " n=" << problem->n << " k=" << problem->k;
    }
  }
  EXPECT_EQ(reloaded.to_json(), table_.to_json());
}

TEST_F(ExportFixture, MBetweenBucketsUsesTheNextBucketsWinner) {
  int checked = 0;
  for (const auto& [format, shapes] : table_.formats) {
    for (const ShapeRules& shape : shapes) {
      for (std::size_t i = 1; i < spec_.m_buckets.size(); ++i) {
        const std::int64_t low = spec_.m_buckets[i - 1], high = spec_.m_buckets[i];
        if (high - low < 2) continue;
        const auto at_high = table_.select(format, high, shape.n, shape.k);
        const auto between = table_.select(format, low + 1, shape.n, shape.k);
        EXPECT_EQ(*between.config, *at_high.config) << format << " m=" << low + 1;
        ++checked;
      }
      const auto last = table_.select(format, spec_.m_buckets.back(), shape.n, shape.k);
      EXPECT_EQ(*table_.select(format, spec_.m_buckets.back() * 4, shape.n, shape.k).config, *last.config);
    }
  }
  EXPECT_GT(checked, 0);
}

TEST_F(ExportFixture, UnknownFormatSelectsNothing) {
  EXPECT_EQ(table_.select("w4a16-int4-g128", 16, 8192, 8192).config, nullptr);
}

TEST_F(ExportFixture, FallbackTakesTheNearestShapeInLogSpace) {
  const std::string format = "w4a16-int4-ch";
  struct Case {
    std::int64_t n, k, expected_n, expected_k;
  };
  // Unseen shapes: each is nearest (in ln N, ln K) to the named tuned one.
  for (const Case c : {Case{10000, 8192, 10240, 8192}, Case{7168, 8192, 8192, 8192}, Case{53248, 8192, 57344, 8192},
                       Case{8192, 29568, 8192, 28672}, Case{28672, 8192, 57344, 8192}, Case{8192, 16384, 8192, 28672}}) {
    const auto selection = table_.select(format, 64, c.n, c.k);
    ASSERT_NE(selection.config, nullptr);
    EXPECT_FALSE(selection.tuned_shape);
    EXPECT_EQ(selection.shape->n, c.expected_n) << c.n << "x" << c.k;
    EXPECT_EQ(selection.shape->k, c.expected_k) << c.n << "x" << c.k;
    for (const std::int64_t m : spec_.m_buckets) {
      const auto tuned = table_.select(format, m, c.expected_n, c.expected_k);
      EXPECT_EQ(*table_.select(format, m, c.n, c.k).config, *tuned.config) << "m=" << m;
    }
  }
}

TEST_F(ExportFixture, FallbackRegretIsLeaveOneShapeOutOverTheMeasurements) {
  const FallbackRegret regret = evaluate_fallback(table_, data_, data_.gpus.at("h200"));
  // Every shape of every format is held out once; every config was measured everywhere (exhaustive).
  EXPECT_EQ(regret.shapes, static_cast<int>(spec_.formats.size() * spec_.shapes.size()));
  EXPECT_EQ(regret.cells, static_cast<int>(spec_.formats.size() * spec_.shapes.size() * spec_.m_buckets.size()));
  EXPECT_EQ(regret.heuristic_cells, 0);
  EXPECT_EQ(regret.skipped_cells, 0);
  // Both fallbacks are summarized for every format.
  EXPECT_EQ(regret.nearest_by_format.size(), spec_.formats.size());
  ASSERT_TRUE(regret.geomean_regret && regret.max_regret);
  EXPECT_GE(*regret.geomean_regret, 0.0);
  EXPECT_GE(*regret.max_regret, *regret.geomean_regret);

  // Recompute one held-out shape by hand: (8192, 8192) of w4a16 answered by its nearest other shape (10240, 8192).
  const std::string format = "w4a16-int4-ch";
  const ShapeRules* held_out = nullptr;
  for (const ShapeRules& shape : table_.formats.at(format))
    if (shape.n == 8192 && shape.k == 8192) held_out = &shape;
  ASSERT_NE(held_out, nullptr);
  const ShapeRules* neighbour = table_.nearest_shape(format, 8192, 8192, held_out);
  ASSERT_NE(neighbour, nullptr);
  EXPECT_EQ(neighbour->n, 10240);
  EXPECT_EQ(neighbour->k, 8192);
  double log_sum = 0;
  for (const std::int64_t m : spec_.m_buckets) {
    double best = 1e300;
    for (const KernelConfig& config : testing::fixture_configs()) best = std::min(best, testing::synthetic_time_us(format, config, m, 8192, 8192));
    const double chosen = testing::synthetic_time_us(format, neighbour->range_for(m).config, m, 8192, 8192);
    log_sum += std::log(chosen / best);
  }
  const double expected = std::exp(log_sum / static_cast<double>(spec_.m_buckets.size())) - 1;
  bool found = false;
  for (const ShapeRegret& shape : regret.per_shape) {
    if (shape.format != format || shape.n != 8192 || shape.k != 8192) continue;
    found = true;
    EXPECT_NEAR(shape.geomean_regret, expected, 1e-9);
    EXPECT_EQ(shape.neighbour_n, 10240);
  }
  EXPECT_TRUE(found);
}

TEST_F(ExportFixture, RegretFallsBackToTheHeuristicWhereTheChosenConfigWasNotMeasured) {
  // Only two shapes, and the one held out never measured the configs its neighbour would choose except the heuristic.
  FixtureSpec spec;
  spec.formats = {"w4a16-int4-ch"};
  spec.shapes = {{8192, 8192}, {10240, 8192}};
  spec.m_buckets = {16};
  TempDir dir;
  {
    db::Store store = db::Store::open(dir / "small.db");
    auto transaction = store.transaction();
    const db::RunId run = store.insert_run(testing::fixture_run(spec));
    const auto configs = testing::fixture_configs();
    const db::ConfigId fast = store.upsert_config(testing::to_db_config(configs[1]));
    const db::ConfigId heuristic = store.upsert_config(testing::to_db_config(configs[0]));
    // Shape A (8192): heuristic 20 us, best 10 us (only these two measured). Shape B (10240): `fast` wins at 12 us.
    const db::ProblemId a = store.upsert_problem({"w4a16-int4-ch", 16, 8192, 8192});
    const db::ProblemId b = store.upsert_problem({"w4a16-int4-ch", 16, 10240, 8192});
    const db::ConfigId other = store.upsert_config(testing::to_db_config(configs[4]));
    for (auto [problem, config, time, phase] : {std::tuple{a, heuristic, 20.0, "heuristic"}, std::tuple{a, other, 10.0, ""},
                                                std::tuple{b, fast, 12.0, ""}, std::tuple{b, heuristic, 30.0, "heuristic"}}) {
      testing::add_passed_verification(store, run, problem, config);
      testing::add_measurement(store, run, problem, config, time, phase);
    }
    store.set_winner({run, a, other, 10.0, "fastest"});
    store.set_winner({run, b, fast, 12.0, "fastest"});
    transaction.commit();
  }
  db::Store store = db::Store::open_read_only(dir / "small.db");
  const TuningData data = load_tuning_data(store);
  const SelectionTable table = build_selection_table(data, "h200");
  const FallbackRegret regret = evaluate_fallback(table, data, data.gpus.at("h200"));
  // Held out A: neighbour B chooses `fast`, not measured on A -> the heuristic's 20 us against the best 10 us.
  // Held out B: neighbour A chooses `other`, not measured on B -> the heuristic's 30 us against 12 us.
  EXPECT_EQ(regret.cells, 2);
  EXPECT_EQ(regret.heuristic_cells, 2);
  ASSERT_TRUE(regret.geomean_regret);
  EXPECT_NEAR(*regret.geomean_regret, std::sqrt(2.0 * 2.5) - 1, 1e-12);
  EXPECT_NEAR(*regret.max_regret, 1.5, 1e-12);
  EXPECT_EQ(regret.worst_cell, "w4a16-int4-ch n=10240 k=8192 m=16");
}

// A cell a peer won (tune --family humming) is no qtune kernel: the selection table for qtune's runtime leaves it
// out, counts it in the provenance, and the neighbouring bucket's qtune winner answers its M.
TEST(SelectionBuild, LeavesOutCellsAPeerWon) {
  FixtureSpec spec;
  spec.formats = {"w4a16-int4-ch"};
  spec.shapes = {{8192, 8192}};
  spec.m_buckets = {16, 64};
  TempDir dir;
  const KernelConfig qtune_kernel = testing::fixture_configs()[0];
  {
    db::Store store = db::Store::open(dir / "peer.db");
    auto transaction = store.transaction();
    const db::RunId run = store.insert_run(testing::fixture_run(spec));
    const db::ConfigId ours = store.upsert_config(testing::to_db_config(qtune_kernel));
    const db::ConfigId humming = store.upsert_config({db::ConfigKind::Kernel, "humming", R"({"bm":16})", "humming 0.1"});
    const db::ProblemId small = store.upsert_problem({"w4a16-int4-ch", 16, 8192, 8192});
    const db::ProblemId large = store.upsert_problem({"w4a16-int4-ch", 64, 8192, 8192});
    for (auto [problem, config, time] : {std::tuple{small, ours, 20.0}, std::tuple{large, ours, 30.0},
                                         std::tuple{large, humming, 25.0}}) {
      testing::add_passed_verification(store, run, problem, config);
      testing::add_measurement(store, run, problem, config, time, "");
    }
    store.set_winner({run, small, ours, 20.0, "fastest"});
    store.set_winner({run, large, humming, 25.0, "fastest"});
    transaction.commit();
  }
  db::Store store = db::Store::open_read_only(dir / "peer.db");
  const SelectionTable table = build_selection_table(load_tuning_data(store), "h200");
  ASSERT_EQ(table.formats.at("w4a16-int4-ch").size(), 1u);
  const auto& ranges = table.formats.at("w4a16-int4-ch")[0].ranges;
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0].config, qtune_kernel);
  EXPECT_EQ(table.provenance.at("winners"), 1);
  EXPECT_EQ(table.provenance.at("peer_winners_left_out"), 1);
}

TEST_F(ExportFixture, BuildRefusesAGpuWithoutWinners) {
  expect_input_error([&] { build_selection_table(data_, "a100"); }, {"--gpu", "h200"});
}

TEST(SelectionTableJson, MalformedTablesNameTheField) {
  const nlohmann::json good = {
      {"schema", "qtune-selection-table/1"},
      {"gpu", "h200"},
      {"formats",
       {{"w4a16-int4-ch",
         {{"shapes",
           {{{"n", 8192}, {"k", 8192}, {"ranges", {{{"m_min", 1}, {"m_max", nullptr}, {"config", "bm=16,bn=128"}, {"family", "mma"}}}}}}}}}}}};
  EXPECT_NO_THROW(SelectionTable::from_json(good, "t.json"));
  auto expect_field = [](const nlohmann::json& json, const std::string& field) {
    expect_input_error([&] { SelectionTable::from_json(json, "t.json"); }, {"t.json: field '" + field + "'"});
  };
  nlohmann::json bad = good;
  bad["formats"]["w4a16-int4-ch"]["shapes"][0]["n"] = -3;
  expect_field(bad, "formats.w4a16-int4-ch.shapes[0].n");
  bad = good;
  bad["formats"]["w4a16-int4-ch"]["shapes"][0]["ranges"][0]["m_min"] = 2;
  expect_field(bad, "formats.w4a16-int4-ch.shapes[0].ranges[0]");
  bad = good;
  bad["formats"]["w4a16-int4-ch"]["shapes"][0]["ranges"][0]["m_max"] = 64;
  expect_field(bad, "formats.w4a16-int4-ch.shapes[0].ranges[0].m_max");
  bad = good;
  bad["formats"]["w4a16-int4-ch"]["shapes"][0]["ranges"][0]["config"] = "bm16";
  expect_field(bad, "formats.w4a16-int4-ch.shapes[0].ranges[0].config");
  bad = good;
  bad.erase("schema");
  expect_field(bad, "schema");
}

TEST_F(ExportFixture, CommandWritesTheSameBytesEveryTime) {
  const std::string db = (dir_ / "qtune.db").string();
  for (const std::string name : {"a", "b"}) {
    ASSERT_EQ(testing::run_qtune({"export", "--db", db, "--gpu", "H200", "-o", (dir_ / (name + ".json")).string(), "-o",
                                  (dir_ / (name + ".hpp")).string()}),
              0);
  }
  const std::string json = testing::file_text(dir_ / "a.json");
  const std::string header = testing::file_text(dir_ / "a.hpp");
  ASSERT_FALSE(json.empty());
  ASSERT_FALSE(header.empty());
  EXPECT_EQ(json, testing::file_text(dir_ / "b.json"));
  EXPECT_EQ(header, testing::file_text(dir_ / "b.hpp"));

  // A second database written with the same content exports the same table: only the run's own finish time (db run
  // data, in the JSON provenance) differs; row timestamps (created_at, decided_at) never reach the output.
  TempDir other;
  testing::write_fixture_db(other / "qtune.db", spec_);
  ASSERT_EQ(testing::run_qtune({"export", "--db", (other / "qtune.db").string(), "--gpu", "h200", "-o", (other / "c.json").string(),
                                "-o", (other / "c.hpp").string()}),
            0);
  EXPECT_EQ(header, testing::file_text(other / "c.hpp"));
  nlohmann::json first = nlohmann::json::parse(json), second = nlohmann::json::parse(testing::file_text(other / "c.json"));
  for (nlohmann::json* table : {&first, &second}) (*table)["provenance"]["runs"][0].erase("finished_at");
  EXPECT_EQ(first.dump(2), second.dump(2));

  // The JSON holds the fallback's held-out regret and the provenance of the run, and nothing was written to the db.
  const nlohmann::json parsed = nlohmann::json::parse(json);
  EXPECT_EQ(parsed["gpu"], "h200");
  EXPECT_TRUE(parsed["fallback"]["held_out_regret"]["geomean_regret"].is_number());
  EXPECT_EQ(parsed["provenance"]["runs"][0]["uuid"], spec_.run_uuid);
  EXPECT_EQ(store_->list_external_results().size(), 0u);
}

TEST_F(ExportFixture, CommandFiltersFormatsAndRejectsBadInput) {
  const std::string db = (dir_ / "qtune.db").string();
  ASSERT_EQ(testing::run_qtune({"export", "--db", db, "--format", "w8a8-fp8-ch", "-o", (dir_ / "fp8.json").string()}), 0);
  const nlohmann::json parsed = nlohmann::json::parse(testing::file_text(dir_ / "fp8.json"));
  ASSERT_EQ(parsed["formats"].size(), 1u);
  EXPECT_TRUE(parsed["formats"].contains("w8a8-fp8-ch"));
  EXPECT_EQ(testing::run_qtune({"export", "--db", db, "-o", (dir_ / "table.txt").string()}), 2);
  EXPECT_EQ(testing::run_qtune({"export", "--db", db, "--gpu", "a100", "-o", (dir_ / "x.json").string()}), 2);
  EXPECT_EQ(testing::run_qtune({"export", "--db", db, "--format", "w9a16-int4", "-o", (dir_ / "x.json").string()}), 2);
  EXPECT_FALSE(fs::exists(dir_ / "x.json"));
}

// Runs a shell command and returns its standard output; fails the test on a non-zero exit.
std::string command_output(const std::string& command, int* status) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return "popen failed";
  char buffer[4096];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  *status = ::pclose(pipe);
  return output;
}

TEST_F(ExportFixture, AHeuristicFallbackAnswersOnlyTunedShapesAndSurvivesJson) {
  const std::string format = "w4a16-int4-ch";
  table_.fallback_methods[format] = FallbackMethod::Heuristic;
  EXPECT_EQ(table_.select(format, 64, 10000, 8192).config, nullptr);  // untuned: the caller runs the heuristic
  const auto tuned = table_.select(format, 64, 8192, 8192);
  ASSERT_NE(tuned.config, nullptr);
  EXPECT_TRUE(tuned.tuned_shape);
  const SelectionTable back = SelectionTable::from_json(table_.to_json());
  EXPECT_EQ(back.to_json(), table_.to_json());
  EXPECT_EQ(back.select(format, 64, 10000, 8192).config, nullptr);
  EXPECT_EQ(table_.to_json()["fallback"]["methods"][format], "heuristic");
  // Unknown methods and formats are named.
  nlohmann::json bad = table_.to_json();
  bad["fallback"]["methods"][format] = "nearest";
  EXPECT_THROW(SelectionTable::from_json(bad), InputError);
  bad = table_.to_json();
  bad["fallback"]["methods"]["w4a16-int4-g128"] = "heuristic";
  EXPECT_THROW(SelectionTable::from_json(bad), InputError);
}

TEST(FallbackMethods, TheLowerMeasuredRegretWinsPerFormat) {
  SelectionTable table;
  table.formats["a"] = {};
  table.formats["b"] = {};
  table.formats["c"] = {};
  FallbackRegret regret;
  regret.nearest_by_format["a"].geomean_regret = 0.09;
  regret.heuristic_by_format["a"].geomean_regret = 0.03;
  regret.nearest_by_format["b"].geomean_regret = 0.02;
  regret.heuristic_by_format["b"].geomean_regret = 0.04;
  // c: nothing measured -> the nearest shape, as tables always did.
  const auto methods = choose_fallback_methods(table, regret);
  EXPECT_EQ(methods.at("a"), FallbackMethod::Heuristic);
  EXPECT_EQ(methods.at("b"), FallbackMethod::NearestShape);
  EXPECT_EQ(methods.at("c"), FallbackMethod::NearestShape);
}

TEST_F(ExportFixture, GeneratedHeaderCompilesStandaloneAndSelectsLikeTheLibrary) {
  // The first format falls back to the heuristic (select() gives nullptr off its tuned shapes), the others to the
  // nearest shape: the header must answer both ways like the library.
  table_.fallback_methods[table_.formats.begin()->first] = FallbackMethod::Heuristic;
  const fs::path header = dir_ / "tuned_table.hpp";
  testing::write_text(header, table_.to_cpp_header("tuned"));
  const std::string text = testing::file_text(header);
  // Its natural_log and shape_distance are the text of reports/selection_table_distance.hpp, not a copy that could drift.
  const std::string shared = testing::file_text(fs::path(QTUNE_SOURCE_DIR) / "reports" / "selection_table_distance.hpp");
  const size_t begin = shared.find("constexpr double natural_log(double x) {");
  const size_t end = shared.find("// ---- end of the text generated headers share");
  ASSERT_NE(begin, std::string::npos);
  ASSERT_NE(end, std::string::npos);
  EXPECT_NE(text.find(shared.substr(begin, end - begin)), std::string::npos) << text;
  // Self-contained: the only includes are the three standard headers.
  std::set<std::string> includes;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("#include", 0) == 0) includes.insert(line);
  EXPECT_EQ(includes, (std::set<std::string>{"#include <array>", "#include <cstdint>", "#include <string_view>"}));
  EXPECT_EQ(text.find("qtune::"), std::string::npos);

  // Queries: every tuned cell, M between and beyond buckets, unseen shapes, and an unknown format.
  struct Query {
    std::string format;
    std::int64_t m, n, k;
  };
  std::vector<Query> queries;
  for (const auto& [format, shapes] : table_.formats) {
    for (const ShapeRules& shape : shapes) {
      for (const std::int64_t m : spec_.m_buckets) queries.push_back({format, m, shape.n, shape.k});
      for (const std::int64_t m : {3, 100, 3000, 100000}) queries.push_back({format, m, shape.n, shape.k});
    }
    for (const auto& [n, k] : std::vector<std::pair<std::int64_t, std::int64_t>>{{10000, 8192}, {7168, 8192}, {8192, 29568}, {28672, 8192}, {1024, 1024}, {200000, 4096}}) {
      for (const std::int64_t m : {1, 24, 512, 8192}) queries.push_back({format, m, n, k});
    }
  }
  queries.push_back({"w4a16-int4-g128", 16, 8192, 8192});

  std::ostringstream program;
  program << "#include \"tuned_table.hpp\"\n#include <cstdio>\n\n"
          << "struct Query { std::string_view format; std::int64_t m, n, k; };\n"
          << "static constexpr Query kQueries[] = {\n";
  std::ostringstream expected;
  for (const Query& query : queries) {
    program << "    {\"" << query.format << "\", " << query.m << ", " << query.n << ", " << query.k << "},\n";
    const auto selection = table_.select(query.format, query.m, query.n, query.k);
    expected << (selection.config ? selection.config->family + " " + selection.config->to_string() + " " + std::to_string(selection.config->get("bm"))
                                  : std::string("none"))
             << " " << (selection.config && selection.tuned_shape ? 1 : 0) << "\n";
  }
  program << "};\n\n"
          << "// Evaluated at compile time too: select() is constexpr.\n"
          << "static_assert(tuned::select(\"" << queries.front().format << "\", " << queries.front().m << ", " << queries.front().n << ", "
          << queries.front().k << ") != nullptr, \"a tuned cell must select a config\");\n"
          << "static_assert(tuned::select(\"no-such-format\", 1, 1, 1) == nullptr, \"an unknown format selects nothing\");\n\n"
          << "int main() {\n"
          << "  for (const Query& q : kQueries) {\n"
          << "    const tuned::Config* config = tuned::select(q.format, q.m, q.n, q.k);\n"
          << "    if (config == nullptr) { std::printf(\"none 0\\n\"); continue; }\n"
          << "    std::printf(\"%.*s %.*s %d %d\\n\", static_cast<int>(config->family.size()), config->family.data(),\n"
          << "                static_cast<int>(config->text.size()), config->text.data(), config->bm,\n"
          << "                tuned::is_tuned_shape(q.format, q.n, q.k) ? 1 : 0);\n"
          << "  }\n  return 0;\n}\n";
  testing::write_text(dir_ / "main.cpp", program.str());

  const std::string compiler = std::getenv("CXX") != nullptr ? std::getenv("CXX") : "c++";
  int status = 0;
  const std::string build_log = command_output(compiler + " -std=c++17 -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Werror -O1 -I" +
                                                   dir_.path().string() + " " + (dir_ / "main.cpp").string() + " -o " + (dir_ / "select").string(),
                                               &status);
  ASSERT_EQ(status, 0) << "the generated header did not compile with " << compiler << ":\n" << build_log;
  const std::string output = command_output((dir_ / "select").string(), &status);
  ASSERT_EQ(status, 0) << output;
  EXPECT_EQ(output, expected.str());
}

// Defect 1 of issue 18: strings from the database reach the header only as escaped literals and comment text.
TEST(ExportEscaping, DatabaseStringsCannotInjectCodeIntoTheHeader) {
  TempDir dir;
  FixtureSpec spec;
  spec.formats = {"w4a16-int4-ch"};
  spec.shapes = {{8192, 8192}};
  spec.m_buckets = {1, 16};
  spec.baselines = false;
  spec.gpu_profile = "";  // the GPU key is then the free-text device name, which becomes kGpu
  spec.gpu_name = "Foo \"GPU\"\n#error injected by gpu_name ?" "?/ \\";
  spec.git_sha = "abc\n#error injected by git_sha";
  spec.tool_version = "0.1\\";  // a trailing backslash would splice the next line into the comment
  testing::write_fixture_db(dir / "x.db", spec);
  ASSERT_EQ(testing::run_qtune({"export", "--db", (dir / "x.db").string(), "-o", (dir / "t.hpp").string(), "-o", (dir / "t.json").string()}), 0);

  const std::string header = testing::file_text(dir / "t.hpp");
  std::istringstream lines(header);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_NE(line.rfind("#error", 0), 0u) << line;
    if (line.rfind("//", 0) == 0) {
      EXPECT_NE(line.back(), '\\') << "a comment line that splices the next one: " << line;
    }
  }
  // The JSON keeps the strings exactly.
  const nlohmann::json json = nlohmann::json::parse(testing::file_text(dir / "t.json"));
  EXPECT_EQ(json["provenance"]["runs"][0]["git_sha"], spec.git_sha);
  EXPECT_EQ(json["gpu"], spec.gpu_name);

  // The header compiles, and kGpu holds the name byte for byte.
  testing::write_text(dir / "main.cpp", "#include \"t.hpp\"\n#include <cstdio>\nint main() {\n"
                                        "  for (const char c : qtune_table::kGpu) std::printf(\"%02x\", static_cast<unsigned>(static_cast<unsigned char>(c)));\n"
                                        "  return 0;\n}\n");
  const std::string compiler = std::getenv("CXX") != nullptr ? std::getenv("CXX") : "c++";
  int status = 0;
  const std::string log = command_output(compiler + " -std=c++17 -Wall -Wextra -Werror -I" + dir.path().string() + " " +
                                             (dir / "main.cpp").string() + " -o " + (dir / "gpu").string(), &status);
  ASSERT_EQ(status, 0) << log;
  std::string expected;
  for (const char c : spec.gpu_name) {
    char hex[3];
    std::snprintf(hex, sizeof(hex), "%02x", static_cast<unsigned>(static_cast<unsigned char>(c)));
    expected += hex;
  }
  EXPECT_EQ(command_output((dir / "gpu").string(), &status), expected);
}

// Defect 7 of issue 18: --namespace must be an identifier no keyword or macro can hijack, checked before any output.
TEST_F(ExportFixture, NamespaceIsCheckedBeforeAnyOutputIsWritten) {
  const std::string db = (dir_ / "qtune.db").string();
  const std::string json = (dir_ / "t.json").string(), header = (dir_ / "t.hpp").string();
  for (const std::string name : {"and", "static", "INT64_MAX", "NULL", "a b", "_Table", "my__table", "assert", "std", "9lives", "", "a::b"}) {
    EXPECT_EQ(testing::run_qtune({"export", "--db", db, "-o", json, "-o", header, "--namespace", name}), 2) << name;
    EXPECT_FALSE(fs::exists(json)) << name;
    EXPECT_FALSE(fs::exists(header)) << name;
  }
  try {
    check_cpp_namespace("INT64_MAX");
    FAIL() << "INT64_MAX accepted";
  } catch (const InputError& error) {
    EXPECT_EQ(std::string(error.what()).rfind("--namespace: 'INT64_MAX'", 0), 0u) << error.what();
  }
  EXPECT_NO_THROW(check_cpp_namespace("tuned_h200"));
  EXPECT_NO_THROW(check_cpp_namespace("Table2"));
  ASSERT_EQ(testing::run_qtune({"export", "--db", db, "-o", json, "-o", header, "--namespace", "tuned_h200"}), 0);
  EXPECT_NE(testing::file_text(header).find("namespace tuned_h200 {"), std::string::npos);
}

TEST(WriteFilesAtomically, WritesEveryFileOrNone) {
  TempDir dir;
  fs::create_directories(dir / "in-the-way");
  testing::write_text(dir / "in-the-way" / "keep", "x");
  EXPECT_ANY_THROW(write_files_atomically({{dir / "a.txt", "a"}, {dir / "in-the-way", "b"}}));
  EXPECT_ANY_THROW(write_files_atomically({{dir / "a.txt", "a"}, {dir / "missing" / "b.txt", "b"}}));
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(dir.path())) left.push_back(entry.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"in-the-way"});  // no a.txt, no temporary file
  write_files_atomically({{dir / "a.txt", "a"}, {dir / "b.txt", "b"}});
  EXPECT_EQ(testing::file_text(dir / "a.txt"), "a");
  EXPECT_EQ(testing::file_text(dir / "b.txt"), "b");
}

}  // namespace
}  // namespace qtune::reports
