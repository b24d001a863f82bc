#include "tuner/runtime/driver.hpp"

#include <string_view>

#include <dlfcn.h>

#include <atomic>
#include <exception>
#include <mutex>

namespace qtune::runtime {

bool is_sticky_error(CUresult result) {
  switch (result) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_TENSOR_MEMORY_LEAK:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_NVLINK_UNCORRECTABLE:
    case CUDA_ERROR_CONTAINED:
    case CUDA_ERROR_EXTERNAL_DEVICE:
      return true;
    default:
      return false;
  }
}

bool DriverError::sticky() const { return is_sticky_error(result_); }

namespace {

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

// The CUDA version whose ABI of `symbol` matches cuda.h's plain declaration. CUDA 13 gave cuCtxSynchronize and
// cuCtxGetDevice a context argument (the _v2 functions) without renaming the plain symbols, so asking at 13.0 returns
// the wrong ABI (cuCtxGetDevice crashed on the H200, 2026-12-02).
int abi_version_of(std::string_view symbol) {
  if (symbol == "cuCtxSynchronize" || symbol == "cuCtxGetDevice") return 12000;
  return CUDA_VERSION;
}

// Loads one entry point for the ABI of the headers this file was compiled with.
void resolve(GetProcAddress get_proc_address, const char* symbol, void** target, int driver_version) {
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  const CUresult result =
      get_proc_address(symbol, target, abi_version_of(symbol), CU_GET_PROC_ADDRESS_DEFAULT, &status);
  if (result == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS && *target != nullptr) return;
  if (status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT) {
    QTUNE_THROW(NoGpuError, "the NVIDIA driver supports CUDA " + std::to_string(driver_version / 1000) + "." +
                                std::to_string(driver_version % 1000 / 10) + " but qtune needs CUDA " +
                                std::to_string(CUDA_VERSION / 1000) + "." + std::to_string(CUDA_VERSION % 1000 / 10) +
                                " (" + symbol + " is too old); update the driver");
  }
  QTUNE_LIBRARY_ERROR("CUDA driver", std::string("cuGetProcAddress could not find ") + symbol + " (CUresult " +
                                         std::to_string(result) + ", status " + std::to_string(status) + ")");
}

}  // namespace

Driver::Driver(const std::string& library) {
  // The handle is never closed: unloading the driver under live contexts is not supported.
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    QTUNE_THROW(NoGpuError, "no NVIDIA driver found (" + library + " could not be loaded)");
  }
  void* get_proc_symbol = dlsym(handle, "cuGetProcAddress_v2");
  if (get_proc_symbol == nullptr) {
    QTUNE_THROW(NoGpuError, "the NVIDIA driver in " + library +
                                " is too old for CUDA 13 (it has no cuGetProcAddress_v2); update the driver");
  }
  const auto get_proc_address = reinterpret_cast<GetProcAddress>(get_proc_symbol);

  // cuDriverGetVersion first, so that a too-old driver is reported as such.
  void* version_function = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (get_proc_address("cuDriverGetVersion", &version_function, 2020, CU_GET_PROC_ADDRESS_DEFAULT, &status) ==
          CUDA_SUCCESS &&
      version_function != nullptr) {
    reinterpret_cast<CUresult (*)(int*)>(version_function)(&version_);
  }

#define QTUNE_RESOLVE(name) resolve(get_proc_address, #name, reinterpret_cast<void**>(&name), version_);
  QTUNE_CUDA_DRIVER_FUNCTIONS(QTUNE_RESOLVE)
#undef QTUNE_RESOLVE

  const CUresult init = cuInit(0);
  if (init == CUDA_ERROR_STUB_LIBRARY) {
    QTUNE_THROW(NoGpuError, "no NVIDIA driver found (" + library + " is the CUDA toolkit's stub library)");
  }
  if (init == CUDA_ERROR_NO_DEVICE) QTUNE_THROW(NoGpuError, "no CUDA device found");
  if (init != CUDA_SUCCESS) {
    QTUNE_THROW(NoGpuError, "the NVIDIA driver could not be initialised: cuInit failed: " + describe(init));
  }
  detail::check_driver(cuDeviceGetCount(&device_count_), "cuDeviceGetCount", __FILE__, __LINE__);
  if (device_count_ <= 0) QTUNE_THROW(NoGpuError, "no CUDA device found");
}

std::string Driver::describe(CUresult result) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName == nullptr || cuGetErrorName(result, &name) != CUDA_SUCCESS || name == nullptr) {
    name = nullptr;
  }
  if (cuGetErrorString == nullptr || cuGetErrorString(result, &text) != CUDA_SUCCESS || text == nullptr) {
    text = nullptr;
  }
  std::string description = name != nullptr ? name : "CUresult " + std::to_string(static_cast<int>(result));
  if (text != nullptr) description += std::string(" (") + text + ")";
  return description;
}

namespace {

struct DriverSlot {
  std::once_flag once;
  std::atomic<const Driver*> driver{nullptr};
  std::exception_ptr failure;
};

DriverSlot& driver_slot() {
  // Never destroyed: the driver must outlive every static object that might still release GPU resources.
  static DriverSlot* slot = new DriverSlot;
  return *slot;
}

}  // namespace

const Driver& Driver::get() {
  DriverSlot& slot = driver_slot();
  std::call_once(slot.once, [&slot] {
    try {
      slot.driver = new Driver("libcuda.so.1");
    } catch (...) {
      slot.failure = std::current_exception();
    }
  });
  if (slot.failure) std::rethrow_exception(slot.failure);
  return *slot.driver.load();
}

bool Driver::loaded() { return driver_slot().driver.load() != nullptr; }

namespace detail {

void throw_driver_error(CUresult result, const char* function, const char* file, int line) {
  std::string description;
  try {
    description = Driver::get().describe(result);
  } catch (const std::exception&) {
    description = "CUresult " + std::to_string(static_cast<int>(result));
  }
  throw DriverError(result, std::string(function) + " failed: " + description, file, line);
}

}  // namespace detail

}  // namespace qtune::runtime
