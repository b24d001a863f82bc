#include "tuner/runtime/device.hpp"

#include <cuda_runtime_api.h>

#include <array>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>

#include "kernels/error.hpp"
#include "tuner/runtime/driver.hpp"
#include "tuner/runtime/nvml.hpp"

namespace qtune::runtime {

std::string DeviceInfo::sm_name() const {
  return "sm_" + std::to_string(compute_capability_major) + std::to_string(compute_capability_minor);
}

void to_json(nlohmann::json& json, const DeviceInfo& info) {
  json = nlohmann::json{{"ordinal", info.ordinal},
                        {"name", info.name},
                        {"uuid", info.uuid},
                        {"pci_bus_id", info.pci_bus_id},
                        {"compute_capability_major", info.compute_capability_major},
                        {"compute_capability_minor", info.compute_capability_minor},
                        {"sm_count", info.sm_count},
                        {"shared_memory_per_block_optin_bytes", info.shared_memory_per_block_optin_bytes},
                        {"shared_memory_per_sm_bytes", info.shared_memory_per_sm_bytes},
                        {"l2_cache_bytes", info.l2_cache_bytes},
                        {"registers_per_sm", info.registers_per_sm},
                        {"max_threads_per_sm", info.max_threads_per_sm},
                        {"memory_bus_width_bits", info.memory_bus_width_bits},
                        {"sm_clock_mhz", info.sm_clock_mhz},
                        {"memory_clock_mhz", info.memory_clock_mhz},
                        {"current_sm_clock_mhz", info.current_sm_clock_mhz},
                        {"current_memory_clock_mhz", info.current_memory_clock_mhz},
                        {"max_sm_clock_mhz", info.max_sm_clock_mhz},
                        {"total_memory_bytes", info.total_memory_bytes},
                        {"driver_version", info.driver_version},
                        {"runtime_version", info.runtime_version}};
}

void from_json(const nlohmann::json& json, DeviceInfo& info) {
  json.at("ordinal").get_to(info.ordinal);
  json.at("name").get_to(info.name);
  json.at("uuid").get_to(info.uuid);
  json.at("pci_bus_id").get_to(info.pci_bus_id);
  json.at("compute_capability_major").get_to(info.compute_capability_major);
  json.at("compute_capability_minor").get_to(info.compute_capability_minor);
  json.at("sm_count").get_to(info.sm_count);
  json.at("shared_memory_per_block_optin_bytes").get_to(info.shared_memory_per_block_optin_bytes);
  json.at("shared_memory_per_sm_bytes").get_to(info.shared_memory_per_sm_bytes);
  json.at("l2_cache_bytes").get_to(info.l2_cache_bytes);
  json.at("registers_per_sm").get_to(info.registers_per_sm);
  json.at("max_threads_per_sm").get_to(info.max_threads_per_sm);
  json.at("memory_bus_width_bits").get_to(info.memory_bus_width_bits);
  json.at("sm_clock_mhz").get_to(info.sm_clock_mhz);
  json.at("memory_clock_mhz").get_to(info.memory_clock_mhz);
  json.at("current_sm_clock_mhz").get_to(info.current_sm_clock_mhz);
  json.at("current_memory_clock_mhz").get_to(info.current_memory_clock_mhz);
  json.at("max_sm_clock_mhz").get_to(info.max_sm_clock_mhz);
  json.at("total_memory_bytes").get_to(info.total_memory_bytes);
  json.at("driver_version").get_to(info.driver_version);
  json.at("runtime_version").get_to(info.runtime_version);
}

int runtime_version() {
  int version = 0;
  const cudaError_t result = cudaRuntimeGetVersion(&version);
  if (result != cudaSuccess) {
    QTUNE_LIBRARY_ERROR("CUDA runtime", std::string("cudaRuntimeGetVersion failed: ") + cudaGetErrorName(result));
  }
  return version;
}

std::string gpu_uuid_text(const CUuuid& uuid) {
  std::string text = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    std::array<char, 3> hex{};
    std::snprintf(hex.data(), hex.size(), "%02x", static_cast<unsigned>(static_cast<unsigned char>(uuid.bytes[i])));
    text += hex.data();
  }
  return text;
}

