#pragma once
// cuBLASLt as a provider (tuner/providers/provider.hpp): a baseline kind ("cublaslt-f16", ...) is the provider, its
// heuristic's algorithms are its configurations (AlgoInfo JSON), and an algorithm runs through the same check and
// measurement as a family's kernel (providers/pipeline.hpp). `qtune bench` screens and decides among them inside its
// bench-baseline job (baseline_bench.hpp) with CublasLtRunnable.
#include <memory>
#include <string>

#include "tuner/baselines/baseline_bench.hpp"
#include "tuner/baselines/cublaslt_baseline.hpp"
#include "tuner/providers/pipeline.hpp"
#include "tuner/providers/provider.hpp"

namespace qtune::baselines {

// The selected algorithm of a prepared baseline as a runnable; verify() keeps the baseline's own verdict
// (exact int32 mismatches included) in last_verification().
class CublasLtRunnable final : public providers::Runnable {
 public:
  explicit CublasLtRunnable(CublasLtBaseline& baseline) : baseline_(baseline) {}
  void poison_output() override { baseline_.poison_output(); }
  void launch(CUstream stream) override { baseline_.launch(stream); }
  providers::Check verify() override;
  const VerifyResult& last_verification() const { return last_; }

 private:
  CublasLtBaseline& baseline_;
  VerifyResult last_;
};

class CublasLtProvider final : public providers::Provider {
 public:
  CublasLtProvider(BaselineKind kind, BaselineOptions options = {});
  std::string name() const override { return baseline_id(kind_); }
  // The algorithms cuBLASLt lists for the prepared operands (none without them: the list needs the GPU).
  providers::ProviderSpace enumerate(const providers::ProviderProblem& problem, const ArchLimits& limits,
                                     const providers::SpaceRequest& request, providers::Operands* prepared) const override;
  std::unique_ptr<providers::Operands> prepare(const providers::ProviderProblem& problem,
                                               const providers::PrepareOptions& options) override;
  // `configuration`: an AlgoInfo JSON, found again in the list by its identifying fields.
  std::unique_ptr<providers::Runnable> load(providers::Operands& operands, const std::string& configuration,
                                            const providers::LoadOptions& options) override;

 private:
  BaselineKind kind_;
  BaselineOptions options_;
};

// The provider of a baseline id ("cublaslt-f16", ...); InputError naming "provider" for another name.
CublasLtProvider& cublaslt_provider(const std::string& id);

// A bench variant as the pipeline's one result type, for the one mapping into the database (tune/records.hpp):
// measured; verification failed; or verified with its measurement failed (an error with verified set).
providers::CandidateResult candidate_result(const VariantResult& variant);

}  // namespace qtune::baselines
