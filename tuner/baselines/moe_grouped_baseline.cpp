#include "tuner/baselines/moe_grouped_baseline.hpp"

#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/codec.hpp"
#include "kernels/error.hpp"
#include "kernels/moe_layout.hpp"
#include "kernels/moe_reference.hpp"
#include "kernels/reference.hpp"
#include "tuner/gemm/gemm_runner.hpp"
#include "tuner/providers/family_provider.hpp"
#include "tuner/runtime/device.hpp"
#include "tuner/runtime/memory.hpp"

namespace qtune::baselines {

namespace {

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw LibraryError("cuBLAS", std::string(call) + " failed: " + cublasGetStatusName(status) + " (" +
                                     cublasGetStatusString(status) + ")", file, line);
  }
}
#define QTUNE_CUBLAS_CHECK(call) check_cublas((call), #call, __FILE__, __LINE__)

const MoeProblem& moe_of(const providers::ProviderProblem& problem) {
  if (problem.kind != providers::ProblemKind::Moe) {
    QTUNE_THROW(UnsupportedError, std::string(kMoeGroupedBaselineName) + " runs MoE GEMMs only");
  }
  return problem.moe;
}

std::vector<std::uint16_t> to_f16(const std::vector<float>& values) {
  std::vector<std::uint16_t> bits(values.size());
  std::transform(values.begin(), values.end(), bits.begin(), float_to_f16_bits);
  return bits;
}

class GroupedOperands final : public providers::Operands {
 public:
  const providers::ProviderProblem& problem() const override { return problem_; }

  providers::ProviderProblem problem_;
  Routing routing;
  std::vector<float> reference;       // [pairs][n]: every pair's product, no router weight
  std::vector<std::int32_t> row_pair;  // [pairs]: the pair each gathered row holds (expert order)
  // Per group (touched expert): its GEMM's dimensions as cuBLAS sees them (column-major Cᵀ = W · Aᵀ).
  std::vector<cublasOperation_t> transa, transb;
  std::vector<int> m, n, k, lda, ldb, ldc, group_size;
  std::vector<float> alpha, beta;
  std::unique_ptr<runtime::DeviceBuffer> weights, activations, output, pointers;
  std::uint64_t a_array = 0, b_array = 0, c_array = 0;  // device addresses of the three pointer arrays
  cublasHandle_t handle = nullptr;
  GroupedOperands() = default;
  GroupedOperands(const GroupedOperands&) = delete;
  GroupedOperands& operator=(const GroupedOperands&) = delete;
  ~GroupedOperands() override {
    if (handle != nullptr) cublasDestroy(handle);
  }
};

class GroupedRunnable final : public providers::Runnable {
 public:
  explicit GroupedRunnable(GroupedOperands& operands) : operands_(operands) {}
  void poison_output() override {
    operands_.output->fill_bytes(0xFF);  // NaN in f16
    runtime::Device::get().synchronize();
  }
  void launch(CUstream stream) override {
    GroupedOperands& o = operands_;
    QTUNE_CUBLAS_CHECK(cublasSetStream(o.handle, reinterpret_cast<cudaStream_t>(stream)));
    QTUNE_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(
        o.handle, o.transa.data(), o.transb.data(), o.m.data(), o.n.data(), o.k.data(), o.alpha.data(),
        reinterpret_cast<const void* const*>(o.a_array), CUDA_R_16F, o.lda.data(),
        reinterpret_cast<const void* const*>(o.b_array), CUDA_R_16F, o.ldb.data(), o.beta.data(),
        reinterpret_cast<void* const*>(o.c_array), CUDA_R_16F, o.ldc.data(), static_cast<int>(o.group_size.size()),
        o.group_size.data(), CUBLAS_COMPUTE_32F));
  }
  providers::Check verify() override {
    runtime::Device::get().synchronize();
    const MoeProblem& problem = operands_.problem().moe;
    const auto n = static_cast<size_t>(problem.n);
    const std::vector<std::uint16_t> rows = operands_.output->download<std::uint16_t>(operands_.row_pair.size() * n);
    std::vector<std::uint16_t> got(rows.size(), 0xFFFF);
    for (size_t r = 0; r < operands_.row_pair.size(); ++r) {
      std::copy_n(rows.begin() + static_cast<std::ptrdiff_t>(r * n), n,
                  got.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(operands_.row_pair[r]) * n));
    }
    ReferenceResult expected;
    expected.m = operands_.routing.pairs();
    expected.n = problem.n;
    expected.unrounded = operands_.reference;
    const std::int64_t unwritten = providers::count_non_finite(got, OutputType::F16);
    // f16 weights dequantized from the format: the format's own tolerance, as the cuBLASLt f16 baseline uses.
    const gemm::Verification verification = gemm::verify_output(got, OutputType::F16, expected, default_tolerance(problem.format));
    providers::Check check;
    check.passed = verification.passed && unwritten == 0;
    check.relative_error = verification.relative_error;
    check.tolerance = verification.tolerance;
    check.rows_checked = expected.m;
    check.unwritten = unwritten;
    check.summary = verification.summary() + " [every one of " + std::to_string(expected.m) + " pair rows checked]";
    return check;
  }

 private:
  GroupedOperands& operands_;
};

}  // namespace

providers::ProviderSpace MoeGroupedBaselineProvider::enumerate(const providers::ProviderProblem& problem, const ArchLimits&,
                                                               const providers::SpaceRequest&, providers::Operands*) const {
  moe_of(problem).validate();
  providers::ProviderSpace space;
  space.configurations = {"default"};
  space.total = 1;
  return space;
}

