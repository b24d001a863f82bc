#pragma once
// Test doubles for the tuner's outside world (tuner/tune/backend.hpp) and small helpers, so the orchestration can be
// tested on a machine without a GPU: a compiler that reports made-up resources, and a measuring backend whose times
// are a known function of the configuration.
#include <gtest/gtest.h>

#include "tests/common/temp_dir.hpp"

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "db/store.hpp"
#include "search/gpu_profile.hpp"
#include "tuner/tune/backend.hpp"
#include "tuner/tune/problem_set.hpp"
#include "tuner/tune/tuner.hpp"

namespace qtune::tune::testing {

namespace fs = std::filesystem;

using TempDir = ::qtune::test_support::TempDir;

// A small slice of the mma space: a few dozen valid candidates per problem, fast to search exhaustively.
inline std::map<std::string, std::vector<int>> small_space() {
  return {{"bm", {16, 32}}, {"bn", {64, 128}}, {"bk", {128}}, {"wm", {1}}, {"wn", {2, 4}},
          {"wk", {1}},      {"stages", {3, 4}}, {"split", {1, 2}}, {"raster", {0}}};
}

inline TuneTarget h200_target() { return target_from_profile(search::gpu_profile_by_name("h200")); }

inline TuneOptions small_options(const std::vector<std::int64_t>& m_values = {1, 16, 128}) {
  TuneOptions options;
  options.problems = build_problem_set({FormatSpec::parse("w4a16-int4-ch")}, {{4096, 4096}, {8192, 4096}}, m_values);
  options.parameter_values = small_space();
  options.strategy = "exhaustive";
  options.source_hash = "test-sources-a";
  options.timeout_s = 5;
  return options;
}

// Resources from the configuration: deep pipelines of wide tiles "spill", and one shape "fails to compile".
class FakeCompiler final : public InstantiationCompiler {
 public:
  std::vector<InstantiationResult> compile(const KernelFamily&, const std::vector<Instantiation>& requests,
                                           const std::function<void(size_t, size_t)>& progress) override {
    std::vector<InstantiationResult> results;
    for (size_t i = 0; i < requests.size(); ++i) {
      const KernelConfig& config = requests[i].config;
      InstantiationResult result;
      if (config.get("bm") == 32 && config.get("wn") == 2 && config.get("split") == 2 && config.get("stages") == 3) {
        result.message = "fake NVRTC: error: this instantiation does not compile";
      } else {
        result.ok = true;
        result.cache_key = "fake-" + requests[i].key();
        result.compile_seconds = 0.5;
        result.resources.registers = 96;
        if (config.get("bm") == 32 && config.get("bn") == 128 && config.get("stages") == 4) {
          result.spill_store_bytes = 64;
          result.spill_load_bytes = 64;
          result.resources.spill_bytes = 128;
        }
      }
      results.push_back(result);
      ++compiled;
      if (progress) progress(i + 1, requests.size());
    }
    return results;
  }
  std::atomic<size_t> compiled{0};
};

// The "true" time of a configuration on a problem: smooth in the parameters, with one best configuration.
inline double fake_time_us(const Problem& problem, const KernelConfig& config) {
  const double size = static_cast<double>(problem.n) * static_cast<double>(problem.k) / (4096.0 * 4096.0);
  double time = 10.0 * size * (1.0 + 0.02 * std::log2(static_cast<double>(problem.m)));
  time *= 1.0 + 0.15 * std::abs(std::log2(config.get("bn") / 128.0));
  time *= 1.0 + 0.10 * std::abs(std::log2(config.get("wn") / 4.0));
  time *= 1.0 + 0.07 * std::abs(config.get("stages") - 4);
  time *= 1.0 + 0.05 * std::abs(config.get("split") - (problem.m <= 16 ? 2 : 1));
  time *= 1.0 + 0.03 * std::abs(std::log2(config.get("bm") / (problem.m <= 16 ? 16.0 : 32.0)));
  return time;
}

// A measuring backend with known answers. Configs with bn=64, split=2, stages=3 compute wrong results; bn=64,
// wn=4, stages=4, split=1 crash the "worker". Everything else measures fake_time_us with a little noise.
class FakeBackend final : public MeasuringBackend {
 public:
  using TimeFunction = std::function<double(const Problem&, const KernelConfig&)>;
  explicit FakeBackend(TimeFunction time = fake_time_us, std::chrono::milliseconds delay = std::chrono::milliseconds(0))
      : time_(std::move(time)), delay_(delay) {}

