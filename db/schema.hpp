#pragma once
// The store's versioned schema. PRAGMA user_version holds the version; PRAGMA application_id marks a qtune file.
// Pending migrations run inside one transaction, so a crash leaves the old version or the new one, never a mix.
#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

namespace qtune::db {

class Connection;

inline constexpr int kSchemaVersion = 4;
// The oldest version whose rows the queries read as they are (read-only commands do not migrate): versions 3 and 4
// added only tables of their own (run_processes; the moe_* tables, which db/moe_store.hpp reads only when present).
inline constexpr int kOldestReadableVersion = 2;
inline constexpr std::int64_t kApplicationId = 0x7174756E;  // "qtun"

struct Migration {
  int version;               // the version this migration produces
  std::string_view summary;  // what it adds, for `qtune db info`
  std::string_view sql;
};

// Every migration in order: migrations()[i].version == i + 1.
const std::vector<Migration>& migrations();

// What a file says about itself, read without changing it.
struct SchemaState {
  std::int64_t user_version = 0;
  std::int64_t application_id = 0;
  std::int64_t object_count = 0;  // tables, indexes, views and triggers in sqlite_schema
  bool empty() const { return user_version == 0 && application_id == 0 && object_count == 0; }
  bool is_qtune() const { return application_id == kApplicationId; }
};
SchemaState read_schema_state(Connection& connection);

// Throws InputError naming `file` unless the state is an empty file or a qtune database no newer than this build.
void require_usable(const SchemaState& state, const std::filesystem::path& file);

// Throws InputError naming `file` unless it holds every table and column of schema version `version` (a file may mark
// itself as qtune's and still hold other tables).
void require_schema_tables(Connection& connection, int version, const std::filesystem::path& file);

// Brings a qtune (or empty) database to `target_version` (<= kSchemaVersion) in one transaction; returns the
// version found before. Throws InputError, changing nothing, if the file is newer than `target_version`'s build
// (kSchemaVersion) or is not a qtune database.
int migrate(Connection& connection, int target_version = kSchemaVersion);

}  // namespace qtune::db
