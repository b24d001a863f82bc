// Google Benchmark benchmarks of the mma.sync tensor-core ceiling: kernels that do nothing but issue mma.sync on
// register operands (8 independent accumulator chains per warp, 32 warps per SM, no memory traffic), timed with
// qtune's CUPTI harness (warm L2: there is nothing to evict). Their TFLOP/s is the most the `mma` family's main loop
// can reach on this GPU, the ceiling its large-M results are judged against; datasheet peaks on Hopper assume
// wgmma, which mma.sync does not reach. Without a GPU every benchmark is skipped with the reason.
//   qtune-bench --benchmark_filter=MmaSyncPeak
#include <benchmark/benchmark.h>

#include <string>

#include "kernels/error.hpp"
#include "tuner/measure/measure.hpp"
#include "tuner/measure/selftest_jobs.hpp"
#include "tuner/runtime/device.hpp"
#include "tuner/runtime/memory.hpp"

namespace qtune::measure {
namespace {

void BM_MmaSyncPeak(benchmark::State& state, const std::string& type) {
  const MmaPeakKernel& peak = mma_peak_kernel(type);
  try {
    const int device = 0;
    const runtime::DeviceInfo& info = runtime::Device::get(device).info();
    if (info.compute_capability() < peak.min_sm) {
      state.SkipWithError((info.sm_name() + " has no " + peak.instruction).c_str());
      return;
    }
    const runtime::Kernel kernel = compile_kernel_for_device(peak.source, peak.kernel_name, device);
    runtime::DeviceBuffer sink(sizeof(unsigned));
    const runtime::LaunchConfig launch = mma_peak_launch(device);
    const int iterations = peak.iterations;
    const CUdeviceptr sink_pointer = sink.get();
    MeasureOptions options;
    options.warm_l2 = true;
    options.time_budget_s = 1.0;
    Measurement last;
    for (auto _ : state) {
      last = measure([&](CUstream stream) { kernel.launch_with(launch, stream, iterations, sink_pointer); }, options);
      state.SetIterationTime(last.median_us * 1e-6);
    }
    const double flops = mma_peak_operations(peak, launch);
    state.counters["TFLOP/s"] = flops / (last.median_us * 1e-6) / 1e12;
    state.counters["sm_mhz_end"] = last.nvml_end.sm_mhz;
    state.counters["throttled"] = last.throttled ? 1 : 0;
    state.SetLabel(peak.instruction);
  } catch (const NoGpuError& error) {
    state.SkipWithError((std::string("no GPU: ") + error.what()).c_str());
  } catch (const std::exception& error) {
    state.SkipWithError((std::string("failed: ") + error.what()).c_str());
  }
}

void register_peak(benchmark::internal::Benchmark* benchmark) {
  benchmark->UseManualTime()->Iterations(1)->Unit(benchmark::kMicrosecond);
}

BENCHMARK_CAPTURE(BM_MmaSyncPeak, f16, std::string("f16"))->Apply(register_peak);
BENCHMARK_CAPTURE(BM_MmaSyncPeak, bf16, std::string("bf16"))->Apply(register_peak);
BENCHMARK_CAPTURE(BM_MmaSyncPeak, int8, std::string("int8"))->Apply(register_peak);
BENCHMARK_CAPTURE(BM_MmaSyncPeak, fp8_e4m3, std::string("fp8_e4m3"))->Apply(register_peak);

}  // namespace
}  // namespace qtune::measure
