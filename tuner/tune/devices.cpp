#include "tuner/tune/devices.hpp"

#include <array>
#include <cstdio>
#include <sstream>

#include "kernels/error.hpp"
#include "tuner/gemm/gemm_runner.hpp"
#include "tuner/runtime/device.hpp"
#include "tuner/runtime/driver.hpp"

namespace qtune::tune {

namespace {

int device_attribute(CUdevice device, CUdevice_attribute which) {
  int value = 0;
  QTUNE_CU(cuDeviceGetAttribute, &value, which, device);
  return value;
}

std::vector<int> parse_devices(const std::string& devices, int count) {
  std::vector<int> ordinals;
  if (devices.empty() || devices == "all") {
    for (int i = 0; i < count; ++i) ordinals.push_back(i);
    return ordinals;
  }
  std::stringstream stream(devices);
  std::string item;
  while (std::getline(stream, item, ',')) {
    size_t used = 0;
    int ordinal = -1;
    try {
      ordinal = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || ordinal < 0) {
      QTUNE_INPUT_ERROR("--devices: '" + item + "' is not a device ordinal (expected all or e.g. 0,1)");
    }
    if (ordinal >= count) {
      QTUNE_INPUT_ERROR("--devices: device " + std::to_string(ordinal) + " does not exist (" + std::to_string(count) +
                        " visible)");
    }
    ordinals.push_back(ordinal);
  }
  if (ordinals.empty()) QTUNE_INPUT_ERROR("--devices: no device given");
  return ordinals;
}

}  // namespace

std::vector<ProbedDevice> probe_devices() {
  const runtime::Driver& driver = runtime::Driver::get();
  std::vector<ProbedDevice> devices;
  for (int ordinal = 0; ordinal < driver.device_count(); ++ordinal) {
    CUdevice device = 0;
    QTUNE_CU(cuDeviceGet, &device, ordinal);
    ProbedDevice probed;
    probed.ordinal = ordinal;
    std::array<char, 256> name{};
    QTUNE_CU(cuDeviceGetName, name.data(), static_cast<int>(name.size() - 1), device);
    probed.name = name.data();
    CUuuid uuid{};
    QTUNE_CU(cuDeviceGetUuid, &uuid, device);
    probed.uuid = runtime::gpu_uuid_text(uuid);
    const int sm = device_attribute(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) * 10 +
                   device_attribute(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    try {
      probed.limits = ArchLimits::for_sm(sm);
    } catch (const InputError&) {
      probed.limits.sm = sm;
    }
    probed.limits.sm = sm;
    probed.limits.sm_count = device_attribute(device, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    probed.limits.max_shared_per_block = device_attribute(device, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    probed.limits.shared_per_sm = device_attribute(device, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
    probed.limits.registers_per_sm = device_attribute(device, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
    probed.limits.max_threads_per_sm = device_attribute(device, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
    probed.limits.max_threads_per_block = device_attribute(device, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    probed.limits.max_blocks_per_sm = device_attribute(device, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
    probed.sm_clock_mhz = device_attribute(device, CU_DEVICE_ATTRIBUTE_CLOCK_RATE) / 1000;
    probed.memory_clock_mhz = device_attribute(device, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE) / 1000;
    probed.driver_version = driver.version();
    devices.push_back(std::move(probed));
  }
  if (devices.empty()) QTUNE_THROW(NoGpuError, "no CUDA device found");
  return devices;
}

TuneTarget resolve_target(const std::string& gpu, const std::string& devices, bool dry_run) {
  const bool automatic = gpu.empty() || gpu == "auto";
  std::optional<search::GpuProfile> named;
  if (!automatic) named = search::gpu_profile_by_name(gpu, "--gpu");
  if (named && dry_run) return target_from_profile(*named);

  std::vector<ProbedDevice> probed;
  try {
    probed = probe_devices();
  } catch (const NoGpuError& error) {
    QTUNE_THROW(NoGpuError, std::string("--gpu ") + (automatic ? "auto" : gpu) + ": no usable GPU (" + error.what() +
                                "); to enumerate and compile without one, pass --gpu NAME --dry-run");
  }
  const std::vector<int> ordinals = parse_devices(devices, static_cast<int>(probed.size()));
  const ProbedDevice& first = probed[static_cast<size_t>(ordinals.front())];
  const search::DeviceIdentity identity{first.name, first.limits.sm, first.limits.sm_count};
  std::optional<search::GpuProfile> profile;
  if (named) {
    profile = search::match_device({*named}, identity);
    if (!profile) {
      QTUNE_INPUT_ERROR("--gpu: profile '" + named->name + "' does not match device " + std::to_string(first.ordinal) +
                        " (" + first.name + ", sm_" + std::to_string(first.limits.sm) + ", " +
                        std::to_string(first.limits.sm_count) + " SMs); use --gpu auto");
    }
  } else {
    try {
      profile = search::match_device(search::load_gpu_profiles(), identity);
    } catch (const InputError&) {
      profile.reset();  // no configs directory: measure under the device's own name
    }
  }

  TuneTarget target;
  target.gpu_profile = profile ? profile->name : "";
  target.gpu_name = first.name;
  target.gpu_uuid = first.uuid;
  target.limits = first.limits;  // what the device reports is authoritative for pruning
  target.arch = profile && !profile->arch.empty() ? profile->arch : gemm::nvrtc_arch(first.limits.sm);
  target.driver_version = std::to_string(first.driver_version / 1000) + "." + std::to_string((first.driver_version % 1000) / 10);
  const int runtime = runtime::runtime_version();
  target.cuda_version = std::to_string(runtime / 1000) + "." + std::to_string((runtime % 1000) / 10);
  if (first.sm_clock_mhz > 0) target.sm_clock_mhz = first.sm_clock_mhz;
  if (first.memory_clock_mhz > 0) target.mem_clock_mhz = first.memory_clock_mhz;
  for (int ordinal : ordinals) {
    const ProbedDevice& device = probed[static_cast<size_t>(ordinal)];
    // Winners are stored per GPU model: every worker must measure the same model.
    if (device.name != first.name || device.limits.sm_count != first.limits.sm_count) {
      if (devices.empty() || devices == "all") continue;
      QTUNE_INPUT_ERROR("--devices: device " + std::to_string(ordinal) + " (" + device.name + ") is not the same model as device " +
                        std::to_string(first.ordinal) + " (" + first.name + ")");
    }
    target.visible_devices.push_back(device.uuid);
  }
  // Device 0 alone: the worker sees what this process sees (no need to pin it, and MIG setups keep working).
  if (target.visible_devices.size() == 1 && ordinals.size() == 1 && ordinals.front() == 0) target.visible_devices = {""};
  return target;
}

}  // namespace qtune::tune
