#pragma once
// The measurement harness: times an operation (one or more kernel launches on a given stream) on the GPU with
// CUPTI, cold L2 by default, after a warm-up that lets the clocks settle, repeating until the median is known to
// +-1% (95% confidence) or the time budget is spent. An operation's time is the SUM of the GPU durations of the
// kernels it launches (see cupti_timer.hpp); the L2 flush between repetitions is not counted.
#include <cuda.h>

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tuner/measure/nvml.hpp"

namespace qtune::measure {

// How a cold-L2 measurement evicts what the previous repetition left in L2 (the flush itself is never timed).
enum class L2Flush {
  // A kernel reads a buffer of flush_bytes: L2 is left holding clean lines of that buffer, so the timed kernel finds
  // none of its operands in L2 and has nothing of the harness's to write back.
  Read,
  // cuMemsetD8Async writes the buffer (what Triton's do_bench does with its cache buffer): L2 is left full of dirty
  // lines, which the timed kernel pays to write back to DRAM as its own reads evict them.
  Write,
};
std::string_view to_string(L2Flush flush);
// "read" or "write"; anything else is an InputError naming `field`.
L2Flush l2_flush_from_text(std::string_view text, std::string_view field);

struct MeasureOptions {
  int device = 0;
  // Cold L2 (default): before every repetition a buffer of flush_bytes (0: twice the L2 size) is read (or written,
  // l2_flush), evicting whatever the previous repetition left in L2. warm_l2 skips the flush.
  bool warm_l2 = false;
  L2Flush l2_flush = L2Flush::Read;
  std::size_t flush_bytes = 0;
  // Stop when the `confidence` interval of the median lies within median * (1 +- target_relative_ci) ...
  double target_relative_ci = 0.01;
  double confidence = 0.95;
  // ... with at least min_repetitions and at most max_repetitions measured repetitions ...
  int min_repetitions = 20;
  int max_repetitions = 100000;
  // ... or when the whole measurement (warm-up included) has taken time_budget_s; min_repetitions still completes.
  double time_budget_s = 2.0;
  // Convergence counts only once the measured repetitions (after warm-up) span min_measure_s of host time, so that a
  // median is not taken over a few milliseconds (20 repetitions of a 700 us GEMM) that one slow phase of the GPU can
  // fill. 0: converge as soon as the interval allows. At most time_budget_s.
  double min_measure_s = 0;
  // Convergence also needs the measured repetitions, cut in time order into this many blocks, to agree: the Student-t
  // interval of the mean of the blocks' medians (statistics.hpp, batch means) within +-target_relative_ci. A GPU at
  // its power cap moves through slow phases longer than many repetitions; samples that are not independent make the
  // order-statistic interval too narrow, and two runs then disagree by more than it. 0: off; otherwise in
  // [kMinStabilityBlocks, kMaxStabilityBlocks].
  // The check needs kMinSamplesPerBlock samples per block.
  int stability_blocks = 0;
  // Repetitions are launched this many at a time between synchronisations (fewer when one takes long).
  int batch_repetitions = 10;
  // Warm-up runs the operation (discarding the times) for at least min_warmup_s and until the median of the last
  // warmup_window repetitions differs from that of the window before by less than warmup_tolerance and the NVML
  // SM clock (when available) changed by less than warmup_tolerance between the last two batches; at most
  // max_warmup_s and at most half of time_budget_s. max_warmup_s = 0 disables warm-up.
  double min_warmup_s = 0.05;
  double max_warmup_s = 0.5;
  int warmup_window = 10;
  double warmup_tolerance = 0.01;
  // When NVML flags a measurement as throttled (power cap, thermal or hardware slowdown while busy), the GPU idles
  // for a cool-down and the operation is measured again, at most throttle_retries times (0..5); retry i waits
  // i * throttle_cooldown_s (0..10 s). The first unthrottled measurement is kept; when every one is throttled, the
  // one with the lowest median (the least slowed) is kept, still flagged throttled. A retry that is throttled again
  // and not faster by more than target_relative_ci ends the retries: the slowdown persists.
  int throttle_retries = 2;
  double throttle_cooldown_s = 1.0;
  // A clock dip counts as throttling too: an NVML read taken while the repetitions ran saw the SM clock below
  // clock_dip_fraction x the GPU's highest SM clock, with or without a clock-event reason (the H200 was seen at
  // 1635 MHz of 1980 with none, and the medians followed the clock). 0 disables the rule; otherwise in [0.5, 1].
  double clock_dip_fraction = 0.95;
};

// The fewest samples per block for MeasureOptions::stability_blocks' check: a median of fewer says little.
inline constexpr int kMinSamplesPerBlock = 5;
// stability_blocks is 0 (off) or in [kMinStabilityBlocks, kMaxStabilityBlocks].
inline constexpr int kMinStabilityBlocks = 4;
inline constexpr int kMaxStabilityBlocks = 64;

// The options of a benchmark's final numbers (`qtune bench`, qtune-bench): the defaults plus a 0.5 s minimum
// measuring time and 8 stability blocks, so that two runs agree (docs/measurement.md). Tuning keeps the plain
// defaults: it ranks candidates within one run.
MeasureOptions benchmark_measure_options();

// Throws InputError naming the field (e.g. "min_repetitions") when options are inconsistent.
void validate(const MeasureOptions& options);

// The options as worker-job JSON, and back: absent fields keep their defaults; a field of the wrong type or value is
// an InputError naming it ("measure.l2_flush: ..."); the result is validated.
nlohmann::json measure_options_to_json(const MeasureOptions& options);
MeasureOptions measure_options_from_json(const nlohmann::json& json);

struct Measurement {
  // Statistics of samples_us (microseconds); percentiles interpolate linearly (statistics.hpp).
  double median_us = 0;
  double p10_us = 0;
  double p90_us = 0;
  double min_us = 0;
  double max_us = 0;
  double mean_us = 0;
  double stddev_us = 0;
  double ci_low_us = 0;  // the confidence interval of the median
  double ci_high_us = 0;
  double ci_coverage = 0;  // exact coverage of [ci_low_us, ci_high_us]
  std::vector<double> samples_us;  // one per measured repetition, in order
  int repetitions = 0;
  int warmup_repetitions = 0;
  bool converged = false;       // the interval reached +-target
  std::string stop_reason;      // "converged", "time budget", "max repetitions"
  bool warmup_settled = false;  // false: warm-up stopped at max_warmup_s
  double warmup_seconds = 0;
  double total_seconds = 0;     // host wall time of the whole measurement
  bool warm_l2 = false;
  std::string l2_flush;         // "read" or "write"; empty with warm_l2
  std::size_t flush_bytes = 0;  // 0 with warm_l2
  NvmlSample nvml_start;        // before warm-up
  NvmlSample nvml_end;          // after the last repetition
  bool throttled = false;       // either sample flags throttling, or clock_dip
  int max_sm_mhz = -1;          // the GPU's highest SM clock (NVML); -1 when unknown
  bool clock_dip = false;       // busy_sm_mhz_min < clock_dip_fraction * max_sm_mhz (see MeasureOptions)
  // NVML read while each measured batch was still running (after its launches, before synchronising): how many
  // reads, the range of SM clocks, the highest power, and every clock-event reason seen (OR). The retry rule reads
  // nvml_start/nvml_end's reasons and the lowest busy SM clock (clock_dip).
  int busy_samples = 0;
  int busy_sm_mhz_min = -1;
  int busy_sm_mhz_max = -1;
  double busy_power_w_max = -1;
  std::uint64_t busy_clock_event_reasons = 0;
  bool throttled_while_busy = false;  // is_throttled(busy_clock_event_reasons)
  int throttle_retries = 0;     // measurements repeated because an earlier one was throttled
  double cooldown_seconds = 0;  // idled before those repetitions
  std::vector<double> throttled_medians_us;  // medians of the throttled measurements set aside, in order
  int kernels_per_repetition = 0;
  std::vector<std::string> kernel_names;  // of one repetition, in launch order
  std::size_t unattributed_kernels = 0;   // kernels CUPTI saw outside any repetition (0 normally)
  std::string device_name;
  std::string device_uuid;

