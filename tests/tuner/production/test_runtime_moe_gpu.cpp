// libqtune_runtime's MoE entry point on a GPU (skipped with the reason when there is none): Runtime::moe_gemm (device
// alignment of the routing, the MoE GEMM, the down projection's top-k sum) against the CPU reference (kernels/
// moe_reference.hpp), W4A16 int4 g128 and W4A8 int4 x fp8 (and W8A8 fp8), gate-up and down, uniform, Zipf-skewed and
// empty-expert routings, heuristic and tuned (split-K) configs, of the mma MoE kernel and, on Hopper, of the wgmma one
// (the heuristic's for W4A16, and a table's wgmma winners) and the tma one (a table's W4A8 and W8A8 fp8 winners: gather,
// TMA-fed GEMM, persistent grid). Every expert is prepacked once by prepack_moe; the output is poisoned with NaN
// before each call; every row that reaches the output is checked with the MoE tests' tolerance. A call captured into
// a CUDA graph (the heuristic's, and on Hopper a tma config's) proves there is no host synchronisation and no
// allocation in it. tma's cached activation map is reused for new activations and follows moved scratch and another
// stream; a table's MoE kernels exported with `qtune export --cubins` run from their cubins without any JIT.
#include <gtest/gtest.h>

#include "tests/common/temp_dir.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "kernels/families/mma_family.hpp"
#include "kernels/families/mma_layout.hpp"
#include "kernels/families/tma_family.hpp"
#include "kernels/families/wgmma_family.hpp"
#include "kernels/moe.hpp"
#include "kernels/moe_reference.hpp"
#include "tests/tuner/production/production_test_support.hpp"
#include "tests/tuner/runtime/gpu_test_support.hpp"
#include "tuner/gemm/gemm_runner.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/production/cubin_store.hpp"
#include "tuner/production/qtune_runtime.hpp"
#include "tuner/runtime/device.hpp"
#include "tuner/runtime/driver.hpp"
#include "tuner/runtime/memory.hpp"
#include "tuner/runtime/stream.hpp"

namespace qtune::production {
namespace {

using runtime_api::ConfigSource;
using runtime_api::MoeShape;
using runtime_api::Runtime;
using runtime_api::RuntimeOptions;

struct Case {
  std::string format;
  std::string projection;
  std::string routing;
  int experts = 16;
  int top_k = 4;
  std::int64_t tokens = 16;
  std::int64_t n = 256;
  std::int64_t k = 512;
};

std::string label(const Case& c) {
  return c.format + " " + c.projection + " " + c.routing + " E=" + std::to_string(c.experts) + " top_k=" +
         std::to_string(c.top_k) + " T=" + std::to_string(c.tokens) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k);
}

MoeProblem problem_of(const Case& c) {
  MoeProblem problem{.format = FormatSpec::parse(c.format), .experts = c.experts, .top_k = c.top_k, .tokens = c.tokens,
                     .n = c.n, .k = c.k, .projection = parse_moe_projection(c.projection)};
  problem.routing = RoutingSpec::parse(c.routing, 41);
  return problem;
}

// One case's operands on the device: every expert prepacked by the Runtime, activations as the kernels read them, the
// routing's ids and weights, the output.
struct DeviceCase {
  MoeProblem problem;
  MoeReferenceResult reference;
  runtime::DeviceBuffer a, a_scales, ids, router_weights, weights, scales, zeros, global_scale, c;

