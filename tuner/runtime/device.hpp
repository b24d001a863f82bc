#pragma once
// A CUDA device and its primary context (shared with the CUDA runtime and cuBLASLt), and what qtune knows about it.
#include <cuda.h>

#include <cstddef>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace qtune::runtime {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;        // "NVIDIA H200"
  std::string uuid;        // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi and NVML spell it
  std::string pci_bus_id;  // "0000:19:00.0"
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int sm_count = 0;
  int shared_memory_per_block_optin_bytes = 0;  // the most one block can get after opting in
  int shared_memory_per_sm_bytes = 0;
  int l2_cache_bytes = 0;
  int registers_per_sm = 0;
  int max_threads_per_sm = 0;
  int memory_bus_width_bits = 0;
  int sm_clock_mhz = 0;      // driver attribute: the typical SM clock
  int memory_clock_mhz = 0;  // driver attribute: the peak memory clock
  // NVML, -1 where NVML is unavailable: clocks when the information was queried, and the highest SM clock.
  int current_sm_clock_mhz = -1;
  int current_memory_clock_mhz = -1;
  int max_sm_clock_mhz = -1;
  std::size_t total_memory_bytes = 0;
  int driver_version = 0;   // 13000 for CUDA 13.0
  int runtime_version = 0;  // the CUDA runtime qtune was linked with

  int compute_capability() const { return compute_capability_major * 10 + compute_capability_minor; }
  std::string sm_name() const;  // "sm_90"
};

void to_json(nlohmann::json& json, const DeviceInfo& info);
void from_json(const nlohmann::json& json, DeviceInfo& info);

class Device {
 public:
  // Device `ordinal` with its primary context retained (once per process) and made current on the calling thread,
  // so the driver API, the CUDA runtime and cuBLASLt share it. Throws NoGpuError without a driver or device, and
  // InputError naming "device" for an ordinal out of range.
  static Device& get(int ordinal = 0);
  static int count();  // throws NoGpuError like get()

  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  int ordinal() const { return ordinal_; }
  CUdevice handle() const { return device_; }
  CUcontext context() const { return context_; }
  void make_current() const;
  // Waits for all work in the context; a kernel fault shows up here as a DriverError.
  void synchronize() const;
  // The information queried when the device was first opened.
  const DeviceInfo& info() const { return info_; }
  // Queries everything again, with the NVML clocks of now.
  DeviceInfo query() const;
  std::size_t free_memory_bytes() const;

 private:
  explicit Device(int ordinal);
  int ordinal_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  DeviceInfo info_;
};

// When a context this process opened has hit a sticky error (illegal address, ...), its description; nullopt when
// every open context is healthy or none was opened. Workers call it after a failed job to decide whether to exit.
std::optional<std::string> sticky_context_error();

// "GPU-" and the 16 bytes of a device's UUID as 8-4-4-4-12 hex digits: as nvidia-smi and NVML spell it, and what
// NVML's nvmlDeviceGetHandleByUUID and CUDA_VISIBLE_DEVICES take.
std::string gpu_uuid_text(const CUuuid& uuid);

// cudaRuntimeGetVersion of the statically linked runtime (works without a driver).
int runtime_version();

}  // namespace qtune::runtime
