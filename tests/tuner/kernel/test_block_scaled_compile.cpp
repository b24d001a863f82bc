// NVRTC compiles (no GPU needed) the bsmma family for sm_120a: the whole curated space at small and large M for W4A4
// NVFP4 and MXFP4 (kind::mxf4nvf4), MX W8A8 and W4A8 fp4 x fp8 (kind::mxf8f6f4), with no spills (issue 19:
// compile-verified, since no sm_120 GPU is at hand to run it).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/family.hpp"
#include "search/space.hpp"
#include "tests/tuner/kernel/kernel_test_support.hpp"
#include "tuner/jit/compiler.hpp"

namespace qtune {
namespace {

TEST(BlockScaledCompile, CuratedSpacesCompileForSm120aWithoutSpills) {
  const KernelFamily& family = find_family("bsmma");
  const ArchLimits limits = ArchLimits::for_sm(120);
  std::vector<jit::CompileRequest> requests;
  std::vector<std::string> labels;
  for (const char* spec : {"w4a4-nvfp4", "w4a4-mxfp4", "w8a8-fp8-g32:scale=ue8m0,act-scale=g32,act-scale-type=ue8m0",
                           "w4a8-fp4-g32-fp8:scale=ue8m0,act-scale=g32,act-scale-type=ue8m0"}) {
    for (const int64_t m : {16, 1024}) {
      const Problem problem{FormatSpec::parse(spec), m, 8192, 8192};
      const search::SpaceEnumeration space = search::enumerate_space(family, problem, limits, family.curated_ranges(m));
      ASSERT_FALSE(space.candidates.empty()) << spec << " M=" << m;
      for (const KernelConfig& config : space.candidates) {
        requests.push_back(test_support::family_compile_request(family, config, problem.format, "sm_120a"));
        labels.push_back(std::string(spec) + " M=" + std::to_string(m) + " " + config.to_string());
      }
    }
  }
  test_support::check_each_compiled(requests, labels, [](const std::string& label, const jit::CompiledKernel& kernel) {
    EXPECT_FALSE(kernel.cubin.empty()) << label;
    EXPECT_EQ(kernel.resources.spill_store_bytes, 0) << label << " spills";
    EXPECT_EQ(kernel.resources.spill_load_bytes, 0) << label << " spills";
    EXPECT_LE(kernel.resources.registers, 255) << label;
  });
}

}  // namespace
}  // namespace qtune