  // With stability_blocks > 0: the batch-means interval's half width relative to its mean (MeasureOptions), computed
  // over all samples; -1 when not computed (blocks off, or fewer than kMinSamplesPerBlock samples per block).
  int stability_blocks = 0;
  double blocks_relative_half_width = -1;

  // max(median - ci_low, ci_high - median) / median.
  double relative_ci_half_width() const;
};

void to_json(nlohmann::json& json, const Measurement& measurement);
void from_json(const nlohmann::json& json, Measurement& measurement);

// Measures `launch_operation` (see measure_until_unthrottled for throttled measurements), which must enqueue the operation's kernels on the stream it is given, from the
// calling thread, and must not synchronise. Runs in the calling process on device options.device (tuners call it
// inside a worker process: worker.hpp). Throws NoGpuError without a GPU, DriverError when a launch or a kernel
// fails, qtune::Error when a repetition launched no kernel CUPTI could attribute or when repetitions launch
// different numbers of kernels.
Measurement measure(const std::function<void(CUstream)>& launch_operation, const MeasureOptions& options = {});

// Median, percentiles, extremes, mean, deviation and the median's interval of `samples_us`, into `measurement`; the
// blocks' interval too when measurement.stability_blocks > 0 and there are enough samples.
void set_statistics(Measurement& measurement, const std::vector<double>& samples_us, double confidence = 0.95);
// One measurement of the samples of several (the same operation timed more than once): statistics of all samples,
// repetitions and times summed, busy NVML ranges merged; the rest (options, device, NVML at start) from the first.
Measurement pool_measurements(const std::vector<Measurement>& parts, double confidence = 0.95);

// measure()'s answer to throttling, separated from the GPU so it can be tested on the CPU: measures with
// measure_once(), and while the result is throttled and retries remain, calls cool_down(seconds) and measures again
// (MeasureOptions::throttle_retries). The kept measurement records the retries, the cool-down time and the medians
// of the throttled measurements it replaced.
Measurement measure_until_unthrottled(const std::function<Measurement()>& measure_once, const MeasureOptions& options,
                                      const std::function<void(double seconds)>& cool_down);

// Folds the NVML reads taken while batches ran into measurement's busy_* fields (invalid reads are skipped).
void record_busy_samples(Measurement& measurement, const std::vector<NvmlSample>& samples);
// Sets max_sm_mhz and clock_dip from the busy SM clocks, and flags the measurement throttled on a dip.
void flag_clock_dip(Measurement& measurement, int max_sm_mhz, double clock_dip_fraction);

// The warm-up and repetition logic of measure(), separated from the GPU so it can be tested on the CPU.
// run_batch(n) runs n repetitions and returns their durations (us); now_s() is a monotonic clock in seconds;
// sm_clock_mhz() (may be empty, or return -1) reads the SM clock.
struct LoopResult {
  std::vector<double> samples_us;
  int warmup_repetitions = 0;
  bool warmup_settled = false;
  double warmup_seconds = 0;
  bool converged = false;
  std::string stop_reason;
};
LoopResult run_measurement_loop(const std::function<std::vector<double>(int)>& run_batch, const MeasureOptions& options,
                                const std::function<double()>& now_s, const std::function<int()>& sm_clock_mhz = {});

}  // namespace qtune::measure
