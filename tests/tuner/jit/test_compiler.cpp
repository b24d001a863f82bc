#include "tuner/jit/compiler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <mutex>

#include "kernels/error.hpp"
#include "tests/tuner/jit/jit_test_support.hpp"
#include "tuner/jit/kernel_cache.hpp"

namespace qtune::jit {
namespace {

using testing_support::files_under;
using testing_support::kScaleHeader;
using testing_support::kScaleSource;
using testing_support::ScratchDirectory;

const std::vector<std::string> kAllTargets = {"sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100a", "sm_120a"};

CompileRequest scale_request(const std::string& arch = "sm_90a") {
  CompileRequest request;
  request.source = kScaleSource;
  request.kernel_name = "scale_kernel";
  request.arch = arch;
  request.extra_headers = {{"test/scale.cuh", kScaleHeader}};
  return request;
}

// A compiler that uses only the headers a test gives it, so the tests do not depend on kernels/device/.
CompilerSettings isolated_settings(const std::optional<std::filesystem::path>& cache_directory) {
  CompilerSettings settings;
  settings.use_cache = cache_directory.has_value();
  settings.cache_directory = cache_directory;
  settings.headers = std::vector<HeaderSource>{};
  return settings;
}

bool is_elf(const std::vector<char>& bytes) {
  return bytes.size() > 4 && bytes[0] == 0x7f && bytes[1] == 'E' && bytes[2] == 'L' && bytes[3] == 'F';
}

TEST(Compiler, CompilesForEveryTargetWithoutAGpu) {
  const Compiler compiler(isolated_settings(std::nullopt));
  for (const std::string& arch : kAllTargets) {
    SCOPED_TRACE(arch);
    const CompiledKernel kernel = compiler.compile(scale_request(arch));
    EXPECT_TRUE(is_elf(kernel.cubin));
    EXPECT_EQ(kernel.arch, arch);
    EXPECT_EQ(kernel.kernel_name, "scale_kernel");
    EXPECT_EQ(kernel.lowered_name, "scale_kernel");
    EXPECT_FALSE(kernel.from_cache);
    EXPECT_GT(kernel.compile_seconds, 0);
    EXPECT_GT(kernel.resources.registers, 0);
    EXPECT_NE(kernel.log.find("for '" + arch + "'"), std::string::npos) << kernel.log;
  }
}

// NVRTC's own cache would skip ptxas on a repeat and leave no resource report: every compile must report.
TEST(Compiler, EveryUncachedCompileRunsPtxasAndReportsResources) {
  const Compiler compiler(isolated_settings(std::nullopt));
  const auto [major, minor] = Compiler::nvrtc_version();
  const std::vector<std::string> options = compiler.nvrtc_options(scale_request());
  const bool has_no_cache = std::find(options.begin(), options.end(), "--no-cache") != options.end();
  EXPECT_EQ(has_no_cache, major > 12 || (major == 12 && minor >= 9));
  for (int repeat = 0; repeat < 3; ++repeat) {
    const CompiledKernel kernel = compiler.compile(scale_request());
    EXPECT_FALSE(kernel.from_cache);
    EXPECT_GT(kernel.resources.registers, 0) << "repeat " << repeat << ", log:\n" << kernel.log;
  }
}

TEST(Compiler, EmbeddedHeadersAreIncludedByName) {
  CompilerSettings settings = isolated_settings(std::nullopt);
  settings.headers = std::vector<HeaderSource>{{"test/scale.cuh", kScaleHeader}};
  const Compiler compiler(settings);
  CompileRequest request = scale_request();
  request.extra_headers.clear();
  EXPECT_GT(compiler.compile(request).cubin.size(), 0u);
  // The same name again as an extra header is ambiguous and refused.
  EXPECT_THROW(compiler.compile(scale_request()), InputError);
}

TEST(Compiler, HalfPrecisionHeadersComeFromTheToolkit) {
  const Compiler compiler(isolated_settings(std::nullopt));
  if (!compiler.toolkit_include_directory()) GTEST_SKIP() << "no CUDA toolkit include directory here (set CUDA_HOME)";
  CompileRequest request;
  request.kernel_name = "convert_kernel";
  request.arch = "sm_90a";
  request.source = R"(#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
extern "C" __global__ void convert_kernel(const float* in, __half* half_out, __nv_bfloat16* bf16_out, __nv_fp8_e4m3* fp8_out) {
  const float x = in[threadIdx.x];
  half_out[threadIdx.x] = __float2half(x);
  bf16_out[threadIdx.x] = __float2bfloat16(x);
  fp8_out[threadIdx.x] = __nv_fp8_e4m3(x);
}
)";
  EXPECT_TRUE(is_elf(compiler.compile(request).cubin));
}

TEST(Compiler, TemplateKernelsAreFoundByNameExpression) {
  const Compiler compiler(isolated_settings(std::nullopt));
  CompileRequest request;
  request.kernel_name = "qtune_test::fill<7, float>";
  request.arch = "sm_80";
  request.source = R"(namespace qtune_test {
template <int Value, typename T>
__global__ void fill(T* out) { out[threadIdx.x] = T(Value); }
}
)";
  const CompiledKernel kernel = compiler.compile(request);
  EXPECT_EQ(kernel.kernel_name, "qtune_test::fill<7, float>");
  EXPECT_TRUE(kernel.lowered_name.starts_with("_Z")) << kernel.lowered_name;
  EXPECT_NE(kernel.lowered_name.find("fill"), std::string::npos);
  EXPECT_GT(kernel.resources.registers, 0);
}

