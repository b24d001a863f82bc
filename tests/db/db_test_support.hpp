#pragma once
// Shared pieces of the db tests: a temporary directory, file bytes, and filled-in rows.
#include <gtest/gtest.h>

#include "tests/common/temp_dir.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "db/store.hpp"

namespace qtune::db::testing {

namespace fs = std::filesystem;

using TempDir = ::qtune::test_support::TempDir;

inline std::vector<char> file_bytes(const fs::path& file) {
  std::ifstream stream(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
}

// Folds the WAL into the main file and leaves rollback-journal mode, so the main file alone holds the database.
inline void flatten(const fs::path& file) {
  Connection connection(file, OpenMode::ReadWrite);
  connection.execute("PRAGMA wal_checkpoint(TRUNCATE)");
  connection.execute("PRAGMA journal_mode = DELETE");
}

inline RunInfo sample_run(const std::string& gpu_profile = "h200") {
  RunInfo run;
  run.kind = "tune";
  run.tool_version = "0.1.0";
  run.git_sha = "0123456789ab";
  run.cuda_version = "13.0";
  run.driver_version = "580.65";
  run.host = "node-1";
  run.gpu_name = "NVIDIA H200";
  run.gpu_uuid = "GPU-1234";
  run.gpu_profile = gpu_profile;
  run.sm = 90;
  run.sm_count = 132;
  run.sm_clock_mhz = 1980;
  run.mem_clock_mhz = 2619;
  run.command_line = "qtune tune --formats w4a16-int4-g128";
  run.notes = "test";
  return run;
}

inline TimingStats stats_around(double median) {
  TimingStats stats;
  stats.min_us = median * 0.95;
  stats.p10_us = median * 0.97;
  stats.median_us = median;
  stats.p90_us = median * 1.04;
  stats.max_us = median * 1.2;
  stats.mean_us = median * 1.01;
  stats.stddev_us = median * 0.02;
  stats.ci_low_us = median * 0.99;
  stats.ci_high_us = median * 1.01;
  return stats;
}

inline Measurement ok_measurement(RunId run, ProblemId problem, ConfigId config, double median) {
  Measurement measurement;
  measurement.run = run;
  measurement.problem = problem;
  measurement.config = config;
  measurement.stats = stats_around(median);
  measurement.samples_us = {median * 0.97, median, median * 1.04, median * 0.995, median * 1.0001};
  measurement.sm_clock_mhz = 1980;
  measurement.mem_clock_mhz = 2619;
  measurement.temperature_c = 51.5;
  measurement.power_w = 612.25;
  return measurement;
}

inline Verification passed(RunId run, ProblemId problem, ConfigId config) {
  Verification verification;
  verification.run = run;
  verification.problem = problem;
  verification.config = config;
  verification.status = VerificationStatus::Passed;
  verification.max_rel_error = 1.5e-3;
  verification.max_abs_error = 2e-2;
  verification.tolerance = 1e-2;
  return verification;
}

// The same verification, failed (its errors past the tolerance).
inline Verification failed(RunId run, ProblemId problem, ConfigId config) {
  Verification verification = passed(run, problem, config);
  verification.status = VerificationStatus::Failed;
  return verification;
}

inline KernelConfig kernel_config(int tile_n, const std::string& family = "mma") {
  KernelConfig config;
  config.family = family;
  config.params_json = R"({"tile_m": 64, "tile_n": )" + std::to_string(tile_n) + R"(, "stages": 3})";
  config.source_hash = "abc123";
  return config;
}

// The rows most tests start from: a sample run, the problem w4a16-int4-g128 M = 1, N = K = 8192, and a config.
struct SampleRows {
  RunId run{};
  ProblemId problem{};
  ConfigId config{};
};

inline SampleRows insert_sample_rows(Store& store) {
  const RunId run = store.insert_run(sample_run());
  const ProblemId problem = store.upsert_problem(Problem{"w4a16-int4-g128", 1, 8192, 8192});
  return {run, problem, store.upsert_config(kernel_config(128))};
}

// The sample rows and one ok measurement of them (10 us).
inline SampleRows insert_sample_measurement(Store& store) {
  const SampleRows rows = insert_sample_rows(store);
  store.insert_measurement(ok_measurement(rows.run, rows.problem, rows.config, 10));
  return rows;
}

}  // namespace qtune::db::testing
