#pragma once
// `qtune compile` as a library call: compiles kernel configurations of one family and format for one architecture
// with NVRTC (no GPU needed), through the kernel cache and the compiler's thread pool, with the requests `qtune tune`
// makes (so the cache entries are shared), and stores each compile's resources through tune/records.hpp.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "db/store.hpp"
#include "kernels/family.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/tune/tuner.hpp"

namespace qtune::tune {

// A validated compile: what the CLI's options become.
struct CompileRunRequest {
  const KernelFamily* family = nullptr;  // required
  Problem problem;                       // the format, and the shape the launch geometry is computed for
  std::string arch;                      // NVRTC target, "sm_90a"
  int sm = 0;                            // arch's compute capability x10 (stored with the run)
  std::vector<KernelConfig> configs;     // each valid for problem on sm
  jit::CompilerSettings compiler;        // threads and kernel cache
  std::string command_line;              // stored with the run
};

// One configuration's compile, for the table and the store.
struct CompileRow {
  KernelConfig config;
  std::uint32_t dynamic_shared_bytes = 0;
  bool ok = false;
  std::optional<jit::CompiledKernel> kernel;  // cubin dropped once read
  std::string error;                          // the full message (NVRTC log) when not ok
};

struct CompileOutcome {
  std::vector<CompileRow> rows;  // in the request's order
  std::optional<db::RunId> run;  // the stored run, when a store was given
};

// Compiles every configuration, in chunks (as the tuner does, so that a full space does not hold every cubin in
// memory at once). With `store`: one run of kind "compile" and per configuration its config and compile rows; the run
// is completed, or marked failed when something other than a compile fails (and that error propagates). A failed
// compile is a row with its error, not an exception.
CompileOutcome run_compile(const CompileRunRequest& request, db::Store* store, TuneObserver& progress);

}  // namespace qtune::tune
