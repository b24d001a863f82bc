// Runs killed while running: each run stores its process (host, pid, start time), a later run marks the runs whose
// process is gone as interrupted, and `db check` reports them meanwhile. A reused pid does not pass for the process.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "db/process_identity.hpp"
#include "db/store.hpp"
#include "tests/db/db_test_support.hpp"

namespace qtune::db {
namespace {

using testing::TempDir;

// A pid that no process has now: a child that has exited and been reaped.
std::int64_t pid_of_an_exited_process() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return child;
}

bool mentions(const std::vector<std::string>& lines, const std::string& text) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& line) { return line.find(text) != std::string::npos; });
}

TEST(ProcessIdentity, TellsThisProcessFromAGoneOneAndFromAReusedPid) {
  const ProcessIdentity self = current_process();
  EXPECT_EQ(self.pid, getpid());
  ASSERT_FALSE(self.start.empty()) << "no /proc here";
  EXPECT_EQ(process_state(self), ProcessState::Running);
  EXPECT_EQ(running_process(self.pid), self);

  EXPECT_EQ(process_state(ProcessIdentity{self.host, pid_of_an_exited_process(), self.start}), ProcessState::Gone);
  // The same pid, started at another time: another process that reused the pid.
  const std::string boot = self.start.substr(0, self.start.find(' '));
  EXPECT_EQ(process_state(ProcessIdentity{self.host, self.pid, boot + " 1"}), ProcessState::Gone);
  // Started before this host's last boot.
  EXPECT_EQ(process_state(ProcessIdentity{self.host, self.pid, "another-boot 1"}), ProcessState::Gone);
  // Another host's process cannot be looked at.
  EXPECT_EQ(process_state(ProcessIdentity{self.host + "-elsewhere", 1, self.start}), ProcessState::Unknown);
}

TEST(RunProcesses, AKilledRunIsReportedByCheckAndMarkedInterruptedByTheNextRun) {
  TempDir dir;
  Store store = Store::open(dir / "runs.db");
  const RunId killed = store.insert_run(testing::sample_run());
  const RunId reused = store.insert_run(testing::sample_run());
  const RunId elsewhere = store.insert_run(testing::sample_run());
  const RunId alive = store.insert_run(testing::sample_run());
  const RunId finished = store.insert_run(testing::sample_run());
  store.finish_run(finished, RunStatus::Completed);
  const ProcessIdentity self = current_process();
  // As if each had been run by another process: one killed, one whose pid a later process took, one on another host.
  auto set_process = [&](RunId run, const std::string& host, std::int64_t pid, const std::string& start) {
    Statement update = store.connection().prepare("UPDATE run_processes SET host = ?, pid = ?, process_start = ? WHERE run_id = ?");
    update.bind_all(host, pid, start, id_value(run));
    update.run();
    ASSERT_EQ(store.connection().changes(), 1);
  };
  set_process(killed, self.host, pid_of_an_exited_process(), self.start);
  set_process(reused, self.host, self.pid, self.start.substr(0, self.start.find(' ')) + " 1");
  set_process(elsewhere, "another-host", 1, "another-boot 1");

  const auto findings = store.check();
  EXPECT_TRUE(mentions(findings, "run #" + std::to_string(id_value(killed)) + " is marked running, but its process")) << findings.size();
  EXPECT_TRUE(mentions(findings, "run #" + std::to_string(id_value(reused)) + " is marked running")) << findings.size();
  EXPECT_EQ(findings.size(), 2u);
  EXPECT_EQ(Store::check_file(dir / "runs.db").size(), 2u);  // the same, read-only

  const RunId next = store.insert_run(testing::sample_run());
  EXPECT_EQ(store.get_run(killed)->status, RunStatus::Interrupted);
  EXPECT_EQ(store.get_run(reused)->status, RunStatus::Interrupted);
  EXPECT_EQ(store.get_run(elsewhere)->status, RunStatus::Running);  // cannot be told from here
  EXPECT_EQ(store.get_run(alive)->status, RunStatus::Running);      // this process runs it
  EXPECT_EQ(store.get_run(finished)->status, RunStatus::Completed);
  EXPECT_EQ(store.get_run(next)->status, RunStatus::Running);
  EXPECT_TRUE(store.check().empty());
}

TEST(RunProcesses, AVersion2FileMigratesAndItsRunsWithoutAProcessAreLeftAlone) {
  TempDir dir;
  const auto file = dir / "v2.db";
  {
    Connection connection(file, OpenMode::ReadWriteCreate);
    migrate(connection, 2);
    connection.execute("INSERT INTO runs (id, uuid, tool_version, git_sha, gpu_profile) VALUES (4, 'run-4', '0.1.0', 'abc', 'h200')");
  }
  {
    Store old = Store::open_read_only(file);  // read-only commands read a version 2 file as it is
    EXPECT_EQ(old.schema_version(), 2);
    EXPECT_EQ(old.list_runs().size(), 1u);
    EXPECT_NO_THROW(old.require_readable());
  }
  Store store = Store::open(file);
  EXPECT_EQ(store.version_at_open(), 2);
  store.insert_run(testing::sample_run());
  EXPECT_EQ(store.find_run("run-4")->status, RunStatus::Running);
  EXPECT_TRUE(store.check().empty());
}

TEST(RunProcesses, MergeKeepsTheProcessOfEachRun) {
  TempDir dir;
  {
    Store shard = Store::open(dir / "shard.db");
    shard.insert_run(testing::sample_run());
  }
  Store merged = Store::open(dir / "merged.db");
  merged.merge(dir / "shard.db");
  EXPECT_EQ(merged.connection().query_int("SELECT count(*) FROM run_processes WHERE pid = " + std::to_string(getpid())), 1);
}

}  // namespace
}  // namespace qtune::db
