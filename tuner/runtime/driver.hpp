#pragma once
// The CUDA driver API, reached at run time: libcuda.so.1 is opened with dlopen and every entry point comes from
// cuGetProcAddress for the CUDA version of the headers (13.0), so qtune never links libcuda and runs (without a GPU)
// on machines that have no NVIDIA driver. Every call goes through QTUNE_CU, which throws DriverError on failure.
#include <cuda.h>

#include <string>

#include "kernels/error.hpp"

namespace qtune::runtime {

// The driver functions qtune uses. X(name) gets the API name as written in cuda.h ("cuMemAlloc"); the header's macros
// map it to the versioned symbol (cuMemAlloc_v2) that cuGetProcAddress returns for CUDA_VERSION.
#define QTUNE_CUDA_DRIVER_FUNCTIONS(X)                                                                          \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGetCount) X(cuDeviceGet)     \
  X(cuDeviceGetName) X(cuDeviceGetUuid) X(cuDeviceGetAttribute) X(cuDeviceTotalMem) X(cuDeviceGetPCIBusId)      \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxGetCurrent)               \
  X(cuCtxSynchronize) X(cuMemAlloc) X(cuMemFree) X(cuMemGetInfo) X(cuMemcpyHtoD) X(cuMemcpyDtoH)               \
  X(cuMemcpyDtoD) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync) X(cuMemsetD8)                 \
  X(cuMemsetD8Async) X(cuMemsetD32Async) X(cuModuleLoadDataEx) X(cuModuleUnload) X(cuModuleGetFunction)       \
  X(cuFuncSetAttribute) X(cuFuncGetAttribute) X(cuLaunchKernel) X(cuStreamCreate) X(cuStreamDestroy)          \
  X(cuStreamSynchronize) X(cuStreamQuery) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord)                  \
  X(cuEventSynchronize) X(cuEventElapsedTime) X(cuCtxGetDevice) X(cuTensorMapEncodeTiled)         \
  X(cuOccupancyMaxActiveClusters) X(cuOccupancyMaxActiveBlocksPerMultiprocessor) X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiateWithFlags) \
  X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy)

// A failed driver call: LibraryError("CUDA driver", "cuXxx failed: CUDA_ERROR_NAME (description)") plus the code.
class DriverError : public LibraryError {
 public:
  DriverError(CUresult result, const std::string& message, const char* file, int line)
      : LibraryError("CUDA driver", message, file, line), result_(result) {}
  CUresult result() const { return result_; }
  // True when the error leaves the context unusable (illegal address, illegal instruction, ...): every later call
  // in this process fails too, so a worker that sees one must exit.
  bool sticky() const;

 private:
  CUresult result_;
};

// True for the errors after which the CUDA context of the process is corrupt.
bool is_sticky_error(CUresult result);

class Driver {
 public:
  // The process-wide driver, loaded and initialised (cuInit) on first use. Throws NoGpuError
  // "no NVIDIA driver found (libcuda.so.1 could not be loaded)" or "no CUDA device found"; a failure is remembered.
  static const Driver& get();
  // True when get() has succeeded in this process (does not try to load anything).
  static bool loaded();

  // Loads `library` (tests pass a missing name to see the error) and initialises it. Same errors as get().
  explicit Driver(const std::string& library);
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  int version() const { return version_; }  // cuDriverGetVersion: 13000 for CUDA 13.0
  int device_count() const { return device_count_; }
  // "CUDA_ERROR_OUT_OF_MEMORY (out of memory)"
  std::string describe(CUresult result) const;

#define QTUNE_DRIVER_MEMBER(name) decltype(&::name) name = nullptr;
  QTUNE_CUDA_DRIVER_FUNCTIONS(QTUNE_DRIVER_MEMBER)
#undef QTUNE_DRIVER_MEMBER

 private:
  int version_ = 0;
  int device_count_ = 0;
};

namespace detail {
[[noreturn]] void throw_driver_error(CUresult result, const char* function, const char* file, int line);
inline void check_driver(CUresult result, const char* function, const char* file, int line) {
  if (result != CUDA_SUCCESS) throw_driver_error(result, function, file, line);
}
}  // namespace detail

}  // namespace qtune::runtime

// QTUNE_CU(cuMemAlloc, &pointer, bytes): calls the driver function and throws DriverError naming it when it fails.
#define QTUNE_CU(function, ...)                                                                               \
  ::qtune::runtime::detail::check_driver(::qtune::runtime::Driver::get().function(__VA_ARGS__), #function, \
                                         __FILE__, __LINE__)
