#pragma once
// NVML, reached at run time as the driver is (dlopen of libnvidia-ml.so.1; the few prototypes are declared in
// nvml.cpp): clocks, temperature, power and clock-event (throttle) reasons, read with a device's information and with
// every measurement. Without NVML the library reports itself unavailable with the reason and every sample comes back
// marked invalid; nothing throws.
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace qtune::runtime {

// NVML's clock event reason bits (nvmlClocksEventReason*, formerly nvmlClocksThrottleReason*).
namespace clock_event {
inline constexpr std::uint64_t kGpuIdle = 0x1;
inline constexpr std::uint64_t kApplicationsClocksSetting = 0x2;
inline constexpr std::uint64_t kSwPowerCap = 0x4;
inline constexpr std::uint64_t kHwSlowdown = 0x8;
inline constexpr std::uint64_t kSyncBoost = 0x10;
inline constexpr std::uint64_t kSwThermalSlowdown = 0x20;
inline constexpr std::uint64_t kHwThermalSlowdown = 0x40;
inline constexpr std::uint64_t kHwPowerBrakeSlowdown = 0x80;
inline constexpr std::uint64_t kDisplayClockSetting = 0x100;
}  // namespace clock_event

// Whether a reason bitmask means the clocks were held below what the GPU would otherwise run at while working:
// hardware slowdown, software or hardware thermal slowdown, power brake, or the software power cap while the GPU
// is busy. Not throttling: idle, application clock settings, sync boost and display clock settings (policy, not
// a slowdown), and the power-cap bit while the idle bit is set too (drivers report it at idle).
bool is_throttled(std::uint64_t reasons);
// "sw-power-cap,hw-thermal-slowdown"; "none" for 0.
std::string describe_clock_event_reasons(std::uint64_t reasons);

struct NvmlSample {
  bool valid = false;  // false: NVML unavailable or the device could not be read; the other fields are then -1/0
  int sm_mhz = -1;
  int mem_mhz = -1;
  int temp_c = -1;
  double power_w = -1;
  std::uint64_t throttle_reasons = 0;
  bool throttled = false;  // is_throttled(throttle_reasons)
};

void to_json(nlohmann::json& json, const NvmlSample& sample);
void from_json(const nlohmann::json& json, NvmlSample& sample);

class Nvml {
 public:
  using DeviceHandle = void*;  // an nvmlDevice_t

  // The process-wide instance (loads libnvidia-ml.so.1 and calls nvmlInit_v2 on first use).
  static Nvml& instance();
  // Loads `library` (tests pass a missing name to see the unavailable state).
  explicit Nvml(const std::string& library);
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  bool available() const { return available_; }
  // Why NVML is unavailable ("libnvidia-ml.so.1 could not be loaded: ..."); empty when available.
  const std::string& unavailable_reason() const { return unavailable_reason_; }

  // The NVML device of a CUDA device, by UUID ("GPU-...") and else by PCI bus id; nullopt when unavailable.
  std::optional<DeviceHandle> find_device(const std::string& uuid, const std::string& pci_bus_id = "") const;
  // Clocks, temperature, power and reasons now. Fields NVML cannot read stay -1; never throws.
  NvmlSample sample(DeviceHandle device) const;
  // The highest SM clock (nvmlDeviceGetMaxClockInfo); -1 when unknown.
  int max_sm_clock_mhz(DeviceHandle device) const;
  // The SM clock now; -1 when unknown.
  int sm_clock_mhz(DeviceHandle device) const;

 private:
  struct Functions;
  Functions* functions_ = nullptr;
  bool available_ = false;
  std::string unavailable_reason_;
};

}  // namespace qtune::runtime
