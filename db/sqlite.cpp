#include "db/sqlite.hpp"

#include <sqlite3.h>

#include <cstring>
#include <system_error>
#include <utility>

#include "kernels/error.hpp"

namespace qtune::db {

// Checks one SQLite call made through `connection`; a failure throws at this file:line.
#define QTUNE_SQLITE_CHECK(connection, call, what)                     \
  do {                                                                 \
    const int qtune_sqlite_rc = (call);                                \
    if (qtune_sqlite_rc != SQLITE_OK) {                                \
      (connection).fail(qtune_sqlite_rc, (what), __FILE__, __LINE__); \
    }                                                                  \
  } while (false)

namespace {

std::string short_sql(std::string_view sql) {
  std::string text;
  for (const char c : sql) {
    if (c == '\n' || c == '\t') {
      if (!text.empty() && text.back() != ' ') text += ' ';
    } else if (!(c == ' ' && !text.empty() && text.back() == ' ')) {
      text += c;
    }
    if (text.size() > 80) return text + "...";
  }
  while (!text.empty() && text.front() == ' ') text.erase(0, 1);
  return text;
}

bool exists_beside(const std::filesystem::path& path, std::string_view suffix) {
  std::error_code error;
  return std::filesystem::exists(std::filesystem::path(path.string() + std::string(suffix)), error);
}

}  // namespace

std::string file_uri(const std::filesystem::path& path, OpenMode mode) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string uri = "file:";
  for (const unsigned char c : std::filesystem::absolute(path).lexically_normal().string()) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '/' || c == '-' ||
                       c == '_' || c == '.' || c == '~';
    if (plain) {
      uri += static_cast<char>(c);
    } else {
      uri += '%';
      uri += kHex[c >> 4];
      uri += kHex[c & 0x0f];
    }
  }
  switch (mode) {
    case OpenMode::ReadOnly:
      // A -wal or -journal means a writer has (or had) the file open: read through it with locks, as usual. Without
      // one the file is whole. The price of reading it without locks or a -shm: a writer that opens the file meanwhile
      // is not seen, and if it checkpointed pages into the file during the read, the read could fail as malformed.
      return uri + (exists_beside(path, "-wal") || exists_beside(path, "-journal") ? "?mode=ro" : "?mode=ro&immutable=1");
    case OpenMode::ReadWrite: return uri + "?mode=rw";
    case OpenMode::ReadWriteCreate: return uri + "?mode=rwc";
    case OpenMode::Memory: return ":memory:";
  }
  return uri;
}

// ---------------------------------------------------------------------------------------------------- Connection

