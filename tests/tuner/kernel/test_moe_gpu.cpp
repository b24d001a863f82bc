// GPU correctness of the mma family's MoE GEMM against the CPU reference (skipped with a reason when there is no GPU):
// token-indexed and both grouped layouts, gate-up and down (token-indexed down: router-weighted rows, then the top-k
// reduction), uniform, Zipf-skewed and balanced routing, empty experts, T = 1, 16, 64, 300; W4A16 int4 g128, W4A8
// int4 x fp8 and W8A8 fp8 (fp8 from sm_89), and more formats (zero points, 128x128 blocks, int8, bf16 output).
// Outputs are poisoned with NaN first; every row that reaches the output is checked, padding rows of the grouped
// layouts must stay untouched, and experts no pair routes to are 0xFF (NaN scales), so a kernel that read one would fail.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "kernels/families/mma_family.hpp"
#include "kernels/families/mma_layout.hpp"
#include "kernels/families/mma_moe.hpp"
#include "kernels/moe.hpp"
#include "kernels/moe_layout.hpp"
#include "kernels/moe_reference.hpp"
#include "tests/tuner/runtime/gpu_test_support.hpp"
#include "tuner/gemm/gemm_runner.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/runtime/device.hpp"
#include "tuner/runtime/memory.hpp"
#include "tuner/runtime/module.hpp"
#include "tuner/runtime/stream.hpp"

