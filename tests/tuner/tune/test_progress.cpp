// The tune's progress output: one line per problem when stderr is not a terminal, a bar with ETA and the best so far
// when it is.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "tests/tuner/tune/tune_test_support.hpp"
#include "tuner/tune/progress.hpp"

namespace qtune::tune {
namespace {

using namespace qtune::tune::testing;

TEST(Progress, DurationsReadLikeClocks) {
  EXPECT_EQ(ConsoleProgress::format_duration(12.4), "12s");
  EXPECT_EQ(ConsoleProgress::format_duration(185), "3m05s");
  EXPECT_EQ(ConsoleProgress::format_duration(3720), "1h02m");
  EXPECT_EQ(ConsoleProgress::format_duration(-1), "?");
}

TEST(Progress, PlainStreamsGetOneLinePerProblem) {
  std::ostringstream out;
  TempDir dir;
  {
    ConsoleProgress progress(out, false);
    FakeCompiler compiler;
    FakeBackend backend;
    TuneServices services;
    services.compiler = &compiler;
    services.backends = borrow(backend);
    run_tune(small_options({1, 16}), h200_target(), dir / "q.db", services, &progress);
  }
  const std::string text = out.str();
  EXPECT_EQ(text.find('\r'), std::string::npos) << "no bar redraws on a plain stream";
  EXPECT_NE(text.find("measuring 4 problems"), std::string::npos) << text;
  EXPECT_NE(text.find("[1/4] w4a16-int4-ch m=1 n=4096 k=4096: "), std::string::npos) << text;
  EXPECT_NE(text.find("[4/4] "), std::string::npos) << text;
  EXPECT_NE(text.find("; winner "), std::string::npos) << text;
  EXPECT_NE(text.find("; heuristic "), std::string::npos) << text;
}

TEST(Progress, TerminalsGetABarWithEtaAndBestSoFar) {
  std::ostringstream out;
  {
    ConsoleProgress progress(out, true);
    progress.measuring_started(2, 10);
    ProblemReport report;
    report.problem = Problem{FormatSpec::parse("w4a16-int4-ch"), 16, 4096, 4096, false};
    progress.problem_started(report);
    const KernelConfig config = KernelConfig::parse("bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=4,raster=0");
    EvaluationEvent event{&report.problem, config, "exhaustive", false, true, 12.5, "measured"};
    progress.evaluated(event);
    report.winner = config;
    report.winner_us = 12.5;
    report.winner_reason = "fastest";
    progress.problem_finished(report);
  }
  const std::string text = out.str();
  EXPECT_NE(text.find('\r'), std::string::npos);
  EXPECT_NE(text.find("1/10 evals"), std::string::npos) << text;
  EXPECT_NE(text.find("ETA"), std::string::npos) << text;
  EXPECT_NE(text.find("best 12.50 us"), std::string::npos) << text;
  EXPECT_NE(text.find("[1/2] w4a16-int4-ch m=16"), std::string::npos) << text;
}

// The whole run's share is the stages' shares weighted by their estimated seconds; the ETA is the time so far scaled
// by what is left.
TEST(WorkPlan, WeightsStagesAndEstimatesTheTimeLeft) {
  WorkPlan plan;
  EXPECT_DOUBLE_EQ(plan.fraction(), 1.0) << "no work is all done";
  EXPECT_DOUBLE_EQ(plan.eta_seconds(5), 0.0);
  const std::size_t compile = plan.add_stage("compiling mma", 10);
  const std::size_t measure = plan.add_stage("measuring mma", 30);
  const std::size_t dry = plan.add_stage("measuring wgmma", 0);
  EXPECT_DOUBLE_EQ(plan.fraction(), 0.0);
  EXPECT_TRUE(std::isnan(plan.eta_seconds(5))) << "nothing done: no pace yet";
  plan.set_progress(compile, 5, 10);
  EXPECT_DOUBLE_EQ(plan.fraction(), 5.0 / 40);
  EXPECT_DOUBLE_EQ(plan.eta_seconds(10), 10 * 35.0 / 5);
  plan.finish(compile);
  plan.set_progress(measure, 15, 30);
  EXPECT_DOUBLE_EQ(plan.fraction(), 25.0 / 40);
  EXPECT_DOUBLE_EQ(plan.eta_seconds(50), 50 * 15.0 / 25);
  plan.set_weight(measure, 10);  // the real size replaces the estimate
  EXPECT_DOUBLE_EQ(plan.fraction(), 15.0 / 20);
  plan.set_progress(measure, 40, 30);  // more than expected counts as done, no more
  EXPECT_DOUBLE_EQ(plan.fraction(), 1.0);
  EXPECT_DOUBLE_EQ(plan.eta_seconds(60), 0.0);
  plan.set_progress(dry, 0, 0);
  EXPECT_DOUBLE_EQ(plan.fraction(), 1.0);
  EXPECT_EQ(plan.name(measure), "measuring mma");
}

// A family's real size rescales the estimates of the later families' stages of the same kind.
TEST(WorkPlan, TheFirstRealSizeCalibratesTheOtherEstimates) {
  WorkPlan plan;
  const std::size_t mma_compile = plan.add_stage("compiling mma", 100, "compiling");
  const std::size_t mma_measure = plan.add_stage("measuring mma", 50, "measuring");
  const std::size_t wgmma_compile = plan.add_stage("compiling wgmma", 200, "compiling");
  const std::size_t wgmma_measure = plan.add_stage("measuring wgmma", 60, "measuring");
  plan.set_weight(mma_compile, 10);  // a tenth of the estimate: --param narrowed the space
  plan.finish(mma_compile);
  EXPECT_DOUBLE_EQ(plan.fraction(), 10.0 / (10 + 50 + 20 + 60));
  plan.set_weight(mma_compile, 12);  // later updates change that stage only
  plan.set_weight(mma_measure, 25);
  plan.set_weight(wgmma_compile, 40);  // a real size is never rescaled
  EXPECT_DOUBLE_EQ(plan.fraction(), 12.0 / (12 + 25 + 40 + 30));
  plan.set_weight(wgmma_measure, 5);
  EXPECT_DOUBLE_EQ(plan.fraction(), 12.0 / (12 + 25 + 40 + 5));
}

TEST(WorkPlan, EstimatesCompileOnTheThreadsAndMeasuringByTheBudget) {
  const PhaseEstimate estimate = estimate_problem_work(200, 4, 0.5, 1.0, false);
  EXPECT_DOUBLE_EQ(estimate.compile_seconds, 200 * kCompileSecondsPerInstantiation / 4);
  EXPECT_DOUBLE_EQ(estimate.measure_seconds, 200 * 0.5 * (1.0 + kEvaluationOverheadSeconds));
  EXPECT_DOUBLE_EQ(estimate_problem_work(200, 4, 0.5, 1.0, true).measure_seconds, 0.0) << "a dry run measures nothing";
  EXPECT_DOUBLE_EQ(estimate_problem_work(10, 0, 1, 1, true).compile_seconds, 10 * kCompileSecondsPerInstantiation);
}

// Two families' stages in one plan: the first family's end is not the run's, and the bar's percentage keeps rising
// across the families and phases.
TEST(Progress, OneBarCoversEveryFamilyAndPhase) {
  std::ostringstream out;
  {
    ConsoleProgress progress(out, false);
    WorkPlan plan;
    const std::size_t mma_compile = plan.add_stage("compiling mma", 10);
    const std::size_t mma_measure = plan.add_stage("measuring mma", 10);
    const std::size_t wgmma_compile = plan.add_stage("compiling wgmma", 10);
    const std::size_t wgmma_measure = plan.add_stage("measuring wgmma", 10);
    progress.set_plan(std::move(plan), 1, 1.0);
    progress.start_stages(mma_compile, mma_measure);
    progress.compile_progress(0, 4);
    progress.compile_progress(4, 4);
    EXPECT_GT(progress.plan().fraction(), 0.0);
    EXPECT_LT(progress.plan().fraction(), 0.5);
    progress.measuring_started(1, 2);
    ProblemReport report;
    report.problem = Problem{FormatSpec::parse("w4a16-int4-ch"), 16, 4096, 4096, false};
    const KernelConfig config = KernelConfig::parse("bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=4,raster=0");
    progress.evaluated(EvaluationEvent{&report.problem, config, "exhaustive", false, true, 12.5, "measured"});
    progress.problem_finished(report);
    progress.start_stages(wgmma_compile, wgmma_measure);  // ends mma's stages, whatever their counts
    // mma's stages now weigh what they really held: 4 compiles on one thread, 2 evaluations of a 1 s budget.
    const double mma_work = 4 * kCompileSecondsPerInstantiation + 2 * (1.0 + kEvaluationOverheadSeconds);
    EXPECT_DOUBLE_EQ(progress.plan().fraction(), mma_work / (mma_work + 20));
    progress.compile_progress(2, 2);
    progress.measuring_started(1, 1);
    progress.evaluated(EvaluationEvent{&report.problem, config, "exhaustive", false, true, 11.0, "measured"});
    EXPECT_DOUBLE_EQ(progress.plan().fraction(), 1.0);
    progress.problem_finished(report);
  }
  const std::string text = out.str();
  EXPECT_NE(text.find("compiling mma 4/4 instantiations"), std::string::npos) << text;
  EXPECT_NE(text.find("compiling wgmma 2/2 instantiations"), std::string::npos) << text;
  EXPECT_NE(text.find("ETA"), std::string::npos) << text;
  const std::size_t first_done = text.find("run 100%");
  ASSERT_NE(first_done, std::string::npos) << text;
  EXPECT_GT(first_done, text.find("compiling wgmma")) << "100% before the last family: " << text;
}

// A heuristic pick that failed (Humming's own, when its kernel fails the check) is said in the problem's line: the
// line has no heuristic time then, and the reader should know why.
TEST(Progress, AFailedHeuristicIsNamedInTheProblemLine) {
  ProblemReport report;
  report.problem = Problem{FormatSpec::parse("w4a8-int4-fp8:scale=f16"), 1024, 8192, 8192, false};
  report.winner = KernelConfig::parse("bm=128,bn=256", "humming");
  report.winner_us = 124.32;
  report.winner_reason = "fastest";
  EXPECT_EQ(ConsoleProgress::describe(report).find("heuristic"), std::string::npos);
  report.heuristic_failure = "verification-failed: FAIL rel inf > 0.01 (1024x8192); 2097152 NaN/inf";
  EXPECT_NE(ConsoleProgress::describe(report).find(
                "; winner 124.32 us bm=128,bn=256; heuristic failed (verification-failed: FAIL rel inf > 0.01 (1024x8192); 2097152 NaN/inf)"),
            std::string::npos)
      << ConsoleProgress::describe(report);
}

// The MoE expert GEMMs are the run's last stage, counted in problems: a line each, with the whole run's share and ETA
// (the dense families' stages before it count as done).
TEST(Progress, MoeProblemsAreTheLastStageOfTheOneBar) {
  std::ostringstream out;
  {
    ConsoleProgress progress(out, false);
    WorkPlan plan;
    const std::size_t compile = plan.add_stage("compiling mma", 5);
    const std::size_t measure = plan.add_stage("measuring mma", 5);
    const std::size_t moe = plan.add_stage("moe", 10, "moe");
    progress.set_plan(std::move(plan), 1, 1.0);
    progress.start_stages(compile, measure);
    EXPECT_DOUBLE_EQ(progress.plan().fraction(), 0.0);
    progress.problem_line(moe, 1, 4, "w4a8-int4-fp8 moe gate-up T=1: 48 candidates, 8 measured, winner 40.111 us");
    EXPECT_DOUBLE_EQ(progress.plan().fraction(), (10.0 + 2.5) / 20.0);
    progress.problem_line(moe, 4, 4, "w4a8-int4-fp8 moe down T=4096: 112 candidates, 17 measured, winner 2699.480 us");
    EXPECT_DOUBLE_EQ(progress.plan().fraction(), 1.0);
  }
  const std::string text = out.str();
  EXPECT_NE(text.find("[1/4] w4a8-int4-fp8 moe gate-up T=1: 48 candidates, 8 measured, winner 40.111 us; run 62%, ETA "),
            std::string::npos) << text;
  EXPECT_NE(text.find("[4/4] w4a8-int4-fp8 moe down T=4096: 112 candidates, 17 measured, winner 2699.480 us; run 100%, ETA 0s"),
            std::string::npos) << text;
}

}  // namespace
}  // namespace qtune::tune
