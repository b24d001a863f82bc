// Schema creation, migration from an older file, and refusal (without a single write) of newer or foreign files.
#include <gtest/gtest.h>

#include <fstream>

#include "db/schema.hpp"
#include "db/store.hpp"
#include "kernels/error.hpp"
#include "tests/common/expect_error.hpp"
#include "tests/db/db_test_support.hpp"

namespace qtune::db {
namespace {

using test_support::expect_input_error;
using testing::TempDir;

std::vector<std::string> table_names(Connection& connection) {
  std::vector<std::string> names;
  Statement statement = connection.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name");
  while (statement.step()) names.push_back(statement.column_text(0));
  return names;
}

std::vector<std::string> column_names(Connection& connection, const std::string& table) {
  std::vector<std::string> names;
  Statement statement = connection.prepare("SELECT name FROM pragma_table_info(?) ORDER BY cid");
  statement.bind(1, table);
  while (statement.step()) names.push_back(statement.column_text(0));
  return names;
}

TEST(Schema, NewStoreHasEveryTableWalAndForeignKeys) {
  TempDir dir;
  Store store = Store::open(dir / "new.db");
  EXPECT_EQ(store.schema_version(), kSchemaVersion);
  EXPECT_EQ(store.version_at_open(), 0);
  Connection& connection = store.connection();
  EXPECT_EQ(connection.query_int("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(connection.query_int("PRAGMA application_id"), kApplicationId);
  EXPECT_EQ(connection.query_int("PRAGMA foreign_keys"), 1);
  Statement journal = connection.prepare("PRAGMA journal_mode");
  ASSERT_TRUE(journal.step());
  EXPECT_EQ(journal.column_text(0), "wal");
  EXPECT_EQ(table_names(connection),
            (std::vector<std::string>{"compiles", "external_results", "kernel_configs", "measurements", "moe_problems", "moe_results",
                                      "moe_winners", "problems", "pruning_counts", "run_processes", "runs", "verifications",
                                      "winners"}));
}

TEST(Schema, MigrationsAreNumberedInOrder) {
  const auto& all = migrations();
  ASSERT_EQ(static_cast<int>(all.size()), kSchemaVersion);
  for (std::size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i].version, static_cast<int>(i) + 1);
}

TEST(Schema, ReopeningDoesNotMigrateAgain) {
  TempDir dir;
  { Store store = Store::open(dir / "a.db"); }
  Store again = Store::open(dir / "a.db");
  EXPECT_EQ(again.version_at_open(), kSchemaVersion);
}

TEST(Schema, MigratesAVersion1FileKeepingItsRows) {
  TempDir dir;
  const auto file = dir / "old.db";
  {
    // A file as the first schema version left it, with a run, a problem, a config and a measurement.
    Connection connection(file, OpenMode::ReadWriteCreate);
    EXPECT_EQ(migrate(connection, 1), 0);
    EXPECT_EQ(connection.query_int("PRAGMA user_version"), 1);
    EXPECT_EQ(column_names(connection, "pruning_counts").size(), 0u);
    connection.execute(
        "INSERT INTO runs (id, uuid, tool_version, git_sha, gpu_profile) VALUES (7, 'run-7', '0.0.9', 'deadbeef', 'h200');"
        "INSERT INTO problems (id, format, m, n, k) VALUES (3, 'w4a16-int4-g128', 16, 8192, 8192);"
        "INSERT INTO kernel_configs (id, family, params) VALUES (5, 'mma', '{\"tile_n\":128}');"
        "INSERT INTO measurements (run_id, problem_id, config_id, status, median_us, p10_us, p90_us, min_us, max_us) "
        "VALUES (7, 3, 5, 'ok', 12.5, 12.0, 13.0, 11.9, 14.0);");
  }
  Store store = Store::open(file);
  EXPECT_EQ(store.version_at_open(), 1);
  EXPECT_EQ(store.schema_version(), kSchemaVersion);
  EXPECT_EQ(store.connection().query_int("PRAGMA user_version"), kSchemaVersion);

  const auto run = store.find_run("run-7");
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(id_value(run->id), 7);
  EXPECT_EQ(run->shard, "");  // column added by version 2, with its default
  EXPECT_EQ(run->git_sha, "deadbeef");
  const auto measurements = store.list_measurements();
  ASSERT_EQ(measurements.size(), 1u);
  EXPECT_DOUBLE_EQ(measurements[0].stats->median_us, 12.5);
  EXPECT_EQ(measurements[0].phase, "");
  // Version 2's tables work.
  store.set_pruning_count(PruningCount{RunId{7}, ProblemId{3}, PruningStage::PreCompile, "smem", 4});
  EXPECT_EQ(store.list_pruning_counts().size(), 1u);
}

TEST(Schema, NewerFileIsRefusedAndLeftByteForByteUnchanged) {
  TempDir dir;
  const auto file = dir / "newer.db";
  {
    Store store = Store::open(file);
    store.insert_run(testing::sample_run());
  }
  testing::flatten(file);
  {
    Connection connection(file, OpenMode::ReadWrite);
    connection.execute("PRAGMA user_version = " + std::to_string(kSchemaVersion + 1));
  }
  const auto bytes_before = testing::file_bytes(file);
  const auto listing_before = dir.listing();

  expect_input_error([&] { Store::open(file); },
                     {"schema version " + std::to_string(kSchemaVersion + 1), "newer", file.string()});
  EXPECT_THROW(Store::open_read_only(file), InputError);
  EXPECT_THROW(Store::check_file(file), InputError);
  Connection connection(file, OpenMode::ReadWrite);
  EXPECT_THROW(migrate(connection), InputError);

  EXPECT_EQ(testing::file_bytes(file), bytes_before);
  EXPECT_EQ(dir.listing(), listing_before);
}

TEST(Schema, ForeignSqliteFileIsRefusedAndUnchanged) {
  TempDir dir;
  const auto file = dir / "other.db";
  {
    Connection connection(file, OpenMode::ReadWriteCreate);
    connection.execute("CREATE TABLE notes (text TEXT); INSERT INTO notes VALUES ('keep me')");
  }
  const auto bytes_before = testing::file_bytes(file);
  expect_input_error([&] { Store::open(file); }, {"not a qtune database"});
  EXPECT_EQ(testing::file_bytes(file), bytes_before);
}

TEST(Schema, NonDatabaseFileIsRefusedAndUnchanged) {
  TempDir dir;
  const auto file = dir / "text.db";
  std::ofstream(file) << std::string(4096, 'x');
  const auto bytes_before = testing::file_bytes(file);
  expect_input_error([&] { Store::open(file); }, {file.string() + ": not a SQLite database"});
  EXPECT_EQ(testing::file_bytes(file), bytes_before);
}

TEST(Schema, EmptyExistingFileIsInitialized) {
  TempDir dir;
  const auto file = dir / "empty.db";
  std::ofstream(file).flush();
  Store store = Store::open(file);
  EXPECT_EQ(store.schema_version(), kSchemaVersion);
}

TEST(Schema, ReadOnlyOpenNeverCreatesOrMigrates) {
  TempDir dir;
  EXPECT_THROW(Store::open_read_only(dir / "missing.db"), InputError);
  EXPECT_TRUE(dir.listing().empty());

  const auto file = dir / "v1.db";
  {
    Connection connection(file, OpenMode::ReadWriteCreate);
    migrate(connection, 1);
  }
  const auto bytes_before = testing::file_bytes(file);
  {
    Store store = Store::open_read_only(file);
    EXPECT_EQ(store.schema_version(), 1);
    EXPECT_EQ(store.version_at_open(), 1);
  }
  EXPECT_EQ(testing::file_bytes(file), bytes_before);

  const auto current = dir / "current.db";
  { Store store = Store::open(current); }
  Store store = Store::open_read_only(current);
  EXPECT_TRUE(store.read_only());
  try {
    store.insert_run(testing::sample_run());
    FAIL() << "a read-only store accepted a write";
  } catch (const LibraryError& error) {
    EXPECT_NE(std::string(error.what()).find("readonly"), std::string::npos) << error.what();
  }
  EXPECT_TRUE(store.list_runs().empty());
}

TEST(Schema, DirectoryIsAnInputError) { EXPECT_THROW(Store::open(testing::TempDir().path()), InputError); }

}  // namespace
}  // namespace qtune::db
