#include "tuner/measure/measure.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "kernels/error.hpp"
#include "tuner/measure/cupti_timer.hpp"
#include "tuner/measure/selftest_jobs.hpp"
#include "tuner/measure/statistics.hpp"
#include "tuner/measure/worker.hpp"
#include "tuner/runtime/device.hpp"
#include "tuner/runtime/memory.hpp"
#include "tuner/runtime/stream.hpp"

namespace qtune::measure {

namespace {

// A batch is sized to take about this long, so slow operations still stop near the time budget.
constexpr double kBatchSeconds = 0.05;
// Bounds of the throttling retries: a throttled GPU costs a measurement at most a few seconds more.
constexpr int kMaxThrottleRetries = 5;
constexpr double kMaxCooldownSeconds = 10;

Measurement measure_single(const std::function<void(CUstream)>& launch_operation, const MeasureOptions& options);

// The blocks' relative half width (MeasureOptions::stability_blocks) of samples in time order; nullopt with the
// check off or fewer than kMinSamplesPerBlock samples per block.
std::optional<double> blocks_relative_half_width(const std::vector<double>& samples, int blocks, double confidence) {
  const auto count = static_cast<std::size_t>(std::max(0, blocks));
  if (count == 0 || samples.size() < count * kMinSamplesPerBlock) return std::nullopt;
  return block_medians_interval(samples, count, confidence).relative_half_width();
}

}  // namespace

void validate(const MeasureOptions& options) {
  if (options.device < 0) QTUNE_INPUT_ERROR("device: must be >= 0, got " + std::to_string(options.device));
  if (options.min_repetitions < 1) {
    QTUNE_INPUT_ERROR("min_repetitions: must be >= 1, got " + std::to_string(options.min_repetitions));
  }
  if (options.max_repetitions < options.min_repetitions) {
    QTUNE_INPUT_ERROR("max_repetitions: " + std::to_string(options.max_repetitions) + " is below min_repetitions " +
                      std::to_string(options.min_repetitions));
  }
  if (options.batch_repetitions < 1) {
    QTUNE_INPUT_ERROR("batch_repetitions: must be >= 1, got " + std::to_string(options.batch_repetitions));
  }
  if (!(options.target_relative_ci > 0)) {
    QTUNE_INPUT_ERROR("target_relative_ci: must be > 0, got " + std::to_string(options.target_relative_ci));
  }
  if (!(options.confidence > 0 && options.confidence < 1)) {
    QTUNE_INPUT_ERROR("confidence: must be in (0, 1), got " + std::to_string(options.confidence));
  }
  if (!(options.time_budget_s >= 0)) {
    QTUNE_INPUT_ERROR("time_budget_s: must be >= 0, got " + std::to_string(options.time_budget_s));
  }
  if (!(options.min_warmup_s >= 0) || !(options.max_warmup_s >= options.min_warmup_s)) {
    QTUNE_INPUT_ERROR("max_warmup_s: must be >= min_warmup_s >= 0, got min " + std::to_string(options.min_warmup_s) +
                      " and max " + std::to_string(options.max_warmup_s));
  }
  if (options.warmup_window < 1) {
    QTUNE_INPUT_ERROR("warmup_window: must be >= 1, got " + std::to_string(options.warmup_window));
  }
  if (!(options.warmup_tolerance > 0)) {
    QTUNE_INPUT_ERROR("warmup_tolerance: must be > 0, got " + std::to_string(options.warmup_tolerance));
  }
  if (options.throttle_retries < 0 || options.throttle_retries > kMaxThrottleRetries) {
    QTUNE_INPUT_ERROR("throttle_retries: must be in [0, " + std::to_string(kMaxThrottleRetries) + "], got " +
                      std::to_string(options.throttle_retries));
  }
  if (!(options.throttle_cooldown_s >= 0 && options.throttle_cooldown_s <= kMaxCooldownSeconds)) {
    QTUNE_INPUT_ERROR("throttle_cooldown_s: must be in [0, " + std::to_string(kMaxCooldownSeconds) + "], got " +
                      std::to_string(options.throttle_cooldown_s));
  }
  if (!(options.min_measure_s >= 0 && options.min_measure_s <= options.time_budget_s)) {
    QTUNE_INPUT_ERROR("min_measure_s: must be in [0, time_budget_s = " + std::to_string(options.time_budget_s) + "], got " +
                      std::to_string(options.min_measure_s));
  }
  if (options.stability_blocks != 0 &&
      (options.stability_blocks < kMinStabilityBlocks || options.stability_blocks > kMaxStabilityBlocks)) {
    QTUNE_INPUT_ERROR("stability_blocks: must be 0 (off) or in [" + std::to_string(kMinStabilityBlocks) + ", " +
                      std::to_string(kMaxStabilityBlocks) + "], got " + std::to_string(options.stability_blocks));
  }
  if (!(options.clock_dip_fraction == 0 || (options.clock_dip_fraction >= 0.5 && options.clock_dip_fraction <= 1))) {
    QTUNE_INPUT_ERROR("clock_dip_fraction: must be 0 (off) or in [0.5, 1], got " + std::to_string(options.clock_dip_fraction));
  }
}

MeasureOptions benchmark_measure_options() {
  MeasureOptions options;
  options.min_measure_s = 0.5;
  options.stability_blocks = 8;
  return options;
}

double Measurement::relative_ci_half_width() const {
  if (median_us <= 0) return INFINITY;
  return std::max(median_us - ci_low_us, ci_high_us - median_us) / median_us;
}

LoopResult run_measurement_loop(const std::function<std::vector<double>(int)>& run_batch, const MeasureOptions& options,
                                const std::function<double()>& now_s, const std::function<int()>& sm_clock_mhz) {
  validate(options);
  const double start = now_s();
  double seconds_per_repetition = 0;
  const auto batch_size = [&](int limit) {
    int size = options.batch_repetitions;
    if (seconds_per_repetition > 0) {
      const double fitting = kBatchSeconds / seconds_per_repetition;
      size = fitting < 1 ? 1 : static_cast<int>(std::min<double>(fitting, options.batch_repetitions));
    }
    return std::max(1, std::min(size, limit));
  };
  const auto timed_batch = [&](int count) {
    const double before = now_s();
    std::vector<double> durations = run_batch(count);
    const double after = now_s();
    if (durations.size() != static_cast<std::size_t>(count)) {
      QTUNE_THROW(Error, "measurement: a batch of " + std::to_string(count) + " repetitions returned " +
                             std::to_string(durations.size()) + " durations");
    }
    seconds_per_repetition = std::max(0.0, after - before) / count;
    return durations;
  };

  LoopResult result;
  if (options.max_warmup_s > 0) {
    // Warm-up may not eat the measurement: it takes at most half the time budget.
    const double warmup_cap = std::min(options.max_warmup_s, options.time_budget_s / 2);
    std::vector<double> warmup;
    const StabilityRule stability{static_cast<std::size_t>(options.warmup_window), options.warmup_tolerance};
    int previous_clock = -1;
    int clock = -1;
    while (true) {
      // One repetition first: it sizes the batches and makes a failing operation fail fast.
      const std::vector<double> durations = timed_batch(warmup.empty() ? 1 : batch_size(INT_MAX));
      warmup.insert(warmup.end(), durations.begin(), durations.end());
      previous_clock = clock;
      clock = sm_clock_mhz ? sm_clock_mhz() : -1;
      const bool clocks_settled = clock <= 0 || (previous_clock > 0 && std::abs(clock - previous_clock) <=
                                                                          options.warmup_tolerance * previous_clock);
      const double elapsed = now_s() - start;
      if (elapsed >= options.min_warmup_s && clocks_settled && is_stable(warmup, stability)) {
        result.warmup_settled = true;
        break;
      }
      if (elapsed >= warmup_cap) break;
    }
    result.warmup_repetitions = static_cast<int>(warmup.size());
  }
  result.warmup_seconds = now_s() - start;

  const ConvergenceRule rule{static_cast<std::size_t>(options.min_repetitions), options.target_relative_ci,
                             options.confidence};
  const auto blocks_agree = [&options](const std::vector<double>& samples) {
    if (options.stability_blocks == 0) return true;
    const std::optional<double> width = blocks_relative_half_width(samples, options.stability_blocks, options.confidence);
    return width && *width <= options.target_relative_ci;
  };
  const auto max_samples = static_cast<std::size_t>(options.max_repetitions);
  std::size_t next_check = rule.min_samples;
  const double measure_start = now_s();
  std::vector<double>& samples = result.samples_us;
  while (true) {
    const std::vector<double> durations = timed_batch(batch_size(static_cast<int>(max_samples - samples.size())));
    samples.insert(samples.end(), durations.begin(), durations.end());
    if (samples.size() < rule.min_samples) continue;
    // Checks grow geometrically so that long runs do not spend their time sorting.
    if (samples.size() >= next_check && now_s() - measure_start >= options.min_measure_s) {
      if (is_converged(summarize(samples, options.confidence), rule) && blocks_agree(samples)) {
        result.converged = true;
        result.stop_reason = "converged";
        break;
      }
      next_check = std::max(samples.size() + static_cast<std::size_t>(options.batch_repetitions),
                            samples.size() + samples.size() / 20);
    }
    if (samples.size() >= max_samples) {
      result.stop_reason = "max repetitions";
      break;
    }
    if (now_s() - start >= options.time_budget_s) {
      result.stop_reason = "time budget";
      break;
    }
  }
  if (!result.converged) {
    result.converged = is_converged(summarize(samples, options.confidence), rule) && blocks_agree(samples);
  }
  return result;
}

Measurement measure_until_unthrottled(const std::function<Measurement()>& measure_once, const MeasureOptions& options,
                                      const std::function<void(double seconds)>& cool_down) {
  validate(options);
  Measurement kept = measure_once();
  std::vector<double> throttled_medians;
  double cooled = 0;
  int retries = 0;
  while (kept.throttled && retries < options.throttle_retries) {
    ++retries;
    // Longer each time: a GPU at its power cap needs its average power to fall before the clocks come back.
    const double seconds = options.throttle_cooldown_s * retries;
    if (seconds > 0) cool_down(seconds);
    cooled += seconds;
    Measurement next = measure_once();
    // Still throttled and no faster: the slowdown persists (a power cap), and more cool-downs would only cost time.
    const bool persists = next.throttled && next.median_us >= kept.median_us * (1 - options.target_relative_ci);
    if (next.throttled && next.median_us >= kept.median_us) {
      throttled_medians.push_back(next.median_us);
    } else {
      throttled_medians.push_back(kept.median_us);
      kept = std::move(next);
    }
    if (persists) break;
  }
  kept.throttle_retries = retries;
  kept.cooldown_seconds = cooled;
  kept.throttled_medians_us = std::move(throttled_medians);
  return kept;
}

nlohmann::json measure_options_to_json(const MeasureOptions& options) {
  return nlohmann::json{{"device", options.device},
                        {"warm_l2", options.warm_l2},
                        {"l2_flush", to_string(options.l2_flush)},
                        {"flush_bytes", options.flush_bytes},
                        {"target_relative_ci", options.target_relative_ci},
                        {"confidence", options.confidence},
                        {"min_repetitions", options.min_repetitions},
                        {"max_repetitions", options.max_repetitions},
                        {"time_budget_s", options.time_budget_s},
                        {"batch_repetitions", options.batch_repetitions},
                        {"min_warmup_s", options.min_warmup_s},
                        {"max_warmup_s", options.max_warmup_s},
                        {"warmup_window", options.warmup_window},
                        {"warmup_tolerance", options.warmup_tolerance},
                        {"throttle_retries", options.throttle_retries},
                        {"throttle_cooldown_s", options.throttle_cooldown_s},
                        {"clock_dip_fraction", options.clock_dip_fraction},
                        {"min_measure_s", options.min_measure_s},
                        {"stability_blocks", options.stability_blocks}};
}

MeasureOptions measure_options_from_json(const nlohmann::json& json) {
  if (!json.is_object()) QTUNE_INPUT_ERROR("measure: expected an object, got " + json.dump());
  MeasureOptions options;
  const std::string prefix = "measure.";
  options.device = job_field(json, "device", options.device, prefix);
  options.warm_l2 = job_field(json, "warm_l2", options.warm_l2, prefix);
  options.l2_flush = l2_flush_from_text(job_field(json, "l2_flush", std::string(to_string(options.l2_flush)), prefix),
                                        "measure.l2_flush");
  options.flush_bytes = job_field(json, "flush_bytes", options.flush_bytes, prefix);
  options.target_relative_ci = job_field(json, "target_relative_ci", options.target_relative_ci, prefix);
  options.confidence = job_field(json, "confidence", options.confidence, prefix);
  options.min_repetitions = job_field(json, "min_repetitions", options.min_repetitions, prefix);
  options.max_repetitions = job_field(json, "max_repetitions", options.max_repetitions, prefix);
  options.time_budget_s = job_field(json, "time_budget_s", options.time_budget_s, prefix);
  options.batch_repetitions = job_field(json, "batch_repetitions", options.batch_repetitions, prefix);
  options.min_warmup_s = job_field(json, "min_warmup_s", options.min_warmup_s, prefix);
  options.max_warmup_s = job_field(json, "max_warmup_s", options.max_warmup_s, prefix);
  options.warmup_window = job_field(json, "warmup_window", options.warmup_window, prefix);
  options.warmup_tolerance = job_field(json, "warmup_tolerance", options.warmup_tolerance, prefix);
  options.throttle_retries = job_field(json, "throttle_retries", options.throttle_retries, prefix);
  options.throttle_cooldown_s = job_field(json, "throttle_cooldown_s", options.throttle_cooldown_s, prefix);
  options.clock_dip_fraction = job_field(json, "clock_dip_fraction", options.clock_dip_fraction, prefix);
  options.min_measure_s = job_field(json, "min_measure_s", options.min_measure_s, prefix);
  options.stability_blocks = job_field(json, "stability_blocks", options.stability_blocks, prefix);
  validate(options);
  return options;
}

std::string_view to_string(L2Flush flush) { return flush == L2Flush::Read ? "read" : "write"; }

L2Flush l2_flush_from_text(std::string_view text, std::string_view field) {
  if (text == "read") return L2Flush::Read;
  if (text == "write") return L2Flush::Write;
  QTUNE_INPUT_ERROR(std::string(field) + ": '" + std::string(text) + "' is not one of read, write");
}

namespace {

// Reads every 16-byte word once through L2 (ld.global.cg); the conditional store only keeps the loads alive.
const char* const kL2FlushReadSource = R"(
extern "C" __global__ void qtune_l2_flush_read(const uint4* __restrict__ data, unsigned long long count,
                                               unsigned int* sink) {
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  unsigned int folded = 0;
  for (unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const uint4 word = __ldcg(data + i);
    folded ^= word.x ^ word.y ^ word.z ^ word.w;
  }
  if (folded == 0x9E3779B9u) *sink = folded;
}
)";

// The read-flush kernel of each device, compiled once per process.
const runtime::Kernel& l2_flush_read_kernel(int device) {
  static std::mutex mutex;
  static std::map<int, runtime::Kernel> kernels;
  const std::lock_guard<std::mutex> lock(mutex);
  auto found = kernels.find(device);
  if (found == kernels.end()) {
    found = kernels.emplace(device, compile_kernel_for_device(kL2FlushReadSource, "qtune_l2_flush_read", device)).first;
  }
  return found->second;
}

}  // namespace

