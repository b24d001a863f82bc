#include "tuner/providers/moe_provider.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "kernels/error.hpp"
#include "kernels/families/mma_family.hpp"
#include "kernels/families/mma_layout.hpp"
#include "kernels/families/mma_moe.hpp"
#include "kernels/families/tma_family.hpp"
#include "kernels/families/wgmma_family.hpp"
#include "kernels/moe_reference.hpp"
#include "kernels/reference.hpp"
#include "search/space.hpp"
#include "tuner/gemm/gemm_runner.hpp"
#include "tuner/providers/family_provider.hpp"
#include "tuner/runtime/device.hpp"
#include "tuner/runtime/memory.hpp"
#include "tuner/runtime/module.hpp"
#include "tuner/providers/load_compiler.hpp"

namespace qtune::providers {

namespace {

const MoeProblem& moe_of(const ProviderProblem& problem) {
  if (problem.kind != ProblemKind::Moe) QTUNE_THROW(UnsupportedError, "the MoE providers run MoE GEMMs only");
  return problem.moe;
}

// The experts' prepacked buffers (uploaded once per problem) that every configuration reads as they are.
constexpr const char* kExpertBuffers[] = {"weights", "scales", "zeros", "global_scale"};

bool is_expert_buffer(const std::string& name) {
  return std::any_of(std::begin(kExpertBuffers), std::end(kExpertBuffers), [&](const char* expert) { return name == expert; });
}

class MoeProviderOperands final : public Operands {
 public:
  const ProviderProblem& problem() const override { return problem_; }

  ProviderProblem problem_;
  Routing routing;
  QuantizedActivations activations;  // [input_rows][K]
  MoeReferenceResult reference;      // every pair (and every token for the down projection)
  std::map<std::string, runtime::DeviceBuffer> experts;  // kExpertBuffers present for the format
};

// One configuration on prepared operands: its layout tables, activations (gathered for the grouped layouts), outputs
// and workspace, and the loaded GEMM (and reduction).
class MoeRunnable final : public Runnable {
 public:
  MoeRunnable(MoeProviderOperands& operands, const KernelConfig& config, const jit::CompiledKernel& gemm,
              const std::optional<jit::CompiledKernel>& reduce, const std::optional<jit::CompiledKernel>& gather)
      : operands_(operands),
        config_(config),
        gemm_module_(gemm.cubin),
        gemm_(gemm_module_.kernel(mma_moe::kernel_name(config))),
        bm_(config.get("bm")) {
    const MoeProblem& problem = operands_.problem().moe;
    if (reduce) {
      reduce_module_.emplace(reduce->cubin);
      reduce_.emplace(reduce_module_->kernel(mma_moe::reduce_kernel_name()));
    }
    if (gather) {
      gather_module_.emplace(gather->cubin);
      gather_.emplace(gather_module_->kernel(mma_moe::gather_kernel_name()));
    }
    map_ = moe_row_map(problem.layout, operands_.routing, bm_);
    rows_ = mma_moe::launch_rows(problem, bm_, map_);

    // Host bytes of every per-configuration input.
    const mma::DeviceFormat device = mma::device_format(problem.format);
    PackedBuffers host;
    if (problem.layout == MoeLayout::TokenIndexed) {
      host = mma::prepack_activations(operands_.activations, device);
    } else {
      // The grouped layouts read activations already in their rows (padding rows: row 0, never read into an output).
      std::vector<std::int64_t> source_rows;
      source_rows.reserve(static_cast<size_t>(map_.rows()));
      for (std::int64_t r = 0; r < map_.rows(); ++r) {
        const std::int32_t pair = map_.row_pair[static_cast<size_t>(r)];
        source_rows.push_back(pair < 0 ? 0 : input_row_of_pair(problem.projection, operands_.routing, pair));
      }
      host = mma::prepack_activations(select_rows(operands_.activations, source_rows), device);
    }
    for (auto& [name, bytes] : mma_moe::pack_layout(problem.layout, operands_.routing, bm_)) host[name] = std::move(bytes);
    std::vector<std::uint8_t> weights(operands_.routing.weights.size() * sizeof(float));
    std::memcpy(weights.data(), operands_.routing.weights.data(), weights.size());
    host["router_weights"] = std::move(weights);

    for (const BufferSpec& spec : mma_moe::buffers(config_, problem, rows_)) {
      if (is_expert_buffer(spec.name)) {
        const auto shared = operands_.experts.find(spec.name);
        if (shared == operands_.experts.end() || shared->second.bytes() < spec.bytes) {
          QTUNE_THROW(Error, "MoE provider: the prepared experts' '" + spec.name + "' buffer does not hold the " +
                                 std::to_string(spec.bytes) + " bytes " + config_.to_string() + " reads");
        }
        addresses_[spec.name] = shared->second.get();
        continue;
      }
      runtime::DeviceBuffer buffer(spec.bytes);
      buffer.fill_bytes(0);  // padding rows past the host bytes read as zero; the workspace starts zeroed
      const auto found = host.find(spec.name);
      if (spec.role != BufferRole::Output && found != host.end()) {
        if (found->second.size() > spec.bytes) {
          QTUNE_THROW(Error, "MoE provider: buffer '" + spec.name + "' holds " + std::to_string(found->second.size()) +
                                 " bytes, the kernel declares " + std::to_string(spec.bytes));
        }
        buffer.upload(found->second.data(), found->second.size());
      }
      if (spec.role == BufferRole::Output) outputs_.push_back(spec.name);
      addresses_[spec.name] = buffer.get();
      buffers_.emplace(spec.name, std::move(buffer));
    }
    geometry_ = mma_moe::launch_geometry(config_, problem, rows_);
    gemm_launch_ = gemm::launch_config(geometry_, gemm_);  // persistent grids capped to the device, shared memory opted in
    arguments_ = mma_moe::pack_arguments(config_, problem, rows_, addresses_);
    gemm::encode_tensor_maps(arguments_);  // the tma kernel's activation map
    if (gather_) {
      gather_geometry_ = mma_moe::gather_launch_geometry(rows_);
      gather_arguments_ = mma_moe::pack_gather_arguments(config_, problem, rows_, addresses_);
    }
    if (reduce_) {
      reduce_geometry_ = mma_moe::reduce_launch_geometry(problem);
      reduce_arguments_ = mma_moe::pack_reduce_arguments(problem, addresses_);
    }
    runtime::Device::get().synchronize();  // pageable uploads may still be in flight
  }

