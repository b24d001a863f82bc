// GPU correctness of the mma family against the CPU reference (skipped with a reason when there is no GPU):
// every weight-only format, every quantized-activation format the GPU supports (W8A8 int8/fp8, W4A8, W4A4), a
// spread of configurations, M = 1, M not a multiple of the tile, K at the smallest group
// granularity, N = K = 8192 and N = 5120, K = 13824; random data, output poisoned with NaN before each launch.
// Split-K and warp-K reductions must be bit-identical from run to run.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "kernels/families/mma_family.hpp"
#include "kernels/families/mma_layout.hpp"
#include "kernels/families/tma_family.hpp"
#include "kernels/families/wgmma_family.hpp"
#include "kernels/family.hpp"
#include "kernels/reference.hpp"
#include "tests/tuner/kernel/kernel_test_support.hpp"
#include "tests/tuner/runtime/gpu_test_support.hpp"
#include "tuner/gemm/gemm_runner.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/runtime/device.hpp"
#include "tuner/runtime/stream.hpp"

namespace qtune {
namespace {

struct Case {
  std::string spec;
  int64_t m, n, k;
  std::string config;  // empty: the family's default for the device
  bool bias = false;
};

struct CaseResult {
  Case c;
  KernelConfig config;
  std::string outcome;  // verification summary or the error
  bool passed = false;
};

std::string case_label(const Case& c) {
  char text[160];
  std::snprintf(text, sizeof(text), "%-28s m=%-5s n=%-6s k=%-6s%s", c.spec.c_str(), std::to_string(c.m).c_str(),
                std::to_string(c.n).c_str(), std::to_string(c.k).c_str(), c.bias ? " bias" : "     ");
  return text;
}

// Compiles every case's kernel in parallel, then runs the cases one by one; one line per case goes to stdout.
std::vector<CaseResult> run_cases(const std::vector<Case>& cases, const KernelFamily& family = mma_family()) {
  const ArchLimits limits = gemm::device_limits();
  const std::string arch = gemm::nvrtc_arch(limits.sm);
  std::vector<CaseResult> results;
  std::vector<jit::CompileRequest> requests;
  std::map<std::string, size_t> request_index;  // source -> request
  std::vector<std::optional<size_t>> case_request;
  for (const Case& c : cases) {
    CaseResult result{c, {}, "", false};
    Problem problem{FormatSpec::parse(c.spec), c.m, c.n, c.k, c.bias};
    try {
      result.config = c.config.empty() ? family.default_config(problem, limits) : KernelConfig::parse(c.config, family.name());
      const RuleVerdict verdict = family.check(result.config, problem, limits);
      if (!verdict.valid) QTUNE_THROW(Error, "check() rejects the case: " + verdict.rule + ": " + verdict.detail);
      const jit::CompileRequest request =
          test_support::family_compile_request(family, result.config, problem.format, arch);
      auto [it, inserted] = request_index.emplace(request.source, requests.size());
      if (inserted) requests.push_back(request);
      case_request.push_back(it->second);
    } catch (const std::exception& error) {
      result.outcome = std::string("setup failed: ") + error.what();
      case_request.push_back(std::nullopt);
    }
    results.push_back(result);
  }
  const jit::Compiler compiler;
  const std::vector<jit::CompileOutcome> compiled = compiler.compile_all(requests);

  std::map<std::string, gemm::GemmData> data_cache;  // weights per (spec, n, k, bias)
  runtime::Stream stream;
  for (size_t i = 0; i < results.size(); ++i) {
    CaseResult& result = results[i];
    const Case& c = result.c;
    if (!case_request[i]) {
      std::printf("[ case ] %s %s\n", case_label(c).c_str(), result.outcome.c_str());
      continue;
    }
    const jit::CompileOutcome& outcome = compiled[*case_request[i]];
    try {
      if (!outcome.ok()) QTUNE_THROW(Error, "compile failed: " + outcome.error_message.substr(0, 3000));
      const Problem problem{FormatSpec::parse(c.spec), c.m, c.n, c.k, c.bias};
      const std::string key = c.spec + "/" + std::to_string(c.n) + "/" + std::to_string(c.k) + (c.bias ? "/b" : "");
      auto cached = data_cache.find(key);
      if (cached == data_cache.end()) cached = data_cache.emplace(key, gemm::make_gemm_data(problem, 1234)).first;
      const gemm::GemmData data = gemm::with_new_activations(cached->second, c.m, 99 + static_cast<uint64_t>(c.m));
      const ReferenceResult reference = gemm::reference_for(data);
      gemm::LoadedKernel kernel(family, result.config, problem.format, *outcome.kernel);
      gemm::GemmDeviceData device(family, result.config, data);
      device.prepare(result.config);
      device.poison_output();
      device.launch(kernel, stream.get());
      stream.synchronize();
      const gemm::Verification verification =
          gemm::verify_output(device.output_bits(), problem.format.output, reference, default_tolerance(problem.format));
      result.passed = verification.passed;
      result.outcome = verification.summary() + " [" + std::to_string(outcome.kernel->resources.registers) + " regs]";
    } catch (const std::exception& error) {
      result.outcome = std::string("error: ") + error.what();
    }
    std::printf("[ case ] %s %-62s %s\n", case_label(c).c_str(), result.config.to_string().c_str(), result.outcome.c_str());
    std::fflush(stdout);
  }
  return results;
}

// Adds `c` when the family's rules take its config, else counts it as refused.
void add_if_valid(std::vector<Case>& cases, int& refused, const Case& c, const KernelFamily& family, const ArchLimits& limits) {
  const Problem problem{FormatSpec::parse(c.spec), c.m, c.n, c.k, c.bias};
  if (family.check(KernelConfig::parse(c.config, family.name()), problem, limits).valid) {
    cases.push_back(c);
  } else {
    ++refused;
  }
}

void expect_all_pass(const std::vector<CaseResult>& results) {
  int failed = 0;
  for (const CaseResult& result : results) {
    if (!result.passed) {
      ++failed;
      ADD_FAILURE() << result.c.spec << " m=" << result.c.m << " n=" << result.c.n << " k=" << result.c.k << " "
                    << result.config.to_string() << ": " << result.outcome;
    }
  }
  std::printf("[ cases ] %d of %zu passed\n", static_cast<int>(results.size()) - failed, results.size());
}

TEST(MmaGpu, Int4PerChannelAcrossShapesAndConfigs) {
  QTUNE_REQUIRE_GPU();
  std::vector<Case> cases;
  const char* spec = "w4a16-int4-ch";
  for (int64_t m : {1, 16, 64, 256}) cases.push_back({spec, m, 8192, 8192, ""});
  for (int64_t m : {1, 33}) cases.push_back({spec, m, 5120, 13824, ""});
  for (const char* config : {"bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=1,raster=0",
                             "bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=4,raster=0",
                             "bm=16,bn=64,bk=512,wm=1,wn=4,wk=1,stages=3,split=16,raster=0",
                             "bm=16,bn=64,bk=256,wm=1,wn=2,wk=2,stages=4,split=2,raster=0",
                             "bm=16,bn=256,bk=128,wm=1,wn=8,wk=1,stages=6,split=3,raster=0",
                             "bm=16,bn=32,bk=256,wm=1,wn=1,wk=4,stages=2,split=1,raster=0",
                             "bm=16,bn=16,bk=64,wm=1,wn=1,wk=1,stages=5,split=8,raster=0"}) {
    cases.push_back({spec, 1, 8192, 8192, config});
  }
  // Tiles that raised illegal instructions in the H200 main job (call Q) while the unrolled weight loads carried the
  // L2 evict-first hint: bk=128 with wk=2 at 256 threads.
  for (int64_t m : {4, 16}) cases.push_back({spec, m, 8192, 8192, "bm=16,bn=64,bk=128,wm=1,wn=4,wk=2,stages=4,split=2,raster=0"});
  cases.push_back({spec, 1, 10240, 8192, "bm=16,bn=64,bk=128,wm=1,wn=4,wk=2,stages=4,split=4,raster=0"});
  cases.push_back({spec, 32, 8192, 28672, "bm=32,bn=128,bk=128,wm=2,wn=2,wk=2,stages=4,split=4,raster=0"});
  for (const char* config : {"bm=32,bn=128,bk=128,wm=2,wn=2,wk=1,stages=4,split=1,raster=1",
                             "bm=64,bn=128,bk=128,wm=2,wn=4,wk=1,stages=3,split=2,raster=0",
                             "bm=64,bn=64,bk=64,wm=4,wn=1,wk=1,stages=2,split=1,raster=0"}) {
    cases.push_back({spec, 33, 5120, 13824, config});
  }
  for (const char* config : {"bm=128,bn=128,bk=64,wm=2,wn=4,wk=1,stages=4,split=1,raster=1",
                             "bm=64,bn=256,bk=64,wm=2,wn=4,wk=1,stages=3,split=1,raster=3",
                             "bm=256,bn=64,bk=64,wm=4,wn=2,wk=1,stages=3,split=1,raster=0"}) {
    cases.push_back({spec, 300, 4096, 4096, config, true});
  }
  expect_all_pass(run_cases(cases));
}

// M <= 8 with BLOCK_M = 16 runs swap-AB (weights on the MMA's m16 side, tokens on n8) and transposes the fragments
// back: every token row, both n8 halves of each strip, warp-K and split-K reductions, bias, an integer MMA.
TEST(MmaGpu, SwapAbUpToEightRows) {
  QTUNE_REQUIRE_GPU();
  std::vector<Case> cases;
  for (int64_t m : {2, 5, 8}) {
    cases.push_back({"w4a16-int4-ch", m, 4096, 4096, "bm=16,bn=64,bk=128,wm=1,wn=4,wk=1,stages=4,split=4,raster=0", m == 5});
    cases.push_back({"w4a16-int4-ch", m, 1024, 2048, "bm=16,bn=32,bk=256,wm=1,wn=1,wk=2,stages=3,split=1,raster=0"});
    cases.push_back({"w4a16-int4-g128:out=bf16", m, 2048, 4096, "bm=16,bn=128,bk=128,wm=1,wn=8,wk=1,stages=3,split=1,raster=0"});
    cases.push_back({"w8a8-int8-ch", m, 4096, 4096, "bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=2,raster=0"});
  }
  expect_all_pass(run_cases(cases));
}

// The mma family's K-group scales on the partial sums (gscale=1): every group size and weight type that has them (no
// zero points), f16 and bf16 activations and output; the issue-16 decode tile (swap-AB at M <= 8: M = 1 and 5), warps
// splitting K with two groups per tile, one group over two K tiles with split-K ranges that start and end inside a
// group (K = 2048 and 4096 in 3 ranges of 64-deep tiles), 32- and 64-row tiles, rasterization, bias.
TEST(MmaGpu, GroupScalesOnPartialSums) {
  QTUNE_REQUIRE_GPU();
  const ArchLimits limits = gemm::device_limits();
  std::vector<Case> cases;
  int refused = 0;
  for (const char* spec : {"w4a16-int4-g128", "w4a16-int4-g128-bf16", "w4a16-int4-g128:out=bf16", "w2a16-int2-g64", "w3a16-int3-g32",
                           "w8a16-int8-g128-bf16", "w4a16-e2m1-g32", "w4a16-int4-g64:scale=f32", "w4a16-int4-block64x128"}) {
    for (const char* config : {"bm=16,bn=64,bk=128,wm=1,wn=4,wk=1,stages=4,split=4,raster=0,gscale=1",
                               "bm=16,bn=128,bk=256,wm=1,wn=4,wk=2,stages=4,split=2,raster=0,gscale=1",
                               "bm=16,bn=64,bk=64,wm=1,wn=4,wk=1,stages=4,split=3,raster=0,gscale=1",
                               "bm=32,bn=128,bk=128,wm=1,wn=4,wk=1,stages=3,split=2,raster=0,gscale=1",
                               "bm=64,bn=64,bk=128,wm=2,wn=2,wk=1,stages=4,split=1,raster=1,gscale=1"}) {
      for (const Case& c : {Case{spec, 1, 1024, 2048, config}, Case{spec, 5, 2048, 4096, config, true},
                            Case{spec, 77, 2048, 4096, config, true}}) {
        const Problem problem{FormatSpec::parse(c.spec), c.m, c.n, c.k, c.bias};
        if (mma_family().check(KernelConfig::parse(c.config, "mma"), problem, limits).valid) {
          cases.push_back(c);
        } else {
          ++refused;  // tiles at least twice M, or a group the tile's depth does not divide
        }
      }
    }
  }
  EXPECT_GE(cases.size(), 80u) << refused << " refused by the rules";
  expect_all_pass(run_cases(cases));
}

// The wgmma family (sm_90a only): every weight-only preset and a spread of weight types, token counts from 1 to 300
// (wgmma N = 16..128, M tails inside one tile), split-K, rasterization, bias, both large shapes.
TEST(WgmmaGpu, WeightOnlyFormatsShapesAndConfigs) {
  QTUNE_REQUIRE_GPU();
  const ArchLimits limits = gemm::device_limits();
  if (!wgmma_family().supports(FormatSpec::parse("w4a16-int4-ch"), limits.sm).supported) {
    GTEST_SKIP() << "sm_" << limits.sm << " has no wgmma (the family runs on sm_90 only)";
  }
  std::vector<Case> cases;
  const char* spec = "w4a16-int4-ch";
  for (int64_t m : {1, 7, 16, 33, 64, 100, 256, 300}) cases.push_back({spec, m, 8192, 8192, "", m == 33});
  for (int64_t m : {1, 45, 128}) cases.push_back({spec, m, 5120, 13824, ""});
  for (const char* config : {"bm=16,bn=64,bk=64,stages=2,split=1,raster=0", "bm=16,bn=256,bk=256,stages=3,split=4,raster=0",
                             "bm=32,bn=128,bk=128,stages=4,split=3,raster=0", "bm=64,bn=64,bk=128,stages=5,split=2,raster=0",
                             "bm=64,bn=256,bk=64,stages=4,split=1,raster=2", "bm=128,bn=128,bk=64,stages=4,split=2,raster=1",
                             "bm=128,bn=64,bk=128,stages=3,split=1,raster=3",
                             // overlap=1: even and odd K-tile counts per split (the odd last stage runs after the loop)
                             "bm=16,bn=64,bk=64,stages=3,split=3,raster=0,overlap=1", "bm=64,bn=128,bk=128,stages=4,split=1,raster=0,overlap=1",
                             "bm=128,bn=64,bk=64,stages=3,split=1,raster=2,overlap=1", "bm=32,bn=256,bk=64,stages=5,split=6,raster=0,overlap=1",
                             "bm=64,bn=64,bk=256,stages=4,split=1,raster=1,overlap=1"}) {
    cases.push_back({spec, 200, 4096, 4096, config, true});
  }
  // A single K tile per split, with a stage in flight.
  cases.push_back({spec, 40, 1024, 1024, "bm=64,bn=64,bk=256,stages=3,split=4,raster=0,overlap=1"});
  std::vector<std::string> specs;
  for (const FormatPreset& preset : format_presets()) {
    const FormatSpec format = FormatSpec::parse(preset.name);
    // fp8 activations (widened): WgmmaGpu.WidenedFp8Activations
    if (wgmma_family().supports(format, limits.sm).supported && !format.activation_is_quantized()) specs.push_back(preset.name);
  }
  for (const char* extra : {"w2a16-int2-g64", "w3a16-int3-g32", "w8a16-int8-g128-bf16", "w5a16-uint5-g32-fzp",
                            "w8a16-uint8-g64-zp-bf16", "w4a16-e2m1-g32", "w8a16-e4m3-ch", "w6a16-e3m2-ch",
                            "w4a16-int4-g64:scale=f32", "w4a16-int4-ch:out=bf16", "w4a16-int4-block64x128"}) {
    specs.push_back(extra);
  }
  for (const std::string& format : specs) {
    cases.push_back({format, 1, 1024, 2048, ""});
    cases.push_back({format, 77, 2048, 4096, "", true});
    cases.push_back({format, 77, 2048, 4096, "bm=32,bn=64,bk=64,stages=3,split=3,raster=0,overlap=1"});
  }
  expect_all_pass(run_cases(cases, wgmma_family()));
}

// fp8 activations widened to f16 (wgmma family): W4A8 int4 per channel (f32 and f16 scales), g128 (gscale=1), fp4
// g32 and per channel, int4 with e5m2 activations, W8A8 fp8 (e4m3 per channel and per tensor, e5m2); token counts 1
// to 300 (tails inside a tile), split-K, a stage in flight, bias, N = K = 8192 and N = 5120 with K = 13824.
TEST(WgmmaGpu, WidenedFp8Activations) {
  QTUNE_REQUIRE_GPU();
  const ArchLimits limits = gemm::device_limits();
  if (!wgmma_family().supports(FormatSpec::parse("w4a8-int4-fp8"), limits.sm).supported) {
    GTEST_SKIP() << "sm_" << limits.sm << " has no wgmma (the family runs on sm_90 only)";
  }
  std::vector<Case> cases;
  int refused = 0;
  for (int64_t m : {1, 16, 64, 300}) cases.push_back({"w4a8-int4-fp8", m, 8192, 8192, ""});
  for (int64_t m : {1, 45}) cases.push_back({"w4a8-int4-fp8", m, 5120, 13824, ""});
  for (const char* spec : {"w4a8-int4-fp8", "w4a8-int4-fp8:scale=f16", "w4a8-int4-g128-fp8", "w4a8-fp4-g32-fp8", "w4a8-int4-e5m2",
                           "w4a8-fp4-fp8", "w8a8-fp8-ch", "w8a8-fp8-tensor", "w8a8-e5m2-e5m2"}) {
    const bool grouped = FormatSpec::parse(spec).weight_scale.group_k > 0;
    const std::string gscale = grouped ? ",overlap=0,gscale=1" : ",overlap=0,gscale=0";
    for (const std::string& config : {"bm=16,bn=128,bk=256,stages=4,split=4,raster=0" + gscale,
                                      "bm=16,bn=64,bk=128,stages=3,split=3,raster=0" + gscale,
                                      "bm=32,bn=128,bk=128,stages=4,split=2,raster=0" + gscale,
                                      "bm=64,bn=128,bk=256,stages=3,split=1,raster=1" + gscale,
                                      std::string("bm=64,bn=128,bk=128,stages=4,split=2,raster=0,overlap=1,gscale=0")}) {
      // refused: bm over M, overlap with K-group scales, g32's partial sums at bm = 64
      for (const Case& c : {Case{spec, 1, 1024, 2048, config}, Case{spec, 7, 2048, 4096, config}, Case{spec, 77, 2048, 4096, config, true}}) {
        add_if_valid(cases, refused, c, wgmma_family(), limits);
      }
    }
    cases.push_back({spec, 33, 4096, 4096, "", true});  // the heuristic's tile
  }
  EXPECT_GE(cases.size(), 70u) << refused << " refused by the rules";
  expect_all_pass(run_cases(cases, wgmma_family()));
}

// The wgmma family's K-group scales on the partial sums (gscale=1): every group size and weight type that has them
// (no zero points), groups inside a stage (up to 8 sets at g32, bk = 256), one group over two or four stages with
// split-K ranges starting and ending inside a group, token tiles 16 to 64, bias.
TEST(WgmmaGpu, GroupScalesOnPartialSums) {
  QTUNE_REQUIRE_GPU();
  const ArchLimits limits = gemm::device_limits();
  if (!wgmma_family().supports(FormatSpec::parse("w4a16-int4-g128"), limits.sm).supported) {
    GTEST_SKIP() << "sm_" << limits.sm << " has no wgmma (the family runs on sm_90 only)";
  }
  std::vector<Case> cases;
  int refused = 0;
  for (const char* spec : {"w4a16-int4-g128", "w4a16-int4-g128-bf16", "w4a16-int4-g128:out=bf16", "w2a16-int2-g64", "w3a16-int3-g32",
                           "w8a16-int8-g128-bf16", "w4a16-e2m1-g32", "w4a16-int4-g64:scale=f32", "w4a16-int4-block64x128"}) {
    for (const char* config : {"bm=16,bn=128,bk=256,stages=4,split=1,raster=0,overlap=0,gscale=1",
                               "bm=16,bn=64,bk=64,stages=4,split=3,raster=0,overlap=0,gscale=1",
                               "bm=32,bn=128,bk=128,stages=3,split=2,raster=0,overlap=0,gscale=1",
                               "bm=64,bn=64,bk=128,stages=4,split=1,raster=1,overlap=0,gscale=1"}) {
      // refused: 8 sets of 32 registers at bm = 32, or a group the tile's depth does not divide
      for (const Case& c : {Case{spec, 1, 1024, 2048, config}, Case{spec, 77, 2048, 4096, config, true}}) {
        add_if_valid(cases, refused, c, wgmma_family(), limits);
      }
    }
  }
  EXPECT_EQ(cases.size(), 52u) << refused << " refused by the rules";  // 20 refused: bm over M at M = 1 (16), g32 at bm = 64 (4 sets of 32 registers)
  expect_all_pass(run_cases(cases, wgmma_family()));
}

// The tma family (sm_90a only): W8A8 fp8 (e4m3, e5m2; tensor, channel x token, 128x128 blocks), W8A8 int8, W4A8
// (int4 and fp4 weights converted in registers) and weight-only formats; token counts inside and across tiles, split-K
// with flushes that span splits, persistence, clusters with multicast of either operand (a pair's second tile past M
// included), rasterization, bias, N = 5120 with K = 13824 and N = K = 8192.
TEST(TmaGpu, FormatsShapesAndConfigs) {
  QTUNE_REQUIRE_GPU();
  const ArchLimits limits = gemm::device_limits();
  if (!tma_family().supports(FormatSpec::parse("w8a8-fp8-ch"), limits.sm).supported) {
    GTEST_SKIP() << "sm_" << limits.sm << " has no wgmma (the tma family runs on sm_90 only)";
  }
  std::vector<Case> cases;
  const char* quantized[] = {"w8a8-fp8-ch",        "w8a8-fp8-tensor",    "w8a8-fp8-block128x128", "w8a8-e5m2-e5m2",
                             "w8a8-fp8-e5m2",      "w8a8-int8-ch",       "w8a8-int8-tensor",      "w8a8-int8-block128x128",
                             "w4a8-int4-fp8",      "w4a8-fp4-fp8",       "w4a8-int4-int8",        "w4a8-int4-g128-int8",
                             "w4a8-fp4-g32-fp8",   "w8a8-int8-g256",     "w8a8-fp8-ch:out=bf16",  "w6a8-e3m2-g32-fp8",
                             "w4a8-int4-e5m2",     "w4a8-int4-g128-fp8"};
  // A config the family's rules refuse for a format (registers of its flushes) is left out for that format only.
  auto add_if_valid = [&](const Case& c) {
    const Problem problem{FormatSpec::parse(c.spec), c.m, c.n, c.k, c.bias};
    if (tma_family().check(KernelConfig::parse(c.config, "tma"), problem, limits).valid) cases.push_back(c);
  };
  for (const char* spec : quantized) {
    cases.push_back({spec, 1, 1024, 2048, ""});
    cases.push_back({spec, 77, 2048, 4096, "", true});
    cases.push_back({spec, 77, 2048, 4096, "bm=32,bn=64,bk=128,stages=3,split=3,raster=0,cluster=1,multicast=0,persistent=1"});
    add_if_valid({spec, 300, 2048, 4096, "bm=128,bn=128,bk=256,stages=3,split=1,raster=2,cluster=2,multicast=1,persistent=0"});
    cases.push_back({spec, 300, 2048, 4096, "bm=128,bn=64,bk=128,stages=6,split=1,raster=0,cluster=2,multicast=2,persistent=0", true});
  }
  for (const char* spec : {"w4a16-int4-ch", "w4a16-int4-g128-zp", "w4a16-int4-ch:out=bf16", "w4a16-fp4-g32", "nvfp4",
                           "w8a16-fp8-ch", "w4a16-int4-g128-bf16"}) {
    cases.push_back({spec, 1, 1024, 2048, ""});
    cases.push_back({spec, 77, 2048, 4096, "", true});
    cases.push_back({spec, 200, 4096, 4096, "bm=256,bn=128,bk=64,stages=4,split=1,raster=0,cluster=2,multicast=1,persistent=0"});
    cases.push_back({spec, 200, 4096, 4096, "bm=64,bn=128,bk=128,stages=5,split=2,raster=0,cluster=1,multicast=0,persistent=1"});
    // A wgmma group in flight while the next slot is converted: one and several pairs of K tiles per unit.
    cases.push_back({spec, 200, 4096, 4096, "bm=128,bn=128,bk=128,stages=4,split=8,raster=2,cluster=1,multicast=0,persistent=1,overlap=1"});
    cases.push_back({spec, 300, 2048, 4096, "bm=128,bn=64,bk=64,stages=6,split=2,raster=0,cluster=2,multicast=2,persistent=1,overlap=1", true});
  }
  for (const char* spec : {"w8a8-int8-ch", "w8a8-int8-tensor", "w4a8-int4-int8"}) {
    cases.push_back({spec, 77, 2048, 4096, "bm=128,bn=128,bk=128,stages=4,split=8,raster=0,cluster=1,multicast=0,persistent=0,overlap=1"});
    cases.push_back({spec, 300, 4096, 4096, "bm=256,bn=128,bk=128,stages=4,split=1,raster=2,cluster=2,multicast=1,persistent=0,overlap=1", true});
  }
  const char* fp8 = "w8a8-fp8-ch";
  for (int64_t m : {16, 64, 256}) cases.push_back({fp8, m, 8192, 8192, ""});
  for (int64_t m : {45, 128}) cases.push_back({fp8, m, 5120, 13824, ""});
  for (int64_t m : {64, 256}) cases.push_back({"w4a8-int4-fp8", m, 8192, 8192, ""});
  cases.push_back({"w8a8-fp8-block128x128", 256, 5120, 13824, ""});
  cases.push_back({"w8a8-int8-ch", 256, 5120, 13824, ""});
  for (const char* config : {"bm=16,bn=128,bk=128,stages=8,split=4,raster=0,cluster=1,multicast=0,persistent=1",
                             "bm=64,bn=128,bk=256,stages=4,split=6,raster=0,cluster=2,multicast=1,persistent=1",
                             "bm=32,bn=64,bk=128,stages=7,split=2,raster=1,cluster=2,multicast=2,persistent=0",
                             "bm=64,bn=64,bk=128,stages=8,split=3,raster=0,cluster=1,multicast=0,persistent=1"}) {
    cases.push_back({fp8, 40, 5120, 13824, config, true});
    cases.push_back({fp8, 300, 4096, 4096, config});
  }
  for (const char* config : {"bm=128,bn=128,bk=128,stages=2,split=1,raster=3,cluster=2,multicast=2,persistent=0",
                             "bm=64,bn=128,bk=128,stages=6,split=2,raster=2,cluster=1,multicast=0,persistent=1",
                             "bm=64,bn=128,bk=128,stages=6,split=1,raster=2,cluster=2,multicast=2,persistent=1",
                             "bm=128,bn=128,bk=128,stages=6,split=1,raster=2,cluster=2,multicast=1,persistent=0"}) {
    cases.push_back({fp8, 300, 4096, 4096, config});
  }
  // fp8 promotion intervals at K = 8192 and 13824 (the tolerance decides whether fewer promotions are exact enough):
  // never (the wgmma accumulators are the result, with a group in flight), every 256 K across two slots or within one,
  // every 512 K; split-K ranges that end inside a promotion interval.
  for (const char* spec : {"w8a8-fp8-ch", "w8a8-fp8-tensor", "w8a8-fp8-e5m2", "w8a8-e5m2-e5m2", "w4a8-int4-fp8", "w4a8-int4-e5m2"}) {
    for (const char* config : {"bm=128,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=0,promote=0",
                               "bm=256,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=0,overlap=1,promote=0",
                               "bm=128,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=0,promote=256",
                               "bm=128,bn=128,bk=256,stages=3,split=1,raster=2,cluster=1,multicast=0,persistent=0,promote=512"}) {
      add_if_valid({spec, 256, 8192, 8192, config});
    }
    add_if_valid({spec, 45, 5120, 13824, "bm=64,bn=64,bk=128,stages=8,split=3,raster=0,cluster=1,multicast=0,persistent=1,promote=512", true});
    add_if_valid({spec, 300, 5120, 13824, "bm=128,bn=128,bk=256,stages=3,split=1,raster=2,cluster=1,multicast=0,persistent=0,promote=256"});
    add_if_valid({spec, 300, 5120, 13824, "bm=256,bn=128,bk=128,stages=4,split=2,raster=2,cluster=2,multicast=2,persistent=1,overlap=1,promote=0", true});
    add_if_valid({spec, 1000, 4096, 8192, "bm=128,bn=64,bk=128,stages=6,split=1,raster=2,cluster=1,multicast=0,persistent=1,overlap=1,promote=0"});
  }
  // A group in flight with flushed partial sums (the tile's tokens in two halves, one scaled in while the other
  // multiplies): block and K-group scales, fp8 promotions every slot, split-K, persistence over several units, a
  // cluster sharing the weights, M not a multiple of the tile, odd shapes.
  for (const char* spec : {"w8a8-fp8-block128x128", "w8a8-int8-block128x128", "w4a8-int4-g128-fp8", "w4a8-int4-g128-int8",
                           "w8a8-fp8-ch", "w4a8-int4-fp8"}) {
    for (const char* config : {"bm=128,bn=128,bk=128,stages=4,split=2,raster=2,cluster=1,multicast=0,persistent=1,overlap=1,promote=128",
                               "bm=64,bn=128,bk=128,stages=6,split=4,raster=0,cluster=1,multicast=0,persistent=0,overlap=1,promote=128",
                               "bm=128,bn=64,bk=128,stages=6,split=1,raster=2,cluster=1,multicast=0,persistent=1,overlap=1,promote=128",
                               "bm=32,bn=128,bk=128,stages=6,split=2,raster=0,cluster=1,multicast=0,persistent=0,overlap=1,promote=128",
                               "bm=128,bn=128,bk=128,stages=4,split=1,raster=2,cluster=2,multicast=2,persistent=0,overlap=1,promote=128"}) {
      add_if_valid({spec, 300, 4096, 4096, config});
      add_if_valid({spec, 77, 2048, 4096, config, true});
      add_if_valid({spec, 45, 5120, 13824, config});
      add_if_valid({spec, 1000, 4096, 8192, config});
    }
  }
  add_if_valid({"w8a8-int8-g256", 300, 2048, 4096, "bm=128,bn=128,bk=256,stages=3,split=1,raster=2,cluster=1,multicast=0,persistent=0,overlap=1"});
  // Block scales folded into the token scales by the producer's second warp where the blocks span the tile's columns
  // (Gn = 128 with bn = 64 and 128), and scaled per column where they do not (Gn = 64 with bn = 128); 128 x 128 blocks
  // above, MoE ones in TmaMoeGpu.
  for (const char* spec : {"w8a8-fp8-block64x128", "w8a8-int8-block64x128", "w8a8-fp8-block128x128"}) {
    for (const char* config : {"bm=128,bn=128,bk=256,stages=3,split=1,raster=2,cluster=1,multicast=0,persistent=1",
                               "bm=64,bn=64,bk=128,stages=6,split=2,raster=0,cluster=1,multicast=0,persistent=0,overlap=1",
                               "bm=16,bn=128,bk=128,stages=4,split=4,raster=0,cluster=2,multicast=1,persistent=0"}) {
      add_if_valid({spec, 300, 4096, 4096, config});
      add_if_valid({spec, 45, 5120, 13824, config, true});
    }
  }
  // 192-token tiles: with flushed partial sums (192 accumulators per consumer thread, 232 registers) block scales
  // folded (Gn = 128, three warps staging the products) or per column (Gn = 64), K-group scales, fp8 promotions;
  // split-K, persistence over several units, a cluster sharing the weights (its second tile partly past M), M not a
  // multiple of 192, odd shapes; and without flushes (s32 sums, fp8 never promoting, f16) with a group in flight.
  const size_t before_192 = cases.size();
  for (const char* spec : {"w8a8-fp8-block128x128", "w8a8-int8-block128x128", "w8a8-fp8-block64x128", "w4a8-int4-g128-fp8",
                           "w4a8-int4-g128-int8", "w8a8-fp8-ch"}) {
    const std::string persistent = "bm=192,bn=128,bk=128,stages=5,split=1,raster=2,cluster=1,multicast=0,persistent=1,promote=128";
    const std::string split = "bm=192,bn=128,bk=128,stages=4,split=2,raster=0,cluster=1,multicast=0,persistent=0,promote=128";
    const std::string cluster = "bm=192,bn=64,bk=128,stages=6,split=1,raster=2,cluster=2,multicast=2,persistent=0,promote=128";
    add_if_valid({spec, 1000, 4096, 8192, persistent});
    add_if_valid({spec, 2000, 5120, 13824, persistent, true});
    add_if_valid({spec, 300, 4096, 4096, split});
    add_if_valid({spec, 150, 5120, 13824, split, true});
    add_if_valid({spec, 300, 4096, 4096, cluster});
    add_if_valid({spec, 1000, 4096, 8192, cluster, true});
    add_if_valid({spec, 1000, 4096, 8192, "bm=192,bn=128,bk=128,stages=4,split=2,raster=2,cluster=1,multicast=0,persistent=1,promote=128"});
  }
  EXPECT_EQ(cases.size() - before_192, 42u) << "the rules refused some of the flushed 192-token cases";
  for (const char* spec : {"w8a8-int8-ch", "w8a8-fp8-ch", "w4a16-int4-ch"}) {
    const std::string promote = std::string(spec) == "w8a8-fp8-ch" ? ",promote=0" : "";
    add_if_valid({spec, 1000, 4096, 8192, "bm=192,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=1,overlap=1" + promote});
    add_if_valid({spec, 300, 5120, 13824, "bm=192,bn=128,bk=128,stages=4,split=2,raster=0,cluster=1,multicast=0,persistent=0" + promote, true});
  }
  // Consumer warpgroups taking turns on the tensor cores: flushes every batch or none, chunks within a slot, split-K
  // (the reduction's barrier between turns), clusters, persistence over several units.
  for (const char* spec : {"w8a8-fp8-ch", "w8a8-fp8-block128x128", "w4a8-int4-fp8", "w8a8-int8-ch", "w4a16-int4-ch", "w8a8-fp8-e5m2"}) {
    add_if_valid({spec, 300, 4096, 4096, "bm=128,bn=128,bk=128,stages=4,split=2,raster=2,cluster=1,multicast=0,persistent=1,pingpong=1", true});
    add_if_valid({spec, 300, 5120, 13824, "bm=128,bn=128,bk=256,stages=3,split=1,raster=2,cluster=2,multicast=2,persistent=0,pingpong=1"});
    add_if_valid({spec, 1000, 4096, 8192, "bm=128,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=1,pingpong=1"});
  }
  cases.push_back({fp8, 256, 8192, 8192, "bm=128,bn=128,bk=128,stages=6,split=1,raster=2,cluster=1,multicast=0,persistent=0,promote=256,pingpong=1"});
  // Two K groups of consumers per 64 columns taking the slots in turn (even rings and equal even K ranges only: rule
  // kgroups-even-ring), flushes per slot (promotions, K-group and block scales, token scales), split-K, clusters,
  // persistence over several units.
  for (const char* spec : {"w4a8-int4-fp8", "w8a8-fp8-ch", "w8a8-fp8-block128x128", "w8a8-int8-ch", "w4a16-int4-ch",
                           "w4a16-int4-g128", "w4a8-int4-g128-int8", "w4a8-fp4-g32-fp8"}) {
    const bool fp8_plain = FormatSpec::parse(spec).activation_is_quantized();
    const std::string promote = std::string(",promote=") + (fp8_plain ? "0" : "128");
    for (const std::string& config : {"bm=64,bn=64,bk=128,stages=8,split=1,raster=0,cluster=1,multicast=0,persistent=0" + promote,
                                     "bm=16,bn=64,bk=128,stages=6,split=2,raster=0,cluster=1,multicast=0,persistent=1" + promote,
                                     "bm=128,bn=64,bk=128,stages=4,split=1,raster=2,cluster=2,multicast=2,persistent=0" + promote,
                                     std::string("bm=64,bn=64,bk=128,stages=4,split=1,raster=0,cluster=1,multicast=0,persistent=1,promote=128")}) {
      add_if_valid({spec, 1, 1024, 2048, config + ",kgroups=2"});
      add_if_valid({spec, 77, 2048, 4096, config + ",kgroups=2", true});
      add_if_valid({spec, 300, 4096, 1280, config + ",kgroups=2"});  // 10 K tiles
      add_if_valid({spec, 64, 8192, 8192, config + ",kgroups=2"});
    }
  }
  // Clusters of four: activations multicast to four tiles along N while the weights stream (M = 64, one slab per
  // CTA at bk = 256 f16, two CTAs issuing nothing at bk = 128 f16), with split-K, persistence and a group in flight;
  // weights multicast to four tiles along M, the last partly (M = 200) or wholly (M = 150: rows 192-255) past M.
  for (const char* spec : {"w4a16-int4-ch", "w4a16-int4-g128", "w4a8-int4-fp8", "w8a8-fp8-ch", "w8a8-int8-ch"}) {
    const bool fp8_plain = FormatSpec::parse(spec).activation_is_quantized();
    const std::string promote = std::string(",promote=") + (fp8_plain ? "0" : "128");
    for (const std::string& config : {"bm=64,bn=64,bk=256,stages=4,split=1,raster=0,cluster=4,multicast=1,persistent=0,overlap=1" + promote,
                                     "bm=64,bn=64,bk=128,stages=6,split=2,raster=0,cluster=4,multicast=1,persistent=1" + promote,
                                     "bm=32,bn=128,bk=128,stages=4,split=1,raster=0,cluster=4,multicast=1,persistent=0" + promote,
                                     "bm=64,bn=64,bk=128,stages=4,split=1,raster=0,cluster=4,multicast=1,persistent=0" + promote + ",kgroups=2",
                                     "bm=64,bn=128,bk=128,stages=4,split=1,raster=2,cluster=4,multicast=2,persistent=0" + promote}) {
      add_if_valid({spec, 64, 4096, 4096, config});
      add_if_valid({spec, 77, 2048, 4096, config, true});
      add_if_valid({spec, 200, 4096, 4096, config});
      add_if_valid({spec, 150, 2048, 2048, config});
    }
  }
  // Clusters along M whose second tile lies partly (M = 20) or wholly (M = 40: rows 48-63) past M.
  cases.push_back({fp8, 40, 2048, 2048, "bm=16,bn=128,bk=128,stages=4,split=1,raster=0,cluster=2,multicast=2,persistent=0"});
  cases.push_back({"w4a8-int4-fp8", 20, 2048, 2048, "bm=16,bn=64,bk=128,stages=4,split=2,raster=0,cluster=2,multicast=2,persistent=0"});
  expect_all_pass(run_cases(cases, tma_family()));
}

// The tma family with wgmma reading the weights from shared memory (ss=1: both operands through descriptors, the
// core-matrix atoms of raw 8-bit weights): every W8A8 format (fp8 e4m3 and e5m2 per tensor, channel x token, 128x128
// and 64x128 blocks, int8 per tensor, channel, K groups and blocks, bf16 output); one and two atoms per slot (bk =
// 128, 256: the atom-major copies), token tiles 16 to 256, flushes with and without a group in flight (token
// halves), promotions, split-K, persistence, clusters sharing either operand (the weight copies split by rank), two K
// groups of consumers, turns, bias, M not a multiple of the tile, N = 5120 with K = 13824.
TEST(TmaGpu, WeightsReadFromSharedMemory) {
  QTUNE_REQUIRE_GPU();
  const ArchLimits limits = gemm::device_limits();
  if (!tma_family().supports(FormatSpec::parse("w8a8-fp8-ch"), limits.sm).supported) {
    GTEST_SKIP() << "sm_" << limits.sm << " has no wgmma (the tma family runs on sm_90 only)";
  }
  std::vector<Case> cases;
  int refused = 0;
  auto add_if_valid = [&](const Case& c) {
    const Problem problem{FormatSpec::parse(c.spec), c.m, c.n, c.k, c.bias};
    if (tma_family().check(KernelConfig::parse(c.config, "tma"), problem, limits).valid) {
      cases.push_back(c);
    } else {
      ++refused;
    }
  };
  for (const char* spec : {"w8a8-fp8-ch", "w8a8-fp8-tensor", "w8a8-fp8-block128x128", "w8a8-fp8-block64x128", "w8a8-e5m2-e5m2",
                           "w8a8-fp8-e5m2", "w8a8-int8-ch", "w8a8-int8-tensor", "w8a8-int8-block128x128", "w8a8-int8-g256",
                           "w8a8-fp8-ch:out=bf16"}) {
    // fp8 without K-group scales chooses its promotions (never, here); every other format flushes as it must.
    const bool fp8_plain = tma_family()
                               .check(KernelConfig::parse("bm=128,bn=128,bk=128,stages=4,split=1,raster=0,cluster=1,multicast=0,"
                                                          "persistent=0,promote=0", "tma"),
                                      Problem{FormatSpec::parse(spec), 300, 4096, 4096, false}, limits)
                               .valid;
    const std::string promote = std::string(",promote=") + (fp8_plain ? "0" : "128");
    for (const std::string& config :
         {"bm=128,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=1" + promote,
          "bm=128,bn=128,bk=256,stages=3,split=2,raster=2,cluster=1,multicast=0,persistent=1" + promote,
          "bm=64,bn=128,bk=128,stages=6,split=4,raster=0,cluster=1,multicast=0,persistent=0,overlap=1" + promote,
          "bm=16,bn=64,bk=256,stages=4,split=2,raster=0,cluster=2,multicast=1,persistent=0" + promote,
          "bm=128,bn=128,bk=256,stages=3,split=1,raster=2,cluster=2,multicast=2,persistent=0" + promote,
          "bm=192,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=1" + promote,
          std::string("bm=256,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=1,overlap=1,promote=0"),
          "bm=128,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=1,pingpong=1" + promote,
          "bm=64,bn=64,bk=128,stages=8,split=1,raster=0,cluster=1,multicast=0,persistent=0,kgroups=2" + promote,
          "bm=32,bn=64,bk=128,stages=6,split=3,raster=0,cluster=1,multicast=0,persistent=1" + promote}) {
      add_if_valid({spec, 300, 4096, 4096, config + ",ss=1"});
      add_if_valid({spec, 77, 2048, 4096, config + ",ss=1", true});
    }
    add_if_valid({spec, 1000, 5120, 13824, "bm=128,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=1" + promote + ",ss=1"});
    add_if_valid({spec, 1000, 5120, 13824, "bm=192,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=1" + promote + ",ss=1"});
  }
  // 119 refused: tiles over M = 77 (bm >= 128), 256-token tiles of formats that flush, and what the register and
  // flush rules refuse.
  EXPECT_EQ(cases.size(), 123u) << refused << " refused by the rules";
  expect_all_pass(run_cases(cases, tma_family()));
}

// Every weight-only preset and the extra types: M = 1 at the smallest K the group allows, M not a multiple of 16,
// and the two large shapes.
TEST(MmaGpu, EveryWeightOnlyFormat) {
  QTUNE_REQUIRE_GPU();
  std::vector<std::string> specs;
  for (const FormatPreset& preset : format_presets()) {
    const FormatSpec format = FormatSpec::parse(preset.name);
    if (!format.activation_is_quantized() && !mma::unsupported_format_reason(format)) specs.push_back(preset.name);
  }
  for (const char* spec : {"w1a16-int1-ch", "w2a16-int2-g64", "w3a16-int3-g32", "w5a16-int5-ch", "w6a16-int6-g128",
                           "w7a16-int7-g64", "w8a16-int8-g128-bf16", "w2a16-uint2-g64-zp", "w5a16-uint5-g32-fzp",
                           "w8a16-uint8-ch-zp-bf16", "w8a16-uint8-g64-zp-bf16", "w7a16-uint7-g32-zp-bf16",
                           "w4a16-uint4-ch-fzp", "w4a16-e2m1-g32", "w6a16-e3m2-ch", "w6a16-e2m3-g64", "w8a16-e4m3-ch",
                           "w8a16-e5m2-g128", "w8a16-e4m3-ch-bf16", "w4a16-e2m1-g32-bf16", "w5a16-e2m2-g64",
                           "w8a16-e3m4-ch-bf16", "w4a16-int4-tensor", "w4a16-int4-block64x128",
                           "w4a16-int4-g128:scale=bf16", "w4a16-int4-ch:out=bf16", "w4a16-int4-g64:scale=f32"}) {
    specs.push_back(spec);
  }
  std::vector<Case> cases;
  for (const std::string& spec : specs) {
    const FormatSpec format = FormatSpec::parse(spec);
    const int64_t group = format.weight_scale.group_k > 0 ? format.weight_scale.group_k : 64;
    const int64_t k_min = std::lcm<int64_t>(group, 64);
    const std::string small = "bm=16,bn=32,bk=64,wm=1,wn=2,wk=1,stages=2,split=1,raster=0";
    cases.push_back({spec, 1, 256, k_min, small});
    cases.push_back({spec, 19, 512, 4 * k_min, "bm=32,bn=64,bk=64,wm=2,wn=2,wk=1,stages=3,split=2,raster=0", true});
    cases.push_back({spec, 1, 8192, 8192, ""});
    cases.push_back({spec, 45, 5120, 13824, "", true});
  }
  expect_all_pass(run_cases(cases));
}

// Quantized activations: every preset and further scale placements the device supports, at M = 1 with the
// smallest K, M not a multiple of the tile, N = K = 8192 and N = 5120, K = 13824. int8/int4 MMAs accumulate exactly,
// fp8 in the tensor core's f32 (default_tolerance is looser for it).
TEST(MmaGpu, EveryQuantizedActivationFormat) {
  QTUNE_REQUIRE_GPU();
  const int sm = gemm::device_limits().sm;
  std::vector<std::string> specs;
  for (const FormatPreset& preset : format_presets()) {
    if (FormatSpec::parse(preset.name).activation_is_quantized()) specs.push_back(preset.name);
  }
  for (const char* spec : {"w8a8-int8-ch:act-scale=g128", "w8a8-int8-g128", "w8a8-int8-ch:act-scale=none",
                           "w8a8-int8-ch:out=bf16", "w8a8-fp8-ch:act-scale=g64", "w8a8-fp8-g128", "w8a8-fp8-e5m2",
                           "w8a8-e5m2-ch", "w8a8-fp8-block64x128", "w4a8-int4-g64-int8", "w4a8-int4-tensor-int8",
                           "w4a8-int4-g128-fp8", "w4a8-int4-e5m2", "w6a8-e3m2-g32-fp8", "w6a8-e2m3-fp8",
                           "w2a8-int2-g64-int8", "w5a8-int5-fp8", "w4a4-int4-g64", "w4a4-int4-tensor", "w2a4-int2-ch-int4",
                           "w4a4-int4-g128:act-scale=g128"}) {
    specs.push_back(spec);
  }
  std::vector<Case> cases;
  int refused = 0;
  for (const std::string& spec : specs) {
    const FormatSpec format = FormatSpec::parse(spec);
    const ArchSupport support = mma_family().supports(format, sm);
    if (!support.supported) {
      // Refused, never run: the reason names the architecture.
      EXPECT_NE(support.reason.find("unsupported on sm_" + std::to_string(sm)), std::string::npos) << support.reason;
      ++refused;
      continue;
    }
    const int atom = mma::device_format(format).atom_k();
    int64_t group = atom;
    for (int64_t g : {int64_t{format.weight_scale.group_k}, int64_t{format.activation_scale.group_k}}) {
      if (g > 0) group = std::lcm(group, g);
    }
    const std::string small = "bm=16,bn=32,bk=" + std::to_string(atom) + ",wm=1,wn=2,wk=1,stages=2,split=1,raster=0";
    cases.push_back({spec, 1, 256, group, small});
    cases.push_back({spec, 19, 512, 4 * group, "bm=32,bn=64,bk=" + std::to_string(atom) + ",wm=2,wn=2,wk=1,stages=3,split=2,raster=0", true});
    cases.push_back({spec, 1, 8192, 8192, ""});
    cases.push_back({spec, 45, 5120, 13824, "", true});
  }
  std::printf("[ info ] sm_%d refuses %d of %zu quantized-activation formats\n", sm, refused, specs.size());
  expect_all_pass(run_cases(cases));
}

// The flush and reduction paths of quantized activations: groups shorter and longer than the tile, warp-K and
// split-K shares of a group, several m16 tiles per warp, rasterization.
TEST(MmaGpu, QuantizedActivationConfigurations) {
  QTUNE_REQUIRE_GPU();
  const ArchLimits limits = gemm::device_limits();
  std::vector<Case> cases;
  // Cases for formats the GPU refuses are left out; a configuration that needs more shared memory than the GPU has
  // runs with fewer stages. Any other rejection is a defect of this list.
  auto add = [&](const char* spec, int64_t m, int64_t n, int64_t k, const char* text, bool bias = false) {
    const Problem problem{FormatSpec::parse(spec), m, n, k, bias};
    if (!mma_family().supports(problem.format, limits.sm).supported) return;
    KernelConfig config = KernelConfig::parse(text);
    RuleVerdict verdict = mma_family().check(config, problem, limits);
    while (!verdict.valid && verdict.rule == "smem-per-block" && config.params["stages"] > 2) {
      --config.params["stages"];
      verdict = mma_family().check(config, problem, limits);
    }
    if (!verdict.valid) {
      ADD_FAILURE() << spec << " m=" << m << " " << text << ": " << verdict.rule << ": " << verdict.detail;
      return;
    }
    cases.push_back({spec, m, n, k, config.to_string(), bias});
  };
  for (const char* spec : {"w8a8-int8-ch", "w8a8-int8-block128x128", "w8a8-fp8-ch", "w8a8-fp8-block128x128"}) {
    for (int64_t m : {1, 33}) {
      add(spec, m, 5120, 13824, "bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=4,raster=0");
      add(spec, m, 5120, 13824, "bm=16,bn=64,bk=512,wm=1,wn=2,wk=2,stages=3,split=3,raster=0", true);
      add(spec, m, 5120, 13824, "bm=16,bn=32,bk=512,wm=1,wn=1,wk=4,stages=2,split=1,raster=0");
    }
    add(spec, 33, 5120, 13824, "bm=32,bn=128,bk=128,wm=2,wn=4,wk=1,stages=4,split=2,raster=0");
    add(spec, 300, 4096, 4096, "bm=64,bn=128,bk=128,wm=2,wn=4,wk=1,stages=3,split=1,raster=1", true);
    add(spec, 300, 4096, 4096, "bm=128,bn=64,bk=128,wm=4,wn=2,wk=1,stages=3,split=1,raster=2");
    add(spec, 77, 8192, 8192, "bm=64,bn=64,bk=256,wm=2,wn=2,wk=1,stages=3,split=2,raster=0");
  }
  // Groups longer than the tile (flushed every other tile, and at the end of a split's K range).
  add("w8a8-int8-g256", 17, 2048, 4096, "bm=32,bn=64,bk=128,wm=1,wn=2,wk=1,stages=4,split=3,raster=0");
  add("w8a8-fp8-g512:act-scale=g512", 17, 2048, 4096, "bm=16,bn=64,bk=256,wm=1,wn=2,wk=2,stages=4,split=6,raster=0");
  add("w4a8-int4-g128-int8", 64, 8192, 8192, "bm=64,bn=128,bk=256,wm=2,wn=4,wk=1,stages=3,split=1,raster=0");
  add("w4a8-fp4-g32-fp8", 1, 8192, 8192, "bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=4,raster=0");
  add("w4a4-int4-ch", 33, 5120, 13824, "bm=64,bn=64,bk=512,wm=2,wn=2,wk=2,stages=2,split=2,raster=0");
  add("w4a4-int4-ch", 1, 8192, 8192, "bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=4,raster=0");
  if (cases.empty()) GTEST_SKIP() << "sm_" << limits.sm << " supports none of these formats";
  expect_all_pass(run_cases(cases));
}

// Compiles `config` for the device, runs it `runs` times on the same data with the output poisoned each time, checks
// the first run against the CPU reference and every later one bit for bit against the first.
void expect_bit_identical_runs(const Problem& problem, const gemm::GemmData& data, const std::string& config_text,
                               int runs) {
  const ArchLimits limits = gemm::device_limits();
  const std::string arch = gemm::nvrtc_arch(limits.sm);
  const jit::Compiler compiler;
  runtime::Stream stream;
  const KernelConfig config = KernelConfig::parse(config_text);
  const RuleVerdict verdict = mma_family().check(config, problem, limits);
  ASSERT_TRUE(verdict.valid) << config_text << ": " << verdict.detail;
  const jit::CompileRequest request =
      test_support::family_compile_request(mma_family(), config, problem.format, arch);
  gemm::LoadedKernel kernel(mma_family(), config, problem.format, compiler.compile(request));
  gemm::GemmDeviceData device(mma_family(), config, data);
  device.prepare(config);
  std::vector<uint16_t> first;
  for (int run = 0; run < runs; ++run) {
    device.poison_output();
    device.launch(kernel, stream.get());
    stream.synchronize();
    const std::vector<uint16_t> bits = device.output_bits();
    if (run == 0) {
      first = bits;
      const gemm::Verification verification =
          gemm::verify_output(bits, problem.format.output, gemm::reference_for(data), default_tolerance(problem.format));
      EXPECT_TRUE(verification.passed) << config_text << ": " << verification.summary();
    } else {
      ASSERT_EQ(bits.size(), first.size()) << config_text << ": run " << run;
      size_t differing = 0;
      for (size_t i = 0; i < bits.size(); ++i) differing += bits[i] != first[i];
      EXPECT_EQ(differing, 0u) << config_text << ": run " << run << " differs from run 0 in " << differing << " elements";
    }
  }
}

TEST(MmaGpu, QuantizedSplitKIsBitIdentical) {
  QTUNE_REQUIRE_GPU();
  const Problem problem{FormatSpec::parse("w8a8-int8-block128x128"), 16, 4096, 8192, true};
  const gemm::GemmData data = gemm::make_gemm_data(problem, 78);
  expect_bit_identical_runs(problem, data, "bm=16,bn=64,bk=512,wm=1,wn=2,wk=2,stages=2,split=8,raster=0", 3);
}

TEST(MmaGpu, SplitAndWarpKReductionsAreBitIdentical) {
  QTUNE_REQUIRE_GPU();
  const Problem problem{FormatSpec::parse("w4a16-int4-g128"), 16, 4096, 8192, true};
  const gemm::GemmData data = gemm::make_gemm_data(problem, 77);
  for (const char* text : {"bm=16,bn=64,bk=128,wm=1,wn=2,wk=2,stages=4,split=8,raster=0",
                           "bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=3,split=16,raster=0",
                           "bm=16,bn=32,bk=512,wm=1,wn=1,wk=4,stages=2,split=3,raster=0"}) {
    expect_bit_identical_runs(problem, data, text, 4);
  }
}

}  // namespace
}  // namespace qtune
