// The database from the command line: read-only commands on read-only folders and files (as root and, where there is
// one, as an unprivileged user), `--db` as a plain path, bad database files as exit 2 with one line, and `db merge`
// checking every input before it creates OUT.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "db/store.hpp"
#include "tests/common/qtune_executable.hpp"
#include "tests/reports/report_test_support.hpp"
#include "tuner/cli/cli.hpp"

namespace qtune::cli {
namespace {

namespace fs = std::filesystem;
using test_support::TempDir;
using test_support::WorkingDirectory;

struct CliResult {
  int status = 0;
  std::string out;
  std::string err;
};

CliResult run_qtune(std::vector<std::string> arguments) {
  arguments.insert(arguments.begin(), "qtune");
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  CliResult result;
  result.status = run_cli(static_cast<int>(argv.size()), argv.data());
  result.out = testing::internal::GetCapturedStdout();
  result.err = testing::internal::GetCapturedStderr();
  return result;
}

std::vector<std::string> listing(const fs::path& folder) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(folder)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string quoted(const std::string& text) { return "'" + text + "'"; }

// Makes a folder and its one file read-only for one test, and writable again at its end so TempDir can remove it.
class ReadOnlyFolder {
 public:
  ReadOnlyFolder(fs::path folder, fs::path file) : folder_(std::move(folder)), file_(std::move(file)) {
    fs::permissions(file_, fs::perms(0444));
    fs::permissions(folder_, fs::perms(0555));
  }
  ~ReadOnlyFolder() {
    fs::permissions(folder_, fs::perms(0755));
    fs::permissions(file_, fs::perms(0644));
  }
  ReadOnlyFolder(const ReadOnlyFolder&) = delete;
  ReadOnlyFolder& operator=(const ReadOnlyFolder&) = delete;

 private:
  fs::path folder_;
  fs::path file_;
};

TEST(DbCommand, ReadOnlyCommandsWorkInAReadOnlyFolderAndLeaveNothingThere) {
  TempDir dir;
  const fs::path folder = dir / "d";
  fs::create_directory(folder);
  const fs::path db = folder / "full.db";
  reports::testing::write_fixture_db(db);
  const fs::path out = dir / "out";
  fs::create_directory(out);
  const ReadOnlyFolder read_only(folder, db);
  const std::vector<std::vector<std::string>> commands = {
      {"db", "info", "--db", db.string()},
      {"db", "check", "--db", db.string()},
      {"export", "--db", db.string(), "-o", (out / "table.json").string()},
      {"report", "--db", db.string(), "-o", (out / "report").string()},
      {"search-eval", "--db", db.string()},
  };
  for (const auto& command : commands) {
    const CliResult result = run_qtune(command);
    EXPECT_EQ(result.status, 0) << command[0] << " " << command[1] << ": " << result.err;
    // Root may write into a 0555 folder: what must not happen is that anything is written there.
    EXPECT_EQ(listing(folder), std::vector<std::string>{"full.db"}) << command[0] << " " << command[1];
  }

  if (geteuid() != 0) return;  // an unprivileged user ran the commands above already
  const std::string qtune = test_support::qtune_executable().string();
  const std::string as_nobody = "runuser -u nobody -- ";
  if (std::system((as_nobody + "test -x " + quoted(qtune) + " >/dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << "the user nobody cannot run " << qtune << " (or runuser is missing): checked as root only";
  }
  fs::permissions(out, fs::perms::all);
  const std::vector<std::string> nobody_commands = {"db info", "export -o " + quoted((out / "nobody.json").string()), "search-eval",
                                                    "report -o " + quoted((out / "nobody-report").string())};
  for (const std::string& command : nobody_commands) {
    const std::string line = as_nobody + quoted(qtune) + " " + command + " --db " + quoted(db.string()) + " >/dev/null 2>" +
                             quoted((out / "stderr.txt").string());
    const int status = std::system(line.c_str());
    std::ifstream stderr_file(out / "stderr.txt");
    const std::string err((std::istreambuf_iterator<char>(stderr_file)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << line << ": " << err;
  }
  EXPECT_EQ(listing(folder), std::vector<std::string>{"full.db"});
}

TEST(DbCommand, TheDbOptionIsAPathNotASqliteUri) {
  TempDir dir;
  const WorkingDirectory here(dir.path());
  const std::string name = "file:c.db?mode=memory";
  ASSERT_EQ(run_qtune({"db", "init", "--db", name}).status, 0);
  EXPECT_EQ(listing(dir.path()), std::vector<std::string>{name});
  reports::testing::write_text(dir / "r.csv", "format,m,n,k,time_us,label,gpu\nf16,1,64,64,3,x,h200\n");
  ASSERT_EQ(run_qtune({"import", "r.csv", "--db", name}).status, 0);
  EXPECT_EQ(db::Store::open_read_only(dir / name).list_external_results().size(), 1u);  // it was saved, in that file
}

TEST(DbCommand, BadDatabaseFilesExitTwoWithOneLineNamingTheFile) {
  TempDir dir;
  const fs::path good = dir / "good.db";
  reports::testing::write_fixture_db(good);
  const fs::path garbage = dir / "garbage.db";
  reports::testing::write_text(garbage, std::string(4096, 'x'));
  const fs::path empty = dir / "empty.db";
  reports::testing::write_text(empty, "");
  const fs::path broken = dir / "broken.db";
  fs::copy_file(good, broken);
  {
    db::Connection raw(broken, db::OpenMode::ReadWrite);
    raw.execute("PRAGMA foreign_keys = OFF");
    raw.execute("DELETE FROM kernel_configs WHERE id = (SELECT min(config_id) FROM winners)");
  }
  for (const fs::path& file : {garbage, empty, broken}) {
    for (const std::vector<std::string>& command : std::vector<std::vector<std::string>>{
             {"db", "info", "--db", file.string()},
             {"export", "--db", file.string(), "-o", (dir / "t.json").string()},
             {"report", "--db", file.string(), "-o", (dir / "report").string()},
             {"search-eval", "--db", file.string()}}) {
      if (file == broken && command[0] == "db") continue;  // info lists rows; `db check` is what reports broken references
      const CliResult result = run_qtune(command);
      EXPECT_EQ(result.status, 2) << file << " " << command[0] << ": " << result.err;
      EXPECT_NE(result.err.find(file.string() + ": "), std::string::npos) << result.err;
      EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
      EXPECT_EQ(result.err.find("map::at"), std::string::npos) << result.err;
      EXPECT_EQ(result.err.find(".cpp"), std::string::npos) << "no source location: " << result.err;
    }
  }
  EXPECT_FALSE(fs::exists(dir / "t.json"));
}

TEST(DbCommand, MergeChecksEveryInputBeforeCreatingTheOutput) {
  TempDir dir;
  const fs::path good = dir / "good.db";
  reports::testing::write_fixture_db(good);
  const fs::path garbage = dir / "garbage.db";
  reports::testing::write_text(garbage, std::string(4096, 'x'));
  const fs::path out = dir / "out.db";
  for (const fs::path& bad : {garbage, dir / "missing.db"}) {
    const CliResult result = run_qtune({"db", "merge", out.string(), good.string(), bad.string()});
    EXPECT_EQ(result.status, 2) << result.err;
    EXPECT_NE(result.err.find(bad.string()), std::string::npos) << result.err;
    EXPECT_FALSE(fs::exists(out)) << "OUT was created for a merge that could not run";
  }
  ASSERT_EQ(run_qtune({"db", "merge", out.string(), good.string()}).status, 0);
  EXPECT_TRUE(fs::exists(out));
}

}  // namespace
}  // namespace qtune::cli
