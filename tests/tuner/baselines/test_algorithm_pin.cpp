// `qtune bench --pin-algorithm` without a GPU: matching a stored algorithm in a heuristic list by its identifying
// fields, reading the stored choice back from the database, carrying the pin through the worker's job params, and the
// InputError for --pin-algorithm with --no-db.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "db/store.hpp"
#include "kernels/error.hpp"
#include "tests/common/temp_dir.hpp"
#include "tuner/baselines/baseline_bench.hpp"
#include "tuner/baselines/baseline_pin.hpp"
#include "tuner/baselines/cublaslt_baseline.hpp"
#include "tuner/cli/cli.hpp"

namespace qtune::baselines {
namespace {

AlgoInfo algo(int heuristic_index, int algo_id, int tile_id, int stages_id) {
  AlgoInfo info;
  info.heuristic_index = heuristic_index;
  info.algo_id = algo_id;
  info.tile_id = tile_id;
  info.stages_id = stages_id;
  info.splitk = 1;
  info.reduction_scheme = 0;
  info.cta_swizzling = 1;
  info.custom_option = 0;
  info.inner_shape_id = 3;
  info.cluster_shape_id = 2;
  info.workspace_bytes = 4096;
  info.waves_count = 1.5f;
  return info;
}

// Each identifying field, to change one at a time.
const std::vector<std::pair<std::string, std::function<void(AlgoInfo&)>>>& identifying_fields() {
  static const std::vector<std::pair<std::string, std::function<void(AlgoInfo&)>>> fields = {
      {"algo_id", [](AlgoInfo& a) { ++a.algo_id; }},
      {"tile_id", [](AlgoInfo& a) { ++a.tile_id; }},
      {"stages_id", [](AlgoInfo& a) { ++a.stages_id; }},
      {"splitk", [](AlgoInfo& a) { ++a.splitk; }},
      {"reduction_scheme", [](AlgoInfo& a) { ++a.reduction_scheme; }},
      {"cta_swizzling", [](AlgoInfo& a) { ++a.cta_swizzling; }},
      {"custom_option", [](AlgoInfo& a) { ++a.custom_option; }},
      {"inner_shape_id", [](AlgoInfo& a) { ++a.inner_shape_id; }},
      {"cluster_shape_id", [](AlgoInfo& a) { ++a.cluster_shape_id; }},
  };
  return fields;
}

TEST(AlgorithmMatch, IgnoresListPositionWorkspaceAndWaves) {
  const AlgoInfo stored = algo(1, 66, 24, 20);  // h1 of the earlier run
  AlgoInfo now = stored;
  now.heuristic_index = 5;
  now.workspace_bytes = 0;
  now.waves_count = 0.25f;
  EXPECT_TRUE(same_algorithm(stored, now));
}

TEST(AlgorithmMatch, EveryIdentifyingFieldMatters) {
  const AlgoInfo stored = algo(0, 66, 24, 20);
  for (const auto& [name, change] : identifying_fields()) {
    AlgoInfo other = stored;
    change(other);
    EXPECT_FALSE(same_algorithm(stored, other)) << name << " is ignored";
  }
}

TEST(AlgorithmMatch, FindsTheStoredAlgorithmWhereverItIsListed) {
  // Two near-tied tiles (128x256 and 256x128) that swap places between runs: found by fields, not by index.
  const std::vector<AlgoInfo> listed = {algo(0, 66, 24, 20), algo(1, 66, 25, 20), algo(2, 66, 24, 21),
                                        algo(3, 31, 24, 20)};
  const AlgoInfo stored = algo(0, 66, 25, 20);  // h0 when it was chosen, h1 now
  const std::optional<size_t> found = find_algorithm(listed, stored);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(*found, 1u);
  EXPECT_EQ(listed[*found].heuristic_index, 1);
  for (const auto& [name, change] : identifying_fields()) {
    AlgoInfo missing = algo(9, 66, 25, 20);
    change(missing);
    EXPECT_FALSE(find_algorithm(listed, missing).has_value()) << "found with " << name << " changed";
  }
  EXPECT_FALSE(find_algorithm({}, stored).has_value());
}

TEST(AlgorithmJson, StoredTextReadsBack) {
  AlgoInfo info = algo(3, 71, 29, 18);
  info.splitk = 4;
  info.reduction_scheme = 2;
  info.custom_option = 7;
  const AlgoInfo back = algo_info_from_json(info.to_json());
  EXPECT_TRUE(same_algorithm(back, info));
  EXPECT_EQ(back.heuristic_index, 3);
  EXPECT_EQ(back.splitk, 4);
  EXPECT_EQ(back.reduction_scheme, 2);
  EXPECT_EQ(back.workspace_bytes, 4096u);
  EXPECT_FLOAT_EQ(back.waves_count, 1.5f);
}

TEST(AlgorithmJson, MissingOrBadFieldsAreInputErrorsNamingThem) {
  nlohmann::json json = nlohmann::json::parse(algo(0, 66, 24, 20).to_json());
  json.erase("cluster_shape_id");
  try {
    algo_info_from_json(json.dump());
    FAIL() << "no InputError";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("algorithm.cluster_shape_id"), std::string::npos) << error.what();
  }
  json = nlohmann::json::parse(algo(0, 66, 24, 20).to_json());
  json["splitk"] = "one";
  try {
    algo_info_from_json(json.dump());
    FAIL() << "no InputError";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("algorithm.splitk"), std::string::npos) << error.what();
  }
  EXPECT_THROW(algo_info_from_json("{not json"), InputError);
  EXPECT_THROW(algo_info_from_json("[1, 2]"), InputError);
}

