#pragma once
// The GPU runtime of qtune (namespace qtune::runtime), all through libraries reached at run time:
//   driver.hpp  Driver (libcuda.so.1 via dlopen + cuGetProcAddress), QTUNE_CU(...) checked calls, DriverError
//   device.hpp  Device (primary context, shared with the CUDA runtime and cuBLASLt), DeviceInfo, gpu_uuid_text
//   nvml.hpp    Nvml (libnvidia-ml.so.1 via dlopen): clocks, temperature, power, clock-event reasons
//   memory.hpp  DeviceBuffer (plain cuMemAlloc) and host<->device copies
//   module.hpp  Module (cubin loading), Kernel (dynamic shared memory, launch)
//   stream.hpp  Stream, Event
// Without a driver or a device, Driver::get() and Device::get() throw NoGpuError saying which.
#include "tuner/runtime/device.hpp"
#include "tuner/runtime/driver.hpp"
#include "tuner/runtime/memory.hpp"
#include "tuner/runtime/module.hpp"
#include "tuner/runtime/nvml.hpp"
#include "tuner/runtime/stream.hpp"
