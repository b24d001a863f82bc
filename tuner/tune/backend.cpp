#include "tuner/tune/backend.hpp"

#include <algorithm>

#include "kernels/error.hpp"
#include "tuner/providers/family_provider.hpp"
#include "tuner/tune/records.hpp"
#include "tuner/jit/thread_pool.hpp"

namespace qtune::tune {

std::string Instantiation::key() const {
  return config.family + ":" + config.to_string() + "|" + format.to_string() + "|" + arch;
}

jit::CompileRequest compile_request(const KernelFamily& family, const Instantiation& instantiation) {
  return providers::compile_request(family, instantiation.config, instantiation.format, instantiation.arch);
}

NvrtcInstantiationCompiler::NvrtcInstantiationCompiler(jit::CompilerSettings settings) : compiler_(std::move(settings)) {
  if (!compiler_.settings().use_cache) {
    QTUNE_INPUT_ERROR("cache: the tuner needs the kernel cache (the measuring worker loads cubins from it)");
  }
}

const jit::CompilerSettings& NvrtcInstantiationCompiler::settings() const { return compiler_.settings(); }

std::vector<InstantiationResult> NvrtcInstantiationCompiler::compile(const KernelFamily& family,
                                                                     const std::vector<Instantiation>& requests,
                                                                     const std::function<void(size_t, size_t)>& progress) {
  std::vector<InstantiationResult> results(requests.size());
  // Requests whose source cannot even be generated fail here; the rest go to NVRTC.
  std::vector<jit::CompileRequest> compile_requests;
  std::vector<size_t> request_index;
  for (size_t i = 0; i < requests.size(); ++i) {
    try {
      compile_requests.push_back(compile_request(family, requests[i]));
      request_index.push_back(i);
    } catch (const Error& error) {
      results[i].message = error.what();
    }
  }
  const size_t total = requests.size();
  size_t done = total - compile_requests.size();
  if (progress && done > 0) progress(done, total);
  // Chunks keep only a chunk's cubins in memory (the worker reads them back from the cache).
  const size_t threads = compiler_.settings().threads == 0 ? jit::default_thread_count() : compiler_.settings().threads;
  const size_t chunk = std::max<size_t>(32, 8 * threads);
  for (size_t begin = 0; begin < compile_requests.size(); begin += chunk) {
    const size_t end = std::min(compile_requests.size(), begin + chunk);
    const std::vector<jit::CompileRequest> part(compile_requests.begin() + static_cast<std::ptrdiff_t>(begin),
                                                compile_requests.begin() + static_cast<std::ptrdiff_t>(end));
    const size_t done_before = done;
    const std::vector<jit::CompileOutcome> outcomes = compiler_.compile_all(part, [&](size_t part_done, size_t) {
      if (progress) progress(done_before + part_done, total);
    });
    for (size_t j = 0; j < outcomes.size(); ++j) {
      InstantiationResult& result = results[request_index[begin + j]];
      const jit::CompileOutcome& outcome = outcomes[j];
      if (!outcome.ok()) {
        result.message = outcome.error_message;
        continue;
      }
      result = instantiation_result(*outcome.kernel);
    }
    done = done_before + outcomes.size();
  }
  return results;
}

MeasureSettings default_measure_settings() {
  MeasureSettings settings;
  settings.full_fidelity.time_budget_s = 1.0;
  settings.full_fidelity.max_warmup_s = 0.2;
  settings.short_fidelity.time_budget_s = 0.1;
  settings.short_fidelity.max_warmup_s = 0.05;
  settings.short_fidelity.min_warmup_s = 0.01;
  settings.short_fidelity.min_repetitions = 5;
  settings.short_fidelity.target_relative_ci = 0.05;
  settings.short_fidelity.clock_dip_fraction = 0;  // screening ranks; a retried dip would only cost time
  return settings;
}

}  // namespace qtune::tune
