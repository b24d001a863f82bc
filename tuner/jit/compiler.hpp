#pragma once
// NVRTC compilation of kernel instantiations, for any target architecture, with no GPU needed.
// Sources include kernel headers by name; those come from the embedded copies of kernels/device/.
#include <cstdint>
#include <string>
#include <vector>

namespace qtune::jit {

// What ptxas reports for one kernel (parsed from the NVRTC log with -Xptxas -v, or from the cubin).
struct ResourceUsage {
  int registers = 0;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  int static_shared_bytes = 0;
  int stack_frame_bytes = 0;
  int constant_bytes = 0;
};

struct CompileRequest {
  std::string source;        // the instantiation translation unit
  std::string kernel_name;   // extern "C" name of the __global__ function to look up after loading
  std::string arch;          // "sm_80", "sm_90a", "sm_120a", ...
  std::vector<std::string> options;  // extra NVRTC options (-D..., -lineinfo); -arch and -std are added
};

struct CompiledKernel {
  std::string cache_key;     // hex hash of source, every embedded header, options, NVRTC version and arch
  std::string kernel_name;
  std::string arch;
  std::vector<char> cubin;
  ResourceUsage resources;
  double compile_seconds = 0;  // 0 when loaded from the cache
  bool from_cache = false;
  std::string log;             // NVRTC/ptxas log
};

}  // namespace qtune::jit
