#include "tuner/gemm/gemm_runner.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "kernels/codec.hpp"
#include "kernels/error.hpp"
#include "kernels/quantize.hpp"
#include "tuner/runtime/device.hpp"
#include "tuner/runtime/driver.hpp"

namespace qtune::gemm {

namespace {

std::vector<float> activations_for(const Problem& problem, uint64_t seed) {
  return random_normal(static_cast<size_t>(problem.m * problem.k), seed, 0.0f, 1.0f);
}

}  // namespace

GemmData make_gemm_data(const Problem& problem, uint64_t seed) {
  GemmData data;
  data.problem = problem;
  data.weights = quantize_weights(problem.format, random_normal(static_cast<size_t>(problem.n * problem.k), seed, 0.0f, 0.02f),
                                  problem.n, problem.k);
  data.activations = quantize_activations(problem.format, activations_for(problem, seed + 1), problem.m, problem.k);
  if (problem.has_bias) data.bias = random_normal(static_cast<size_t>(problem.n), seed + 2, 0.0f, 0.5f);
  return data;
}

GemmData with_new_activations(const GemmData& data, int64_t m, uint64_t seed) {
  GemmData result;
  result.problem = data.problem;
  result.problem.m = m;
  result.weights = data.weights;
  result.bias = data.bias;
  result.activations = quantize_activations(result.problem.format, activations_for(result.problem, seed + 1), m, result.problem.k);
  return result;
}

ReferenceResult reference_for(const GemmData& data) {
  ReferenceOptions options;
  options.bias = data.bias;
  return reference_gemm(data.activations, data.weights, options);
}

std::string nvrtc_arch(int sm) {
  if (sm == 90 || sm == 100 || sm == 103 || sm == 120 || sm == 121) return "sm_" + std::to_string(sm) + "a";
  return "sm_" + std::to_string(sm);
}

ArchLimits device_limits(int device_ordinal) {
  const runtime::DeviceInfo& info = runtime::Device::get(device_ordinal).info();
  ArchLimits limits;
  try {
    limits = ArchLimits::for_sm(info.compute_capability());
  } catch (const InputError&) {
    limits.sm = info.compute_capability();
  }
  limits.sm_count = info.sm_count;
  limits.max_shared_per_block = info.shared_memory_per_block_optin_bytes;
  limits.shared_per_sm = info.shared_memory_per_sm_bytes;
  if (info.registers_per_sm > 0) limits.registers_per_sm = info.registers_per_sm;
  if (info.max_threads_per_sm > 0) limits.max_threads_per_sm = info.max_threads_per_sm;
  return limits;
}

LoadedKernel::LoadedKernel(const KernelFamily& family, KernelConfig config, const FormatSpec& format,
                           const jit::CompiledKernel& compiled)
    : family_(&family),
      config_(std::move(config)),
      compiled_(compiled),
      module_(compiled.cubin),
      kernel_(module_.kernel(compiled.lowered_name.empty() ? family.kernel_name(config_, format) : compiled.lowered_name)) {}

uint64_t compulsory_bytes(const KernelFamily& family, const KernelConfig& config, const Problem& problem) {
  uint64_t bytes = 0;
  for (const BufferSpec& spec : family.buffers(config, problem)) {
    if (spec.role != BufferRole::Workspace) bytes += spec.bytes;
  }
  return bytes;
}

GemmDeviceData::GemmDeviceData(const KernelFamily& family, const KernelConfig& any_config, const GemmData& data)
    : family_(&family), problem_(data.problem) {
  PackedBuffers host = family.prepack_weights(data.weights, any_config);
  for (auto& [name, bytes] : family.prepack_activations(data.activations, any_config)) host[name] = std::move(bytes);
  if (problem_.has_bias) host["bias"] = family.pack_bias(data.bias, problem_.format);
  for (const BufferSpec& spec : family.buffers(any_config, problem_)) {
    if (spec.role == BufferRole::Workspace) continue;
    runtime::DeviceBuffer buffer(std::max<uint64_t>(spec.bytes, 256));
    if (spec.role != BufferRole::Output) {
      auto found = host.find(spec.name);
      if (found == host.end()) QTUNE_THROW(Error, "family " + family.name() + " prepacked no '" + spec.name + "' buffer");
      if (found->second.size() != spec.bytes) {
        QTUNE_THROW(Error, "buffer '" + spec.name + "': prepacked " + std::to_string(found->second.size()) +
                               " bytes, the family declares " + std::to_string(spec.bytes));
      }
      buffer.upload(found->second.data(), found->second.size());
    }
    buffers_.emplace(spec.name, std::move(buffer));
  }
  compulsory_bytes_ = gemm::compulsory_bytes(family, any_config, problem_);
  runtime::Device::get().synchronize();  // pageable uploads may still be in flight when cuMemcpyHtoD returns
}

void GemmDeviceData::prepare(const KernelConfig& config) {
  const LaunchGeometry geometry = family_->launch_geometry(config, problem_);
  auto found = buffers_.find("workspace");
  if (geometry.workspace_bytes > 0) {
    if (found == buffers_.end() || found->second.bytes() < geometry.workspace_bytes) {
      buffers_.erase("workspace");
      found = buffers_.emplace("workspace", runtime::DeviceBuffer(geometry.workspace_bytes)).first;
    }
    found->second.fill_bytes(0);
  }
  prepared_config_ = config.to_string();
  runtime::Device::get().synchronize();
}

void GemmDeviceData::poison_output() {
  buffers_.at("c").fill_bytes(0xFF);
  runtime::Device::get().synchronize();
}

void GemmDeviceData::launch(const LoadedKernel& kernel, CUstream stream) {
  if (kernel.config().to_string() != prepared_config_) {
    QTUNE_THROW(Error, "launch of " + kernel.config().to_string() + " without prepare() (prepared: " + prepared_config_ + ")");
  }
  std::map<std::string, uint64_t> addresses;
  for (const auto& [name, buffer] : buffers_) addresses[name] = buffer.get();
  launch_gemm(*family_, kernel.config(), problem_, kernel.kernel(), addresses, stream);
}

namespace {

// The TMA descriptor a family asked for, encoded by the driver into its kernel parameter.
void encode_tensor_map(const TensorMapRequest& request, std::vector<uint8_t>& storage) {
  if (request.offset + sizeof(CUtensorMap) > storage.size()) QTUNE_THROW(Error, "tensor map parameter outside the argument storage");
  CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  if (request.element_bytes == 2) type = CU_TENSOR_MAP_DATA_TYPE_UINT16;
  if (request.element_bytes == 4) type = CU_TENSOR_MAP_DATA_TYPE_UINT32;
  const cuuint64_t dims[2] = {request.columns, request.rows};
  const cuuint64_t strides[1] = {request.columns * request.element_bytes};
  const cuuint32_t box[2] = {request.box_columns, request.box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  CUtensorMap map;
  QTUNE_CU(cuTensorMapEncodeTiled, &map, type, 2, reinterpret_cast<void*>(request.address), dims, strides, box, element_strides,
           CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  std::memcpy(storage.data() + request.offset, &map, sizeof(map));
}

// A persistent grid: at most `persistent_ctas_per_sm` CTAs per SM of the current device and no more than reside at
// once, whole clusters, and no more clusters than the device holds at once (pairs of SMs of one GPC: fewer than SMs / 2
// where a GPC has an odd count free).
uint32_t persistent_grid(const LaunchGeometry& geometry, const runtime::Kernel& kernel) {
  CUdevice device = 0;
  QTUNE_CU(cuCtxGetDevice, &device);
  int sm_count = 0;
  QTUNE_CU(cuDeviceGetAttribute, &sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
  const uint32_t cluster = std::max<uint32_t>(geometry.cluster_ctas, 1);
  uint32_t per_sm = geometry.persistent_ctas_per_sm;
  if (cluster == 1) {
    // No more CTAs per SM than the kernel's registers and shared memory let reside at once: a CTA that waits for a
    // slot would run its units after the others have finished theirs.
    int resident = 0;
    QTUNE_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor, &resident, kernel.get(), static_cast<int>(geometry.block[0]),
             static_cast<size_t>(geometry.dynamic_shared_bytes));
    if (resident > 0) per_sm = std::min(per_sm, static_cast<uint32_t>(resident));
  }
  uint32_t clusters = std::max<uint32_t>(static_cast<uint32_t>(sm_count) * per_sm / cluster, 1);
  if (cluster > 1) {
    CUlaunchConfig config{};
    config.gridDimX = geometry.grid[0];
    config.gridDimY = config.gridDimZ = 1;
    config.blockDimX = geometry.block[0];
    config.blockDimY = config.blockDimZ = 1;
    config.sharedMemBytes = geometry.dynamic_shared_bytes;
    int resident = 0;
    QTUNE_CU(cuOccupancyMaxActiveClusters, &resident, kernel.get(), &config);
    if (resident > 0) clusters = std::min(clusters, static_cast<uint32_t>(resident));
  }
  return std::min(geometry.grid[0], clusters * cluster);
}

}  // namespace

void encode_tensor_maps(KernelArguments& arguments) {
  for (const TensorMapRequest& request : arguments.tensor_maps) encode_tensor_map(request, arguments.storage);
}

runtime::LaunchConfig launch_config(const LaunchGeometry& geometry, const runtime::Kernel& kernel) {
  // Always opt in: the 48 KiB default counts static shared memory too, so 48 KiB of dynamic memory already exceeds it.
  if (geometry.dynamic_shared_bytes > 0) kernel.set_max_dynamic_shared_memory(static_cast<int>(geometry.dynamic_shared_bytes));
  runtime::LaunchConfig launch;
  launch.grid = {geometry.persistent_ctas_per_sm > 0 ? persistent_grid(geometry, kernel) : geometry.grid[0], geometry.grid[1],
                 geometry.grid[2]};
  launch.block = {geometry.block[0], geometry.block[1], geometry.block[2]};
  launch.dynamic_shared_bytes = geometry.dynamic_shared_bytes;
  return launch;
}

void launch_gemm(const KernelFamily& family, const KernelConfig& config, const Problem& problem, const runtime::Kernel& kernel,
                 const std::map<std::string, uint64_t>& device_addresses, CUstream stream) {
  const LaunchGeometry geometry = family.launch_geometry(config, problem);
  KernelArguments arguments = family.pack_arguments(config, problem, device_addresses);
  encode_tensor_maps(arguments);
  std::vector<void*> pointers = arguments.pointers();
  kernel.launch(launch_config(geometry, kernel), stream, pointers.data());
}

std::vector<uint16_t> GemmDeviceData::output_bits() const {
  runtime::Device::get().synchronize();
  return buffers_.at("c").download<uint16_t>(static_cast<size_t>(problem_.m * problem_.n));
}

Verification verify_output(const std::vector<uint16_t>& output_bits, OutputType output, const ReferenceResult& reference,
                           double tolerance) {
  std::vector<float> got(output_bits.size());
  for (size_t i = 0; i < got.size(); ++i) {
    got[i] = output == OutputType::F16 ? f16_bits_to_float(output_bits[i]) : bf16_bits_to_float(output_bits[i]);
  }
  Verification result = compare_output(got, reference.unrounded, reference.n, CheckRules{tolerance, true});
  result.m = reference.m;
  return result;
}

}  // namespace qtune::gemm
