#pragma once
// Shared pieces of the reports tests: a temporary directory, and a store filled through the Store API with a synthetic
// but realistic exhaustive tuning (every candidate measured, winner = fastest, the heuristic's config measured with
// phase "heuristic", a cuBLASLt baseline) on H200-like numbers.
#include <gtest/gtest.h>

#include "tests/common/temp_dir.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "db/store.hpp"
#include "tests/db/db_test_support.hpp"
#include "kernels/family.hpp"

namespace qtune::reports::testing {

namespace fs = std::filesystem;

using TempDir = ::qtune::test_support::TempDir;

inline std::string file_text(const fs::path& file) {
  std::ifstream stream(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
}

inline void write_text(const fs::path& file, const std::string& text) {
  std::ofstream stream(file, std::ios::binary);
  stream << text;
}

inline fs::path test_data(const std::string& name) { return fs::path(QTUNE_SOURCE_DIR) / "tests" / "reports" / "data" / name; }

struct Shape {
  std::int64_t n;
  std::int64_t k;
};

struct FixtureSpec {
  std::vector<std::string> formats = {"w4a16-int4-ch", "w8a8-fp8-ch"};
  // Llama-3-70B at TP=1: qkv, o, gate_up, down.
  std::vector<Shape> shapes = {{10240, 8192}, {8192, 8192}, {57344, 8192}, {8192, 28672}};
  std::vector<std::int64_t> m_buckets = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
  bool baselines = true;
  std::string gpu_profile = "h200";
  std::string gpu_name = "NVIDIA H200";
  std::string git_sha = "0123456789ab";
  std::string tool_version = "0.1.0";
  std::string run_uuid = "00000000-0000-4000-8000-000000000001";
};

// The candidate configs of the synthetic tuning (a slice of the mma family's space).
inline std::vector<KernelConfig> fixture_configs() {
  std::vector<KernelConfig> configs;
  for (const char* text : {"bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=4,raster=0",
                           "bm=16,bn=64,bk=256,wm=1,wn=4,wk=1,stages=4,split=2,raster=0",
                           "bm=16,bn=256,bk=128,wm=1,wn=8,wk=1,stages=3,split=8,raster=0",
                           "bm=32,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=2,raster=0",
                           "bm=64,bn=128,bk=128,wm=2,wn=4,wk=1,stages=4,split=1,raster=0",
                           "bm=64,bn=256,bk=64,wm=2,wn=4,wk=1,stages=5,split=1,raster=1",
                           "bm=128,bn=128,bk=64,wm=2,wn=4,wk=1,stages=4,split=1,raster=0",
                           "bm=128,bn=256,bk=64,wm=2,wn=4,wk=1,stages=3,split=1,raster=2"}) {
    configs.push_back(KernelConfig::parse(text, "mma"));
  }
  return configs;
}

inline db::KernelConfig to_db_config(const KernelConfig& config) {
  db::KernelConfig stored;
  stored.kind = db::ConfigKind::Kernel;
  stored.family = config.family;
  stored.params_json = config.to_json()["params"].dump();
  stored.source_hash = "synthetic";
  return stored;
}

// A plausible kernel time: a memory term (weights streamed, helped by enough CTAs in flight) and a compute term with
// padding of M to the tile and wave quantization over 132 SMs, plus a per-config constant and a tiny deterministic jitter.
inline double synthetic_time_us(const std::string& format, const KernelConfig& config, std::int64_t m, std::int64_t n, std::int64_t k) {
  const double weight_bits = format.rfind("w8", 0) == 0 ? 8.0 : 4.0;
  const double peak_tflops = format.find("a8") != std::string::npos ? 1500.0 : 700.0;
  const int bm = config.get("bm"), bn = config.get("bn"), split = config.get("split"), stages = config.get("stages");
  const double m_tiles = std::ceil(static_cast<double>(m) / bm);
  const double tiles = m_tiles * std::ceil(static_cast<double>(n) / bn) * split;
  const double waves = std::ceil(tiles / 132.0);
  const double occupancy = std::min(1.0, tiles / 132.0);
  const double bytes = n * static_cast<double>(k) * weight_bits / 8 + 2.0 * m * k + 2.0 * m * n;
  const double memory_us = bytes / (4200e3 * (0.55 + 0.45 * occupancy)) * (1.0 + 0.03 * (5 - stages));
  const double padded_flops = 2.0 * m_tiles * bm * n * k;
  const double compute_us = padded_flops / (peak_tflops * 1e6) * (waves * 132.0 / std::max(tiles, 1.0)) * (bm >= 64 ? 1.0 : 1.6);
  const double split_cost = split > 1 ? 0.4 * split + 2e-6 * m * n * split / 1000 : 0;
  std::uint64_t hash = static_cast<std::uint64_t>(m * 1000003 + n * 97 + k * 13 + bm * 7 + bn * 3 + split);
  hash ^= hash >> 17;
  hash *= 0x9e3779b97f4a7c15ULL;
  const double jitter = 1.0 + static_cast<double>(hash % 1000) * 1e-5;
  return (std::max(memory_us, compute_us) + 0.25 * (memory_us + compute_us) / 2 + 3.0 + split_cost) * jitter;
}

// The fixture's stand-in for the hand-written heuristic: a block size from M, fixed otherwise.
inline KernelConfig synthetic_heuristic(std::int64_t m) {
  const auto configs = fixture_configs();
  if (m <= 16) return configs[0];
  if (m <= 32) return configs[3];
  if (m <= 256) return configs[4];
  return configs[6];
}

// The db tests' spread of statistics around a median.
using db::testing::stats_around;

inline void add_measurement(db::Store& store, db::RunId run, db::ProblemId problem, db::ConfigId config, double median,
                            const std::string& phase = "") {
  db::Measurement measurement;
  measurement.run = run;
  measurement.problem = problem;
  measurement.config = config;
  measurement.stats = stats_around(median);
  measurement.samples_us = {median * 0.99, median, median * 1.01};
  measurement.phase = phase;
  store.insert_measurement(measurement);
}

inline void add_passed_verification(db::Store& store, db::RunId run, db::ProblemId problem, db::ConfigId config) {
  db::Verification verification;
  verification.run = run;
  verification.problem = problem;
  verification.config = config;
  verification.status = db::VerificationStatus::Passed;
  verification.max_rel_error = 1e-3;
  verification.tolerance = 5e-3;
  store.insert_verification(verification);
}

inline db::RunInfo fixture_run(const FixtureSpec& spec) {
  db::RunInfo run;
  run.uuid = spec.run_uuid;
  run.kind = "tune";
  run.started_at = "2025-06-01T12:00:00Z";
  run.tool_version = spec.tool_version;
  run.git_sha = spec.git_sha;
  run.cuda_version = "13.0";
  run.driver_version = "580.65";
  run.host = "gpu-node-1";
  run.gpu_name = spec.gpu_name;
  run.gpu_uuid = "GPU-synthetic";
  run.gpu_profile = spec.gpu_profile;
  run.sm = 90;
  run.sm_count = 132;
  run.command_line = "qtune tune --gpu auto --model configs/models/llama-3-70b.json";
  return run;
}

// Writes the synthetic exhaustive tuning into `path`; returns nothing (read it back through the Store API).
inline void write_fixture_db(const fs::path& path, const FixtureSpec& spec = {}) {
  db::Store store = db::Store::open(path);
  auto transaction = store.transaction();
  const db::RunId run = store.insert_run(fixture_run(spec));
  const std::vector<KernelConfig> configs = fixture_configs();
  std::vector<db::ConfigId> config_ids;
  for (const KernelConfig& config : configs) config_ids.push_back(store.upsert_config(to_db_config(config)));
  const db::ConfigId baseline =
      store.upsert_config(db::KernelConfig{db::ConfigKind::Baseline, "cublaslt-f16", R"({"algo":3})", ""});
  for (const std::string& format : spec.formats) {
    for (const Shape& shape : spec.shapes) {
      for (const std::int64_t m : spec.m_buckets) {
        const db::ProblemId problem = store.upsert_problem({format, m, shape.n, shape.k});
        const KernelConfig heuristic = synthetic_heuristic(m);
        std::size_t best = 0;
        double best_time = 0;
        for (std::size_t c = 0; c < configs.size(); ++c) {
          const double time = synthetic_time_us(format, configs[c], m, shape.n, shape.k);
          add_passed_verification(store, run, problem, config_ids[c]);
          add_measurement(store, run, problem, config_ids[c], time, configs[c] == heuristic ? "heuristic" : "");
          if (c == 0 || time < best_time) {
            best = c;
            best_time = time;
          }
        }
        store.set_winner(db::Winner{run, problem, config_ids[best], best_time, "fastest"});
        if (spec.baselines) {
          const double dense_bytes = 2.0 * (shape.n * static_cast<double>(shape.k) + m * shape.k + m * shape.n);
          const double dense_us = std::max(dense_bytes / 4000e3, 2.0 * m * shape.n * shape.k / 650e6) + 4.0;
          add_measurement(store, run, problem, baseline, dense_us);
        }
      }
    }
  }
  store.finish_run(run, db::RunStatus::Completed);
  transaction.commit();
}

// Runs `qtune ARGS...` in this process; returns the exit code.
int run_qtune(std::vector<std::string> args);

}  // namespace qtune::reports::testing