  void poison_output() override {
    for (const std::string& name : outputs_) buffers_.at(name).fill_bytes(0xFF);  // NaN in f16 and bf16
    runtime::Device::get().synchronize();
  }

  void launch(CUstream stream) override {
    if (gather_) {  // the token-indexed rows into layout order, timed with the GEMM
      std::vector<void*> gather_pointers = gather_arguments_.pointers();
      runtime::LaunchConfig gather_launch;
      gather_launch.grid = {gather_geometry_.grid[0], 1, 1};
      gather_launch.block = {gather_geometry_.block[0], 1, 1};
      gather_.value().launch(gather_launch, stream, gather_pointers.data());
    }
    std::vector<void*> pointers = arguments_.pointers();
    gemm_.launch(gemm_launch_, stream, pointers.data());
    if (reduce_) {
      std::vector<void*> reduce_pointers = reduce_arguments_.pointers();
      runtime::LaunchConfig reduce_launch;
      reduce_launch.grid = {reduce_geometry_.grid[0], 1, 1};
      reduce_launch.block = {reduce_geometry_.block[0], 1, 1};
      reduce_.value().launch(reduce_launch, stream, reduce_pointers.data());
    }
  }

  Check verify() override {
    runtime::Device::get().synchronize();
    const MoeProblem& problem = operands_.problem().moe;
    const Routing& routing = operands_.routing;
    const bool token_indexed = problem.layout == MoeLayout::TokenIndexed;
    const auto n = static_cast<size_t>(problem.n);
    // What the projection delivers, as rows the reference has: pairs (gate-up, grouped down) or tokens (reduced down).
    ReferenceResult expected;
    expected.n = problem.n;
    std::vector<std::uint16_t> got;
    std::int64_t written_padding = 0;
    if (reduce_) {
      got = buffers_.at("reduced").download<std::uint16_t>(static_cast<size_t>(problem.tokens) * n);
      expected.m = problem.tokens;
      expected.unrounded = operands_.reference.unrounded;
    } else if (token_indexed) {
      got = buffers_.at("c").download<std::uint16_t>(static_cast<size_t>(routing.pairs()) * n);
      expected.m = routing.pairs();
      expected.unrounded = operands_.reference.pair_unrounded;
    } else {
      // Layout rows back to pairs; padding rows must still hold the poison.
      const std::vector<std::uint16_t> layout_rows = buffers_.at("c").download<std::uint16_t>(static_cast<size_t>(rows_) * n);
      got.assign(static_cast<size_t>(routing.pairs()) * n, 0xFFFF);
      for (std::int64_t r = 0; r < rows_; ++r) {
        const std::int32_t pair = map_.row_pair[static_cast<size_t>(r)];
        const auto row = layout_rows.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(r) * n);
        if (pair >= 0) {
          std::copy_n(row, n, got.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(pair) * n));
        } else {
          written_padding += std::count_if(row, row + static_cast<std::ptrdiff_t>(n), [](std::uint16_t bits) { return bits != 0xFFFF; });
        }
      }
      expected.m = routing.pairs();
      expected.unrounded = operands_.reference.pair_unrounded;
    }
    const std::int64_t unwritten = count_non_finite(got, problem.format.output);
    const gemm::Verification verification =
        gemm::verify_output(got, problem.format.output, expected, default_tolerance(problem.format));
    Check check;
    check.passed = verification.passed && unwritten == 0 && written_padding == 0;
    check.relative_error = verification.relative_error;
    check.tolerance = verification.tolerance;
    check.rows_checked = expected.m;
    check.unwritten = unwritten;
    check.summary = verification.summary();
    if (unwritten > 0) {
      check.summary += "; " + std::to_string(unwritten) + " of " + std::to_string(got.size()) + " outputs NaN/inf or never written";
    }
    if (written_padding > 0) check.summary += "; " + std::to_string(written_padding) + " elements of padding rows written";
    check.summary += " [every one of " + std::to_string(expected.m) + " " + (reduce_ ? "token" : "pair") + " rows checked]";
    return check;
  }

