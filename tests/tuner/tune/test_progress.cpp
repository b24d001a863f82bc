// The tune's progress output: one line per problem when stderr is not a terminal, a bar with ETA and the best so far
// when it is.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace qtune::tune
