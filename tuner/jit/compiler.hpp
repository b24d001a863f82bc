#pragma once
// NVRTC compilation of kernel instantiations, for any target architecture, with no GPU needed.
// Sources include kernel headers by name; those come from the embedded copies of kernels/device/.
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace qtune::jit {

// What ptxas reports for one kernel (parsed from the NVRTC log; the compiler passes --ptxas-options=-v).
struct ResourceUsage {
  int registers = 0;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  int static_shared_bytes = 0;
  int stack_frame_bytes = 0;
  int constant_bytes = 0;  // sum over the cmem[n] banks ptxas lists (cmem[0] holds the kernel parameters)
  int barriers = 0;        // named barriers used (bar.sync ids)
};

// A header given in memory, included by `name` exactly like an embedded kernels/device/ header.
struct HeaderSource {
  std::string name;  // as written in #include "...", e.g. "gemm/tile.cuh"
  std::string text;
};

struct CompileRequest {
  std::string source;        // the instantiation translation unit
  std::string kernel_name;   // extern "C" name of the __global__ function to look up after loading
  // "sm_80", "sm_90a", "sm_120a", ... for a cubin; "compute_75" for PTX that the driver compiles when it loads it (how
  // the sm_75 code path runs on a newer GPU)
  std::string arch;
  std::vector<std::string> options;  // extra NVRTC options (-D..., -lineinfo); -arch and -std are added
  // Headers besides the embedded ones (tests, generated code); a name may not repeat an embedded header's.
  std::vector<HeaderSource> extra_headers;
};

struct CompiledKernel {
  std::string cache_key;     // hex hash of source, every embedded header, options, NVRTC version and arch
  std::string kernel_name;
  std::string arch;
  std::vector<char> cubin;   // for a PTX target (compute_NN): the NUL-terminated PTX text, which cuModuleLoadData takes too
  ResourceUsage resources;   // ptxas's report; all zero for a PTX target (no ptxas ran)
  double compile_seconds = 0;  // 0 when loaded from the cache
  bool from_cache = false;
  std::string log;             // NVRTC/ptxas log
  // The symbol to look up in the cubin: kernel_name itself for extern "C" kernels, else NVRTC's lowered (mangled) name.
  std::string lowered_name;
  // How long NVRTC took when this cubin was built, now or in the run that filled the cache.
  double original_compile_seconds = 0;
};

// Builds the cubin of each request, or takes it from the on-disk cache.
// kernel_name may also be a name expression such as "qtune::gemm<128, 64>" (see nvrtcAddNameExpression).
// Headers NVRTC reads: every embedded kernels/device/ header and the request's extra headers, all in memory, plus
// the CUDA toolkit's include directory if one is found at run time (cuda_fp16.h, cuda_bf16.h and cuda_fp8.h are not
// built into NVRTC 13.0): see find_toolkit_include_directory().
// Whether `arch` is a PTX target ("compute_75") rather than a real architecture ("sm_75", "sm_90a").
bool is_ptx_target(std::string_view arch);

struct CompilerSettings {
  // Where cache entries live; nullopt: KernelCache::default_directory(). Ignored when use_cache is false.
  std::optional<std::filesystem::path> cache_directory;
  bool use_cache = true;
  // compile_all's worker threads; 0: std::thread::hardware_concurrency().
  std::size_t threads = 0;
  std::string language_standard = "c++20";
  // Replaces the embedded kernels/device/ headers (tests use it to change a "kernel header"); nullopt: the embedded ones.
  std::optional<std::vector<HeaderSource>> headers;
  // nullopt: find_toolkit_include_directory(); an empty path: use no toolkit headers.
  std::optional<std::filesystem::path> toolkit_include_directory;
};

// compile_all's answer for one request: the kernel, or the error that stopped it.
struct CompileOutcome {
  std::optional<CompiledKernel> kernel;
  std::exception_ptr error;
  std::string error_message;  // error's what()
  bool ok() const { return kernel.has_value(); }
};

// Called once per finished request, from worker threads but never two calls at once.
using CompileProgress = std::function<void(std::size_t done, std::size_t total)>;

class KernelCache;

class Compiler {
 public:
  explicit Compiler(CompilerSettings settings = {});
  ~Compiler();
  Compiler(Compiler&&) noexcept;
  Compiler& operator=(Compiler&&) noexcept;

  // Thread-safe. Throws InputError for a malformed request, LibraryError("NVRTC", ...) with the NVRTC log when the
  // compile fails, LibraryError("system", ...) when the cache cannot be written.
  CompiledKernel compile(const CompileRequest& request) const;

  // Compiles every request on settings.threads workers; one failure does not stop the others. Requests with the
  // same cache key are compiled once. Results are in request order.
  std::vector<CompileOutcome> compile_all(const std::vector<CompileRequest>& requests,
                                          const CompileProgress& progress = {}) const;

  // Hex SHA-256 of the cache format version, NVRTC version, arch, full option list, kernel name, source, every
  // header it can include (embedded or replacement set, extra headers, toolkit fp16/bf16/fp8 headers, each sorted by name).
  std::string cache_key(const CompileRequest& request) const;
  // Every option passed to nvrtcCompileProgram for `request`, in order.
  std::vector<std::string> nvrtc_options(const CompileRequest& request) const;

  const KernelCache* cache() const;  // null when the cache is off
  const std::optional<std::filesystem::path>& toolkit_include_directory() const;
  const CompilerSettings& settings() const;

  // {major, minor} from nvrtcVersion().
  static std::pair<int, int> nvrtc_version();
  // "sm_75", "sm_80", ... as listed by nvrtcGetSupportedArchs (the "a"/"f" variants are accepted on top).
  static std::vector<std::string> supported_archs();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The CUDA toolkit include directory holding cuda_fp16.h, searched in order: $CUDA_HOME/include, $CUDA_PATH/include,
// the include directory beside the loaded libnvrtc, /usr/local/cuda/include. nullopt when none has it; kernels that
// include cuda_fp16.h/cuda_bf16.h/cuda_fp8.h then fail to compile with NVRTC's "could not open source file".
std::optional<std::filesystem::path> find_toolkit_include_directory();

}  // namespace qtune::jit
