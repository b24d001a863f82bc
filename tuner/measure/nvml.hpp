#pragma once
// NVML lives in tuner/runtime (the runtime layer reads a device's clocks with it, and the production runtime holds that
// layer without measure/); measurement code keeps calling it by its measure:: names.
#include "tuner/runtime/nvml.hpp"

namespace qtune::measure {

namespace clock_event = runtime::clock_event;
using runtime::describe_clock_event_reasons;
using runtime::is_throttled;
using runtime::Nvml;
using runtime::NvmlSample;

}  // namespace qtune::measure
