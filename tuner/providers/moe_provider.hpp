#pragma once
// The MoE GEMMs of the mma, wgmma and tma families (kernels/families/mma_moe.hpp, docs/moe.md) as providers, "mma-moe",
// "wgmma-moe" and "tma-moe" (both sm_90a): problems of kind Moe. A provider's space is its family's parameter space (curated at the rows
// per expert the routing gives) kept by mma_moe::check; its operands are the routing, seeded quantized activations and experts, every expert's prepacked
// weights on the device (experts nobody routes to are 0xFF: NaN scales) and the CPU reference of every output row; a
// configuration is the GEMM (and, for the token-indexed down projection, the top-k reduction) loaded from the kernel
// cache. Each configuration gets its own layout tables (they depend on bm) and output buffers, poisoned with NaN;
// a grouped layout's padding rows must stay unwritten.
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/families/mma_family.hpp"
#include "kernels/moe.hpp"
#include "kernels/moe_layout.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/providers/provider.hpp"

namespace qtune::providers {

inline constexpr const char* kMoeProviderName = "mma-moe";
inline constexpr const char* kWgmmaMoeProviderName = "wgmma-moe";
inline constexpr const char* kTmaMoeProviderName = "tma-moe";

class MoeProvider final : public Provider {
 public:
  explicit MoeProvider(const MmaFamily& family);  // the mma, wgmma or tma family
  ~MoeProvider() override;
  std::string name() const override;  // "<family>-moe"
  const MmaFamily& family() const { return family_; }

  ProviderSpace enumerate(const ProviderProblem& problem, const ArchLimits& limits, const SpaceRequest& request,
                          Operands* prepared) const override;
  std::unique_ptr<Operands> prepare(const ProviderProblem& problem, const PrepareOptions& options) override;
  std::unique_ptr<Runnable> load(Operands& operands, const std::string& configuration, const LoadOptions& options) override;

 private:
  // The curated ranges of the space at a routing's rows per expert.
  ParameterRanges curated_ranges(std::int64_t rows_per_expert) const;

  const MmaFamily& family_;
  struct Cache;
  // Shared by both providers: quantized experts (reused across token counts and families) and the JIT of the last
  // cache directory.
  std::shared_ptr<Cache> cache_;
  static std::shared_ptr<Cache> shared_cache();
};

// The mma family's MoE provider, "mma-moe", and the wgmma family's, "wgmma-moe" (never destroyed: their compiler and
// experts may be used until exit).
MoeProvider& moe_provider();
MoeProvider& wgmma_moe_provider();
MoeProvider& tma_moe_provider();  // "tma-moe" (sm_90a): quantized activations (W4A8, W8A8) and every tma format
// The MoE provider of a kernel family ("mma", "wgmma", "tma") or of a provider name ("mma-moe", ...); nullptr when
// there is none.
MoeProvider* find_moe_provider(const std::string& family_or_provider);

// A ProviderProblem of kind Moe.
ProviderProblem moe_provider_problem(const MoeProblem& problem);

// The compile requests of a configuration (the tune's compile step and the worker's load build the same ones, so the
// worker finds the parent's cubins in the kernel cache): the GEMM, and the top-k reduction, which only the
// token-indexed down projection launches (moe_reduces).
jit::CompileRequest moe_compile_request(const KernelConfig& config, const MoeProblem& problem, const std::string& arch);
jit::CompileRequest moe_reduce_compile_request(const MoeProblem& problem, const std::string& arch);
// The tma family's token-indexed row gather (mma_moe::gathers(config, problem) says when a configuration runs it).
jit::CompileRequest moe_gather_compile_request(const MoeProblem& problem, const std::string& arch);
bool moe_reduces(const MoeProblem& problem);

// The rows per touched expert the routing gives, rounded up: pairs / experts with at least one pair. The curated
// ranges of the mma family at this M are the MoE space's (a block never holds two experts).
std::int64_t rows_per_expert(const Routing& routing);

// Features of a MoE candidate for the search's cost models (search/cost_model.hpp), in one layout for every MoE
// problem so that the model learns across token buckets: search::tiling_features of the live work (M = the rows per
// touched expert; units = the row blocks holding rows x column tiles x K splits; the M tile efficiency = pairs over
// those blocks' rows), then the MoE features -- log2 of the experts touched, the largest expert's pairs over the
// mean (the routing's skew), the share of launched CTAs that find an empty block -- then log2(1 + value) of each
// parameter of the config's family, as search::cost_features lays them out.
std::vector<double> moe_cost_features(const KernelFamily& family, const KernelConfig& config, const MoeProblem& problem,
                                      const Routing& routing, const ArchLimits& limits);

// The bytes a launch of `config` must move at least once (issue 17's bandwidth targets): every touched expert's
// prepacked weights, scales, zero points and global scale, the activations the GEMM reads (token-indexed: the input
// rows once; grouped: the gathered rows) and the projection's outputs in the output type (gate-up: a row per pair;
// down: a row per token). Layout tables and the down projection's intermediate rows are not counted.
std::uint64_t moe_compulsory_bytes(const MoeProblem& problem, const Routing& routing, const KernelConfig& config);

}  // namespace qtune::providers
