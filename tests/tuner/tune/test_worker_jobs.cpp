// The worker's one job registry and its serializers, on the CPU: every job is registered in one place, the job
// parameters round-trip, providers are found by name, and the test worker (this binary) serves the jobs qtune's
// worker serves (without a GPU the provider's prepare answers NoGpuError, which proves the job ran).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/common/expect_error.hpp"
#include "tuner/baselines/baseline_bench.hpp"
#include "tuner/measure/worker.hpp"
#include "tuner/tune/worker_jobs.hpp"

namespace qtune::tune {
namespace {

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST(WorkerJobs, OneRegistryListsEveryJob) {
  const std::vector<std::string> names = worker_job_names();
  for (const std::string& job : {std::string(kPrepareJob), std::string(kCandidateJob),
                                 std::string(baselines::kBenchBaselineJob), std::string("selftest-echo"),
                                 std::string("selftest-device"), std::string("selftest-copy")}) {
    EXPECT_TRUE(contains(names, job)) << job;
  }
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
}

CandidateJob sample_job() {
  CandidateJob job;
  job.provider = "wgmma";
  job.problem.gemm = Problem{FormatSpec::parse("w4a16-int4-g128"), 256, 8192, 4096, true};
  job.configuration = "bm=64";
  job.prepare.seed = 42;
  job.prepare.full_verify_max_m = 128;
  job.prepare.verify_rows = 32;
  job.prepare.device = 1;
  job.load.arch = "sm_90a";
  job.load.expected_cache_key = "abc123";
  job.load.cache_directory = "/tmp/qtune-cache";
  job.candidate.verify = false;
  job.candidate.measure.time_budget_s = 0.25;
  job.candidate.measure.l2_flush = measure::L2Flush::Write;
  return job;
}

TEST(WorkerJobs, CandidateJobRoundTripsThroughJson) {
  const CandidateJob job = sample_job();
  const CandidateJob back = nlohmann::json(job).get<CandidateJob>();
  EXPECT_EQ(back.provider, "wgmma");
  EXPECT_EQ(back.problem.gemm.format.to_string(), job.problem.gemm.format.to_string());
  EXPECT_EQ(back.problem.gemm.m, 256);
  EXPECT_EQ(back.problem.gemm.n, 8192);
  EXPECT_EQ(back.problem.gemm.k, 4096);
  EXPECT_TRUE(back.problem.gemm.has_bias);
  EXPECT_EQ(back.configuration, "bm=64");
  EXPECT_EQ(back.prepare.any_configuration, "bm=64");  // the buffers are sized from the candidate's configuration
  EXPECT_EQ(back.prepare.seed, 42u);
  EXPECT_EQ(back.prepare.full_verify_max_m, 128);
  EXPECT_EQ(back.prepare.verify_rows, 32);
  EXPECT_EQ(back.prepare.device, 1);
  EXPECT_EQ(back.load.arch, "sm_90a");
  EXPECT_EQ(back.load.expected_cache_key, "abc123");
  ASSERT_TRUE(back.load.cache_directory.has_value());
  EXPECT_EQ(back.load.cache_directory->string(), "/tmp/qtune-cache");
  EXPECT_FALSE(back.candidate.verify);
  EXPECT_DOUBLE_EQ(back.candidate.measure.time_budget_s, 0.25);
  EXPECT_EQ(back.candidate.measure.l2_flush, measure::L2Flush::Write);
  EXPECT_EQ(back.operands_key(), job.operands_key());
}

TEST(WorkerJobs, OperandsAreKeptPerProblemAndVerificationRows) {
  CandidateJob job = sample_job();
  const std::string key = job.operands_key();
  job.configuration = "bm=128";  // another candidate of the same problem reuses the operands
  EXPECT_EQ(job.operands_key(), key);
  job.problem.gemm.m = 512;
  EXPECT_NE(job.operands_key(), key);
  job = sample_job();
  job.prepare.verify_rows = 8;
  EXPECT_NE(job.operands_key(), key);
}

TEST(WorkerJobs, ABadFieldIsNamed) {
  nlohmann::json params = sample_job();
  params["m"] = "many";
  test_support::expect_input_error([&] { params.get<CandidateJob>(); }, {"m"});
  params = sample_job();
  params.erase("provider");
  test_support::expect_input_error([&] { params.get<CandidateJob>(); }, {"provider"});
}

// A MoE problem travels whole (format, E, top_k, T, N, K, projection, layout, routing and its seed) in one field.
TEST(WorkerJobs, MoeCandidateJobRoundTripsThroughJson) {
  CandidateJob job = sample_job();
  job.provider = "mma-moe";
  job.problem.kind = providers::ProblemKind::Moe;
  job.problem.moe = MoeProblem{.format = FormatSpec::parse("w4a8-int4-fp8"), .experts = 256, .top_k = 8, .tokens = 64,
                               .n = 7168, .k = 2048, .projection = MoeProjection::Down, .layout = MoeLayout::GroupedMasked};
  job.problem.moe.routing = RoutingSpec::parse("zipf:1.5", 7);
  const nlohmann::json json = job;
  EXPECT_EQ(json.at("kind"), "moe");
  EXPECT_FALSE(json.contains("m")) << "a MoE job carries no dense M";
  const CandidateJob back = json.get<CandidateJob>();
  ASSERT_EQ(back.problem.kind, providers::ProblemKind::Moe);
  EXPECT_EQ(back.problem.moe.to_string(), job.problem.moe.to_string());
  EXPECT_EQ(back.problem.moe.routing.seed, 7u);
  EXPECT_EQ(back.operands_key(), job.operands_key());
  // Another token count, layout or routing seed is another problem's operands; another configuration is not.
  CandidateJob other = job;
  other.configuration = "bm=16";
  EXPECT_EQ(other.operands_key(), job.operands_key());
  other.problem.moe.tokens = 128;
  EXPECT_NE(other.operands_key(), job.operands_key());
  other = job;
  other.problem.moe.routing.seed = 8;
  EXPECT_NE(other.operands_key(), job.operands_key());
  other = job;
  other.problem.moe.layout = MoeLayout::TokenIndexed;
  EXPECT_NE(other.operands_key(), job.operands_key());

  // qtune's MoE providers share one prepare per problem (the same experts' layout); a baseline prepares its own.
  other = job;
  other.provider = "wgmma-moe";
  EXPECT_EQ(other.operands_key(), job.operands_key());
  other.provider = "tma-moe";
  EXPECT_EQ(other.operands_key(), job.operands_key());
  other.provider = "cublas-grouped-f16";
  EXPECT_NE(other.operands_key(), job.operands_key());

  nlohmann::json bad = json;
  bad["kind"] = "sparse";
  test_support::expect_input_error([&] { bad.get<CandidateJob>(); }, {"kind", "sparse"});
  bad = json;
  bad["moe"]["top_k"] = 300;
  test_support::expect_input_error([&] { bad.get<CandidateJob>(); }, {"top_k"});
  bad = json;
  bad.erase("moe");
  test_support::expect_input_error([&] { bad.get<CandidateJob>(); }, {"moe"});
}

TEST(WorkerJobs, ProvidersAreFoundByName) {
  EXPECT_EQ(find_provider("mma-moe").name(), "mma-moe");
  EXPECT_EQ(find_provider("wgmma-moe").name(), "wgmma-moe");
  EXPECT_EQ(find_provider("tma-moe").name(), "tma-moe");
  EXPECT_EQ(find_provider("cublas-grouped-f16").name(), "cublas-grouped-f16");
  EXPECT_EQ(find_provider("mma").name(), "mma");
  EXPECT_EQ(find_provider("tma").name(), "tma");
  EXPECT_EQ(find_provider("cublaslt-f16").name(), "cublaslt-f16");
  test_support::expect_input_error([] { find_provider("marlin"); }, {"provider", "marlin", "mma"});
}

TEST(WorkerJobs, InProcessRunsTheSameRegistry) {
  register_worker_jobs();
  const measure::JobOutcome echo = measure::run_job_here("selftest-echo", {{"x", 1}});
  ASSERT_TRUE(echo.ok()) << echo.error;
  EXPECT_EQ(echo.result, (nlohmann::json{{"x", 1}}));
  const measure::JobOutcome unknown = measure::run_job_here("no-such-job", nlohmann::json::object());
  EXPECT_EQ(unknown.status, measure::JobStatus::Error);
  EXPECT_EQ(unknown.error_type, "InputError");
  EXPECT_NE(unknown.error.find("gemm-candidate"), std::string::npos) << unknown.error;  // names the jobs it knows
  const measure::JobOutcome bad = measure::run_job_here(kCandidateJob, {{"provider", "mma"}, {"format", "w9z"}});
  EXPECT_EQ(bad.status, measure::JobStatus::Error);
  EXPECT_EQ(bad.error_type, "InputError") << bad.error;
}

TEST(WorkerJobs, TheTestWorkerServesTheCandidateJobs) {
  measure::Worker worker;
  CandidateJob job = sample_job();
  job.prepare.device = 0;
  const measure::JobOutcome outcome = worker.run(kPrepareJob, nlohmann::json(job), 60);
  // Not "unknown job": the job is registered in the worker, parsed its parameters and reached the provider.
  EXPECT_EQ(outcome.error.find("unknown job"), std::string::npos) << outcome.error;
  if (outcome.error_type != "NoGpuError") GTEST_SKIP() << "a GPU is here; this test checks the answer without one";
  EXPECT_EQ(outcome.status, measure::JobStatus::Error);
}

}  // namespace
}  // namespace qtune::tune
