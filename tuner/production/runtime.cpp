// libqtune_runtime: selection, kernels (precompiled or JIT) and launches for production code; see qtune_runtime.hpp.
#include <cuda.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <tuple>

#include "kernels/quantize.hpp"
#include "reports/selection_table.hpp"
#include "tuner/gemm/gemm_runner.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/jit/kernel_cache.hpp"
#include "tuner/production/cubin_store.hpp"
#include "tuner/production/qtune_runtime.hpp"
#include "tuner/production/selector.hpp"
#include "tuner/runtime/device.hpp"
#include "tuner/runtime/driver.hpp"
#include "tuner/runtime/memory.hpp"

namespace qtune::runtime_api {

namespace fs = std::filesystem;

std::string_view to_string(ConfigSource source) {
  switch (source) {
    case ConfigSource::Tuned: return "tuned";
    case ConfigSource::Fallback: return "fallback";
    case ConfigSource::Heuristic: return "heuristic";
  }
  return "unknown";
}

std::string_view to_string(KernelOrigin origin) { return origin == KernelOrigin::Precompiled ? "precompiled" : "jit"; }

namespace {

// Plans are cheap to rebuild; the bound keeps a service that sees every M from growing without end.
constexpr std::size_t kMaxCachedPlans = 4096;
// Workspaces grow in whole MiB so that a slowly growing M does not reallocate on every call.
constexpr std::uint64_t kWorkspaceGranule = std::uint64_t{1} << 20;

std::uint64_t address(const void* pointer) { return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(pointer)); }

}  // namespace

struct Runtime::Impl {
  // One GEMM shape resolved: its configuration and, once loaded, its kernel.
  struct Plan {
    Problem problem;
    production::Selection selection;
    const production::CubinEntry* cubin = nullptr;
    std::size_t cubin_index = 0;
    std::string kernel_key;  // format | family:config | arch
    std::string arch;
    std::shared_ptr<const gemm::LoadedKernel> kernel;
  };
  struct Workspace {
    runtime::DeviceBuffer buffer;
    std::string layout;  // config and size of the last launch: another layout may find non-zero counters
  };

  RuntimeOptions options;
  std::optional<reports::SelectionTable> table;
  std::optional<production::CubinManifest> manifest;
  ArchLimits limits;
  std::string arch;   // the JIT target
  int target_sm = 0;  // the compute capability kernels must run on
  bool device_checked = false;

  std::mutex mutex;
  std::map<std::string, FormatSpec, std::less<>> formats;
  std::map<std::tuple<std::string, std::int64_t, std::int64_t, std::int64_t, bool>, Plan> plans;
  std::unique_ptr<jit::Compiler> compiler;
  std::map<std::string, std::shared_ptr<const gemm::LoadedKernel>> kernels;
  std::map<CUstream, Workspace> workspaces;

  const FormatSpec& format(std::string_view text) {
    auto found = formats.find(text);
    if (found == formats.end()) found = formats.emplace(std::string(text), FormatSpec::parse(text)).first;
    return found->second;
  }

  Plan& plan(std::string_view format_text, std::int64_t m, std::int64_t n, std::int64_t k, bool has_bias) {
    const auto key = std::make_tuple(std::string(format_text), m, n, k, has_bias);
    if (auto found = plans.find(key); found != plans.end()) return found->second;
    Plan plan;
    plan.problem = production::make_problem(format(format_text), m, n, k, has_bias);
    plan.selection = production::select_config(table ? &*table : nullptr, plan.problem, limits);
    plan.arch = arch;
    if (manifest) {
      plan.cubin = manifest->find(plan.problem.format.to_string(), plan.selection.config, target_sm, arch);
      if (plan.cubin != nullptr) {
        plan.cubin_index = static_cast<std::size_t>(plan.cubin - manifest->kernels.data());
        plan.arch = plan.cubin->arch;
      }
    }
    plan.kernel_key = plan.problem.format.to_string() + "|" + plan.selection.config.family + ":" +
                      plan.selection.config.to_string() + "|" + plan.arch;
    if (auto loaded = kernels.find(plan.kernel_key); loaded != kernels.end()) plan.kernel = loaded->second;
    if (plans.size() >= kMaxCachedPlans) plans.clear();
    return plans.emplace(key, std::move(plan)).first->second;
  }

  // The device, its context current on this thread; checks once that kernels for options.arch run on it.
  runtime::Device& device() {
    runtime::Device& device = runtime::Device::get(options.device);
    if (!device_checked) {
      const int device_sm = device.info().compute_capability();
      if (!options.arch.empty() && !production::ArchTarget::parse(options.arch).runs_on(device_sm)) {
        QTUNE_INPUT_ERROR("arch: kernels for " + options.arch + " do not run on device " + std::to_string(options.device) +
                          " (" + device.info().name + ", " + device.info().sm_name() + ")");
      }
      device_checked = true;
    }
    return device;
  }