std::unique_ptr<providers::Operands> MoeGroupedBaselineProvider::prepare(const providers::ProviderProblem& provider_problem,
                                                                         const providers::PrepareOptions& options) {
  const MoeProblem& problem = moe_of(provider_problem);
  problem.validate();
  runtime::Device::get(options.device);
  auto operands = std::make_unique<GroupedOperands>();
  operands->problem_ = provider_problem;
  operands->routing = problem.make_routing();
  const Routing& routing = operands->routing;
  const MoeOperands host = make_moe_operands(problem, routing, options.seed);
  operands->reference = reference_moe(problem, host).pair_unrounded;

  // Rows in expert order, no padding (a block of one row); each touched expert's f16 weights back to back.
  const GroupedContiguousLayout layout = grouped_contiguous_layout(routing, 1);
  operands->row_pair = layout.row_pair;
  const std::int64_t k = problem.k;
  const std::int64_t n = problem.n;
  std::vector<float> activation_rows;
  activation_rows.reserve(static_cast<size_t>(layout.rows * k));
  for (std::int32_t pair : layout.row_pair) {
    const std::int64_t row = input_row_of_pair(problem.projection, routing, pair);
    for (std::int64_t c = 0; c < k; ++c) activation_rows.push_back(host.activations.dequantize(row, c));
  }
  std::vector<int> touched;
  for (int e = 0; e < problem.experts; ++e) {
    if (layout.expert_first_row[static_cast<size_t>(e) + 1] > layout.expert_first_row[static_cast<size_t>(e)]) touched.push_back(e);
  }
  std::vector<std::uint16_t> weight_bits(touched.size() * static_cast<size_t>(n * k));
  for (size_t g = 0; g < touched.size(); ++g) {
    const QuantizedWeights& weights = host.experts[static_cast<size_t>(touched[g])];
    std::uint16_t* out = weight_bits.data() + g * static_cast<size_t>(n * k);
    for (std::int64_t r = 0; r < n; ++r) {
      for (std::int64_t c = 0; c < k; ++c) out[r * k + c] = float_to_f16_bits(weights.dequantize(r, c));
    }
  }
  const std::vector<std::uint16_t> activation_bits = to_f16(activation_rows);
  operands->weights = std::make_unique<runtime::DeviceBuffer>(std::max<size_t>(weight_bits.size() * 2, 2));
  operands->weights->upload(weight_bits.data(), weight_bits.size() * 2);
  operands->activations = std::make_unique<runtime::DeviceBuffer>(std::max<size_t>(activation_bits.size() * 2, 2));
  operands->activations->upload(activation_bits.data(), activation_bits.size() * 2);
  operands->output = std::make_unique<runtime::DeviceBuffer>(static_cast<size_t>(layout.rows * n) * 2);

  // Row-major C_e[rows][N] = A_e[rows][K] · W_e[N][K]ᵀ is column-major C_eᵀ (N x rows, ld N) = op(W_e) · A_eᵀ with
  // W_e read as a K x N column-major matrix (ld K) transposed, and A_e as K x rows (ld K).
  std::vector<std::uint64_t> a_pointers, b_pointers, c_pointers;
  for (size_t g = 0; g < touched.size(); ++g) {
    const int e = touched[g];
    const std::int64_t first = layout.expert_first_row[static_cast<size_t>(e)];
    const std::int64_t rows = layout.expert_first_row[static_cast<size_t>(e) + 1] - first;
    operands->transa.push_back(CUBLAS_OP_T);
    operands->transb.push_back(CUBLAS_OP_N);
    operands->m.push_back(static_cast<int>(n));
    operands->n.push_back(static_cast<int>(rows));
    operands->k.push_back(static_cast<int>(k));
    operands->lda.push_back(static_cast<int>(k));
    operands->ldb.push_back(static_cast<int>(k));
    operands->ldc.push_back(static_cast<int>(n));
    operands->group_size.push_back(1);
    operands->alpha.push_back(1.0f);
    operands->beta.push_back(0.0f);
    a_pointers.push_back(operands->weights->get() + g * static_cast<std::uint64_t>(n * k) * 2);
    b_pointers.push_back(operands->activations->get() + static_cast<std::uint64_t>(first * k) * 2);
    c_pointers.push_back(operands->output->get() + static_cast<std::uint64_t>(first * n) * 2);
  }
  std::vector<std::uint64_t> all = a_pointers;
  all.insert(all.end(), b_pointers.begin(), b_pointers.end());
  all.insert(all.end(), c_pointers.begin(), c_pointers.end());
  operands->pointers = std::make_unique<runtime::DeviceBuffer>(std::max<size_t>(all.size() * 8, 8));
  operands->pointers->upload(all.data(), all.size() * 8);
  operands->a_array = operands->pointers->get();
  operands->b_array = operands->a_array + touched.size() * 8;
  operands->c_array = operands->b_array + touched.size() * 8;
  QTUNE_CUBLAS_CHECK(cublasCreate(&operands->handle));
  runtime::Device::get().synchronize();
  return operands;
}

std::unique_ptr<providers::Runnable> MoeGroupedBaselineProvider::load(providers::Operands& operands,
                                                                      const std::string& configuration,
                                                                      const providers::LoadOptions&) {
  auto* grouped = dynamic_cast<GroupedOperands*>(&operands);
  if (grouped == nullptr) QTUNE_THROW(Error, std::string(kMoeGroupedBaselineName) + ": operands of another provider");
  if (configuration != "default") {
    QTUNE_INPUT_ERROR("config: " + std::string(kMoeGroupedBaselineName) + " has one configuration, 'default', not '" +
                      configuration + "'");
  }
  return std::make_unique<GroupedRunnable>(*grouped);
}

MoeGroupedBaselineProvider& moe_grouped_baseline_provider() {
  static auto* provider = new MoeGroupedBaselineProvider;  // never destroyed, as the other providers
  return *provider;
}

}  // namespace qtune::baselines