 private:
  MoeProviderOperands& operands_;
  KernelConfig config_;
  runtime::Module gemm_module_;
  runtime::Kernel gemm_;
  std::optional<runtime::Module> reduce_module_;
  std::optional<runtime::Kernel> reduce_;
  std::optional<runtime::Module> gather_module_;
  std::optional<runtime::Kernel> gather_;
  int bm_ = 0;
  MoeRowMap map_;
  std::int64_t rows_ = 0;
  std::map<std::string, runtime::DeviceBuffer> buffers_;
  std::map<std::string, std::uint64_t> addresses_;
  std::vector<std::string> outputs_;
  LaunchGeometry geometry_;
  LaunchGeometry reduce_geometry_;
  LaunchGeometry gather_geometry_;
  runtime::LaunchConfig gemm_launch_;
  KernelArguments arguments_;
  KernelArguments reduce_arguments_;
  KernelArguments gather_arguments_;
};

}  // namespace

std::int64_t rows_per_expert(const Routing& routing) {
  const std::int64_t touched = std::max(routing.experts_touched(), 1);
  return (routing.pairs() + touched - 1) / touched;
}

std::vector<double> moe_cost_features(const KernelFamily& family, const KernelConfig& config, const MoeProblem& problem,
                                      const Routing& routing, const ArchLimits& limits) {
  const int bm = std::max(config.get("bm"), 1);
  const std::vector<std::int64_t> counts = routing.pairs_per_expert();
  std::int64_t live_blocks = 0;
  std::int64_t largest = 0;
  for (const std::int64_t count : counts) {
    live_blocks += (count + bm - 1) / bm;
    largest = std::max(largest, count);
  }
  const MoeRowMap map = moe_row_map(problem.layout, routing, bm);
  const std::int64_t launch_rows = mma_moe::launch_rows(problem, bm, map);
  const LaunchGeometry geometry = mma_moe::launch_geometry(config, problem, launch_rows);
  const double launched = double(geometry.grid[0]) * geometry.grid[1] * geometry.grid[2];
  const double launched_blocks = std::max(double(launch_rows / bm), 1.0);
  const double live_units = launched * double(live_blocks) / launched_blocks;  // CTAs whose block holds rows
  const std::int64_t per_expert = rows_per_expert(routing);
  const double pairs = double(std::max<std::int64_t>(routing.pairs(), 1));
  Problem live{problem.format, std::max<std::int64_t>(per_expert, 1), problem.n, problem.k, false};
  std::vector<double> features = search::tiling_features(live, live_units, limits.sm_count,
                                                         pairs / (std::max(double(live_blocks), 1.0) * bm));
  const double touched = std::max(routing.experts_touched(), 1);
  features.push_back(std::log2(touched));
  features.push_back(double(largest) / (pairs / touched));
  features.push_back(1.0 - live_units / std::max(launched, 1.0));
  for (const ParameterDomain& domain : family.parameter_space()) {
    features.push_back(std::log2(double(std::max(domain.value_in(config), 0)) + 1.0));
  }
  return features;
}

