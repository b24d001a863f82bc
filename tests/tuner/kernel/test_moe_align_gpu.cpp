// GPU: the routing's alignment on the device (gemm/moe_align.cuh, the production runtime's first MoE kernel) writes the
// same token-indexed tables as the host's mma_moe::pack_layout, entry for entry (the kernel is stable: pairs of an
// expert in ascending order), for uniform, Zipf-skewed (many empty experts), balanced and one-expert routings, up to
// T·top_k = 4096·8 over 256 experts, and 1024 and 4096 experts (fewer warps; above 48 KiB of shared memory). The
// tables are poisoned first: past the padded rows they must hold the sentinel (rows) and -1 (block experts).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/families/mma_moe.hpp"
#include "kernels/moe.hpp"
#include "kernels/moe_layout.hpp"
#include "tests/tuner/runtime/gpu_test_support.hpp"
#include "tuner/gemm/gemm_runner.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/runtime/device.hpp"
#include "tuner/runtime/memory.hpp"
#include "tuner/runtime/module.hpp"
#include "tuner/runtime/stream.hpp"

namespace qtune {
namespace {

struct AlignCase {
  std::string routing;
  int experts;
  int top_k;
  int64_t tokens;
  int bm;
};

std::vector<int32_t> ints_of(const std::vector<uint8_t>& bytes) {
  std::vector<int32_t> values(bytes.size() / 4);
  std::memcpy(values.data(), bytes.data(), values.size() * 4);
  return values;
}

// "" when the device tables equal the host's, else the first difference.
std::string run_case(const AlignCase& c, const jit::Compiler& compiler, const runtime::Stream& stream) {
  MoeProblem problem{.format = FormatSpec::parse("w4a16-int4-g128"), .experts = c.experts, .top_k = c.top_k,
                     .tokens = c.tokens, .n = 256, .k = 256};
  problem.routing = RoutingSpec::parse(c.routing, 29);
  const Routing routing = problem.make_routing();
  const ArchLimits limits = gemm::device_limits();
  const std::string arch = gemm::nvrtc_arch(limits.sm);
  const int threads = mma_moe::align_threads(c.experts, limits);
  jit::CompileRequest request;
  request.source = mma_moe::align_instantiation_source(c.bm, threads, arch);
  request.kernel_name = mma_moe::align_kernel_name();
  request.arch = arch;
  const jit::CompiledKernel compiled = compiler.compile(request);
  const runtime::Module module(compiled.cubin);
  const runtime::Kernel kernel = module.kernel(mma_moe::align_kernel_name());
  const LaunchGeometry geometry = mma_moe::align_launch_geometry(c.experts, threads);
  if (geometry.dynamic_shared_bytes > 48 * 1024) kernel.set_max_dynamic_shared_memory(static_cast<int>(geometry.dynamic_shared_bytes));

  const int64_t launch_rows = mma_moe::launch_rows(problem, c.bm, MoeRowMap{});
  runtime::DeviceBuffer ids = runtime::make_device_buffer(routing.ids);
  runtime::DeviceBuffer rows(static_cast<size_t>(launch_rows) * 4), blocks(static_cast<size_t>(launch_rows / c.bm) * 4), padded(4);
  for (runtime::DeviceBuffer* buffer : {&rows, &blocks, &padded}) buffer->fill_bytes(0x5A);  // neither a pair, -1 nor 0
  runtime::Device::get().synchronize();
  KernelArguments arguments = mma_moe::pack_align_arguments(
      problem, launch_rows, {{"topk_ids", ids.get()}, {"rows", rows.get()}, {"block_experts", blocks.get()}, {"padded_rows", padded.get()}});
  std::vector<void*> pointers = arguments.pointers();
  runtime::LaunchConfig launch;
  launch.grid = {geometry.grid[0], 1, 1};
  launch.block = {geometry.block[0], 1, 1};
  launch.dynamic_shared_bytes = geometry.dynamic_shared_bytes;
  kernel.launch(launch, stream.get(), pointers.data());
  stream.synchronize();

  const PackedBuffers host = mma_moe::pack_layout(MoeLayout::TokenIndexed, routing, c.bm);
  const std::vector<int32_t> want_rows = ints_of(host.at("rows")), want_blocks = ints_of(host.at("block_experts"));
  const int32_t want_padded = ints_of(host.at("padded_rows")).at(0);
  const auto got_rows = rows.download<int32_t>(static_cast<size_t>(launch_rows));
  const auto got_blocks = blocks.download<int32_t>(static_cast<size_t>(launch_rows / c.bm));
  const int32_t got_padded = padded.download<int32_t>(1).at(0);
  if (got_padded != want_padded) return "padded_rows " + std::to_string(got_padded) + ", host " + std::to_string(want_padded);
  if (static_cast<int64_t>(want_rows.size()) > launch_rows) return "the host layout exceeds the launch bound";
  const auto sentinel = static_cast<int32_t>(routing.pairs());
  for (size_t i = 0; i < got_rows.size(); ++i) {
    const int32_t want = i < want_rows.size() ? want_rows[i] : sentinel;
    if (got_rows[i] != want) return "rows[" + std::to_string(i) + "] = " + std::to_string(got_rows[i]) + ", expected " + std::to_string(want);
  }
  for (size_t b = 0; b < got_blocks.size(); ++b) {
    const int32_t want = b < want_blocks.size() ? want_blocks[b] : -1;
    if (got_blocks[b] != want) {
      return "block_experts[" + std::to_string(b) + "] = " + std::to_string(got_blocks[b]) + ", expected " + std::to_string(want);
    }
  }
  return "";
}

TEST(MoeAlignGpu, DeviceTablesEqualTheHostLayout) {
  QTUNE_REQUIRE_GPU();
  const std::vector<AlignCase> cases = {
      {"uniform", 256, 8, 1, 16},      {"uniform", 256, 8, 16, 16},    {"uniform", 256, 8, 64, 64},
      {"uniform", 256, 8, 4096, 64},   {"uniform", 256, 8, 4096, 16},  {"zipf:1.5", 256, 8, 4096, 128},
      {"zipf:3", 64, 2, 16, 16},       {"zipf:3", 256, 8, 300, 32},    {"balanced", 128, 8, 1000, 64},
      {"uniform", 8, 2, 4096, 64},     {"uniform", 1, 1, 77, 16},      {"zipf:1.2", 1024, 8, 512, 16},
      {"uniform", 4096, 8, 64, 16},    {"uniform", 16, 4, 3, 128}};
  const jit::Compiler compiler;
  const runtime::Stream stream;
  int failed = 0;
  for (const AlignCase& c : cases) {
    const std::string label = c.routing + " E=" + std::to_string(c.experts) + " top_k=" + std::to_string(c.top_k) +
                              " T=" + std::to_string(c.tokens) + " bm=" + std::to_string(c.bm);
    std::string outcome;
    try {
      outcome = run_case(c, compiler, stream);
    } catch (const std::exception& error) {
      outcome = std::string("error: ") + error.what();
    }
    std::printf("[ moe align ] %-50s %s\n", label.c_str(), outcome.empty() ? "PASS" : outcome.c_str());
    if (!outcome.empty()) {
      ++failed;
      ADD_FAILURE() << label << ": " << outcome;
    }
  }
  EXPECT_EQ(failed, 0);
}

}  // namespace
}  // namespace qtune
