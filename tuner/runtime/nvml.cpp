#include "tuner/runtime/nvml.hpp"

#include <dlfcn.h>

#include <array>
#include <cstdio>
#include <utility>
#include <vector>

namespace qtune::runtime {

namespace {

// The NVML declarations qtune needs (there is no nvml.h in the toolkit here); values as in nvml.h.
using NvmlReturn = int;  // nvmlReturn_t
constexpr NvmlReturn kNvmlSuccess = 0;
using NvmlDevice = void*;          // nvmlDevice_t
constexpr int kNvmlClockSm = 1;    // NVML_CLOCK_SM
constexpr int kNvmlClockMem = 2;   // NVML_CLOCK_MEM
constexpr int kNvmlTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU

using InitFunction = NvmlReturn (*)();
using ShutdownFunction = NvmlReturn (*)();
using ErrorStringFunction = const char* (*)(NvmlReturn);
using HandleByStringFunction = NvmlReturn (*)(const char*, NvmlDevice*);
using ClockInfoFunction = NvmlReturn (*)(NvmlDevice, int, unsigned int*);
using TemperatureFunction = NvmlReturn (*)(NvmlDevice, int, unsigned int*);
using PowerUsageFunction = NvmlReturn (*)(NvmlDevice, unsigned int*);
using ReasonsFunction = NvmlReturn (*)(NvmlDevice, unsigned long long*);

}  // namespace

struct Nvml::Functions {
  void* library = nullptr;
  InitFunction init = nullptr;
  ShutdownFunction shutdown = nullptr;
  ErrorStringFunction error_string = nullptr;
  HandleByStringFunction handle_by_uuid = nullptr;
  HandleByStringFunction handle_by_pci_bus_id = nullptr;
  ClockInfoFunction clock_info = nullptr;
  ClockInfoFunction max_clock_info = nullptr;
  TemperatureFunction temperature = nullptr;
  PowerUsageFunction power_usage = nullptr;
  ReasonsFunction reasons = nullptr;
};

bool is_throttled(std::uint64_t reasons) {
  constexpr std::uint64_t slowdowns = clock_event::kHwSlowdown | clock_event::kSwThermalSlowdown |
                                      clock_event::kHwThermalSlowdown | clock_event::kHwPowerBrakeSlowdown;
  if ((reasons & slowdowns) != 0) return true;
  return (reasons & clock_event::kSwPowerCap) != 0 && (reasons & clock_event::kGpuIdle) == 0;
}

std::string describe_clock_event_reasons(std::uint64_t reasons) {
  static const std::array<std::pair<std::uint64_t, const char*>, 9> names{{
      {clock_event::kGpuIdle, "gpu-idle"},
      {clock_event::kApplicationsClocksSetting, "applications-clocks"},
      {clock_event::kSwPowerCap, "sw-power-cap"},
      {clock_event::kHwSlowdown, "hw-slowdown"},
      {clock_event::kSyncBoost, "sync-boost"},
      {clock_event::kSwThermalSlowdown, "sw-thermal-slowdown"},
      {clock_event::kHwThermalSlowdown, "hw-thermal-slowdown"},
      {clock_event::kHwPowerBrakeSlowdown, "hw-power-brake"},
      {clock_event::kDisplayClockSetting, "display-clocks"},
  }};
  std::string text;
  std::uint64_t known = 0;
  for (const auto& [bit, name] : names) {
    known |= bit;
    if ((reasons & bit) == 0) continue;
    if (!text.empty()) text += ',';
    text += name;
  }
  if ((reasons & ~known) != 0) {
    if (!text.empty()) text += ',';
    std::array<char, 24> hex{};
    std::snprintf(hex.data(), hex.size(), "%llx", static_cast<unsigned long long>(reasons & ~known));
    text += std::string("other(0x") + hex.data() + ")";
  }
  return text.empty() ? "none" : text;
}

void to_json(nlohmann::json& json, const NvmlSample& sample) {
  json = nlohmann::json{{"valid", sample.valid},
                        {"sm_mhz", sample.sm_mhz},
                        {"mem_mhz", sample.mem_mhz},
                        {"temp_c", sample.temp_c},
                        {"power_w", sample.power_w},
                        {"throttle_reasons", sample.throttle_reasons},
                        {"throttle_description", describe_clock_event_reasons(sample.throttle_reasons)},
                        {"throttled", sample.throttled}};
}

void from_json(const nlohmann::json& json, NvmlSample& sample) {
  json.at("valid").get_to(sample.valid);
  json.at("sm_mhz").get_to(sample.sm_mhz);
  json.at("mem_mhz").get_to(sample.mem_mhz);
  json.at("temp_c").get_to(sample.temp_c);
  json.at("power_w").get_to(sample.power_w);
  json.at("throttle_reasons").get_to(sample.throttle_reasons);
  json.at("throttled").get_to(sample.throttled);
}

Nvml& Nvml::instance() {
  // Never destroyed: NVML may be sampled from static destructors of other objects.
  static Nvml* nvml = new Nvml("libnvidia-ml.so.1");
  return *nvml;
}

Nvml::Nvml(const std::string& library) : functions_(new Functions) {
  Functions& f = *functions_;
  f.library = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (f.library == nullptr) {
    const char* error = dlerror();
    unavailable_reason_ = library + " could not be loaded" + (error != nullptr ? std::string(": ") + error : "");
    return;
  }
  const auto symbol = [&f](const char* name) { return dlsym(f.library, name); };
  f.init = reinterpret_cast<InitFunction>(symbol("nvmlInit_v2"));
  f.shutdown = reinterpret_cast<ShutdownFunction>(symbol("nvmlShutdown"));
  f.error_string = reinterpret_cast<ErrorStringFunction>(symbol("nvmlErrorString"));
  f.handle_by_uuid = reinterpret_cast<HandleByStringFunction>(symbol("nvmlDeviceGetHandleByUUID"));
  f.handle_by_pci_bus_id = reinterpret_cast<HandleByStringFunction>(symbol("nvmlDeviceGetHandleByPciBusId_v2"));
  f.clock_info = reinterpret_cast<ClockInfoFunction>(symbol("nvmlDeviceGetClockInfo"));
  f.max_clock_info = reinterpret_cast<ClockInfoFunction>(symbol("nvmlDeviceGetMaxClockInfo"));
  f.temperature = reinterpret_cast<TemperatureFunction>(symbol("nvmlDeviceGetTemperature"));
  f.power_usage = reinterpret_cast<PowerUsageFunction>(symbol("nvmlDeviceGetPowerUsage"));
  // Drivers from 535 on name the reasons "clock events"; older ones only have the throttle-reason name.
  f.reasons = reinterpret_cast<ReasonsFunction>(symbol("nvmlDeviceGetCurrentClocksEventReasons"));
  if (f.reasons == nullptr) {
    f.reasons = reinterpret_cast<ReasonsFunction>(symbol("nvmlDeviceGetCurrentClocksThrottleReasons"));
  }
  if (f.init == nullptr || f.shutdown == nullptr || f.handle_by_uuid == nullptr || f.clock_info == nullptr) {
    unavailable_reason_ = library + " lacks nvmlInit_v2, nvmlShutdown, nvmlDeviceGetHandleByUUID or "
                                    "nvmlDeviceGetClockInfo";
    return;
  }
  const NvmlReturn result = f.init();
  if (result != kNvmlSuccess) {
    const char* text = f.error_string != nullptr ? f.error_string(result) : nullptr;
    unavailable_reason_ = "nvmlInit_v2 failed: " + (text != nullptr ? std::string(text) : std::to_string(result));
    return;
  }
  available_ = true;
}

Nvml::~Nvml() {
  if (available_) functions_->shutdown();
  // The library stays loaded: NVML keeps threads that must not lose their code.
  delete functions_;
}

std::optional<Nvml::DeviceHandle> Nvml::find_device(const std::string& uuid, const std::string& pci_bus_id) const {
  if (!available_) return std::nullopt;
  NvmlDevice device = nullptr;
  if (!uuid.empty() && functions_->handle_by_uuid(uuid.c_str(), &device) == kNvmlSuccess) return device;
  if (!pci_bus_id.empty() && functions_->handle_by_pci_bus_id != nullptr &&
      functions_->handle_by_pci_bus_id(pci_bus_id.c_str(), &device) == kNvmlSuccess) {
    return device;
  }
  return std::nullopt;
}

int Nvml::sm_clock_mhz(DeviceHandle device) const {
  if (!available_ || device == nullptr) return -1;
  unsigned int mhz = 0;
  if (functions_->clock_info(device, kNvmlClockSm, &mhz) != kNvmlSuccess) return -1;
  return static_cast<int>(mhz);
}

int Nvml::max_sm_clock_mhz(DeviceHandle device) const {
  if (!available_ || device == nullptr || functions_->max_clock_info == nullptr) return -1;
  unsigned int mhz = 0;
  if (functions_->max_clock_info(device, kNvmlClockSm, &mhz) != kNvmlSuccess) return -1;
  return static_cast<int>(mhz);
}

NvmlSample Nvml::sample(DeviceHandle device) const {
  NvmlSample sample;
  if (!available_ || device == nullptr) return sample;
  const Functions& f = *functions_;
  unsigned int value = 0;
  if (f.clock_info(device, kNvmlClockSm, &value) == kNvmlSuccess) sample.sm_mhz = static_cast<int>(value);
  if (f.clock_info(device, kNvmlClockMem, &value) == kNvmlSuccess) sample.mem_mhz = static_cast<int>(value);
  if (f.temperature != nullptr && f.temperature(device, kNvmlTemperatureGpu, &value) == kNvmlSuccess) {
    sample.temp_c = static_cast<int>(value);
  }
  if (f.power_usage != nullptr && f.power_usage(device, &value) == kNvmlSuccess) {
    sample.power_w = static_cast<double>(value) / 1000.0;  // NVML reports milliwatts
  }
  unsigned long long reasons = 0;
  if (f.reasons != nullptr && f.reasons(device, &reasons) == kNvmlSuccess) {
    sample.throttle_reasons = static_cast<std::uint64_t>(reasons);
  }
  sample.throttled = is_throttled(sample.throttle_reasons);
  sample.valid = sample.sm_mhz >= 0;
  return sample;
}

}  // namespace qtune::runtime