void record_busy_samples(Measurement& measurement, const std::vector<NvmlSample>& samples) {
  for (const NvmlSample& sample : samples) {
    if (!sample.valid) continue;
    ++measurement.busy_samples;
    if (sample.sm_mhz > 0) {
      measurement.busy_sm_mhz_min = measurement.busy_sm_mhz_min < 0 ? sample.sm_mhz : std::min(measurement.busy_sm_mhz_min, sample.sm_mhz);
      measurement.busy_sm_mhz_max = std::max(measurement.busy_sm_mhz_max, sample.sm_mhz);
    }
    measurement.busy_power_w_max = std::max(measurement.busy_power_w_max, sample.power_w);
    measurement.busy_clock_event_reasons |= sample.throttle_reasons;
  }
  measurement.throttled_while_busy = is_throttled(measurement.busy_clock_event_reasons);
}

void flag_clock_dip(Measurement& measurement, int max_sm_mhz, double clock_dip_fraction) {
  measurement.max_sm_mhz = max_sm_mhz;
  measurement.clock_dip = clock_dip_fraction > 0 && max_sm_mhz > 0 && measurement.busy_sm_mhz_min > 0 &&
                          measurement.busy_sm_mhz_min < clock_dip_fraction * max_sm_mhz;
  if (measurement.clock_dip) measurement.throttled = true;
}

