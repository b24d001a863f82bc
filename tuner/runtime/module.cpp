#include "tuner/runtime/module.hpp"

#include <array>
#include <cstdint>

#include "kernels/error.hpp"
#include "tuner/runtime/driver.hpp"

namespace qtune::runtime {

namespace {

struct LoadedModule {
  CUmodule module = nullptr;
  CUcontext context = nullptr;
  ~LoadedModule() {
    if (module == nullptr) return;
    const Driver& driver = Driver::get();
    if (driver.cuCtxSetCurrent(context) == CUDA_SUCCESS) driver.cuModuleUnload(module);
  }
};

CUmodule module_of(const std::shared_ptr<const void>& handle) {
  return static_cast<const LoadedModule*>(handle.get())->module;
}

}  // namespace

Module::Module(const std::vector<char>& cubin) {
  if (cubin.empty()) QTUNE_THROW(Error, "Module: the cubin is empty");
  auto loaded = std::make_shared<LoadedModule>();
  QTUNE_CU(cuCtxGetCurrent, &loaded->context);
  if (loaded->context == nullptr) {
    QTUNE_THROW(Error, "Module: no CUDA context is current on this thread (call runtime::Device::get first)");
  }
  std::array<char, 8192> error_log{};
  std::array<CUjit_option, 2> options{CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  std::array<void*, 2> values{error_log.data(), reinterpret_cast<void*>(static_cast<std::uintptr_t>(error_log.size()))};
  const Driver& driver = Driver::get();
  const CUresult result = driver.cuModuleLoadDataEx(&loaded->module, cubin.data(), static_cast<unsigned>(options.size()),
                                                    options.data(), values.data());
  if (result != CUDA_SUCCESS) {
    loaded->module = nullptr;
    std::string message = "cuModuleLoadData failed: " + driver.describe(result);
    if (error_log[0] != '\0') message += "; log: " + std::string(error_log.data());
    throw DriverError(result, message, __FILE__, __LINE__);
  }
  handle_ = std::move(loaded);
}

CUmodule Module::get() const { return module_of(handle_); }

Kernel Module::kernel(const std::string& name) const {
  CUfunction function = nullptr;
  const Driver& driver = Driver::get();
  const CUresult result = driver.cuModuleGetFunction(&function, get(), name.c_str());
  if (result != CUDA_SUCCESS) {
    throw DriverError(result, "cuModuleGetFunction failed for '" + name + "': " + driver.describe(result), __FILE__,
                      __LINE__);
  }
  return Kernel(handle_, function, name);
}

void Kernel::set_max_dynamic_shared_memory(int bytes) const {
  QTUNE_CU(cuFuncSetAttribute, function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
}

int Kernel::attribute(CUfunction_attribute which) const {
  int value = 0;
  QTUNE_CU(cuFuncGetAttribute, &value, which, function_);
  return value;
}

void Kernel::launch(const LaunchConfig& config, CUstream stream, void** arguments) const {
  const Driver& driver = Driver::get();
  const CUresult result =
      driver.cuLaunchKernel(function_, config.grid.x, config.grid.y, config.grid.z, config.block.x, config.block.y,
                            config.block.z, config.dynamic_shared_bytes, stream, arguments, nullptr);
  if (result != CUDA_SUCCESS) {
    throw DriverError(result,
                      "cuLaunchKernel failed for '" + name_ + "' (grid " + std::to_string(config.grid.x) + "x" +
                          std::to_string(config.grid.y) + "x" + std::to_string(config.grid.z) + ", block " +
                          std::to_string(config.block.x) + "x" + std::to_string(config.block.y) + "x" +
                          std::to_string(config.block.z) + ", " + std::to_string(config.dynamic_shared_bytes) +
                          " bytes dynamic shared memory): " + driver.describe(result),
                      __FILE__, __LINE__);
  }
}

}  // namespace qtune::runtime
