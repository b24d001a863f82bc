// The Turing (sm_75) path of the mma family on whatever GPU is present (the H200 in CI): each kernel is compiled to
// compute_75 PTX, which the driver compiles for the GPU as it loads it, so the sm_75 code (register-staged copies,
// m16n8k8 / m8n8k16 / m8n8k32 MMAs) runs and is checked against the CPU reference. Configurations are chosen and
// checked with sm_75's limits (64 KiB of shared memory). Random data; the output is poisoned with NaN before each
// launch. Its speed there means nothing. Skipped with the reason when there is no GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "kernels/families/mma_family.hpp"
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

struct Sm75Case {
  std::string spec;
  int64_t m, n, k;
  std::string config;  // empty: the family's default for sm_75
  bool bias = false;
};

// Compiles every case for compute_75 and runs it; returns the failures, one line each (every case's line is printed).
std::vector<std::string> run_sm75_cases(const std::vector<Sm75Case>& cases) {
  const ArchLimits turing = ArchLimits::for_sm(75);
  std::vector<std::string> failures;
  std::vector<KernelConfig> configs;
  std::vector<jit::CompileRequest> requests;
  for (const Sm75Case& c : cases) {
    const Problem problem{FormatSpec::parse(c.spec), c.m, c.n, c.k, c.bias};
    const KernelConfig config = c.config.empty() ? mma_family().default_config(problem, turing) : KernelConfig::parse(c.config, "mma");
    const RuleVerdict verdict = mma_family().check(config, problem, turing);
    EXPECT_TRUE(verdict.valid) << c.spec << " " << config.to_string() << ": " << verdict.detail;
    configs.push_back(config);
    requests.push_back(test_support::family_compile_request(mma_family(), config, problem.format, "compute_75"));
  }
  const std::vector<jit::CompileOutcome> compiled = jit::Compiler().compile_all(requests);
  std::map<std::string, gemm::GemmData> data_cache;  // weights per (spec, n, k, bias)
  runtime::Stream stream;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Sm75Case& c = cases[i];
    const Problem problem{FormatSpec::parse(c.spec), c.m, c.n, c.k, c.bias};
    std::string outcome;
    bool passed = false;
    try {
      if (!compiled[i].ok()) QTUNE_THROW(Error, "compile failed: " + compiled[i].error_message.substr(0, 3000));
      const std::string key = c.spec + "/" + std::to_string(c.n) + "/" + std::to_string(c.k) + (c.bias ? "/b" : "");
      auto cached = data_cache.find(key);
      if (cached == data_cache.end()) cached = data_cache.emplace(key, gemm::make_gemm_data(problem, 7501)).first;
      const gemm::GemmData data = gemm::with_new_activations(cached->second, c.m, 75 + static_cast<uint64_t>(c.m));
      const ReferenceResult reference = gemm::reference_for(data);
      gemm::LoadedKernel kernel(mma_family(), configs[i], problem.format, *compiled[i].kernel);  // the driver JITs the PTX
      gemm::GemmDeviceData device(mma_family(), configs[i], data);
      device.prepare(configs[i]);
      device.poison_output();
      device.launch(kernel, stream.get());
      stream.synchronize();
      const gemm::Verification verification =
          gemm::verify_output(device.output_bits(), problem.format.output, reference, default_tolerance(problem.format));
      passed = verification.passed;
      outcome = verification.summary();
    } catch (const std::exception& error) {
      outcome = std::string("error: ") + error.what();
    }
    std::printf("[ sm_75 ] %-24s m=%-5lld n=%-5lld k=%-5lld%s %-62s %s\n", c.spec.c_str(), static_cast<long long>(c.m),
                static_cast<long long>(c.n), static_cast<long long>(c.k), c.bias ? " bias" : "     ",
                configs[i].to_string().c_str(), outcome.c_str());
    std::fflush(stdout);
    if (!passed) failures.push_back(c.spec + " m=" + std::to_string(c.m) + " " + configs[i].to_string() + ": " + outcome);
  }
  return failures;
}

void expect_no_failures(const std::vector<std::string>& failures) {
  for (const std::string& failure : failures) ADD_FAILURE() << failure;
}