void set_statistics(Measurement& measurement, const std::vector<double>& samples_us, double confidence) {
  const Summary summary = summarize(samples_us, confidence);
  measurement.median_us = summary.median;
  measurement.p10_us = summary.p10;
  measurement.p90_us = summary.p90;
  measurement.min_us = summary.min;
  measurement.max_us = summary.max;
  measurement.mean_us = summary.mean;
  measurement.stddev_us = summary.stddev;
  measurement.ci_low_us = summary.median_interval.low;
  measurement.ci_high_us = summary.median_interval.high;
  measurement.ci_coverage = summary.median_interval.coverage;
  measurement.blocks_relative_half_width =
      blocks_relative_half_width(samples_us, measurement.stability_blocks, confidence).value_or(-1);
}

Measurement pool_measurements(const std::vector<Measurement>& parts, double confidence) {
  if (parts.empty()) QTUNE_INPUT_ERROR("measurements: nothing to pool");
  Measurement pooled = parts.front();
  pooled.samples_us.clear();
  pooled.repetitions = 0;
  pooled.warmup_repetitions = 0;
  pooled.warmup_seconds = 0;
  pooled.total_seconds = 0;
  pooled.throttle_retries = 0;
  pooled.throttled_medians_us.clear();
  pooled.busy_samples = 0;
  pooled.busy_sm_mhz_min = -1;
  pooled.busy_sm_mhz_max = -1;
  pooled.busy_power_w_max = -1;
  pooled.busy_clock_event_reasons = 0;
  for (const Measurement& part : parts) {
    pooled.samples_us.insert(pooled.samples_us.end(), part.samples_us.begin(), part.samples_us.end());
    pooled.repetitions += part.repetitions;
    pooled.warmup_repetitions += part.warmup_repetitions;
    pooled.warmup_seconds += part.warmup_seconds;
    pooled.total_seconds += part.total_seconds;
    pooled.converged = pooled.converged && part.converged;
    pooled.warmup_settled = pooled.warmup_settled && part.warmup_settled;
    pooled.throttled = pooled.throttled || part.throttled;
    pooled.throttle_retries += part.throttle_retries;
    pooled.throttled_medians_us.insert(pooled.throttled_medians_us.end(), part.throttled_medians_us.begin(),
                                       part.throttled_medians_us.end());
    pooled.busy_samples += part.busy_samples;
    if (part.busy_sm_mhz_min >= 0) {
      pooled.busy_sm_mhz_min = pooled.busy_sm_mhz_min < 0 ? part.busy_sm_mhz_min : std::min(pooled.busy_sm_mhz_min, part.busy_sm_mhz_min);
    }
    pooled.busy_sm_mhz_max = std::max(pooled.busy_sm_mhz_max, part.busy_sm_mhz_max);
    pooled.busy_power_w_max = std::max(pooled.busy_power_w_max, part.busy_power_w_max);
    pooled.busy_clock_event_reasons |= part.busy_clock_event_reasons;
    pooled.throttled_while_busy = pooled.throttled_while_busy || part.throttled_while_busy;
    pooled.clock_dip = pooled.clock_dip || part.clock_dip;
  }
  pooled.nvml_end = parts.back().nvml_end;
  set_statistics(pooled, pooled.samples_us, confidence);
  return pooled;
}