TEST(PinJobParams, PinnedAlgorithmTravelsToTheWorker) {
  BenchBaselineRequest request;
  request.kind = BaselineKind::F16;
  request.problem = {1024, 8192, 8192};
  request.baseline.top_k = 8;
  PinnedAlgorithm pinned;
  pinned.algorithm = algo(1, 66, 25, 20);
  pinned.origin = "run 3 of 2026-11-30T00:12:03.123Z";
  pinned.search_depth = 40;
  request.pinned = pinned;
  const nlohmann::json params = to_job_params(request);
  ASSERT_TRUE(params.contains("pinned")) << params.dump();
  // Through text, as the worker receives it.
  const BenchBaselineRequest back = request_from_job_params(nlohmann::json::parse(params.dump()));
  ASSERT_TRUE(back.pinned.has_value());
  EXPECT_TRUE(same_algorithm(back.pinned->algorithm, pinned.algorithm));
  EXPECT_EQ(back.pinned->algorithm.heuristic_index, 1);
  EXPECT_EQ(back.pinned->origin, pinned.origin);
  EXPECT_EQ(back.pinned->search_depth, 40);
  EXPECT_EQ(back.baseline.top_k, 8);  // the top k of a fallback stays the asked one

  request.pinned.reset();
  const nlohmann::json unpinned = to_job_params(request);
  EXPECT_FALSE(unpinned.contains("pinned"));
  EXPECT_FALSE(request_from_job_params(unpinned).pinned.has_value());
}

TEST(PlacementJobParams, PlacementsTravelAndAreBounded) {
  BenchBaselineRequest request;
  request.problem = {4096, 8192, 8192};
  EXPECT_EQ(request_from_job_params(to_job_params(request)).placements, 1);
  request.placements = 5;
  nlohmann::json params = to_job_params(request);
  EXPECT_EQ(request_from_job_params(nlohmann::json::parse(params.dump())).placements, 5);
  for (const int bad : {0, 17}) {
    params["placements"] = bad;
    try {
      request_from_job_params(params);
      FAIL() << "no InputError for " << bad;
    } catch (const InputError& error) {
      EXPECT_NE(std::string(error.what()).find("placements"), std::string::npos) << error.what();
    }
  }
}

