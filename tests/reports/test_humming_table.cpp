#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "reports/humming_table.hpp"
#include "tests/common/expect_error.hpp"
#include "tests/reports/report_test_support.hpp"

namespace qtune::reports {
namespace {

using testing::TempDir;

// Two points of the Humming space: a small-M one (one 16-token block) and a large-M one.
KernelConfig humming_config(int bm, int multicast_a) {
  nlohmann::json tuning = {{"block_shape", {bm, 256, bm <= 32 ? 128 : 64}},
                           {"warp_shape", {bm, 32, 64}},
                           {"num_stages", 4},
                           {"use_warp_spec", true},
                           {"use_tma", true},
                           {"multi_cast_size_a", multicast_a}};
  return search::HummingSpace::from_tuning_config(tuning);
}

std::vector<HummingCell> llama_cells() {
  std::vector<HummingCell> cells;
  const KernelConfig small = humming_config(16, 1);
  const KernelConfig large = humming_config(128, 2);
  for (std::int64_t m : {1, 16, 64, 256, 1024, 4096}) {
    cells.push_back({"w4a16-int4-ch", m, 8192, 8192, m <= 16 ? small : large, 10.0 + static_cast<double>(m) / 10});
  }
  cells.push_back({"w4a16-int4-ch", 16, 10240, 8192, small, 17.5});
  return cells;
}

TEST(HummingTable, MergesTunedMsIntoHummingsRangeList) {
  const HummingTable table = build_humming_table("h200", "NVIDIA H200", 90, llama_cells());
  ASSERT_EQ(table.layers.size(), 2u);  // (8192, 8192) and (10240, 8192)
  const HummingLayerRules& square = table.layers[0];
  EXPECT_EQ(square.format, "w4a16-int4-ch");
  EXPECT_EQ(square.layer.n, 8192);
  const nlohmann::json list = square.tuning_config();
  ASSERT_EQ(list.size(), 2u);
  // M in (0, 16] runs the small config, every larger M the large one: Humming's m_lo < M <= m_hi.
  EXPECT_EQ(list[0][0], 0);
  EXPECT_EQ(list[0][1], 16);
  EXPECT_EQ(list[0][2], search::HummingSpace::tuning_config(humming_config(16, 1)));
  EXPECT_EQ(list[1][0], 16);
  EXPECT_EQ(list[1][1], kHummingUnboundedM);
  EXPECT_EQ(list[1][2].at("multi_cast_size_a"), 2);
  EXPECT_EQ(list[1][2].at("block_shape"), nlohmann::json({128, 256, 64}));

  const HummingLayerRules& wide = table.layers[1];
  EXPECT_EQ(wide.layer.n, 10240);
  ASSERT_EQ(wide.tuning_config().size(), 1u);  // one tuned M covers every M
  EXPECT_EQ(wide.tuning_config()[0][0], 0);
  EXPECT_EQ(wide.tuning_config()[0][1], kHummingUnboundedM);
}

TEST(HummingTable, FileRoundTripsAndCarriesWhatTheLoaderMatches) {
  const HummingTable table = build_humming_table("h200", "NVIDIA H200", 90, llama_cells());
  const nlohmann::json json = humming_table_json(table);
  EXPECT_EQ(json.at("format"), "qtune-humming-table");
  EXPECT_EQ(json.at("version"), 1);
  EXPECT_EQ(json.at("device_name"), "NVIDIA H200");
  EXPECT_EQ(json.at("sm"), 90);
  const nlohmann::json& layer = json.at("layers")[0];
  EXPECT_EQ(layer.at("layer").at("a_dtype"), "float16");
  EXPECT_EQ(layer.at("layer").at("b_dtype"), "uint4");
  EXPECT_EQ(layer.at("layer").at("shape_k"), 8192);
  EXPECT_EQ(layer.at("measured").size(), 6u);
  EXPECT_EQ(layer.at("measured")[5].at("m"), 4096);
  EXPECT_EQ(layer.at("measured")[5].at("range"), 1);
  EXPECT_EQ(humming_table_json(humming_table_from_json(json)), json);

  TempDir dir;
  const std::filesystem::path path = dir.path() / "h200-humming.json";
  write_humming_table(table, path);
  EXPECT_EQ(nlohmann::json::parse(testing::file_text(path)), json);
}

TEST(HummingTable, ReadingRefusesBrokenFilesNamingTheField) {
  const nlohmann::json good = humming_table_json(build_humming_table("h200", "NVIDIA H200", 90, llama_cells()));
  const auto refused = [](const nlohmann::json& json, const std::string& field) {
    test_support::expect_input_error([&] { humming_table_from_json(json); }, {field});
  };
  nlohmann::json broken = good;
  broken["format"] = "qtune-table";
  refused(broken, "format");
  broken = good;
  broken["version"] = 2;
  refused(broken, "version");
  broken = good;
  broken["layers"][0]["tuning_config"][1][0] = 17;  // a gap between 16 and 17
  refused(broken, "layers[0].tuning_config[1]");
  broken = good;
  broken["layers"][0]["tuning_config"][1][1] = 8192;  // M beyond 8192 would have no config
  refused(broken, "layers[0].tuning_config");
  broken = good;
  broken["layers"][0]["layer"]["b_dtype"] = "int4";
  refused(broken, "layers[0].layer");
  broken = good;
  broken["layers"][0]["tuning_config"][0][2]["use_f16_accum"] = true;
  refused(broken, "tuning_config.use_f16_accum");
}

TEST(HummingTable, RefusesCellsThatAreNoHummingPoint) {
  std::vector<HummingCell> cells = llama_cells();
  cells[0].format = "w4a8-int4-fp8";  // f32 weight scales: Humming takes f16
  EXPECT_THROW(build_humming_table("h200", "NVIDIA H200", 90, cells), InputError);
  cells = llama_cells();
  cells[0].config.params.erase("stages");
  EXPECT_THROW(build_humming_table("h200", "NVIDIA H200", 90, cells), InputError);
  cells = llama_cells();
  cells.push_back(cells[0]);
  EXPECT_THROW(build_humming_table("h200", "NVIDIA H200", 90, cells), Error);  // two winners of one M
}

TEST(HummingTable, CellsFromAStoreAreTheFastestVerifiedHummingConfigs) {
  TempDir dir;
  const std::filesystem::path path = dir.path() / "qtune.db";
  testing::FixtureSpec spec;
  spec.formats = {"w4a16-int4-ch"};
  spec.shapes = {{8192, 8192}};
  spec.m_buckets = {1, 16};
  testing::write_fixture_db(path, spec);  // mma configs, a cuBLASLt baseline: none of them is Humming's
  {
    db::Store store = db::Store::open(path);
    db::RunInfo humming_run = testing::fixture_run(spec);
    humming_run.uuid.clear();  // a second run on the same GPU
    const db::RunId run = store.insert_run(humming_run);
    const auto stored = [&](const KernelConfig& config) {
      db::KernelConfig record;
      record.family = config.family;
      record.params_json = config.to_json()["params"].dump();
      return store.upsert_config(record);
    };
    const db::ConfigId fast = stored(humming_config(16, 1));
    const db::ConfigId faster_but_wrong = stored(humming_config(8, 1));
    const db::ConfigId slow = stored(humming_config(128, 1));
    for (std::int64_t m : {1, 16}) {
      const db::ProblemId problem = store.upsert_problem({"w4a16-int4-ch", m, 8192, 8192});
      testing::add_passed_verification(store, run, problem, fast);
      testing::add_measurement(store, run, problem, fast, 20.0);
      testing::add_passed_verification(store, run, problem, slow);
      testing::add_measurement(store, run, problem, slow, 30.0);
      // Passed once, failed once: never a winner.
      testing::add_passed_verification(store, run, problem, faster_but_wrong);
      db::Verification failed;
      failed.run = run;
      failed.problem = problem;
      failed.config = faster_but_wrong;
      failed.status = db::VerificationStatus::Failed;
      store.insert_verification(failed);
      testing::add_measurement(store, run, problem, faster_but_wrong, 5.0);
    }
    // A warm-L2 measurement is faster but not comparable.
    db::Measurement warm;
    warm.run = run;
    warm.problem = *store.find_problem({"w4a16-int4-ch", 1, 8192, 8192});
    warm.config = slow;
    warm.stats = db::testing::stats_around(1.0);
    warm.samples_us = {1.0};
    warm.l2_mode = db::L2Mode::Warm;
    store.insert_measurement(warm);
    store.finish_run(run, db::RunStatus::Completed);
  }
  db::Store store = db::Store::open_read_only(path);
  const HummingCells cells = humming_cells_from_store(store, "h200");
  EXPECT_EQ(cells.device_name, "NVIDIA H200");
  EXPECT_EQ(cells.sm, 90);
  ASSERT_EQ(cells.cells.size(), 2u);
  for (const HummingCell& cell : cells.cells) {
    EXPECT_EQ(cell.config, humming_config(16, 1)) << cell.m;
    EXPECT_DOUBLE_EQ(cell.median_us, 20.0);
  }
  EXPECT_THROW(humming_cells_from_store(store, "a100"), InputError);
}

}  // namespace
}  // namespace qtune::reports