namespace qtune {
namespace {

struct MoeCase {
  std::string spec;
  MoeLayout layout = MoeLayout::TokenIndexed;
  MoeProjection projection = MoeProjection::GateUp;
  std::string routing = "uniform";
  int64_t tokens = 16;
  int experts = 16;
  int top_k = 4;
  int64_t n = 256;
  int64_t k = 512;
  std::string config;
};

std::string label(const MoeCase& c) {
  return c.spec + " " + std::string(moe_layout_name(c.layout)) + " " + std::string(moe_projection_name(c.projection)) + " " +
         c.routing + " T=" + std::to_string(c.tokens) + " E=" + std::to_string(c.experts) + " k=" + std::to_string(c.top_k) +
         " " + c.config;
}

// Runs one case on the GPU; returns "" when it passes, else what went wrong.
std::string run_case(const MoeCase& c, const jit::Compiler& compiler, const runtime::Stream& stream) {
  MoeProblem problem{.format = FormatSpec::parse(c.spec), .experts = c.experts, .top_k = c.top_k, .tokens = c.tokens,
                     .n = c.n, .k = c.k, .projection = c.projection, .layout = c.layout};
  problem.routing = RoutingSpec::parse(c.routing, 17);
  const KernelConfig config = KernelConfig::parse(c.config);
  const int sm = gemm::device_limits().sm;
  const std::string arch = gemm::nvrtc_arch(sm);
  const RuleVerdict verdict = mma_moe::check(config, problem, gemm::device_limits());
  if (!verdict.valid) return "config refused: " + verdict.rule + " " + verdict.detail;

  const Routing routing = problem.make_routing();
  const MoeOperands operands = make_moe_operands(problem, routing, 23);
  const MoeReferenceResult reference = reference_moe(problem, operands);
  const int bm = config.get("bm");
  const MoeRowMap map = moe_row_map(c.layout, routing, bm);
  const int64_t rows = mma_moe::launch_rows(problem, bm, map);
  const bool token_indexed = c.layout == MoeLayout::TokenIndexed;
  const bool reduces = token_indexed && c.projection == MoeProjection::Down;

  // Host bytes of every buffer that has input.
  const mma::DeviceFormat device = mma::device_format(problem.format);
  PackedBuffers host = mma_moe::prepack_experts(operands.experts, problem.format, problem.n, problem.k);
  if (token_indexed) {
    for (auto& [name, bytes] : mma::prepack_activations(operands.activations, device)) host[name] = std::move(bytes);
  } else {
    // The grouped layouts read activations already in their rows (padding rows: any row, never read).
    std::vector<int64_t> source_rows;
    for (int64_t r = 0; r < map.rows(); ++r) {
      const int32_t pair = map.row_pair[static_cast<size_t>(r)];
      source_rows.push_back(pair < 0 ? 0 : input_row_of_pair(c.projection, routing, pair));
    }
    for (auto& [name, bytes] : mma::prepack_activations(select_activation_rows(operands.activations, source_rows), device)) {
      host[name] = std::move(bytes);
    }
  }
  for (auto& [name, bytes] : mma_moe::pack_layout(c.layout, routing, bm)) host[name] = std::move(bytes);
  std::vector<uint8_t> weights(routing.weights.size() * 4);
  std::memcpy(weights.data(), routing.weights.data(), weights.size());
  host["router_weights"] = weights;

  std::map<std::string, runtime::DeviceBuffer> buffers;
  std::map<std::string, uint64_t> addresses;
  for (const BufferSpec& spec : mma_moe::buffers(config, problem, rows)) {
    runtime::DeviceBuffer buffer(spec.bytes);
    const auto found = host.find(spec.name);
    if (spec.role == BufferRole::Output) {
      buffer.fill_bytes(0xFF);  // NaN in f16 and bf16: an element never written is caught
    } else {
      buffer.fill_bytes(0);
      if (found != host.end()) {
        if (found->second.size() > spec.bytes) return "buffer '" + spec.name + "' holds more than its size";
        buffer.upload(found->second.data(), found->second.size());
      }
    }
    addresses[spec.name] = buffer.get();
    buffers.emplace(spec.name, std::move(buffer));
  }

  jit::CompileRequest request;
  request.source = mma_moe::instantiation_source(config, problem, arch);
  request.kernel_name = mma_moe::kernel_name();
  request.arch = arch;
  const jit::CompiledKernel compiled = compiler.compile(request);
  const runtime::Module module(compiled.cubin);
  const runtime::Kernel kernel = module.kernel(mma_moe::kernel_name());
  const LaunchGeometry geometry = mma_moe::launch_geometry(config, problem, rows);
  KernelArguments arguments = mma_moe::pack_arguments(config, problem, rows, addresses);
  std::vector<void*> pointers = arguments.pointers();
  kernel.set_max_dynamic_shared_memory(static_cast<int>(geometry.dynamic_shared_bytes));
  runtime::LaunchConfig launch;
  launch.grid = {geometry.grid[0], geometry.grid[1], geometry.grid[2]};
  launch.block = {geometry.block[0], geometry.block[1], geometry.block[2]};
  launch.dynamic_shared_bytes = geometry.dynamic_shared_bytes;
  kernel.launch(launch, stream.get(), pointers.data());

  std::optional<runtime::Module> reduce_module;
  if (reduces) {
    jit::CompileRequest reduce_request;
    reduce_request.source = mma_moe::reduce_instantiation_source(problem.format, arch);
    reduce_request.kernel_name = mma_moe::reduce_kernel_name();
    reduce_request.arch = arch;
    reduce_module.emplace(compiler.compile(reduce_request).cubin);
    const runtime::Kernel reduce = reduce_module->kernel(mma_moe::reduce_kernel_name());
    const LaunchGeometry reduce_geometry = mma_moe::reduce_launch_geometry(problem);
    KernelArguments reduce_arguments = mma_moe::pack_reduce_arguments(problem, addresses);
    std::vector<void*> reduce_pointers = reduce_arguments.pointers();
    runtime::LaunchConfig reduce_launch;
    reduce_launch.grid = {reduce_geometry.grid[0], 1, 1};
    reduce_launch.block = {reduce_geometry.block[0], 1, 1};
    reduce.launch(reduce_launch, stream.get(), reduce_pointers.data());
  }
  stream.synchronize();

  // What the projection delivers, as rows the reference has: pairs (gate-up, grouped down) or tokens (reduced down).
  ReferenceResult expected;
  expected.n = problem.n;
  std::vector<uint16_t> got;
  std::string padding_problem;
  if (reduces) {
    got = buffers.at("reduced").download<uint16_t>(static_cast<size_t>(problem.tokens * problem.n));
    expected.m = problem.tokens;
    expected.unrounded = reference.unrounded;
  } else if (token_indexed) {
    got = buffers.at("c").download<uint16_t>(static_cast<size_t>(routing.pairs() * problem.n));
    expected.m = routing.pairs();
    expected.unrounded = reference.pair_unrounded;
  } else {
    const std::vector<uint16_t> layout_rows = buffers.at("c").download<uint16_t>(static_cast<size_t>(rows * problem.n));
    got.assign(static_cast<size_t>(routing.pairs() * problem.n), 0xFFFF);
    int64_t written_padding = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t pair = map.row_pair[static_cast<size_t>(r)];
      for (int64_t j = 0; j < problem.n; ++j) {
        const uint16_t bits = layout_rows[static_cast<size_t>(r * problem.n + j)];
        if (pair >= 0) {
          got[static_cast<size_t>(pair * problem.n + j)] = bits;
        } else if (bits != 0xFFFF) {
          ++written_padding;
        }
      }
    }
    if (written_padding > 0) padding_problem = std::to_string(written_padding) + " elements of padding rows written; ";
    expected.m = routing.pairs();
    expected.unrounded = reference.pair_unrounded;
  }
  const gemm::Verification verification =
      gemm::verify_output(got, problem.format.output, expected, default_tolerance(problem.format));
  if (verification.passed && padding_problem.empty()) return "";
  return padding_problem + verification.summary() + " [" + std::to_string(compiled.resources.registers) + " regs]";
}

void run_all(const std::vector<MoeCase>& cases) {
  const jit::Compiler compiler;
  const runtime::Stream stream;
  const int sm = gemm::device_limits().sm;
  int failed = 0, ran = 0;
  for (const MoeCase& c : cases) {
    if (!mma_family().supports(FormatSpec::parse(c.spec), sm).supported) continue;
    ++ran;
    std::string outcome;
    try {
      outcome = run_case(c, compiler, stream);
    } catch (const std::exception& error) {
      outcome = std::string("error: ") + error.what();
    }
    std::printf("[ moe case ] %-100s %s\n", label(c).c_str(), outcome.empty() ? "PASS" : outcome.c_str());
    std::fflush(stdout);
    if (!outcome.empty()) {
      ++failed;
      ADD_FAILURE() << label(c) << ": " << outcome;
    }
  }
  std::printf("[ moe cases ] %d of %d passed\n", ran - failed, ran);
  EXPECT_GT(ran, 0);
}

const char* kSmallTile = "bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=1,raster=0";
const char* kSplitTile = "bm=16,bn=64,bk=256,wm=1,wn=2,wk=2,stages=3,split=2,raster=0";
const char* kTallTile = "bm=64,bn=64,bk=128,wm=2,wn=2,wk=1,stages=3,split=1,raster=0";
const char* kFormats[] = {"w4a16-int4-g128", "w4a8-int4-fp8", "w8a8-fp8-ch"};

// A case of the default shape on the small tile, or on the tall one from 64 tokens on.
MoeCase routed_case(const char* spec, MoeLayout layout, MoeProjection projection, const char* routing, int64_t tokens) {
  return MoeCase{.spec = spec, .layout = layout, .projection = projection, .routing = routing, .tokens = tokens,
                 .config = tokens >= 64 ? kTallTile : kSmallTile};
}

TEST(MoeGpu, TokenIndexedEveryRoutingAndTokenCount) {
  QTUNE_REQUIRE_GPU();
  std::vector<MoeCase> cases;
  for (const char* spec : kFormats) {
    for (MoeProjection projection : {MoeProjection::GateUp, MoeProjection::Down}) {
      for (int64_t tokens : {1, 16, 64, 300}) {
        for (const char* routing : {"uniform", "zipf:1.5"}) {
          cases.push_back(routed_case(spec, MoeLayout::TokenIndexed, projection, routing, tokens));
        }
      }
    }
  }
  run_all(cases);
}

TEST(MoeGpu, GroupedLayoutsEveryRouting) {
  QTUNE_REQUIRE_GPU();
  std::vector<MoeCase> cases;
  for (const char* spec : kFormats) {
    for (MoeLayout layout : {MoeLayout::GroupedContiguous, MoeLayout::GroupedMasked}) {
      for (MoeProjection projection : {MoeProjection::GateUp, MoeProjection::Down}) {
        for (const char* routing : {"uniform", "zipf:1.5", "balanced"}) {
          for (int64_t tokens : {1, 64, 300}) {
            cases.push_back(routed_case(spec, layout, projection, routing, tokens));
          }
        }
      }
    }
  }
  run_all(cases);
}

// Zipf 3 over 64 experts with top-2 of 16 tokens leaves most experts empty; split-K and warp-K tiles on skewed blocks.
TEST(MoeGpu, EmptyExpertsAndSplitK) {
  QTUNE_REQUIRE_GPU();
  std::vector<MoeCase> cases;
  for (const char* spec : kFormats) {
    for (MoeLayout layout : {MoeLayout::TokenIndexed, MoeLayout::GroupedContiguous, MoeLayout::GroupedMasked}) {
      for (MoeProjection projection : {MoeProjection::GateUp, MoeProjection::Down}) {
        MoeCase c;
        c.spec = spec;
        c.layout = layout;
        c.projection = projection;
        c.routing = "zipf:3";
        c.tokens = 16;
        c.experts = 64;
        c.top_k = 2;
        c.k = 1024;
        c.config = kSplitTile;
        cases.push_back(c);
      }
    }
  }
  run_all(cases);
}

// Zero points, DeepSeek's 128x128 weight blocks with 1x128 activation groups (gathered group scales), int8, bf16 output.
TEST(MoeGpu, MoreFormats) {
  QTUNE_REQUIRE_GPU();
  std::vector<MoeCase> cases;
  for (const char* spec : {"w4a16-int4-g128-zp", "w8a8-fp8-block128x128", "w8a8-int8-ch", "w4a16-int4-g128-bf16"}) {
    for (MoeLayout layout : {MoeLayout::TokenIndexed, MoeLayout::GroupedContiguous}) {
      for (MoeProjection projection : {MoeProjection::GateUp, MoeProjection::Down}) {
        for (int64_t tokens : {16, 300}) {
          cases.push_back(routed_case(spec, layout, projection, "zipf:1.5", tokens));
        }
      }
    }
  }
  run_all(cases);
}

}  // namespace
}  // namespace qtune
