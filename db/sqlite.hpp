#pragma once
// A thin RAII layer over SQLite: a connection, prepared statements and transactions. Every SQLite call is checked and a
// failure throws LibraryError("SQLite", "<what>: <sqlite3_errmsg> [<file>]") located at the failing call.
// The store (db/store.hpp) is built on it; tests use it to craft old or damaged files. sqlite3.h is not exposed.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kernels/error.hpp"

struct sqlite3;
struct sqlite3_stmt;

namespace qtune::db {

enum class OpenMode {
  ReadOnly,         // never writes to the file, nor creates a -wal, -shm or -journal beside it
  ReadWrite,        // the file must exist
  ReadWriteCreate,  // creates the file if missing
  Memory,           // a private database in memory; the path only names it in messages
};

using Blob = std::vector<std::byte>;

// A failed SQLite call: LibraryError("SQLite", ...) that also keeps SQLite's own words (sqlite3_errmsg), so that a
// caller can tell the user what is wrong with a file without the SQL and source location around it.
class SqliteError : public LibraryError {
 public:
  SqliteError(const std::string& message, std::string reason, int result_code, const char* file, int line)
      : LibraryError("SQLite", message, file, line), reason_(std::move(reason)), result_code_(result_code) {}
  const std::string& reason() const { return reason_; }
  // SQLite's extended result code; busy() is SQLITE_BUSY (5) or SQLITE_LOCKED (6) in any extended form (low byte).
  int result_code() const { return result_code_; }
  bool busy() const { return (result_code_ & 0xff) == 5 || (result_code_ & 0xff) == 6; }

 private:
  std::string reason_;
  int result_code_ = 0;
};

// The SQLite URI that opens `path` as a file of exactly that name (never as a URI or ":memory:") in `mode`. A read-only
// open of a file that no process has open (no -wal or -journal beside it) is `immutable`, so SQLite needs neither
// locks nor a -shm file: such a file reads in a read-only folder and leaves nothing behind.
std::string file_uri(const std::filesystem::path& path, OpenMode mode);

class Connection;

// One prepared statement. Parameters are 1-based, columns 0-based. Moving is allowed, copying is not.
class Statement {
 public:
  Statement(Connection& connection, std::string_view sql);
  ~Statement();
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&&) = delete;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  void bind_null(int index);
  void bind_int(int index, std::int64_t value);
  void bind_double(int index, double value);
  void bind_text(int index, std::string_view value);
  void bind_blob(int index, const Blob& value);

  // Binds by C++ type: integers (and bool, enums not), floating point, strings, Blob, std::optional (empty: NULL),
  // std::nullopt / nullptr (NULL).
  template <typename T>
  Statement& bind(int index, const T& value) {
    using V = std::decay_t<T>;
    if constexpr (std::is_same_v<V, std::nullptr_t> || std::is_same_v<V, std::nullopt_t>) {
      bind_null(index);
    } else if constexpr (std::is_integral_v<V>) {
      bind_int(index, static_cast<std::int64_t>(value));
    } else if constexpr (std::is_floating_point_v<V>) {
      bind_double(index, static_cast<double>(value));
    } else if constexpr (std::is_same_v<V, Blob>) {
      bind_blob(index, value);
    } else if constexpr (std::is_convertible_v<const V&, std::string_view>) {
      bind_text(index, std::string_view(value));
    } else {
      // std::optional<U>
      if (value.has_value()) {
        bind(index, *value);
      } else {
        bind_null(index);
      }
    }
    return *this;
  }

  // Binds every argument in order, starting at parameter 1.
  template <typename... Args>
  Statement& bind_all(const Args&... values) {
    int index = 0;
    (bind(++index, values), ...);
    return *this;
  }

  bool step();             // true: a row is ready; false: done
  void run();              // steps to completion, ignoring rows
  void reset();            // ready to step again (bindings kept)
  void clear_bindings();

  int column_count() const;
  std::string column_name(int column) const;
  bool is_null(int column) const;
  std::int64_t column_int(int column) const;
  double column_double(int column) const;
  std::string column_text(int column) const;  // NULL reads as ""
  Blob column_blob(int column) const;
  std::optional<std::int64_t> column_optional_int(int column) const;
  std::optional<double> column_optional_double(int column) const;
  std::optional<std::string> column_optional_text(int column) const;

  const std::string& sql() const { return sql_; }

 private:
  Connection* connection_;
  sqlite3_stmt* statement_ = nullptr;
  std::string sql_;
};

// One database connection, with foreign keys on and a busy timeout. Not for use from several threads at once.
class Connection {
 public:
  Connection(const std::filesystem::path& path, OpenMode mode, int busy_timeout_ms = 30000);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  Statement prepare(std::string_view sql) { return Statement(*this, sql); }

  // Runs one or more ';'-separated statements without parameters, each prepared and stepped to completion.
  void execute(std::string_view sql);

  // Runs a single-value query ("PRAGMA user_version"); throws if it yields no row.
  std::int64_t query_int(std::string_view sql);

  std::int64_t last_insert_rowid() const;
  std::int64_t changes() const;    // rows changed by the last INSERT/UPDATE/DELETE
  bool in_transaction() const;     // not in autocommit mode
  bool read_only() const { return mode_ == OpenMode::ReadOnly; }
  const std::filesystem::path& path() const { return path_; }

  // Throws LibraryError for a failed SQLite result code, with this connection's error message.
  [[noreturn]] void fail(int result_code, std::string_view what, const char* file, int line) const;
  std::string error_message(int result_code) const;  // "<sqlite3_errmsg> (code N) [<path>]"
  std::string reason(int result_code) const;         // "<sqlite3_errmsg>"

  sqlite3* handle() const { return db_; }
  int next_savepoint_id() { return ++savepoint_counter_; }

 private:
  sqlite3* db_ = nullptr;
  std::filesystem::path path_;
  OpenMode mode_;
  int savepoint_counter_ = 0;
};

// A transaction that rolls back unless commit() is called, so an exception never leaves half a unit written.
// The outermost one is BEGIN IMMEDIATE (takes the write lock up front, so it never deadlocks on upgrade);
// nested ones are savepoints.
class Transaction {
 public:
  explicit Transaction(Connection& connection);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  Transaction(Transaction&& other) noexcept;
  Transaction& operator=(Transaction&&) = delete;

  void commit();
  void rollback();  // explicit early rollback; the destructor does the same when neither was called

 private:
  Connection* connection_;
  std::string savepoint_;  // empty for the outermost transaction
  bool open_ = true;
};

}  // namespace qtune::db