std::uint64_t moe_compulsory_bytes(const MoeProblem& problem, const Routing& routing, const KernelConfig& config) {
  const mma_moe::ExpertStrides strides = mma_moe::expert_strides(problem.format, problem.n, problem.k);
  const auto touched = static_cast<std::uint64_t>(routing.experts_touched());
  std::uint64_t bytes = touched * (strides.weights + strides.scales + strides.zeros + 4);
  const int bm = config.get("bm");
  const MoeRowMap map = moe_row_map(problem.layout, routing, bm);
  for (const BufferSpec& spec : mma_moe::buffers(config, problem, mma_moe::launch_rows(problem, bm, map))) {
    if (spec.name == "a" || spec.name == "a_scales") bytes += spec.bytes;
  }
  return bytes + static_cast<std::uint64_t>(problem.output_rows() * problem.n) * 2;
}

bool moe_reduces(const MoeProblem& problem) {
  return problem.layout == MoeLayout::TokenIndexed && problem.projection == MoeProjection::Down;
}

jit::CompileRequest moe_compile_request(const KernelConfig& config, const MoeProblem& problem, const std::string& arch) {
  jit::CompileRequest request;
  request.source = mma_moe::instantiation_source(config, problem, arch);
  request.kernel_name = mma_moe::kernel_name(config);
  request.arch = arch;
  return request;
}

jit::CompileRequest moe_gather_compile_request(const MoeProblem& problem, const std::string& arch) {
  jit::CompileRequest request;
  request.source = mma_moe::gather_instantiation_source(problem, arch);
  request.kernel_name = mma_moe::gather_kernel_name();
  request.arch = arch;
  return request;
}

jit::CompileRequest moe_reduce_compile_request(const MoeProblem& problem, const std::string& arch) {
  jit::CompileRequest request;
  request.source = mma_moe::reduce_instantiation_source(problem.format, arch);
  request.kernel_name = mma_moe::reduce_kernel_name();
  request.arch = arch;
  return request;
}

ProviderProblem moe_provider_problem(const MoeProblem& problem) {
  ProviderProblem provider_problem;
  provider_problem.kind = ProblemKind::Moe;
  provider_problem.moe = problem;
  return provider_problem;
}

struct MoeProvider::Cache {
  std::mutex mutex;
  std::string experts_key;  // format|NxK|seed: the experts do not depend on the token count or the routing
  std::vector<QuantizedWeights> experts;  // [E]; n = 0 until an expert is first routed to
  std::vector<PackedBuffers> packed;      // [E]: experts[e] prepacked (empty until then); every bucket reuses them
  LoadCompiler compiler;
};

std::shared_ptr<MoeProvider::Cache> MoeProvider::shared_cache() {
  static const auto cache = std::make_shared<Cache>();
  return cache;
}

MoeProvider::MoeProvider(const MmaFamily& family) : family_(family), cache_(shared_cache()) {}
MoeProvider::~MoeProvider() = default;

std::string MoeProvider::name() const { return family_.name() + "-moe"; }

