#pragma once
// A qtune kernel family (kernels/family.hpp: mma, wgmma, tma) as a provider: its space is search::enumerate_space
// over the family's curated ranges at M (or its whole space), its operands the family's prepacked buffers of random
// quantized data with the CPU reference of the checked rows, and a configuration is loaded from the kernel cache
// (tuner/jit) the parent's compile step filled.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/quantize.hpp"
#include "tuner/gemm/gemm_runner.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/providers/provider.hpp"

namespace qtune::providers {

class FamilyProvider final : public Provider {
 public:
  explicit FamilyProvider(const KernelFamily& family);
  ~FamilyProvider() override;
  std::string name() const override { return family_->name(); }
  const KernelFamily& family() const { return *family_; }

  ProviderSpace enumerate(const ProviderProblem& problem, const ArchLimits& limits, const SpaceRequest& request,
                          Operands* prepared) const override;
  std::unique_ptr<Operands> prepare(const ProviderProblem& problem, const PrepareOptions& options) override;
  std::unique_ptr<Runnable> load(Operands& operands, const std::string& configuration, const LoadOptions& options) override;

  // enumerate() as KernelConfigs: the candidates of the ranges (the curated ones at M unless request.curated is
  // false, each replaced where request.parameter_values names it), spread evenly to request.max_configs.
  std::vector<KernelConfig> candidates(const Problem& problem, const ArchLimits& limits, const SpaceRequest& request) const;

 private:
  struct Cache;
  const KernelFamily* family_;
  std::unique_ptr<Cache> cache_;  // the last weights (reused across M) and the JIT of the last cache directory
};

// The compile request of a configuration: the parent's compile step and the worker's load build the same one, so
// the worker finds the parent's cubin in the kernel cache.
jit::CompileRequest compile_request(const KernelFamily& family, const KernelConfig& config, const FormatSpec& format,
                                    const std::string& arch);

// The family providers, one per kernel family, in kernel_families() order.
FamilyProvider& family_provider(const std::string& family);

// ---- pieces of the family check, exposed for tests ----

// The rows verified for an M-row output: all of them up to full_verify_max_m, else `count` distinct rows chosen
// at random (seeded), always including the first and the last, ascending.
std::vector<std::int64_t> rows_to_verify(std::int64_t m, std::int64_t full_verify_max_m, std::int64_t count, std::uint64_t seed);
// Output elements that are NaN or infinite (the poison left where the kernel wrote nothing shows up here).
std::int64_t count_non_finite(const std::vector<std::uint16_t>& output_bits, OutputType output);

}  // namespace qtune::providers
