// The CUPTI measurement harness and the worker's containment on a real GPU (skipped with the reason without one).
// Every test prints what it measured, so a failure on the GPU machine explains itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "tests/tuner/runtime/gpu_test_support.hpp"
#include "tuner/measure/cupti_timer.hpp"
#include "tuner/measure/measure.hpp"
#include "tuner/measure/nvml.hpp"
#include "tuner/measure/selftest_jobs.hpp"
#include "tuner/measure/statistics.hpp"
#include "tuner/measure/worker.hpp"
#include "tuner/runtime/runtime.hpp"

namespace qtune::measure {
namespace {

constexpr std::size_t kGiB = std::size_t{1} << 30;
constexpr std::size_t kMiB = std::size_t{1} << 20;

// The copy bandwidth (read + write bytes per second) a healthy GPU reaches with the selftest copy kernel.
std::pair<double, double> expected_copy_band_gbps(const runtime::DeviceInfo& info) {
  if (info.name.find("H200") != std::string::npos) return {2500, 5500};
  if (info.name.find("H100") != std::string::npos) return {1500, 3900};
  // Elsewhere: 30% to 105% of the theoretical peak from the memory clock and bus width (double data rate).
  const double peak = 2.0 * info.memory_clock_mhz * 1e6 * info.memory_bus_width_bits / 8 / 1e9;
  return {0.3 * peak, 1.05 * peak};
}

void print(const std::string& label, const Measurement& m) {
  std::cout << std::fixed << std::setprecision(3) << label << ": median " << m.median_us << " us [" << m.ci_low_us
            << ", " << m.ci_high_us << "] (+-" << 100 * m.relative_ci_half_width() << "%), p10 " << m.p10_us
            << ", p90 " << m.p90_us << ", min " << m.min_us << ", max " << m.max_us << ", " << m.repetitions
            << " reps (+" << m.warmup_repetitions << " warm-up in " << m.warmup_seconds << " s, settled "
            << m.warmup_settled << "), stop: " << m.stop_reason << ", " << m.total_seconds << " s, kernels/rep "
            << m.kernels_per_repetition << ", unattributed " << m.unattributed_kernels << ", flush " << m.flush_bytes
            << " B, NVML start " << nlohmann::json(m.nvml_start).dump() << ", end " << nlohmann::json(m.nvml_end).dump()
            << ", busy " << m.busy_samples << " reads SM " << m.busy_sm_mhz_min << "-" << m.busy_sm_mhz_max << " MHz, "
            << m.busy_power_w_max << " W max, reasons " << describe_clock_event_reasons(m.busy_clock_event_reasons) << "\n";
}

// Source and destination buffers and the copy kernel; copy(stream, offset, bytes) launches one copy kernel.
class CopyBench {
 public:
  explicit CopyBench(std::size_t bytes)
      : kernel_(compile_kernel_for_device(selftest_copy_source(), kSelftestCopyKernel)),
        launch_(selftest_copy_launch()),
        source_(bytes),
        destination_(bytes) {
    source_.fill_bytes(0x3c);
    destination_.fill_bytes(0xff);
  }
  void copy(CUstream stream, std::size_t offset, std::size_t bytes) const {
    const CUdeviceptr source = source_.get() + offset;
    const CUdeviceptr destination = destination_.get() + offset;
    const unsigned long long count = bytes / 16;
    kernel_.launch_with(launch_, stream, source, destination, count);
  }
  Measurement measure_copies(std::size_t bytes_per_copy, int copies, const MeasureOptions& options = {}) const {
    return measure(
        [&](CUstream stream) {
          for (int i = 0; i < copies; ++i) copy(stream, static_cast<std::size_t>(i) * bytes_per_copy, bytes_per_copy);
        },
        options);
  }

