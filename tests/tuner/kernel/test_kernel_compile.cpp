// NVRTC compiles (no GPU needed) a representative mma-family instantiation of every format preset for sm_75, sm_80,
// sm_89, sm_90a and sm_120a wherever the family supports it, and checks the refusal message wherever it does not; the
// Turing path also as compute_75 PTX, which is how the GPU tests run it on a newer GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "kernels/error.hpp"
#include "kernels/families/mma_family.hpp"
#include "kernels/families/mma_layout.hpp"
#include "kernels/families/tma_family.hpp"
#include "kernels/families/wgmma_family.hpp"
#include "kernels/family.hpp"
#include "tests/tuner/kernel/kernel_test_support.hpp"
#include "tuner/jit/compiler.hpp"

namespace qtune {
namespace {

const char* kArchs[] = {"sm_75", "sm_80", "sm_89", "sm_90a", "sm_120a"};

// Formats that must compile on every one of these architectures (weight-only, f16 activations).
const char* kWeightOnlyEverywhere[] = {"w4a16-int4-ch", "w4a16-int4-g128", "w4a16-int4-g128-zp", "w3a16-int3-g128-zp",
                                       "w8a16-int8-ch", "w8a16-fp8-ch",    "w4a16-fp4-g32",      "mxfp4",
                                       "nvfp4",         "mxint4"};

// Further weight types, zero points and scale placements, compiled for sm_90a.
const char* kExtraSpecs[] = {"w1a16-int1-ch",        "w2a16-int2-g64",         "w5a16-int5-ch",
                             "w6a16-int6-g128",      "w7a16-int7-g64",         "w8a16-int8-g128-bf16",
                             "w5a16-uint5-g32-fzp",  "w8a16-uint8-ch-zp-bf16", "w8a16-uint8-g64-zp-bf16",
                             "w6a16-e3m2-ch",        "w6a16-e2m3-g64",         "w8a16-e5m2-g128",
                             "w8a16-e4m3-ch-bf16",   "w4a16-e2m1-g32-bf16",    "w4a16-int4-block64x128",
                             "w4a16-uint4-ch-fzp"};

// Quantized activations beyond the presets (scale placements, e5m2 mixes, narrow weights), compiled for every
// architecture that supports them.
const char* kQuantizedSpecs[] = {"w8a8-int8-ch:act-scale=g128", "w8a8-int8-g128",   "w8a8-fp8-e5m2",
                                 "w8a8-e5m2-ch",                "w4a8-int4-g128-fp8", "w6a8-e3m2-g32-fp8",
                                 "w2a8-int2-g64-int8",          "w5a8-int5-fp8",    "w8a8-fp8-ch:act-scale=g64",
                                 "w4a4-int4-g64",               "w2a4-int2-ch-int4", "w8a8-int8-ch:act-scale=none"};

struct Instantiation {
  std::string spec;
  std::string arch;
  KernelConfig config;
};

jit::CompileRequest request_for(const Instantiation& instantiation) {
  return test_support::family_compile_request(mma_family(), instantiation.config, FormatSpec::parse(instantiation.spec),
                                              instantiation.arch);
}

// A problem every format's group sizes divide; the default config for it on that architecture.
Instantiation representative(const std::string& spec, const std::string& arch, int64_t m = 16) {
  Problem problem;
  problem.format = FormatSpec::parse(spec);
  problem.m = m;
  problem.n = 4096;
  problem.k = 4096;
  const KernelConfig config = mma_family().default_config(problem, ArchLimits::for_sm(sm_of_arch(arch)));
  return {spec, arch, config};
}

void compile_all_or_fail(const std::vector<Instantiation>& instantiations) {
  std::vector<jit::CompileRequest> requests;
  std::vector<std::string> labels;
  for (const Instantiation& instantiation : instantiations) {
    requests.push_back(request_for(instantiation));
    labels.push_back(instantiation.spec + " " + instantiation.arch + " " + instantiation.config.to_string());
  }
  test_support::check_each_compiled(requests, labels, [](const std::string& what, const jit::CompiledKernel& kernel) {
    EXPECT_FALSE(kernel.cubin.empty()) << what;
    EXPECT_GT(kernel.resources.registers, 0) << what;
    EXPECT_EQ(kernel.resources.spill_store_bytes, 0) << what << " spills";
  });
}

TEST(MmaCompile, EveryPresetOnEveryArchitectureOrARefusal) {
  std::vector<Instantiation> supported;
  for (const FormatPreset& preset : format_presets()) {
    const FormatSpec format = FormatSpec::parse(preset.name);
    for (const char* arch : kArchs) {
      const int sm = sm_of_arch(arch);
      const ArchSupport support = mma_family().supports(format, sm);
      if (support.supported) {
        supported.push_back(representative(preset.name, arch));
      } else {
        EXPECT_NE(support.reason.find("unsupported on sm_" + std::to_string(sm)), std::string::npos)
            << preset.name << ": " << support.reason;
        const KernelConfig config = KernelConfig::parse("bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=1,raster=0");
        const std::string arch_name = arch;
        auto instantiate = [&] { return mma_family().instantiation_source(config, format, arch_name); };
        EXPECT_THROW(instantiate(), UnsupportedError) << preset.name << " " << arch;
      }
    }
  }
  for (const char* spec : kWeightOnlyEverywhere) {
    for (const char* arch : kArchs) {
      EXPECT_TRUE(mma_family().supports(FormatSpec::parse(spec), sm_of_arch(arch)).supported) << spec << " " << arch;
    }
  }
  compile_all_or_fail(supported);
}

TEST(MmaCompile, QuantizedActivationsOnEveryArchitectureOrARefusal) {
  std::vector<Instantiation> supported;
  for (const char* spec : kQuantizedSpecs) {
    const FormatSpec format = FormatSpec::parse(spec);
    for (const char* arch : kArchs) {
      const int sm = sm_of_arch(arch);
      const ArchSupport support = mma_family().supports(format, sm);
      if (support.supported) {
        supported.push_back(representative(spec, arch));
      } else {
        EXPECT_NE(support.reason.find("unsupported on sm_" + std::to_string(sm)), std::string::npos) << spec << ": " << support.reason;
      }
    }
  }
  // fp8 runs from sm_89, int4 activations up to sm_89: each list has what it must.
  EXPECT_GE(supported.size(), 30u);
  compile_all_or_fail(supported);
}

// The formats the mma family runs on Turing: f16 activations (m16n8k8), int8 (m8n8k16) and int4 (m8n8k32) ones.
const char* kTuringSpecs[] = {"w4a16-int4-ch",  "w4a16-int4-g128",        "w4a16-int4-g128-zp", "w3a16-int3-g128-zp",
                              "w8a16-int8-ch",  "w8a16-fp8-ch",           "w4a16-fp4-g32",      "mxfp4",
                              "nvfp4",          "mxint4",                 "w8a8-int8-ch",       "w8a8-int8-tensor",
                              "w8a8-int8-block128x128", "w4a8-int4-int8", "w4a8-int4-g128-int8", "w4a4-int4-ch",
                              "w4a4-int4-g64"};

// sm_75 compiles each Turing format at small and large M (swap-AB, flushes, warp-K and split-K shares) without spilling,
// with no cp.async (a stage is copied through registers), and as compute_75 PTX whose MMAs are Turing's shapes.
TEST(MmaCompile, TuringFormatsForSm75AndAsComputePtx) {
  const ArchLimits turing = ArchLimits::for_sm(75);
  std::vector<jit::CompileRequest> requests;
  std::vector<std::string> labels;
  for (const char* spec : kTuringSpecs) {
    const FormatSpec format = FormatSpec::parse(spec);
    ASSERT_TRUE(mma_family().supports(format, 75).supported) << spec << ": " << mma_family().supports(format, 75).reason;
    for (int64_t m : {1, 16, 64, 256}) {
      const Problem problem{format, m, 4096, 4096, false};
      const KernelConfig config = mma_family().default_config(problem, turing);
      ASSERT_TRUE(mma_family().check(config, problem, turing).valid) << spec << " " << config.to_string();
      for (const char* arch : {"sm_75", "compute_75"}) {
        requests.push_back(test_support::family_compile_request(mma_family(), config, format, arch));
        labels.push_back(std::string(spec) + " m=" + std::to_string(m) + " " + arch + " " + config.to_string());
      }
    }
  }
  test_support::check_each_compiled(requests, labels, [](const std::string& label, const jit::CompiledKernel& kernel) {
    if (kernel.arch == "sm_75") {
      EXPECT_GT(kernel.resources.registers, 0) << label;
      EXPECT_EQ(kernel.resources.spill_store_bytes, 0) << label << " spills";
      return;
    }
    const std::string ptx(kernel.cubin.data());
    EXPECT_NE(ptx.find(".target sm_75"), std::string::npos) << label;
    EXPECT_EQ(ptx.find("cp.async"), std::string::npos) << label;
    EXPECT_EQ(ptx.find("m16n8k16"), std::string::npos) << label;
    const bool turing_mma = ptx.find("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32") != std::string::npos ||
                            ptx.find("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32") != std::string::npos ||
                            ptx.find("mma.sync.aligned.m8n8k32.row.col.s32.s4.s4.s32") != std::string::npos;
    EXPECT_TRUE(turing_mma) << label;
  });
}

// bf16 and fp8 are refused on sm_75 with one line that names the architecture and what they need.
TEST(MmaCompile, Sm75RefusesBf16AndFp8InOneLine) {
  for (const auto& [spec, needs] : std::vector<std::pair<std::string, std::string>>{
           {"w4a16-int4-g128-bf16", "bf16 activations need sm_80 or later"},
           {"nvfp4:out=bf16", "bf16 output needs sm_80 or later"},
           {"w8a8-fp8-ch", "fp8 activations need sm_89 or later"},
           {"w4a8-int4-fp8", "fp8 activations need sm_89 or later"},
           {"w4a4-nvfp4", "fp4 activations need"}}) {
    const ArchSupport support = mma_family().supports(FormatSpec::parse(spec), 75);
    EXPECT_FALSE(support.supported) << spec;
    EXPECT_NE(support.reason.find("unsupported on sm_75: " + needs), std::string::npos) << spec << ": " << support.reason;
    EXPECT_EQ(support.reason.find('\n'), std::string::npos) << spec;
  }
  EXPECT_NE(mma_family().supports(FormatSpec::parse("w4a16-int4-ch"), 70).reason.find("sm_75 or later"), std::string::npos);
}

// Flush paths: K groups shorter and longer than the tile, warp-K and split-K shares, large M.
TEST(MmaCompile, QuantizedConfigurationSpread) {
  std::vector<Instantiation> instantiations;
  const struct {
    const char* spec;
    const char* arch;
    const char* config;
  } cases[] = {
      {"w8a8-int8-block128x128", "sm_90a", "bm=16,bn=64,bk=512,wm=1,wn=2,wk=2,stages=3,split=4,raster=0"},
      {"w8a8-fp8-block128x128", "sm_90a", "bm=64,bn=128,bk=128,wm=2,wn=4,wk=1,stages=4,split=1,raster=2"},
      {"w8a8-fp8-block128x128", "sm_89", "bm=64,bn=128,bk=128,wm=2,wn=4,wk=1,stages=3,split=1,raster=1"},
      {"w8a8-int8-g256", "sm_80", "bm=32,bn=64,bk=128,wm=1,wn=2,wk=1,stages=4,split=3,raster=0"},
      {"w8a8-int8-ch", "sm_120a", "bm=128,bn=128,bk=128,wm=2,wn=4,wk=1,stages=3,split=1,raster=3"},
      {"w8a8-fp8-ch", "sm_120a", "bm=16,bn=128,bk=256,wm=1,wn=4,wk=2,stages=2,split=2,raster=0"},
      {"w4a8-fp4-g32-fp8", "sm_90a", "bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=4,raster=0"},
      {"w4a8-int4-g128-int8", "sm_80", "bm=64,bn=128,bk=256,wm=2,wn=4,wk=1,stages=3,split=1,raster=0"},
      {"w4a4-int4-ch", "sm_89", "bm=64,bn=64,bk=512,wm=2,wn=2,wk=2,stages=2,split=2,raster=0"},
  };
  for (const auto& c : cases) {
    const Problem problem{FormatSpec::parse(c.spec), 256, 8192, 8192, false};
    const KernelConfig config = KernelConfig::parse(c.config);
    const RuleVerdict verdict = mma_family().check(config, problem, ArchLimits::for_sm(sm_of_arch(c.arch)));
    EXPECT_TRUE(verdict.valid) << c.spec << " " << c.arch << " " << c.config << ": " << verdict.detail;
    if (verdict.valid) instantiations.push_back({c.spec, c.arch, config});
  }
  compile_all_or_fail(instantiations);
}

TEST(MmaCompile, FurtherWeightTypesOnHopper) {
  std::vector<Instantiation> instantiations;
  for (const char* spec : kExtraSpecs) instantiations.push_back(representative(spec, "sm_90a"));
  compile_all_or_fail(instantiations);
}

// The large-M and split/warp-K code paths too, for the performance-critical format.
TEST(MmaCompile, Int4ConfigurationSpread) {
  std::vector<Instantiation> instantiations;
  for (const char* text : {"bm=16,bn=64,bk=128,wm=1,wn=2,wk=2,stages=3,split=8,raster=0",
                           "bm=64,bn=128,bk=128,wm=2,wn=4,wk=1,stages=4,split=1,raster=2",
                           "bm=128,bn=128,bk=64,wm=2,wn=2,wk=1,stages=3,split=2,raster=1",
                           "bm=32,bn=256,bk=256,wm=1,wn=8,wk=1,stages=2,split=1,raster=0"}) {
    for (const char* spec : {"w4a16-int4-ch", "w4a16-int4-g128-zp"}) {
      // Only what check() lets through must compile without spilling (it rejects the largest zero-point tile).
      const Problem problem{FormatSpec::parse(spec), 256, 8192, 8192, false};
      const KernelConfig config = KernelConfig::parse(text);
      if (mma_family().check(config, problem, ArchLimits::for_sm(90)).valid) instantiations.push_back({spec, "sm_90a", config});
    }
  }
  EXPECT_GE(instantiations.size(), 6u);
  compile_all_or_fail(instantiations);
}

// K-group scales on the partial sums (gscale=1) compile for Turing, Ampere and Hopper without spilling: f16 and bf16,
// 4- and 8-bit integer and fp4 weights, groups of 32 to 128 (inside a K tile, one per tile, one over two tiles), the
// swap-AB decode tile, warps splitting K, 64-row tiles. The issue-16 decode tile (W4A16 int4 g128, N = K = 8192, M = 1)
// keeps its registers: no more than 8 over gscale=0's, nor over 128.
TEST(MmaCompile, GroupScalesOnPartialSums) {
  std::vector<Instantiation> instantiations;
  const struct {
    const char* spec;
    int64_t m;
    const char* config;
    bool turing;  // also on sm_75 with 2 stages (64 KiB of shared memory), f16 only
  } cases[] = {
      {"w4a16-int4-g128", 1, "bm=16,bn=64,bk=128,wm=1,wn=4,wk=1,stages=4,split=4,raster=0", true},
      {"w4a16-int4-g128", 16, "bm=16,bn=128,bk=256,wm=1,wn=4,wk=2,stages=4,split=2,raster=0", true},
      {"w4a16-int4-g128-bf16", 1, "bm=16,bn=64,bk=64,wm=1,wn=4,wk=1,stages=4,split=3,raster=0", false},
      {"w4a16-int4-g32", 32, "bm=32,bn=128,bk=256,wm=1,wn=4,wk=1,stages=3,split=2,raster=0", false},
      {"w8a16-int8-g128-bf16", 64, "bm=64,bn=128,bk=128,wm=2,wn=4,wk=1,stages=3,split=1,raster=0", false},
      {"w4a16-e2m1-g32", 8, "bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=4,raster=0", true},
  };
  for (const char* arch : {"sm_75", "sm_80", "sm_90a"}) {
    const ArchLimits limits = ArchLimits::for_sm(sm_of_arch(arch));
    for (const auto& c : cases) {
      if (limits.sm == 75 && !c.turing) continue;
      const Problem problem{FormatSpec::parse(c.spec), c.m, 8192, 8192, false};
      KernelConfig config = KernelConfig::parse(std::string(c.config) + ",gscale=1");
      if (limits.sm == 75) config.params["stages"] = 2;
      const RuleVerdict verdict = mma_family().check(config, problem, limits);
      EXPECT_TRUE(verdict.valid) << c.spec << " " << arch << " " << config.to_string() << ": " << verdict.rule << " " << verdict.detail;
      if (verdict.valid) instantiations.push_back({c.spec, arch, config});
    }
  }
  EXPECT_EQ(instantiations.size(), 3u + 6u + 6u);
  compile_all_or_fail(instantiations);

  const char* decode = "bm=16,bn=64,bk=128,wm=1,wn=4,wk=1,stages=4,split=4,raster=0";
  std::vector<jit::CompileRequest> requests;
  for (const char* gscale : {",gscale=0", ",gscale=1"}) {
    requests.push_back(request_for({"w4a16-int4-g128", "sm_90a", KernelConfig::parse(std::string(decode) + gscale)}));
  }
  const std::vector<jit::CompileOutcome> outcomes = jit::Compiler().compile_all(requests);
  ASSERT_EQ(outcomes.size(), 2u);
  ASSERT_TRUE(outcomes[0].ok() && outcomes[1].ok()) << outcomes[0].error_message << outcomes[1].error_message;
  const int scaled_weights = outcomes[0].kernel->resources.registers, scaled_sums = outcomes[1].kernel->resources.registers;
  std::printf("[ registers ] issue-16 decode tile: gscale=0 %d, gscale=1 %d\n", scaled_weights, scaled_sums);
  EXPECT_EQ(outcomes[1].kernel->resources.spill_store_bytes, 0);
  EXPECT_LE(scaled_sums, scaled_weights + 8);
  EXPECT_LE(scaled_sums, 128);

  // Formats the rule refuses do not compile either: the kernel's static_assert says why.
  const std::string refused = mma_family().instantiation_source(KernelConfig::parse(std::string(decode) + ",gscale=1"),
                                                                FormatSpec::parse("w4a16-int4-g128-zp"), "sm_90a");
  jit::CompileRequest request = request_for({"w4a16-int4-g128", "sm_90a", KernelConfig::parse(decode)});
  request.source = refused;
  const std::vector<jit::CompileOutcome> failed = jit::Compiler().compile_all({request});
  ASSERT_FALSE(failed[0].ok());
  EXPECT_NE(failed[0].error_message.find("SCALE_AFTER needs K-group weight scales and no zero points"), std::string::npos)
      << failed[0].error_message.substr(0, 2000);
}

// The wgmma family compiles every weight-only preset and the further types for sm_90a without spilling, at each
// token tile it offers, and refuses other architectures and int8 activations by name.
TEST(WgmmaCompile, WeightOnlyFormatsOnSm90a) {
  const ArchLimits hopper = ArchLimits::for_sm(90);
  std::vector<jit::CompileRequest> requests;
  std::vector<std::string> labels;
  auto add = [&](const std::string& spec, int64_t m) {
    const Problem problem{FormatSpec::parse(spec), m, 4096, 4096, false};
    const KernelConfig config = wgmma_family().default_config(problem, hopper);
    ASSERT_TRUE(wgmma_family().check(config, problem, hopper).valid) << spec << " " << config.to_string();
    requests.push_back(test_support::family_compile_request(wgmma_family(), config, problem.format, "sm_90a"));
    labels.push_back(spec + " m=" + std::to_string(m) + " " + config.to_string());
  };
  for (const char* spec : kWeightOnlyEverywhere) add(spec, 64);
  for (const char* spec : kExtraSpecs) add(spec, 16);
  for (int64_t m : {1, 32, 128, 4096}) add("w4a16-int4-ch", m);
  test_support::check_each_compiled(requests, labels, [](const std::string& label, const jit::CompiledKernel& kernel) {
    EXPECT_EQ(kernel.resources.spill_store_bytes, 0) << label;
    EXPECT_LE(kernel.resources.registers, 255) << label;
  });
  for (int sm : {80, 89, 100, 120}) {
    const ArchSupport support = wgmma_family().supports(FormatSpec::parse("w4a16-int4-ch"), sm);
    EXPECT_FALSE(support.supported) << sm;
    EXPECT_NE(support.reason.find("sm_" + std::to_string(sm)), std::string::npos) << support.reason;
  }
  const ArchSupport int8 = wgmma_family().supports(FormatSpec::parse("w8a8-int8-ch"), 90);
  EXPECT_FALSE(int8.supported);
  EXPECT_NE(int8.reason.find("widens fp8 activations"), std::string::npos) << int8.reason;
  const KernelConfig config = KernelConfig::parse("bm=64,bn=128,bk=128,stages=4,split=1,raster=0", "wgmma");
  EXPECT_THROW(wgmma_family().instantiation_source(config, FormatSpec::parse("w4a16-int4-ch"), "sm_90"), UnsupportedError);
}

// fp8 activations widened to f16: W4A8 (int4 per channel and g128, fp4 g32, e5m2 activations) and W8A8 fp8 compile
// for sm_90a without spilling at the heuristic's tile of each M, and the decode tile of W4A8 per channel stays at two
// 256-thread CTAs per SM (at most 128 registers), as the W4A16 one.
TEST(WgmmaCompile, WidenedFp8ActivationsOnSm90a) {
  const ArchLimits hopper = ArchLimits::for_sm(90);
  std::vector<jit::CompileRequest> requests;
  std::vector<std::string> labels;
  auto add = [&](const std::string& spec, int64_t m, const KernelConfig& config) {
    const Problem problem{FormatSpec::parse(spec), m, 4096, 4096, false};
    ASSERT_TRUE(wgmma_family().check(config, problem, hopper).valid) << spec << " " << config.to_string();
    requests.push_back(test_support::family_compile_request(wgmma_family(), config, problem.format, "sm_90a"));
    labels.push_back(spec + " m=" + std::to_string(m) + " " + config.to_string());
  };
  for (const char* spec : {"w4a8-int4-fp8", "w4a8-int4-g128-fp8", "w4a8-fp4-g32-fp8", "w4a8-int4-e5m2", "w8a8-fp8-ch"}) {
    ASSERT_TRUE(wgmma_family().supports(FormatSpec::parse(spec), 90).supported) << spec;
    for (int64_t m : {1, 64, 256}) {
      const Problem problem{FormatSpec::parse(spec), m, 4096, 4096, false};
      add(spec, m, wgmma_family().default_config(problem, hopper));
    }
  }
  const KernelConfig decode = KernelConfig::parse("bm=16,bn=128,bk=256,stages=4,split=4,raster=0,overlap=0,gscale=0", "wgmma");
  add("w4a8-int4-fp8", 1, decode);
  test_support::check_each_compiled(requests, labels, [](const std::string& label, const jit::CompiledKernel& kernel) {
    EXPECT_EQ(kernel.resources.spill_store_bytes, 0) << label;
    EXPECT_LE(kernel.resources.registers, 255) << label;
    if (label.find("bm=16,bn=128,bk=256,stages=4,split=4,raster=0,overlap=0,gscale=0") != std::string::npos) {
      EXPECT_LE(kernel.resources.registers, 128) << label;
    }
  });
}

// The tma family compiles every format it runs (quantized activations and weight-only) for sm_90a at each tile and
// cluster shape it offers, without spilling, with wgmma batches that ptxas does not serialize (C7515 and friends) and
// with the register reallocation it asks for (C7508 would mean setmaxnreg was ignored); other architectures, 4-bit
// operands and configs that check() rejects are refused.
TEST(TmaCompile, FormatsAndConfigurationsOnSm90a) {
  const ArchLimits hopper = ArchLimits::for_sm(90);
  std::vector<jit::CompileRequest> requests;
  std::vector<std::string> labels;
  auto add = [&](const std::string& spec, int64_t m, const std::string& text) {
    const Problem problem{FormatSpec::parse(spec), m, 4096, 4096, false};
    const KernelConfig config = text.empty() ? tma_family().default_config(problem, hopper) : KernelConfig::parse(text, "tma");
    const RuleVerdict verdict = tma_family().check(config, problem, hopper);
    ASSERT_TRUE(verdict.valid) << spec << " " << config.to_string() << ": " << verdict.detail;
    requests.push_back(test_support::family_compile_request(tma_family(), config, problem.format, "sm_90a"));
    labels.push_back(spec + " m=" + std::to_string(m) + " " + config.to_string());
  };
  for (const char* spec : {"w8a8-fp8-ch", "w8a8-fp8-tensor", "w8a8-fp8-block128x128", "w8a8-e5m2-e5m2", "w8a8-fp8-e5m2",
                           "w8a8-int8-ch", "w8a8-int8-block128x128", "w4a8-int4-fp8", "w4a8-fp4-fp8", "w4a8-int4-int8",
                           "w4a8-fp4-g32-fp8", "w4a16-int4-ch", "w4a16-int4-g128-zp", "nvfp4"}) {
    for (int64_t m : {16, 64, 256}) add(spec, m, "");
  }
  add("w8a8-fp8-ch", 4096, "bm=128,bn=128,bk=128,stages=6,split=1,raster=2,cluster=2,multicast=1,persistent=1");
  add("w8a8-fp8-ch", 4096, "bm=128,bn=128,bk=256,stages=3,split=1,raster=2,cluster=2,multicast=2,persistent=1");
  add("w8a8-int8-ch", 4096, "bm=256,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=1");
  add("w4a16-int4-ch", 4096, "bm=256,bn=128,bk=64,stages=4,split=1,raster=2,cluster=2,multicast=1,persistent=1");
  add("w4a8-int4-fp8", 4096, "bm=128,bn=128,bk=128,stages=6,split=1,raster=2,cluster=2,multicast=1,persistent=1");
  add("w8a8-int8-ch", 4096, "bm=256,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=1,overlap=1");
  add("w4a8-int4-int8", 4096, "bm=128,bn=128,bk=128,stages=6,split=2,raster=2,cluster=1,multicast=0,persistent=1,overlap=1");
  add("w4a16-int4-ch", 4096, "bm=128,bn=128,bk=64,stages=6,split=1,raster=2,cluster=2,multicast=1,persistent=1,overlap=1");
  add("w8a8-fp8-block128x128", 4096, "bm=128,bn=128,bk=128,stages=6,split=1,raster=2,cluster=2,multicast=2,persistent=1");
  add("w8a8-fp8-block128x128", 4096, "bm=64,bn=128,bk=128,stages=6,split=3,raster=2,cluster=1,multicast=0,persistent=1");
  // fp8 promotion intervals: never (a group in flight, 256 tokens), every two slots, every 512 K within a slot; the int4
  // -> fp8 lookup with and without a group in flight, e5m2 tables included.
  add("w8a8-fp8-ch", 4096, "bm=256,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=1,overlap=1,promote=0");
  add("w8a8-fp8-ch", 4096, "bm=256,bn=128,bk=128,stages=4,split=1,raster=2,cluster=2,multicast=2,persistent=1,overlap=1,promote=0");
  add("w8a8-fp8-tensor", 256, "bm=128,bn=128,bk=256,stages=3,split=1,raster=2,cluster=1,multicast=0,persistent=0,overlap=1,promote=0");
  add("w8a8-fp8-e5m2", 4096, "bm=128,bn=128,bk=128,stages=6,split=1,raster=2,cluster=2,multicast=2,persistent=1,promote=256");
  add("w8a8-fp8-ch", 4096, "bm=128,bn=128,bk=256,stages=3,split=1,raster=2,cluster=1,multicast=0,persistent=1,promote=512");
  add("w4a8-int4-fp8", 4096, "bm=256,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=1,overlap=1,promote=0");
  add("w4a8-int4-fp8", 1024, "bm=128,bn=64,bk=128,stages=6,split=1,raster=2,cluster=1,multicast=0,persistent=1,overlap=1,promote=0");
  add("w4a8-int4-fp8", 64, "bm=64,bn=64,bk=128,stages=8,split=2,raster=0,cluster=1,multicast=0,persistent=0,overlap=1,promote=0");
  add("w4a8-int4-e5m2", 256, "");
  // Consumer warpgroups taking turns: with flushes (promotions, block scales), split-K, clusters, a weight-only format.
  add("w8a8-fp8-ch", 4096, "bm=128,bn=128,bk=128,stages=6,split=1,raster=2,cluster=2,multicast=2,persistent=1,pingpong=1");
  add("w8a8-fp8-block128x128", 4096, "bm=128,bn=128,bk=128,stages=6,split=1,raster=2,cluster=1,multicast=0,persistent=1,pingpong=1");
  add("w4a8-int4-fp8", 4096, "bm=128,bn=128,bk=256,stages=3,split=1,raster=2,cluster=1,multicast=0,persistent=1,pingpong=1");
  add("w4a16-int4-ch", 4096, "bm=256,bn=128,bk=64,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=1,pingpong=1");
  add("w4a8-int4-e5m2", 4096, "bm=256,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=1,overlap=1,promote=0");
  // Two K groups of consumers per 64 columns: no flush, promotions and K-group scales within a slot, split-K, clusters.
  add("w4a8-int4-fp8", 64, "bm=64,bn=64,bk=256,stages=8,split=1,raster=0,cluster=1,multicast=0,persistent=0,promote=0,kgroups=2");
  add("w4a8-int4-fp8", 256, "bm=128,bn=64,bk=256,stages=4,split=2,raster=2,cluster=1,multicast=0,persistent=1,promote=0,kgroups=2");
  add("w8a8-fp8-ch", 64, "bm=64,bn=64,bk=128,stages=8,split=1,raster=0,cluster=1,multicast=0,persistent=0,promote=128,kgroups=2");
  add("w4a16-int4-g128", 64, "bm=64,bn=64,bk=128,stages=6,split=1,raster=0,cluster=1,multicast=0,persistent=0,kgroups=2");
  add("w8a8-int8-ch", 256, "bm=64,bn=64,bk=128,stages=6,split=4,raster=0,cluster=2,multicast=2,persistent=0,kgroups=2");
  // Clusters of four sharing the activations (M = 64: weights streaming) or the weights.
  add("w4a16-int4-ch", 64, "bm=64,bn=64,bk=256,stages=4,split=1,raster=0,cluster=4,multicast=1,persistent=0,overlap=1");
  add("w4a8-int4-fp8", 64, "bm=64,bn=64,bk=256,stages=8,split=1,raster=0,cluster=4,multicast=1,persistent=0,overlap=1,promote=0");
  add("w8a8-fp8-ch", 4096, "bm=128,bn=128,bk=128,stages=4,split=1,raster=2,cluster=4,multicast=2,persistent=1,overlap=1,promote=0");
  // wgmma reading the weights from shared memory (ss=1): block scales folded on 128- and 192-token tiles (one and two
  // atoms per slot), a group in flight with and without flushes, split-K, clusters sharing either operand, turns, two K
  // groups, every 8-bit operand pairing.
  add("w8a8-fp8-block128x128", 4096, "bm=128,bn=128,bk=128,stages=5,split=1,raster=2,cluster=1,multicast=0,persistent=1,ss=1");
  add("w8a8-fp8-block128x128", 4096, "bm=192,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=1,ss=1");
  add("w8a8-int8-block128x128", 4096, "bm=128,bn=128,bk=256,stages=3,split=1,raster=2,cluster=2,multicast=2,persistent=1,ss=1");
  add("w8a8-fp8-block128x128", 4096, "bm=128,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=1,overlap=1,ss=1");
  add("w8a8-fp8-ch", 4096, "bm=256,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=1,overlap=1,promote=0,ss=1");
  add("w8a8-int8-ch", 4096, "bm=256,bn=128,bk=128,stages=4,split=1,raster=2,cluster=2,multicast=1,persistent=1,overlap=1,ss=1");
  add("w8a8-fp8-e5m2", 4096, "bm=128,bn=128,bk=128,stages=6,split=1,raster=2,cluster=1,multicast=0,persistent=1,pingpong=1,ss=1");
  add("w8a8-e5m2-e5m2", 64, "bm=64,bn=64,bk=128,stages=8,split=1,raster=0,cluster=1,multicast=0,persistent=0,promote=128,kgroups=2,ss=1");
  add("w8a8-fp8-tensor", 16, "bm=16,bn=64,bk=256,stages=4,split=2,raster=0,cluster=2,multicast=1,persistent=0,promote=0,ss=1");
  test_support::check_each_compiled(requests, labels, [](const std::string& label, const jit::CompiledKernel& kernel) {
    EXPECT_EQ(kernel.resources.spill_store_bytes, 0) << label;
    EXPECT_EQ(kernel.resources.stack_frame_bytes, 0) << label;
    EXPECT_EQ(kernel.log.find("C751"), std::string::npos) << label << ": " << kernel.log;
    EXPECT_EQ(kernel.log.find("C7508"), std::string::npos) << label << ": " << kernel.log;
  });
  for (int sm : {80, 89, 100, 120}) {
    const ArchSupport support = tma_family().supports(FormatSpec::parse("w8a8-fp8-ch"), sm);
    EXPECT_FALSE(support.supported) << sm;
    EXPECT_NE(support.reason.find("sm_" + std::to_string(sm)), std::string::npos) << support.reason;
  }
  EXPECT_FALSE(tma_family().supports(FormatSpec::parse("w4a4-int4-ch"), 90).supported);
  const KernelConfig config = KernelConfig::parse("bm=64,bn=128,bk=128,stages=4,split=1,raster=0,cluster=1,multicast=0,persistent=0", "tma");
  EXPECT_THROW(tma_family().instantiation_source(config, FormatSpec::parse("w8a8-fp8-ch"), "sm_90"), UnsupportedError);
}

}  // namespace
}  // namespace qtune