  CandidateResult evaluate(const CandidateRequest& request) override {
    {
      std::lock_guard lock(mutex_);
      ++calls;
      requests.push_back(problem_key(request.problem) + "|" + request.config.to_string());
      if (request.fidelity == search::Fidelity::Short) ++short_calls;
    }
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    if (on_call) on_call(*this);
    CandidateResult result;
    const KernelConfig& config = request.config;
    if (crash_all) {
      result.outcome = CandidateOutcome::Crashed;
      result.message = "fake worker was killed by signal 2 (Interrupt)";
      return result;
    }
    if (config.get("bn") == 64 && config.get("split") == 2 && config.get("stages") == 3) {
      result.outcome = CandidateOutcome::VerificationFailed;
      result.verified = true;
      result.max_rel_error = 0.5;
      result.tolerance = 5e-3;
      result.message = "FAIL rel 0.5 > 0.005 (fake)";
      return result;
    }
    // Another family's configs (no wn) never crash.
    if (config.get("bn") == 64 && config.params.count("wn") > 0 && config.get("wn") == 4 && config.get("stages") == 4 &&
        config.get("split") == 1) {
      result.outcome = CandidateOutcome::Crashed;
      result.message = "fake worker was killed by signal 11 (Segmentation fault)";
      return result;
    }
    const double time = time_(request.problem, config);
    result.outcome = CandidateOutcome::Measured;
    result.verified = true;
    result.max_rel_error = 1e-4;
    result.tolerance = 5e-3;
    result.verification_summary = "PASS (fake)";
    measure::Measurement& m = result.measurement;
    const int samples = request.fidelity == search::Fidelity::Full ? 21 : 5;
    for (int i = 0; i < samples; ++i) m.samples_us.push_back(time * (1.0 + 0.001 * ((i * 7) % 5 - 2)));
    m.median_us = time;
    m.p10_us = time * 0.998;
    m.p90_us = time * 1.002;
    m.min_us = time * 0.998;
    m.max_us = time * 1.002;
    m.mean_us = time;
    m.stddev_us = time * 0.001;
    m.ci_low_us = time * 0.999;
    m.ci_high_us = time * 1.001;
    m.repetitions = samples;
    m.stop_reason = "converged";
    return result;
  }

  std::atomic<size_t> calls{0};
  std::atomic<size_t> short_calls{0};
  std::vector<std::string> requests;
  std::function<void(FakeBackend&)> on_call;
  bool crash_all = false;

 private:
  std::mutex mutex_;
  TimeFunction time_;
  std::chrono::milliseconds delay_;
};

// Every slot's backend forwards to the one `backend`.
inline BackendFactory borrow(FakeBackend& backend) {
  return [&backend](int) -> std::unique_ptr<MeasuringBackend> {
    struct Borrowed final : MeasuringBackend {
      explicit Borrowed(FakeBackend& inner) : inner_(inner) {}
      CandidateResult evaluate(const CandidateRequest& request) override { return inner_.evaluate(request); }
      FakeBackend& inner_;
    };
    return std::make_unique<Borrowed>(backend);
  };
}

// Runs a tune with the fakes; `backend` is shared by every slot.
inline TuneReport run_fake_tune(const TuneOptions& options, const fs::path& database, FakeBackend& backend,
                                const std::atomic<bool>* stop = nullptr, int slots = 1) {
  FakeCompiler compiler;
  TuneServices services;
  services.compiler = &compiler;
  services.slots = slots;
  services.backends = borrow(backend);
  return run_tune(options, h200_target(), database, services, nullptr, stop);
}

// (problem, config, phase) of every measurement in a store, with how often each occurs.
inline std::map<std::tuple<std::string, std::string, std::string>, int> measurement_keys(db::Store& store) {
  std::map<db::ProblemId, db::ProblemRecord> problems;
  for (const auto& problem : store.list_problems()) problems[problem.id] = problem;
  std::map<db::ConfigId, std::string> configs;
  for (const auto& config : store.list_configs()) configs[config.id] = config.params_json + "@" + config.source_hash;
  std::map<std::tuple<std::string, std::string, std::string>, int> keys;
  for (const auto& measurement : store.list_measurements()) {
    const db::ProblemRecord& problem = problems.at(measurement.problem);
    const std::string problem_text = problem.format + " " + std::to_string(problem.m) + "x" + std::to_string(problem.n) +
                                     "x" + std::to_string(problem.k);
    ++keys[{problem_text, configs.at(measurement.config), measurement.phase.ends_with("-short") ? "short" : "full"}];
  }
  return keys;
}

// Problem text -> winning config params, for comparing winners between stores.
inline std::map<std::string, std::string> winner_map(db::Store& store, const std::string& gpu = "h200") {
  std::map<std::string, std::string> winners;
  for (const auto& winner : store.list_winners(gpu)) {
    const auto problem = store.get_problem(winner.problem);
    const auto config = store.get_config(winner.config);
    winners[problem->format + " " + std::to_string(problem->m) + "x" + std::to_string(problem->n) + "x" +
            std::to_string(problem->k)] = config->params_json;
  }
  return winners;
}

}  // namespace qtune::tune::testing