TEST(PinJobParams, BadPinnedFieldsAreInputErrorsNamingThem) {
  BenchBaselineRequest request;
  request.problem = {16, 256, 256};
  request.pinned = PinnedAlgorithm{algo(0, 66, 24, 20), "run 1 of then", 32};
  nlohmann::json params = to_job_params(request);
  params["pinned"]["algorithm"].erase("tile_id");
  try {
    request_from_job_params(params);
    FAIL() << "no InputError";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("pinned.algorithm.tile_id"), std::string::npos) << error.what();
  }
  params = to_job_params(request);
  params["pinned"]["search_depth"] = 0;
  try {
    request_from_job_params(params);
    FAIL() << "no InputError";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("pinned.search_depth"), std::string::npos) << error.what();
  }
  params = to_job_params(request);
  params["pinned"] = 5;
  EXPECT_THROW(request_from_job_params(params), InputError);
}

TEST(PinResultJson, OutcomeRoundTrips) {
  for (const PinOutcome outcome :
       {PinOutcome::NotAsked, PinOutcome::Pinned, PinOutcome::NotListed, PinOutcome::NotVerified}) {
    TargetResult result;
    result.target = "cublaslt-f16";
    result.problem = {64, 256, 256};
    result.supported = true;
    result.pin = outcome;
    const TargetResult back = nlohmann::json::parse(nlohmann::json(result).dump()).get<TargetResult>();
    EXPECT_EQ(back.pin, outcome) << to_string(outcome);
  }
  // A result of a qtune without pinning reads as not asked.
  nlohmann::json old = TargetResult{};
  old.erase("pin");
  EXPECT_EQ(old.get<TargetResult>().pin, PinOutcome::NotAsked);
  EXPECT_THROW(parse_pin_outcome("maybe"), InputError);
}

// ---- the stored choice, read back from a database written as `qtune bench` writes it

class StoredChoiceTest : public testing::Test {
 protected:
  test_support::TempDir dir_;
  db::Store store_ = db::Store::open(dir_ / "bench.db");

  db::RunId bench_run(const std::string& started_at, const std::string& gpu_name = "NVIDIA H200",
                      const std::string& uuid = "GPU-aaaa", bool finish = true) {
    db::RunInfo info;
    info.kind = "bench";
    info.started_at = started_at;
    info.tool_version = "0.1.0";
    info.git_sha = "abc";
    info.gpu_name = gpu_name;
    info.gpu_uuid = uuid;
    info.gpu_profile = "h200";
    const db::RunId run = store_.insert_run(info);
    if (finish) store_.finish_run(run, db::RunStatus::Completed);
    return run;
  }

  // One measured algorithm of a bench row, as cmd_bench stores it.
  void measured(db::RunId run, const db::Problem& problem, const std::string& family, const AlgoInfo& algorithm,
                const std::string& phase, double median_us, db::L2Mode l2_mode = db::L2Mode::Cold,
                db::MeasurementStatus status = db::MeasurementStatus::Ok) {
    const db::ProblemId problem_id = store_.upsert_problem(problem);
    const db::ConfigId config = store_.upsert_config({db::ConfigKind::Baseline, family, algorithm.to_json(), ""});
    db::Verification verification;
    verification.run = run;
    verification.problem = problem_id;
    verification.config = config;
    store_.insert_verification(verification);
    db::Measurement measurement;
    measurement.run = run;
    measurement.problem = problem_id;
    measurement.config = config;
    measurement.status = status;
    if (status == db::MeasurementStatus::Ok) {
      measurement.stats = db::TimingStats{median_us, median_us, median_us, median_us, median_us,
                                          median_us, 0,         median_us, median_us};
      measurement.samples_us = {median_us, median_us * 1.01, median_us * 0.99};
    }
    measurement.l2_mode = l2_mode;
    measurement.phase = phase;
    store_.insert_measurement(measurement);
  }

  std::optional<StoredChoice> lookup(const db::Problem& problem, const std::string& family = "cublaslt-f16",
                                     const std::string& gpu_name = "NVIDIA H200",
                                     db::L2Mode l2_mode = db::L2Mode::Cold) {
    return latest_stored_choice(store_, StoredChoiceQuery{problem, family, gpu_name, l2_mode});
  }

