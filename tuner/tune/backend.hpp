#pragma once
// What the tuner needs from the outside world, as interfaces, so that the orchestration (tuner.hpp) runs the same
// against the GPU (NVRTC + the measuring worker process) and against test doubles on a machine without one:
//   InstantiationCompiler  builds kernel instantiations and reports their resources;
//   MeasuringBackend       verifies one candidate against the CPU reference and measures it.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/family.hpp"
#include "search/space.hpp"
#include "search/strategy.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/measure/measure.hpp"
#include "tuner/providers/pipeline.hpp"

namespace qtune::tune {

// One distinct instantiation: kernels do not depend on M, N or K, so (config, format, arch) is compiled once.
struct Instantiation {
  KernelConfig config;
  FormatSpec format;
  std::string arch;  // "sm_90a"
  std::string key() const;  // "mma:bm=16,...|w4a16-int4-ch|sm_90a"
};

struct InstantiationResult {
  bool ok = false;
  std::string cache_key;
  bool cache_hit = false;
  double compile_seconds = 0;  // of this build, 0 for a cache hit
  search::CompiledResources resources;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  std::string message;  // the compiler's error (NVRTC log) when not ok
};

class InstantiationCompiler {
 public:
  virtual ~InstantiationCompiler() = default;
  // Results in request order; one failure does not stop the others. `progress(done, total)` may be called from
  // other threads, never two calls at once.
  virtual std::vector<InstantiationResult> compile(const KernelFamily& family, const std::vector<Instantiation>& requests,
                                                   const std::function<void(size_t, size_t)>& progress) = 0;
};

// NVRTC through tuner/jit with its on-disk cache (the worker loads the cubins from that cache). Requests are built
// in chunks so that only a chunk's cubins are held in memory at once.
class NvrtcInstantiationCompiler final : public InstantiationCompiler {
 public:
  explicit NvrtcInstantiationCompiler(jit::CompilerSettings settings = {});
  std::vector<InstantiationResult> compile(const KernelFamily& family, const std::vector<Instantiation>& requests,
                                           const std::function<void(size_t, size_t)>& progress) override;
  const jit::CompilerSettings& settings() const;

 private:
  jit::Compiler compiler_;
};

// The compile request of an instantiation (the worker builds the same one and finds it in the cache).
jit::CompileRequest compile_request(const KernelFamily& family, const Instantiation& instantiation);

// How one candidate is measured.
struct MeasureSettings {
  measure::MeasureOptions full_fidelity;   // the measurements winners are chosen from
  measure::MeasureOptions short_fidelity;  // successive halving's early rounds
  // Up to this M every output row is checked against the CPU reference; above it `verify_rows` random rows
  // (the first and the last among them) are, and every element is checked to have been written.
  std::int64_t full_verify_max_m = 256;
  std::int64_t verify_rows = 64;
  bool verify = true;      // false: measured without the check (kernel-sweep --no-verify)
  std::uint64_t seed = 1;  // problem data seed
};
MeasureSettings default_measure_settings();

struct CandidateRequest {
  const KernelFamily* family = nullptr;
  Problem problem;
  KernelConfig config;
  std::string arch;
  std::string cache_key;  // of the compiled instantiation
  search::Fidelity fidelity = search::Fidelity::Full;
  double timeout_s = 30;
};

// What became of a candidate: the providers' one result type (tuner/providers/pipeline.hpp).
using providers::CandidateOutcome;
using providers::CandidateResult;
using providers::to_string;

class MeasuringBackend {
 public:
  virtual ~MeasuringBackend() = default;
  virtual CandidateResult evaluate(const CandidateRequest& request) = 0;
};

// One backend per measuring slot (one GPU each); slot is 0-based.
using BackendFactory = std::function<std::unique_ptr<MeasuringBackend>(int slot)>;

}  // namespace qtune::tune
