// NVRTC compiles (no GPU needed) the mma family's MoE GEMM for sm_80 and sm_90a: every layout and projection, the
// formats of the GPU tests (W4A16 int4 g128, W4A8 int4 x fp8, W8A8 fp8 and int8), two tile shapes, with no spills;
// the top-k reduction for both output types; the routing's device alignment (gemm/moe_align.cuh) for the block heights
// and CTA sizes the runtime uses; the wgmma family's MoE GEMM for sm_90a over every W4A16 format it runs x every
// layout x both projections, with no spills; and the tma family's MoE GEMM for sm_90a (W4A8 int4 x fp8, W8A8 fp8 per
// channel and DeepSeek's 128x128 blocks) over every layout x both projections, persistent and clustered tiles, and
// its token-indexed gather, with no spills.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "kernels/families/mma_family.hpp"
#include "kernels/families/mma_moe.hpp"
#include "kernels/families/tma_family.hpp"
#include "kernels/families/wgmma_family.hpp"
#include "kernels/moe.hpp"
#include "tests/tuner/kernel/kernel_test_support.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/providers/moe_provider.hpp"

namespace qtune {
namespace {

const char* kConfigs[] = {"bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=1,raster=0",
                          "bm=64,bn=64,bk=128,wm=2,wn=2,wk=1,stages=3,split=2,raster=0"};

MoeProblem problem_of(const std::string& spec, MoeLayout layout, MoeProjection projection) {
  return MoeProblem{.format = FormatSpec::parse(spec), .experts = 8, .top_k = 2, .tokens = 64, .n = 1024, .k = 1024,
                    .projection = projection, .layout = layout};
}

TEST(MoeCompile, EveryLayoutAndProjectionWithoutSpills) {
  std::vector<jit::CompileRequest> requests;
  std::vector<std::string> labels;
  for (const char* arch : {"sm_80", "sm_90a"}) {
    const int sm = sm_of_arch(arch);
    for (const char* spec : {"w4a16-int4-g128", "w4a8-int4-fp8", "w8a8-fp8-ch", "w8a8-int8-ch"}) {
      if (!mma_family().supports(FormatSpec::parse(spec), sm).supported) {
        EXPECT_THROW(mma_moe::instantiation_source(KernelConfig::parse(kConfigs[0]),
                                                   problem_of(spec, MoeLayout::TokenIndexed, MoeProjection::GateUp), arch),
                     UnsupportedError)
            << spec << " " << arch;
        continue;
      }
      for (MoeLayout layout : {MoeLayout::TokenIndexed, MoeLayout::GroupedContiguous, MoeLayout::GroupedMasked}) {
        for (MoeProjection projection : {MoeProjection::GateUp, MoeProjection::Down}) {
          // Every layout and projection with the small-M tile; the 64-row split-K tile for token-indexed.
          for (const char* text : kConfigs) {
            if (text != kConfigs[0] && layout != MoeLayout::TokenIndexed) continue;
            const KernelConfig config = KernelConfig::parse(text);
            const MoeProblem problem = problem_of(spec, layout, projection);
            const RuleVerdict verdict = mma_moe::check(config, problem, ArchLimits::for_sm(sm));
            ASSERT_TRUE(verdict.valid) << spec << " " << arch << " " << text << ": " << verdict.rule << " " << verdict.detail;
            const jit::CompileRequest request = providers::moe_compile_request(config, problem, arch);
            requests.push_back(request);
            labels.push_back(std::string(spec) + " " + arch + " " + std::string(moe_layout_name(layout)) + " " +
                             std::string(moe_projection_name(projection)) + " " + text);
          }
        }
      }
    }
    for (const char* spec : {"w4a16-int4-g128", "w4a16-int4-g128-bf16"}) {
      jit::CompileRequest request;
      request.source = mma_moe::reduce_instantiation_source(FormatSpec::parse(spec), arch);
      request.kernel_name = mma_moe::reduce_kernel_name();
      request.arch = arch;
      requests.push_back(request);
      labels.push_back(std::string("reduce ") + spec + " " + arch);
    }
  }
  EXPECT_EQ(requests.size(), 2u * 2 + 2 * 8 + 4 * 8);  // reductions; sm_80: 2 formats x 8; sm_90a: 4 formats x 8
  test_support::check_each_compiled(requests, labels, [](const std::string& label, const jit::CompiledKernel& kernel) {
    EXPECT_FALSE(kernel.cubin.empty()) << label;
    EXPECT_EQ(kernel.resources.spill_store_bytes, 0) << label << " spills";
  });
}

// The mma MoE kernel with K-group scales on the partial sums (gscale=1): every layout and projection of the W4A16 g128
// formats (f16, bf16), the decode tile and the warp-K split-K one, sm_80 and sm_90a, no spills; the source names the
// option only when it is 1, and check() refuses it for zero points.
TEST(MoeCompile, GroupScalesOnPartialSums) {
  std::vector<jit::CompileRequest> requests;
  std::vector<std::string> labels;
  for (const char* arch : {"sm_80", "sm_90a"}) {
    for (const char* spec : {"w4a16-int4-g128", "w4a16-int4-g128-bf16"}) {
      for (MoeLayout layout : {MoeLayout::TokenIndexed, MoeLayout::GroupedContiguous, MoeLayout::GroupedMasked}) {
        for (MoeProjection projection : {MoeProjection::GateUp, MoeProjection::Down}) {
          for (const char* text : {"bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=1,raster=0,gscale=1",
                                   "bm=16,bn=64,bk=256,wm=1,wn=2,wk=2,stages=3,split=2,raster=0,gscale=1"}) {
            const KernelConfig config = KernelConfig::parse(text);
            const MoeProblem problem = problem_of(spec, layout, projection);
            const RuleVerdict verdict = mma_moe::check(config, problem, ArchLimits::for_sm(sm_of_arch(arch)));
            ASSERT_TRUE(verdict.valid) << spec << " " << arch << " " << text << ": " << verdict.rule << " " << verdict.detail;
            const jit::CompileRequest request = providers::moe_compile_request(config, problem, arch);
            EXPECT_NE(request.source.find(", 1>(params, moe)"), std::string::npos) << request.source;
            requests.push_back(request);
            labels.push_back(std::string(spec) + " " + arch + " " + std::string(moe_layout_name(layout)) + " " +
                             std::string(moe_projection_name(projection)) + " " + text);
          }
        }
      }
    }
  }
  test_support::check_each_compiled(requests, labels, [](const std::string& label, const jit::CompiledKernel& kernel) {
    EXPECT_FALSE(kernel.cubin.empty()) << label;
    EXPECT_EQ(kernel.resources.spill_store_bytes, 0) << label << " spills";
  });
  const MoeProblem zero_points = problem_of("w4a16-int4-g128-zp", MoeLayout::TokenIndexed, MoeProjection::GateUp);
  EXPECT_EQ(mma_moe::check(KernelConfig::parse("bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=1,raster=0,gscale=1"), zero_points,
                           ArchLimits::for_sm(90))
                .rule,
            "gscale-needs-groups");
  const std::string unscaled = mma_moe::instantiation_source(
      KernelConfig::parse("bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=1,raster=0,gscale=0"), zero_points, "sm_90a");
  EXPECT_NE(unscaled.find("qd::kMoeGateUp>(params, moe)"), std::string::npos) << unscaled;
}

// Every 4-bit-weight, f16/bf16-activation format of the presets and the compile tests (the wgmma family runs them all).
const char* kW4A16Formats[] = {"w4a16-int4-ch",      "w4a16-int4-g128",        "w4a16-int4-g128-zp",     "w4a16-int4-g128-bf16",
                               "w4a16-uint4-ch-fzp", "w4a16-fp4-g32",          "w4a16-e2m1-g32-bf16",    "w4a16-int4-block64x128",
                               "mxint4"};
// The small decode tile with split-K, the tall tile with a stage of wgmmas in flight, and the persistent schedule.
const char* kWgmmaConfigs[] = {"bm=16,bn=128,bk=128,stages=4,split=2,raster=0,overlap=0",
                               "bm=64,bn=128,bk=64,stages=4,split=1,raster=0,overlap=1",
                               "bm=32,bn=64,bk=128,stages=3,split=1,raster=0,overlap=0,persistent=1"};

TEST(WgmmaMoeCompile, EveryW4A16FormatLayoutAndProjectionOnSm90a) {
  const ArchLimits hopper = ArchLimits::for_sm(90);
  std::vector<jit::CompileRequest> requests;
  std::vector<std::string> labels;
  for (const char* spec : kW4A16Formats) {
    ASSERT_TRUE(wgmma_family().supports(FormatSpec::parse(spec), 90).supported) << spec;
    for (MoeLayout layout : {MoeLayout::TokenIndexed, MoeLayout::GroupedContiguous, MoeLayout::GroupedMasked}) {
      for (MoeProjection projection : {MoeProjection::GateUp, MoeProjection::Down}) {
        // Every format, layout and projection on the decode tile; the others on the token-indexed layout.
        for (const char* text : kWgmmaConfigs) {
          if (text != kWgmmaConfigs[0] && layout != MoeLayout::TokenIndexed) continue;
          const KernelConfig config = KernelConfig::parse(text, "wgmma");
          const MoeProblem problem = problem_of(spec, layout, projection);
          const RuleVerdict verdict = mma_moe::check(config, problem, hopper);
          ASSERT_TRUE(verdict.valid) << spec << " " << text << ": " << verdict.rule << " " << verdict.detail;
          const jit::CompileRequest request = providers::moe_compile_request(config, problem, "sm_90a");
          EXPECT_EQ(request.kernel_name, "qtune_wgmma_moe_gemm");
          requests.push_back(request);
          labels.push_back(std::string(spec) + " " + std::string(moe_layout_name(layout)) + " " +
                           std::string(moe_projection_name(projection)) + " " + text);
        }
      }
    }
  }
  EXPECT_EQ(requests.size(), std::size(kW4A16Formats) * 10);  // 3 layouts x 2 projections + 2 more tiles x 2 projections
  test_support::check_each_compiled(requests, labels, [](const std::string& label, const jit::CompiledKernel& kernel) {
    EXPECT_FALSE(kernel.cubin.empty()) << label;
    EXPECT_EQ(kernel.resources.spill_store_bytes, 0) << label << " spills";
    EXPECT_EQ(kernel.resources.spill_load_bytes, 0) << label << " spills";
  });
  // wgmma is architecture-specific: another target, or int8 activations (not widened), is refused by name.
  const KernelConfig config = KernelConfig::parse(kWgmmaConfigs[0], "wgmma");
  EXPECT_THROW(mma_moe::instantiation_source(config, problem_of("w4a16-int4-g128", MoeLayout::TokenIndexed, MoeProjection::GateUp), "sm_90"),
               UnsupportedError);
  EXPECT_THROW(mma_moe::instantiation_source(config, problem_of("w4a8-int4-int8", MoeLayout::TokenIndexed, MoeProjection::GateUp), "sm_90a"),
               UnsupportedError);
  // A family without a MoE kernel is refused naming the config's family.
  EXPECT_THROW(mma_moe::kernel_name(KernelConfig::parse(kWgmmaConfigs[0], "bsmma")), InputError);
}

// The DeepSeek-V3 decode winner (2026-12-03: bm=16,bn=128,bk=256 with 256 threads) fits two CTAs per SM only at 128
// registers or fewer (2 x 256 x 128 = the SM's 65536). One more register halves its occupancy: a prologue change that
// took it to 145 made every decode bucket 1.5x slower on the H200 (docs/perf.md), so the register count is pinned here.
TEST(WgmmaMoeCompile, DecodeWinnerKeepsTwoBlocksPerSm) {
  std::vector<jit::CompileRequest> requests;
  std::vector<std::string> labels;
  for (const char* text : {"bm=16,bn=128,bk=256,stages=4,split=1,raster=0,overlap=0,gscale=1",
                           "bm=16,bn=128,bk=256,stages=4,split=1,raster=0,overlap=0,gscale=0",
                           "bm=16,bn=128,bk=256,stages=4,split=1,raster=0,overlap=0,gscale=1,persistent=1",
                           "bm=16,bn=128,bk=256,stages=4,split=1,raster=0,overlap=0,gscale=0,persistent=1"}) {
    for (MoeProjection projection : {MoeProjection::GateUp, MoeProjection::Down}) {
      MoeProblem problem = problem_of("w4a16-int4-g128", MoeLayout::TokenIndexed, projection);
      problem.experts = 256;
      problem.top_k = 8;
      problem.n = projection == MoeProjection::GateUp ? 4096 : 7168;
      problem.k = projection == MoeProjection::GateUp ? 7168 : 2048;
      const KernelConfig config = KernelConfig::parse(text, "wgmma");
      const jit::CompileRequest request = providers::moe_compile_request(config, problem, "sm_90a");
      requests.push_back(request);
      labels.push_back(std::string(moe_projection_name(projection)) + " " + text);
    }
  }
  test_support::check_each_compiled(requests, labels, [](const std::string& label, const jit::CompiledKernel& kernel) {
    EXPECT_LE(kernel.resources.registers, 128) << label << ": two 256-thread CTAs per SM need at most 128 registers";
    EXPECT_EQ(kernel.resources.spill_store_bytes, 0) << label << " spills";
  });
}

// fp8 activations widened to f16 in the wgmma MoE kernel: W4A8 per channel and g128 (gscale=1) and W8A8 fp8, every
// layout and projection on the decode tile, the persistent schedule on the token-indexed one, without spills; the
// DeepSeek-V3 decode tile of W4A8 per channel keeps two CTAs per SM (at most 128 registers).
TEST(WgmmaMoeCompile, WidenedFp8ActivationsEveryLayoutAndProjection) {
  const ArchLimits hopper = ArchLimits::for_sm(90);
  std::vector<jit::CompileRequest> requests;
  std::vector<std::string> labels;
  for (const char* spec : {"w4a8-int4-fp8:scale=f16", "w4a8-int4-g128-fp8", "w8a8-fp8-ch"}) {
    const bool grouped = std::string(spec).find("g128") != std::string::npos;
    const std::string gscale = grouped ? ",gscale=1" : ",gscale=0";
    for (MoeLayout layout : {MoeLayout::TokenIndexed, MoeLayout::GroupedContiguous, MoeLayout::GroupedMasked}) {
      for (MoeProjection projection : {MoeProjection::GateUp, MoeProjection::Down}) {
        for (const std::string& text : {"bm=16,bn=128,bk=256,stages=4,split=2,raster=0,overlap=0" + gscale,
                                        "bm=16,bn=128,bk=128,stages=4,split=1,raster=0,overlap=0,persistent=1" + gscale}) {
          if (text.find("persistent=1") != std::string::npos && layout != MoeLayout::TokenIndexed) continue;
          MoeProblem problem = problem_of(spec, layout, projection);
          problem.k = 2048;  // 16 K tiles of 128: enough for the persistent schedule's table fill
          const KernelConfig config = KernelConfig::parse(text, "wgmma");
          const RuleVerdict verdict = mma_moe::check(config, problem, hopper);
          ASSERT_TRUE(verdict.valid) << spec << " " << text << ": " << verdict.rule << " " << verdict.detail;
          const jit::CompileRequest request = providers::moe_compile_request(config, problem, "sm_90a");
          requests.push_back(request);
          labels.push_back(std::string(spec) + " " + std::string(moe_layout_name(layout)) + " " +
                           std::string(moe_projection_name(projection)) + " " + text);
        }
      }
    }
  }
  EXPECT_EQ(requests.size(), 3u * 8u);  // 3 layouts x 2 projections + the persistent tile x 2 projections
  test_support::check_each_compiled(requests, labels, [](const std::string& label, const jit::CompiledKernel& kernel) {
    EXPECT_EQ(kernel.resources.spill_store_bytes, 0) << label << " spills";
    if (label.find("w4a8-int4-fp8:scale=f16 token-indexed") != std::string::npos && label.find("bk=256") != std::string::npos) {
      EXPECT_LE(kernel.resources.registers, 128) << label << ": two 256-thread CTAs per SM need at most 128 registers";
    }
  });
}

// The persistent schedule walks token-indexed units whole, one wgmma group at a time, and fills each unit's row table
// through the pipeline one unit ahead: every other case is refused by a named rule; a dense GEMM never takes it.
TEST(WgmmaMoeRules, PersistentScheduleRules) {
  const ArchLimits hopper = ArchLimits::for_sm(90);
  MoeProblem problem = problem_of("w4a16-int4-g128", MoeLayout::TokenIndexed, MoeProjection::Down);
  problem.k = 2048;
  const char* base = "bm=16,bn=128,bk=256,stages=4,split=1,raster=0,overlap=0,gscale=1,persistent=1";
  auto verdict = [&](const std::string& text, const MoeProblem& p) { return mma_moe::check(KernelConfig::parse(text, "wgmma"), p, hopper); };
  EXPECT_TRUE(verdict(base, problem).valid) << verdict(base, problem).rule;  // 8 K tiles >= 2 x 3 + 1
  MoeProblem grouped = problem;
  grouped.layout = MoeLayout::GroupedContiguous;
  EXPECT_EQ(verdict(base, grouped).rule, "persistent-token-indexed");
  EXPECT_EQ(verdict("bm=16,bn=128,bk=256,stages=4,split=2,raster=0,overlap=0,gscale=1,persistent=1", problem).rule, "persistent-split");
  EXPECT_EQ(verdict("bm=16,bn=128,bk=128,stages=4,split=1,raster=0,overlap=1,gscale=0,persistent=1", problem).rule, "persistent-overlap");
  EXPECT_EQ(verdict("bm=16,bn=128,bk=256,stages=5,split=1,raster=0,overlap=0,gscale=1,persistent=1", problem).rule, "persistent-k-tiles");
  EXPECT_EQ(verdict("bm=16,bn=128,bk=256,stages=4,split=1,raster=0,overlap=0,gscale=1,persistent=2", problem).rule, "parameter-domain");
  // The dense GEMM refuses it; its curated space never offers it.
  const Problem dense{FormatSpec::parse("w4a16-int4-g128"), 16, 7168, 2048, false};
  EXPECT_EQ(wgmma_family().check(KernelConfig::parse(base, "wgmma"), dense, hopper).rule, WgmmaFamily::kPersistentMoeOnlyRule);
  EXPECT_EQ(wgmma_family().curated_ranges(16).at("persistent"), std::vector<int>{0});
  // The launch asks for a persistent grid (capped by the kernel's occupancy when launched), with room for two tables.
  const KernelConfig persistent = KernelConfig::parse(base, "wgmma");
  const KernelConfig plain = KernelConfig::parse("bm=16,bn=128,bk=256,stages=4,split=1,raster=0,overlap=0,gscale=1", "wgmma");
  const LaunchGeometry walked = mma_moe::launch_geometry(persistent, problem, 1024);
  const LaunchGeometry one_per_unit = mma_moe::launch_geometry(plain, problem, 1024);
  EXPECT_GT(walked.persistent_ctas_per_sm, 1u);
  EXPECT_EQ(one_per_unit.persistent_ctas_per_sm, 0u);
  EXPECT_EQ(walked.dynamic_shared_bytes, one_per_unit.dynamic_shared_bytes + 16 * 12 + 32);
}

// The quantized-activation formats of the tma MoE kernel: W4A8 int4 x fp8 (per channel x per token), W8A8 fp8 per
// channel x per token, and DeepSeek's fp8 128x128 weight blocks with 1x128 activation groups (gathered group scales).
const char* kTmaFormats[] = {"w4a8-int4-fp8", "w8a8-fp8-ch", "w8a8-fp8-block128x128"};
// The decode tile with split-K; a persistent tall tile; a cluster of two sharing the activations by multicast.
const char* kTmaConfigs[] = {
    "bm=16,bn=64,bk=256,stages=4,split=2,raster=0,cluster=1,multicast=0,persistent=0,overlap=0,promote=128,pingpong=0",
    "bm=64,bn=128,bk=128,stages=4,split=1,raster=0,cluster=1,multicast=0,persistent=1,overlap=0,promote=128,pingpong=0",
    "bm=32,bn=64,bk=128,stages=6,split=1,raster=0,cluster=2,multicast=1,persistent=0,overlap=0,promote=128,pingpong=0"};

TEST(TmaMoeCompile, QuantizedActivationFormatsEveryLayoutAndProjectionOnSm90a) {
  const ArchLimits hopper = ArchLimits::for_sm(90);
  std::vector<jit::CompileRequest> requests;
  std::vector<std::string> labels;
  for (const char* spec : kTmaFormats) {
    ASSERT_TRUE(tma_family().supports(FormatSpec::parse(spec), 90).supported) << spec;
    for (MoeLayout layout : {MoeLayout::TokenIndexed, MoeLayout::GroupedContiguous, MoeLayout::GroupedMasked}) {
      for (MoeProjection projection : {MoeProjection::GateUp, MoeProjection::Down}) {
        // Every format, layout and projection on the decode tile; the persistent and clustered tiles token-indexed.
        for (const char* text : kTmaConfigs) {
          if (text != kTmaConfigs[0] && layout != MoeLayout::TokenIndexed) continue;
          const KernelConfig config = KernelConfig::parse(text, "tma");
          MoeProblem problem = problem_of(spec, layout, projection);
          problem.n = 4096;  // enough units for a persistent grid
          const RuleVerdict verdict = mma_moe::check(config, problem, hopper);
          ASSERT_TRUE(verdict.valid) << spec << " " << text << ": " << verdict.rule << " " << verdict.detail;
          EXPECT_EQ(mma_moe::gathers(config, problem), layout == MoeLayout::TokenIndexed);
          const jit::CompileRequest request = providers::moe_compile_request(config, problem, "sm_90a");
          EXPECT_EQ(request.kernel_name, "qtune_tma_moe_gemm");
          requests.push_back(request);
          labels.push_back(std::string(spec) + " " + std::string(moe_layout_name(layout)) + " " +
                           std::string(moe_projection_name(projection)) + " " + text);
        }
      }
    }
  }
  EXPECT_EQ(requests.size(), std::size(kTmaFormats) * 10);  // 3 layouts x 2 projections + 2 more tiles x 2 projections
  // Two K groups of consumers per 64 columns (kgroups=2), both projections.
  for (MoeProjection projection : {MoeProjection::GateUp, MoeProjection::Down}) {
    const KernelConfig config = KernelConfig::parse(
        "bm=64,bn=64,bk=128,stages=6,split=1,raster=0,cluster=1,multicast=0,persistent=1,overlap=0,promote=0,pingpong=0,kgroups=2", "tma");
    MoeProblem problem = problem_of("w4a8-int4-fp8", MoeLayout::TokenIndexed, projection);
    problem.n = 4096;
    const RuleVerdict verdict = mma_moe::check(config, problem, hopper);
    ASSERT_TRUE(verdict.valid) << verdict.rule << " " << verdict.detail;
    requests.push_back(providers::moe_compile_request(config, problem, "sm_90a"));
    labels.push_back("w4a8-int4-fp8 kgroups=2 " + std::string(moe_projection_name(projection)));
  }
  for (MoeProjection projection : {MoeProjection::GateUp, MoeProjection::Down}) {
    jit::CompileRequest request;
    request.source = mma_moe::gather_instantiation_source(problem_of("w4a8-int4-fp8", MoeLayout::TokenIndexed, projection), "sm_90a");
    request.kernel_name = mma_moe::gather_kernel_name();
    request.arch = "sm_90a";
    requests.push_back(request);
    labels.push_back("gather " + std::string(moe_projection_name(projection)));
  }
  test_support::check_each_compiled(requests, labels, [](const std::string& label, const jit::CompiledKernel& kernel) {
    EXPECT_FALSE(kernel.cubin.empty()) << label;
    EXPECT_EQ(kernel.resources.spill_store_bytes, 0) << label << " spills";
    EXPECT_EQ(kernel.resources.spill_load_bytes, 0) << label << " spills";
  });
  // The tma family is sm_90a only; a cluster along M (weights multicast) would pair two experts' blocks.
  const KernelConfig config = KernelConfig::parse(kTmaConfigs[0], "tma");
  const MoeProblem w4a8 = problem_of("w4a8-int4-fp8", MoeLayout::TokenIndexed, MoeProjection::GateUp);
  EXPECT_THROW(mma_moe::instantiation_source(config, w4a8, "sm_90"), UnsupportedError);
  EXPECT_THROW(mma_moe::instantiation_source(config, w4a8, "sm_80"), UnsupportedError);
  const KernelConfig paired = KernelConfig::parse(
      "bm=64,bn=128,bk=128,stages=4,split=1,raster=0,cluster=2,multicast=2,persistent=0,overlap=0,promote=128,pingpong=0", "tma");
  EXPECT_EQ(mma_moe::check(paired, w4a8, hopper).rule, "moe-multicast-weights");
  // Only the tma family's token-indexed GEMM gathers.
  EXPECT_FALSE(mma_moe::gathers(KernelConfig::parse(kConfigs[0]), w4a8));
  EXPECT_THROW(mma_moe::pack_gather_arguments(KernelConfig::parse(kConfigs[0]), w4a8, 64, {}), InputError);
}

// The alignment kernel: every bm of the mma family's MoE tiles, the CTA sizes align_threads picks (1024 threads up to
// 256 experts, fewer warps for more), on sm_80 and sm_90a, with no spills.
TEST(MoeCompile, AlignKernelForEveryBlockHeightAndCtaSize) {
  EXPECT_EQ(mma_moe::align_threads(8, ArchLimits::for_sm(90)), 1024);
  EXPECT_EQ(mma_moe::align_threads(256, ArchLimits::for_sm(90)), 1024);
  EXPECT_EQ(mma_moe::align_threads(1024, ArchLimits::for_sm(90)), 256);
  EXPECT_EQ(mma_moe::align_threads(4096, ArchLimits::for_sm(90)), 32);  // beyond 48 KiB: one warp, opted in
  EXPECT_GT(mma_moe::align_launch_geometry(4096, 32).dynamic_shared_bytes, 48u * 1024);
  EXPECT_THROW(mma_moe::align_threads(65536, ArchLimits::for_sm(90)), InputError);
  EXPECT_THROW(mma_moe::align_instantiation_source(0, 1024, "sm_90a"), InputError);
  EXPECT_THROW(mma_moe::align_instantiation_source(16, 48, "sm_90a"), InputError);
  std::vector<jit::CompileRequest> requests;
  std::vector<std::string> labels;
  for (const char* arch : {"sm_80", "sm_90a"}) {
    for (int bm : {16, 32, 64, 128}) {
      for (int threads : {1024, 256, 32}) {
        jit::CompileRequest request;
        request.source = mma_moe::align_instantiation_source(bm, threads, arch);
        request.kernel_name = mma_moe::align_kernel_name();
        request.arch = arch;
        requests.push_back(request);
        labels.push_back("align bm=" + std::to_string(bm) + " threads=" + std::to_string(threads) + " " + arch);
      }
    }
  }
  test_support::check_each_compiled(requests, labels, [](const std::string& label, const jit::CompiledKernel& kernel) {
    EXPECT_FALSE(kernel.cubin.empty()) << label;
    EXPECT_EQ(kernel.resources.spill_store_bytes, 0) << label << " spills";
  });
}


}  // namespace
}  // namespace qtune
