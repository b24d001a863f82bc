// The providers' one measuring sequence on the CPU, with a fake provider: poison before launch before verify, a
// failed check is never measured, and the result type's serializer (worker -> parent) round-trips.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "tests/common/expect_error.hpp"
#include "tuner/providers/family_provider.hpp"
#include "tuner/providers/pipeline.hpp"

namespace qtune::providers {
namespace {

// Records the calls it gets; its check passes or fails as told.
class FakeRunnable final : public Runnable {
 public:
  explicit FakeRunnable(bool passes) : passes_(passes) {}
  void poison_output() override { calls.push_back("poison"); }
  void launch(CUstream) override { calls.push_back("launch"); }
  Check verify() override {
    calls.push_back("verify");
    Check check;
    check.passed = passes_;
    check.relative_error = passes_ ? 1e-4 : std::numeric_limits<double>::infinity();
    check.tolerance = 5e-3;
    check.rows_checked = 16;
    check.unwritten = passes_ ? 0 : 3;
    check.summary = passes_ ? "PASS (fake)" : "FAIL (fake): 3 outputs never written";
    return check;
  }
  std::vector<std::string> calls;

 private:
  bool passes_;
};

TEST(Pipeline, ChecksInOrderPoisonLaunchVerify) {
  FakeRunnable runnable(true);
  const Check check = check_candidate(runnable, nullptr);
  EXPECT_EQ(runnable.calls, (std::vector<std::string>{"poison", "launch", "verify"}));
  EXPECT_TRUE(check.passed);
  EXPECT_EQ(check.rows_checked, 16);
}

TEST(Pipeline, AFailedCheckIsNeverMeasured) {
  FakeRunnable runnable(false);
  const CandidateResult result = run_candidate(runnable, nullptr, CandidateOptions{});
  // Measuring would launch again (and need a GPU): the calls end with the check.
  EXPECT_EQ(runnable.calls, (std::vector<std::string>{"poison", "launch", "verify"}));
  EXPECT_EQ(result.outcome, CandidateOutcome::VerificationFailed);
  EXPECT_TRUE(result.verified);
  EXPECT_TRUE(std::isinf(result.max_rel_error));
  EXPECT_EQ(result.tolerance, 5e-3);
  EXPECT_EQ(result.rows_checked, 16);
  EXPECT_EQ(result.message, "FAIL (fake): 3 outputs never written");
  EXPECT_EQ(result.verification_summary, result.message);
}

TEST(Pipeline, OutcomesHaveOneNameEach) {
  for (const CandidateOutcome outcome : {CandidateOutcome::Measured, CandidateOutcome::VerificationFailed,
                                         CandidateOutcome::Error, CandidateOutcome::Crashed, CandidateOutcome::Timeout}) {
    EXPECT_EQ(candidate_outcome_from_text(to_string(outcome)), outcome);
  }
  EXPECT_EQ(to_string(CandidateOutcome::VerificationFailed), "verification-failed");
  test_support::expect_input_error([] { candidate_outcome_from_text("fine"); }, {"outcome"});
}

TEST(Pipeline, CandidateResultRoundTripsThroughJson) {
  CandidateResult failed;
  failed.outcome = CandidateOutcome::VerificationFailed;
  failed.verified = true;
  failed.max_rel_error = std::numeric_limits<double>::infinity();  // JSON has no infinity: null on the wire
  failed.tolerance = 5e-3;
  failed.rows_checked = 64;
  failed.verification_summary = "FAIL rel inf";
  failed.message = "FAIL rel inf";
  const nlohmann::json failed_json = failed;
  EXPECT_TRUE(failed_json.at("max_rel_error").is_null());
  EXPECT_FALSE(failed_json.contains("measurement"));
  const auto failed_back = failed_json.get<CandidateResult>();
  EXPECT_EQ(failed_back.outcome, CandidateOutcome::VerificationFailed);
  EXPECT_TRUE(std::isinf(failed_back.max_rel_error));
  EXPECT_EQ(failed_back.rows_checked, 64);
  EXPECT_EQ(failed_back.message, "FAIL rel inf");

  CandidateResult measured;
  measured.outcome = CandidateOutcome::Measured;
  measured.verified = true;
  measured.max_rel_error = 2e-4;
  measured.tolerance = 5e-3;
  measured.verification_summary = "PASS";
  measured.measurement.median_us = 12.5;
  measured.measurement.samples_us = {12.4, 12.5, 12.6};
  measured.measurement.stop_reason = "converged";
  const auto measured_back = nlohmann::json(measured).get<CandidateResult>();
  EXPECT_EQ(measured_back.outcome, CandidateOutcome::Measured);
  EXPECT_TRUE(measured_back.verified);
  EXPECT_DOUBLE_EQ(measured_back.max_rel_error, 2e-4);
  EXPECT_DOUBLE_EQ(measured_back.measurement.median_us, 12.5);
  EXPECT_EQ(measured_back.measurement.samples_us, measured.measurement.samples_us);
  EXPECT_EQ(measured_back.measurement.stop_reason, "converged");
}

TEST(FamilyProvider, EnumeratesTheFamilysCuratedSpaceWithItsPruningCounts) {
  const FamilyProvider& provider = family_provider("mma");
  EXPECT_EQ(provider.name(), "mma");
  ProviderProblem problem;
  problem.gemm = Problem{FormatSpec::parse("w4a16-int4-ch"), 16, 4096, 4096, false};
  const ArchLimits limits = ArchLimits::for_sm(90);
  const ProviderSpace space = provider.enumerate(problem, limits, SpaceRequest{}, nullptr);
  ASSERT_FALSE(space.configurations.empty());
  std::size_t removed = 0;
  for (const auto& [rule, count] : space.removed_by_rule) removed += count;
  EXPECT_EQ(space.configurations.size() + removed, space.total);
  // The same candidates as KernelConfigs, and a cap spreads them evenly.
  const std::vector<KernelConfig> configs = provider.candidates(problem.gemm, limits, SpaceRequest{});
  ASSERT_EQ(configs.size(), space.configurations.size());
  EXPECT_EQ(configs.front().to_string(), space.configurations.front());
  SpaceRequest capped;
  capped.max_configs = 3;
  EXPECT_EQ(provider.enumerate(problem, limits, capped, nullptr).configurations.size(), 3u);
  // A value the user gives replaces the curated ones.
  SpaceRequest narrowed;
  narrowed.parameter_values["bm"] = {16};
  for (const KernelConfig& config : provider.candidates(problem.gemm, limits, narrowed)) EXPECT_EQ(config.get("bm"), 16);
}

TEST(FamilyProvider, UnknownFamilyIsBadInput) {
  test_support::expect_input_error([] { family_provider("nope"); }, {"nope"});
}

}  // namespace
}  // namespace qtune::providers