  const db::Problem problem_{"f16", 1024, 8192, 8192};
  const AlgoInfo tile_128x256_ = algo(1, 66, 24, 20);
  const AlgoInfo tile_256x128_ = algo(0, 66, 25, 20);
  const AlgoInfo other_ = algo(2, 31, 18, 20);
};

TEST_F(StoredChoiceTest, NothingStoredIsNone) {
  EXPECT_FALSE(lookup(problem_).has_value());
  const db::RunId run = bench_run("2026-11-29T10:00:00.000Z");
  measured(run, {"f16", 16, 8192, 8192}, "cublaslt-f16", tile_128x256_, kBestOfTopKPhase, 20);
  EXPECT_FALSE(lookup(problem_).has_value()) << "another M is another problem";
}

TEST_F(StoredChoiceTest, TheLatestBenchsChoiceOnThatGpuIsReadBack) {
  const db::RunId older = bench_run("2026-11-29T10:00:00.000Z");
  measured(older, problem_, "cublaslt-f16", tile_256x128_, kBestOfTopKPhase, 300.0);
  measured(older, problem_, "cublaslt-f16", tile_128x256_, kTopKPhase, 301.0);
  const db::RunId newer = bench_run("2026-11-30T00:12:03.123Z", "NVIDIA H200", "GPU-bbbb");
  measured(newer, problem_, "cublaslt-f16", tile_256x128_, kTopKPhase, 302.0);
  measured(newer, problem_, "cublaslt-f16", tile_128x256_, kBestOfTopKPhase, 299.5);
  measured(newer, problem_, "cublaslt-f16", other_, kTopKPhase, 350.0);

  const std::optional<StoredChoice> choice = lookup(problem_);
  ASSERT_TRUE(choice.has_value());
  EXPECT_TRUE(same_algorithm(choice->algorithm, tile_128x256_)) << choice->algorithm.describe();
  EXPECT_EQ(choice->algorithm.heuristic_index, 1);
  EXPECT_EQ(choice->run, newer);
  EXPECT_EQ(choice->started_at, "2026-11-30T00:12:03.123Z");
  EXPECT_EQ(choice->gpu_uuid, "GPU-bbbb");
  EXPECT_EQ(choice->phase, kBestOfTopKPhase);
  EXPECT_DOUBLE_EQ(choice->median_us, 299.5);
  EXPECT_EQ(choice->origin(), "run " + std::to_string(db::id_value(newer)) + " of 2026-11-30T00:12:03.123Z");
}

TEST_F(StoredChoiceTest, OtherGpusBaselinesL2ModesAndUnfinishedRunsDoNotCount) {
  const db::RunId chosen = bench_run("2026-11-29T10:00:00.000Z");
  measured(chosen, problem_, "cublaslt-f16", tile_256x128_, kBestOfTopKPhase, 300.0);
  // All later, none applies:
  const db::RunId other_gpu = bench_run("2026-11-30T01:00:00.000Z", "NVIDIA H100 80GB HBM3", "GPU-cccc");
  measured(other_gpu, problem_, "cublaslt-f16", other_, kBestOfTopKPhase, 400.0);
  const db::RunId other_baseline = bench_run("2026-11-30T02:00:00.000Z");
  measured(other_baseline, problem_, "cublaslt-bf16", other_, kBestOfTopKPhase, 310.0);
  const db::RunId warm = bench_run("2026-11-30T03:00:00.000Z");
  measured(warm, problem_, "cublaslt-f16", other_, kBestOfTopKPhase, 250.0, db::L2Mode::Warm);
  const db::RunId unfinished = bench_run("2026-11-30T04:00:00.000Z", "NVIDIA H200", "GPU-aaaa", false);
  measured(unfinished, problem_, "cublaslt-f16", other_, kBestOfTopKPhase, 305.0);
  const db::RunId failed = bench_run("2026-11-30T05:00:00.000Z");
  measured(failed, problem_, "cublaslt-f16", other_, kBestOfTopKPhase, 0, db::L2Mode::Cold,
           db::MeasurementStatus::Failed);

  const std::optional<StoredChoice> choice = lookup(problem_);
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->run, chosen);
  EXPECT_TRUE(same_algorithm(choice->algorithm, tile_256x128_)) << choice->algorithm.describe();
  // Each of them is found when asked for.
  EXPECT_EQ(lookup(problem_, "cublaslt-f16", "NVIDIA H100 80GB HBM3")->run, other_gpu);
  EXPECT_EQ(lookup(problem_, "cublaslt-bf16")->run, other_baseline);
  EXPECT_EQ(lookup(problem_, "cublaslt-f16", "NVIDIA H200", db::L2Mode::Warm)->run, warm);
  EXPECT_FALSE(lookup(problem_, "cublaslt-int8").has_value());
}

