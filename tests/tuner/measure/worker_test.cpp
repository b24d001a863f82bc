// The measuring worker on the CPU: protocol, errors, crashes and the watchdog. The worker is this test executable
// itself (see worker_entry.cpp).
#include "tuner/measure/worker.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <chrono>

#include "kernels/error.hpp"
#include "tests/tuner/runtime/gpu_test_support.hpp"

namespace qtune::measure {
namespace {

constexpr double kTimeout = 60;

bool process_exists(int pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

TEST(WorkerProtocol, RequestsCarryIdJobAndParams) {
  const nlohmann::json request = make_request(7, "selftest-echo", {{"x", 1}});
  EXPECT_EQ(request, (nlohmann::json{{"id", 7}, {"job", "selftest-echo"}, {"params", {{"x", 1}}}}));
  EXPECT_EQ(make_request(8, "selftest-echo", nlohmann::json())["params"], nlohmann::json::object());
}

TEST(WorkerProtocol, ResponsesAreParsedByStatus) {
  JobOutcome ok = parse_response(R"({"id": 3, "status": "ok", "result": {"a": [1, 2]}})", 3);
  EXPECT_EQ(ok.status, JobStatus::Ok);
  EXPECT_EQ(ok.result, (nlohmann::json{{"a", {1, 2}}}));
  JobOutcome error = parse_response(
      R"({"id": 3, "status": "error", "error": "CUDA driver: cuMemAlloc failed: x", "error_type": "DriverError", "library": "CUDA driver"})",
      3);
  EXPECT_EQ(error.status, JobStatus::Error);
  EXPECT_EQ(error.error, "CUDA driver: cuMemAlloc failed: x");
  EXPECT_EQ(error.error_type, "DriverError");
  EXPECT_EQ(error.library, "CUDA driver");
  EXPECT_EQ(parse_response(R"({"id": 3, "status": "fault", "error": "e"})", 3).status, JobStatus::Fault);
}

TEST(WorkerProtocol, MalformedResponsesAreCrashesThatSaySo) {
  const JobOutcome not_json = parse_response("Segmentation fault", 1);
  EXPECT_EQ(not_json.status, JobStatus::Crashed);
  EXPECT_NE(not_json.error.find("not JSON"), std::string::npos) << not_json.error;
  EXPECT_NE(not_json.error.find("Segmentation fault"), std::string::npos);
  const JobOutcome wrong_id = parse_response(R"({"id": 2, "status": "ok"})", 1);
  EXPECT_EQ(wrong_id.status, JobStatus::Crashed);
  EXPECT_NE(wrong_id.error.find("expected id 1"), std::string::npos) << wrong_id.error;
  EXPECT_EQ(parse_response(R"({"id": 1, "status": "maybe"})", 1).status, JobStatus::Crashed);
  EXPECT_EQ(parse_response(R"([1, 2])", 1).status, JobStatus::Crashed);
}

TEST(WorkerProtocol, FailedOutcomesRethrowTheirType) {
  JobOutcome outcome;
  outcome.status = JobStatus::Error;
  outcome.error = "no CUDA device found";
  outcome.error_type = "NoGpuError";
  EXPECT_THROW(throw_if_failed(outcome, "job"), NoGpuError);
  outcome.error_type = "InputError";
  EXPECT_THROW(throw_if_failed(outcome, "job"), InputError);
  outcome.error_type = "LibraryError";
  outcome.library = "NVRTC";
  outcome.error = "NVRTC: compile failed";
  try {
    throw_if_failed(outcome, "job");
    FAIL();
  } catch (const LibraryError& error) {
    EXPECT_EQ(error.library(), "NVRTC");
    EXPECT_STREQ(error.what(), "NVRTC: compile failed");
  }
  outcome.status = JobStatus::Timeout;
  outcome.error = "did not finish";
  try {
    throw_if_failed(outcome, "measure-kernel");
    FAIL();
  } catch (const Error& error) {
    EXPECT_STREQ(error.what(), "worker job 'measure-kernel' timeout: did not finish");
  }
  outcome.status = JobStatus::Ok;
  EXPECT_NO_THROW(throw_if_failed(outcome, "job"));
}

TEST(Worker, RunsJobsInAnotherProcessAndReusesIt) {
  Worker worker;
  EXPECT_EQ(worker.pid(), 0) << "started lazily";
  const nlohmann::json params{{"numbers", {1, 2, 3}}, {"text", "h\u00e9llo\nworld"}};
  const JobOutcome first = worker.run("selftest-echo", params, kTimeout);
  ASSERT_EQ(first.status, JobStatus::Ok) << first.error;
  EXPECT_EQ(first.result, params);
  EXPECT_GT(first.worker_pid, 0);
  EXPECT_NE(first.worker_pid, getpid());
  const JobOutcome second = worker.run("selftest-echo", {{"n", 2}}, kTimeout);
  ASSERT_EQ(second.status, JobStatus::Ok);
  EXPECT_EQ(second.worker_pid, first.worker_pid);
  EXPECT_EQ(worker.workers_started(), 1);
}

TEST(Worker, LargeAnswersArriveWhole) {
  Worker worker;
  const std::string big(3 << 20, 'x');  // larger than any socket buffer
  const JobOutcome outcome = worker.run("selftest-echo", {{"big", big}}, kTimeout);
  ASSERT_EQ(outcome.status, JobStatus::Ok) << outcome.error;
  EXPECT_EQ(outcome.result["big"].get<std::string>().size(), big.size());
}

TEST(Worker, AThrowingJobIsAnErrorAndTheWorkerSurvives) {
  Worker worker;
  const JobOutcome thrown = worker.run("selftest-throw", {{"message", "shape: N must be positive"}}, kTimeout);
  EXPECT_EQ(thrown.status, JobStatus::Error);
  EXPECT_EQ(thrown.error, "shape: N must be positive");
  EXPECT_EQ(thrown.error_type, "InputError");
  const JobOutcome after = worker.run("selftest-echo", {}, kTimeout);
  EXPECT_EQ(after.status, JobStatus::Ok);
  EXPECT_EQ(after.worker_pid, thrown.worker_pid);
  EXPECT_THROW(throw_if_failed(thrown, "selftest-throw"), InputError);
}

TEST(Worker, UnknownJobsListTheKnownOnes) {
  Worker worker;
  const JobOutcome outcome = worker.run("no-such-job", {}, kTimeout);
  EXPECT_EQ(outcome.status, JobStatus::Error);
  EXPECT_EQ(outcome.error_type, "InputError");
  EXPECT_NE(outcome.error.find("unknown job 'no-such-job'"), std::string::npos) << outcome.error;
  EXPECT_NE(outcome.error.find("selftest-echo"), std::string::npos) << outcome.error;
}

TEST(Worker, ACrashIsRecordedAndTheNextJobGetsAFreshWorker) {
  Worker worker;
  const JobOutcome crashed = worker.run("selftest-segfault", {}, kTimeout);
  std::cout << "crash: " << crashed.error << "\n";
  EXPECT_EQ(crashed.status, JobStatus::Crashed);
  EXPECT_NE(crashed.error.find("signal 11"), std::string::npos) << crashed.error;
  EXPECT_NE(crashed.error.find("selftest-segfault"), std::string::npos) << crashed.error;
  EXPECT_EQ(worker.pid(), 0);
  EXPECT_FALSE(process_exists(crashed.worker_pid)) << "the crashed worker was not reaped";
  const JobOutcome next = worker.run("selftest-echo", {{"still", "alive"}}, kTimeout);
  ASSERT_EQ(next.status, JobStatus::Ok) << next.error;
  EXPECT_NE(next.worker_pid, crashed.worker_pid);
  EXPECT_EQ(worker.workers_started(), 2);
}

TEST(Worker, AWorkerThatDiedBetweenJobsIsReplacedWithoutBlamingTheNextJob) {
  Worker worker;
  ASSERT_EQ(worker.run("selftest-echo", {}, kTimeout).status, JobStatus::Ok);
  const int first_pid = worker.pid();
  ASSERT_EQ(kill(first_pid, SIGKILL), 0);
  // Wait until only the zombie is left (every thread gone), which the Worker has not reaped yet.
  const std::string proc = "/proc/" + std::to_string(first_pid);
  for (int i = 0; i < 500; ++i) {
    std::string stat;
    std::getline(std::ifstream(proc + "/stat"), stat);
    std::error_code error;
    const auto tasks = std::distance(std::filesystem::directory_iterator(proc + "/task", error),
                                     std::filesystem::directory_iterator());
    if (stat.find(") Z") != std::string::npos && tasks <= 1) break;
    usleep(10000);
  }
  const JobOutcome next = worker.run("selftest-echo", {{"after", "kill"}}, kTimeout);
  ASSERT_EQ(next.status, JobStatus::Ok) << next.error;
  EXPECT_NE(next.worker_pid, first_pid);
  EXPECT_EQ(worker.workers_started(), 2);
}

TEST(Worker, TheWatchdogKillsAJobThatRunsTooLong) {
  Worker worker;
  const JobOutcome hung = worker.run("selftest-sleep", {{"seconds", 60}}, 0.5);
  std::cout << "timeout after " << hung.seconds << " s: " << hung.error << "\n";
  EXPECT_EQ(hung.status, JobStatus::Timeout);
  EXPECT_GE(hung.seconds, 0.5);
  EXPECT_LT(hung.seconds, 5.0);
  EXPECT_NE(hung.error.find("signal 9"), std::string::npos) << hung.error;
  EXPECT_FALSE(process_exists(hung.worker_pid));
  const JobOutcome next = worker.run("selftest-sleep", {{"seconds", 0.05}}, 10);
  ASSERT_EQ(next.status, JobStatus::Ok) << next.error;
  EXPECT_DOUBLE_EQ(next.result["slept_s"].get<double>(), 0.05);
  EXPECT_NE(next.worker_pid, hung.worker_pid);
}

TEST(Worker, AMissingExecutableIsACrashThatSaysWhy) {
  Worker worker(WorkerOptions{"/nonexistent/qtune", {"__worker"}, 10});
  const JobOutcome outcome = worker.run("selftest-echo", {}, kTimeout);
  EXPECT_EQ(outcome.status, JobStatus::Crashed);
  EXPECT_NE(outcome.error.find("could not be started"), std::string::npos) << outcome.error;
  EXPECT_NE(outcome.error.find("status 127"), std::string::npos) << outcome.error;
}

TEST(Worker, AProgramThatIsNotAWorkerIsRejected) {
  // perl (Debian's perl-base is essential), not sh: dash cannot redirect to a descriptor above 9, which the socket is
  // once a long test run has opened more files.
  Worker worker(WorkerOptions{
      "/usr/bin/perl", {"-e", "open(my $out, '>&=', $ARGV[1]) or die; syswrite($out, \"not-a-worker\\n\"); sleep 30", "--"}, 10});
  const JobOutcome outcome = worker.run("selftest-echo", {}, kTimeout);
  EXPECT_EQ(outcome.status, JobStatus::Crashed);
  EXPECT_NE(outcome.error.find("is not a qtune worker"), std::string::npos) << outcome.error;
  EXPECT_NE(outcome.error.find("not-a-worker"), std::string::npos) << outcome.error;
  EXPECT_EQ(worker.pid(), 0);
}

TEST(Worker, AWorkerThatNeverGetsReadyTimesOut) {
  Worker worker(WorkerOptions{"/bin/sh", {"-c", "exec sleep 30", "sh"}, 0.3});
  const JobOutcome outcome = worker.run("selftest-echo", {}, kTimeout);
  EXPECT_EQ(outcome.status, JobStatus::Crashed);
  EXPECT_NE(outcome.error.find("did not report ready"), std::string::npos) << outcome.error;
}

TEST(Worker, StoppingEndsTheProcess) {
  int pid = 0;
  {
    Worker worker;
    ASSERT_EQ(worker.run("selftest-echo", {}, kTimeout).status, JobStatus::Ok);
    pid = worker.pid();
    ASSERT_TRUE(process_exists(pid));
  }
  EXPECT_FALSE(process_exists(pid)) << "the worker outlived its Worker";
}

// The pid of a child process of `parent` (the worker), waiting up to `patience` for one to appear; 0 if none does.
int child_of(int parent, std::chrono::milliseconds patience) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (std::chrono::steady_clock::now() < deadline) {
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      const std::string name = entry.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream status(entry.path() / "status");
      for (std::string line; std::getline(status, line);) {
        if (line.rfind("PPid:", 0) == 0 && std::stoi(line.substr(5)) == parent) return std::stoi(name);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

// Gone, or a zombie nobody reaps (an orphan's new parent may be a PID 1 that does not reap).
bool process_gone(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return true;
  const auto name_end = text.rfind(')');
  return name_end != std::string::npos && name_end + 2 < text.size() && text[name_end + 2] == 'Z';
}

TEST(Worker, AWorkerWhoseParentIsKilledMidJobExits) {
  // The parent, as `qtune tune` would be: it runs a long job in its worker, and is then killed with SIGKILL.
  const pid_t parent = fork();
  ASSERT_GE(parent, 0);
  if (parent == 0) {
    Worker worker;
    worker.run("selftest-sleep", {{"seconds", 120}}, 300);
    _exit(0);
  }
  const int worker_pid = child_of(parent, std::chrono::seconds(30));
  ASSERT_GT(worker_pid, 0) << "the parent started no worker";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the job is running
  ASSERT_FALSE(process_gone(worker_pid));
  kill(parent, SIGKILL);
  int status = 0;
  waitpid(parent, &status, 0);
  const auto killed_at = std::chrono::steady_clock::now();
  while (!process_gone(worker_pid) && std::chrono::steady_clock::now() - killed_at < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const bool gone = process_gone(worker_pid);
  if (!gone) kill(worker_pid, SIGKILL);
  EXPECT_TRUE(gone) << "the worker (pid " << worker_pid << ") outlived its killed parent by 5 s";
}

TEST(Worker, GpuSelftestsWithoutAGpuAreNoGpuErrors) {
  QTUNE_REQUIRE_NO_GPU();
  Worker worker;
  for (const char* job : {"selftest-fault", "selftest-hang", "selftest-copy", "selftest-device"}) {
    const JobOutcome outcome = worker.run(job, {}, kTimeout);
    std::cout << job << ": " << outcome.error << "\n";
    EXPECT_EQ(outcome.status, JobStatus::Error) << job;
    EXPECT_EQ(outcome.error_type, "NoGpuError") << job;
    EXPECT_THROW(throw_if_failed(outcome, job), NoGpuError);
  }
  EXPECT_EQ(worker.workers_started(), 1) << "a NoGpuError does not end the worker";
}

}  // namespace
}  // namespace qtune::measure