namespace {

int attribute(CUdevice device, CUdevice_attribute which) {
  int value = 0;
  QTUNE_CU(cuDeviceGetAttribute, &value, which, device);
  return value;
}

struct DeviceRegistry {
  std::mutex mutex;
  std::map<int, std::unique_ptr<Device>> devices;
};

DeviceRegistry& registry() {
  // Never destroyed: primary contexts stay retained until the process exits.
  static DeviceRegistry* devices = new DeviceRegistry;
  return *devices;
}

}  // namespace

Device::Device(int ordinal) : ordinal_(ordinal) {
  QTUNE_CU(cuDeviceGet, &device_, ordinal);
  QTUNE_CU(cuDevicePrimaryCtxRetain, &context_, device_);
  make_current();
  info_ = query();
}

Device& Device::get(int ordinal) {
  const Driver& driver = Driver::get();
  if (ordinal < 0 || ordinal >= driver.device_count()) {
    QTUNE_INPUT_ERROR("device: ordinal " + std::to_string(ordinal) + " is out of range; this machine has " +
                      std::to_string(driver.device_count()) + " CUDA device(s)");
  }
  DeviceRegistry& devices = registry();
  std::lock_guard lock(devices.mutex);
  auto found = devices.devices.find(ordinal);
  if (found == devices.devices.end()) {
    found = devices.devices.emplace(ordinal, std::unique_ptr<Device>(new Device(ordinal))).first;
  } else {
    found->second->make_current();
  }
  return *found->second;
}

int Device::count() { return Driver::get().device_count(); }

void Device::make_current() const { QTUNE_CU(cuCtxSetCurrent, context_); }

void Device::synchronize() const {
  make_current();
  QTUNE_CU(cuCtxSynchronize);
}

std::size_t Device::free_memory_bytes() const {
  make_current();
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  QTUNE_CU(cuMemGetInfo, &free_bytes, &total_bytes);
  return free_bytes;
}

DeviceInfo Device::query() const {
  DeviceInfo info;
  info.ordinal = ordinal_;
  std::array<char, 256> name{};
  QTUNE_CU(cuDeviceGetName, name.data(), static_cast<int>(name.size()), device_);
  info.name = name.data();
  CUuuid uuid{};
  QTUNE_CU(cuDeviceGetUuid, &uuid, device_);
  info.uuid = gpu_uuid_text(uuid);
  std::array<char, 64> bus_id{};
  QTUNE_CU(cuDeviceGetPCIBusId, bus_id.data(), static_cast<int>(bus_id.size()), device_);
  info.pci_bus_id = bus_id.data();
  info.compute_capability_major = attribute(device_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  info.compute_capability_minor = attribute(device_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  info.sm_count = attribute(device_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  info.shared_memory_per_block_optin_bytes = attribute(device_, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  info.shared_memory_per_sm_bytes = attribute(device_, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
  info.l2_cache_bytes = attribute(device_, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  info.registers_per_sm = attribute(device_, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
  info.max_threads_per_sm = attribute(device_, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  info.memory_bus_width_bits = attribute(device_, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  info.sm_clock_mhz = attribute(device_, CU_DEVICE_ATTRIBUTE_CLOCK_RATE) / 1000;
  info.memory_clock_mhz = attribute(device_, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE) / 1000;
  QTUNE_CU(cuDeviceTotalMem, &info.total_memory_bytes, device_);
  info.driver_version = Driver::get().version();
  info.runtime_version = runtime_version();

  Nvml& nvml = Nvml::instance();
  if (const auto handle = nvml.find_device(info.uuid, info.pci_bus_id)) {
    const NvmlSample sample = nvml.sample(*handle);
    info.current_sm_clock_mhz = sample.sm_mhz;
    info.current_memory_clock_mhz = sample.mem_mhz;
    info.max_sm_clock_mhz = nvml.max_sm_clock_mhz(*handle);
  }
  return info;
}

std::optional<std::string> sticky_context_error() {
  if (!Driver::loaded()) return std::nullopt;
  const Driver& driver = Driver::get();
  DeviceRegistry& devices = registry();
  std::lock_guard lock(devices.mutex);
  for (const auto& [ordinal, device] : devices.devices) {
    if (driver.cuCtxSetCurrent(device->context()) != CUDA_SUCCESS) continue;
    const CUresult result = driver.cuCtxSynchronize();
    if (is_sticky_error(result)) {
      return "the CUDA context of device " + std::to_string(ordinal) + " is unusable: " + driver.describe(result);
    }
  }
  return std::nullopt;
}

}  // namespace qtune::runtime
