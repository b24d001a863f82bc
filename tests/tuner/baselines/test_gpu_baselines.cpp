// GPU tests of the cuBLASLt baselines (skipped with the reason when there is no GPU). Each case prints what it did:
// the device, every algorithm of cuBLASLt's heuristic list with its verification result, and the timings, so a
// failure on the GPU machine explains itself. CUBLASLT_LOG_LEVEL=5 adds cuBLASLt's own reasoning.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "db/store.hpp"
#include "kernels/error.hpp"
#include "tuner/baselines/baseline_bench.hpp"
#include "tuner/baselines/baseline_pin.hpp"
#include "tuner/baselines/cublaslt_baseline.hpp"
#include "tuner/baselines/lt_layout.hpp"
#include "tuner/cli/cli.hpp"
#include "tuner/runtime/device.hpp"
#include "tests/common/qtune_executable.hpp"

namespace qtune::baselines {
namespace {

// The device's description, or why there is none (then the test skips with it).
std::optional<std::string> gpu_or_reason(std::string& reason) {
  try {
    const runtime::DeviceInfo& info = runtime::Device::get().info();
    return info.name + " (" + info.sm_name() + ", " + std::to_string(info.sm_count) + " SMs, driver " +
           std::to_string(info.driver_version) + ")";
  } catch (const NoGpuError& error) {
    reason = error.what();
    return std::nullopt;
  }
}

#define QTUNE_REQUIRE_GPU()                              \
  std::string no_gpu_reason;                             \
  const auto gpu = gpu_or_reason(no_gpu_reason);         \
  if (!gpu) GTEST_SKIP() << "no GPU: " << no_gpu_reason; \
  std::cout << "[ device   ] " << *gpu << "\n"

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Other places the 128x128/1x128 scales could be read from, besides the documented one (first). Used to show that
// verification notices a misplaced scale on the real GPU, and to say which layout cuBLASLt reads if ours fails.
struct ScaleHypothesis {
  std::string name;
  std::vector<float> weight;
  std::vector<float> activation;
};

std::vector<ScaleHypothesis> block128_hypotheses(const HostOperands& operands) {
  const Block128ScaleLayout layout = block128_scale_layout(operands.executed);
  const int64_t l = layout.k_blocks;
  const int64_t n_blocks = layout.n_blocks;
  const int64_t m = layout.m_rows;
  std::vector<float> w_k_major(static_cast<size_t>(n_blocks * l));  // [N/128][L], no column padding
  std::vector<float> w_n_major(static_cast<size_t>(n_blocks * l));  // [L][N/128]
  for (int64_t nb = 0; nb < n_blocks; ++nb) {
    for (int64_t kb = 0; kb < l; ++kb) {
      const float scale = operands.weight_scales[layout.weight_index(nb, kb)];
      w_k_major[static_cast<size_t>(nb * l + kb)] = scale;
      w_n_major[static_cast<size_t>(kb * n_blocks + nb)] = scale;
    }
  }
  std::vector<float> a_group_major(static_cast<size_t>(m * l));  // [M][L]: the quantizer's order
  for (int64_t row = 0; row < m; ++row) {
    for (int64_t kb = 0; kb < l; ++kb) {
      a_group_major[static_cast<size_t>(row * l + kb)] = operands.activation_scales[layout.activation_index(row, kb)];
    }
  }
  const std::vector<std::pair<std::string, std::vector<float>>> weights = {
      {"W K-major stride L4 (documented)", operands.weight_scales},
      {"W K-major stride L", w_k_major},
      {"W N-major", w_n_major}};
  const std::vector<std::pair<std::string, std::vector<float>>> activations = {
      {"A token-major (documented)", operands.activation_scales}, {"A group-major [M][L]", a_group_major}};
  std::vector<ScaleHypothesis> hypotheses;
  for (const auto& [w_name, w] : weights) {
    // "stride L" is the documented layout itself when L is a multiple of 4.
    if (&w != &weights.front().second && w == weights.front().second) continue;
    for (const auto& [a_name, a] : activations) {
      if (&a != &activations.front().second && a == activations.front().second) continue;
      ScaleHypothesis hypothesis{w_name + ", " + a_name, w, a};
      // Never smaller than the documented tensors, so that reading them the documented way stays in bounds.
      hypothesis.weight.resize(std::max(w.size(), operands.weight_scales.size()), 1.0F);
      hypothesis.activation.resize(std::max(a.size(), operands.activation_scales.size()), 1.0F);
      hypotheses.push_back(std::move(hypothesis));
    }
  }
  return hypotheses;
}

// Verifies the selected algorithm under every hypothesis; returns the names of those that pass.
std::vector<std::string> diagnose_block128(CublasLtBaseline& baseline) {
  const HostOperands operands = baseline.host_operands();
  std::vector<std::string> passing;
  for (const ScaleHypothesis& hypothesis : block128_hypotheses(operands)) {
    baseline.replace_scales(hypothesis.weight, hypothesis.activation);
    const VerifyResult result = baseline.verify();
    std::cout << "[ layout   ] " << hypothesis.name << ": " << (result.passed ? "passed" : "failed")
              << ", relative error " << result.rel_error << "\n";
    if (result.passed) passing.push_back(hypothesis.name);
  }
  baseline.replace_scales(operands.weight_scales, operands.activation_scales);
  return passing;
}

struct GpuCase {
  BaselineKind kind;
  GemmProblem problem;
};

std::string case_name(const testing::TestParamInfo<GpuCase>& info) {
  std::string name = baseline_id(info.param.kind) + "_M" + std::to_string(info.param.problem.m) + "_N" +
                     std::to_string(info.param.problem.n) + "_K" + std::to_string(info.param.problem.k);
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

class BaselineCorrectness : public testing::TestWithParam<GpuCase> {};

// Every algorithm cuBLASLt lists (top 8) must agree with the CPU reference of the same quantized operands.
TEST_P(BaselineCorrectness, EveryListedAlgorithmMatchesTheCpuReference) {
  QTUNE_REQUIRE_GPU();
  const GpuCase c = GetParam();
  CublasLtBaseline baseline(c.kind);
  const auto start = std::chrono::steady_clock::now();
  const bool supported = baseline.prepare(c.problem, 2024);
  std::cout << "[ prepare  ] " << baseline.id() << " M=" << c.problem.m << " N=" << c.problem.n << " K=" << c.problem.k
            << " executed M=" << baseline.executed_m() << " in " << seconds_since(start) << " s"
            << (baseline.notes().empty() ? "" : "; " + baseline.notes()) << "\n";
  if (!supported) {
    // Every baseline is expected to run on Hopper; elsewhere an unsupported answer with a reason is acceptable.
    std::cout << "[ unsupp.  ] " << baseline.unsupported_reason() << "\n";
    if (baseline.device_sm() == 90) {
      ADD_FAILURE() << baseline.id() << " unsupported on sm_90: " << baseline.unsupported_reason();
    } else {
      GTEST_SKIP() << baseline.id() << " unsupported on sm_" << baseline.device_sm() << ": "
                   << baseline.unsupported_reason();
    }
    return;
  }
  ASSERT_FALSE(baseline.algorithms().empty());
  int passed = 0;
  for (const AlgoInfo& algo : baseline.algorithms()) {
    baseline.select_algorithm(algo.heuristic_index);
    const VerifyResult result = baseline.verify();
    std::cout << "[ verify   ] " << result.message << " (waves " << algo.waves_count << ")\n";
    EXPECT_TRUE(result.passed) << result.message;
    EXPECT_EQ(result.unwritten, 0);
    EXPECT_LE(result.rel_error, result.tolerance);
    passed += result.passed ? 1 : 0;
    if (!result.passed && c.kind == BaselineKind::Fp8Block128) {
      const auto passing = diagnose_block128(baseline);
      ADD_FAILURE() << "block-scale layouts that verify instead: "
                    << (passing.empty() ? std::string("none") : passing.front());
    }
  }
  std::cout << "[ summary  ] " << passed << " of " << baseline.algorithms().size() << " algorithms verified\n";
}

std::vector<GpuCase> correctness_cases() {
  std::vector<GpuCase> cases;
  const BaselineKind kinds[] = {BaselineKind::F16,      BaselineKind::BF16,        BaselineKind::Fp8Tensor,
                                BaselineKind::Fp8Outer, BaselineKind::Fp8Block128, BaselineKind::Int8};
  const std::pair<int64_t, int64_t> shapes[] = {{4096, 8192}, {8192, 4096}, {5120, 13824}};
  for (const BaselineKind kind : kinds) {
    for (const int64_t m : {1, 17, 256}) {
      for (const auto& [n, k] : shapes) cases.push_back({kind, {m, n, k}});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Gpu, BaselineCorrectness, testing::ValuesIn(correctness_cases()), case_name);

// More placements: the chosen algorithm is timed on other operands too, every set twice, and the stored
// measurement pools every sample (consistent statistics, so the store accepts it).
TEST(BaselineGpu, PlacementsTimeTheChosenAlgorithmOnEverySetOfOperands) {
  QTUNE_REQUIRE_GPU();
  BaselineOptions options;
  options.top_k = 2;
  measure::MeasureOptions measure_options;
  measure_options.time_budget_s = 0.2;
  BenchBaselineRequest request{BaselineKind::F16, {256, 2048, 2048}, 7, options, measure_options, {}, std::nullopt, 3};
  const TargetResult result = bench_baseline(request);
  ASSERT_TRUE(result.supported) << result.unsupported_reason;
  const VariantResult* best = result.best_variant();
  ASSERT_NE(best, nullptr);
  ASSERT_EQ(result.placement_medians_us.size(), 3u);
  ASSERT_EQ(result.placement_second_pass_us.size(), 3u);
  const measure::Measurement& pooled = *best->measurement;
  EXPECT_EQ(static_cast<size_t>(pooled.repetitions), pooled.samples_us.size());
  EXPECT_LE(pooled.min_us, pooled.p10_us);
  EXPECT_LE(pooled.p10_us, pooled.median_us);
  EXPECT_LE(pooled.median_us, pooled.p90_us);
  EXPECT_LE(pooled.p90_us, pooled.max_us);
  const auto [low, high] = std::minmax_element(result.placement_medians_us.begin(), result.placement_medians_us.end());
  EXPECT_GE(pooled.median_us, *low * 0.9);
  EXPECT_LE(pooled.median_us, *high * 1.1);
  EXPECT_NE(result.notes.find("3 operand placements timed twice"), std::string::npos) << result.notes;
  EXPECT_NE(result.notes.find("again, in reverse order"), std::string::npos) << result.notes;
}

// Screening: every algorithm is ranked on a short measurement, and only the winner is measured with the full
// options (here a 0.2 s minimum time and stability blocks), which its stored measurement shows.
TEST(BaselineGpu, ScreeningMeasuresOnlyTheWinnerInFull) {
  QTUNE_REQUIRE_GPU();
  BaselineOptions options;
  options.top_k = 4;
  measure::MeasureOptions full = measure::benchmark_measure_options();
  full.min_measure_s = 0.2;
  RunoffOptions runoff;
  runoff.screen_time_s = 0.02;
  const TargetResult result = bench_baseline({BaselineKind::F16, {256, 4096, 4096}, 7, options, full, runoff, std::nullopt});
  ASSERT_TRUE(result.supported) << result.unsupported_reason;
  const VariantResult* best = result.best_variant();
  ASSERT_NE(best, nullptr) << result.notes;
  ASSERT_TRUE(best->measurement.has_value());
  EXPECT_EQ(best->measurement->stability_blocks, full.stability_blocks);
  EXPECT_GE(best->measurement->total_seconds - best->measurement->warmup_seconds, full.min_measure_s * 0.99) << best->measurement->stop_reason;
  for (const VariantResult& variant : result.variants) {
    if (&variant == best || !variant.measurement) continue;
    EXPECT_EQ(variant.measurement->stability_blocks, 0) << variant.label;
    EXPECT_LT(variant.measurement->total_seconds, full.min_measure_s) << variant.label;
  }
  EXPECT_NE(result.notes.find("measured in full"), std::string::npos) << result.notes;
}

class BaselineTopK : public testing::TestWithParam<GpuCase> {};

// Timing the top k gives a best algorithm: verified, measured, and no slower than any other measured one.
TEST_P(BaselineTopK, TimingPicksTheFastestVerifiedAlgorithm) {
  QTUNE_REQUIRE_GPU();
  const GpuCase c = GetParam();
  BaselineOptions options;
  options.top_k = 4;
  measure::MeasureOptions measure_options;
  measure_options.time_budget_s = 0.3;
  const auto start = std::chrono::steady_clock::now();
  const TargetResult result = bench_baseline({c.kind, c.problem, 7, options, measure_options, {}, std::nullopt});
  std::cout << "[ bench    ] " << result.target << " M=" << c.problem.m << " N=" << c.problem.n << " K=" << c.problem.k
            << " in " << seconds_since(start) << " s\n";
  if (!result.supported) {
    std::cout << "[ unsupp.  ] " << result.unsupported_reason << "\n";
    GTEST_SKIP() << result.unsupported_reason;
  }
  for (size_t i = 0; i < result.variants.size(); ++i) {
    const VariantResult& v = result.variants[i];
    std::cout << "[ algo     ] " << (static_cast<int>(i) == result.best ? "* " : "  ") << v.label << ": ";
    if (v.measurement) {
      std::cout << "median " << v.measurement->median_us << " us, p10 " << v.measurement->p10_us << ", p90 "
                << v.measurement->p90_us << ", " << v.measurement->samples_us.size() << " samples ("
                << v.measurement->stop_reason << "), " << v.measurement->kernels_per_repetition << " kernel(s)"
                << (v.measurement->throttled ? ", THROTTLED" : "");
    } else {
      std::cout << v.error;
    }
    std::cout << "; " << v.verify.message << "\n";
  }
  ASSERT_GE(result.best, 0) << "no algorithm was verified and measured";
  const VariantResult& best = result.variants[static_cast<size_t>(result.best)];
  EXPECT_TRUE(best.verify.passed);
  ASSERT_TRUE(best.measurement.has_value());
  EXPECT_GT(best.measurement->median_us, 0.5);
  EXPECT_LT(best.measurement->median_us, 100000.0);
  EXPECT_GE(best.measurement->kernels_per_repetition, 1);
  const auto median_of = [&](int index) { return result.variants[static_cast<size_t>(index)].measurement->median_us; };
  if (result.runoff && result.runoff->winner >= 0) {
    // The two fastest of the first pass ran off; its winner is kept even when the first pass had the other ahead
    // (a tie within 1% goes to cuBLASLt's earlier choice).
    std::cout << "[ run-off  ] h" << result.runoff->first << " vs h" << result.runoff->second << ": "
              << result.runoff->decision << "\n";
    EXPECT_EQ(result.best, result.runoff->winner);
    const double slower_of_pair = std::max(median_of(result.runoff->first), median_of(result.runoff->second));
    for (size_t i = 0; i < result.variants.size(); ++i) {
      const VariantResult& v = result.variants[i];
      const int index = static_cast<int>(i);
      if (v.measurement && v.verify.passed && index != result.runoff->first && index != result.runoff->second) {
        EXPECT_LE(slower_of_pair, v.measurement->median_us) << "the run-off pair must be the first pass's two fastest";
      }
    }
  } else {
    for (const VariantResult& v : result.variants) {
      if (v.measurement && v.verify.passed) {
        EXPECT_LE(best.measurement->median_us, v.measurement->median_us);
      }
    }
  }
  EXPECT_TRUE(result.device.is_object());
  // The JSON the worker sends back carries all of it.
  const TargetResult back = nlohmann::json::parse(nlohmann::json(result).dump()).get<TargetResult>();
  EXPECT_EQ(back.best, result.best);
  EXPECT_EQ(back.variants.size(), result.variants.size());
}

INSTANTIATE_TEST_SUITE_P(Gpu, BaselineTopK,
                         testing::Values(GpuCase{BaselineKind::F16, {16, 4096, 4096}},
                                         GpuCase{BaselineKind::Fp8Tensor, {256, 8192, 8192}},
                                         GpuCase{BaselineKind::Fp8Block128, {17, 4096, 4096}},
                                         GpuCase{BaselineKind::Int8, {256, 4096, 4096}}),
                         case_name);

// The documented 128x128/1x128 scale layout verifies and every other plausible layout fails: verification is sensitive
// to where the scales sit (K = 37 x 128 makes the weight scale tensor's column padding L4 = 40 != L = 37 visible).
TEST(BaselineGpu, Block128ScalesAreReadWhereTheDocsSay) {
  QTUNE_REQUIRE_GPU();
  CublasLtBaseline baseline(BaselineKind::Fp8Block128);
  if (!baseline.prepare({64, 1024, 37 * 128}, 5)) GTEST_SKIP() << baseline.unsupported_reason();
  const auto hypotheses = block128_hypotheses(baseline.host_operands());
  ASSERT_EQ(hypotheses.size(), 6u);
  const auto passing = diagnose_block128(baseline);
  ASSERT_EQ(passing.size(), 1u) << "expected exactly the documented layout to verify";
  EXPECT_EQ(passing.front(), hypotheses.front().name);
  EXPECT_TRUE(baseline.verify().passed);  // the prepared scales are back
}

TEST(BaselineGpu, LaunchOnAStreamAfterVerification) {
  QTUNE_REQUIRE_GPU();
  CublasLtBaseline baseline(BaselineKind::BF16);
  ASSERT_TRUE(baseline.prepare({64, 1024, 2048}, 3)) << baseline.unsupported_reason();
  // Measurement runs launch() on its own non-blocking stream, many times: results stay correct afterwards.
  measure::MeasureOptions options;
  options.time_budget_s = 0.2;
  const measure::Measurement measurement = measure::measure([&](CUstream stream) { baseline.launch(stream); }, options);
  std::cout << "[ measure  ] median " << measurement.median_us << " us over " << measurement.samples_us.size()
            << " samples\n";
  const VerifyResult again = baseline.verify();
  EXPECT_TRUE(again.passed) << again.message;
}

// `qtune bench` end to end, in this process and (when the qtune executable is built) through a worker process.
TEST(BenchCommandGpu, PrintsARowPerTargetAndM) {
  QTUNE_REQUIRE_GPU();
  const char* argv[] = {"qtune",         "bench",
                        "--baseline",    "cublaslt-f16,cublaslt-fp8-outer",
                        "--shape",       "2048,2048",
                        "--m",           "1,64",
                        "--top-k",       "2",
                        "--time-budget", "0.2",
                        "--no-db",       "--in-process",
                        "--output",      "json"};
  testing::internal::CaptureStdout();
  const int status = cli::run_cli(static_cast<int>(std::size(argv)), const_cast<char**>(argv));
  const std::string out = testing::internal::GetCapturedStdout();
  std::cout << out;
  ASSERT_EQ(status, 0);
  const nlohmann::json rows = nlohmann::json::parse(out);
  ASSERT_EQ(rows.size(), 4u);
  for (const auto& row : rows) {
    EXPECT_TRUE(row.at("median_us").is_number()) << row.dump();
    EXPECT_TRUE(row.at("TFLOP/s").is_number()) << row.dump();
  }
}

TEST(BenchCommandGpu, RunsInAWorkerProcess) {
  QTUNE_REQUIRE_GPU();
  const std::filesystem::path qtune = qtune::test_support::qtune_executable();
  if (!std::filesystem::exists(qtune)) GTEST_SKIP() << qtune << " is not built (ninja qtune)";
  const std::filesystem::path db = std::filesystem::path(testing::TempDir()) / "bench_worker_test.db";
  std::filesystem::remove(db);
  const std::string executable = qtune.string();
  const std::string db_path = db.string();
  const char* argv[] = {"qtune",           "bench", "--baseline", "cublaslt-bf16", "--shape",
                        "1024,4096",       "--m",   "16",         "--top-k",       "2",
                        "--time-budget",   "0.2",   "--db",       db_path.c_str(), "--worker-executable",
                        executable.c_str()};
  testing::internal::CaptureStdout();
  const int status = cli::run_cli(static_cast<int>(std::size(argv)), const_cast<char**>(argv));
  const std::string out = testing::internal::GetCapturedStdout();
  std::cout << out;
  EXPECT_EQ(status, 0);
  EXPECT_NE(out.find("cublaslt-bf16"), std::string::npos);
  ASSERT_TRUE(std::filesystem::exists(db));
  // The run, the problem, one baseline config per algorithm, their verifications and measurements are stored.
  db::Store store = db::Store::open_read_only(db);
  const auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs.front().kind, "bench");
  EXPECT_EQ(runs.front().status, db::RunStatus::Completed);
  EXPECT_FALSE(runs.front().gpu_name.empty());
  const auto problems = store.list_problems();
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems.front().format, "bf16");
  EXPECT_EQ(problems.front().m, 16);
  const auto configs = store.list_configs();
  ASSERT_FALSE(configs.empty());
  for (const auto& config : configs) {
    EXPECT_EQ(config.kind, db::ConfigKind::Baseline);
    EXPECT_EQ(config.family, "cublaslt-bf16");
    EXPECT_NE(config.params_json.find("algo_id"), std::string::npos) << config.params_json;
  }
  const auto verifications = store.list_verifications();
  EXPECT_EQ(verifications.size(), configs.size());
  const auto measurements = store.list_measurements();
  ASSERT_FALSE(measurements.empty());
  int best = 0;
  for (const auto& measurement : measurements) {
    std::cout << "[ stored   ] config " << db::id_value(measurement.config) << " " << measurement.phase << " "
              << (measurement.stats ? measurement.stats->median_us : -1.0) << " us, " << measurement.samples_us.size()
              << " samples\n";
    best += measurement.phase == "best-of-top-k" ? 1 : 0;
    if (measurement.status == db::MeasurementStatus::Ok) {
      EXPECT_FALSE(measurement.samples_us.empty());
    }
  }
  EXPECT_EQ(best, 1);
}

// --pin-algorithm end to end: a first bench decides among the top k, a second one re-times exactly that algorithm.
TEST(BenchCommandGpu, PinnedRunRetimesTheStoredChoice) {
  QTUNE_REQUIRE_GPU();
  const std::filesystem::path db = std::filesystem::path(testing::TempDir()) / "bench_pin_test.db";
  std::filesystem::remove(db);
  const std::filesystem::path qtune = qtune::test_support::qtune_executable();
  // Through a worker when the executable is built (the pin travels in the job params), else in this process.
  const std::string worker = std::filesystem::exists(qtune) ? qtune.string() : std::string();
  const auto bench = [&](bool pin) {
    std::vector<std::string> arguments{"qtune",         "bench", "--baseline", "cublaslt-f16", "--shape",
                                       "1024,1024",     "--m",   "64",         "--top-k",      "4",
                                       "--time-budget", "0.2",   "--db",       db.string(),    "--output",
                                       "json"};
    if (worker.empty()) {
      arguments.push_back("--in-process");
    } else {
      arguments.insert(arguments.end(), {"--worker-executable", worker});
    }
    if (pin) arguments.push_back("--pin-algorithm");
    std::vector<char*> argv;
    for (auto& argument : arguments) argv.push_back(argument.data());
    testing::internal::CaptureStdout();
    const int status = cli::run_cli(static_cast<int>(argv.size()), argv.data());
    const std::string out = testing::internal::GetCapturedStdout();
    std::cout << out;
    EXPECT_EQ(status, 0);
    return nlohmann::json::parse(out);
  };
  const nlohmann::json first = bench(false);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].at("note").get<std::string>().find("pinned"), std::string::npos) << first.dump();

