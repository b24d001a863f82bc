#pragma once
// A plain configuration sweep of one kernel family on the local GPU (before the search engine, and to check it):
// enumerate configs from parameter ranges, drop what check() rejects, compile in parallel, verify each against the
// CPU reference, and time it with the CUPTI harness (cold L2 by default). `qtune kernel-sweep` prints the result.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kernels/family.hpp"
#include "tuner/measure/measure.hpp"

namespace qtune::gemm {

struct SweepOptions {
  std::string family = "mma";
  FormatSpec format;
  int64_t n = 0;
  int64_t k = 0;
  std::vector<int64_t> m_values;
  bool bias = false;
  // Values to try per parameter; a parameter not listed takes default_sweep_ranges(). Ignored when configs is set.
  std::map<std::string, std::vector<int>> ranges;
  std::vector<KernelConfig> configs;  // explicit configurations (the family default is added unless excluded)
  bool include_default = true;
  int max_configs = 200;              // per M, after check()
  bool verify = true;
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
  std::string verification;  // Verification::summary(), or "not verified"
  int registers = 0;
  int spill_bytes = 0;
  uint32_t shared_bytes = 0;
  std::string error;  // compile, launch or verification failure
};

// The family's curated ranges at M (KernelFamily::curated_ranges).
std::map<std::string, std::vector<int>> default_sweep_ranges(const KernelFamily& family, int64_t m);

// Every valid config from the ranges (search::enumerate_space), at most max_configs (search::spread_evenly; 0: all).
std::vector<KernelConfig> enumerate_configs(const KernelFamily& family, const std::map<std::string, std::vector<int>>& ranges,
                                            const Problem& problem, const ArchLimits& limits, int max_configs);

// Runs the sweep; `progress` sees each row as it completes. Throws NoGpuError without a GPU.
std::vector<SweepRow> run_sweep(const SweepOptions& options, const std::function<void(const SweepRow&)>& progress = {});

}  // namespace qtune::gemm
