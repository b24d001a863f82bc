// Store::check: a sound store has no findings; damage, broken references, old schemas and broken rules are reported.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "db/store.hpp"
#include "kernels/error.hpp"
#include "tests/common/expect_error.hpp"
#include "tests/db/db_test_support.hpp"

namespace qtune::db {
namespace {

using test_support::expect_input_error;
using testing::TempDir;

bool mentions(const std::vector<std::string>& problems, const std::string& text) {
  return std::any_of(problems.begin(), problems.end(), [&](const std::string& line) { return line.find(text) != std::string::npos; });
}

std::string joined(const std::vector<std::string>& problems) {
  std::string text;
  for (const auto& line : problems) text += line + "\n";
  return text;
}

// A store with enough rows to span many pages, flattened so the main file alone holds it.
void fill(const std::filesystem::path& file) {
  Store store = Store::open(file);
  auto transaction = store.transaction();
  const RunId run = store.insert_run(testing::sample_run());
  const ConfigId config = store.upsert_config(testing::kernel_config(128));
  for (int m = 1; m <= 400; ++m) {
    const ProblemId problem = store.upsert_problem(Problem{"w4a16-int4-g128", m, 8192, 8192});
    store.insert_verification(testing::passed(run, problem, config));
    store.insert_measurement(testing::ok_measurement(run, problem, config, 10 + m));
  }
  transaction.commit();
}

TEST(Check, SoundStoreHasNoFindings) {
  TempDir dir;
  fill(dir / "good.db");
  EXPECT_TRUE(Store::check_file(dir / "good.db").empty()) << joined(Store::check_file(dir / "good.db"));
  Store store = Store::open(dir / "good.db");
  EXPECT_TRUE(store.check().empty());
}

TEST(Check, DamagedPagesAreReported) {
  TempDir dir;
  const auto file = dir / "damaged.db";
  fill(file);
  testing::flatten(file);
  std::int64_t page_size = 0;
  std::int64_t index_root = 0;
  {
    Connection connection(file, OpenMode::ReadOnly);
    page_size = connection.query_int("PRAGMA page_size");
    Statement root = connection.prepare("SELECT rootpage FROM sqlite_master WHERE name = 'measurements_by_problem'");
    ASSERT_TRUE(root.step());
    index_root = root.column_int(0);
  }
  ASSERT_GT(index_root, 1);
  {
    // Scribble over the index's root page, all but its type byte, so its cells and child pointers are garbage.
    std::fstream stream(file, std::ios::in | std::ios::out | std::ios::binary);
    stream.seekp((index_root - 1) * page_size + 1);
    const std::string garbage(static_cast<std::size_t>(page_size - 1), '\x5a');
    stream.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  }
  const auto problems = Store::check_file(file);
  EXPECT_FALSE(problems.empty());
  EXPECT_TRUE(mentions(problems, "integrity") || mentions(problems, "malformed")) << joined(problems);
}

// A file that is not a whole SQLite database is bad input, as for every command: one line saying what is wrong.
TEST(Check, TruncatedFileIsAnInputError) {
  TempDir dir;
  const auto file = dir / "truncated.db";
  fill(file);
  testing::flatten(file);
  std::filesystem::resize_file(file, std::filesystem::file_size(file) / 2);
  expect_input_error([&] { Store::check_file(file); }, {file.string() + ": truncated"});
}

TEST(Check, GarbageFileIsAnInputError) {
  TempDir dir;
  const auto file = dir / "garbage.db";
  std::ofstream(file) << std::string(8192, '\x01');
  expect_input_error([&] { Store::check_file(file); }, {file.string() + ": not a SQLite database"});
}

TEST(Check, BrokenReferencesAreReported) {
  TempDir dir;
  const auto file = dir / "references.db";
  fill(file);
  {
    Connection raw(file, OpenMode::ReadWrite);
    raw.execute("PRAGMA foreign_keys = OFF");
    raw.execute("DELETE FROM kernel_configs");
  }
  const auto problems = Store::check_file(file);
  EXPECT_TRUE(mentions(problems, "foreign key: measurements")) << joined(problems);
  EXPECT_TRUE(mentions(problems, "foreign key: verifications")) << joined(problems);
}

TEST(Check, WinnerThatFailedVerificationIsReported) {
  TempDir dir;
  const auto file = dir / "winner.db";
  {
    Store store = Store::open(file);
    const auto [run, problem, config] = testing::insert_sample_rows(store);
    store.insert_verification(testing::passed(run, problem, config));
    store.set_winner(Winner{run, problem, config, 10, "fastest"});
    EXPECT_TRUE(store.check().empty());
    // A later run on the same GPU finds the winner wrong; the stale winner is now a finding.
    const RunId later = store.insert_run(testing::sample_run());
    store.insert_verification(testing::failed(later, problem, config));
    const auto problems = store.check();
    EXPECT_TRUE(mentions(problems, "failed verification")) << joined(problems);
  }
}

TEST(Check, OlderSchemaIsReported) {
  TempDir dir;
  const auto file = dir / "old.db";
  {
    Connection connection(file, OpenMode::ReadWriteCreate);
    migrate(connection, 1);
  }
  const auto problems = Store::check_file(file);
  EXPECT_TRUE(mentions(problems, "schema version 1 is older")) << joined(problems);
}

TEST(Check, MissingFileIsAnInputError) {
  TempDir dir;
  EXPECT_THROW(Store::check_file(dir / "missing.db"), InputError);
}

}  // namespace
}  // namespace qtune::db
