// libqtune_runtime: selection, kernels (precompiled or JIT) and launches for production code; see qtune_runtime.hpp.
#include <cuda.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <optional>
#include <tuple>

#include "kernels/families/mma_family.hpp"
#include "kernels/families/mma_moe.hpp"
#include "kernels/families/tma_family.hpp"
#include "kernels/families/wgmma_family.hpp"
#include "kernels/quantize.hpp"
#include "reports/selection_table.hpp"
#include "tuner/gemm/gemm_runner.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/jit/kernel_cache.hpp"
#include "tuner/production/cubin_store.hpp"
#include "tuner/production/kernel_sources.hpp"
#include "tuner/production/qtune_runtime.hpp"
#include "tuner/production/selector.hpp"
#include "tuner/production/tensor_map_cache.hpp"
#include "tuner/runtime/device.hpp"
#include "tuner/runtime/driver.hpp"
#include "tuner/runtime/memory.hpp"
#include "tuner/runtime/module.hpp"

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

std::uint64_t round_up_bytes(std::uint64_t bytes, std::uint64_t multiple) { return (bytes + multiple - 1) / multiple * multiple; }

runtime::LaunchConfig launch_config(const LaunchGeometry& geometry) {
  runtime::LaunchConfig launch;
  launch.grid = {geometry.grid[0], geometry.grid[1], geometry.grid[2]};
  launch.block = {geometry.block[0], geometry.block[1], geometry.block[2]};
  launch.dynamic_shared_bytes = geometry.dynamic_shared_bytes;
  return launch;
}