Connection::Connection(const std::filesystem::path& path, OpenMode mode, int busy_timeout_ms) : path_(path), mode_(mode) {
  // The URI is made here from the path, so a path that looks like a URI ("file:x?mode=memory") is just a file name.
  int flags = SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX;
  switch (mode) {
    case OpenMode::ReadOnly: flags |= SQLITE_OPEN_READONLY; break;
    case OpenMode::ReadWrite: flags |= SQLITE_OPEN_READWRITE; break;
    case OpenMode::ReadWriteCreate:
    case OpenMode::Memory: flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE; break;
  }
  const std::string uri = mode == OpenMode::Memory ? std::string(":memory:") : file_uri(path, mode);
  const int rc = sqlite3_open_v2(uri.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    // On failure the handle (if any) holds the message; it must still be closed.
    const std::string message = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    db_ = nullptr;
    throw SqliteError("cannot open '" + path.string() + "': " + message, message, rc, __FILE__, __LINE__);
  }
  try {
    QTUNE_SQLITE_CHECK(*this, sqlite3_extended_result_codes(db_, 1), "enable extended result codes");
    QTUNE_SQLITE_CHECK(*this, sqlite3_busy_timeout(db_, busy_timeout_ms), "set busy timeout");
    execute("PRAGMA foreign_keys = ON");
    if (query_int("PRAGMA foreign_keys") != 1) {
      QTUNE_LIBRARY_ERROR("SQLite", "this SQLite build cannot enforce foreign keys [" + path_.string() + "]");
    }
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

Connection::~Connection() {
  // sqlite3_close fails only while statements are unfinalized; every Statement is RAII, so close_v2 is a safe fallback.
  if (db_ != nullptr && sqlite3_close(db_) != SQLITE_OK) sqlite3_close_v2(db_);
}

std::string Connection::reason(int result_code) const { return db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(result_code); }

std::string Connection::error_message(int result_code) const {
  return reason(result_code) + " (code " + std::to_string(result_code) + ") [" + path_.string() + "]";
}

void Connection::fail(int result_code, std::string_view what, const char* file, int line) const {
  throw SqliteError(std::string(what) + ": " + error_message(result_code), reason(result_code), result_code, file, line);
}

void Connection::execute(std::string_view sql) {
  const char* begin = sql.data();
  const char* const end = sql.data() + sql.size();
  while (begin < end) {
    sqlite3_stmt* statement = nullptr;
    const char* tail = nullptr;
    const int length = static_cast<int>(end - begin);
    QTUNE_SQLITE_CHECK(*this, sqlite3_prepare_v2(db_, begin, length, &statement, &tail),
                       "prepare \"" + short_sql(std::string_view(begin, static_cast<std::size_t>(end - begin))) + "\"");
    if (statement == nullptr) break;  // only whitespace or comments were left
    int rc = SQLITE_ROW;
    while (rc == SQLITE_ROW) rc = sqlite3_step(statement);
    if (rc != SQLITE_DONE) {
      // Read the message before finalizing, which would otherwise be the last call to report on.
      const std::string message = "run \"" + short_sql(sqlite3_sql(statement) != nullptr ? sqlite3_sql(statement) : "") + "\": " +
                                  error_message(rc);
      const std::string sqlite_reason = reason(rc);
      sqlite3_finalize(statement);
      throw SqliteError(message, sqlite_reason, rc, __FILE__, __LINE__);
    }
    QTUNE_SQLITE_CHECK(*this, sqlite3_finalize(statement), "finalize");
    begin = tail;
  }
}

std::int64_t Connection::query_int(std::string_view sql) {
  Statement statement(*this, sql);
  if (!statement.step()) QTUNE_LIBRARY_ERROR("SQLite", "\"" + short_sql(sql) + "\" returned no row [" + path_.string() + "]");
  return statement.column_int(0);
}

std::int64_t Connection::last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }
std::int64_t Connection::changes() const { return sqlite3_changes(db_); }
bool Connection::in_transaction() const { return sqlite3_get_autocommit(db_) == 0; }

// ---------------------------------------------------------------------------------------------------- Statement

Statement::Statement(Connection& connection, std::string_view sql) : connection_(&connection), sql_(sql) {
  const char* tail = nullptr;
  QTUNE_SQLITE_CHECK(connection, sqlite3_prepare_v2(connection.handle(), sql.data(), static_cast<int>(sql.size()), &statement_, &tail),
                     "prepare \"" + short_sql(sql) + "\"");
  if (statement_ == nullptr) QTUNE_LIBRARY_ERROR("SQLite", "empty statement \"" + short_sql(sql) + "\"");
  for (; tail != nullptr && *tail != '\0'; ++tail) {
    if (*tail != ' ' && *tail != '\n' && *tail != '\t' && *tail != ';') {
      sqlite3_finalize(statement_);
      statement_ = nullptr;
      QTUNE_LIBRARY_ERROR("SQLite", "more than one statement in \"" + short_sql(sql) + "\"");
    }
  }
}

Statement::~Statement() { sqlite3_finalize(statement_); }

Statement::Statement(Statement&& other) noexcept
    : connection_(other.connection_), statement_(std::exchange(other.statement_, nullptr)), sql_(std::move(other.sql_)) {}

void Statement::bind_null(int index) {
  QTUNE_SQLITE_CHECK(*connection_, sqlite3_bind_null(statement_, index), "bind parameter " + std::to_string(index) + " of \"" + short_sql(sql_) + "\"");
}

void Statement::bind_int(int index, std::int64_t value) {
  QTUNE_SQLITE_CHECK(*connection_, sqlite3_bind_int64(statement_, index, value),
                     "bind parameter " + std::to_string(index) + " of \"" + short_sql(sql_) + "\"");
}

void Statement::bind_double(int index, double value) {
  QTUNE_SQLITE_CHECK(*connection_, sqlite3_bind_double(statement_, index, value),
                     "bind parameter " + std::to_string(index) + " of \"" + short_sql(sql_) + "\"");
}

void Statement::bind_text(int index, std::string_view value) {
  QTUNE_SQLITE_CHECK(*connection_,
                     sqlite3_bind_text64(statement_, index, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8),
                     "bind parameter " + std::to_string(index) + " of \"" + short_sql(sql_) + "\"");
}

void Statement::bind_blob(int index, const Blob& value) {
  // A zero-length blob still binds as a blob (not NULL): SQLite needs a non-null pointer for that.
  static const std::byte empty{};
  const void* data = value.empty() ? &empty : value.data();
  QTUNE_SQLITE_CHECK(*connection_, sqlite3_bind_blob64(statement_, index, data, value.size(), SQLITE_TRANSIENT),
                     "bind parameter " + std::to_string(index) + " of \"" + short_sql(sql_) + "\"");
}

bool Statement::step() {
  const int rc = sqlite3_step(statement_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  const std::string message = connection_->error_message(rc);
  const std::string reason = connection_->reason(rc);
  sqlite3_reset(statement_);  // so the statement can be reused
  throw SqliteError("run \"" + short_sql(sql_) + "\": " + message, reason, rc, __FILE__, __LINE__);
}

void Statement::run() {
  while (step()) {
  }
}

void Statement::reset() { QTUNE_SQLITE_CHECK(*connection_, sqlite3_reset(statement_), "reset \"" + short_sql(sql_) + "\""); }

void Statement::clear_bindings() {
  QTUNE_SQLITE_CHECK(*connection_, sqlite3_clear_bindings(statement_), "clear bindings of \"" + short_sql(sql_) + "\"");
}

int Statement::column_count() const { return sqlite3_column_count(statement_); }

std::string Statement::column_name(int column) const {
  const char* name = sqlite3_column_name(statement_, column);
  return name != nullptr ? name : "";
}

bool Statement::is_null(int column) const { return sqlite3_column_type(statement_, column) == SQLITE_NULL; }

std::int64_t Statement::column_int(int column) const { return sqlite3_column_int64(statement_, column); }

double Statement::column_double(int column) const { return sqlite3_column_double(statement_, column); }

std::string Statement::column_text(int column) const {
  const unsigned char* text = sqlite3_column_text(statement_, column);
  if (text == nullptr) {
    if (sqlite3_errcode(connection_->handle()) == SQLITE_NOMEM) {
      connection_->fail(SQLITE_NOMEM, "read column " + std::to_string(column), __FILE__, __LINE__);
    }
    return "";
  }
  const int size = sqlite3_column_bytes(statement_, column);
  return std::string(reinterpret_cast<const char*>(text), static_cast<std::size_t>(size));
}

Blob Statement::column_blob(int column) const {
  const void* data = sqlite3_column_blob(statement_, column);
  const int size = sqlite3_column_bytes(statement_, column);
  Blob blob(static_cast<std::size_t>(size));
  if (size > 0 && data != nullptr) std::memcpy(blob.data(), data, blob.size());
  return blob;
}

std::optional<std::int64_t> Statement::column_optional_int(int column) const {
  if (is_null(column)) return std::nullopt;
  return column_int(column);
}

std::optional<double> Statement::column_optional_double(int column) const {
  if (is_null(column)) return std::nullopt;
  return column_double(column);
}

std::optional<std::string> Statement::column_optional_text(int column) const {
  if (is_null(column)) return std::nullopt;
  return column_text(column);
}

// ---------------------------------------------------------------------------------------------------- Transaction

Transaction::Transaction(Connection& connection) : connection_(&connection) {
  if (connection.in_transaction()) {
    savepoint_ = "qtune_savepoint_" + std::to_string(connection.next_savepoint_id());
    connection.execute("SAVEPOINT " + savepoint_);
  } else {
    connection.execute("BEGIN IMMEDIATE");
  }
}

Transaction::Transaction(Transaction&& other) noexcept
    : connection_(other.connection_), savepoint_(std::move(other.savepoint_)), open_(std::exchange(other.open_, false)) {}

void Transaction::commit() {
  if (!open_) QTUNE_THROW(Error, "commit of a transaction that is already finished");
  connection_->execute(savepoint_.empty() ? std::string("COMMIT") : "RELEASE " + savepoint_);
  open_ = false;
}

void Transaction::rollback() {
  if (!open_) return;
  open_ = false;
  if (savepoint_.empty()) {
    // After some errors SQLite has already rolled back on its own; ROLLBACK would then fail.
    if (connection_->in_transaction()) connection_->execute("ROLLBACK");
  } else {
    connection_->execute("ROLLBACK TO " + savepoint_ + "; RELEASE " + savepoint_);
  }
}

Transaction::~Transaction() {
  try {
    rollback();
  } catch (...) {
    // A destructor must not throw; a failed rollback leaves SQLite to roll back when the connection closes.
  }
}

}  // namespace qtune::db
