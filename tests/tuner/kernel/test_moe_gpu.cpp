// GPU correctness of the mma, wgmma and tma families' MoE GEMMs against the CPU reference, through the MoE providers
// (skipped with a reason when there is no GPU; the WgmmaMoeGpu and TmaMoeGpu cases also when it is not sm_90):
// token-indexed and both grouped layouts, gate-up and down (token-indexed down: router-weighted rows, then the top-k
// reduction), uniform, Zipf-skewed and balanced routing, empty experts, T = 1, 16, 64, 300; W4A16 int4 g128, W4A8
// int4 x fp8 and W8A8 fp8 (fp8 from sm_89), and more formats (zero points, 128x128 blocks, int8, bf16 output).
// Outputs are poisoned with NaN first; every row that reaches the output is checked, padding rows of the grouped
// layouts must stay untouched, and experts no pair routes to are 0xFF (NaN scales), so a kernel that read one would fail.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "kernels/families/mma_family.hpp"
#include "kernels/families/mma_moe.hpp"
#include "kernels/families/wgmma_family.hpp"
#include "kernels/moe.hpp"
#include "tests/tuner/runtime/gpu_test_support.hpp"
#include "tuner/baselines/moe_grouped_baseline.hpp"
#include "tuner/gemm/gemm_runner.hpp"
#include "tuner/providers/moe_provider.hpp"
#include "tuner/providers/pipeline.hpp"
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
  std::string family = "mma";  // the kernel family whose MoE provider runs the case: mma, wgmma or tma
};

std::string label(const MoeCase& c) {
  return c.family + " " + c.spec + " " + std::string(moe_layout_name(c.layout)) + " " + std::string(moe_projection_name(c.projection)) + " " +
         c.routing + " T=" + std::to_string(c.tokens) + " E=" + std::to_string(c.experts) + " k=" + std::to_string(c.top_k) +
         " " + c.config;
}

// Runs one case on the GPU through the MoE provider (the sequence `qtune tune` runs: prepare, load, poison, launch,
// verify); returns "" when it passes, else what went wrong.
std::string run_case(const MoeCase& c, const runtime::Stream& stream) {
  MoeProblem problem{.format = FormatSpec::parse(c.spec), .experts = c.experts, .top_k = c.top_k, .tokens = c.tokens,
                     .n = c.n, .k = c.k, .projection = c.projection, .layout = c.layout};
  problem.routing = RoutingSpec::parse(c.routing, 17);
  const KernelConfig config = KernelConfig::parse(c.config, c.family);
  const RuleVerdict verdict = mma_moe::check(config, problem, gemm::device_limits());
  if (!verdict.valid) return "config refused: " + verdict.rule + " " + verdict.detail;

  providers::MoeProvider& provider = *providers::find_moe_provider(c.family);
  providers::PrepareOptions prepare;
  prepare.seed = 23;
  const std::unique_ptr<providers::Operands> operands = provider.prepare(providers::moe_provider_problem(problem), prepare);
  providers::LoadOptions load;
  load.arch = gemm::nvrtc_arch(gemm::device_limits().sm);
  const std::unique_ptr<providers::Runnable> runnable = provider.load(*operands, config.to_string(), load);
  const providers::Check check = providers::check_candidate(*runnable, stream.get());
  return check.passed ? "" : check.summary;
}