TEST_F(StoredChoiceTest, APinnedRunsChoiceIsTheLatestToo) {
  const db::RunId first = bench_run("2026-11-29T10:00:00.000Z");
  measured(first, problem_, "cublaslt-f16", tile_256x128_, kBestOfTopKPhase, 300.0);
  const db::RunId pinned = bench_run("2026-11-30T10:00:00.000Z");
  measured(pinned, problem_, "cublaslt-f16", algo(4, 66, 25, 20), kPinnedPhase, 301.0);
  const std::optional<StoredChoice> choice = lookup(problem_);
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->run, pinned);
  EXPECT_EQ(choice->phase, kPinnedPhase);
  EXPECT_TRUE(same_algorithm(choice->algorithm, tile_256x128_));
  EXPECT_EQ(choice->algorithm.heuristic_index, 4);
}

TEST_F(StoredChoiceTest, UnreadableStoredParamsAreAnError) {
  const db::RunId run = bench_run("2026-11-29T10:00:00.000Z");
  const db::ProblemId problem_id = store_.upsert_problem(problem_);
  const db::ConfigId config = store_.upsert_config({db::ConfigKind::Baseline, "cublaslt-f16", R"({"algo":66})", ""});
  db::Measurement measurement;
  measurement.run = run;
  measurement.problem = problem_id;
  measurement.config = config;
  measurement.stats = db::TimingStats{10, 10, 10, 10, 10, 10, 0, 10, 10};
  measurement.samples_us = {10};
  measurement.phase = kBestOfTopKPhase;
  store_.insert_measurement(measurement);
  try {
    lookup(problem_);
    FAIL() << "no Error";
  } catch (const InputError&) {
    FAIL() << "a database's content is not the user's input";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("not a cuBLASLt algorithm"), std::string::npos) << error.what();
  }
}

// ---- the command line

TEST(PinCommand, WithNoDbIsAnInputErrorNamingTheFlag) {
  std::vector<std::string> arguments{"qtune",   "bench",           "--baseline", "cublaslt-f16", "--shape", "256,256",
                                     "--m",     "1",               "--no-db",    "--pin-algorithm",
                                     "--in-process"};
  std::vector<char*> argv;
  for (auto& argument : arguments) argv.push_back(argument.data());
  testing::internal::CaptureStderr();
  const int status = cli::run_cli(static_cast<int>(argv.size()), argv.data());
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(status, cli::kExitBadInput) << err;
  EXPECT_NE(err.find("--pin-algorithm"), std::string::npos) << err;
  EXPECT_NE(err.find("--no-db"), std::string::npos) << err;
}

TEST(PinCommand, HelpDescribesTheFlag) {
  std::vector<std::string> arguments{"qtune", "bench", "--help"};
  std::vector<char*> argv;
  for (auto& argument : arguments) argv.push_back(argument.data());
  testing::internal::CaptureStdout();
  const int status = cli::run_cli(static_cast<int>(argv.size()), argv.data());
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(status, 0);
  EXPECT_NE(out.find("--pin-algorithm"), std::string::npos) << out;
}

}  // namespace
}  // namespace qtune::baselines
