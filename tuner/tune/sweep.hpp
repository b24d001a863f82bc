#pragma once
// A plain configuration sweep of one kernel family on one GPU (before the search engine, and to check it): the
// family provider's configurations from parameter ranges, compiled in parallel into the kernel cache here, then each
// verified against the CPU reference and timed (CUPTI, cold L2 by default) in the measuring worker process through
// the same backend as `qtune tune` (worker_backend.hpp): this process never initialises CUDA for the measured work.
// `qtune kernel-sweep` prints the result.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kernels/family.hpp"
#include "tuner/measure/measure.hpp"
#include "tuner/tune/backend.hpp"
#include "tuner/tune/tuner.hpp"

namespace qtune::tune {

struct SweepOptions {
  std::string family = "mma";
  FormatSpec format;
  int64_t n = 0;
  int64_t k = 0;
  std::vector<int64_t> m_values;
  bool bias = false;
  // Values to try per parameter; a parameter not listed takes the family's curated ranges at M. Ignored when configs
  // is set.
  std::map<std::string, std::vector<int>> ranges;
  std::vector<KernelConfig> configs;  // explicit configurations (the family default is added unless excluded)
  bool include_default = true;
  int max_configs = 200;              // per M, after check()
  bool verify = true;                 // every output row is compared with the CPU reference
  uint64_t seed = 1;
  int device = 0;
  measure::MeasureOptions measure;
};

struct SweepRow {
  int64_t m = 0;
  KernelConfig config;
  bool is_default = false;
  bool measured = false;
  measure::Measurement measurement;
  double gbps = 0;    // compulsory bytes / median time
  double tflops = 0;  // 2 M N K / median time
  bool verified = false;
  std::string verification;  // the check's summary, or "not verified"
  int registers = 0;
  int spill_bytes = 0;
  uint32_t shared_bytes = 0;
  std::string error;  // compile, launch or verification failure, or what the worker reported (crash, timeout)
};

// The candidate timeout of a sweep's measurement of time_budget_s seconds: room for warm-up, throttle retries and
// the cool-downs between them.
double sweep_candidate_timeout_s(double time_budget_s);

// Runs the sweep against `target` (its limits prune, its arch compiles) with `compiler` and `backend`; `progress`
// sees each row as it completes. The backend's MeasureSettings decide verification and timing.
std::vector<SweepRow> run_sweep(const SweepOptions& options, const TuneTarget& target, InstantiationCompiler& compiler,
                                MeasuringBackend& backend, const std::function<void(const SweepRow&)>& progress = {});

// run_sweep on GPU options.device through NVRTC with the kernel cache and a measuring worker pinned to that GPU.
// Throws NoGpuError without a GPU.
std::vector<SweepRow> run_sweep_on_device(const SweepOptions& options, const std::function<void(const SweepRow&)>& progress = {});

}  // namespace qtune::tune
