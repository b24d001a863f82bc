#pragma once
// Which GPUs a tune measures on. The parent only asks the driver about devices (no context is created, so the
// parent holds no GPU memory); each measuring worker then sees exactly its GPU through CUDA_VISIBLE_DEVICES.
#include <optional>
#include <string>
#include <vector>

#include "kernels/family.hpp"
#include "search/gpu_profile.hpp"
#include "tuner/tune/tuner.hpp"

namespace qtune::tune {

struct ProbedDevice {
  int ordinal = 0;
  std::string name;  // "NVIDIA H200"
  std::string uuid;  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  ArchLimits limits;
  int sm_clock_mhz = 0;
  int memory_clock_mhz = 0;
  int driver_version = 0;  // 13000 for CUDA 13.0
};

// Every visible device. Throws NoGpuError without a driver or a device.
std::vector<ProbedDevice> probe_devices();

// The target of `qtune tune --gpu SPEC`:
//   "auto": the first device (or the first of `devices`), matched to a GPU profile when one fits (search::match_device);
//   a profile name: that profile; when measuring, the device must match it (InputError otherwise).
// `devices` ("all" or "0,2"): the ordinals measured on; all of them must be the same model as the first.
// A dry run with a profile name never touches the driver. Throws NoGpuError when a GPU is needed and there is none.
TuneTarget resolve_target(const std::string& gpu, const std::string& devices, bool dry_run);

}  // namespace qtune::tune