ParameterRanges MoeProvider::curated_ranges(std::int64_t rows_per_expert) const {
  ParameterRanges ranges = family_.curated_ranges(rows_per_expert);
  if (&family_ == &wgmma_family() || &family_ == &tma_family()) {
    ranges["bm"] = mma_moe::swap_ab_token_tiles(rows_per_expert);
    ranges["split"] = mma_moe::swap_ab_splits(rows_per_expert);
    ranges["raster"] = {0};
  }
  if (&family_ == &wgmma_family() && rows_per_expert > 16 && rows_per_expert <= 64) {
    // The token tile above the mean (64 rows at 17-32 rows per expert) is a dense M = 64..128 tile, where a stage of
    // wgmmas in flight can pay off (it won from M = 256 on dense, lost at 64): both are tried.
    ranges["overlap"] = {0, 1};
  }
  if (&family_ == &wgmma_family()) {
    // One CTA per unit, or a persistent grid whose pipeline runs on across units (token-indexed layouts; the rules
    // refuse it elsewhere, with a stage in flight, split-K or too few K tiles).
    ranges["persistent"] = {0, 1};
  }
  if (&family_ == &tma_family()) {
    // The dense family's depths, slots, persistence, overlap and promotion at that M. No clusters: multicast of
    // weights would pair two experts' blocks, and of activations needs N tiles in pairs.
    ranges["cluster"] = {1};
    ranges["multicast"] = {0};
    ranges["persistent"] = {0, 1};
  }
  return ranges;
}

ProviderSpace MoeProvider::enumerate(const ProviderProblem& provider_problem, const ArchLimits& limits,
                                     const SpaceRequest& request, Operands* /*prepared*/) const {
  const MoeProblem& problem = moe_of(provider_problem);
  problem.validate();
  const MmaFamily& family = family_;
  ParameterRanges ranges;
  if (request.curated) ranges = curated_ranges(rows_per_expert(problem.make_routing()));
  for (const auto& [name, values] : request.parameter_values) ranges[name] = values;
  const std::vector<ParameterDomain> domains = family.parameter_space();
  std::vector<std::vector<int>> values;
  for (const ParameterDomain& domain : domains) {
    const auto chosen = ranges.find(domain.name);
    if (chosen != ranges.end() && chosen->second.empty()) QTUNE_INPUT_ERROR("ranges." + domain.name + ": no values");
    values.push_back(chosen == ranges.end() ? domain.values : chosen->second);
  }
  ProviderSpace space;
  std::vector<KernelConfig> candidates;
  search::for_each_combination(values, [&](const std::vector<int>& combination) {
    KernelConfig config{family.name(), {}};
    for (size_t d = 0; d < domains.size(); ++d) config.params[domains[d].name] = combination[d];
    ++space.total;
    const RuleVerdict verdict = mma_moe::check(config, problem, limits);
    if (verdict.valid) {
      candidates.push_back(std::move(config));
    } else {
      ++space.removed_by_rule[verdict.rule];
    }
  });
  for (const KernelConfig& config : search::spread_evenly(std::move(candidates), request.max_configs)) {
    space.configurations.push_back(config.to_string());
  }
  return space;
}