// A MoE kernel (GEMM, alignment, gather or reduction), precompiled or compiled by the JIT, and loaded.
struct MoeKernel {
  runtime::Module module;
  runtime::Kernel kernel;
  MoeKernel(const std::vector<char>& cubin, const std::string& name) : module(cubin), kernel(module.kernel(name)) {}
};

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
  // One kernel of a MoE call: which, where it comes from and, once loaded, the kernel.
  struct MoeKernelSlot {
    production::MoeKernelSpec spec;  // spec.arch: the cubin's where the manifest has one, else the JIT target
    const production::MoeCubinEntry* cubin = nullptr;
    std::size_t cubin_index = 0;
    std::shared_ptr<const MoeKernel> kernel;
  };
  // One MoE call shape resolved: its configuration, launch sizes and, once loaded, its kernels.
  struct MoePlan {
    MoeProblem problem;
    production::Selection selection;
    std::int64_t launch_rows = 0;
    LaunchGeometry gemm_geometry, align_geometry, reduce_geometry, gather_geometry;
    std::uint64_t table_bytes = 0;      // rows, then block_experts, then padded_rows (int32 each)
    std::uint64_t unreduced_bytes = 0;  // down: the GEMM's router-weighted [pairs][n] rows
    // tma: the pairs' activation rows gathered into layout order ([launch_rows][k]), then their scales at
    // gathered_scales_offset (mma_moe::buffers' "gathered" and "gathered_scales").
    std::uint64_t gathered_bytes = 0, gathered_scales_offset = 0;
    MoeKernelSlot gemm, align;                     // production::moe_call_kernels: the GEMM's target is sm_90a for
    std::optional<MoeKernelSlot> gather, reduce;  // wgmma and tma; tma's gather; down's reduction
    runtime::LaunchConfig gemm_launch;  // once the GEMM is loaded: persistent grids capped to the device
  };
  // A stream's MoE scratch: the row tables, down's unreduced rows and tma's gathered rows.
  struct MoeScratch {
    runtime::DeviceBuffer tables, unreduced, gathered;
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
  std::map<std::tuple<std::string, int, int, std::int64_t, std::int64_t, std::int64_t, std::string>, MoePlan> moe_plans;
  std::map<std::string, std::shared_ptr<const MoeKernel>> moe_kernels;
  std::map<CUstream, MoeScratch> moe_scratch;
  // tma's activation maps, encoded once per (plan shape, stream scratch address): moe_gemm's hot path skips the driver.
  production::TensorMapCache tensor_maps{gemm::encode_tensor_maps};

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
    plan.arch = production::kernel_arch(plan.selection.config.family, arch);
    if (manifest) {
      plan.cubin = manifest->find(plan.problem.format.to_string(), plan.selection.config, target_sm, plan.arch);
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
        compiled = jit_compiler().compile(production::gemm_compile_request(selection.config, plan.problem.format, plan.arch));
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

  MoePlan& moe_plan(std::string_view format_text, const MoeShape& shape) {
    const auto key = std::make_tuple(std::string(format_text), shape.experts, shape.top_k, shape.n, shape.k, shape.tokens,
                                     std::string(shape.projection));
    if (auto found = moe_plans.find(key); found != moe_plans.end()) return found->second;
    MoePlan plan;
    plan.problem = production::make_moe_problem(format(format_text), shape.experts, shape.top_k, shape.n, shape.k, shape.tokens,
                                                 shape.projection);
    plan.selection = production::select_moe_config(table ? &*table : nullptr, plan.problem, limits);
    const KernelConfig& config = plan.selection.config;
    const int bm = config.get("bm");
    for (production::MoeKernelSpec& spec : production::moe_call_kernels(config, plan.problem, limits, arch)) {
      MoeKernelSlot slot = moe_kernel_slot(std::move(spec));
      switch (slot.spec.kind) {
        case production::MoeKernelKind::Gemm: plan.gemm = std::move(slot); break;
        case production::MoeKernelKind::Align: plan.align = std::move(slot); break;
        case production::MoeKernelKind::Gather: plan.gather = std::move(slot); break;
        case production::MoeKernelKind::Reduce: plan.reduce = std::move(slot); break;
      }
    }
    plan.launch_rows = mma_moe::launch_rows(plan.problem, bm, MoeRowMap{});
    plan.gemm_geometry = mma_moe::launch_geometry(config, plan.problem, plan.launch_rows);
    plan.align_geometry = mma_moe::align_launch_geometry(plan.problem.experts, plan.align.spec.threads);
    plan.table_bytes = (static_cast<std::uint64_t>(plan.launch_rows) + static_cast<std::uint64_t>(plan.launch_rows / bm) + 1) * 4;
    const bool down = plan.problem.projection == qtune::MoeProjection::Down;
    if (down) {
      plan.reduce_geometry = mma_moe::reduce_launch_geometry(plan.problem);
      plan.unreduced_bytes = static_cast<std::uint64_t>(plan.problem.tokens * plan.problem.top_k * plan.problem.n) * 2;
    }
    if (plan.gather) {
      plan.gather_geometry = mma_moe::gather_launch_geometry(plan.launch_rows);
      std::uint64_t scales = 0;
      for (const BufferSpec& spec : mma_moe::buffers(config, plan.problem, plan.launch_rows)) {
        if (spec.name == "gathered") plan.gathered_bytes = spec.bytes;
        if (spec.name == "gathered_scales") scales = spec.bytes;
      }
      // The tensor map needs a 16-byte aligned base; 256 keeps the scales as aligned as an allocation's start.
      plan.gathered_scales_offset = round_up_bytes(plan.gathered_bytes, 256);
      plan.gathered_bytes = plan.gathered_scales_offset + scales;
    }
    if (moe_plans.size() >= kMaxCachedPlans) moe_plans.clear();
    return moe_plans.emplace(key, std::move(plan)).first->second;
  }

  // A MoE kernel to load: the manifest's cubin where it lists one that runs here, else the JIT's for spec.arch.
  MoeKernelSlot moe_kernel_slot(production::MoeKernelSpec spec) const {
    MoeKernelSlot slot;
    slot.spec = std::move(spec);
    if (manifest) {
      slot.cubin = manifest->find_moe(slot.spec, target_sm);
      if (slot.cubin != nullptr) {
        slot.cubin_index = static_cast<std::size_t>(slot.cubin - manifest->moe_kernels.data());
        slot.spec.arch = slot.cubin->kernel.arch;
      }
    }
    return slot;
  }

  void load(MoeKernelSlot& slot) {
    if (slot.kernel) return;
    const std::string key = slot.spec.key();
    auto found = moe_kernels.find(key);
    if (found == moe_kernels.end()) {
      device();
      std::shared_ptr<const MoeKernel> kernel;
      if (slot.cubin != nullptr) {
        kernel = std::make_shared<const MoeKernel>(production::read_cubin(options.cubin_directory, *slot.cubin, slot.cubin_index),
                                                   slot.cubin->kernel_name);
      } else {
        const jit::CompileRequest request = slot.spec.compile_request();
        kernel = std::make_shared<const MoeKernel>(jit_compiler().compile(request).cubin, request.kernel_name);
      }
      found = moe_kernels.emplace(key, std::move(kernel)).first;
    }
    slot.kernel = found->second;
  }

  void load_moe_kernels(MoePlan& plan) {
    if (!plan.gemm.kernel) {
      load(plan.gemm);
      // Opts in to the shared memory and caps a persistent grid to the device's SMs, once per plan.
      plan.gemm_launch = gemm::launch_config(plan.gemm_geometry, plan.gemm.kernel->kernel);
    }
    if (plan.gather) load(*plan.gather);
    if (!plan.align.kernel) {
      load(plan.align);
      // Kernels of several expert counts share it: allow the most the device has once beyond the default 48 KiB.
      if (plan.align_geometry.dynamic_shared_bytes > 48 * 1024) plan.align.kernel->kernel.set_max_dynamic_shared_memory(limits.max_shared_per_block);
    }
    if (plan.reduce) load(*plan.reduce);
  }

  // A stream's scratch buffer of at least `bytes`; growing it first waits for the stream (launches in flight may
  // still use the old one).
  CUdeviceptr grow(runtime::DeviceBuffer& buffer, std::uint64_t bytes, CUstream stream) {
    if (buffer.bytes() < bytes) {
      if (buffer.bytes() > 0) QTUNE_CU(cuStreamSynchronize, stream);
      buffer = runtime::DeviceBuffer();
      buffer = runtime::DeviceBuffer(round_up_bytes(bytes, kWorkspaceGranule));
    }
    return buffer.get();
  }

  // The device addresses of a MoE call's scratch on `stream`: "rows", "block_experts", "padded_rows", down's "c" (the
  // unreduced rows), the split-K "workspace" and tma's "gathered" and "gathered_scales".
  std::map<std::string, std::uint64_t> moe_scratch_addresses(const MoePlan& plan, CUstream stream) {
    MoeScratch& scratch = moe_scratch[stream];
    std::map<std::string, std::uint64_t> addresses;
    const CUdeviceptr tables = grow(scratch.tables, plan.table_bytes, stream);
    const auto rows = static_cast<std::uint64_t>(plan.launch_rows);
    addresses["rows"] = tables;
    addresses["block_experts"] = tables + rows * 4;
    addresses["padded_rows"] = tables + (rows + rows / static_cast<std::uint64_t>(plan.selection.config.get("bm"))) * 4;
    if (plan.unreduced_bytes > 0) addresses["c"] = grow(scratch.unreduced, plan.unreduced_bytes, stream);
    if (plan.gathered_bytes > 0) {
      // The gather writes every row the GEMM reads (padding rows as zeros) on each call: nothing to clear.
      const CUdeviceptr gathered = grow(scratch.gathered, plan.gathered_bytes, stream);
      addresses["gathered"] = gathered;
      if (plan.gathered_bytes > plan.gathered_scales_offset) addresses["gathered_scales"] = gathered + plan.gathered_scales_offset;
    }
    if (plan.gemm_geometry.workspace_bytes > 0) {
      const KernelConfig& config = plan.selection.config;
      const std::string layout =
          "moe|" + config.family + ":" + config.to_string() + "|" + std::to_string(plan.gemm_geometry.workspace_bytes);
      addresses["workspace"] = workspace(stream, layout, plan.gemm_geometry.workspace_bytes);
    }
    return addresses;
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
  if (impl_ && (!impl_->workspaces.empty() || !impl_->moe_scratch.empty())) {
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

PackedActivations Runtime::quantize_activations(std::string_view format, std::int64_t m, std::int64_t n, std::int64_t k,
                                                std::span<const float> activations) const {
  std::lock_guard lock(impl_->mutex);
  const FormatSpec& spec = impl_->format(format);
  if (activations.size() != static_cast<std::size_t>(m) * static_cast<std::size_t>(k)) {
    QTUNE_INPUT_ERROR("activations: " + std::to_string(activations.size()) + " values for m x k = " + std::to_string(m) + " x " +
                      std::to_string(k));
  }
  const Impl::Plan& plan = impl_->plan(format, m, n, k, false);
  PackedBuffers packed = plan.selection.family->prepack_activations(
      qtune::quantize_activations(spec, {activations.begin(), activations.end()}, m, k), plan.selection.config);
  PackedActivations result;
  result.a = std::move(packed["a"]);
  if (const auto scales = packed.find("a_scales"); scales != packed.end()) result.a_scales = std::move(scales->second);
  return result;
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
    const std::string layout = config.family + ":" + config.to_string() + "|" + std::to_string(geometry.workspace_bytes);
    addresses["workspace"] = impl_->workspace(stream, layout, geometry.workspace_bytes);
  }
  gemm::launch_gemm(family, config, plan.problem, kernel.kernel(), addresses, stream);
}

MoeChoice Runtime::select_moe(std::string_view format, const MoeShape& shape) const {
  std::lock_guard lock(impl_->mutex);
  const Impl::MoePlan& plan = impl_->moe_plan(format, shape);
  MoeChoice choice;
  choice.choice = plan.selection.choice();
  choice.block_rows = plan.selection.config.get("bm");
  choice.launch_rows = plan.launch_rows;
  choice.scratch_bytes = plan.table_bytes + plan.unreduced_bytes + plan.gemm_geometry.workspace_bytes + plan.gathered_bytes;
  choice.arch = plan.gemm.spec.arch;
  const bool precompiled = plan.gemm.cubin != nullptr && plan.align.cubin != nullptr &&
                           (!plan.gather || plan.gather->cubin != nullptr) && (!plan.reduce || plan.reduce->cubin != nullptr);
  choice.origin = precompiled ? KernelOrigin::Precompiled : KernelOrigin::Jit;
  if (plan.gemm.cubin != nullptr) choice.cubin = impl_->options.cubin_directory / plan.gemm.cubin->file;
  return choice;
}

PackedExperts Runtime::prepack_moe(std::string_view format, std::int64_t n, std::int64_t k,
                                   std::span<const HostQuantizedWeights> experts) const {
  std::lock_guard lock(impl_->mutex);
  const FormatSpec& spec = impl_->format(format);
  if (experts.empty()) QTUNE_INPUT_ERROR("experts: no expert weights given");
  // The shape's rules as a MoE problem of one token (top_k 1): n, k and the format's own.
  production::make_moe_problem(spec, static_cast<int>(experts.size()), 1, n, k, 1, "gate-up");
  const ArchSupport support = mma_family().supports(spec, impl_->target_sm);
  if (!support.supported) QTUNE_THROW(UnsupportedError, support.reason);
  std::vector<QuantizedWeights> quantized;
  quantized.reserve(experts.size());
  for (std::size_t e = 0; e < experts.size(); ++e) {
    const HostQuantizedWeights& weights = experts[e];
    try {
      quantized.push_back(weights_from_codes(spec, n, k, {weights.codes.begin(), weights.codes.end()},
                                             {weights.scale_bits.begin(), weights.scale_bits.end()},
                                             {weights.zero_point_bits.begin(), weights.zero_point_bits.end()}, weights.global_scale));
    } catch (const InputError& error) {
      QTUNE_INPUT_ERROR("experts[" + std::to_string(e) + "]: " + error.what());
    }
  }
  PackedBuffers buffers = mma_moe::prepack_experts(quantized, spec, n, k);
  const mma_moe::ExpertStrides strides = mma_moe::expert_strides(spec, n, k);
  PackedExperts packed;
  packed.format = spec.to_string();
  packed.family = mma_family().name();
  packed.experts = static_cast<int>(experts.size());
  packed.n = n;
  packed.k = k;
  packed.weights = std::move(buffers["weights"]);
  packed.scales = std::move(buffers["scales"]);
  if (auto zeros = buffers.find("zeros"); zeros != buffers.end()) packed.zeros = std::move(zeros->second);
  packed.global_scale = std::move(buffers["global_scale"]);
  packed.weight_stride = strides.weights;
  packed.scale_stride = strides.scales;
  packed.zero_stride = strides.zeros;
  return packed;
}

void Runtime::load_moe(std::string_view format, const MoeShape& shape, CUstream_st* stream) {
  std::lock_guard lock(impl_->mutex);
  Impl::MoePlan& plan = impl_->moe_plan(format, shape);
  impl_->device();
  impl_->load_moe_kernels(plan);
  impl_->moe_scratch_addresses(plan, stream);
}

void Runtime::moe_gemm(std::string_view format, const MoeShape& shape, const MoeGemmArguments& arguments, CUstream_st* stream) {
  std::lock_guard lock(impl_->mutex);
  Impl::MoePlan& plan = impl_->moe_plan(format, shape);
  const MoeProblem& problem = plan.problem;
  const bool down = problem.projection == qtune::MoeProjection::Down;
  if (arguments.topk_ids == nullptr) QTUNE_INPUT_ERROR("topk_ids: the routing's expert ids are required");
  if (down && arguments.topk_weights == nullptr) QTUNE_INPUT_ERROR("topk_weights: the down projection needs the router weights");
  if (arguments.c == nullptr) QTUNE_INPUT_ERROR("c: the output is required");
  impl_->device();
  impl_->load_moe_kernels(plan);
  std::map<std::string, std::uint64_t> addresses = impl_->moe_scratch_addresses(plan, stream);
  addresses["topk_ids"] = address(arguments.topk_ids);
  addresses["a"] = address(arguments.a);
  addresses["a_scales"] = address(arguments.a_scales);
  addresses["weights"] = address(arguments.weights);
  addresses["scales"] = address(arguments.scales);
  addresses["zeros"] = address(arguments.zeros);
  addresses["global_scale"] = address(arguments.global_scale);
  if (down) {
    addresses["router_weights"] = address(arguments.topk_weights);
    addresses["reduced"] = address(arguments.c);
  } else {
    addresses["c"] = address(arguments.c);
  }
  // Every argument is packed (and a missing one refused) before anything is enqueued.
  KernelArguments align = mma_moe::pack_align_arguments(problem, plan.launch_rows, addresses);
  KernelArguments gemm = mma_moe::pack_arguments(plan.selection.config, problem, plan.launch_rows, addresses);
  // tma: the activation map over the gathered rows, encoded on the host (no stream work, so capturable) once per plan
  // and scratch address: the gather refills those rows on every call, so new activations need no new map.
  impl_->tensor_maps.fill(gemm);
  std::optional<KernelArguments> gather, reduce;
  if (plan.gather) gather = mma_moe::pack_gather_arguments(plan.selection.config, problem, plan.launch_rows, addresses);
  if (down) reduce = mma_moe::pack_reduce_arguments(problem, addresses);

  // Stream order is the only synchronisation: the gather and the GEMM read the tables the alignment writes, the GEMM
  // the rows the gather writes, the reduction the rows the GEMM writes, and the next call's alignment and gather run
  // after this call's GEMM has read them.
  std::vector<void*> align_pointers = align.pointers();
  plan.align.kernel->kernel.launch(launch_config(plan.align_geometry), stream, align_pointers.data());
  if (gather) {
    std::vector<void*> gather_pointers = gather->pointers();
    plan.gather->kernel->kernel.launch(launch_config(plan.gather_geometry), stream, gather_pointers.data());
  }
  std::vector<void*> gemm_pointers = gemm.pointers();
  plan.gemm.kernel->kernel.launch(plan.gemm_launch, stream, gemm_pointers.data());
  if (reduce) {
    std::vector<void*> reduce_pointers = reduce->pointers();
    plan.reduce->kernel->kernel.launch(launch_config(plan.reduce_geometry), stream, reduce_pointers.data());
  }
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
  return impl_->kernels.size() + impl_->moe_kernels.size();
}

std::size_t Runtime::precompiled_kernel_count() const {
  std::lock_guard lock(impl_->mutex);
  if (!impl_->manifest) return 0;
  std::size_t count = 0;
  for (const production::CubinEntry& entry : impl_->manifest->kernels) {
    if (production::ArchTarget::parse(entry.arch).runs_on(impl_->target_sm)) ++count;
  }
  for (const production::MoeCubinEntry& entry : impl_->manifest->moe_kernels) {
    if (production::ArchTarget::parse(entry.kernel.arch).runs_on(impl_->target_sm)) ++count;
  }
  return count;
}

}  // namespace qtune::runtime_api