  const db::Problem problem{"f16", 64, 1024, 1024};
  std::optional<StoredChoice> chosen;
  std::string gpu_name;
  {
    db::Store store = db::Store::open_read_only(db);
    const auto runs = store.list_runs();
    ASSERT_EQ(runs.size(), 1u);
    gpu_name = runs.front().gpu_name;
    chosen = latest_stored_choice(store, {problem, "cublaslt-f16", gpu_name, db::L2Mode::Cold});
  }
  ASSERT_TRUE(chosen.has_value()) << "the first run stored no choice";
  std::cout << "[ chosen   ] " << chosen->algorithm.describe() << " (" << chosen->origin() << ")\n";

  const nlohmann::json second = bench(true);
  ASSERT_EQ(second.size(), 1u);
  const std::string note = second[0].at("note").get<std::string>();
  EXPECT_NE(note.find("pinned h"), std::string::npos) << note;
  EXPECT_NE(note.find(chosen->origin()), std::string::npos) << note;

  db::Store store = db::Store::open_read_only(db);
  const auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 2u);
  db::RowFilter filter;
  filter.run = runs.back().id;
  const auto measurements = store.list_measurements(filter);
  ASSERT_EQ(measurements.size(), 1u) << "a pinned row times only the pinned algorithm";
  EXPECT_EQ(measurements.front().phase, kPinnedPhase);
  EXPECT_EQ(measurements.front().status, db::MeasurementStatus::Ok);
  const auto config = store.get_config(measurements.front().config);
  ASSERT_TRUE(config.has_value());
  const AlgoInfo timed = algo_info_from_json(config->params_json);
  EXPECT_TRUE(same_algorithm(timed, chosen->algorithm))
      << "timed " << timed.describe() << ", chosen before " << chosen->algorithm.describe();
  // The pinned run's choice is what a third run would pin.
  const auto again = latest_stored_choice(store, {problem, "cublaslt-f16", gpu_name, db::L2Mode::Cold});
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->run, runs.back().id);
  EXPECT_TRUE(same_algorithm(again->algorithm, chosen->algorithm));
}

}  // namespace
}  // namespace qtune::baselines
