#pragma once
// Loading cubins and launching their kernels through the driver API.
#include <cuda.h>

#include <memory>
#include <string>
#include <vector>

namespace qtune::runtime {

struct Dim3 {
  unsigned int x = 1;
  unsigned int y = 1;
  unsigned int z = 1;
};

struct LaunchConfig {
  Dim3 grid;
  Dim3 block;
  unsigned int dynamic_shared_bytes = 0;
};

class Module;

// One __global__ function of a loaded module; keeps the module loaded.
class Kernel {
 public:
  CUfunction get() const { return function_; }
  const std::string& name() const { return name_; }

  // Lets launches use up to `bytes` of dynamic shared memory (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
  // needed above 48 KiB.
  void set_max_dynamic_shared_memory(int bytes) const;
  int attribute(CUfunction_attribute which) const;
  int registers_per_thread() const { return attribute(CU_FUNC_ATTRIBUTE_NUM_REGS); }
  int max_threads_per_block() const { return attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK); }

  // cuLaunchKernel with one pointer per kernel parameter; a rejected launch throws DriverError. Faults inside the
  // kernel surface at the next synchronisation (Stream::synchronize, Device::synchronize).
  void launch(const LaunchConfig& config, CUstream stream, void** arguments) const;
  // launch_with(config, stream, a, b, n): passes the addresses of the given arguments, which must have exactly the
  // kernel's parameter types (CUdeviceptr or T* for pointers, the same integer widths).
  template <typename... Arguments>
  void launch_with(const LaunchConfig& config, CUstream stream, const Arguments&... arguments) const {
    void* pointers[] = {const_cast<void*>(static_cast<const void*>(&arguments))..., nullptr};
    launch(config, stream, pointers);
  }

 private:
  friend class Module;
  Kernel(std::shared_ptr<const void> module, CUfunction function, std::string name)
      : module_(std::move(module)), function_(function), name_(std::move(name)) {}
  std::shared_ptr<const void> module_;
  CUfunction function_ = nullptr;
  std::string name_;
};

class Module {
 public:
  // cuModuleLoadDataEx in the current context; a failure carries the driver's JIT/link log.
  explicit Module(const std::vector<char>& cubin);
  CUmodule get() const;
  // The function named `name` (an extern "C" name or NVRTC's lowered name); DriverError when missing.
  Kernel kernel(const std::string& name) const;

 private:
  std::shared_ptr<const void> handle_;  // holds the CUmodule; unloaded when the last Kernel goes
};

}  // namespace qtune::runtime
