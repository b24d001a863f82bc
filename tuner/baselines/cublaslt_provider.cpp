#include "tuner/baselines/cublaslt_provider.hpp"

#include <map>
#include <mutex>

#include "kernels/error.hpp"

namespace qtune::baselines {

providers::Check CublasLtRunnable::verify() {
  last_ = baseline_.check_output();
  return {last_.passed, last_.rel_error, last_.tolerance, last_.rows_checked, last_.unwritten, last_.message};
}

namespace {

class CublasLtOperands final : public providers::Operands {
 public:
  CublasLtOperands(providers::ProviderProblem problem, std::unique_ptr<CublasLtBaseline> baseline)
      : problem_(std::move(problem)), baseline_(std::move(baseline)) {}
  const providers::ProviderProblem& problem() const override { return problem_; }
  CublasLtBaseline& baseline() { return *baseline_; }

 private:
  providers::ProviderProblem problem_;
  std::unique_ptr<CublasLtBaseline> baseline_;
};

CublasLtOperands& cublaslt_operands(providers::Operands* operands) {
  auto* result = dynamic_cast<CublasLtOperands*>(operands);
  if (result == nullptr) QTUNE_THROW(Error, "cuBLASLt: operands of another provider");
  return *result;
}

}  // namespace

CublasLtProvider::CublasLtProvider(BaselineKind kind, BaselineOptions options) : kind_(kind), options_(std::move(options)) {}

providers::ProviderSpace CublasLtProvider::enumerate(const providers::ProviderProblem& /*problem*/, const ArchLimits& /*limits*/,
                                                     const providers::SpaceRequest& request,
                                                     providers::Operands* prepared) const {
  providers::ProviderSpace space;
  if (prepared == nullptr) return space;
  CublasLtBaseline& baseline = cublaslt_operands(prepared).baseline();
  space.total = baseline.algorithms().size();
  for (const AlgoInfo& algorithm : baseline.algorithms()) {
    if (request.max_configs > 0 && space.configurations.size() >= request.max_configs) break;
    space.configurations.push_back(algorithm.to_json());
  }
  return space;
}

std::unique_ptr<providers::Operands> CublasLtProvider::prepare(const providers::ProviderProblem& problem,
                                                               const providers::PrepareOptions& options) {
  if (problem.kind != providers::ProblemKind::DenseGemm) QTUNE_THROW(UnsupportedError, name() + " runs dense GEMMs only");
  BaselineOptions baseline_options = options_;
  baseline_options.device = options.device;
  auto baseline = std::make_unique<CublasLtBaseline>(kind_, baseline_options);
  if (!baseline->prepare({problem.gemm.m, problem.gemm.n, problem.gemm.k}, options.seed)) {
    QTUNE_THROW(UnsupportedError, name() + ": " + baseline->unsupported_reason());
  }
  return std::make_unique<CublasLtOperands>(problem, std::move(baseline));
}

std::unique_ptr<providers::Runnable> CublasLtProvider::load(providers::Operands& operands, const std::string& configuration,
                                                            const providers::LoadOptions& /*options*/) {
  CublasLtBaseline& baseline = cublaslt_operands(&operands).baseline();
  const AlgoInfo wanted = algo_info_from_json(configuration);
  const std::optional<size_t> position = find_algorithm(baseline.algorithms(), wanted);
  if (!position) QTUNE_THROW(Error, name() + ": cuBLASLt does not list " + wanted.describe() + " for this problem");
  baseline.select_algorithm(baseline.algorithms()[*position].heuristic_index);
  return std::make_unique<CublasLtRunnable>(baseline);
}

CublasLtProvider& cublaslt_provider(const std::string& id) {
  static auto* providers = new std::map<BaselineKind, std::unique_ptr<CublasLtProvider>>;  // never destroyed
  static std::mutex mutex;
  const BaselineKind kind = parse_baseline_id(id, "provider");
  std::lock_guard lock(mutex);
  std::unique_ptr<CublasLtProvider>& provider = (*providers)[kind];
  if (!provider) provider = std::make_unique<CublasLtProvider>(kind);
  return *provider;
}

providers::CandidateResult candidate_result(const VariantResult& variant) {
  providers::CandidateResult result;
  result.verified = true;
  result.max_rel_error = variant.verify.rel_error;
  result.tolerance = variant.verify.tolerance;
  result.rows_checked = variant.verify.rows_checked;
  result.verification_summary = variant.verify.message;
  if (!variant.verify.passed) {
    result.outcome = providers::CandidateOutcome::VerificationFailed;
    result.message = variant.verify.message;
  } else if (variant.measurement) {
    result.outcome = providers::CandidateOutcome::Measured;
    result.measurement = *variant.measurement;
  } else {
    result.outcome = providers::CandidateOutcome::Error;
    result.message = variant.error;
  }
  return result;
}

}  // namespace qtune::baselines