Measurement measure(const std::function<void(CUstream)>& launch_operation, const MeasureOptions& options) {
  validate(options);
  return measure_until_unthrottled([&] { return measure_single(launch_operation, options); }, options, [](double seconds) {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  });
}

namespace {

// One measurement: warm-up and repetitions until converged or out of budget, NVML sampled before and after.
Measurement measure_single(const std::function<void(CUstream)>& launch_operation, const MeasureOptions& options) {
  const auto wall_start = std::chrono::steady_clock::now();
  const auto now_s = [wall_start] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  };
  runtime::Device& device = runtime::Device::get(options.device);
  const runtime::DeviceInfo& info = device.info();
  runtime::Stream stream;

  Measurement measurement;
  measurement.device_name = info.name;
  measurement.device_uuid = info.uuid;
  measurement.warm_l2 = options.warm_l2;
  runtime::DeviceBuffer flush_buffer;
  runtime::DeviceBuffer flush_sink;
  const runtime::Kernel* flush_kernel = nullptr;
  runtime::LaunchConfig flush_launch;
  if (!options.warm_l2) {
    constexpr std::size_t fallback_bytes = 256u << 20;  // for a device that reports no L2 size
    measurement.l2_flush = std::string(to_string(options.l2_flush));
    measurement.flush_bytes = options.flush_bytes > 0  ? options.flush_bytes
                              : info.l2_cache_bytes > 0 ? 2 * static_cast<std::size_t>(info.l2_cache_bytes)
                                                        : fallback_bytes;
    measurement.flush_bytes = (measurement.flush_bytes + 15) / 16 * 16;  // whole 16-byte words for the read kernel
    flush_buffer = runtime::DeviceBuffer(measurement.flush_bytes);
    if (options.l2_flush == L2Flush::Read) {
      flush_kernel = &l2_flush_read_kernel(options.device);
      flush_launch = selftest_copy_launch(options.device);
      flush_sink = runtime::DeviceBuffer(sizeof(unsigned int));
      flush_buffer.fill_bytes_async(0x5A, stream.get());
    }
  }
  std::size_t flush_launches = 0;
  const auto flush_l2 = [&](unsigned char fill_value) {
    if (flush_kernel != nullptr) {
      const unsigned long long words = measurement.flush_bytes / 16;
      flush_kernel->launch_with(flush_launch, stream.get(), flush_buffer.get(), words, flush_sink.get());
      ++flush_launches;  // CUPTI sees it outside every repetition: not the operation's, so not "unattributed"
    } else {
      flush_buffer.fill_bytes_async(fill_value, stream.get());
    }
  };

