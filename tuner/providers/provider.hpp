#pragma once
// Providers: every source of kernels for a problem seen through one interface, as the CUTLASS profiler treats
// cuBLAS as one more provider. qtune's kernel families (family_provider.hpp) and cuBLASLt
// (tuner/baselines/cublaslt_provider.hpp) are providers; the Python-hosted peers (tuner/peers/peer_host.hpp, issue
// 15) and MoE kernels (issue 17) plug in by writing one provider each. Every provider is measured by the same
// sequence (pipeline.hpp): prepare operands once -> load a configuration -> poison -> launch -> verify -> measure.
#include <cuda.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/family.hpp"
#include "kernels/moe.hpp"

namespace qtune::providers {

// The kinds of problem a provider may solve; a provider refuses a kind it does not run (UnsupportedError).
enum class ProblemKind {
  DenseGemm,
  Moe,  // a mixture-of-experts GEMM (kernels/moe.hpp): experts, top-k, tokens, routing, layout, projection
};

struct ProviderProblem {
  ProblemKind kind = ProblemKind::DenseGemm;
  Problem gemm;    // kind DenseGemm: format, M, N, K, bias
  MoeProblem moe;  // kind Moe
};

// A provider's configurations for one problem (its space), with what its rules removed, counted per rule as
// search::enumerate_space counts them.
struct ProviderSpace {
  std::vector<std::string> configurations;  // what Provider::load takes, in search order
  std::size_t total = 0;                    // points in the space before the rules
  std::map<std::string, std::size_t> removed_by_rule;
};

// What narrows a space: the values a parameter may take (replacing the provider's own), and a cap.
struct SpaceRequest {
  std::map<std::string, std::vector<int>> parameter_values;
  bool curated = true;         // the provider's curated values at this M (false: its whole space)
  std::size_t max_configs = 0;  // spread evenly over the space (search::spread_evenly); 0: all
};

// How operands are made: random data (never zeros) from `seed`, and which output rows are compared with the CPU
// reference (all up to full_verify_max_m, else verify_rows random ones, the first and the last among them).
struct PrepareOptions {
  std::uint64_t seed = 1;
  std::int64_t full_verify_max_m = 256;
  std::int64_t verify_rows = 64;
  int device = 0;
  std::string any_configuration;  // a configuration of the space: some providers size their buffers from one
};

// Where a configuration's code comes from: the NVRTC target, the kernel cache the compile step filled, and the
// cache key the parent compiled (the load fails when it builds another: different kernel sources or NVRTC).
struct LoadOptions {
  std::string arch;
  std::optional<std::filesystem::path> cache_directory;
  std::string expected_cache_key;
};

// Operands prepared for one problem: host data quantized and packed once, uploaded, with the CPU reference of the
// checked rows; reused by every configuration of the problem.
class Operands {
 public:
  virtual ~Operands() = default;
  virtual const ProviderProblem& problem() const = 0;
};

// One output compared with the CPU reference.
struct Check {
  bool passed = false;
  double relative_error = 0;  // infinite when the output holds NaN/inf
  double tolerance = 0;
  std::int64_t rows_checked = 0;
  std::int64_t unwritten = 0;  // outputs still holding the poison, or not finite
  std::string summary;         // one line: what was compared and how it went
};

// One configuration loaded on prepared operands.
class Runnable {
 public:
  virtual ~Runnable() = default;
  // Fills the output with a pattern no result has (NaN for 16-bit floats), so an element never written is caught.
  virtual void poison_output() = 0;
  // Enqueues one run on `stream`; never synchronises.
  virtual void launch(CUstream stream) = 0;
  // Waits for the launch, downloads the output and compares it with the CPU reference.
  virtual Check verify() = 0;
};

class Provider {
 public:
  virtual ~Provider() = default;
  virtual std::string name() const = 0;
  // The configurations worth running for `problem` on a GPU of `limits`. A provider whose space is known only on the
  // GPU (cuBLASLt lists its algorithms for prepared descriptors) reads it from `prepared`, which is null elsewhere.
  virtual ProviderSpace enumerate(const ProviderProblem& problem, const ArchLimits& limits, const SpaceRequest& request,
                                  Operands* prepared) const = 0;
  // Makes and uploads the problem's operands on the current device (GPU). Throws NoGpuError without one.
  virtual std::unique_ptr<Operands> prepare(const ProviderProblem& problem, const PrepareOptions& options) = 0;
  // Loads `configuration` (compiling it through the kernel cache where the provider compiles) on `operands`.
  virtual std::unique_ptr<Runnable> load(Operands& operands, const std::string& configuration,
                                         const LoadOptions& options) = 0;
};

}  // namespace qtune::providers
