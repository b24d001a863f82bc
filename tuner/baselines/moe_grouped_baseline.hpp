#pragma once
// The MoE baseline (issue 17): CUDA 13's cuBLAS grouped GEMM (cublasGemmGroupedBatchedEx, f16 in and out, f32
// accumulation) over the experts a routing touches, as a provider of MoE problems named "cublas-grouped-f16". Each
// touched expert is one group of one GEMM: its pairs' activation rows, gathered contiguous (f16, dequantized from the
// format's activations), times its weights dequantized to f16, one output row per pair. The down projection's top-k
// reduction is not part of it (the GEMMs only). Verified against the CPU reference of every pair row, as the MoE
// provider is; the pointer arrays and the gathered rows are made once at prepare, so a launch is one cuBLAS call.
#include <memory>
#include <string>

#include "tuner/providers/provider.hpp"

namespace qtune::baselines {

inline constexpr const char* kMoeGroupedBaselineName = "cublas-grouped-f16";

class MoeGroupedBaselineProvider final : public providers::Provider {
 public:
  std::string name() const override { return kMoeGroupedBaselineName; }
  // One configuration, "default": cuBLAS chooses its own kernels.
  providers::ProviderSpace enumerate(const providers::ProviderProblem& problem, const ArchLimits& limits,
                                     const providers::SpaceRequest& request, providers::Operands* prepared) const override;
  std::unique_ptr<providers::Operands> prepare(const providers::ProviderProblem& problem,
                                               const providers::PrepareOptions& options) override;
  std::unique_ptr<providers::Runnable> load(providers::Operands& operands, const std::string& configuration,
                                            const providers::LoadOptions& options) override;
};

MoeGroupedBaselineProvider& moe_grouped_baseline_provider();

}  // namespace qtune::baselines