  const jit::Compiler& jit_compiler() {
    if (!compiler) {
      jit::CompilerSettings settings;
      settings.threads = 1;
      if (!options.cache_directory.empty()) {
        settings.cache_directory = options.cache_directory;
      } else {
        try {
          settings.cache_directory = jit::KernelCache::default_directory();
        } catch (const InputError&) {
          settings.use_cache = false;  // no cache location is set: compile in every process
        }
      }
      compiler = std::make_unique<jit::Compiler>(std::move(settings));
    }
    return *compiler;
  }

  const gemm::LoadedKernel& kernel(Plan& plan) {
    if (plan.kernel) return *plan.kernel;
    auto found = kernels.find(plan.kernel_key);
    if (found == kernels.end()) {
      device();
      const production::Selection& selection = plan.selection;
      jit::CompiledKernel compiled;
      if (plan.cubin != nullptr) {
        compiled.cubin = production::read_cubin(options.cubin_directory, *plan.cubin, plan.cubin_index);
        compiled.kernel_name = plan.cubin->kernel_name;
        compiled.lowered_name = plan.cubin->kernel_name;
        compiled.arch = plan.cubin->arch;
      } else {
        jit::CompileRequest request;
        request.source = selection.family->instantiation_source(selection.config, plan.problem.format, plan.arch);
        request.kernel_name = selection.family->kernel_name(selection.config, plan.problem.format);
        request.arch = plan.arch;
        compiled = jit_compiler().compile(request);
      }
      auto loaded = std::make_shared<const gemm::LoadedKernel>(*selection.family, selection.config, plan.problem.format, compiled);
      found = kernels.emplace(plan.kernel_key, std::move(loaded)).first;
    }
    plan.kernel = found->second;
    return *plan.kernel;
  }

  // The stream's split-K workspace, zeroed (in stream order) when the layout differs from its last launch's.
  CUdeviceptr workspace(CUstream stream, const std::string& layout, std::uint64_t bytes) {
    Workspace& workspace = workspaces[stream];
    if (workspace.buffer.bytes() < bytes) {
      // Launches in flight may still use the old buffer.
      if (workspace.buffer.bytes() > 0) QTUNE_CU(cuStreamSynchronize, stream);
      workspace.buffer = runtime::DeviceBuffer();
      workspace.buffer = runtime::DeviceBuffer((bytes + kWorkspaceGranule - 1) / kWorkspaceGranule * kWorkspaceGranule);
      workspace.layout.clear();
    }
    if (workspace.layout != layout) {
      QTUNE_CU(cuMemsetD8Async, workspace.buffer.get(), 0, bytes, stream);
      workspace.layout = layout;
    }
    return workspace.buffer.get();
  }

  PackedWeights pack(const QuantizedWeights& weights) {
    const KernelFamily& family = packing_family(weights.format, target_sm);
    const Problem problem = production::make_problem(weights.format, 1, weights.n, weights.k, false);
    // Every configuration of a family reads the same weight layout, so any valid one packs them.
    PackedBuffers buffers = family.prepack_weights(weights, family.default_config(problem, limits));
    PackedWeights packed;
    packed.format = weights.format.to_string();
    packed.family = family.name();
    packed.n = weights.n;
    packed.k = weights.k;
    for (auto& [name, bytes] : buffers) {
      if (name == "weights") packed.weights = std::move(bytes);
      else if (name == "scales") packed.scales = std::move(bytes);
      else if (name == "zeros") packed.zeros = std::move(bytes);
      else if (name == "global_scale") packed.global_scale = std::move(bytes);
      else QTUNE_THROW(Error, "family " + family.name() + " packs a weight buffer '" + name + "' the runtime does not know");
    }
    return packed;
  }
};

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& impl = *impl_;
  impl.options = std::move(options);
  if (!impl.options.table.empty()) impl.table = production::read_selection_table(impl.options.table);
  if (!impl.options.cubin_directory.empty()) impl.manifest = production::CubinManifest::read(impl.options.cubin_directory);
  if (!impl.options.arch.empty()) {
    const production::ArchTarget target = production::ArchTarget::parse(impl.options.arch, "arch");
    try {
      impl.limits = ArchLimits::for_sm(target.sm);
    } catch (const InputError&) {
      QTUNE_INPUT_ERROR("arch: qtune has no limits for " + impl.options.arch);
    }
    impl.arch = impl.options.arch;
    impl.target_sm = target.sm;
  } else {
    impl.limits = gemm::device_limits(impl.options.device);
    impl.arch = gemm::nvrtc_arch(impl.limits.sm);
    impl.target_sm = impl.limits.sm;
    impl.device();
  }
}

