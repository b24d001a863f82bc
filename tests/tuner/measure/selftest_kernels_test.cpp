// The selftest kernels the harness and qtune-bench compile at run time, compiled here with NVRTC and no GPU.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "kernels/error.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/measure/selftest_jobs.hpp"

namespace qtune::measure {
namespace {

jit::CompiledKernel compile_without_cache(const std::string& source, const std::string& name, const std::string& arch) {
  jit::CompilerSettings settings;
  settings.use_cache = false;
  jit::CompileRequest request;
  request.source = source;
  request.kernel_name = name;
  request.arch = arch;
  return jit::Compiler(settings).compile(request);
}

TEST(MmaPeakKernels, CompileForEveryArchitectureThatHasTheirInstruction) {
  std::set<std::string> types;
  for (const MmaPeakKernel& kernel : mma_peak_kernels()) {
    SCOPED_TRACE(kernel.type);
    types.insert(kernel.type);
    EXPECT_NE(kernel.source.find(kernel.instruction), std::string::npos);
    for (const std::string arch : {"sm_80", "sm_89", "sm_90a", "sm_120a"}) {
      if (std::stoi(arch.substr(3)) < kernel.min_sm) {
        EXPECT_THROW(compile_without_cache(kernel.source, kernel.kernel_name, arch), LibraryError) << arch;
        continue;
      }
      const jit::CompiledKernel compiled = compile_without_cache(kernel.source, kernel.kernel_name, arch);
      EXPECT_FALSE(compiled.cubin.empty()) << arch;
      // No spills: the accumulator chains must stay in registers or the kernel measures local memory instead.
      EXPECT_EQ(compiled.resources.spill_store_bytes, 0) << arch;
    }
  }
  EXPECT_EQ(types, (std::set<std::string>{"f16", "bf16", "int8", "fp8_e4m3"}));
}

TEST(MmaPeakKernels, OperationsCountEveryMmaOfEveryWarp) {
  const MmaPeakKernel& f16 = mma_peak_kernel("f16");
  const runtime::LaunchConfig launch{{2, 1, 1}, {64, 1, 1}, 0};  // 4 warps
  EXPECT_DOUBLE_EQ(mma_peak_operations(f16, launch), 4.0 * f16.iterations * f16.chains * 2 * 16 * 8 * 16);
  EXPECT_DOUBLE_EQ(mma_peak_operations(mma_peak_kernel("int8"), launch), 2 * mma_peak_operations(f16, launch));
  EXPECT_THROW(mma_peak_kernel("f64"), InputError);
}

}  // namespace
}  // namespace qtune::measure
