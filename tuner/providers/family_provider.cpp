#include "tuner/providers/family_provider.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "kernels/error.hpp"
#include "kernels/reference.hpp"
#include "search/space.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/runtime/device.hpp"
#include "tuner/providers/load_compiler.hpp"

namespace qtune::providers {

std::vector<std::int64_t> rows_to_verify(std::int64_t m, std::int64_t full_verify_max_m, std::int64_t count, std::uint64_t seed) {
  std::vector<std::int64_t> rows;
  if (m <= 0) return rows;
  if (m <= full_verify_max_m || count >= m) {
    for (std::int64_t row = 0; row < m; ++row) rows.push_back(row);
    return rows;
  }
  std::set<std::int64_t> chosen{0, m - 1};
  RandomGenerator random(seed ^ 0x5eed'0f'7a'b1e5ULL);
  const auto wanted = static_cast<size_t>(std::max<std::int64_t>(count, 2));
  while (chosen.size() < wanted) chosen.insert(static_cast<std::int64_t>(random.next() % static_cast<std::uint64_t>(m)));
  return {chosen.begin(), chosen.end()};
}

std::int64_t count_non_finite(const std::vector<std::uint16_t>& output_bits, OutputType output) {
  // All-ones exponent: inf or NaN (f16: 5 exponent bits, bf16: 8).
  const std::uint16_t exponent = output == OutputType::F16 ? 0x7C00 : 0x7F80;
  std::int64_t count = 0;
  for (std::uint16_t bits : output_bits) count += (bits & exponent) == exponent ? 1 : 0;
  return count;
}

jit::CompileRequest compile_request(const KernelFamily& family, const KernelConfig& config, const FormatSpec& format,
                                   const std::string& arch) {
  jit::CompileRequest request;
  request.source = family.instantiation_source(config, format, arch);
  request.kernel_name = family.kernel_name(config, format);
  request.arch = arch;
  return request;
}

namespace {

const Problem& dense(const ProviderProblem& problem) {
  if (problem.kind != ProblemKind::DenseGemm) QTUNE_THROW(UnsupportedError, "kernel families run dense GEMMs only");
  return problem.gemm;
}

class FamilyOperands final : public Operands {
 public:
  FamilyOperands(ProviderProblem problem, gemm::GemmData data, std::vector<std::int64_t> rows, ReferenceResult reference,
                 const KernelFamily& family, const KernelConfig& any_config)
      : problem_(std::move(problem)),
        data_(std::move(data)),
        rows_(std::move(rows)),
        reference_(std::move(reference)),
        device_data_(family, any_config, data_) {}
  const ProviderProblem& problem() const override { return problem_; }
  const std::vector<std::int64_t>& rows() const { return rows_; }
  const ReferenceResult& reference() const { return reference_; }
  gemm::GemmDeviceData& device_data() { return device_data_; }

 private:
  ProviderProblem problem_;
  gemm::GemmData data_;
  std::vector<std::int64_t> rows_;
  ReferenceResult reference_;  // of rows_ only
  gemm::GemmDeviceData device_data_;
};

class FamilyRunnable final : public Runnable {
 public:
  FamilyRunnable(FamilyOperands& operands, gemm::LoadedKernel kernel) : operands_(operands), kernel_(std::move(kernel)) {
    operands_.device_data().prepare(kernel_.config());
  }
  void poison_output() override { operands_.device_data().poison_output(); }
  void launch(CUstream stream) override { operands_.device_data().launch(kernel_, stream); }

  Check verify() override {
    const Problem& problem = operands_.problem().gemm;
    const std::vector<std::uint16_t> output = operands_.device_data().output_bits();
    const OutputType output_type = problem.format.output;
    const std::int64_t unwritten = count_non_finite(output, output_type);
    const std::vector<std::int64_t>& rows = operands_.rows();
    std::vector<std::uint16_t> checked;
    const auto n = static_cast<size_t>(problem.n);
    checked.reserve(rows.size() * n);
    for (std::int64_t row : rows) {
      const auto first = output.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(row) * n);
      checked.insert(checked.end(), first, first + static_cast<std::ptrdiff_t>(n));
    }
    const gemm::Verification verification =
        gemm::verify_output(checked, output_type, operands_.reference(), default_tolerance(problem.format));
    Check check;
    check.passed = verification.passed && unwritten == 0;
    check.relative_error = verification.relative_error;
    check.tolerance = verification.tolerance;
    check.rows_checked = static_cast<std::int64_t>(rows.size());
    check.unwritten = unwritten;
    check.summary = verification.summary();
    if (unwritten > 0) {
      check.summary += "; " + std::to_string(unwritten) + " of " + std::to_string(output.size()) + " outputs NaN/inf or never written";
    }
    check.summary += " [" + std::to_string(rows.size()) + " of " + std::to_string(problem.m) + " rows checked]";
    return check;
  }

 private:
  FamilyOperands& operands_;
  gemm::LoadedKernel kernel_;
};

}  // namespace

struct FamilyProvider::Cache {
  std::mutex mutex;
  std::string weights_key;  // family|format|NxK|bias|seed
  gemm::GemmData weights_data;
  LoadCompiler compiler;
};

FamilyProvider::FamilyProvider(const KernelFamily& family) : family_(&family), cache_(std::make_unique<Cache>()) {}
FamilyProvider::~FamilyProvider() = default;

std::vector<KernelConfig> FamilyProvider::candidates(const Problem& problem, const ArchLimits& limits,
                                                     const SpaceRequest& request) const {
  std::map<std::string, std::vector<int>> ranges;
  if (request.curated) ranges = family_->curated_ranges(problem.m);
  for (const auto& [name, values] : request.parameter_values) ranges[name] = values;
  return search::spread_evenly(search::enumerate_space(*family_, problem, limits, ranges).candidates, request.max_configs);
}

ProviderSpace FamilyProvider::enumerate(const ProviderProblem& problem, const ArchLimits& limits,
                                        const SpaceRequest& request, Operands* /*prepared*/) const {
  std::map<std::string, std::vector<int>> ranges;
  if (request.curated) ranges = family_->curated_ranges(dense(problem).m);
  for (const auto& [name, values] : request.parameter_values) ranges[name] = values;
  const search::SpaceEnumeration space = search::enumerate_space(*family_, dense(problem), limits, ranges);
  ProviderSpace result;
  result.total = space.total;
  result.removed_by_rule = space.removed_by_rule;
  for (const KernelConfig& config : search::spread_evenly(space.candidates, request.max_configs)) {
    result.configurations.push_back(config.to_string());
  }
  return result;
}

std::unique_ptr<Operands> FamilyProvider::prepare(const ProviderProblem& provider_problem, const PrepareOptions& options) {
  const Problem& problem = dense(provider_problem);
  runtime::Device::get(options.device);
  std::lock_guard lock(cache_->mutex);
  // The weights do not depend on M: one draw serves every M of a shape (they dominate the set-up of large shapes).
  const std::string weights_key = family_->name() + "|" + problem.format.to_string() + "|" + std::to_string(problem.n) + "x" +
                                  std::to_string(problem.k) + "|" + (problem.has_bias ? "bias" : "") + "|" +
                                  std::to_string(options.seed);
  if (cache_->weights_key != weights_key) {
    cache_->weights_key.clear();
    cache_->weights_data =
        gemm::make_gemm_data(Problem{problem.format, 1, problem.n, problem.k, problem.has_bias}, options.seed);
    cache_->weights_key = weights_key;
  }
  const std::uint64_t m_seed = options.seed + static_cast<std::uint64_t>(problem.m);
  gemm::GemmData data = gemm::with_new_activations(cache_->weights_data, problem.m, m_seed);
  std::vector<std::int64_t> rows = rows_to_verify(problem.m, options.full_verify_max_m, options.verify_rows, m_seed);
  ReferenceOptions reference_options;
  reference_options.bias = data.bias;
  ReferenceResult reference = static_cast<std::int64_t>(rows.size()) == problem.m
                                  ? reference_gemm(data.activations, data.weights, reference_options)
                                  : reference_gemm(select_rows(data.activations, rows), data.weights, reference_options);
  if (options.any_configuration.empty()) QTUNE_INPUT_ERROR("config: the family's buffers are sized from a configuration");
  const KernelConfig any_config = KernelConfig::parse(options.any_configuration, family_->name());
  return std::make_unique<FamilyOperands>(provider_problem, std::move(data), std::move(rows), std::move(reference), *family_,
                                          any_config);
}

std::unique_ptr<Runnable> FamilyProvider::load(Operands& operands, const std::string& configuration,
                                               const LoadOptions& options) {
  auto* family_operands = dynamic_cast<FamilyOperands*>(&operands);
  if (family_operands == nullptr) QTUNE_THROW(Error, family_->name() + ": operands of another provider");
  const Problem& problem = family_operands->problem().gemm;
  const KernelConfig config = KernelConfig::parse(configuration, family_->name());
  jit::CompiledKernel compiled;
  {
    std::lock_guard lock(cache_->mutex);
    jit::Compiler& compiler = cache_->compiler.compiler_for(options);
    compiled = compiler.compile(compile_request(*family_, config, problem.format, options.arch));
  }
  check_expected_cache_key(compiled, options);
  return std::make_unique<FamilyRunnable>(*family_operands,
                                          gemm::LoadedKernel(*family_, config, problem.format, compiled));
}

FamilyProvider& family_provider(const std::string& family) {
  // Never destroyed: the compiler and cached weights may be used until exit.
  static auto* providers = [] {
    auto* list = new std::map<std::string, std::unique_ptr<FamilyProvider>>;
    for (const KernelFamily* kernel_family : kernel_families()) {
      (*list)[kernel_family->name()] = std::make_unique<FamilyProvider>(*kernel_family);
    }
    return list;
  }();
  auto found = providers->find(family);
  if (found == providers->end()) {
    static_cast<void>(find_family(family));  // the InputError naming the families there are
    QTUNE_INPUT_ERROR("provider: no family '" + family + "'");
  }
  return *found->second;
}

}  // namespace qtune::providers