// Every format the family runs on sm_75, at the heuristic's configuration: M = 1 (swap-AB), M not a multiple of the
// tile, M = 16 and 128, with and without bias.
std::vector<Sm75Case> every_format_cases() {
  std::vector<Sm75Case> cases;
  for (const char* spec : {"w4a16-int4-ch", "w4a16-int4-g128", "w4a16-int4-g128-zp", "w3a16-int3-g128-zp", "w8a16-int8-ch",
                           "w8a16-fp8-ch", "w4a16-fp4-g32", "mxfp4", "nvfp4", "mxint4", "w8a8-int8-ch", "w8a8-int8-tensor",
                           "w8a8-int8-block128x128", "w4a8-int4-int8", "w4a8-int4-g128-int8", "w4a4-int4-ch", "w4a4-int4-g64"}) {
    for (int64_t m : {1, 16, 33, 128}) cases.push_back({spec, m, 2048, 4096, ""});
    cases.push_back({spec, 5, 1024, 2048, "", true});
  }
  return cases;
}

// The pipeline's corners on sm_75: 2 and 3 register-staged stages, warp-K and split-K reductions, several M tiles with
// rasterization, for f16, int8 and int4 activations.
std::vector<Sm75Case> spread_cases() {
  std::vector<Sm75Case> cases;
  for (const char* config : {"bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=2,split=1,raster=0",
                             "bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=3,split=4,raster=0",
                             "bm=16,bn=64,bk=256,wm=1,wn=2,wk=2,stages=2,split=2,raster=0",
                             "bm=64,bn=128,bk=64,wm=2,wn=2,wk=1,stages=2,split=1,raster=1",
                             "bm=128,bn=128,bk=64,wm=2,wn=4,wk=1,stages=2,split=1,raster=0"}) {
    cases.push_back({"w4a16-int4-g128", 100, 2048, 4096, config});
  }
  for (const char* config : {"bm=16,bn=64,bk=128,wm=1,wn=4,wk=1,stages=2,split=1,raster=0",
                             "bm=32,bn=64,bk=256,wm=1,wn=2,wk=2,stages=2,split=2,raster=0",
                             "bm=64,bn=64,bk=128,wm=2,wn=2,wk=1,stages=3,split=1,raster=1"}) {
    cases.push_back({"w8a8-int8-ch", 70, 2048, 4096, config});
  }
  for (const char* config : {"bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=2,split=2,raster=0",
                             "bm=64,bn=64,bk=256,wm=2,wn=2,wk=1,stages=2,split=1,raster=1"}) {
    cases.push_back({"w4a4-int4-ch", 70, 2048, 4096, config});
  }
  return cases;
}

// Without a GPU: every case is a supported format and a configuration sm_75's rules admit, and its compute_75 PTX
// compiles, so a GPU run tests the code rather than the build.
TEST(MmaSm75Cases, AreValidOnTuringAndCompileToPtx) {
  const ArchLimits turing = ArchLimits::for_sm(75);
  std::vector<jit::CompileRequest> requests;
  std::vector<std::string> labels;
  for (const std::vector<Sm75Case>& cases : {every_format_cases(), spread_cases()}) {
    for (const Sm75Case& c : cases) {
      const Problem problem{FormatSpec::parse(c.spec), c.m, c.n, c.k, c.bias};
      const KernelConfig config = c.config.empty() ? mma_family().default_config(problem, turing) : KernelConfig::parse(c.config, "mma");
      const RuleVerdict verdict = mma_family().check(config, problem, turing);
      EXPECT_TRUE(verdict.valid) << c.spec << " m=" << c.m << " " << config.to_string() << ": " << verdict.rule << ": " << verdict.detail;
      requests.push_back(test_support::family_compile_request(mma_family(), config, problem.format, "compute_75"));
      labels.push_back(c.spec + " m=" + std::to_string(c.m) + " " + config.to_string());
    }
  }
  test_support::check_each_compiled(requests, labels, [](const std::string& label, const jit::CompiledKernel& kernel) {
    EXPECT_NE(std::string(kernel.cubin.data()).find(".target sm_75"), std::string::npos) << label;
  });
}

TEST(MmaSm75OnGpu, EveryTuringFormatAgainstTheReference) {
  QTUNE_REQUIRE_GPU();
  expect_no_failures(run_sm75_cases(every_format_cases()));
}

TEST(MmaSm75OnGpu, ConfigurationSpread) {
  QTUNE_REQUIRE_GPU();
  expect_no_failures(run_sm75_cases(spread_cases()));
}

}  // namespace
}  // namespace qtune
