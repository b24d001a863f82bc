// The one mapping of results into database rows (tuner/tune/records.hpp), which tune, compile and bench share.
#include <gtest/gtest.h>

#include <limits>
#include <optional>
#include <tuple>

#include "tuner/tune/records.hpp"

namespace qtune::tune {
namespace {

using providers::CandidateOutcome;
using providers::CandidateResult;

const db::RunId kRun{7};
const db::ProblemId kProblem{3};
const db::ConfigId kConfig{5};

CandidateResult result_of(CandidateOutcome outcome) {
  CandidateResult result;
  result.outcome = outcome;
  result.max_rel_error = 1e-3;
  result.tolerance = 5e-3;
  result.verification_summary = "PASS rel 1e-3";
  result.message = "what happened";
  return result;
}

TEST(CandidateRecords, MeasuredIsAPassedCheckAndAnOkMeasurement) {
  CandidateResult result = result_of(CandidateOutcome::Measured);
  result.verified = true;
  result.measurement.median_us = 9.5;
  result.measurement.ci_high_us = 9.6;
  result.measurement.samples_us = {9.4, 9.5, 9.6};
  result.measurement.stop_reason = "converged";
  result.measurement.throttled = true;
  const CandidateRecords records = candidate_records(result, kRun, kProblem, kConfig, "exhaustive");
  EXPECT_EQ(records.verification.run, kRun);
  EXPECT_EQ(records.verification.problem, kProblem);
  EXPECT_EQ(records.verification.config, kConfig);
  EXPECT_EQ(records.verification.status, db::VerificationStatus::Passed);
  EXPECT_EQ(records.verification.max_rel_error, 1e-3);
  EXPECT_EQ(records.verification.tolerance, 5e-3);
  EXPECT_EQ(records.verification.message, "PASS rel 1e-3");
  ASSERT_TRUE(records.measurement.has_value());
  EXPECT_EQ(records.measurement->status, db::MeasurementStatus::Ok);
  EXPECT_EQ(records.measurement->phase, "exhaustive");
  ASSERT_TRUE(records.measurement->stats.has_value());
  EXPECT_EQ(records.measurement->stats->median_us, 9.5);
  EXPECT_EQ(records.measurement->stats->ci_high_us, 9.6);
  EXPECT_EQ(records.measurement->samples_us.size(), 3u);
  EXPECT_EQ(records.measurement->sample_count, 3);
  EXPECT_EQ(records.measurement->message, "converged");
  EXPECT_TRUE(records.measurement->throttled);
}

TEST(CandidateRecords, AFailedCheckStoresNoMeasurement) {
  CandidateResult result = result_of(CandidateOutcome::VerificationFailed);
  result.max_rel_error = std::numeric_limits<double>::infinity();
  const CandidateRecords records = candidate_records(result, kRun, kProblem, kConfig, "heuristic");
  EXPECT_EQ(records.verification.status, db::VerificationStatus::Failed);
  EXPECT_FALSE(records.verification.max_rel_error.has_value());  // infinity is not stored
  EXPECT_EQ(records.verification.tolerance, 5e-3);
  EXPECT_EQ(records.verification.message, "what happened");
  EXPECT_FALSE(records.measurement.has_value());
}

TEST(CandidateRecords, ErrorsCrashesAndTimeouts) {
  const CandidateRecords error = candidate_records(result_of(CandidateOutcome::Error), kRun, kProblem, kConfig, "random");
  EXPECT_EQ(error.verification.status, db::VerificationStatus::Invalid);
  ASSERT_TRUE(error.measurement.has_value());
  EXPECT_EQ(error.measurement->status, db::MeasurementStatus::Failed);
  EXPECT_EQ(error.measurement->message, "what happened");

  CandidateResult checked_then_failed = result_of(CandidateOutcome::Error);
  checked_then_failed.verified = true;  // bench: the check passed, the timing failed
  const CandidateRecords timing = candidate_records(checked_then_failed, kRun, kProblem, kConfig, "top-k");
  EXPECT_EQ(timing.verification.status, db::VerificationStatus::Passed);
  EXPECT_EQ(timing.verification.message, "PASS rel 1e-3");
  ASSERT_TRUE(timing.measurement.has_value());
  EXPECT_EQ(timing.measurement->status, db::MeasurementStatus::Failed);

  const CandidateRecords crash = candidate_records(result_of(CandidateOutcome::Crashed), kRun, kProblem, kConfig, "random");
  EXPECT_EQ(crash.verification.status, db::VerificationStatus::Crashed);
  EXPECT_EQ(crash.measurement->status, db::MeasurementStatus::Crashed);

  const CandidateRecords timeout = candidate_records(result_of(CandidateOutcome::Timeout), kRun, kProblem, kConfig, "random");
  EXPECT_EQ(timeout.verification.status, db::VerificationStatus::Crashed);
  EXPECT_EQ(timeout.verification.message, "timeout: what happened");
  EXPECT_EQ(timeout.measurement->status, db::MeasurementStatus::Timeout);
}

TEST(CompileRecord, ResourcesOfABuildAndTheLogOfAFailure) {
  const Instantiation instantiation{KernelConfig::parse("bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=1,raster=0", "mma"),
                                    FormatSpec::parse("w4a16-int4-ch"), "sm_90a"};
  InstantiationResult built;
  built.ok = true;
  built.cache_key = "key";
  built.compile_seconds = 1.5;
  built.resources.registers = 128;
  built.resources.static_shared_bytes = 1024;
  built.resources.stack_frame_bytes = 16;
  built.spill_store_bytes = 8;
  built.spill_load_bytes = 4;
  const db::CompileResult row = compile_record(kRun, kConfig, instantiation, built);
  EXPECT_EQ(row.status, db::CompileStatus::Ok);
  EXPECT_EQ(std::make_tuple(row.format, row.arch, row.cache_key), std::make_tuple("w4a16-int4-ch", "sm_90a", "key"));
  EXPECT_EQ(row.compile_seconds, 1.5);
  // Registers, static shared bytes, stack, spilled stores and loads.
  EXPECT_EQ(std::make_tuple(row.registers, row.shared_bytes, row.stack_bytes, row.spill_store_bytes, row.spill_load_bytes),
            std::make_tuple(std::optional<int>(128), std::optional<int>(1024), std::optional<int>(16), std::optional<int>(8),
                            std::optional<int>(4)));

  built.cache_hit = true;  // a cache hit compiled nothing: no time
  EXPECT_FALSE(compile_record(kRun, kConfig, instantiation, built).compile_seconds.has_value());

  InstantiationResult failed;
  failed.message = "error: no";
  const db::CompileResult failed_row = compile_record(kRun, kConfig, instantiation, failed);
  EXPECT_EQ(failed_row.status, db::CompileStatus::Failed);
  EXPECT_EQ(failed_row.message, "error: no");
  EXPECT_FALSE(failed_row.registers.has_value());

  const db::KernelConfig config = config_record(instantiation.config, "sources-1");
  EXPECT_EQ(config.kind, db::ConfigKind::Kernel);
  EXPECT_EQ(config.family, "mma");
  EXPECT_EQ(config.source_hash, "sources-1");
  EXPECT_EQ(nlohmann::json::parse(config.params_json).at("bm"), 16);
}

}  // namespace
}  // namespace qtune::tune