std::unique_ptr<Operands> MoeProvider::prepare(const ProviderProblem& provider_problem, const PrepareOptions& options) {
  const MoeProblem& problem = moe_of(provider_problem);
  problem.validate();
  runtime::Device::get(options.device);
  auto operands = std::make_unique<MoeProviderOperands>();
  operands->problem_ = provider_problem;
  operands->routing = problem.make_routing();
  const Routing& routing = operands->routing;

  std::lock_guard lock(cache_->mutex);
  const std::string experts_key = problem.format.to_string() + "|" + std::to_string(problem.n) + "x" + std::to_string(problem.k) +
                                  "|" + std::to_string(options.seed);
  if (cache_->experts_key != experts_key || cache_->experts.size() != static_cast<size_t>(problem.experts)) {
    cache_->experts_key.clear();
    cache_->experts.assign(static_cast<size_t>(problem.experts), QuantizedWeights{});
    cache_->packed.assign(static_cast<size_t>(problem.experts), PackedBuffers{});
    cache_->experts_key = experts_key;
  }
  // Operands of the routed experts only: the others stay empty here (0xFF on the device), so a kernel reading one fails.
  MoeOperands host;
  host.routing = routing;
  host.activations = make_moe_activations(problem, options.seed);
  const std::vector<std::int64_t> counts = routing.pairs_per_expert();
  host.experts.resize(static_cast<size_t>(problem.experts));
  for (int e = 0; e < problem.experts; ++e) {
    if (counts[static_cast<size_t>(e)] == 0) continue;
    QuantizedWeights& cached = cache_->experts[static_cast<size_t>(e)];
    if (cached.n == 0) cached = make_expert_weights(problem, e, options.seed);
    host.experts[static_cast<size_t>(e)] = std::exchange(cached, QuantizedWeights{});  // a moved-from one keeps its n
  }
  // Give the experts back to the cache whatever happens below.
  struct ReturnExperts {
    std::vector<QuantizedWeights>& from;
    std::vector<QuantizedWeights>& to;
    ~ReturnExperts() {
      for (size_t e = 0; e < from.size(); ++e) {
        if (from[e].n != 0) to[e] = std::exchange(from[e], QuantizedWeights{});
      }
    }
  } give_back{host.experts, cache_->experts};

  operands->reference = reference_moe(problem, host);
  // Prepacking is the host's slowest step after the draw (256 experts of 4096 x 7168 take seconds): once per expert.
  std::vector<const PackedBuffers*> placed(static_cast<size_t>(problem.experts), nullptr);
  for (int e = 0; e < problem.experts; ++e) {
    const QuantizedWeights& weights = host.experts[static_cast<size_t>(e)];
    if (weights.n == 0) continue;
    PackedBuffers& packed = cache_->packed[static_cast<size_t>(e)];
    if (packed.empty()) packed = mma_moe::prepack_expert(weights, problem.format, problem.n, problem.k, static_cast<size_t>(e));
    placed[static_cast<size_t>(e)] = &packed;
  }
  for (auto& [name, bytes] : mma_moe::place_experts(placed, problem.format, problem.n, problem.k)) {
    runtime::DeviceBuffer buffer(bytes.size());
    buffer.upload(bytes.data(), bytes.size());
    operands->experts.emplace(name, std::move(buffer));
  }
  operands->activations = std::move(host.activations);
  runtime::Device::get().synchronize();  // pageable uploads may still be in flight
  return operands;
}

std::unique_ptr<Runnable> MoeProvider::load(Operands& operands, const std::string& configuration, const LoadOptions& options) {
  auto* moe_operands = dynamic_cast<MoeProviderOperands*>(&operands);
  if (moe_operands == nullptr) QTUNE_THROW(Error, name() + ": operands of another provider");
  const MoeProblem& problem = moe_operands->problem().moe;
  const KernelConfig config = KernelConfig::parse(configuration, family_.name());
  jit::CompiledKernel gemm;
  std::optional<jit::CompiledKernel> reduce;
  std::optional<jit::CompiledKernel> gather;
  {
    std::lock_guard lock(cache_->mutex);
    jit::Compiler& compiler = cache_->compiler.compiler_for(options);
    gemm = compiler.compile(moe_compile_request(config, problem, options.arch));
    if (moe_reduces(problem)) reduce = compiler.compile(moe_reduce_compile_request(problem, options.arch));
    if (mma_moe::gathers(config, problem)) gather = compiler.compile(moe_gather_compile_request(problem, options.arch));
  }
  check_expected_cache_key(gemm, options);
  return std::make_unique<MoeRunnable>(*moe_operands, config, gemm, reduce, gather);
}

MoeProvider& moe_provider() {
  static auto* provider = new MoeProvider(mma_family());  // never destroyed: the compiler and experts may be used until exit
  return *provider;
}

MoeProvider& wgmma_moe_provider() {
  static auto* provider = new MoeProvider(wgmma_family());
  return *provider;
}

MoeProvider& tma_moe_provider() {
  static auto* provider = new MoeProvider(tma_family());
  return *provider;
}

MoeProvider* find_moe_provider(const std::string& family_or_provider) {
  for (MoeProvider* provider : {&moe_provider(), &wgmma_moe_provider(), &tma_moe_provider()}) {
    if (family_or_provider == provider->family().name() || family_or_provider == provider->name()) return provider;
  }
  return nullptr;
}

}  // namespace qtune::providers