TEST(Compiler, SyntaxErrorThrowsWithTheNvrtcLog) {
  const Compiler compiler(isolated_settings(std::nullopt));
  CompileRequest request = scale_request();
  request.source = "extern \"C\" __global__ void scale_kernel(float* out) {\n  out[0] = 1.0f\n}\n";
  try {
    compiler.compile(request);
    FAIL() << "a missing semicolon compiled";
  } catch (const LibraryError& error) {
    EXPECT_EQ(error.library(), "NVRTC");
    const std::string message = error.what();
    // NVRTC's own line: file(line): error: expected a ";"
    EXPECT_NE(message.find("instantiation.cu(3): error: expected a \";\""), std::string::npos) << message;
    EXPECT_NE(message.find("scale_kernel"), std::string::npos) << message;
    EXPECT_NE(message.find("sm_90a"), std::string::npos) << message;
  }
}

TEST(Compiler, MissingKernelThrowsWithTheNvrtcLog) {
  const Compiler compiler(isolated_settings(std::nullopt));
  CompileRequest request = scale_request();
  request.kernel_name = "no_such_kernel";
  try {
    compiler.compile(request);
    FAIL() << "a request for a kernel the source lacks compiled";
  } catch (const LibraryError& error) {
    EXPECT_NE(std::string(error.what()).find("identifier \"no_such_kernel\" is undefined"), std::string::npos)
        << error.what();
  }
}

TEST(Compiler, MalformedRequestsAreInputErrors) {
  const Compiler compiler(isolated_settings(std::nullopt));
  auto expect_input_error = [&](CompileRequest request, const std::string& field) {
    try {
      compiler.compile(request);
      ADD_FAILURE() << "accepted a bad " << field;
    } catch (const InputError& error) {
      EXPECT_TRUE(std::string(error.what()).starts_with(field + ":")) << error.what();
    }
  };
  CompileRequest request = scale_request();
  request.arch = "sm9";
  expect_input_error(request, "arch");
  request.arch = "sm_20";
  expect_input_error(request, "arch");
  request = scale_request();
  request.options = {"-arch=sm_80"};
  expect_input_error(request, "options");
  request = scale_request();
  request.kernel_name.clear();
  expect_input_error(request, "kernel_name");
  request = scale_request();
  request.extra_headers.push_back(request.extra_headers.front());
  expect_input_error(request, "extra_headers");
}