  runtime_api::MoeGemmArguments arguments() const {
    auto optional = [](const runtime::DeviceBuffer& buffer) { return buffer.bytes() > 0 ? buffer.as<const void>() : nullptr; };
    return {.a = a.as<const void>(), .a_scales = optional(a_scales), .topk_ids = ids.as<const void>(),
            .topk_weights = router_weights.as<const void>(), .weights = weights.as<const void>(),
            .scales = scales.as<const void>(), .zeros = optional(zeros), .global_scale = global_scale.as<const void>(),
            .c = c.as<void>()};
  }
  std::vector<std::uint16_t> output() const {
    return c.download<std::uint16_t>(static_cast<std::size_t>(problem.output_rows() * problem.n));
  }
};

DeviceCase upload(const Runtime& runtime, const Case& c, std::uint64_t seed = 43) {
  DeviceCase device;
  device.problem = problem_of(c);
  const Routing routing = device.problem.make_routing();
  const MoeOperands operands = make_moe_operands(device.problem, routing, seed, /*every_expert=*/true);
  device.reference = reference_moe(device.problem, operands);
  std::vector<runtime_api::HostQuantizedWeights> experts;
  for (const QuantizedWeights& w : operands.experts) experts.push_back({w.codes, w.scales.bits, w.zero_point_bits, w.global_scale});
  const runtime_api::PackedExperts packed = runtime.prepack_moe(c.format, c.n, c.k, experts);
  EXPECT_EQ(packed.experts, c.experts);
  device.weights = runtime::make_device_buffer(packed.weights);
  device.scales = runtime::make_device_buffer(packed.scales);
  if (!packed.zeros.empty()) device.zeros = runtime::make_device_buffer(packed.zeros);
  device.global_scale = runtime::make_device_buffer(packed.global_scale);
  const PackedBuffers activations = mma::prepack_activations(operands.activations, mma::device_format(device.problem.format));
  device.a = runtime::make_device_buffer(activations.at("a"));
  if (const auto scales = activations.find("a_scales"); scales != activations.end()) device.a_scales = runtime::make_device_buffer(scales->second);
  device.ids = runtime::make_device_buffer(routing.ids);
  device.router_weights = runtime::make_device_buffer(routing.weights);
  device.c = runtime::DeviceBuffer(static_cast<std::size_t>(device.problem.output_rows() * c.n) * 2);
  runtime::Device::get().synchronize();  // pageable uploads may still be in flight
  return device;
}

// "" when the output matches the reference, else why not.
std::string check_output(const DeviceCase& device, const std::vector<std::uint16_t>& bits) {
  ReferenceResult expected;
  expected.m = device.problem.output_rows();
  expected.n = device.problem.n;
  expected.unrounded = device.reference.unrounded;
  const gemm::Verification verification =
      gemm::verify_output(bits, device.problem.format.output, expected, default_tolerance(device.problem.format));
  return verification.passed ? "" : verification.summary();
}

// Poisons the output, runs moe_gemm on `stream`, and returns the output's bits.
std::vector<std::uint16_t> run(Runtime& runtime, DeviceCase& device, const Case& c, const runtime::Stream& stream) {
  device.c.fill_bytes(0xFF);  // NaN in f16 and bf16: a row the call never writes shows up
  runtime::Device::get().synchronize();
  const MoeShape shape{.experts = c.experts, .top_k = c.top_k, .n = c.n, .k = c.k, .tokens = c.tokens, .projection = c.projection};
  runtime.moe_gemm(c.format, shape, device.arguments(), stream.get());
  stream.synchronize();
  return device.output();
}

// Runs every case whose format the expected family (else the mma family, whose layout every MoE kernel reads) runs
// on this GPU; the selection must come from `expected_source` and, when one is given, `expected_family`.
void run_cases(Runtime& runtime, const std::vector<Case>& cases, ConfigSource expected_source,
               const std::string& expected_family = "") {
  const runtime::Stream stream;
  const int sm = gemm::device_limits().sm;
  const KernelFamily* family = expected_family.empty() ? &mma_family() : family_named(expected_family);
  ASSERT_NE(family, nullptr) << expected_family;
  int ran = 0, failed = 0;
  for (const Case& c : cases) {
    if (!family->supports(FormatSpec::parse(c.format), sm).supported) continue;
    ++ran;
    std::string outcome;
    try {
      const MoeShape shape{.experts = c.experts, .top_k = c.top_k, .n = c.n, .k = c.k, .tokens = c.tokens, .projection = c.projection};
      const runtime_api::MoeChoice choice = runtime.select_moe(c.format, shape);
      if (choice.choice.source != expected_source) {
        outcome = "selected from " + std::string(runtime_api::to_string(choice.choice.source)) + ": " + choice.choice.detail;
      } else if (!expected_family.empty() && choice.choice.family != expected_family) {
        outcome = "selected a config of family " + choice.choice.family + ": " + choice.choice.detail;
      } else {
        DeviceCase device = upload(runtime, c);
        const std::vector<std::uint16_t> first = run(runtime, device, c, stream);
        outcome = check_output(device, first);
        // The same call again (tables rebuilt, split-K counters reused): the same bits.
        if (outcome.empty() && run(runtime, device, c, stream) != first) outcome = "a second call gave different bits";
        std::printf("[ runtime moe ] %-90s %s:%s %s\n", label(c).c_str(), choice.choice.family.c_str(), choice.choice.config.c_str(),
                    outcome.empty() ? "PASS" : "FAIL");
      }
    } catch (const std::exception& error) {
      outcome = std::string("error: ") + error.what();
    }
    if (!outcome.empty()) {
      ++failed;
      ADD_FAILURE() << label(c) << ": " << outcome;
    }
  }
  std::printf("[ runtime moe ] %d of %d passed\n", ran - failed, ran);
  EXPECT_GT(ran, 0);
}

std::vector<Case> routed_cases() {
  std::vector<Case> cases;
  for (const char* format : {"w4a16-int4-g128", "w4a8-int4-fp8", "w8a8-fp8-ch"}) {
    for (const char* projection : {"gate-up", "down"}) {
      cases.push_back({.format = format, .projection = projection, .routing = "uniform", .tokens = 16});
      cases.push_back({.format = format, .projection = projection, .routing = "uniform", .tokens = 1});
      cases.push_back({.format = format, .projection = projection, .routing = "zipf:1.5", .tokens = 300});
      // Zipf 3 over 64 experts, top-2 of 16 tokens: most experts have no token.
      cases.push_back({.format = format, .projection = projection, .routing = "zipf:3", .experts = 64, .top_k = 2, .tokens = 16,
                       .k = 1024});
    }
  }
  return cases;
}

// On Hopper the W4A16 cases run the wgmma MoE kernel (the heuristic's family there), the others the mma one.
TEST(RuntimeMoeGpu, HeuristicMoeGemmMatchesTheReference) {
  QTUNE_REQUIRE_GPU();
  test_support::TempDir dir;
  Runtime runtime({.cache_directory = dir / "cache"});
  run_cases(runtime, routed_cases(), ConfigSource::Heuristic);
  const int sm = gemm::device_limits().sm;
  const runtime_api::MoeChoice w4a16 =
      runtime.select_moe("w4a16-int4-g128", {.experts = 16, .top_k = 4, .n = 256, .k = 512, .tokens = 16, .projection = "gate-up"});
  EXPECT_EQ(w4a16.choice.family, wgmma_family().supports(FormatSpec::parse("w4a16-int4-g128"), sm).supported ? "wgmma" : "mma");
}

// The MoE shape of a table entry and its cases.
struct EntryShape {
  int experts = 64;
  int top_k = 2;
  std::int64_t n = 256;
  std::int64_t k = 1024;
};

// Table entries for each format and projection (by default E = 64, top-2, 256 x 1024): `split_tile` for T <= 16 and
// `tall_tile` beyond ("family:params"), and the cases that reach both ranges (T = 3, 16, 200), uniform and Zipf-skewed.
void add_tuned_entries(reports::SelectionTable& table, std::vector<Case>& cases, const std::vector<const char*>& formats,
                       const char* split_tile, const char* tall_tile, const EntryShape& shape = {}) {
  for (const char* format : formats) {
    for (const char* projection : {"gate-up", "down"}) {
      reports::MoeRules rules;
      rules.format = FormatSpec::parse(format).to_string();
      rules.experts = shape.experts;
      rules.top_k = shape.top_k;
      rules.n = shape.n;
      rules.k = shape.k;
      rules.projection = projection;
      rules.layout = "token-indexed";
      rules.routing = "uniform";
      reports::MRange small, large;
      small.m_min = 1;
      small.m_max = 16;
      small.config = KernelConfig::parse(split_tile, "mma");
      small.buckets = {{16, 5.0}};
      large.m_min = 17;
      large.config = KernelConfig::parse(tall_tile, "mma");
      large.buckets = {{256, 9.0}};
      rules.ranges = {small, large};
      table.moe.push_back(rules);
      for (std::int64_t tokens : {std::int64_t{3}, std::int64_t{16}, std::int64_t{200}}) {
        for (const char* routing : {"uniform", "zipf:3"}) {
          cases.push_back({.format = format, .projection = projection, .routing = routing, .experts = shape.experts,
                           .top_k = shape.top_k, .tokens = tokens, .n = shape.n, .k = shape.k});
        }
      }
    }
  }
}

// The tma MoE kernel's tiles (tests/tuner/kernel/test_moe_gpu.cpp's): split-K 16-row blocks, and persistent 64-row
// blocks whose grid the runtime caps to the device.
constexpr const char* kTmaSplitTile =
    "tma:bm=16,bn=64,bk=256,stages=3,split=2,raster=0,cluster=1,multicast=0,persistent=0,overlap=0,promote=128,pingpong=0";
constexpr const char* kTmaPersistentTile =
    "tma:bm=64,bn=128,bk=128,stages=4,split=1,raster=0,cluster=1,multicast=0,persistent=1,overlap=0,promote=128,pingpong=0";

// The table's configs: a split-K tile for T <= 16 and a 64-row tile beyond, so the runtime's split-K workspace and
// both block heights (their own alignment kernels) are exercised; mma's, and on Hopper wgmma's (the winners a
// `qtune export` of a --family auto tune writes for weight-only formats there) for two more W4A16 formats and tma's
// (the H200's W4A8 winners up to T = 256) for W4A8 int4 x fp8 and W8A8 fp8 at another shape (E = 32, top-4,
// 512 x 2048: the mma entries hold W4A8's default one; 192 tiles at T = 256, so the persistent grid is capped).
TEST(RuntimeMoeGpu, TunedConfigsFromTheTableMatchTheReference) {
  QTUNE_REQUIRE_GPU();
  test_support::TempDir dir;
  reports::SelectionTable table;
  table.gpu = "h200";
  std::vector<Case> mma_cases, wgmma_cases, tma_cases;
  add_tuned_entries(table, mma_cases, {"w4a16-int4-g128", "w4a8-int4-fp8"},
                    "mma:bm=16,bn=64,bk=256,wm=1,wn=2,wk=2,stages=3,split=2,raster=0",
                    "mma:bm=64,bn=64,bk=128,wm=2,wn=2,wk=1,stages=3,split=1,raster=0");
  const bool hopper = wgmma_family().supports(FormatSpec::parse("w4a16-int4-g128"), gemm::device_limits().sm).supported;
  if (hopper) {
    add_tuned_entries(table, wgmma_cases, {"w4a16-int4-g128-zp", "w4a16-int4-ch"},
                      "wgmma:bm=16,bn=64,bk=256,stages=3,split=2,raster=0,overlap=0",
                      "wgmma:bm=64,bn=128,bk=64,stages=4,split=1,raster=0,overlap=1");
    add_tuned_entries(table, tma_cases, {"w4a8-int4-fp8", "w8a8-fp8-ch"}, kTmaSplitTile, kTmaPersistentTile,
                      {.experts = 32, .top_k = 4, .n = 512, .k = 2048});
  } else {
    std::printf("[ runtime moe ] not sm_90: the table's wgmma and tma configs are not run\n");
  }
  std::sort(table.moe.begin(), table.moe.end(), [](const auto& a, const auto& b) { return a.key() < b.key(); });
  Runtime runtime({.table = testing::write_table(dir / "table.json", table), .cache_directory = dir / "cache"});
  run_cases(runtime, mma_cases, ConfigSource::Tuned, "mma");
  if (hopper) {
    run_cases(runtime, wgmma_cases, ConfigSource::Tuned, "wgmma");
    run_cases(runtime, tma_cases, ConfigSource::Tuned, "tma");
  }
}

// Captures one moe_gemm call of `c` (after load_moe) into a CUDA graph, replays it and checks the output; "" when all
// went well, else why not.
std::string capture_and_replay(Runtime& runtime, const Case& c, const std::string& expected_family) {
  const MoeShape shape{.experts = c.experts, .top_k = c.top_k, .n = c.n, .k = c.k, .tokens = c.tokens, .projection = c.projection};
  const runtime_api::MoeChoice choice = runtime.select_moe(c.format, shape);
  if (choice.choice.family != expected_family) return "selected family " + choice.choice.family + ": " + choice.choice.detail;
  DeviceCase device = upload(runtime, c);
  const runtime::Stream stream;
  runtime.load_moe(c.format, shape, stream.get());
  device.c.fill_bytes(0xFF);
  runtime::Device::get().synchronize();
  QTUNE_CU(cuStreamBeginCapture, stream.get(), CU_STREAM_CAPTURE_MODE_GLOBAL);
  std::string failure;
  try {
    runtime.moe_gemm(c.format, shape, device.arguments(), stream.get());
  } catch (const std::exception& error) {
    failure = error.what();
  }
  CUgraph graph = nullptr;
  QTUNE_CU(cuStreamEndCapture, stream.get(), &graph);
  if (!failure.empty()) return "moe_gemm is not capturable: " + failure;
  if (graph == nullptr) return "no graph was captured";
  CUgraphExec executable = nullptr;
  QTUNE_CU(cuGraphInstantiateWithFlags, &executable, graph, 0);
  QTUNE_CU(cuGraphLaunch, executable, stream.get());
  stream.synchronize();
  const std::string outcome = check_output(device, device.output());
  QTUNE_CU(cuGraphExecDestroy, executable);
  QTUNE_CU(cuGraphDestroy, graph);
  return outcome.empty() ? "" : "replayed from a graph: " + outcome;
}

// After load_moe, a call allocates nothing and never waits for the stream: it can be captured into a CUDA graph (global
// capture mode refuses synchronisation and allocation), and the replayed graph computes the same output. On Hopper a
// table's tma config too: its gather, host-encoded tensor map and persistent GEMM.
TEST(RuntimeMoeGpu, CallCapturesIntoACudaGraph) {
  QTUNE_REQUIRE_GPU();
  test_support::TempDir dir;
  Runtime runtime({.cache_directory = dir / "cache"});
  const int sm = gemm::device_limits().sm;
  const char* heuristic_family =
      wgmma_family().supports(FormatSpec::parse("w4a16-int4-g128"), sm).supported ? "wgmma" : "mma";
  for (const char* projection : {"gate-up", "down"}) {
    const Case c{.format = "w4a16-int4-g128", .projection = projection, .routing = "zipf:1.5", .tokens = 64};
    EXPECT_EQ(capture_and_replay(runtime, c, heuristic_family), "") << projection;
  }
  if (!tma_family().supports(FormatSpec::parse("w4a8-int4-fp8"), sm).supported) {
    std::printf("[ runtime moe ] not sm_90: no tma config is captured\n");
    return;
  }
  reports::SelectionTable table;
  table.gpu = "h200";
  std::vector<Case> unused;
  // N = 1024: more 64 x 128 tiles than SMs, which a persistent tile needs to pass the rules.
  add_tuned_entries(table, unused, {"w4a8-int4-fp8"}, kTmaSplitTile, kTmaPersistentTile,
                    {.experts = 16, .top_k = 4, .n = 1024, .k = 512});
  std::sort(table.moe.begin(), table.moe.end(), [](const auto& a, const auto& b) { return a.key() < b.key(); });
  Runtime tuned({.table = testing::write_table(dir / "table.json", table), .cache_directory = dir / "cache"});
  for (const char* projection : {"gate-up", "down"}) {
    for (const std::int64_t tokens : {std::int64_t{8}, std::int64_t{64}}) {  // the split tile, then the persistent one
      const Case c{.format = "w4a8-int4-fp8", .projection = projection, .routing = "zipf:1.5", .tokens = tokens, .n = 1024};
      EXPECT_EQ(capture_and_replay(tuned, c, "tma"), "") << projection << " T=" << tokens;
    }
  }
}

// tma's activation map is encoded on the host once per shape and stream scratch and reused by later calls (the
// Runtime's TensorMapCache): the same buffers again give the same bits; other activations, routing and experts of the
// same shape reuse the map (the gather copies them into the same scratch rows) and match their own reference; a larger
// shape grows the stream's scratch, so the gathered rows move; the first shape after that must follow them (a stale
// map would read freed memory), and on a second stream its own scratch. Every output is checked.
TEST(RuntimeMoeGpu, TmaActivationMapIsReusedAndFollowsNewBuffers) {
  QTUNE_REQUIRE_GPU();
  if (!tma_family().supports(FormatSpec::parse("w4a8-int4-fp8"), gemm::device_limits().sm).supported) {
    GTEST_SKIP() << "not sm_90: the runtime launches no tma MoE kernel here";
  }
  test_support::TempDir dir;
  reports::SelectionTable table;
  table.gpu = "h200";
  std::vector<Case> unused;
  add_tuned_entries(table, unused, {"w4a8-int4-fp8"}, kTmaSplitTile, kTmaPersistentTile,
                    {.experts = 32, .top_k = 4, .n = 512, .k = 2048});
  std::sort(table.moe.begin(), table.moe.end(), [](const auto& a, const auto& b) { return a.key() < b.key(); });
  Runtime runtime({.table = testing::write_table(dir / "table.json", table), .cache_directory = dir / "cache"});
  const runtime::Stream stream, second_stream;
  for (const char* projection : {"gate-up", "down"}) {
    const Case small{.format = "w4a8-int4-fp8", .projection = projection, .routing = "uniform", .experts = 32, .tokens = 16,
                     .n = 512, .k = 2048};
    Case skewed = small;
    skewed.routing = "zipf:3";
    Case large = small;
    large.tokens = 256;
    for (const Case& c : {small, large}) {
      const MoeShape shape{.experts = c.experts, .top_k = c.top_k, .n = c.n, .k = c.k, .tokens = c.tokens, .projection = c.projection};
      const runtime_api::MoeChoice choice = runtime.select_moe(c.format, shape);
      ASSERT_EQ(choice.choice.family, "tma") << label(c) << ": " << choice.choice.detail;
      ASSERT_EQ(choice.choice.source, ConfigSource::Tuned) << label(c) << ": " << choice.choice.detail;
    }
    DeviceCase first = upload(runtime, small, 43);
    DeviceCase other = upload(runtime, skewed, 47);
    DeviceCase bigger = upload(runtime, large, 53);
    const std::vector<std::uint16_t> bits = run(runtime, first, small, stream);
    EXPECT_EQ(check_output(first, bits), "") << projection << ": the first call";
    EXPECT_EQ(run(runtime, first, small, stream), bits) << projection << ": the same buffers again";
    EXPECT_EQ(check_output(other, run(runtime, other, skewed, stream)), "") << projection << ": other activations, same shape";
    EXPECT_EQ(check_output(bigger, run(runtime, bigger, large, stream)), "") << projection << ": a larger shape (the scratch grows)";
    EXPECT_EQ(run(runtime, first, small, stream), bits) << projection << ": the first shape after the scratch moved";
    EXPECT_EQ(run(runtime, first, small, second_stream), bits) << projection << ": the first shape on another stream";
  }
}

// A table's MoE winners exported with the kernels their calls launch (production::write_cubins, what `qtune export
// --cubins DIR --arch <this GPU's target>` runs): a Runtime reading the directory runs them from the cubins, so
// select_moe says precompiled, every output matches the reference, and the JIT never runs (its disk cache stays empty).
// mma winners of W4A16 and W4A8 everywhere; on Hopper tma winners of W4A8 and W8A8 too (gather and reduction kernels).
TEST(RuntimeMoeGpu, ExportedMoeCubinsRunWithoutTheJit) {
  QTUNE_REQUIRE_GPU();
  test_support::TempDir dir;
  reports::SelectionTable table;
  table.gpu = "h200";
  std::vector<Case> mma_cases, tma_cases;
  add_tuned_entries(table, mma_cases, {"w4a16-int4-g128", "w4a8-int4-fp8"},
                    "mma:bm=16,bn=64,bk=256,wm=1,wn=2,wk=2,stages=3,split=2,raster=0",
                    "mma:bm=64,bn=64,bk=128,wm=2,wn=2,wk=1,stages=3,split=1,raster=0");
  const int sm = gemm::device_limits().sm;
  const bool hopper = tma_family().supports(FormatSpec::parse("w4a8-int4-fp8"), sm).supported;
  if (hopper) {
    add_tuned_entries(table, tma_cases, {"w4a8-int4-fp8", "w8a8-fp8-ch"}, kTmaSplitTile, kTmaPersistentTile,
                      {.experts = 32, .top_k = 4, .n = 512, .k = 2048});
  }
  std::sort(table.moe.begin(), table.moe.end(), [](const auto& a, const auto& b) { return a.key() < b.key(); });
  const std::string arch = gemm::nvrtc_arch(sm);
  jit::CompilerSettings settings;
  settings.cache_directory = dir / "export-cache";
  const CubinExport exported = write_cubins(plan_cubins(table, {arch}, false), dir / "cubins", jit::Compiler(settings));
  ASSERT_TRUE(exported.moe_failed.empty()) << exported.moe_failed.front().what << ": " << exported.moe_failed.front().reason;
  ASSERT_FALSE(exported.manifest.moe_kernels.empty());
  const std::filesystem::path jit_cache = dir / "cache";
  Runtime runtime({.table = testing::write_table(dir / "table.json", table), .cubin_directory = dir / "cubins",
                   .cache_directory = jit_cache});
  for (const std::vector<Case>* cases : {&mma_cases, &tma_cases}) {
    for (const Case& c : *cases) {
      const MoeShape shape{.experts = c.experts, .top_k = c.top_k, .n = c.n, .k = c.k, .tokens = c.tokens, .projection = c.projection};
      const runtime_api::MoeChoice choice = runtime.select_moe(c.format, shape);
      EXPECT_EQ(choice.origin, runtime_api::KernelOrigin::Precompiled) << label(c) << ": " << choice.choice.family << ":"
                                                                        << choice.choice.config;
    }
  }
  run_cases(runtime, mma_cases, ConfigSource::Tuned, "mma");
  if (hopper) run_cases(runtime, tma_cases, ConfigSource::Tuned, "tma");
  std::size_t compiled = 0;
  if (std::filesystem::exists(jit_cache)) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(jit_cache)) compiled += entry.is_regular_file() ? 1 : 0;
  }
  EXPECT_EQ(compiled, 0u) << "the JIT compiled kernels the cubin directory has";
  EXPECT_EQ(runtime.loaded_kernel_count(), exported.manifest.moe_kernels.size());
}

}  // namespace
}  // namespace qtune::production