  Nvml& nvml = Nvml::instance();
  const std::optional<Nvml::DeviceHandle> nvml_device = nvml.find_device(info.uuid, info.pci_bus_id);
  const auto nvml_sample = [&] { return nvml_device ? nvml.sample(*nvml_device) : NvmlSample{}; };
  std::function<int()> sm_clock;
  if (nvml_device) sm_clock = [&] { return nvml.sm_clock_mhz(*nvml_device); };
  measurement.nvml_start = nvml_sample();

  CuptiTimer timer;
  unsigned char fill_value = 0;
  int kernels_per_repetition = -1;
  int repetitions_launched = 0;
  std::vector<std::pair<int, NvmlSample>> busy_samples;  // (repetitions launched by the end of the batch, NVML read)
  const auto run_batch = [&](int count) {
    std::vector<std::uint64_t> ids;
    ids.reserve(static_cast<std::size_t>(count));
    for (int i = 0; i < count; ++i) {
      if (!options.warm_l2) flush_l2(++fill_value);
      ids.push_back(timer.begin_repetition());
      try {
        launch_operation(stream.get());
      } catch (...) {
        timer.end_repetition();
        throw;
      }
      timer.end_repetition();
    }
    if (nvml_device) busy_samples.push_back({repetitions_launched + count, nvml_sample()});  // the batch still runs
    repetitions_launched += count;
    device.synchronize();  // a faulting kernel surfaces here
    const std::vector<RepetitionTiming> timings = timer.collect(ids);
    std::vector<double> durations;
    durations.reserve(timings.size());
    for (const RepetitionTiming& timing : timings) {
      if (timing.kernel_count == 0) {
        QTUNE_THROW(Error, "measurement: CUPTI recorded no kernel for a repetition (" +
                               std::to_string(timer.unattributed_kernels()) +
                               " kernel records could not be attributed); the operation must launch its kernels "
                               "from the measuring thread");
      }
      if (kernels_per_repetition < 0) {
        kernels_per_repetition = timing.kernel_count;
        measurement.kernel_names = timing.kernel_names;
      } else if (timing.kernel_count != kernels_per_repetition) {
        QTUNE_THROW(Error, "measurement: one repetition launched " + std::to_string(kernels_per_repetition) +
                               " kernels and another " + std::to_string(timing.kernel_count));
      }
      durations.push_back(timing.total_us);
    }
    return durations;
  };