TEST(Compiler, CacheKeyFollowsEveryInputAndNothingElse) {
  ScratchDirectory scratch;
  const Compiler compiler(isolated_settings(scratch.path()));
  const CompileRequest base = scale_request();
  const std::string key = compiler.cache_key(base);
  EXPECT_EQ(key.size(), 64u);
  EXPECT_EQ(compiler.cache_key(base), key);

  // Another compiler with the same settings, and another cache directory, agree: the key is content only.
  ScratchDirectory other_scratch;
  EXPECT_EQ(Compiler(isolated_settings(other_scratch.path())).cache_key(base), key);

  auto changed = [&](auto&& edit) {
    CompileRequest request = base;
    edit(request);
    return compiler.cache_key(request);
  };
  EXPECT_NE(changed([](CompileRequest& r) { r.source += "\n"; }), key);
  EXPECT_NE(changed([](CompileRequest& r) { r.extra_headers[0].text += "// comment\n"; }), key);
  EXPECT_NE(changed([](CompileRequest& r) { r.extra_headers[0].name = "test/other.cuh"; }), key);
  EXPECT_NE(changed([](CompileRequest& r) { r.extra_headers.push_back({"test/unused.cuh", "#pragma once\n"}); }), key);
  EXPECT_NE(changed([](CompileRequest& r) { r.options.push_back("-lineinfo"); }), key);
  EXPECT_NE(changed([](CompileRequest& r) { r.options.push_back("-DQTUNE_TEST=1"); }), key);
  EXPECT_NE(changed([](CompileRequest& r) { r.arch = "sm_80"; }), key);
  EXPECT_NE(changed([](CompileRequest& r) { r.arch = "sm_90"; }), key);
  EXPECT_NE(changed([](CompileRequest& r) { r.kernel_name = "other_kernel"; }), key);

  // Header order does not matter; each header's content does.
  CompileRequest two_headers = base;
  two_headers.extra_headers.push_back({"test/b.cuh", "#pragma once\n"});
  CompileRequest swapped = two_headers;
  std::swap(swapped.extra_headers[0], swapped.extra_headers[1]);
  EXPECT_EQ(compiler.cache_key(two_headers), compiler.cache_key(swapped));

  // The embedded header set (here replaced through settings.headers) is part of the key.
  CompilerSettings with_header = isolated_settings(scratch.path());
  with_header.headers = std::vector<HeaderSource>{{"gemm/tile.cuh", "#pragma once\nconstexpr int kTile = 64;\n"}};
  CompilerSettings with_changed_header = with_header;
  with_changed_header.headers->front().text = "#pragma once\nconstexpr int kTile = 128;\n";
  const std::string key_with_header = Compiler(with_header).cache_key(base);
  EXPECT_NE(key_with_header, key);
  EXPECT_NE(Compiler(with_changed_header).cache_key(base), key_with_header);
  EXPECT_EQ(Compiler(with_header).cache_key(base), key_with_header);

  // The language standard is an option, so it is in the key too.
  CompilerSettings cxx17 = isolated_settings(scratch.path());
  cxx17.language_standard = "c++17";
  EXPECT_NE(Compiler(cxx17).cache_key(base), key);
}

