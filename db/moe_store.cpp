#include "db/moe_store.hpp"

#include <cmath>

#include "kernels/error.hpp"

namespace qtune::db {

namespace {

// The key winners are stored under, as Store::set_winner computes it.
constexpr std::string_view kGpuKeyOfRun = "(CASE WHEN r.gpu_profile <> '' THEN r.gpu_profile ELSE r.gpu_name END)";

void require(bool condition, const std::string& message) {
  if (!condition) QTUNE_THROW(Error, message);
}

bool has_moe_tables(Store& store) {
  return store.connection().query_int("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'moe_winners'") > 0;
}

constexpr std::string_view kProblemColumns = "id, format, experts, top_k, tokens, n, k, projection, layout, routing, seed";

MoeProblemRecord problem_of(const Statement& row) {
  MoeProblemRecord record;
  record.id = MoeProblemId{row.column_int(0)};
  record.format = row.column_text(1);
  record.experts = static_cast<int>(row.column_int(2));
  record.top_k = static_cast<int>(row.column_int(3));
  record.tokens = row.column_int(4);
  record.n = row.column_int(5);
  record.k = row.column_int(6);
  record.projection = row.column_text(7);
  record.layout = row.column_text(8);
  record.routing = row.column_text(9);
  record.seed = static_cast<std::uint64_t>(row.column_int(10));
  return record;
}

std::optional<MoeProblemId> find_moe_problem(Store& store, const MoeProblemKey& key) {
  Statement find = store.connection().prepare(
      "SELECT id FROM moe_problems WHERE format = ? AND experts = ? AND top_k = ? AND tokens = ? AND n = ? AND k = ? AND "
      "projection = ? AND layout = ? AND routing = ? AND seed = ?");
  find.bind_all(key.format, key.experts, key.top_k, key.tokens, key.n, key.k, key.projection, key.layout, key.routing,
                static_cast<std::int64_t>(key.seed));
  if (!find.step()) return std::nullopt;
  return MoeProblemId{find.column_int(0)};
}

}  // namespace

MoeProblemId upsert_moe_problem(Store& store, const MoeProblemKey& key) {
  require(!key.format.empty() && !key.routing.empty(), "upsert_moe_problem: empty format or routing");
  Transaction transaction = store.transaction();
  Statement insert = store.connection().prepare(
      "INSERT OR IGNORE INTO moe_problems (format, experts, top_k, tokens, n, k, projection, layout, routing, seed) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  insert.bind_all(key.format, key.experts, key.top_k, key.tokens, key.n, key.k, key.projection, key.layout, key.routing,
                  static_cast<std::int64_t>(key.seed));
  insert.run();
  const auto id = find_moe_problem(store, key);
  if (!id) QTUNE_LIBRARY_ERROR("SQLite", "MoE problem vanished right after its insert");
  transaction.commit();
  return *id;
}

std::optional<MoeProblemRecord> get_moe_problem(Store& store, MoeProblemId id) {
  Statement select = store.connection().prepare("SELECT " + std::string(kProblemColumns) + " FROM moe_problems WHERE id = ?");
  select.bind_all(id_value(id));
  if (!select.step()) return std::nullopt;
  return problem_of(select);
}

std::vector<MoeProblemRecord> list_moe_problems(Store& store) {
  std::vector<MoeProblemRecord> problems;
  if (!has_moe_tables(store)) return problems;
  Statement select = store.connection().prepare("SELECT " + std::string(kProblemColumns) + " FROM moe_problems ORDER BY id");
  while (select.step()) problems.push_back(problem_of(select));
  return problems;
}

void insert_moe_result(Store& store, const MoeResult& result) {
  require(result.outcome != "measured" || (result.median_us && std::isfinite(*result.median_us) && *result.median_us > 0),
          "insert_moe_result: a measured result needs a positive median");
  // JSON has no infinity and neither has the report: a NaN/inf error is stored as NULL.
  const auto finite = [](const std::optional<double>& value) -> std::optional<double> {
    return value && std::isfinite(*value) ? value : std::nullopt;
  };
  Statement insert = store.connection().prepare(
      "INSERT INTO moe_results (run_id, problem_id, config_id, outcome, verified, max_rel_error, tolerance, rows_checked, "
      "median_us, ci_low_us, ci_high_us, sample_count, phase, message) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  insert.bind_all(id_value(result.run), id_value(result.problem), id_value(result.config), result.outcome,
                  result.verified ? 1 : 0, finite(result.max_rel_error), finite(result.tolerance), result.rows_checked,
                  finite(result.median_us), finite(result.ci_low_us), finite(result.ci_high_us), result.sample_count,
                  result.phase, result.message);
  insert.run();
}

std::vector<MoeResult> list_moe_results(Store& store, MoeProblemId problem, const std::string& gpu) {
  std::vector<MoeResult> results;
  if (!has_moe_tables(store)) return results;
  Statement select = store.connection().prepare(
      "SELECT x.run_id, x.problem_id, x.config_id, x.outcome, x.verified, x.max_rel_error, x.tolerance, x.rows_checked, "
      "x.median_us, x.ci_low_us, x.ci_high_us, x.sample_count, x.phase, x.message FROM moe_results x "
      "JOIN runs r ON r.id = x.run_id WHERE x.problem_id = ? AND " + std::string(kGpuKeyOfRun) + " = ? ORDER BY x.id");
  select.bind_all(id_value(problem), gpu);
  while (select.step()) {
    MoeResult result;
    result.run = RunId{select.column_int(0)};
    result.problem = MoeProblemId{select.column_int(1)};
    result.config = ConfigId{select.column_int(2)};
    result.outcome = select.column_text(3);
    result.verified = select.column_int(4) != 0;
    result.max_rel_error = select.column_optional_double(5);
    result.tolerance = select.column_optional_double(6);
    result.rows_checked = select.column_int(7);
    result.median_us = select.column_optional_double(8);
    result.ci_low_us = select.column_optional_double(9);
    result.ci_high_us = select.column_optional_double(10);
    result.sample_count = select.column_int(11);
    result.phase = select.column_text(12);
    result.message = select.column_text(13);
    results.push_back(std::move(result));
  }
  return results;
}

void set_moe_winner(Store& store, const MoeWinner& winner) {
  require(std::isfinite(winner.median_us) && winner.median_us > 0, "set_moe_winner: median_us must be positive");
  Transaction transaction = store.transaction();
  const auto run = store.get_run(winner.run);
  require(run.has_value(), "set_moe_winner: no run #" + std::to_string(id_value(winner.run)));
  const std::string gpu = run->gpu_key();
  require(!gpu.empty(), "set_moe_winner: run #" + std::to_string(id_value(winner.run)) + " has no GPU");
  const auto config = store.get_config(winner.config);
  require(config.has_value(), "set_moe_winner: no kernel config #" + std::to_string(id_value(winner.config)));
  require(config->kind == ConfigKind::Kernel, "set_moe_winner: config #" + std::to_string(id_value(winner.config)) + " is a baseline");
  Statement verdicts = store.connection().prepare(
      "SELECT sum(x.outcome = 'measured' AND x.verified = 1), sum(x.outcome = 'verification-failed') FROM moe_results x "
      "JOIN runs r ON r.id = x.run_id WHERE x.problem_id = ? AND x.config_id = ? AND " + std::string(kGpuKeyOfRun) + " = ?");
  verdicts.bind_all(id_value(winner.problem), id_value(winner.config), gpu);
  verdicts.step();
  const std::string which = "set_moe_winner: config #" + std::to_string(id_value(winner.config)) + " for MoE problem #" +
                            std::to_string(id_value(winner.problem)) + " on " + gpu;
  require(verdicts.column_int(1) == 0, which + " failed verification and can never win");
  require(verdicts.column_int(0) > 0, which + " has no verified measurement");
  Statement upsert = store.connection().prepare(
      "INSERT INTO moe_winners (run_id, problem_id, gpu, config_id, median_us, reason) VALUES (?, ?, ?, ?, ?, ?) "
      "ON CONFLICT (problem_id, gpu) DO UPDATE SET run_id = excluded.run_id, config_id = excluded.config_id, "
      "median_us = excluded.median_us, reason = excluded.reason, decided_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')");
  upsert.bind_all(id_value(winner.run), id_value(winner.problem), gpu, id_value(winner.config), winner.median_us, winner.reason);
  upsert.run();
  transaction.commit();
}

namespace {

std::vector<MoeWinnerRecord> select_winners(Store& store, const std::string& where, const std::vector<std::string>& values,
                                            std::optional<MoeProblemId> problem) {
  std::vector<MoeWinnerRecord> winners;
  if (!has_moe_tables(store)) return winners;
  Statement select = store.connection().prepare(
      "SELECT run_id, problem_id, config_id, median_us, reason, gpu, decided_at FROM moe_winners WHERE " + where +
      " ORDER BY problem_id, gpu");
  int index = 1;
  if (problem) select.bind_int(index++, id_value(*problem));
  for (const std::string& value : values) select.bind_text(index++, value);
  while (select.step()) {
    MoeWinnerRecord record;
    record.run = RunId{select.column_int(0)};
    record.problem = MoeProblemId{select.column_int(1)};
    record.config = ConfigId{select.column_int(2)};
    record.median_us = select.column_double(3);
    record.reason = select.column_text(4);
    record.gpu = select.column_text(5);
    record.decided_at = select.column_text(6);
    winners.push_back(std::move(record));
  }
  return winners;
}

}  // namespace

std::optional<MoeWinnerRecord> get_moe_winner(Store& store, MoeProblemId problem, const std::string& gpu) {
  std::vector<MoeWinnerRecord> winners = select_winners(store, "problem_id = ? AND gpu = ?", {gpu}, problem);
  if (winners.empty()) return std::nullopt;
  return winners.front();
}

std::vector<MoeWinnerRecord> list_moe_winners(Store& store, const std::optional<std::string>& gpu) {
  if (gpu) return select_winners(store, "gpu = ?", {*gpu}, std::nullopt);
  return select_winners(store, "1", {}, std::nullopt);
}

}  // namespace qtune::db
