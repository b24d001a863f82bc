#include "tuner/gemm/sweep.hpp"

#include <algorithm>

#include "kernels/error.hpp"
#include "kernels/families/tma_family.hpp"
#include "search/space.hpp"
#include "tuner/gemm/gemm_runner.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/runtime/device.hpp"
#include "tuner/runtime/stream.hpp"

namespace qtune::gemm {

std::map<std::string, std::vector<int>> default_sweep_ranges(const KernelFamily& family, int64_t m) {
  std::map<std::string, std::vector<int>> ranges;
  for (const ParameterDomain& domain : family.parameter_space()) ranges[domain.name] = domain.values;
  if (family.name() == "wgmma") {
    // One token tile per M (wgmma N), every column and depth tile, split-K only while M tiles are few.
    const int bm = m <= 16 ? 16 : m <= 32 ? 32 : 64;
    ranges = {{"bm", m <= 64 ? std::vector<int>{bm} : std::vector<int>{64, 128}},
              {"bn", {64, 128, 256}},
              {"bk", {64, 128, 256}},
              // With a stage in flight the loads run stages - 2 ahead: 4 and 5 won at M = 256..4096, 3 never did.
              {"stages", m <= 64 ? std::vector<int>{3, 4} : std::vector<int>{4, 5}},
              {"split", m <= 64 ? std::vector<int>{1, 2, 4} : m <= 256 ? std::vector<int>{1, 2} : std::vector<int>{1}},
              {"raster", m <= 128 ? std::vector<int>{0} : std::vector<int>{0, 2}},
              // A stage of wgmmas in flight won at M = 256 and 1024 and lost at 16 and 64 (docs/perf.md, 2026-11-30).
              {"overlap", {m <= 64 ? 0 : 1}}};
    return ranges;
  }
  if (family.name() == "tma") return TmaFamily::curated_ranges(m);
  if (family.name() != "mma") return ranges;
  if (m <= 16) {
    ranges = {{"bm", {16}}, {"bn", {64, 128, 256}}, {"bk", {128, 256, 512}}, {"wm", {1}}, {"wn", {4, 8}},
              {"wk", {1, 2}}, {"stages", {3, 4, 5}}, {"split", {1, 2, 4, 8}}, {"raster", {0}}};
  } else if (m <= 32) {
    ranges = {{"bm", {32}}, {"bn", {64, 128, 256}}, {"bk", {128, 256}}, {"wm", {1, 2}}, {"wn", {2, 4}},
              {"wk", {1, 2}}, {"stages", {3, 4}}, {"split", {1, 2, 4}}, {"raster", {0}}};
  } else if (m <= 64) {
    ranges = {{"bm", {64}}, {"bn", {64, 128, 256}}, {"bk", {64, 128, 256}}, {"wm", {1, 2, 4}}, {"wn", {2, 4}},
              {"wk", {1}}, {"stages", {3, 4}}, {"split", {1, 2, 4}}, {"raster", {0}}};
  } else if (m <= 256) {
    ranges = {{"bm", {64, 128}}, {"bn", {64, 128, 256}}, {"bk", {64, 128}}, {"wm", {2, 4}}, {"wn", {2, 4}},
              {"wk", {1}}, {"stages", {3, 4}}, {"split", {1, 2}}, {"raster", {0, 2}}};
  } else {
    ranges = {{"bm", {128, 256}}, {"bn", {128, 256}}, {"bk", {64, 128}}, {"wm", {2, 4}}, {"wn", {2, 4}},
              {"wk", {1}}, {"stages", {3, 4}}, {"split", {1}}, {"raster", {0, 2, 3}}};
  }
  return ranges;
}

std::vector<KernelConfig> enumerate_configs(const KernelFamily& family, const std::map<std::string, std::vector<int>>& ranges,
                                            const Problem& problem, const ArchLimits& limits, int max_configs) {
  const std::vector<ParameterDomain> space = family.parameter_space();
  std::vector<std::vector<int>> values;
  for (const ParameterDomain& domain : space) {
    auto found = ranges.find(domain.name);
    values.push_back(found != ranges.end() ? found->second : domain.values);
    if (values.back().empty()) QTUNE_INPUT_ERROR("ranges." + domain.name + ": no values");
  }
  std::vector<KernelConfig> valid;
  if (space.empty()) return valid;
  search::for_each_combination(values, [&](const std::vector<int>& combination) {
    KernelConfig config;
    config.family = family.name();
    for (size_t i = 0; i < space.size(); ++i) config.params[space[i].name] = combination[i];
    if (family.check(config, problem, limits).valid) valid.push_back(std::move(config));
  });
  if (max_configs > 0 && static_cast<int>(valid.size()) > max_configs) {
    std::vector<KernelConfig> spread;
    for (int i = 0; i < max_configs; ++i) spread.push_back(valid[valid.size() * static_cast<size_t>(i) / static_cast<size_t>(max_configs)]);
    valid = std::move(spread);
  }
  return valid;
}

std::vector<SweepRow> run_sweep(const SweepOptions& options, const std::function<void(const SweepRow&)>& progress) {
  if (options.m_values.empty()) QTUNE_INPUT_ERROR("m: no values");
  const KernelFamily& family = find_family(options.family);
  runtime::Device::get(options.device);
  const ArchLimits limits = device_limits(options.device);
  const std::string arch = nvrtc_arch(limits.sm);
  const ArchSupport support = family.supports(options.format, limits.sm);
  if (!support.supported) QTUNE_THROW(UnsupportedError, support.reason);

  Problem base{options.format, options.m_values.front(), options.n, options.k, options.bias};
  const GemmData weights_data = make_gemm_data(base, options.seed);
  const jit::Compiler compiler;
  std::vector<SweepRow> rows;
  for (int64_t m : options.m_values) {
    Problem problem = base;
    problem.m = m;
    std::vector<KernelConfig> configs;
    if (options.configs.empty()) {
      std::map<std::string, std::vector<int>> ranges = default_sweep_ranges(family, m);
      for (const auto& [name, values] : options.ranges) ranges[name] = values;
      configs = enumerate_configs(family, ranges, problem, limits, options.max_configs);
    } else {
      configs = options.configs;
    }
    const KernelConfig default_config = family.default_config(problem, limits);
    if (options.include_default && std::find(configs.begin(), configs.end(), default_config) == configs.end()) {
      configs.insert(configs.begin(), default_config);
    }
    if (configs.empty()) QTUNE_INPUT_ERROR("ranges: no valid configuration for " + problem.to_string());

    std::vector<SweepRow> m_rows;
    std::vector<jit::CompileRequest> requests;
    for (const KernelConfig& config : configs) {
      SweepRow row;
      row.m = m;
      row.config = config;
      row.is_default = config == default_config;
      const RuleVerdict verdict = family.check(config, problem, limits);
      if (!verdict.valid) row.error = "invalid: " + verdict.rule + ": " + verdict.detail;
      jit::CompileRequest request;
      if (verdict.valid) {
        request.source = family.instantiation_source(config, problem.format, arch);
        request.kernel_name = family.kernel_name(config, problem.format);
        request.arch = arch;
        requests.push_back(request);
      }
      m_rows.push_back(row);
    }
    const std::vector<jit::CompileOutcome> compiled = compiler.compile_all(requests);

    const GemmData data = with_new_activations(weights_data, m, options.seed + static_cast<uint64_t>(m));
    ReferenceResult reference;
    if (options.verify) reference = reference_for(data);
    GemmDeviceData device_data(family, configs.front(), data);
    runtime::Stream stream;
    size_t next_compiled = 0;
    for (SweepRow& row : m_rows) {
      if (!row.error.empty()) {
        if (progress) progress(row);
        continue;
      }
      const jit::CompileOutcome& outcome = compiled[next_compiled++];
      try {
        if (!outcome.ok()) QTUNE_THROW(Error, "compile failed: " + outcome.error_message.substr(0, 2000));
        row.registers = outcome.kernel->resources.registers;
        row.spill_bytes = outcome.kernel->resources.spill_store_bytes;
        row.shared_bytes = family.launch_geometry(row.config, problem).dynamic_shared_bytes;
        LoadedKernel kernel(family, row.config, problem.format, *outcome.kernel);
        device_data.prepare(row.config);
        device_data.poison_output();
        device_data.launch(kernel, stream.get());
        stream.synchronize();
        if (options.verify) {
          const Verification verification =
              verify_output(device_data.output_bits(), problem.format.output, reference, default_tolerance(problem.format));
          row.verified = verification.passed;
          row.verification = verification.summary();
        } else {
          row.verification = "not verified";
        }
        if (row.verified || !options.verify) {
          row.measurement = measure::measure([&](CUstream s) { device_data.launch(kernel, s); }, options.measure);
          row.measured = true;
          const double seconds = row.measurement.median_us * 1e-6;
          row.gbps = static_cast<double>(device_data.compulsory_bytes()) / seconds / 1e9;
          row.tflops = 2.0 * static_cast<double>(m) * static_cast<double>(options.n) * static_cast<double>(options.k) / seconds / 1e12;
        } else {
          row.error = "verification failed: " + row.verification;
        }
      } catch (const NoGpuError&) {
        throw;
      } catch (const std::exception& error) {
        row.error = error.what();
      }
      if (progress) progress(row);
    }
    rows.insert(rows.end(), m_rows.begin(), m_rows.end());
  }
  return rows;
}

}  // namespace qtune::gemm