void run_all(const std::vector<MoeCase>& cases) {
  const runtime::Stream stream;
  const int sm = gemm::device_limits().sm;
  int failed = 0, ran = 0;
  for (const MoeCase& c : cases) {
    if (!providers::find_moe_provider(c.family)->family().supports(FormatSpec::parse(c.spec), sm).supported) continue;
    ++ran;
    std::string outcome;
    try {
      outcome = run_case(c, stream);
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

// A family's MoE tiles for the GPU cases: decode (16 rows), split-K, and tall (64 rows, from 64 tokens on).
struct FamilyTiles {
  const char* family;
  const char* small;
  const char* split;
  const char* tall;
};
const FamilyTiles kMmaTiles{"mma", "bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=1,raster=0",
                            "bm=16,bn=64,bk=256,wm=1,wn=2,wk=2,stages=3,split=2,raster=0",
                            "bm=64,bn=64,bk=128,wm=2,wn=2,wk=1,stages=3,split=1,raster=0"};
const FamilyTiles kWgmmaTiles{"wgmma", "bm=16,bn=128,bk=128,stages=4,split=1,raster=0,overlap=0",
                              "bm=16,bn=64,bk=256,stages=3,split=2,raster=0,overlap=0",
                              "bm=64,bn=128,bk=64,stages=4,split=1,raster=0,overlap=1"};
const std::vector<const char*> kFormats = {"w4a16-int4-g128", "w4a8-int4-fp8", "w8a8-fp8-ch"};
// The W4A16 formats of the wgmma cases: groups, groups with zero points, per-channel scales.
const std::vector<const char*> kWgmmaFormats = {"w4a16-int4-g128", "w4a16-int4-g128-zp", "w4a16-int4-ch"};

// A case of the default shape on the family's small tile, or on its tall one from 64 tokens on.
MoeCase routed_case(const FamilyTiles& tiles, const char* spec, MoeLayout layout, MoeProjection projection, const char* routing,
                    int64_t tokens) {
  return MoeCase{.spec = spec, .layout = layout, .projection = projection, .routing = routing, .tokens = tokens,
                 .config = tokens >= 64 ? tiles.tall : tiles.small, .family = tiles.family};
}

// Token-indexed, both projections, T = 1, 16, 64, 300, each routing.
std::vector<MoeCase> token_indexed_cases(const FamilyTiles& tiles, const std::vector<const char*>& formats,
                                         const std::vector<const char*>& routings) {
  std::vector<MoeCase> cases;
  for (const char* spec : formats) {
    for (MoeProjection projection : {MoeProjection::GateUp, MoeProjection::Down}) {
      for (int64_t tokens : {1, 16, 64, 300}) {
        for (const char* routing : routings) cases.push_back(routed_case(tiles, spec, MoeLayout::TokenIndexed, projection, routing, tokens));
      }
    }
  }
  return cases;
}

// Both grouped layouts and projections, uniform, Zipf and balanced routing, T = 1, 64, 300.
std::vector<MoeCase> grouped_cases(const FamilyTiles& tiles, const std::vector<const char*>& formats) {
  std::vector<MoeCase> cases;
  for (const char* spec : formats) {
    for (MoeLayout layout : {MoeLayout::GroupedContiguous, MoeLayout::GroupedMasked}) {
      for (MoeProjection projection : {MoeProjection::GateUp, MoeProjection::Down}) {
        for (const char* routing : {"uniform", "zipf:1.5", "balanced"}) {
          for (int64_t tokens : {1, 64, 300}) cases.push_back(routed_case(tiles, spec, layout, projection, routing, tokens));
        }
      }
    }
  }
  return cases;
}

// Zipf 3 over 64 experts with top-2 of 16 tokens leaves most experts empty; the split-K tile on skewed blocks.
std::vector<MoeCase> empty_expert_cases(const FamilyTiles& tiles, const std::vector<const char*>& formats) {
  std::vector<MoeCase> cases;
  for (const char* spec : formats) {
    for (MoeLayout layout : {MoeLayout::TokenIndexed, MoeLayout::GroupedContiguous, MoeLayout::GroupedMasked}) {
      for (MoeProjection projection : {MoeProjection::GateUp, MoeProjection::Down}) {
        MoeCase c = routed_case(tiles, spec, layout, projection, "zipf:3", 16);
        c.experts = 64;
        c.top_k = 2;
        c.k = 1024;
        c.config = tiles.split;
        cases.push_back(c);
      }
    }
  }
  return cases;
}

TEST(MoeGpu, TokenIndexedEveryRoutingAndTokenCount) {
  QTUNE_REQUIRE_GPU();
  run_all(token_indexed_cases(kMmaTiles, kFormats, {"uniform", "zipf:1.5"}));
}

TEST(MoeGpu, GroupedLayoutsEveryRouting) {
  QTUNE_REQUIRE_GPU();
  run_all(grouped_cases(kMmaTiles, kFormats));
}

// Split-K with warp-K tiles on skewed blocks, most experts empty.
TEST(MoeGpu, EmptyExpertsAndSplitK) {
  QTUNE_REQUIRE_GPU();
  run_all(empty_expert_cases(kMmaTiles, kFormats));
}

// Zero points, DeepSeek's 128x128 weight blocks with 1x128 activation groups (gathered group scales), int8, bf16 output.
TEST(MoeGpu, MoreFormats) {
  QTUNE_REQUIRE_GPU();
  std::vector<MoeCase> cases;
  for (const char* spec : {"w4a16-int4-g128-zp", "w8a8-fp8-block128x128", "w8a8-int8-ch", "w4a16-int4-g128-bf16"}) {
    for (MoeLayout layout : {MoeLayout::TokenIndexed, MoeLayout::GroupedContiguous}) {
      for (MoeProjection projection : {MoeProjection::GateUp, MoeProjection::Down}) {
        for (int64_t tokens : {16, 300}) {
          cases.push_back(routed_case(kMmaTiles, spec, layout, projection, "zipf:1.5", tokens));
        }
      }
    }
  }
  run_all(cases);
}

// K-group scales on the partial sums (gscale=1): one group per tile, one group over two 64-deep tiles with split-K ranges
// that start and end inside a group (k = 1024: 16 tiles in ranges of 6, 5 and 5), and a 64-row tile with 2 x 2 warps;
// Every layout: token-indexed over `routings`, the grouped layouts, and empty experts with split-K.
std::vector<MoeCase> all_layout_cases(const FamilyTiles& tiles, const std::vector<const char*>& formats,
                                      const std::vector<const char*>& routings) {
  std::vector<MoeCase> cases = token_indexed_cases(tiles, formats, routings);
  for (const std::vector<MoeCase>& more : {grouped_cases(tiles, formats), empty_expert_cases(tiles, formats)}) {
    cases.insert(cases.end(), more.begin(), more.end());
  }
  return cases;
}

// The persistent schedule's cases of one tile: top-4 of 32 experts, N = 2048 (several units per CTA of the grid), K
// given, both projections, uniform and Zipf 3 routing (most experts empty), T = 1, 16, 300.
std::vector<MoeCase> persistent_cases(const char* config, int64_t k, const std::vector<const char*>& formats) {
  std::vector<MoeCase> cases;
  for (const char* spec : formats) {
    for (MoeProjection projection : {MoeProjection::GateUp, MoeProjection::Down}) {
      for (const char* routing : {"uniform", "zipf:3"}) {
        for (int64_t tokens : {1, 16, 300}) {
          MoeCase c{.spec = spec, .projection = projection, .routing = routing, .tokens = tokens, .experts = 32, .top_k = 4,
                    .n = 2048, .k = k, .config = config, .family = "wgmma"};
          cases.push_back(c);
        }
      }
    }
  }
  return cases;
}

// every layout, skewed routing and empty experts, f16 and bf16.
TEST(MoeGpu, GroupScalesOnPartialSums) {
  QTUNE_REQUIRE_GPU();
  const FamilyTiles tiles{"mma", "bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=1,raster=0,gscale=1",
                          "bm=16,bn=64,bk=64,wm=1,wn=4,wk=1,stages=3,split=3,raster=0,gscale=1",
                          "bm=64,bn=64,bk=128,wm=2,wn=2,wk=1,stages=3,split=1,raster=0,gscale=1"};
  const std::vector<const char*> formats = {"w4a16-int4-g128", "w4a16-int4-g128-bf16"};
  run_all(all_layout_cases(tiles, formats, {"uniform", "zipf:1.5"}));
}

// ---- the wgmma MoE kernel (sm_90a) ----

#define QTUNE_REQUIRE_HOPPER()                                                                                           \
  do {                                                                                                                   \
    QTUNE_REQUIRE_GPU();                                                                                                 \
    if (gemm::device_limits().sm != 90) {                                                                                \
      GTEST_SKIP() << "the wgmma and tma MoE kernels need sm_90 (Hopper), this GPU is sm_" << gemm::device_limits().sm;  \
    }                                                                                                                    \
  } while (false)

TEST(WgmmaMoeGpu, TokenIndexedEveryRoutingAndTokenCount) {
  QTUNE_REQUIRE_HOPPER();
  run_all(token_indexed_cases(kWgmmaTiles, kWgmmaFormats, {"uniform", "zipf:1.5", "balanced"}));
}

TEST(WgmmaMoeGpu, GroupedLayoutsEveryRouting) {
  QTUNE_REQUIRE_HOPPER();
  run_all(grouped_cases(kWgmmaTiles, kWgmmaFormats));
}

// Split-K on skewed blocks, most experts empty, every layout.
TEST(WgmmaMoeGpu, EmptyExpertsAndSplitK) {
  QTUNE_REQUIRE_HOPPER();
  run_all(empty_expert_cases(kWgmmaTiles, kWgmmaFormats));
}

// K-group scales on the partial sums (gscale=1): two groups per stage (bk = 256), one group over two stages with split-K
// ranges that start and end inside a group (k = 1024: 16 tiles of 64 in ranges of 6, 5 and 5), and a 64-row tile;
// every layout, skewed routing and empty experts, f16 and bf16.
TEST(WgmmaMoeGpu, GroupScalesOnPartialSums) {
  QTUNE_REQUIRE_HOPPER();
  const FamilyTiles tiles{"wgmma", "bm=16,bn=128,bk=256,stages=4,split=1,raster=0,overlap=0,gscale=1",
                          "bm=16,bn=64,bk=64,stages=3,split=3,raster=0,overlap=0,gscale=1",
                          "bm=64,bn=128,bk=128,stages=4,split=1,raster=0,overlap=0,gscale=1"};
  const std::vector<const char*> formats = {"w4a16-int4-g128", "w4a16-int4-g128-bf16"};
  run_all(all_layout_cases(tiles, formats, {"uniform", "zipf:1.5"}));
}

// Every token tile of the curated space (16 to 128 rows) and bf16 output, at DeepSeek-V3's top-8 over 32 experts.
TEST(WgmmaMoeGpu, EveryTokenTile) {
  QTUNE_REQUIRE_HOPPER();
  std::vector<MoeCase> cases;
  for (const char* spec : {"w4a16-int4-g128", "w4a16-int4-g128-bf16"}) {
    for (int bm : {16, 32, 64, 128}) {
      for (MoeProjection projection : {MoeProjection::GateUp, MoeProjection::Down}) {
        MoeCase c = routed_case(kWgmmaTiles, spec, MoeLayout::TokenIndexed, projection, "zipf:1.2", 256);
        c.experts = 32;
        c.top_k = 8;
        c.config = "bm=" + std::to_string(bm) + ",bn=128,bk=128,stages=4,split=1,raster=0,overlap=" + (bm >= 64 ? "1" : "0");
        cases.push_back(c);
      }
    }
  }
  run_all(cases);
}

// The persistent schedule (persistent=1, token-indexed): N = 2048 gives each CTA of the grid (SMs x resident CTAs)
// several units, so tables fill one unit ahead and the pipeline runs across units of different experts and column
// tiles; K from the fewest tiles a unit may have (2 (stages - 1) + 1) up; groups spanning two stages (bk = 64, g128)
// with gscale; per-channel scales reloaded per unit; zero points; bf16; skewed routing with most experts empty; the
// router-weighted down projection; T = 1 (a handful of units) to 300.
TEST(WgmmaMoeGpu, PersistentSchedule) {
  QTUNE_REQUIRE_HOPPER();
  struct Tile {
    const char* config;
    int64_t k;
  };
  const Tile tiles[] = {{"bm=16,bn=64,bk=64,stages=3,split=1,raster=0,overlap=0,gscale=0,persistent=1", 512},
                        {"bm=16,bn=128,bk=256,stages=4,split=1,raster=0,overlap=0,gscale=1,persistent=1", 2048},
                        {"bm=16,bn=64,bk=64,stages=3,split=1,raster=0,overlap=0,gscale=1,persistent=1", 512},
                        {"bm=32,bn=128,bk=128,stages=3,split=1,raster=0,overlap=0,gscale=0,persistent=1", 640},
                        {"bm=64,bn=128,bk=128,stages=4,split=1,raster=0,overlap=0,gscale=0,persistent=1", 1024}};
  std::vector<MoeCase> cases;
  for (const Tile& tile : tiles) {
    const bool scaled = std::string(tile.config).find("gscale=1") != std::string::npos;
    const std::vector<const char*> formats = scaled ? std::vector<const char*>{"w4a16-int4-g128", "w4a16-int4-g128-bf16"}
                                                    : std::vector<const char*>{"w4a16-int4-g128", "w4a16-int4-ch", "w4a16-int4-g128-zp"};
    const std::vector<MoeCase> more = persistent_cases(tile.config, tile.k, formats);
    cases.insert(cases.end(), more.begin(), more.end());
  }
  run_all(cases);
}

// fp8 activations widened to f16 (W4A8 int4 per channel with f32 and f16 scales, g128 with gscale=1, W8A8 fp8): every
// layout and projection, uniform and skewed routing, empty experts with split-K, the token scales gathered with the
// rows; the persistent schedule with units of different experts.
TEST(WgmmaMoeGpu, WidenedFp8Activations) {
  QTUNE_REQUIRE_HOPPER();
  const FamilyTiles channel_tiles{"wgmma", "bm=16,bn=128,bk=128,stages=4,split=1,raster=0,overlap=0",
                                  "bm=16,bn=64,bk=256,stages=3,split=2,raster=0,overlap=0",
                                  "bm=64,bn=128,bk=128,stages=4,split=1,raster=0,overlap=1"};
  const FamilyTiles group_tiles{"wgmma", "bm=16,bn=128,bk=256,stages=4,split=1,raster=0,overlap=0,gscale=1",
                                "bm=16,bn=64,bk=128,stages=3,split=3,raster=0,overlap=0,gscale=1",
                                "bm=64,bn=128,bk=128,stages=4,split=1,raster=0,overlap=0,gscale=1"};
  std::vector<MoeCase> cases = all_layout_cases(channel_tiles, {"w4a8-int4-fp8", "w4a8-int4-fp8:scale=f16", "w8a8-fp8-ch"},
                                                {"uniform", "zipf:1.5"});
  for (const std::vector<MoeCase>& more :
       {all_layout_cases(group_tiles, {"w4a8-int4-g128-fp8"}, {"uniform", "zipf:1.5"}),
        persistent_cases("bm=16,bn=128,bk=128,stages=3,split=1,raster=0,overlap=0,gscale=0,persistent=1", 640, {"w4a8-int4-fp8", "w8a8-fp8-ch"}),
        persistent_cases("bm=16,bn=128,bk=256,stages=4,split=1,raster=0,overlap=0,gscale=1,persistent=1", 2048, {"w4a8-int4-g128-fp8"})}) {
    cases.insert(cases.end(), more.begin(), more.end());
  }
  run_all(cases);
}

// ---- the tma MoE kernel (sm_90a): quantized activations through a TMA tensor map, token-indexed rows gathered ----

const FamilyTiles kTmaTiles{
    "tma", "bm=16,bn=64,bk=128,stages=4,split=1,raster=0,cluster=1,multicast=0,persistent=0,overlap=0,promote=128,pingpong=0",
    "bm=16,bn=64,bk=256,stages=3,split=2,raster=0,cluster=1,multicast=0,persistent=0,overlap=0,promote=128,pingpong=0",
    "bm=64,bn=128,bk=128,stages=4,split=1,raster=0,cluster=1,multicast=0,persistent=0,overlap=0,promote=128,pingpong=0"};
// W4A8 int4 x fp8 and W8A8 fp8 per channel x per token (token scales gathered), DeepSeek's fp8 128x128 blocks with
// 1x128 activation groups (group scales gathered).
const std::vector<const char*> kTmaFormats = {"w4a8-int4-fp8", "w8a8-fp8-ch", "w8a8-fp8-block128x128"};

TEST(TmaMoeGpu, TokenIndexedEveryRoutingAndTokenCount) {
  QTUNE_REQUIRE_HOPPER();
  run_all(token_indexed_cases(kTmaTiles, kTmaFormats, {"uniform", "zipf:1.5", "balanced"}));
}

TEST(TmaMoeGpu, GroupedLayoutsEveryRouting) {
  QTUNE_REQUIRE_HOPPER();
  run_all(grouped_cases(kTmaTiles, kTmaFormats));
}

// Split-K on skewed blocks, most experts empty, every layout.
TEST(TmaMoeGpu, EmptyExpertsAndSplitK) {
  QTUNE_REQUIRE_HOPPER();
  run_all(empty_expert_cases(kTmaTiles, kTmaFormats));
}

// Persistent grids (each CTA walks many units, skipping the empty blocks, the ring running on across units), clusters
// of two sharing the activations by multicast, every token tile 16 to 128, fp8 never promoting with a wgmma group in
// flight, int8 and bf16 output: top-8 of 32 experts, Zipf 1.2, T = 256, N = 2048, every layout for the first tiles.
std::vector<MoeCase> tma_persistent_cases() {
  const std::string rest = ",raster=0,pingpong=0";
  struct Tile {
    const char* spec;
    std::string config;
  };
  std::vector<Tile> tiles;
  for (int bm : {16, 32, 64, 128}) {
    tiles.push_back({"w4a8-int4-fp8", "bm=" + std::to_string(bm) + ",bn=128,bk=128,stages=4,split=1,cluster=1,multicast=0,persistent=1,"
                                      "overlap=0,promote=128" + rest});
  }
  tiles.push_back({"w4a8-int4-fp8", "bm=32,bn=64,bk=128,stages=6,split=2,cluster=2,multicast=1,persistent=1,overlap=0,promote=128" + rest});
  tiles.push_back({"w8a8-fp8-ch", "bm=64,bn=128,bk=128,stages=4,split=1,cluster=1,multicast=0,persistent=1,overlap=1,promote=0" + rest});
  tiles.push_back({"w8a8-fp8-block128x128", "bm=64,bn=128,bk=128,stages=4,split=1,cluster=2,multicast=1,persistent=1,overlap=0,promote=128" + rest});
  tiles.push_back({"w8a8-int8-ch", "bm=32,bn=128,bk=128,stages=4,split=1,cluster=1,multicast=0,persistent=1,overlap=1,promote=128" + rest});
  tiles.push_back({"w4a8-int4-fp8:out=bf16", "bm=16,bn=64,bk=256,stages=4,split=2,cluster=1,multicast=0,persistent=1,overlap=0,promote=128" + rest});
  // Two K groups of consumers per 64 columns (kgroups=2): no flush, and block scales flushed per slot in a cluster.
  tiles.push_back({"w4a8-int4-fp8", "bm=64,bn=64,bk=128,stages=6,split=1,cluster=1,multicast=0,persistent=1,overlap=0,promote=0" + rest + ",kgroups=2"});
  tiles.push_back({"w8a8-fp8-block128x128", "bm=32,bn=64,bk=128,stages=4,split=2,cluster=2,multicast=1,persistent=1,overlap=0,promote=128" + rest + ",kgroups=2"});
  // 192-token blocks with block scales folded into the token scales (192 accumulators per consumer thread).
  tiles.push_back({"w8a8-fp8-block128x128", "bm=192,bn=128,bk=128,stages=4,split=1,cluster=1,multicast=0,persistent=1,overlap=0,promote=128" + rest});
  // wgmma reading the experts' weights from shared memory (ss=1): fp8 with a group in flight, block scales folded on
  // 128- and 192-token blocks (two atoms per slot at bk = 256), int8 with split-K.
  tiles.push_back({"w8a8-fp8-ch", "bm=64,bn=128,bk=128,stages=4,split=1,cluster=1,multicast=0,persistent=1,overlap=1,promote=0" + rest + ",ss=1"});
  tiles.push_back({"w8a8-fp8-block128x128", "bm=128,bn=128,bk=256,stages=3,split=1,cluster=1,multicast=0,persistent=1,overlap=0,promote=128" + rest + ",ss=1"});
  tiles.push_back({"w8a8-fp8-block128x128", "bm=192,bn=128,bk=128,stages=4,split=1,cluster=1,multicast=0,persistent=1,overlap=0,promote=128" + rest + ",ss=1"});
  tiles.push_back({"w8a8-int8-ch", "bm=32,bn=128,bk=128,stages=4,split=2,cluster=1,multicast=0,persistent=1,overlap=0,promote=128" + rest + ",ss=1"});
  std::vector<MoeCase> cases;
  for (size_t i = 0; i < tiles.size(); ++i) {
    for (MoeLayout layout : {MoeLayout::TokenIndexed, MoeLayout::GroupedContiguous, MoeLayout::GroupedMasked}) {
      if (i >= 4 && layout != MoeLayout::TokenIndexed) continue;
      for (MoeProjection projection : {MoeProjection::GateUp, MoeProjection::Down}) {
        MoeCase c = routed_case(kTmaTiles, tiles[i].spec, layout, projection, "zipf:1.2", 256);
        c.experts = 32;
        c.top_k = 8;
        c.n = 2048;
        c.k = 1024;
        c.config = tiles[i].config;
        cases.push_back(c);
      }
    }
  }
  return cases;
}

TEST(TmaMoeGpu, PersistentClustersAndEveryTokenTile) {
  QTUNE_REQUIRE_HOPPER();
  run_all(tma_persistent_cases());
}

// Without a GPU: every TmaMoeGpu case's configuration passes the MoE rules on an H200's limits (a refused one would
// only show on the GPU machine), and the token-indexed ones gather.
TEST(TmaMoeCases, EveryConfigurationPassesTheRulesOnHopper) {
  std::vector<MoeCase> cases = token_indexed_cases(kTmaTiles, kTmaFormats, {"uniform", "zipf:1.5", "balanced"});
  for (const std::vector<MoeCase>& more : {grouped_cases(kTmaTiles, kTmaFormats), empty_expert_cases(kTmaTiles, kTmaFormats),
                                           tma_persistent_cases()}) {
    cases.insert(cases.end(), more.begin(), more.end());
  }
  ArchLimits hopper = ArchLimits::for_sm(90);
  hopper.sm_count = 132;
  for (const MoeCase& c : cases) {
    MoeProblem problem{.format = FormatSpec::parse(c.spec), .experts = c.experts, .top_k = c.top_k, .tokens = c.tokens,
                       .n = c.n, .k = c.k, .projection = c.projection, .layout = c.layout};
    problem.routing = RoutingSpec::parse(c.routing, 17);
    const KernelConfig config = KernelConfig::parse(c.config, c.family);
    const RuleVerdict verdict = mma_moe::check(config, problem, hopper);
    EXPECT_TRUE(verdict.valid) << label(c) << ": " << verdict.rule << " " << verdict.detail;
    EXPECT_EQ(mma_moe::gathers(config, problem), c.layout == MoeLayout::TokenIndexed) << label(c);
  }
  EXPECT_EQ(cases.size(), 3u * 2 * 4 * 3 + 3 * 2 * 2 * 3 * 3 + 3 * 3 * 2 + (4 * 3 + 12) * 2);
}

// The MoE baseline (cuBLAS grouped GEMM, f16 weights dequantized) through the same check: every pair row.
TEST(MoeGpu, GroupedBaselineMatchesTheReference) {
  QTUNE_REQUIRE_GPU();
  const runtime::Stream stream;
  baselines::MoeGroupedBaselineProvider& provider = baselines::moe_grouped_baseline_provider();
  int ran = 0;
  for (const char* spec : {"w4a16-int4-g128", "w4a8-int4-fp8"}) {
    if (!mma_family().supports(FormatSpec::parse(spec), gemm::device_limits().sm).supported) continue;
    for (MoeProjection projection : {MoeProjection::GateUp, MoeProjection::Down}) {
      for (int64_t tokens : {1, 16, 300}) {
        MoeProblem problem{.format = FormatSpec::parse(spec), .experts = 16, .top_k = 4, .tokens = tokens, .n = 256,
                           .k = 512, .projection = projection, .layout = MoeLayout::TokenIndexed};
        problem.routing = RoutingSpec::parse("zipf:1.5", 17);
        const auto operands = provider.prepare(providers::moe_provider_problem(problem), providers::PrepareOptions{});
        const auto runnable = provider.load(*operands, "default", providers::LoadOptions{});
        const providers::Check check = providers::check_candidate(*runnable, stream.get());
        std::printf("[ moe baseline ] %-80s %s\n", problem.to_string().c_str(), check.summary.c_str());
        EXPECT_TRUE(check.passed) << problem.to_string() << ": " << check.summary;
        ++ran;
      }
    }
  }
  EXPECT_GT(ran, 0);
}

}  // namespace
}  // namespace qtune