Runtime::~Runtime() {
  if (impl_ && !impl_->workspaces.empty()) {
    try {
      runtime::Device::get(impl_->options.device).synchronize();  // kernels in flight may still use a workspace
    } catch (const Error&) {
      // A faulted context: nothing more to wait for; freeing reports nothing either.
    }
  }
}

Runtime::Runtime(Runtime&&) noexcept = default;
Runtime& Runtime::operator=(Runtime&&) noexcept = default;

Choice Runtime::select(std::string_view format, std::int64_t m, std::int64_t n, std::int64_t k, bool has_bias) const {
  std::lock_guard lock(impl_->mutex);
  return impl_->plan(format, m, n, k, has_bias).selection.choice();
}

KernelPlan Runtime::plan(std::string_view format, std::int64_t m, std::int64_t n, std::int64_t k, bool has_bias) const {
  std::lock_guard lock(impl_->mutex);
  const Impl::Plan& plan = impl_->plan(format, m, n, k, has_bias);
  KernelPlan result;
  result.choice = plan.selection.choice();
  result.arch = plan.arch;
  result.origin = plan.cubin != nullptr ? KernelOrigin::Precompiled : KernelOrigin::Jit;
  if (plan.cubin != nullptr) result.cubin = impl_->options.cubin_directory / plan.cubin->file;
  result.loaded = impl_->kernels.count(plan.kernel_key) > 0;
  return result;
}

PackedWeights Runtime::prepack(std::string_view format, std::int64_t n, std::int64_t k, const HostQuantizedWeights& weights) const {
  std::lock_guard lock(impl_->mutex);
  const FormatSpec& spec = impl_->format(format);
  production::make_problem(spec, 1, n, k, false);
  return impl_->pack(weights_from_codes(spec, n, k, {weights.codes.begin(), weights.codes.end()},
                                        {weights.scale_bits.begin(), weights.scale_bits.end()},
                                        {weights.zero_point_bits.begin(), weights.zero_point_bits.end()}, weights.global_scale));
}

PackedWeights Runtime::quantize_and_prepack(std::string_view format, std::int64_t n, std::int64_t k,
                                            std::span<const float> weights) const {
  std::lock_guard lock(impl_->mutex);
  const FormatSpec& spec = impl_->format(format);
  production::make_problem(spec, 1, n, k, false);
  return impl_->pack(quantize_weights(spec, {weights.begin(), weights.end()}, n, k));
}

void Runtime::load(std::string_view format, std::int64_t m, std::int64_t n, std::int64_t k, bool has_bias) {
  std::lock_guard lock(impl_->mutex);
  impl_->kernel(impl_->plan(format, m, n, k, has_bias));
}

void Runtime::gemm(std::string_view format, std::int64_t m, std::int64_t n, std::int64_t k, const GemmArguments& arguments,
                   CUstream_st* stream) {
  std::lock_guard lock(impl_->mutex);
  Impl::Plan& plan = impl_->plan(format, m, n, k, arguments.bias != nullptr);
  impl_->device();
  const gemm::LoadedKernel& kernel = impl_->kernel(plan);
  const KernelConfig& config = plan.selection.config;
  const KernelFamily& family = *plan.selection.family;
  std::map<std::string, std::uint64_t> addresses = {
      {"a", address(arguments.a)},           {"a_scales", address(arguments.a_scales)},
      {"weights", address(arguments.weights)}, {"scales", address(arguments.scales)},
      {"zeros", address(arguments.zeros)},   {"global_scale", address(arguments.global_scale)},
      {"bias", address(arguments.bias)},     {"c", address(arguments.c)}};
  const LaunchGeometry geometry = family.launch_geometry(config, plan.problem);
  if (geometry.workspace_bytes > 0) {
    const std::string layout = config.to_string() + "|" + std::to_string(geometry.workspace_bytes);
    addresses["workspace"] = impl_->workspace(stream, layout, geometry.workspace_bytes);
  }
  gemm::launch_gemm(family, config, plan.problem, kernel.kernel(), addresses, stream);
}

std::string Runtime::table_gpu() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->table ? impl_->table->gpu : std::string();
}

std::string Runtime::arch() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->arch;
}

std::size_t Runtime::loaded_kernel_count() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->kernels.size();
}

std::size_t Runtime::precompiled_kernel_count() const {
  std::lock_guard lock(impl_->mutex);
  if (!impl_->manifest) return 0;
  std::size_t count = 0;
  for (const production::CubinEntry& entry : impl_->manifest->kernels) {
    if (production::ArchTarget::parse(entry.arch).runs_on(impl_->target_sm)) ++count;
  }
  return count;
}

}  // namespace qtune::runtime_api