TEST(Compiler, SecondCompileLoadsFromTheCacheQuickly) {
  ScratchDirectory scratch;
  const Compiler compiler(isolated_settings(scratch.path()));
  const CompiledKernel built = compiler.compile(scale_request());
  EXPECT_FALSE(built.from_cache);
  EXPECT_EQ(built.original_compile_seconds, built.compile_seconds);

  double fastest_hit = 1e9;
  for (int i = 0; i < 20; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const CompiledKernel hit = compiler.compile(scale_request());
    fastest_hit = std::min(fastest_hit, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    ASSERT_TRUE(hit.from_cache);
    EXPECT_EQ(hit.compile_seconds, 0);
    EXPECT_EQ(hit.original_compile_seconds, built.original_compile_seconds);
    EXPECT_EQ(hit.cubin, built.cubin);
    EXPECT_EQ(hit.lowered_name, built.lowered_name);
    EXPECT_EQ(hit.resources.registers, built.resources.registers);
    EXPECT_EQ(hit.log, built.log);
  }
  EXPECT_LT(fastest_hit, 0.005) << "a cache hit took " << fastest_hit * 1e3 << " ms";
  EXPECT_EQ(files_under(scratch.path()).size(), 1u);
}

TEST(Compiler, DamagedEntryIsRecompiledAndRewritten) {
  ScratchDirectory scratch;
  const Compiler compiler(isolated_settings(scratch.path()));
  const CompiledKernel built = compiler.compile(scale_request());
  const std::filesystem::path entry = compiler.cache()->entry_path(built.cache_key);
  ASSERT_TRUE(std::filesystem::exists(entry));
  std::filesystem::resize_file(entry, std::filesystem::file_size(entry) / 2);

  const CompiledKernel rebuilt = compiler.compile(scale_request());
  EXPECT_FALSE(rebuilt.from_cache);
  EXPECT_EQ(rebuilt.cubin, built.cubin);
  const CompiledKernel hit = compiler.compile(scale_request());
  EXPECT_TRUE(hit.from_cache);
  EXPECT_EQ(hit.cubin, built.cubin);
}

TEST(Compiler, CompileAllKeepsGoingPastFailuresAndReportsProgress) {
  ScratchDirectory scratch;
  CompilerSettings settings = isolated_settings(scratch.path());
  settings.threads = 3;
  const Compiler compiler(settings);
  std::vector<CompileRequest> requests;
  for (const std::string arch : {"sm_80", "sm_86", "sm_90a"}) requests.push_back(scale_request(arch));
  CompileRequest broken = scale_request("sm_80");
  broken.source = "this is not CUDA";
  requests.push_back(broken);
  requests.push_back(scale_request("sm_89"));
  requests.push_back(scale_request("sm_80"));  // the same as requests[0]: compiled once
  CompileRequest bad_arch = scale_request("sm_7");
  requests.push_back(bad_arch);

  std::mutex seen_mutex;
  std::vector<std::size_t> seen_done;
  const std::vector<CompileOutcome> outcomes = compiler.compile_all(requests, [&](std::size_t done, std::size_t total) {
    std::lock_guard lock(seen_mutex);
    EXPECT_EQ(total, requests.size());
    seen_done.push_back(done);
  });

  ASSERT_EQ(outcomes.size(), requests.size());
  for (std::size_t i : {0u, 1u, 2u, 4u, 5u}) {
    ASSERT_TRUE(outcomes[i].ok()) << i << ": " << outcomes[i].error_message;
    EXPECT_EQ(outcomes[i].kernel->arch, requests[i].arch);
    EXPECT_TRUE(is_elf(outcomes[i].kernel->cubin));
    EXPECT_FALSE(outcomes[i].error);
  }
  EXPECT_EQ(outcomes[5].kernel->cubin, outcomes[0].kernel->cubin);

  ASSERT_FALSE(outcomes[3].ok());
  EXPECT_NE(outcomes[3].error_message.find("instantiation.cu(1)"), std::string::npos) << outcomes[3].error_message;
  EXPECT_THROW(std::rethrow_exception(outcomes[3].error), LibraryError);
  ASSERT_FALSE(outcomes[6].ok());
  EXPECT_THROW(std::rethrow_exception(outcomes[6].error), InputError);

  // One call per distinct request (the duplicate is counted with its twin), ending at the total.
  ASSERT_EQ(seen_done.size(), requests.size() - 1);
  EXPECT_TRUE(std::is_sorted(seen_done.begin(), seen_done.end()));
  EXPECT_EQ(seen_done.back(), requests.size());
  // Every good kernel is now in the cache, and nothing else is there.
  EXPECT_EQ(files_under(scratch.path()).size(), 4u);
}

}  // namespace
}  // namespace qtune::jit
