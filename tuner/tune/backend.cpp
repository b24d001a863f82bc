#include "tuner/tune/backend.hpp"

#include <algorithm>

#include "kernels/error.hpp"
#include "tuner/jit/thread_pool.hpp"

namespace qtune::tune {

std::string Instantiation::key() const {
  return config.family + ":" + config.to_string() + "|" + format.to_string() + "|" + arch;
}

jit::CompileRequest compile_request(const KernelFamily& family, const Instantiation& instantiation) {
  jit::CompileRequest request;
  request.source = family.instantiation_source(instantiation.config, instantiation.format, instantiation.arch);
  request.kernel_name = family.kernel_name(instantiation.config, instantiation.format);
  request.arch = instantiation.arch;
  return request;
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
      const jit::CompiledKernel& kernel = *outcome.kernel;
      result.ok = true;
      result.cache_key = kernel.cache_key;
      result.cache_hit = kernel.from_cache;
      result.compile_seconds = kernel.compile_seconds;
      result.spill_store_bytes = kernel.resources.spill_store_bytes;
      result.spill_load_bytes = kernel.resources.spill_load_bytes;
      result.resources.registers = kernel.resources.registers;
      result.resources.spill_bytes = kernel.resources.spill_store_bytes + kernel.resources.spill_load_bytes;
      result.resources.static_shared_bytes = kernel.resources.static_shared_bytes;
      result.resources.stack_frame_bytes = kernel.resources.stack_frame_bytes;
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

std::string to_string(CandidateOutcome outcome) {
  switch (outcome) {
    case CandidateOutcome::Measured: return "measured";
    case CandidateOutcome::VerificationFailed: return "verification-failed";
    case CandidateOutcome::Error: return "error";
    case CandidateOutcome::Crashed: return "crashed";
    case CandidateOutcome::Timeout: return "timeout";
  }
  return "unknown";
}

}  // namespace qtune::tune
