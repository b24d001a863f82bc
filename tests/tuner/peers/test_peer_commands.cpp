// The peers in qtune's commands, on the CPU: provider names and aliases, the one mapping of a peer's run into qtune's
// result type and database rows, `qtune bench --baseline <peer>` end to end with the tests' fake peer (stored as a
// baseline, reported as live), refusals before anything is stored, Humming's space as peer jobs, and
// `qtune export --humming` from a store holding Humming rows. The GPU side is test_peers_gpu.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>

#include "db/store.hpp"
#include "kernels/error.hpp"
#include "reports/humming_table.hpp"
#include "search/gpu_profile.hpp"
#include "search/humming_space.hpp"
#include "tests/common/expect_error.hpp"
#include "tests/common/scoped_environment.hpp"
#include "tests/common/temp_dir.hpp"
#include "tests/tuner/cli/cli_test_support.hpp"
#include "tests/tuner/peers/peer_test_support.hpp"
#include "tuner/peers/humming_tune.hpp"
#include "tuner/peers/peer_runs.hpp"
#include "tuner/providers/moe_provider.hpp"
#include "tuner/tune/records.hpp"
#include "tuner/tune/tuner.hpp"

namespace qtune::peers {
namespace {

namespace fs = std::filesystem;
using cli::testing::run_qtune;
using test_support::expect_input_error;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string read_all(const fs::path& directory) {
  std::string text;
  for (const auto& entry : fs::recursive_directory_iterator(directory)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream file(entry.path());
    std::stringstream buffer;
    buffer << file.rdbuf();
    text += buffer.str();
  }
  return text;
}

TEST(PeerProviders, AliasesAndListsAsUsersWriteThem) {
  EXPECT_EQ(parse_provider("torch-fp8-rowwise", "--baseline").text(), "torch-w8a8-fp8-ch:out=bf16");
  EXPECT_EQ(parse_provider("deepgemm-w8a8-fp8-block128x128", "--baseline").text(),
            parse_provider_id("deepgemm-w8a8-fp8-block128x128:out=bf16").text());
  EXPECT_EQ(parse_provider("Humming-W4A16-INT4-CH", "--baseline").text(), "humming-w4a16-int4-ch");
  expect_input_error([] { parse_provider("humming", "--baseline"); }, {"--baseline", "humming"});
  for (const ProviderAlias& alias : provider_aliases()) {
    EXPECT_NO_THROW(parse_provider_id(alias.provider)) << alias.alias;
  }

  const std::vector<std::string> items =
      split_provider_list("humming-w4a16-int4-ch, humming-w8a8-fp8-ch:scale=f16,act-scale=token,cublaslt-f16,torch-f16");
  ASSERT_EQ(items.size(), 4u);
  EXPECT_EQ(items[1], "humming-w8a8-fp8-ch:scale=f16,act-scale=token");
  EXPECT_EQ(items[2], "cublaslt-f16");
  EXPECT_TRUE(names_cublaslt_baseline("cublaslt-f16"));
  EXPECT_TRUE(names_cublaslt_baseline("all"));
  EXPECT_FALSE(names_cublaslt_baseline("torch-f16"));
}

PeerResult peer_result(PeerOutcome outcome) {
  PeerResult result;
  result.outcome = outcome;
  result.provider = "fake-f16";
  result.peer_version = "1.0";
  result.config = {{"behaviour", "correct"}};
  if (outcome == PeerOutcome::Measured || outcome == PeerOutcome::Verified || outcome == PeerOutcome::WrongAnswer) {
    PeerVerification check;
    check.passed = outcome != PeerOutcome::WrongAnswer;
    check.relative_error = check.passed ? 1e-4 : 0.5;
    check.tolerance = 1e-2;
    check.summary = check.passed ? "PASS" : "FAIL rel 0.5";
    result.verification = check;
  }
  if (outcome == PeerOutcome::Measured) {
    measure::Measurement measurement;
    measurement.median_us = measurement.p10_us = measurement.p90_us = 12.5;
    measurement.samples_us = {12.5, 12.5};
    measurement.stop_reason = "converged";
    result.measurement = measurement;
  }
  if (!result.ok() && outcome != PeerOutcome::WrongAnswer) {
    result.error = "it went wrong";
    result.error_type = outcome == PeerOutcome::Error ? "exception" : "";
  }
  return result;
}

TEST(PeerResults, MapIntoQtunesCandidateResultAndRowsInOnePlace) {
  using providers::CandidateOutcome;
  const providers::CandidateResult measured = candidate_result(peer_result(PeerOutcome::Measured));
  EXPECT_EQ(measured.outcome, CandidateOutcome::Measured);
  EXPECT_TRUE(measured.verified);
  EXPECT_DOUBLE_EQ(measured.measurement.median_us, 12.5);
  EXPECT_DOUBLE_EQ(measured.max_rel_error, 1e-4);

  const providers::CandidateResult wrong = candidate_result(peer_result(PeerOutcome::WrongAnswer));
  EXPECT_EQ(wrong.outcome, CandidateOutcome::VerificationFailed);
  EXPECT_EQ(wrong.message, "FAIL rel 0.5");
  const tune::CandidateRecords wrong_rows = tune::candidate_records(wrong, db::RunId{1}, db::ProblemId{1}, db::ConfigId{1}, "peer");
  EXPECT_EQ(wrong_rows.verification.status, db::VerificationStatus::Failed);
  EXPECT_FALSE(wrong_rows.measurement.has_value());  // a wrong answer is never timed

  EXPECT_EQ(candidate_result(peer_result(PeerOutcome::Verified)).outcome, CandidateOutcome::Error);
  const providers::CandidateResult error = candidate_result(peer_result(PeerOutcome::Error));
  EXPECT_EQ(error.outcome, CandidateOutcome::Error);
  EXPECT_EQ(error.message, "exception: it went wrong");
  const providers::CandidateResult fault = candidate_result(peer_result(PeerOutcome::Fault));
  EXPECT_EQ(fault.outcome, CandidateOutcome::Crashed);
  EXPECT_TRUE(contains(fault.message, "fault"));
  EXPECT_EQ(candidate_result(peer_result(PeerOutcome::Crashed)).outcome, CandidateOutcome::Crashed);
  const providers::CandidateResult timeout = candidate_result(peer_result(PeerOutcome::Timeout));
  EXPECT_EQ(timeout.outcome, CandidateOutcome::Timeout);
  const tune::CandidateRecords timeout_rows = tune::candidate_records(timeout, db::RunId{1}, db::ProblemId{1}, db::ConfigId{1}, "peer");
  EXPECT_EQ(timeout_rows.verification.status, db::VerificationStatus::Crashed);
  ASSERT_TRUE(timeout_rows.measurement.has_value());
  EXPECT_EQ(timeout_rows.measurement->status, db::MeasurementStatus::Timeout);

  PeerResult nan = peer_result(PeerOutcome::WrongAnswer);
  nan.verification->nan_count = 3;
  EXPECT_TRUE(std::isinf(candidate_result(nan).max_rel_error));

  EXPECT_EQ(config_params(peer_result(PeerOutcome::Measured)),
            (nlohmann::json{{"config", {{"behaviour", "correct"}}}, {"peer_version", "1.0"}}));
}

TEST(BenchCommand, AFakePeerIsStoredLikeABaselineAndReportedAsLive) {
  QTUNE_REQUIRE_PEER_PYTHON(environment);
  (void)environment;  // the command finds its own
  test_support::TempDir dir;
  const std::string db = (dir.path() / "qtune.db").string();
  const cli::testing::CliResult bench =
      run_qtune({"bench", "--baseline", "fake-f16", "--test-peers", "--shape", "64,128", "--m", "3,5", "--bandwidth",
                 "datasheet", "--db", db});
  ASSERT_EQ(bench.status, 0) << bench.err << bench.out;
  EXPECT_TRUE(contains(bench.out, "fake-f16")) << bench.out;

  db::Store store = db::Store::open_read_only(db);
  const std::vector<db::KernelConfigRecord> configs = store.list_configs();
  ASSERT_EQ(configs.size(), 1u);
  EXPECT_EQ(configs[0].kind, db::ConfigKind::Baseline);
  EXPECT_EQ(configs[0].family, "fake-f16");
  const nlohmann::json params = nlohmann::json::parse(configs[0].params_json);
  EXPECT_EQ(params.at("peer_version"), "1.0");
  EXPECT_EQ(params.at("config"), (nlohmann::json{{"behaviour", "correct"}}));
  ASSERT_EQ(store.list_problems().size(), 2u);
  EXPECT_EQ(store.list_problems()[0].format, "f16");
  const auto verifications = store.list_verifications();
  ASSERT_EQ(verifications.size(), 2u);
  for (const auto& verification : verifications) EXPECT_EQ(verification.status, db::VerificationStatus::Passed);
  const auto measurements = store.list_measurements();
  ASSERT_EQ(measurements.size(), 2u);
  for (const auto& measurement : measurements) {
    EXPECT_EQ(measurement.status, db::MeasurementStatus::Ok);
    EXPECT_EQ(measurement.phase, "peer");
    ASSERT_TRUE(measurement.stats.has_value());
    EXPECT_GT(measurement.stats->median_us, 0);
  }
  EXPECT_EQ(store.list_runs().at(0).kind, "bench");

  const fs::path report_dir = dir.path() / "report";
  const cli::testing::CliResult report = run_qtune({"report", "--db", db, "-o", report_dir.string()});
  ASSERT_EQ(report.status, 0) << report.err << report.out;
  EXPECT_TRUE(contains(read_all(report_dir), "fake-f16 (live)"));
}

TEST(BenchCommand, AWrongAnsweringPeerIsAFailedBaselineNotACrash) {
  QTUNE_REQUIRE_PEER_PYTHON(environment);
  PeerHost host(environment);
  tune::BenchRequest request;
  request.n = 64;
  request.k = 128;
  const tune::BenchTarget target = bench_target(host, parse_provider_id("fake-w4a16-int4-ch"), request);
  EXPECT_EQ(target.config_family, "fake-w4a16-int4-ch");
  EXPECT_EQ(target.problem_format, "w4a16-int4-ch");
  EXPECT_GT(target.traffic({16, 64, 128}).weight_bytes, 64 * 128 / 2.0);  // int4 codes plus their scales
  const tune::SelfMeasured measured = target.measure_self({3, 64, 128});
  EXPECT_EQ(measured.candidate.outcome, providers::CandidateOutcome::Measured) << measured.candidate.message;
  EXPECT_TRUE(measured.failure.empty());
  ASSERT_EQ(measured.result.variants.size(), 1u);
  EXPECT_EQ(measured.result.best, 0);
  EXPECT_EQ(measured.result.variants[0].label, "v1.0");
}

TEST(BenchCommand, AMissingPeerIsRefusedInOneLineBeforeAnythingIsStored) {
  QTUNE_REQUIRE_PEER_PYTHON(environment);
  (void)environment;  // the command finds its own
  test_support::TempDir dir;
  const fs::path db = dir.path() / "qtune.db";
  for (const char* provider : {"absent-w4a16-int4-ch", "nosuch-f16"}) {
    const cli::testing::CliResult bench =
        run_qtune({"bench", "--baseline", std::string("cublaslt-f16,") + provider, "--test-peers", "--shape", "64,128",
                   "--m", "3", "--db", db.string()});
    EXPECT_EQ(bench.status, 2) << bench.err;
    EXPECT_TRUE(contains(bench.err, provider)) << bench.err;
    EXPECT_EQ(cli::testing::occurrences(bench.err, "\n"), 1u) << bench.err;
    EXPECT_FALSE(fs::exists(db));
  }
  const cli::testing::CliResult absent =
      run_qtune({"bench", "--baseline", "absent-w4a16-int4-ch", "--test-peers", "--shape", "64,128", "--m", "3", "--db",
                 db.string()});
  EXPECT_TRUE(contains(absent.err, "pip install absent-peer")) << absent.err;
}

TEST(TuneCommand, HummingMissingIsRefusedInOneLineBeforeAnythingIsStored) {
  QTUNE_REQUIRE_PEER_PYTHON(environment);
  {
    PeerHost host(environment);
    std::string why;
    if (humming_available(host, &why)) GTEST_SKIP() << "Humming is installed here: this test needs it missing";
  }
  test_support::TempDir dir;
  const fs::path db = dir.path() / "qtune.db";
  const cli::testing::CliResult tune =
      run_qtune({"tune", "--family", "humming", "--test-peers", "--format", "w4a16-int4-ch", "--shape", "4096,4096",
                 "--m", "16", "--gpu", "h200", "--db", db.string()});
  EXPECT_EQ(tune.status, 2) << tune.err;
  EXPECT_TRUE(contains(tune.err, "humming-w4a16-int4-ch")) << tune.err;
  EXPECT_EQ(cli::testing::occurrences(tune.err, "\n"), 1u) << tune.err;
  EXPECT_FALSE(fs::exists(db));
}

// `tune --moe-baseline <peer>` settles the peer before anything runs: a peer that is missing, runs no MoE GEMMs or
// not in the tune's format exits 2 in one line naming the provider, and no database is made.
TEST(TuneCommand, AMoeBaselinePeerThatCannotRunIsRefusedInOneLineBeforeAnythingIsStored) {
  QTUNE_REQUIRE_PEER_PYTHON(environment);
  bool humming_installed = false;
  {
    PeerHost host(environment);
    std::string why;
    humming_installed = humming_available(host, &why);
  }
  test_support::TempDir dir;
  const fs::path db = dir.path() / "qtune.db";
  const auto refused = [&](const std::string& baseline, const std::vector<std::string>& parts) {
    const cli::testing::CliResult tune =
        run_qtune({"tune", "--moe-baseline", baseline, "--test-peers", "--format", "w4a16-int4-ch", "--model",
                   "mixtral-8x7b", "--gemms", "moe", "--tokens", "1", "--gpu", "h200", "--db", db.string()});
    EXPECT_EQ(tune.status, 2) << baseline << ": " << tune.err;
    for (const std::string& part : parts) EXPECT_TRUE(contains(tune.err, part)) << baseline << ": " << tune.err;
    EXPECT_EQ(cli::testing::occurrences(tune.err, "\n"), 1u) << tune.err;
    EXPECT_FALSE(fs::exists(db)) << baseline;
  };
  refused("absent", {"absent-w4a16-int4-ch", "pip install absent-peer"});
  refused("nosuch", {"nosuch-w4a16-int4-ch", "no peer 'nosuch'"});
  refused("fake-w4a16-int4-g128", {"--moe-baseline", "none of the tune's --format"});
  refused("fake-", {"--moe-baseline: unknown MoE baseline 'fake-'"});
  if (!humming_installed) refused("humming", {"humming-w4a16-int4-ch", "Humming"});
}

// A MoE baseline job run by a peer: qtune's MoE operands, the peer's default configuration, verified against the MoE
// reference and measured (the fake peer times itself on the host), with the peer's version as the stored params.
TEST(MoeBaselineJob, RunsThePeersDefaultAndReturnsItsParams) {
  QTUNE_REQUIRE_PEER_PYTHON(environment);
  PeerHost host(environment);
  tune::CandidateJob job;
  job.provider = "fake-w4a16-int4-g128";
  job.problem = providers::moe_provider_problem(MoeProblem{.format = FormatSpec::parse("w4a16-int4-g128"), .experts = 8,
                                                           .top_k = 2, .tokens = 2, .n = 32, .k = 128,
                                                           .projection = MoeProjection::Down});
  job.prepare.seed = 7;
  const tune::MoeBaselineResult measured = run_moe_job(host, job, 60);
  EXPECT_EQ(measured.result.outcome, providers::CandidateOutcome::Measured) << measured.result.message;
  EXPECT_TRUE(measured.result.verified);
  EXPECT_EQ(measured.result.rows_checked, 2);  // down: a row per token
  EXPECT_GT(measured.result.measurement.median_us, 0);
  EXPECT_EQ(measured.params.at("peer_version"), "1.0");
  EXPECT_EQ(measured.params.at("config"), (nlohmann::json{{"behaviour", "correct"}}));
  // A provider that runs no MoE GEMMs is a failed row, not an exception.
  job.provider = "fake-f16";
  const tune::MoeBaselineResult refused = run_moe_job(host, job, 60);
  EXPECT_EQ(refused.result.outcome, providers::CandidateOutcome::Error);
  EXPECT_TRUE(contains(refused.result.message, "for MoE GEMMs")) << refused.result.message;
}

TEST(HummingFamily, IsSplitFromQtunesFamiliesInOnePlace) {
  EXPECT_EQ(split_families("auto").kernel_families, "auto");
  EXPECT_EQ(split_families("auto").humming, HummingChoice::IfAvailable);
  EXPECT_EQ(split_families("mma,humming,wgmma").kernel_families, "mma,wgmma");
  EXPECT_EQ(split_families("mma,humming,wgmma").humming, HummingChoice::Required);
  EXPECT_EQ(split_families("humming").kernel_families, "");
  EXPECT_EQ(split_families("mma").humming, HummingChoice::No);
  EXPECT_EQ(humming_provider(FormatSpec::parse("w4a16-int4-ch")).text(), "humming-w4a16-int4-ch");
}

TEST(HummingTune, ACandidateBuiltAheadIsNotGivenTheCompilesTimeout) {
  HummingTuneOptions options;
  options.tune.timeout_s = 30;
  EXPECT_EQ(humming_run_timeout_s(options, false), kHummingMinTimeoutS);  // its run may compile it
  EXPECT_EQ(humming_run_timeout_s(options, true), kHummingBuiltTimeoutS);  // a hang costs 90 s, not 600
  EXPECT_LT(kHummingBuiltTimeoutS, kHummingMinTimeoutS);
  options.tune.timeout_s = 1200;
  EXPECT_EQ(humming_run_timeout_s(options, true), 1200);  // the user's longer --timeout wins
}

const nlohmann::json kSm90Pick = nlohmann::json::parse(R"({
  "block_shape": [16, 256, 64], "warp_shape": [16, 32, 64], "use_stream_k": true, "use_f16_accum": false,
  "num_stages": 4, "use_warp_spec": true, "use_tma": true, "use_mbarrier": true})");

TEST(HummingFamily, CandidatesBecomePeerJobsNearestToHummingsPickFirst) {
  const KernelConfig pick = search::HummingSpace::from_tuning_config(kSm90Pick);
  EXPECT_EQ(humming_job_config(pick), (nlohmann::json{{"tuning_config", search::HummingSpace::tuning_config(pick)}}));
  EXPECT_EQ(search::HummingSpace::from_tuning_config(humming_job_config(pick).at("tuning_config")), pick);

  // What the peer reports it ran for an empty config (Humming's heuristic) is read back as a point of the space.
  const std::optional<KernelConfig> heuristic = humming_heuristic({{"heuristic", kSm90Pick}});
  ASSERT_TRUE(heuristic.has_value());
  EXPECT_EQ(*heuristic, pick);
  std::string why;
  EXPECT_FALSE(humming_heuristic({{"tuning_config", kSm90Pick}}, &why).has_value());
  EXPECT_TRUE(contains(why, "did not say")) << why;
  nlohmann::json unknown = kSm90Pick;
  unknown["use_f16_accum"] = true;  // a field the space does not tune, changed: not a point of it
  EXPECT_FALSE(humming_heuristic({{"heuristic", unknown}}, &why).has_value());
  EXPECT_TRUE(contains(why, "no point")) << why;

  const ArchLimits limits = search::limits_of_profile(search::gpu_profile_by_name("h200"));
  const Problem problem{FormatSpec::parse("w4a16-int4-ch"), 16, 4096, 4096};
  search::SpaceEnumeration space;
  const std::vector<KernelConfig> candidates = humming_candidates(problem, limits, false, pick, &space);
  ASSERT_GT(candidates.size(), 2u);
  EXPECT_GT(space.total, space.candidates.size());
  EXPECT_EQ(std::count(candidates.begin(), candidates.end(), pick), 0);  // measured as the heuristic already
  const auto differing = [&](const KernelConfig& config) {
    std::size_t count = 0;
    for (const auto& [name, value] : config.params) count += pick.params.at(name) != value ? 1 : 0;
    return count;
  };
  for (std::size_t i = 1; i < candidates.size(); ++i) EXPECT_LE(differing(candidates[i - 1]), differing(candidates[i]));
  EXPECT_EQ(differing(candidates.front()), 1u);
  for (const KernelConfig& config : candidates) {
    EXPECT_TRUE(search::HummingSpace::check(config, problem, limits).valid) << config.to_string();
  }
}

// `tune --family humming`'s loop on the CPU, with the tests' fake peer standing in for Humming (it runs any
// TuningConfig the same way and names no heuristic pick): each candidate is stored as a humming config with its
// verification and measurement, the fastest becomes the winner, and a rerun reuses what was measured.
TEST(HummingTune, StoresEachCandidateAndAWinnerAndARerunReusesThem) {
  QTUNE_REQUIRE_PEER_PYTHON(environment);
  PeerHost host(environment);
  test_support::TempDir dir;
  const fs::path db = dir.path() / "qtune.db";
  const tune::TuneTarget target = tune::target_from_profile(search::gpu_profile_by_name("h200"));
  HummingTuneOptions options;
  options.peer = "fake";
  options.tune.problems = {Problem{FormatSpec::parse("w4a16-int4-ch"), 1, 256, 256}};
  options.measure = tune::default_measure_settings();
  options.default_evaluations = 2;
  ASSERT_EQ(humming_problems(host, options.tune.problems, nullptr, "fake").size(), 1u);

  const tune::TuneReport first = run_humming_tune(options, target, db, host);
  ASSERT_EQ(first.reports.size(), 1u);
  const tune::ProblemReport& problem = first.reports[0];
  EXPECT_FALSE(problem.heuristic.has_value());  // the fake names no pick
  EXPECT_GT(problem.after_compile, 2u);
  EXPECT_EQ(problem.evaluations, 2u);
  EXPECT_EQ(problem.measured, 3u);  // the pick's run and two candidates
  EXPECT_EQ(problem.invalid, 0u);
  ASSERT_TRUE(problem.winner.has_value());
  EXPECT_EQ(problem.winner->family, "humming");
  EXPECT_EQ(first.winners, 1u);
  EXPECT_FALSE(problem.pruned_pre_compile.empty());
  {
    db::Store store = db::Store::open_read_only(db);
    std::size_t humming_configs = 0;
    for (const db::KernelConfigRecord& config : store.list_configs()) {
      EXPECT_EQ(config.family, "humming");
      EXPECT_EQ(config.kind, db::ConfigKind::Kernel);
      EXPECT_EQ(config.source_hash, "humming 1.0");
      ++humming_configs;
    }
    EXPECT_EQ(humming_configs, 2u);
    const auto measurements = store.list_measurements();
    ASSERT_EQ(measurements.size(), 2u);
    for (const auto& measurement : measurements) {
      EXPECT_EQ(measurement.status, db::MeasurementStatus::Ok);
      EXPECT_EQ(measurement.phase, "exhaustive");
    }
    for (const auto& verification : store.list_verifications()) EXPECT_EQ(verification.status, db::VerificationStatus::Passed);
    const auto winners = store.list_winners();
    ASSERT_EQ(winners.size(), 1u);
    EXPECT_EQ(winners[0].gpu, "h200");
    EXPECT_TRUE(contains(store.list_runs().at(0).notes, "\"family\":\"humming\""));
    EXPECT_FALSE(store.list_pruning_counts().empty());
  }

  const tune::TuneReport rerun = run_humming_tune(options, target, db, host);
  ASSERT_EQ(rerun.reports.size(), 1u);
  EXPECT_EQ(rerun.reports[0].reused, 2u);
  EXPECT_EQ(rerun.reports[0].measured, 1u);  // only the pick runs again
  ASSERT_TRUE(rerun.reports[0].winner.has_value());
  EXPECT_EQ(*rerun.reports[0].winner, *problem.winner);

  const fs::path table = dir.path() / "h200-humming.json";
  const cli::testing::CliResult exported = run_qtune({"export", "--db", db.string(), "--humming", table.string()});
  EXPECT_EQ(exported.status, 0) << exported.err;
  EXPECT_TRUE(fs::exists(table));
}

// What the fake peer's log (QTUNE_FAKE_PEER_LOG) says: one JSON object per build or run.
std::vector<nlohmann::json> fake_log(const fs::path& path) {
  std::vector<nlohmann::json> events;
  std::ifstream file(path);
  for (std::string line; std::getline(file, line);) {
    if (!line.empty()) events.push_back(nlohmann::json::parse(line));
  }
  return events;
}

// Humming's kernels are built ahead, by several peer workers at once, before anything is measured: the builds
// overlap, each planned candidate is built once and every build ends before the first run; a kernel the (fake)
// compiler refuses is that candidate's failure, stored with the compiler's line, and never run.
TEST(HummingTune, BuildsThePlannedKernelsAheadInParallelAndRecordsARefusedBuild) {
  QTUNE_REQUIRE_PEER_PYTHON(environment);
  test_support::TempDir dir;
  const fs::path db = dir.path() / "qtune.db";
  const fs::path log = dir.path() / "fake.log";
  const tune::TuneTarget target = tune::target_from_profile(search::gpu_profile_by_name("h200"));
  const Problem problem{FormatSpec::parse("w4a16-int4-ch"), 1, 256, 256};
  const std::vector<KernelConfig> candidates = humming_candidates(problem, target.limits, false, std::nullopt);
  ASSERT_GE(candidates.size(), 4u);
  std::vector<std::string> texts;
  for (std::size_t i = 0; i < 4; ++i) texts.push_back(search::HummingSpace::tuning_config(candidates[i]).dump());
  const test_support::ScopedEnvironment seconds("QTUNE_FAKE_COMPILE_SECONDS", "1");
  const test_support::ScopedEnvironment refused("QTUNE_FAKE_COMPILE_FAIL", texts[1].c_str());
  const test_support::ScopedEnvironment logged("QTUNE_FAKE_PEER_LOG", log.c_str());
  PeerHost host(environment);
  HummingTuneOptions options;
  options.peer = "fake";
  options.tune.problems = {problem};
  options.measure = tune::default_measure_settings();
  options.default_evaluations = 4;
  options.compile_workers = 4;

  const tune::TuneReport report = run_humming_tune(options, target, db, host);
  ASSERT_EQ(report.reports.size(), 1u);
  EXPECT_EQ(report.reports[0].evaluations, 4u);
  EXPECT_EQ(report.reports[0].measured, 4u) << "the pick's run and three candidates; the refused one is not run";
  EXPECT_EQ(report.reports[0].invalid, 1u);

  std::vector<nlohmann::json> builds;
  std::vector<nlohmann::json> runs;
  for (const nlohmann::json& event : fake_log(log)) (event.at("event") == "compile" ? builds : runs).push_back(event);
  ASSERT_EQ(builds.size(), 4u) << "each planned candidate built once (the fake lists no rules of its own)";
  std::set<std::string> built;
  std::set<int> pids;
  double last_end = 0;
  bool overlap = false;
  for (const nlohmann::json& build : builds) {
    built.insert(build.at("config").get<std::string>());
    pids.insert(build.at("pid").get<int>());
    last_end = std::max(last_end, build.at("end").get<double>());
    for (const nlohmann::json& other : builds) {
      overlap = overlap || (&other != &build && other.at("start").get<double>() < build.at("end").get<double>() &&
                            build.at("start").get<double>() < other.at("end").get<double>());
    }
  }
  EXPECT_EQ(built, std::set<std::string>(texts.begin(), texts.end()));
  EXPECT_GE(pids.size(), 2u) << "built by several workers";
  EXPECT_TRUE(overlap) << "no two of the 1 s builds of four workers ran at once";
  ASSERT_EQ(runs.size(), 4u);
  std::set<std::string> ran;
  for (const nlohmann::json& run : runs) {
    EXPECT_GE(run.at("start").get<double>(), last_end) << "a run before every build ended: " << run;
    ran.insert(run.at("config").get<std::string>());
  }
  EXPECT_EQ(ran, (std::set<std::string>{"", texts[0], texts[2], texts[3]})) << "the pick ({}) and the built ones";

  db::Store store = db::Store::open_read_only(db);
  const std::optional<db::ConfigId> config = store.find_config(tune::config_record(candidates[1], "humming 1.0"));
  ASSERT_TRUE(config.has_value());
  db::RowFilter filter;
  filter.config = *config;
  const auto checks = store.list_verifications(filter);
  ASSERT_EQ(checks.size(), 1u);
  EXPECT_EQ(checks[0].status, db::VerificationStatus::Invalid);
  EXPECT_TRUE(contains(checks[0].message, "UnsupportedError")) << checks[0].message;
  EXPECT_TRUE(contains(checks[0].message, "ptxas error")) << checks[0].message;
}

// A store holding what `qtune tune --family humming` writes: a run on the H200, a problem, Humming configs with
// their verifications and measurements.
void store_humming_rows(const fs::path& path, const std::string& format, std::int64_t m, double fast_us) {
  db::Store store = db::Store::open(path);
  db::RunInfo run = tune::run_info_of_this_build("tune");
  run.gpu_name = "NVIDIA H200";
  run.gpu_profile = "h200";
  run.sm = 90;
  run.sm_count = 132;
  const db::RunId run_id = store.insert_run(run);
  const ArchLimits limits = search::limits_of_profile(search::gpu_profile_by_name("h200"));
  const Problem problem{FormatSpec::parse(format), m, 4096, 4096};
  const db::ProblemId problem_id = store.upsert_problem({problem.format.to_string(), m, 4096, 4096});
  const std::vector<KernelConfig> candidates = humming_candidates(problem, limits, false, std::nullopt);
  for (std::size_t i = 0; i < 2; ++i) {
    const db::ConfigId config = store.upsert_config(tune::config_record(candidates.at(i), "humming 0.1"));
    providers::CandidateResult result;
    result.outcome = providers::CandidateOutcome::Measured;
    result.verified = true;
    result.max_rel_error = 1e-3;
    result.tolerance = 1e-2;
    measure::Measurement& time = result.measurement;
    time.median_us = i == 0 ? fast_us : 2 * fast_us;  // every statistic of one sample
    time.p10_us = time.p90_us = time.min_us = time.max_us = time.mean_us = time.ci_low_us = time.ci_high_us = time.median_us;
    time.samples_us = {time.median_us};
    const tune::CandidateRecords rows = tune::candidate_records(result, run_id, problem_id, config, "exhaustive");
    store.insert_verification(rows.verification);
    store.insert_measurement(*rows.measurement);
  }
  store.finish_run(run_id, db::RunStatus::Completed);
}

TEST(ExportCommand, WritesTheHummingTableOfTheStoredHummingResults) {
  test_support::TempDir dir;
  const fs::path db = dir.path() / "qtune.db";
  store_humming_rows(db, "w4a16-int4-ch", 16, 10);
  store_humming_rows(db, "w4a16-int4-ch", 64, 20);
  const fs::path out = dir.path() / "h200-humming.json";
  const cli::testing::CliResult exported = run_qtune({"export", "--db", db.string(), "--humming", out.string()});
  ASSERT_EQ(exported.status, 0) << exported.err;
  EXPECT_TRUE(contains(exported.out, "1 Humming layer(s) from 2 tuned problem(s) on h200")) << exported.out;
  std::ifstream file(out);
  const reports::HummingTable table = reports::humming_table_from_json(nlohmann::json::parse(file));
  EXPECT_EQ(table.gpu, "h200");
  EXPECT_EQ(table.device_name, "NVIDIA H200");
  ASSERT_EQ(table.layers.size(), 1u);
  EXPECT_EQ(table.layers[0].layer.n, 4096);
  ASSERT_FALSE(table.layers[0].ranges.empty());
  EXPECT_DOUBLE_EQ(table.layers[0].ranges.front().buckets.front().median_us, 10);  // the faster of the two configs

  // --gpu names a GPU without Humming results: one line naming --gpu, nothing written.
  const fs::path other = dir.path() / "other.json";
  const cli::testing::CliResult wrong_gpu =
      run_qtune({"export", "--db", db.string(), "--gpu", "b200", "--humming", other.string()});
  EXPECT_EQ(wrong_gpu.status, 2);
  EXPECT_TRUE(contains(wrong_gpu.err, "--gpu")) << wrong_gpu.err;
  EXPECT_TRUE(contains(wrong_gpu.err, "h200")) << wrong_gpu.err;
  EXPECT_FALSE(fs::exists(other));
}

TEST(ExportCommand, AStoreWithoutHummingResultsNamesGpu) {
  test_support::TempDir dir;
  const fs::path db = dir.path() / "qtune.db";
  db::Store::open(db);
  const fs::path out = dir.path() / "h.json";
  const cli::testing::CliResult exported = run_qtune({"export", "--db", db.string(), "--humming", out.string()});
  EXPECT_EQ(exported.status, 2);
  EXPECT_TRUE(contains(exported.err, "--gpu")) << exported.err;
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace qtune::peers
