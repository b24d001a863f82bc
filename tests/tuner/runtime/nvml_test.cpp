#include "tuner/runtime/nvml.hpp"

#include <gtest/gtest.h>

#include <iostream>

#include "tests/tuner/runtime/gpu_test_support.hpp"
#include "tuner/runtime/device.hpp"

namespace qtune::runtime {
namespace {

TEST(Nvml, MissingLibraryIsUnavailableWithTheReason) {
  const Nvml nvml("libnvidia-ml-qtune-test-missing.so.1");
  EXPECT_FALSE(nvml.available());
  EXPECT_NE(nvml.unavailable_reason().find("libnvidia-ml-qtune-test-missing.so.1 could not be loaded"),
            std::string::npos)
      << nvml.unavailable_reason();
  EXPECT_EQ(nvml.find_device("GPU-01234567-89ab-cdef-0123-456789abcdef", "0000:19:00.0"), std::nullopt);
  const NvmlSample sample = nvml.sample(nullptr);
  EXPECT_FALSE(sample.valid);
  EXPECT_EQ(sample.sm_mhz, -1);
  EXPECT_EQ(sample.mem_mhz, -1);
  EXPECT_EQ(sample.temp_c, -1);
  EXPECT_EQ(sample.power_w, -1);
  EXPECT_FALSE(sample.throttled);
  EXPECT_EQ(nvml.sm_clock_mhz(nullptr), -1);
  EXPECT_EQ(nvml.max_sm_clock_mhz(nullptr), -1);
}

TEST(Nvml, ProcessInstanceNeverThrows) {
  Nvml& nvml = Nvml::instance();
  std::cout << "NVML " << (nvml.available() ? "available" : "unavailable: " + nvml.unavailable_reason()) << "\n";
  EXPECT_EQ(nvml.available(), nvml.unavailable_reason().empty());
  if (!nvml.available()) {
    EXPECT_FALSE(nvml.sample(nullptr).valid);
    EXPECT_EQ(nvml.find_device("GPU-00000000-0000-0000-0000-000000000000"), std::nullopt);
  }
}

TEST(Nvml, ThrottlingMeansSlowdownsNotPolicy) {
  EXPECT_FALSE(is_throttled(0));
  EXPECT_FALSE(is_throttled(clock_event::kGpuIdle));
  EXPECT_FALSE(is_throttled(clock_event::kApplicationsClocksSetting));
  EXPECT_FALSE(is_throttled(clock_event::kSyncBoost));
  EXPECT_FALSE(is_throttled(clock_event::kDisplayClockSetting));
  EXPECT_FALSE(is_throttled(clock_event::kGpuIdle | clock_event::kSwPowerCap)) << "power cap reported at idle";
  EXPECT_TRUE(is_throttled(clock_event::kSwPowerCap));
  EXPECT_TRUE(is_throttled(clock_event::kHwSlowdown));
  EXPECT_TRUE(is_throttled(clock_event::kSwThermalSlowdown));
  EXPECT_TRUE(is_throttled(clock_event::kHwThermalSlowdown | clock_event::kGpuIdle));
  EXPECT_TRUE(is_throttled(clock_event::kHwPowerBrakeSlowdown | clock_event::kSyncBoost));
}

TEST(Nvml, ReasonsAreDescribedByName) {
  EXPECT_EQ(describe_clock_event_reasons(0), "none");
  EXPECT_EQ(describe_clock_event_reasons(clock_event::kSwPowerCap | clock_event::kHwThermalSlowdown),
            "sw-power-cap,hw-thermal-slowdown");
  EXPECT_EQ(describe_clock_event_reasons(clock_event::kGpuIdle | 0x1000), "gpu-idle,other(0x1000)");
}

TEST(Nvml, SampleRoundTripsThroughJson) {
  NvmlSample sample;
  sample.valid = true;
  sample.sm_mhz = 1980;
  sample.mem_mhz = 3201;
  sample.temp_c = 41;
  sample.power_w = 312.5;
  sample.throttle_reasons = clock_event::kSwPowerCap;
  sample.throttled = true;
  const nlohmann::json json = sample;
  EXPECT_EQ(json["throttle_description"], "sw-power-cap");
  const NvmlSample back = json.get<NvmlSample>();
  EXPECT_EQ(nlohmann::json(back), json);
}

TEST(NvmlGpu, ReadsTheClocksTemperatureAndPowerOfTheGpu) {
  QTUNE_REQUIRE_GPU();
  Nvml& nvml = Nvml::instance();
  ASSERT_TRUE(nvml.available()) << "a GPU machine without NVML: " << nvml.unavailable_reason();
  const runtime::DeviceInfo& info = runtime::Device::get().info();
  const auto device = nvml.find_device(info.uuid, info.pci_bus_id);
  ASSERT_TRUE(device.has_value()) << "NVML does not know " << info.uuid << " / " << info.pci_bus_id;
  const NvmlSample sample = nvml.sample(*device);
  std::cout << "NVML sample: " << nlohmann::json(sample).dump() << ", max SM clock " << nvml.max_sm_clock_mhz(*device)
            << " MHz\n";
  EXPECT_TRUE(sample.valid);
  EXPECT_GT(sample.sm_mhz, 0);
  EXPECT_GT(sample.mem_mhz, 0);
  EXPECT_GT(sample.temp_c, 0);
  EXPECT_LT(sample.temp_c, 120);
  EXPECT_GT(sample.power_w, 0);
  EXPECT_GE(nvml.max_sm_clock_mhz(*device), sample.sm_mhz);
  EXPECT_EQ(info.max_sm_clock_mhz, nvml.max_sm_clock_mhz(*device));
  EXPECT_GT(info.current_sm_clock_mhz, 0);
}

}  // namespace
}  // namespace qtune::runtime
