// Opening files: read-only opens write nothing (not even a -wal or -shm) and work in read-only folders; a path is a
// file name, never a SQLite URI; files that are not (whole) qtune databases are InputErrors naming the file.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "db/store.hpp"
#include "kernels/error.hpp"
#include "tests/common/expect_error.hpp"
#include "tests/db/db_test_support.hpp"

namespace qtune::db {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using ::qtune::test_support::input_error;
using ::qtune::test_support::WorkingDirectory;

void fill(const fs::path& file) {
  Store store = Store::open(file);
  const RunId run = store.insert_run(testing::sample_run());
  const ProblemId problem = store.upsert_problem(Problem{"w4a16-int4-g128", 16, 8192, 8192});
  const ConfigId config = store.upsert_config(testing::kernel_config(128));
  store.insert_verification(testing::passed(run, problem, config));
  store.insert_measurement(testing::ok_measurement(run, problem, config, 10));
  store.finish_run(run, RunStatus::Completed);
}

// Restores a folder's mode when the test ends, so that TempDir can remove it.
class FolderMode {
 public:
  FolderMode(fs::path folder, fs::perms mode) : folder_(std::move(folder)) { fs::permissions(folder_, mode); }
  ~FolderMode() { fs::permissions(folder_, fs::perms::owner_all); }
  FolderMode(const FolderMode&) = delete;
  FolderMode& operator=(const FolderMode&) = delete;

 private:
  fs::path folder_;
};

TEST(OpenReadOnly, ReadsInAReadOnlyFolderAndLeavesNoFileBehind) {
  TempDir dir;
  const fs::path folder = dir / "ro";
  fs::create_directory(folder);
  const fs::path file = folder / "full.db";
  fill(file);  // a WAL database, closed: the last connection folded the WAL back and removed it
  ASSERT_FALSE(fs::exists(file.string() + "-wal"));
  const auto before = testing::file_bytes(file);
  fs::permissions(file, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  const FolderMode read_only_folder(folder, fs::perms(0555));
  {
    Store store = Store::open_read_only(file);
    EXPECT_EQ(store.list_runs().size(), 1u);
    EXPECT_EQ(store.list_measurements().size(), 1u);
    EXPECT_TRUE(store.check().empty());
    // Root may write into a 0555 folder, so the test looks for the files themselves: none may appear.
    EXPECT_FALSE(fs::exists(file.string() + "-wal"));
    EXPECT_FALSE(fs::exists(file.string() + "-shm"));
  }
  EXPECT_TRUE(Store::check_file(file).empty());
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(folder)) names.push_back(entry.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"full.db"});
  EXPECT_EQ(testing::file_bytes(file), before);
}

TEST(OpenReadOnly, ReadsThroughTheWalOfAWriterThatHasTheFileOpen) {
  TempDir dir;
  const fs::path file = dir / "live.db";
  Store writer = Store::open(file);
  const RunId run = writer.insert_run(testing::sample_run());
  ASSERT_TRUE(fs::exists(file.string() + "-wal"));
  Store reader = Store::open_read_only(file);
  ASSERT_EQ(reader.list_runs().size(), 1u);
  writer.finish_run(run, RunStatus::Completed);
  EXPECT_EQ(reader.list_runs()[0].status, RunStatus::Completed);  // not a stale immutable snapshot
}

TEST(OpenPath, APathThatLooksLikeAUriOrMemoryIsAFileOfThatName) {
  TempDir dir;
  const WorkingDirectory here(dir.path());
  for (const std::string name : {"file:c.db?mode=memory", ":memory:", "file:d.db?mode=ro&vfs=x", "with space%20.db"}) {
    {
      Store store = Store::open(name);
      store.insert_run(testing::sample_run());
    }
    EXPECT_TRUE(fs::is_regular_file(dir / name)) << name;
    EXPECT_EQ(Store::open_read_only(name).list_runs().size(), 1u) << name;
  }
}

TEST(OpenBadFile, EachIsAnInputErrorSayingWhatIsWrongWithTheFile) {
  TempDir dir;
  const fs::path good = dir / "good.db";
  fill(good);
  testing::flatten(good);

  const fs::path garbage = dir.write("garbage.db", std::string(8192, '\x01'));
  const fs::path empty = dir.write("empty.db", "");
  const fs::path truncated = dir / "truncated.db";
  fs::copy_file(good, truncated);
  fs::resize_file(truncated, fs::file_size(good) / 2);
  const fs::path foreign = dir / "foreign.db";
  {
    Connection connection(foreign, OpenMode::ReadWriteCreate);
    connection.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)");
    connection.execute("PRAGMA application_id = " + std::to_string(kApplicationId));
    connection.execute("PRAGMA user_version = " + std::to_string(kSchemaVersion));
  }

  const std::vector<std::pair<fs::path, std::string>> cases = {
      {garbage, "not a SQLite database"},
      {empty, "an empty file"},
      {truncated, "truncated"},
      {foreign, "but it has no table '"},
  };
  for (const auto& [file, what] : cases) {
    const auto bytes = testing::file_bytes(file);
    const std::string message = input_error([&] { Store::open_read_only(file); });
    EXPECT_NE(message.find(file.string()), std::string::npos) << message;
    EXPECT_NE(message.find(what), std::string::npos) << message;
    EXPECT_EQ(message.find("SELECT"), std::string::npos) << "no SQL in the message: " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    if (file != empty) {  // an empty file is where `db init` makes a new database
      EXPECT_NE(input_error([&] { Store::open(file); }).find(what), std::string::npos) << file;
    }
    EXPECT_EQ(testing::file_bytes(file), bytes) << file << " was changed";
    EXPECT_FALSE(fs::exists(file.string() + "-wal")) << file;
  }
}

TEST(OpenBadFile, BrokenReferencesMakeTheStoreUnreadableForReports) {
  TempDir dir;
  const fs::path file = dir / "references.db";
  fill(file);
  {
    Connection raw(file, OpenMode::ReadWrite);
    raw.execute("PRAGMA foreign_keys = OFF");
    raw.execute("DELETE FROM kernel_configs");
  }
  Store store = Store::open_read_only(file);
  const std::string message = input_error([&] { store.require_readable(); });
  EXPECT_NE(message.find(file.string() + ": damaged"), std::string::npos) << message;
  EXPECT_NE(message.find("refers to a missing row of kernel_configs"), std::string::npos) << message;

  TempDir other;
  const fs::path sound = other / "sound.db";
  fill(sound);
  EXPECT_NO_THROW(Store::open_read_only(sound).require_readable());
  const fs::path fresh = other / "fresh.db";
  Store::open(fresh);
  EXPECT_NO_THROW(Store::open_read_only(fresh).require_readable());
}

}  // namespace
}  // namespace qtune::db