  LoopResult loop = run_measurement_loop(run_batch, options, now_s, sm_clock);
  measurement.nvml_end = nvml_sample();
  measurement.throttled = measurement.nvml_start.throttled || measurement.nvml_end.throttled;
  std::vector<NvmlSample> measured_batches;  // warm-up batches are left out: their clocks are still settling
  for (const auto& [launched, sample] : busy_samples) {
    if (launched > loop.warmup_repetitions) measured_batches.push_back(sample);
  }
  record_busy_samples(measurement, measured_batches);
  flag_clock_dip(measurement, nvml_device ? nvml.max_sm_clock_mhz(*nvml_device) : -1, options.clock_dip_fraction);
  measurement.kernels_per_repetition = kernels_per_repetition;
  measurement.unattributed_kernels = timer.unattributed_kernels() - std::min(timer.unattributed_kernels(), flush_launches);

  measurement.stability_blocks = options.stability_blocks;
  set_statistics(measurement, loop.samples_us, options.confidence);
  measurement.samples_us = std::move(loop.samples_us);
  measurement.repetitions = static_cast<int>(measurement.samples_us.size());
  measurement.warmup_repetitions = loop.warmup_repetitions;
  measurement.warmup_settled = loop.warmup_settled;
  measurement.warmup_seconds = loop.warmup_seconds;
  measurement.converged = loop.converged;
  measurement.stop_reason = loop.stop_reason;
  measurement.total_seconds = now_s();
  return measurement;
}

}  // namespace