 private:
  runtime::Kernel kernel_;
  runtime::LaunchConfig launch_;
  runtime::DeviceBuffer source_;
  runtime::DeviceBuffer destination_;
};

TEST(MeasureGpu, CopyBandwidthLandsInTheExpectedBand) {
  QTUNE_REQUIRE_GPU();
  const runtime::DeviceInfo& info = runtime::Device::get().info();
  const CopyBench bench(kGiB);
  const Measurement m = bench.measure_copies(kGiB, 1);
  print("1 GiB copy, cold L2", m);
  const double bandwidth = 2.0 * kGiB / (m.median_us * 1e-6) / 1e9;
  const auto [low, high] = expected_copy_band_gbps(info);
  std::cout << info.name << ": " << bandwidth << " GB/s (expected " << low << " to " << high << ")\n";
  EXPECT_GE(bandwidth, low);
  EXPECT_LE(bandwidth, high);
  EXPECT_TRUE(m.converged) << m.stop_reason;
  EXPECT_EQ(m.stop_reason, "converged");
  EXPECT_LE(m.relative_ci_half_width(), 0.01);
  EXPECT_GE(m.ci_coverage, 0.95);
  EXPECT_GE(m.repetitions, 20);
  EXPECT_EQ(m.samples_us.size(), static_cast<std::size_t>(m.repetitions));
  EXPECT_LE(m.min_us, m.p10_us);
  EXPECT_LE(m.p10_us, m.median_us);
  EXPECT_LE(m.median_us, m.p90_us);
  EXPECT_LE(m.p90_us, m.max_us);
  EXPECT_LE(m.ci_low_us, m.median_us);
  EXPECT_GE(m.ci_high_us, m.median_us);
  EXPECT_GT(m.warmup_repetitions, 0);
  EXPECT_EQ(m.kernels_per_repetition, 1);
  ASSERT_EQ(m.kernel_names.size(), 1u);
  EXPECT_EQ(m.kernel_names[0], kSelftestCopyKernel);
  EXPECT_EQ(m.unattributed_kernels, 0u);
  EXPECT_FALSE(m.warm_l2);
  EXPECT_GE(m.flush_bytes, 2 * static_cast<std::size_t>(info.l2_cache_bytes));
  EXPECT_EQ(m.device_uuid, info.uuid);
  if (Nvml::instance().available()) {
    EXPECT_TRUE(m.nvml_start.valid);
    EXPECT_TRUE(m.nvml_end.valid);
    EXPECT_GT(m.nvml_end.sm_mhz, 0);
    EXPECT_GT(m.nvml_end.power_w, 0);
  }
  const Measurement back = nlohmann::json(m).get<Measurement>();
  EXPECT_EQ(back.samples_us, m.samples_us);
}

// CUDA events and CUPTI around exactly the same launches, with no L2 flush anywhere. Events recorded on an idle
// stream would also count the host's launch latency: the start event fires at once and the GPU then waits for the
// kernel to be launched (an H200 once read 726 us of events around a 543 us kernel). So a gate of copies, timed by
// CUPTI apart, keeps the GPU busy while the host enqueues start, the timed copies and end; the start event fires when
// the gate ends, with the timed copies already queued behind it, and the bracket holds only them and the GPU's own
// gaps between them.
TEST(MeasureGpu, CuptiDurationsAgreeWithEventsOnALongKernel) {
  QTUNE_REQUIRE_GPU();
  runtime::Device::get();
  const CopyBench bench(kGiB);
  runtime::Stream stream;
  runtime::Event start;
  runtime::Event end;
  CuptiTimer timer;
  constexpr int kGateCopies = 4;
  constexpr int kTimedCopies = 3;
  constexpr int kRounds = 7;
  std::vector<double> cupti_us;
  std::vector<double> event_us;
  for (int round = -1; round < kRounds; ++round) {  // round -1 warms up CUPTI and the module; it is not compared
    const auto host_start = std::chrono::steady_clock::now();
    const std::uint64_t gate = timer.begin_repetition();
    for (int i = 0; i < kGateCopies; ++i) bench.copy(stream.get(), 0, kGiB);
    timer.end_repetition();
    start.record(stream.get());
    const std::uint64_t id = timer.begin_repetition();
    for (int i = 0; i < kTimedCopies; ++i) bench.copy(stream.get(), 0, kGiB);
    timer.end_repetition();
    end.record(stream.get());
    const double host_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - host_start).count();
    stream.synchronize();
    const std::vector<RepetitionTiming> timing = timer.collect({gate, id});
    ASSERT_EQ(timing.size(), 2u);
    ASSERT_EQ(timing[0].kernel_count, kGateCopies) << "CUPTI did not deliver the gate of round " << round;
    ASSERT_EQ(timing[1].kernel_count, kTimedCopies) << "CUPTI did not deliver the copies of round " << round;
    if (round < 0) continue;
    // The gate cannot start before host_start, so if it runs longer than the host took to enqueue everything, the
    // timed copies were queued before the start event fired: no launch latency inside the bracket.
    ASSERT_LT(host_us, timing[0].total_us)
        << "round " << round << ": enqueueing took " << host_us << " us, longer than the " << timing[0].total_us
        << " us gate; the comparison would include launch latency";
    cupti_us.push_back(timing[1].total_us);
    event_us.push_back(1000.0 * runtime::Event::elapsed_ms(start, end));
  }
  const double cupti = median(cupti_us);
  const double events = median(event_us);
  std::cout << kTimedCopies << " x 1 GiB copies: CUPTI " << cupti << " us, events " << events << " us (events / CUPTI "
            << events / cupti << ")\n";
  // Events hold the kernels plus the GPU's gaps between them (a few us); the event timer resolves about 0.5 us.
  EXPECT_GE(events, cupti * 0.99) << "the kernels took longer than the events around them";
  EXPECT_LE(events, cupti * 1.05) << "the events hold more than the timed kernels";
  EXPECT_EQ(timer.unattributed_kernels(), 0u);
}

TEST(MeasureGpu, AnOperationIsTimedAsTheSumOfItsKernels) {
  QTUNE_REQUIRE_GPU();
  runtime::Device::get();
  const CopyBench bench(512 * kMiB);
  const Measurement whole = bench.measure_copies(512 * kMiB, 1);
  const Measurement half = bench.measure_copies(256 * kMiB, 1);
  const Measurement halves = bench.measure_copies(256 * kMiB, 2);
  const Measurement quarters = bench.measure_copies(128 * kMiB, 4);
  print("one 512 MiB copy", whole);
  print("one 256 MiB copy", half);
  print("two 256 MiB copies", halves);
  print("four 128 MiB copies", quarters);
  EXPECT_EQ(halves.kernels_per_repetition, 2);
  EXPECT_EQ(quarters.kernels_per_repetition, 4);
  ASSERT_EQ(quarters.kernel_names.size(), 4u);
  for (const std::string& name : quarters.kernel_names) EXPECT_EQ(name, kSelftestCopyKernel);
  EXPECT_NEAR(halves.median_us / whole.median_us, 1.0, 0.10);
  EXPECT_NEAR(quarters.median_us / whole.median_us, 1.0, 0.10);
  EXPECT_NEAR(halves.median_us / half.median_us, 2.0, 0.2) << "the time of two kernels is their sum";
  EXPECT_EQ(halves.unattributed_kernels, 0u);
}

TEST(MeasureGpu, TheL2FlushIsEffectiveAndNotCounted) {
  QTUNE_REQUIRE_GPU();
  const runtime::DeviceInfo& info = runtime::Device::get().info();
  // A copy whose source and destination fit in L2 together: fast when warm, slower when flushed.
  const std::size_t bytes = std::min<std::size_t>(8 * kMiB, static_cast<std::size_t>(info.l2_cache_bytes) / 4 / 16 * 16);
  const CopyBench bench(bytes);
  MeasureOptions warm_options;
  warm_options.warm_l2 = true;
  const Measurement cold = bench.measure_copies(bytes, 1);
  const Measurement warm = bench.measure_copies(bytes, 1, warm_options);
  print("small copy, cold L2", cold);
  print("small copy, warm L2", warm);
  EXPECT_TRUE(warm.warm_l2);
  EXPECT_EQ(warm.flush_bytes, 0u);
  EXPECT_LT(warm.median_us, cold.median_us) << "flushing L2 did not slow down a copy that fits in L2";

  // The flush itself takes far longer than the small copy measured with it, so it cannot be in the samples.
  runtime::DeviceBuffer flush(cold.flush_bytes);
  runtime::Stream stream;
  runtime::Event start;
  runtime::Event end;
  std::vector<double> flush_us;
  for (int i = 0; i < 5; ++i) {
    start.record(stream.get());
    flush.fill_bytes_async(static_cast<unsigned char>(i), stream.get());
    end.record(stream.get());
    end.synchronize();
    flush_us.push_back(1000.0 * runtime::Event::elapsed_ms(start, end));
  }
  std::cout << "flush of " << cold.flush_bytes << " bytes: " << median(flush_us) << " us\n";
  EXPECT_LT(cold.median_us, 0.5 * median(flush_us));
}

TEST(MeasureGpu, RepeatedMeasurementsAgreeWithinOnePercent) {
  QTUNE_REQUIRE_GPU();
  runtime::Device::get();
  const CopyBench bench(kGiB);
  const Measurement first = bench.measure_copies(kGiB, 1);
  const Measurement second = bench.measure_copies(kGiB, 1);
  print("first", first);
  print("second", second);
  const double change = std::abs(second.median_us - first.median_us) / first.median_us;
  std::cout << "medians differ by " << 100 * change << "%\n";
  EXPECT_LE(change, 0.01);
  // NVML was read while the measured batches ran: the copies keep the GPU busy, so the SM clock is above idle.
  if (Nvml::instance().available()) {
    EXPECT_GE(first.busy_samples, 1);
    EXPECT_GT(first.busy_sm_mhz_min, 0);
    EXPECT_GE(first.busy_sm_mhz_max, first.busy_sm_mhz_min);
    EXPECT_GT(first.busy_power_w_max, 0);
  }
}

TEST(MeasureGpu, KernelsOutsideARepetitionAreNotAttributed) {
  QTUNE_REQUIRE_GPU();
  runtime::Device::get();
  const CopyBench bench(16 * kMiB);
  runtime::Stream stream;
  CuptiTimer timer;
  const std::uint64_t empty_id = timer.begin_repetition();
  timer.end_repetition();
  bench.copy(stream.get(), 0, 16 * kMiB);  // launched outside any repetition
  const std::uint64_t id = timer.begin_repetition();
  bench.copy(stream.get(), 0, 16 * kMiB);
  timer.end_repetition();
  stream.synchronize();
  const std::vector<RepetitionTiming> timings = timer.collect({empty_id, id});
  std::cout << "empty: " << timings[0].kernel_count << " kernels, filled: " << timings[1].kernel_count
            << " kernels, unattributed: " << timer.unattributed_kernels() << "\n";
  EXPECT_EQ(timings[0].kernel_count, 0);
  EXPECT_EQ(timings[1].kernel_count, 1);
  EXPECT_GT(timings[1].total_us, 0);
  EXPECT_EQ(timer.unattributed_kernels(), 1u);
  EXPECT_THROW(CuptiTimer(), Error) << "a second timer while one is active";
}

TEST(MeasureGpu, AnOperationThatLaunchesNothingIsAnError) {
  QTUNE_REQUIRE_GPU();
  runtime::Device::get();
  try {
    measure([](CUstream) {});
    FAIL() << "measured an operation without kernels";
  } catch (const Error& error) {
    std::cout << error.what() << "\n";
    EXPECT_NE(std::string(error.what()).find("no kernel"), std::string::npos);
  }
}

// ---- Containment of real GPU failures ----

constexpr double kJobTimeout = 120;  // generous: the first GPU job of a worker compiles and creates a context

TEST(WorkerGpu, AFaultingKernelKillsOnlyTheWorker) {
  QTUNE_REQUIRE_GPU();
  Worker worker;
  for (const char* kind : {"illegal-address", "trap"}) {
    const JobOutcome fault = worker.run("selftest-fault", {{"kind", kind}}, kJobTimeout);
    std::cout << kind << ": " << to_string(fault.status) << " in " << fault.seconds << " s: " << fault.error
              << (fault.ok() ? " result " + fault.result.dump() : "") << "\n";
    EXPECT_EQ(fault.status, JobStatus::Fault) << kind;
    EXPECT_EQ(fault.error_type, "DriverError") << kind;
    // A trap reports CUDA_ERROR_LAUNCH_FAILED or CUDA_ERROR_ILLEGAL_INSTRUCTION depending on the driver.
    const char* expected = std::string(kind) == "illegal-address" ? "CUDA_ERROR_ILLEGAL_ADDRESS" : "CUDA_ERROR_";
    EXPECT_NE(fault.error.find(expected), std::string::npos) << fault.error;
    EXPECT_EQ(worker.pid(), 0) << "the worker went on after a sticky error";
    const JobOutcome next = worker.run("selftest-device", {}, kJobTimeout);
    ASSERT_EQ(next.status, JobStatus::Ok) << "after " << kind << ": " << next.error;
    EXPECT_NE(next.worker_pid, fault.worker_pid);
    EXPECT_GT(next.result["sm_count"].get<int>(), 0);
  }
  // This process's own context is untouched.
  EXPECT_EQ(runtime::sticky_context_error(), std::nullopt);
}

TEST(WorkerGpu, AHangingKernelIsKilledByTheWatchdogAndTheGpuStaysUsable) {
  QTUNE_REQUIRE_GPU();
  Worker worker;
  const double timeout = 20;
  const JobOutcome hang = worker.run("selftest-hang", {}, timeout);
  std::cout << "hang: " << to_string(hang.status) << " after " << hang.seconds << " s: " << hang.error << "\n";
  EXPECT_EQ(hang.status, JobStatus::Timeout);
  EXPECT_GE(hang.seconds, timeout);
  EXPECT_LT(hang.seconds, timeout + 40) << "killing the worker took too long";
  const JobOutcome copy = worker.run("selftest-copy", {{"bytes", 256 * kMiB}, {"time_budget_s", 1.0}}, kJobTimeout);
  ASSERT_EQ(copy.status, JobStatus::Ok) << copy.error;
  std::cout << "copy after the hang: " << copy.result["bandwidth_gbps"] << " GB/s\n";
  EXPECT_GT(copy.result["bandwidth_gbps"].get<double>(), 100);
}

TEST(WorkerGpu, TheCopySelftestMeasuresInTheWorker) {
  QTUNE_REQUIRE_GPU();
  const runtime::DeviceInfo& info = runtime::Device::get().info();
  Worker worker;
  const JobOutcome outcome = worker.run("selftest-copy", {{"bytes", kGiB}}, kJobTimeout);
  ASSERT_EQ(outcome.status, JobStatus::Ok) << outcome.error;
  const Measurement m = outcome.result["measurement"].get<Measurement>();
  print("1 GiB copy in the worker", m);
  const double bandwidth = outcome.result["bandwidth_gbps"].get<double>();
  const auto [low, high] = expected_copy_band_gbps(info);
  std::cout << "worker copy bandwidth: " << bandwidth << " GB/s (expected " << low << " to " << high << ")\n";
  EXPECT_GE(bandwidth, low);
  EXPECT_LE(bandwidth, high);
  EXPECT_EQ(outcome.result["device"]["uuid"], info.uuid);
  EXPECT_EQ(m.kernels_per_repetition, 1);
}

}  // namespace
}  // namespace qtune::measure
