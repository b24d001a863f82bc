// Google Benchmark benchmarks of the cuBLASLt baselines: f16 and fp8 (per-tensor scales) GEMMs at N = K = 8192 for
// M in {1, 16, 256, 4096}. Times are CUPTI's, not the host's: every benchmark iteration is one measurement of
// qtune's harness with `qtune bench`'s options (cold L2, warm-up, repeated for at least 0.5 s until the median is
// known to +-1% and 8 time-ordered blocks agree) and reports that median with
// SetIterationTime, so Google Benchmark's JSON and compare.py work on GPU time. Each baseline is prepared once per
// process, checked against the CPU reference, and the fastest verified algorithm of cuBLASLt's top 8 is the one
// benchmarked (its description is the benchmark's label). Without a GPU every benchmark is skipped with the reason.
//   qtune-bench --benchmark_filter=CublasLt --benchmark_repetitions=3 --benchmark_out=baselines.json
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "kernels/error.hpp"
#include "tuner/baselines/baseline_bench.hpp"
#include "tuner/baselines/cublaslt_baseline.hpp"
#include "tuner/measure/measure.hpp"

namespace qtune::baselines {
namespace {

constexpr int64_t kN = 8192;
constexpr int64_t kK = 8192;

// A prepared, verified and tuned baseline (or why there is none), kept for the whole process.
struct Prepared {
  std::unique_ptr<CublasLtBaseline> baseline;
  TargetResult tuning;
  std::string skip_reason;
};

Prepared& prepared(BaselineKind kind, int64_t m) {
  // Never destroyed: tearing cuBLASLt down after the CUDA runtime's own exit handlers ran could crash at exit.
  static auto* cache = new std::map<std::pair<BaselineKind, int64_t>, Prepared>;
  auto [entry, inserted] = cache->try_emplace({kind, m});
  Prepared& result = entry->second;
  if (!inserted) return result;
  try {
    result.baseline = std::make_unique<CublasLtBaseline>(kind);
    if (!result.baseline->prepare({m, kN, kK}, 1)) {
      result.skip_reason = "unsupported: " + result.baseline->unsupported_reason();
      return result;
    }
    measure::MeasureOptions tuning_options;
    tuning_options.time_budget_s = 0.5;  // choosing among the top 8 needs less precision than the final number
    result.tuning = tune_baseline(*result.baseline, tuning_options);
    if (result.tuning.best < 0) {
      result.skip_reason = "no algorithm of cuBLASLt's top 8 passed verification";
      if (!result.tuning.variants.empty()) result.skip_reason += ": " + result.tuning.variants.front().verify.message;
    }
  } catch (const NoGpuError& error) {
    result.skip_reason = std::string("no GPU: ") + error.what();
  } catch (const std::exception& error) {
    result.skip_reason = std::string("failed: ") + error.what();
  }
  return result;
}

void BM_CublasLt(benchmark::State& state, BaselineKind kind) {
  const int64_t m = state.range(0);
  Prepared& entry = prepared(kind, m);
  if (!entry.skip_reason.empty()) {
    state.SkipWithError(entry.skip_reason.c_str());
    return;
  }
  CublasLtBaseline& baseline = *entry.baseline;
  const GemmProblem problem{m, kN, kK};
  measure::Measurement last;
  for (auto _ : state) {
    last = measure::measure([&](CUstream stream) { baseline.launch(stream); }, measure::benchmark_measure_options());
    state.SetIterationTime(last.median_us * 1e-6);
  }
  const RowMetrics metrics = row_metrics(traffic(kind, problem), gemm_flops(problem), last.median_us, {}, {});
  state.counters["TFLOP/s"] = metrics.tflops;
  state.counters["GB/s"] = metrics.gigabytes_per_second;
  state.counters["p10_us"] = last.p10_us;
  state.counters["p90_us"] = last.p90_us;
  state.counters["samples"] = static_cast<double>(last.samples_us.size());
  state.counters["throttled"] = last.throttled ? 1 : 0;
  const VariantResult* best = entry.tuning.best_variant();
  state.SetLabel(best != nullptr ? best->label : std::string());
}

void register_sizes(benchmark::internal::Benchmark* benchmark) {
  benchmark->ArgName("M")->Arg(1)->Arg(16)->Arg(256)->Arg(4096);
  // One harness measurement per iteration; --benchmark_repetitions repeats it.
  benchmark->UseManualTime()->Iterations(1)->Unit(benchmark::kMicrosecond);
}

BENCHMARK_CAPTURE(BM_CublasLt, f16, BaselineKind::F16)->Apply(register_sizes);
BENCHMARK_CAPTURE(BM_CublasLt, fp8_tensor, BaselineKind::Fp8Tensor)->Apply(register_sizes);

}  // namespace
}  // namespace qtune::baselines