void to_json(nlohmann::json& json, const Measurement& m) {
  json = nlohmann::json{{"median_us", m.median_us},
                        {"p10_us", m.p10_us},
                        {"p90_us", m.p90_us},
                        {"min_us", m.min_us},
                        {"max_us", m.max_us},
                        {"mean_us", m.mean_us},
                        {"stddev_us", m.stddev_us},
                        {"ci_low_us", m.ci_low_us},
                        {"ci_high_us", m.ci_high_us},
                        {"ci_coverage", m.ci_coverage},
                        {"samples_us", m.samples_us},
                        {"repetitions", m.repetitions},
                        {"warmup_repetitions", m.warmup_repetitions},
                        {"converged", m.converged},
                        {"stop_reason", m.stop_reason},
                        {"warmup_settled", m.warmup_settled},
                        {"warmup_seconds", m.warmup_seconds},
                        {"total_seconds", m.total_seconds},
                        {"warm_l2", m.warm_l2},
                        {"l2_flush", m.l2_flush},
                        {"flush_bytes", m.flush_bytes},
                        {"nvml_start", m.nvml_start},
                        {"nvml_end", m.nvml_end},
                        {"throttled", m.throttled},
                        {"busy_samples", m.busy_samples},
                        {"busy_sm_mhz_min", m.busy_sm_mhz_min},
                        {"busy_sm_mhz_max", m.busy_sm_mhz_max},
                        {"busy_power_w_max", m.busy_power_w_max},
                        {"busy_clock_event_reasons", m.busy_clock_event_reasons},
                        {"throttled_while_busy", m.throttled_while_busy},
                        {"max_sm_mhz", m.max_sm_mhz},
                        {"clock_dip", m.clock_dip},
                        {"throttle_retries", m.throttle_retries},
                        {"cooldown_seconds", m.cooldown_seconds},
                        {"throttled_medians_us", m.throttled_medians_us},
                        {"stability_blocks", m.stability_blocks},
                        {"blocks_relative_half_width", m.blocks_relative_half_width},
                        {"kernels_per_repetition", m.kernels_per_repetition},
                        {"kernel_names", m.kernel_names},
                        {"unattributed_kernels", m.unattributed_kernels},
                        {"device_name", m.device_name},
                        {"device_uuid", m.device_uuid}};
}

