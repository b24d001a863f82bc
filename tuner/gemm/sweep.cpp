#include "tuner/gemm/sweep.hpp"

#include <algorithm>

#include "kernels/error.hpp"
#include "search/space.hpp"
#include "tuner/gemm/gemm_runner.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/runtime/device.hpp"
#include "tuner/runtime/stream.hpp"

namespace qtune::gemm {

std::map<std::string, std::vector<int>> default_sweep_ranges(const KernelFamily& family, int64_t m) {
  return family.curated_ranges(m);
}

std::vector<KernelConfig> enumerate_configs(const KernelFamily& family, const std::map<std::string, std::vector<int>>& ranges,
                                            const Problem& problem, const ArchLimits& limits, int max_configs) {
  return search::spread_evenly(search::enumerate_space(family, problem, limits, ranges).candidates,
                               static_cast<std::size_t>(std::max(max_configs, 0)));
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