void from_json(const nlohmann::json& json, Measurement& m) {
  json.at("median_us").get_to(m.median_us);
  json.at("p10_us").get_to(m.p10_us);
  json.at("p90_us").get_to(m.p90_us);
  json.at("min_us").get_to(m.min_us);
  json.at("max_us").get_to(m.max_us);
  json.at("mean_us").get_to(m.mean_us);
  json.at("stddev_us").get_to(m.stddev_us);
  json.at("ci_low_us").get_to(m.ci_low_us);
  json.at("ci_high_us").get_to(m.ci_high_us);
  json.at("ci_coverage").get_to(m.ci_coverage);
  json.at("samples_us").get_to(m.samples_us);
  json.at("repetitions").get_to(m.repetitions);
  json.at("warmup_repetitions").get_to(m.warmup_repetitions);
  json.at("converged").get_to(m.converged);
  json.at("stop_reason").get_to(m.stop_reason);
  json.at("warmup_settled").get_to(m.warmup_settled);
  json.at("warmup_seconds").get_to(m.warmup_seconds);
  json.at("total_seconds").get_to(m.total_seconds);
  json.at("warm_l2").get_to(m.warm_l2);
  // Absent in measurements made before the read flush existed: those flushed by writing.
  m.l2_flush = json.value("l2_flush", std::string(m.warm_l2 ? "" : "write"));
  json.at("flush_bytes").get_to(m.flush_bytes);
  json.at("nvml_start").get_to(m.nvml_start);
  json.at("nvml_end").get_to(m.nvml_end);
  json.at("throttled").get_to(m.throttled);
  // Absent in measurements made before NVML was read during the batches.
  m.busy_samples = json.value("busy_samples", 0);
  m.busy_sm_mhz_min = json.value("busy_sm_mhz_min", -1);
  m.busy_sm_mhz_max = json.value("busy_sm_mhz_max", -1);
  m.busy_power_w_max = json.value("busy_power_w_max", -1.0);
  m.busy_clock_event_reasons = json.value("busy_clock_event_reasons", std::uint64_t{0});
  m.throttled_while_busy = json.value("throttled_while_busy", false);
  m.max_sm_mhz = json.value("max_sm_mhz", -1);
  m.clock_dip = json.value("clock_dip", false);
  // Absent in measurements stored before throttled ones were retried.
  m.throttle_retries = json.value("throttle_retries", 0);
  m.cooldown_seconds = json.value("cooldown_seconds", 0.0);
  m.throttled_medians_us = json.value("throttled_medians_us", std::vector<double>{});
  // Absent in measurements stored before the blocks' check existed.
  m.stability_blocks = json.value("stability_blocks", 0);
  m.blocks_relative_half_width = json.value("blocks_relative_half_width", -1.0);
  json.at("kernels_per_repetition").get_to(m.kernels_per_repetition);
  json.at("kernel_names").get_to(m.kernel_names);
  json.at("unattributed_kernels").get_to(m.unattributed_kernels);
  json.at("device_name").get_to(m.device_name);
  json.at("device_uuid").get_to(m.device_uuid);
}

}  // namespace qtune::measure
