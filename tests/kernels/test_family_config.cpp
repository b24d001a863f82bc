// The kernel-family interface: config text/JSON, the registry, static rules, support refusals, launch geometry.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>

#include <nlohmann/json.hpp>

#include "kernels/error.hpp"
#include "kernels/families/mma_family.hpp"
#include "kernels/families/tma_family.hpp"
#include "kernels/families/wgmma_family.hpp"
#include "kernels/family.hpp"
#include "tests/common/expect_error.hpp"

namespace qtune {
namespace {

using test_support::expect_input_error;

KernelConfig mma_config(std::string_view text) { return KernelConfig::parse(text, "mma"); }

Problem problem(std::string_view format, int64_t m, int64_t n, int64_t k) {
  Problem p;
  p.format = FormatSpec::parse(format);
  p.m = m;
  p.n = n;
  p.k = k;
  return p;
}

const char* kBaseConfig = "bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=4,raster=0";

TEST(KernelConfig, TextIsCanonicalInFamilyOrder) {
  const KernelConfig config = mma_config("split=4,bm=16,bk=256,bn=128,wm=1,wn=4,wk=1,stages=4,raster=0");
  EXPECT_EQ(config.family, "mma");
  EXPECT_EQ(config.to_string(), kBaseConfig);
  EXPECT_EQ(mma_config(config.to_string()), config);
  EXPECT_EQ(config.get("split"), 4);
}

// A parameter added after configs were stored (absent_means) reads as that value from a config without it; one without
// such a value is an InputError naming it.
TEST(KernelConfig, StoredConfigsReadParametersAddedLater) {
  const std::vector<ParameterDomain> space = mma_family().parameter_space();
  auto domain = [&](const std::string& name) {
    return *std::find_if(space.begin(), space.end(), [&](const ParameterDomain& d) { return d.name == name; });
  };
  const KernelConfig stored = mma_config(kBaseConfig);  // before "gscale"
  EXPECT_EQ(domain("gscale").value_in(stored), 0);
  EXPECT_EQ(domain("gscale").value_in(mma_config(std::string(kBaseConfig) + ",gscale=1")), 1);
  EXPECT_EQ(domain("split").value_in(stored), 4);
  expect_input_error([&] { domain("split").value_in(mma_config("bm=16")); }, {"missing parameter 'split'"});
}

TEST(KernelConfig, FamilyPrefixOverridesTheDefault) {
  const KernelConfig config = KernelConfig::parse("other:b=2,a=1", "mma");
  EXPECT_EQ(config.family, "other");
  EXPECT_EQ(config.to_string(), "a=1,b=2");  // unknown family: alphabetical
}

TEST(KernelConfig, JsonRoundTrip) {
  const KernelConfig config = mma_config(kBaseConfig);
  const nlohmann::json json = config.to_json();
  EXPECT_EQ(json["family"], "mma");
  EXPECT_EQ(json["params"]["bn"], 128);
  EXPECT_EQ(KernelConfig::from_json(json), config);
  EXPECT_EQ(KernelConfig::from_json(nlohmann::json::parse(json.dump())), config);
}

TEST(KernelConfig, MalformedInputNamesTheField) {
  auto message = [](auto&& call) {
    try {
      call();
    } catch (const InputError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { mma_config("bm=16,bn"); }).find("'bn' is not of the form name=value"), std::string::npos);
  EXPECT_NE(message([] { mma_config("bm=x"); }).find("parameter 'bm'"), std::string::npos);
  EXPECT_NE(message([] { mma_config("bm=1,bm=2"); }).find("given twice"), std::string::npos);
  EXPECT_NE(message([] { mma_config(""); }).find("empty parameter list"), std::string::npos);
  EXPECT_NE(message([] { mma_config("bm=16").get("bk"); }).find("missing parameter 'bk'"), std::string::npos);
  EXPECT_NE(message([] { KernelConfig::from_json(nlohmann::json{{"family", "mma"}}); }).find("config.params"),
            std::string::npos);
  EXPECT_NE(message([] { KernelConfig::from_json(nlohmann::json{{"family", "mma"}, {"params", {{"bm", "x"}}}}); })
                .find("config.params.bm"),
            std::string::npos);
}

TEST(KernelFamilies, RegistryFindsMmaWgmmaTmaAndBsmma) {
  ASSERT_EQ(kernel_families().size(), 4u);
  EXPECT_EQ(kernel_families().front()->name(), "mma");  // production's first choice without a table
  EXPECT_EQ(find_family("mma").name(), "mma");
  EXPECT_EQ(find_family("wgmma").name(), "wgmma");
  EXPECT_EQ(find_family("tma").name(), "tma");
  EXPECT_EQ(find_family("tma").weight_layout(), "mma");  // it runs on the weights production packs once
  EXPECT_EQ(find_family("bsmma").weight_layout(), "bsmma");  // its own fragment-order layout
  expect_input_error([&] { find_family("nope"); }, {"unknown kernel family 'nope' (known: mma, tma, wgmma, bsmma)"});
}

// The tma family's rules: sm_90 only, 8-bit and 16-bit operands, clusters only with multicast, flushed formats at
// most 128 tokens per tile, persistence only past one wave; the default config passes its own check everywhere.
TEST(TmaFamilyRules, RulesNameWhatIsWrong) {
  const ArchLimits hopper = ArchLimits::for_sm(90);
  const Problem fp8{FormatSpec::parse("w8a8-fp8-ch"), 256, 8192, 8192, false};
  const Problem int4{FormatSpec::parse("w4a16-int4-ch"), 256, 8192, 8192, false};
  auto verdict = [&](const std::string& text, const Problem& p) {
    return tma_family().check(KernelConfig::parse(text, "tma"), p, hopper).rule;
  };
  const std::string base = "bn=128,bk=128,stages=4,split=1,raster=0";
  const Problem fp8_large{fp8.format, 4096, 8192, 8192, false};
  EXPECT_EQ(verdict("bm=128," + base + ",cluster=1,multicast=0,persistent=1", fp8_large), "");
  EXPECT_EQ(verdict("bm=128," + base + ",cluster=2,multicast=1,persistent=1", fp8_large), "");
  EXPECT_EQ(verdict("bm=128," + base + ",cluster=1,multicast=0,persistent=1", fp8), "persistent-one-wave");  // 64 tiles
  EXPECT_EQ(verdict("bm=128," + base + ",cluster=2,multicast=2,persistent=0", fp8), "");
  EXPECT_EQ(verdict("bm=256," + base + ",cluster=1,multicast=0,persistent=0", fp8), "accumulators-per-thread");
  EXPECT_EQ(verdict("bm=256,bn=128,bk=128,stages=2,split=1,raster=0,cluster=1,multicast=0,persistent=0", int4), "");  // no flushes
  EXPECT_EQ(verdict("bm=256," + base + ",cluster=1,multicast=0,persistent=0", int4), "smem-per-block");  // 4 x 72 KB
  EXPECT_EQ(verdict("bm=128," + base + ",cluster=2,multicast=0,persistent=0", fp8), "cluster-multicast");
  EXPECT_EQ(verdict("bm=128," + base + ",cluster=1,multicast=1,persistent=0", fp8), "cluster-multicast");
  EXPECT_EQ(verdict("bm=64," + base + ",cluster=2,multicast=2,persistent=0", Problem{fp8.format, 64, 8192, 8192, false}),
            "cluster-single-m-tile");
  EXPECT_EQ(verdict("bm=64," + base + ",cluster=2,multicast=1,persistent=0", Problem{fp8.format, 64, 8320, 8192, false}),
            "cluster-divides-n");
  // Clusters of four: N a multiple of 4 * bn for shared activations, at least four M tiles for shared weights.
  EXPECT_EQ(verdict("bm=64," + base + ",cluster=4,multicast=1,persistent=0", Problem{fp8.format, 64, 8192, 8192, false}), "");
  EXPECT_EQ(verdict("bm=64," + base + ",cluster=4,multicast=1,persistent=0", Problem{fp8.format, 64, 8448, 8192, false}),
            "cluster-divides-n");  // 8448 = 66 * 128: pairs fit, quadruples do not
  EXPECT_EQ(verdict("bm=64," + base + ",cluster=2,multicast=1,persistent=0", Problem{fp8.format, 64, 8448, 8192, false}), "");
  EXPECT_EQ(verdict("bm=64," + base + ",cluster=4,multicast=2,persistent=0", fp8), "");  // 4 tiles of 64 rows
  EXPECT_EQ(verdict("bm=128," + base + ",cluster=4,multicast=2,persistent=0", fp8), "cluster-single-m-tile");  // 2 tiles
  EXPECT_EQ(verdict("bm=64," + base + ",cluster=3,multicast=1,persistent=0", fp8), "parameter-domain");
  EXPECT_EQ(verdict("bm=128,bn=128,bk=64,stages=4,split=1,raster=0,cluster=1,multicast=0,persistent=0", fp8), "bk-atom");
  EXPECT_EQ(verdict("bm=64,bn=128,bk=128,stages=4,split=1,raster=0,cluster=1,multicast=0,persistent=1",
                    Problem{fp8.format, 64, 8192, 8192, false}),
            "persistent-one-wave");  // 64 tiles
  // A group in flight with flushed partial sums (fp8 promotions here): two token halves of at least 16, one flush per slot.
  EXPECT_EQ(verdict("bm=128," + base + ",cluster=1,multicast=0,persistent=0,overlap=1", fp8), "");
  EXPECT_EQ(verdict("bm=32," + base + ",cluster=1,multicast=0,persistent=0,overlap=1", fp8), "");
  EXPECT_EQ(verdict("bm=16," + base + ",cluster=1,multicast=0,persistent=0,overlap=1", fp8), "overlap-flush-halves");
  EXPECT_EQ(verdict("bm=128,bn=128,bk=256,stages=3,split=1,raster=0,cluster=1,multicast=0,persistent=0,overlap=1", fp8),
            "overlap-flush-interval");  // promotes every 128 K inside a 256-deep slot
  EXPECT_EQ(verdict("bm=128," + base + ",cluster=1,multicast=0,persistent=0,overlap=1", int4), "");
  EXPECT_EQ(verdict("bm=128," + base + ",cluster=1,multicast=0,persistent=0,overlap=2", int4), "parameter-domain");
  EXPECT_EQ(verdict("bm=128,bn=128,bk=128,stages=4,split=3,raster=0,cluster=1,multicast=0,persistent=0,overlap=1", int4),
            "overlap-even-k-tiles");  // 64 K tiles in 3 ranges
  EXPECT_EQ(verdict("bm=128," + base + ",cluster=1,multicast=0,persistent=0,wn=4", fp8), "parameter-unknown");
  // promote: fp8 without K-group scales only; 0 (never) lifts the flush rules, a longer interval keeps them.
  const std::string plain = ",cluster=1,multicast=0,persistent=0";
  EXPECT_EQ(verdict("bm=128," + base + plain + ",overlap=1,promote=0", fp8), "");
  EXPECT_EQ(verdict("bm=256," + base + plain + ",overlap=1,promote=0", fp8), "");
  // 256-token tiles with split-K: ptxas spills the reduction without a group in flight (about 600 bytes), not with one.
  const std::string split2 = "bn=128,bk=128,stages=4,split=2,raster=0" + plain;
  EXPECT_EQ(verdict("bm=256," + split2 + ",overlap=1,promote=0", fp8), "");
  EXPECT_EQ(verdict("bm=256," + split2 + ",overlap=0,promote=0", fp8), "registers-per-thread");
  EXPECT_EQ(verdict("bm=256,bn=128,bk=64,stages=4,split=2,raster=0" + plain + ",overlap=1", int4), "");
  EXPECT_EQ(verdict("bm=256,bn=128,bk=64,stages=4,split=2,raster=0" + plain + ",overlap=0", int4), "registers-per-thread");
  EXPECT_EQ(verdict("bm=128," + base + plain + ",promote=256", fp8), "");  // one flush per two slots
  EXPECT_EQ(verdict("bm=128," + base + plain + ",overlap=1,promote=512", fp8), "overlap-flush-interval");
  EXPECT_EQ(verdict("bm=256," + base + plain + ",promote=256", fp8), "accumulators-per-thread");
  EXPECT_EQ(verdict("bm=128," + base + plain + ",promote=64", fp8), "parameter-domain");
  EXPECT_EQ(verdict("bm=128," + base + plain + ",promote=0", int4), "promote-fixed-flush");
  EXPECT_EQ(verdict("bm=128," + base + plain + ",promote=128", int4), "");
  const Problem block{FormatSpec::parse("w8a8-fp8-block128x128"), 256, 8192, 8192, false};
  EXPECT_EQ(verdict("bm=128," + base + plain + ",promote=0", block), "promote-fixed-flush");
  // Block scales with a group in flight: 128-token tiles fit the registers of two consumer warpgroups, 256 do not.
  const Problem block_large{FormatSpec::parse("w8a8-fp8-block128x128"), 4096, 8192, 8192, false};
  const std::string persistent = "bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=1,overlap=1";
  EXPECT_EQ(verdict("bm=128," + persistent, block_large), "");
  EXPECT_EQ(verdict("bm=128," + persistent, Problem{FormatSpec::parse("w8a8-int8-block128x128"), 4096, 8192, 8192, false}), "");
  EXPECT_EQ(verdict("bm=128," + persistent, Problem{FormatSpec::parse("w4a8-int4-g128-fp8"), 4096, 8192, 8192, false}), "");
  EXPECT_EQ(verdict("bm=256," + persistent, block_large), "accumulators-per-thread");
  // 192-token tiles with flushed partial sums: 192 accumulators under 232 registers, with no group in flight or turns
  // (those spill); the same tile without flushes takes a group in flight.
  const std::string wide = "bm=192,bn=128,bk=128,stages=5,split=1,raster=2,cluster=1,multicast=0,persistent=1";
  for (const char* spec : {"w8a8-fp8-block128x128", "w8a8-int8-block128x128", "w8a8-fp8-block64x128", "w4a8-int4-g128-fp8"}) {
    const Problem problem{FormatSpec::parse(spec), 4096, 8192, 8192, false};
    EXPECT_EQ(verdict(wide, problem), "") << spec;
    EXPECT_EQ(verdict(wide + ",overlap=1", problem), "registers-per-thread") << spec;
    EXPECT_EQ(verdict(wide + ",pingpong=1", problem), "registers-per-thread") << spec;
  }
  EXPECT_EQ(verdict(wide + ",promote=128", Problem{FormatSpec::parse("w8a8-fp8-ch"), 4096, 8192, 8192, false}), "");
  EXPECT_EQ(verdict(wide + ",overlap=1,promote=0", Problem{FormatSpec::parse("w8a8-fp8-ch"), 4096, 8192, 8192, false}), "");
  EXPECT_EQ(verdict("bm=128,bn=128,bk=256,stages=3,split=1,raster=2,cluster=1,multicast=0,persistent=1,overlap=1", block_large),
            "overlap-flush-interval");
  EXPECT_EQ(verdict("bm=128,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=1,overlap=1",
                    Problem{FormatSpec::parse("w4a8-fp4-g32-fp8"), 4096, 8192, 8192, false}),
            "overlap-flush-interval");  // its 32-K groups flush four times per slot
  const Problem w4a8{FormatSpec::parse("w4a8-int4-fp8"), 256, 8192, 8192, false};
  EXPECT_EQ(verdict("bm=256," + base + plain + ",overlap=1,promote=0", w4a8), "");
  // ss=1: raw 8-bit weights only, which wgmma reads as stored; its registers are estimated as with register weights
  // (ptxas spilled the 256-token tile with split 2 and no group in flight, 568-1780 bytes).
  EXPECT_EQ(verdict("bm=128," + base + plain + ",ss=1", fp8), "");
  EXPECT_EQ(verdict("bm=128," + base + plain + ",ss=1", block), "");
  EXPECT_EQ(verdict("bm=128," + base + plain + ",ss=1", Problem{FormatSpec::parse("w8a8-int8-ch"), 256, 8192, 8192, false}), "");
  EXPECT_EQ(verdict("bm=128," + base + plain + ",ss=1", w4a8), "ss-raw-8bit");
  EXPECT_EQ(verdict("bm=128," + base + plain + ",ss=1", int4), "ss-raw-8bit");
  EXPECT_EQ(verdict("bm=128," + base + plain + ",ss=2", fp8), "parameter-domain");
  EXPECT_EQ(verdict("bm=256," + split2 + ",overlap=0,promote=0,ss=1", fp8), "registers-per-thread");
  EXPECT_EQ(verdict("bm=256," + split2 + ",overlap=1,promote=0,ss=1", fp8), "");
  // pingpong: two consumer warpgroups, and not with a group in flight.
  EXPECT_EQ(verdict("bm=128," + base + plain + ",pingpong=1", fp8), "");
  EXPECT_EQ(verdict("bm=128," + base + plain + ",pingpong=1", block), "");
  EXPECT_EQ(verdict("bm=128,bn=64,bk=128,stages=4,split=1,raster=0" + plain + ",pingpong=1", fp8), "pingpong-two-warpgroups");
  EXPECT_EQ(verdict("bm=128," + base + plain + ",overlap=1,promote=0,pingpong=1", fp8), "pingpong-overlap");
  // kgroups=2: one column group (bn=64), no group in flight or turns, flushes within a slot; its exchange counts in the
  // shared memory (8 slots of 24 KiB fit with one, not with a 64 KiB exchange of 256 tokens).
  const std::string narrow = "bn=64,bk=256,stages=4,split=1,raster=0" + plain + ",promote=0";
  EXPECT_EQ(verdict("bm=64," + narrow + ",kgroups=2", w4a8), "");
  EXPECT_EQ(verdict("bm=64,bn=64,bk=256,stages=8,split=1,raster=0" + plain + ",promote=0,kgroups=2", w4a8), "");
  EXPECT_EQ(verdict("bm=64," + base + plain + ",promote=0,kgroups=2", w4a8), "kgroups-alone");  // bn=128
  EXPECT_EQ(verdict("bm=64," + narrow + ",overlap=1,kgroups=2", w4a8), "kgroups-alone");
  EXPECT_EQ(verdict("bm=64,bn=64,bk=128,stages=4,split=1,raster=0" + plain + ",promote=256,kgroups=2", fp8), "kgroups-flush");
  EXPECT_EQ(verdict("bm=64,bn=64,bk=128,stages=4,split=1,raster=0" + plain + ",promote=128,kgroups=2", fp8), "");
  EXPECT_EQ(verdict("bm=64,bn=64,bk=64,stages=4,split=1,raster=0" + plain + ",kgroups=2",
                    Problem{FormatSpec::parse("w4a16-int4-g128"), 256, 8192, 8192, false}), "");  // g128 scales dequantize: no flush
  EXPECT_EQ(verdict("bm=64," + narrow + ",kgroups=3", w4a8), "parameter-domain");
  // Whole tiles of sums per K group spill from 192 tokens; one consumer warpgroup's split-K reduction at 256.
  EXPECT_EQ(verdict("bm=192,bn=64,bk=128,stages=4,split=1,raster=0" + plain + ",promote=0,kgroups=2", fp8_large), "kgroups-tile");
  EXPECT_EQ(verdict("bm=128,bn=64,bk=128,stages=4,split=1,raster=0" + plain + ",promote=0,kgroups=2", fp8_large), "");
  EXPECT_EQ(verdict("bm=256,bn=64,bk=128,stages=4,split=2,raster=0" + plain + ",promote=0", fp8_large), "registers-per-thread");
  EXPECT_EQ(verdict("bm=256,bn=64,bk=128,stages=4,split=2,raster=0" + plain + ",overlap=1,promote=0", fp8_large), "");
  EXPECT_EQ(verdict("bm=192,bn=128,bk=128,stages=4,split=2,raster=0" + plain + ",promote=0,pingpong=1", fp8_large), "registers-per-thread");
  EXPECT_EQ(verdict("bm=192,bn=128,bk=128,stages=4,split=1,raster=0" + plain + ",promote=0,pingpong=1", fp8_large), "");
  // Each K group keeps its own slots: an even ring and equal even K ranges (stages=3 faulted on an H100, 2026-12-06).
  EXPECT_EQ(verdict("bm=64,bn=64,bk=256,stages=3,split=1,raster=0" + plain + ",promote=0,kgroups=2", w4a8), "kgroups-even-ring");
  EXPECT_EQ(verdict("bm=64," + narrow + ",kgroups=2", Problem{w4a8.format, 64, 8192, 256 * 9, false}), "kgroups-even-ring");
  EXPECT_EQ(verdict("bm=64,bn=64,bk=256,stages=4,split=2,raster=0" + plain + ",promote=0,kgroups=2",
                    Problem{w4a8.format, 64, 8192, 256 * 6, false}), "kgroups-even-ring");  // 3 tiles a split
  EXPECT_EQ(verdict("bm=64,bn=64,bk=256,stages=4,split=2,raster=0" + plain + ",promote=0,kgroups=2",
                    Problem{w4a8.format, 64, 8192, 256 * 8, false}), "");
  EXPECT_EQ(verdict("bm=64,bn=64,bk=256,stages=3,split=1,raster=0" + plain + ",promote=0", w4a8), "") << "kgroups=1 takes any ring";
  EXPECT_EQ(TmaFamily::threads(KernelConfig::parse("bm=64," + narrow + ",kgroups=2", "tma")), 384);
  EXPECT_EQ(TmaFamily::shared_bytes(KernelConfig::parse("bm=64," + narrow + ",kgroups=2", "tma"), w4a8.format),
            TmaFamily::shared_bytes(KernelConfig::parse("bm=64," + narrow, "tma"), w4a8.format) + 128 * 32 * 4);
  EXPECT_EQ(verdict("bm=128,bn=128,bk=256,stages=8,split=1,raster=0,cluster=1,multicast=0,persistent=0", fp8), "smem-per-block");
  EXPECT_EQ(verdict("bm=128," + base + ",cluster=1,multicast=0,persistent=0", Problem{FormatSpec::parse("w4a4-int4-ch"), 256, 8192, 8192, false}),
            "format-unsupported-on-arch");
  EXPECT_EQ(tma_family().check(KernelConfig::parse("bm=128," + base + ",cluster=1,multicast=0,persistent=0", "tma"), fp8,
                               ArchLimits::for_sm(89)).rule,
            "format-unsupported-on-arch");
  for (const char* spec : {"w8a8-fp8-ch", "w8a8-fp8-tensor", "w8a8-fp8-block128x128", "w8a8-e5m2-e5m2", "w8a8-int8-ch",
                           "w8a8-int8-block128x128", "w4a8-int4-fp8", "w4a8-fp4-fp8", "w4a8-int4-int8", "w4a16-int4-ch",
                           "w4a16-int4-g128-zp", "nvfp4"}) {
    for (int64_t m : {1, 16, 33, 64, 200, 4096}) {
      const Problem p{FormatSpec::parse(spec), m, 8192, 8192, false};
      ASSERT_TRUE(tma_family().supports(p.format, 90).supported) << spec;
      const KernelConfig config = tma_family().default_config(p, hopper);
      EXPECT_TRUE(tma_family().check(config, p, hopper).valid) << spec << " " << m << " " << config.to_string();
    }
  }
}

// One CTA per unit or a persistent grid the launcher caps per SM; clusters double the CTAs and pad M; the activation
// tensor map is a launcher-encoded parameter after the GemmParams.
TEST(TmaFamilyRules, LaunchGeometryAndTensorMap) {
  const Problem problem{FormatSpec::parse("w8a8-fp8-ch"), 300, 5120, 13824, false};
  const KernelConfig plain = KernelConfig::parse("bm=128,bn=128,bk=128,stages=6,split=2,raster=2,cluster=1,multicast=0,persistent=1", "tma");
  const LaunchGeometry geometry = tma_family().launch_geometry(plain, problem);
  EXPECT_EQ(geometry.grid[0], 40u * 3u * 2u);  // N tiles x M tiles x splits
  EXPECT_EQ(geometry.block[0], 384u);
  EXPECT_EQ(geometry.persistent_ctas_per_sm, 1u);
  EXPECT_EQ(geometry.cluster_ctas, 1u);
  EXPECT_EQ(geometry.workspace_bytes, 2ull * 120 * 128 * 128 * 4 + 120 * 4);
  const KernelConfig weights = KernelConfig::parse("bm=128,bn=64,bk=128,stages=6,split=1,raster=0,cluster=2,multicast=2,persistent=0", "tma");
  const LaunchGeometry paired = tma_family().launch_geometry(weights, problem);
  EXPECT_EQ(paired.grid[0], 80u * 2u * 2u);  // 300 rows: two pairs of 128-row tiles, the last tile empty
  EXPECT_EQ(paired.block[0], 256u);
  EXPECT_EQ(paired.cluster_ctas, 2u);
  EXPECT_EQ(paired.persistent_ctas_per_sm, 0u);

  std::map<std::string, uint64_t> addresses = {{"a", 0x10000}, {"a_scales", 0x20000}, {"weights", 0x30000},
                                               {"scales", 0x40000}, {"global_scale", 0x50000}, {"c", 0x60000},
                                               {"workspace", 0x70000}};
  KernelArguments arguments = tma_family().pack_arguments(plain, problem, addresses);
  ASSERT_EQ(arguments.offsets.size(), 2u);
  ASSERT_EQ(arguments.tensor_maps.size(), 1u);
  const TensorMapRequest& map = arguments.tensor_maps[0];
  EXPECT_EQ(map.offset, arguments.offsets[1]);
  EXPECT_EQ(map.offset % 64, 0u);
  EXPECT_EQ(arguments.storage.size(), map.offset + 128);
  EXPECT_EQ(map.address, 0x10000u);
  EXPECT_EQ(map.rows, 300u);
  EXPECT_EQ(map.columns, 13824u);
  EXPECT_EQ(map.element_bytes, 1u);
  EXPECT_EQ(map.box_rows, 128u);
  EXPECT_EQ(map.box_columns, 128u);
  const Problem f16{FormatSpec::parse("w4a16-int4-ch"), 40, 4096, 4096, false};
  const KernelConfig small = KernelConfig::parse("bm=64,bn=64,bk=128,stages=4,split=1,raster=0,cluster=1,multicast=0,persistent=0", "tma");
  const TensorMapRequest wide = tma_family().pack_arguments(small, f16, addresses).tensor_maps.at(0);
  EXPECT_EQ(wide.element_bytes, 2u);
  EXPECT_EQ(wide.box_columns, 64u);  // 128 bytes of f16
  EXPECT_EQ(wide.box_rows, 64u);
  const std::string source = tma_family().instantiation_source(weights, problem.format, "sm_90a");
  EXPECT_NE(source.find("__cluster_dims__(2, 1, 1)"), std::string::npos) << source;
  EXPECT_NE(source.find("__grid_constant__ qd::TensorMap"), std::string::npos) << source;
  EXPECT_THROW(tma_family().instantiation_source(weights, problem.format, "sm_90"), UnsupportedError);
}

// The heuristic on Hopper: quantized activations go to the tma family from M = 32 (below it to the mma family),
// weight-only formats to the wgmma family from M = 16 and to the tma family from M = 32 (W4A16 1.05-1.37x faster on
// tma at M = 32 and 64, H100 2026-12-06).
TEST(TmaFamilyRules, HeuristicPrefersItForQuantizedActivationsAndLargeM) {
  const FormatSpec fp8 = FormatSpec::parse("w8a8-fp8-ch");
  EXPECT_EQ(heuristic_family(Problem{fp8, 256, 8192, 8192, false}, 90).name(), "tma");
  EXPECT_EQ(heuristic_family(Problem{fp8, 32, 8192, 8192, false}, 90).name(), "tma");
  EXPECT_EQ(heuristic_family(Problem{fp8, 16, 8192, 8192, false}, 90).name(), "mma");
  // W4A8 below tma's start: wgmma, which widens the fp8 activations (M = 1 on the H200: 15.06 us, mma 26.48)
  const FormatSpec w4a8 = FormatSpec::parse("w4a8-int4-fp8");
  EXPECT_EQ(heuristic_family(Problem{w4a8, 1, 8192, 8192, false}, 90).name(), "wgmma");
  EXPECT_EQ(heuristic_family(Problem{w4a8, 16, 8192, 8192, false}, 90).name(), "wgmma");
  EXPECT_EQ(heuristic_family(Problem{w4a8, 32, 8192, 8192, false}, 90).name(), "tma");
  EXPECT_EQ(heuristic_family(Problem{w4a8, 1, 8192, 8192, false}, 89).name(), "mma");
  EXPECT_EQ(heuristic_family(Problem{fp8, 256, 8192, 8192, false}, 89).name(), "mma");
  const FormatSpec int4 = FormatSpec::parse("w4a16-int4-ch");
  EXPECT_EQ(heuristic_family(Problem{int4, 8, 8192, 8192, false}, 90).name(), "mma");
  EXPECT_EQ(heuristic_family(Problem{int4, 16, 8192, 8192, false}, 90).name(), "wgmma");
  EXPECT_EQ(heuristic_family(Problem{int4, 31, 8192, 8192, false}, 90).name(), "wgmma");
  EXPECT_EQ(heuristic_family(Problem{int4, 32, 8192, 8192, false}, 90).name(), "tma");
  EXPECT_EQ(heuristic_family(Problem{int4, 64, 8192, 8192, false}, 90).name(), "tma");
  EXPECT_EQ(heuristic_family(Problem{int4, 256, 8192, 8192, false}, 90).name(), "tma");
  EXPECT_EQ(heuristic_family(Problem{int4, 4096, 8192, 8192, false}, 90).name(), "tma");
  EXPECT_EQ(heuristic_family(Problem{int4, 4096, 8192, 8192, false}, 80).name(), "mma");
}

// The defaults follow the H200 sweeps: 64 weight columns while the weights stream, 256-token tiles with a wgmma group
// in flight for int8 and f16 at large M, 256-deep slots for fp8.
TEST(TmaFamilyRules, DefaultConfigFollowsTheH200Sweeps) {
  const ArchLimits hopper = ArchLimits::for_sm(90);
  auto default_for = [&](const char* spec, int64_t m) {
    return tma_family().default_config(Problem{FormatSpec::parse(spec), m, 8192, 8192, false}, hopper);
  };
  EXPECT_EQ(default_for("w8a8-fp8-ch", 64).to_string(),
            "bm=64,bn=64,bk=128,stages=8,split=1,raster=0,cluster=1,multicast=0,persistent=0,overlap=1,promote=0,pingpong=0,kgroups=1,ss=0");
  EXPECT_EQ(default_for("w8a8-fp8-ch", 4096).to_string(),
            "bm=256,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=1,overlap=1,promote=0,pingpong=0,kgroups=1,ss=0");
  // Block scales flush every 128 K whatever promote says: folded into the token scales, 128 K deep; 128-token tiles
  // up to M = 1024, 192 from M = 2048 (four slots fit).
  EXPECT_EQ(default_for("w8a8-fp8-block128x128", 1024).to_string(),
            "bm=128,bn=128,bk=128,stages=5,split=1,raster=2,cluster=1,multicast=0,persistent=1,overlap=0,promote=128,pingpong=0,kgroups=1,ss=0");
  EXPECT_EQ(default_for("w8a8-fp8-block128x128", 4096).to_string(),
            "bm=192,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=1,overlap=0,promote=128,pingpong=0,kgroups=1,ss=0");
  EXPECT_EQ(default_for("w8a8-int8-block128x128", 2048).to_string(),
            "bm=192,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=1,overlap=0,promote=128,pingpong=0,kgroups=1,ss=0");
  // W4A8: 256-deep slots while M <= 256, a group in flight, no promotions.
  EXPECT_EQ(default_for("w4a8-int4-fp8", 64).to_string(),
            "bm=64,bn=64,bk=256,stages=8,split=1,raster=0,cluster=1,multicast=0,persistent=0,overlap=1,promote=0,pingpong=0,kgroups=1,ss=0");
  EXPECT_EQ(default_for("w4a8-int4-fp8", 256).to_string(),
            "bm=128,bn=128,bk=256,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=0,overlap=1,promote=0,pingpong=0,kgroups=1,ss=0");
  EXPECT_EQ(default_for("w4a8-int4-fp8", 1024).to_string(),
            "bm=256,bn=128,bk=128,stages=5,split=1,raster=2,cluster=1,multicast=0,persistent=1,overlap=1,promote=0,pingpong=0,kgroups=1,ss=0");
  EXPECT_EQ(default_for("w8a8-int8-ch", 1024).to_string(),
            "bm=256,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=1,overlap=1,promote=128,pingpong=0,kgroups=1,ss=0");
  EXPECT_EQ(default_for("w4a16-int4-ch", 1024).to_string(),
            "bm=256,bn=128,bk=64,stages=5,split=1,raster=2,cluster=1,multicast=0,persistent=1,overlap=1,promote=128,pingpong=0,kgroups=1,ss=0");
  // One row of 128-token tiles fills half the SMs: split 2 (M = 128 on an H100, 2026-12-07: W4A8 30.18 us against
  // 35.60 without, W4A16 int4-ch 32.29), not once two rows fill them (M = 256 above).
  EXPECT_EQ(default_for("w4a8-int4-fp8", 128).to_string(),
            "bm=128,bn=128,bk=256,stages=4,split=2,raster=0,cluster=1,multicast=0,persistent=0,overlap=1,promote=0,pingpong=0,kgroups=1,ss=0");
  EXPECT_EQ(default_for("w4a16-int4-ch", 128).to_string(),
            "bm=128,bn=128,bk=128,stages=5,split=2,raster=0,cluster=1,multicast=0,persistent=0,overlap=1,promote=128,pingpong=0,kgroups=1,ss=0");
  // Between the streaming and the persistent tiles, 16-bit activations keep a group in flight too (M = 256 on an
  // H100, 2026-12-07: int4-ch 44.24 us against 44.83 without, g128 48.61 against 49.70).
  EXPECT_EQ(default_for("w4a16-int4-ch", 256).to_string(),
            "bm=128,bn=128,bk=128,stages=5,split=1,raster=2,cluster=1,multicast=0,persistent=0,overlap=1,promote=128,pingpong=0,kgroups=1,ss=0");
  EXPECT_EQ(default_for("w4a16-int4-g128", 256).to_string(),
            "bm=128,bn=128,bk=128,stages=4,split=1,raster=2,cluster=1,multicast=0,persistent=0,overlap=1,promote=128,pingpong=0,kgroups=1,ss=0");
  // 16-bit activations while the weights stream: 256-deep slots with a group in flight, the measured best at M = 32
  // and 64 for int4 per channel and g128 (H100, 2026-12-06), as many slots as fit about 200 KB.
  EXPECT_EQ(default_for("w4a16-int4-ch", 64).to_string(),
            "bm=64,bn=64,bk=256,stages=5,split=1,raster=0,cluster=1,multicast=0,persistent=0,overlap=1,promote=128,pingpong=0,kgroups=1,ss=0");
  EXPECT_EQ(default_for("w4a16-int4-ch", 32).to_string(),
            "bm=32,bn=64,bk=256,stages=8,split=1,raster=0,cluster=1,multicast=0,persistent=0,overlap=1,promote=128,pingpong=0,kgroups=1,ss=0");
  EXPECT_EQ(default_for("w4a16-int4-g128", 64).to_string(),
            "bm=64,bn=64,bk=256,stages=4,split=1,raster=0,cluster=1,multicast=0,persistent=0,overlap=1,promote=128,pingpong=0,kgroups=1,ss=0");
}

// The wgmma family's rules: its own parameters only, sm_90 only, weight-only and fp8-activation formats, divisibility, shared memory,
// registers, and the default config passes its own check.
TEST(WgmmaFamilyRules, RulesNameWhatIsWrong) {
  const ArchLimits hopper = ArchLimits::for_sm(90);
  const Problem problem{FormatSpec::parse("w4a16-int4-ch"), 64, 8192, 8192, false};
  auto verdict = [&](const std::string& text, const Problem& p) {
    return wgmma_family().check(KernelConfig::parse(text, "wgmma"), p, hopper).rule;
  };
  EXPECT_EQ(verdict("bm=64,bn=128,bk=128,stages=4,split=2,raster=0", problem), "");
  EXPECT_EQ(verdict("bm=64,bn=128,bk=128,stages=4,split=2,raster=0,overlap=1", problem), "");
  {  // a config stored before overlap existed is the overlap=0 kernel
    const std::string old_source = wgmma_family().instantiation_source(
        KernelConfig::parse("bm=64,bn=128,bk=128,stages=4,split=2,raster=0", "wgmma"), problem.format, "sm_90a");
    const std::string new_source = wgmma_family().instantiation_source(
        KernelConfig::parse("bm=64,bn=128,bk=128,stages=4,split=2,raster=0,overlap=0", "wgmma"), problem.format, "sm_90a");
    EXPECT_EQ(old_source.substr(old_source.find('\n')), new_source.substr(new_source.find('\n')));
    EXPECT_NE(old_source.find("QtuneTiles, 0, 0>(params)"), std::string::npos);
  }
  {  // gscale=1: K-group scales without zero points, no stage in flight, at most 64 registers of partial sums
    const Problem g128{FormatSpec::parse("w4a16-int4-g128"), 16, 4096, 7168, false};
    const Problem g32{FormatSpec::parse("w4a16-int4-g32"), 16, 4096, 7168, false};
    EXPECT_EQ(verdict("bm=16,bn=128,bk=256,stages=4,split=1,raster=0,overlap=0,gscale=1", g128), "");
    EXPECT_NE(wgmma_family()
                  .instantiation_source(KernelConfig::parse("bm=16,bn=128,bk=256,stages=4,split=1,raster=0,overlap=0,gscale=1", "wgmma"),
                                        g128.format, "sm_90a")
                  .find("QtuneTiles, 0, 1>(params)"),
              std::string::npos);
    EXPECT_EQ(verdict("bm=16,bn=128,bk=64,stages=4,split=3,raster=0,overlap=0,gscale=1", g128), "");  // a group over 2 stages
    EXPECT_EQ(verdict("bm=16,bn=128,bk=256,stages=4,split=1,raster=0,overlap=0,gscale=1", g32), "");   // 8 sets of 8
    EXPECT_EQ(verdict("bm=32,bn=128,bk=256,stages=4,split=1,raster=0,overlap=0,gscale=1", g32), "gscale-registers");
    EXPECT_EQ(verdict("bm=16,bn=128,bk=128,stages=4,split=1,raster=0,overlap=1,gscale=1", g128), "gscale-needs-overlap-0");
    EXPECT_EQ(verdict("bm=16,bn=128,bk=128,stages=4,split=1,raster=0,overlap=0,gscale=1", problem), "gscale-needs-groups");
    EXPECT_EQ(verdict("bm=16,bn=128,bk=128,stages=4,split=1,raster=0,overlap=0,gscale=1",
                      Problem{FormatSpec::parse("w4a16-int4-g128-zp"), 16, 4096, 7168, false}),
              "gscale-needs-groups");
    EXPECT_EQ(verdict("bm=16,bn=128,bk=128,stages=4,split=1,raster=0,overlap=0,gscale=2", g128), "parameter-domain");
  }
  EXPECT_EQ(verdict("bm=64,bn=128,bk=128,stages=2,split=2,raster=0,overlap=1", problem), "overlap-needs-stages");
  EXPECT_EQ(verdict("bm=64,bn=128,bk=128,stages=4,split=2,raster=0,overlap=2", problem), "parameter-domain");
  // Two fragment sets: bm=64, bk=128 fits 512 threads without a stage in flight, not with one.
  EXPECT_EQ(verdict("bm=64,bn=256,bk=128,stages=3,split=1,raster=0,overlap=0", problem), "");
  EXPECT_EQ(verdict("bm=64,bn=256,bk=128,stages=3,split=1,raster=0,overlap=1", problem), "registers-per-thread");
  EXPECT_EQ(verdict("bm=64,bn=128,bk=128,stages=4,split=2,raster=0,wn=4", problem), "parameter-unknown");
  EXPECT_EQ(verdict("bm=64,bn=96,bk=128,stages=4,split=2,raster=0", problem), "parameter-domain");
  EXPECT_EQ(verdict("bm=128,bn=128,bk=256,stages=6,split=1,raster=0", problem), "smem-per-block");
  EXPECT_EQ(verdict("bm=128,bn=256,bk=128,stages=2,split=1,raster=0", problem), "registers-per-thread");
  EXPECT_EQ(verdict("bm=128,bn=128,bk=128,stages=3,split=1,raster=0", Problem{problem.format, 16, 8192, 8192, false}), "bm-over-m");
  EXPECT_EQ(verdict("bm=64,bn=256,bk=128,stages=3,split=1,raster=0", Problem{problem.format, 64, 8320, 8192, false}), "bn-divides-n");
  {  // fp8 activations run widened to f16 on the fp8-operand weight layout (128-deep atoms); int8 ones do not
    const Problem fp8{FormatSpec::parse("w8a8-fp8-ch"), 64, 8192, 8192, false};
    const Problem w4a8{FormatSpec::parse("w4a8-int4-fp8"), 16, 8192, 8192, false};
    const Problem w4a8_g128{FormatSpec::parse("w4a8-int4-g128-fp8"), 16, 8192, 8192, false};
    EXPECT_EQ(verdict("bm=64,bn=128,bk=128,stages=3,split=1,raster=0", fp8), "");
    EXPECT_EQ(verdict("bm=16,bn=128,bk=256,stages=4,split=4,raster=0", w4a8), "");
    EXPECT_EQ(verdict("bm=16,bn=128,bk=64,stages=4,split=4,raster=0", w4a8), "bk-atom");
    EXPECT_EQ(verdict("bm=128,bn=128,bk=128,stages=3,split=1,raster=0", Problem{fp8.format, 256, 8192, 8192, false}), "widened-bm");
    EXPECT_EQ(verdict("bm=16,bn=128,bk=256,stages=4,split=4,raster=0,overlap=0,gscale=0", w4a8_g128), "widened-groups-need-gscale");
    EXPECT_EQ(verdict("bm=16,bn=128,bk=256,stages=4,split=4,raster=0,overlap=0,gscale=1", w4a8_g128), "");
    EXPECT_EQ(verdict("bm=16,bn=128,bk=256,stages=4,split=4,raster=0,overlap=0,gscale=1", w4a8), "gscale-needs-groups");
    EXPECT_EQ(verdict("bm=64,bn=128,bk=128,stages=3,split=1,raster=0", Problem{FormatSpec::parse("w8a8-int8-ch"), 64, 8192, 8192, false}),
              "format-unsupported-on-arch");
    EXPECT_EQ(verdict("bm=16,bn=128,bk=128,stages=3,split=1,raster=0",
                      Problem{FormatSpec::parse("w8a8-fp8-block128x128"), 16, 8192, 8192, false}),
              "format-unsupported-on-arch");  // activation scales per K group
    // fp8 rows land in their f16 slabs and are widened in place: no shared memory of their own.
    const KernelConfig decode = KernelConfig::parse("bm=16,bn=128,bk=256,stages=4,split=4,raster=0", "wgmma");
    // per stage: f16 slabs 16 x 256 x 2, 8 strips of two 1024-byte int4 atoms; + the alignment slack
    EXPECT_EQ(WgmmaFamily::shared_bytes(decode, w4a8.format), 4 * (16 * 256 * 2 + 8 * 2 * 1024) + 1024);
    for (const Problem& p : {fp8, w4a8, w4a8_g128}) {
      for (int64_t m : {1, 16, 64, 256}) {
        const Problem at_m{p.format, m, p.n, p.k, false};
        const KernelConfig config = wgmma_family().default_config(at_m, hopper);
        EXPECT_TRUE(wgmma_family().check(config, at_m, hopper).valid) << p.format.to_string() << " " << m << " " << config.to_string();
      }
    }
  }
  EXPECT_EQ(wgmma_family().check(KernelConfig::parse("bm=64,bn=128,bk=128,stages=4,split=2,raster=0", "wgmma"), problem,
                                 ArchLimits::for_sm(80)).rule,
            "format-unsupported-on-arch");
  EXPECT_EQ(wgmma_family().check(KernelConfig::parse("bm=64,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=2,raster=0"), problem, hopper).rule,
            "family");
  for (int64_t m : {1, 16, 33, 64, 200, 4096}) {
    const Problem p{problem.format, m, 8192, 8192, false};
    const KernelConfig config = wgmma_family().default_config(p, hopper);
    EXPECT_TRUE(wgmma_family().check(config, p, hopper).valid) << m << " " << config.to_string();
    EXPECT_EQ(wgmma_family().launch_geometry(config, p).block[0], static_cast<uint32_t>(2 * config.get("bn")));
  }
}

// The default splits K only while the CTAs fit one wave of resident blocks: at M = 256 the 128 tiles of 128x128 (one
// block per SM at ~235 registers) run unsplit (split 2 made a second wave: 74 against 61 us on the H200); at M = 16
// the 64 small tiles (several blocks per SM) split 4 ways; a stage in flight only above M = 64.
TEST(WgmmaFamilyRules, DefaultSplitsWithinOneWaveOfResidentBlocks) {
  const ArchLimits hopper = ArchLimits::for_sm(90);
  const FormatSpec format = FormatSpec::parse("w4a16-int4-ch");
  auto default_for = [&](int64_t m, int64_t n) { return wgmma_family().default_config(Problem{format, m, n, 8192, false}, hopper); };
  EXPECT_EQ(default_for(256, 8192).to_string(), "bm=128,bn=128,bk=128,stages=4,split=1,raster=0,overlap=1,gscale=0,persistent=0");
  EXPECT_EQ(default_for(128, 8192).get("split"), 2);  // 64 tiles: two splits still fit 132 SMs
  EXPECT_EQ(default_for(16, 8192).get("split"), 4);
  EXPECT_EQ(default_for(16, 8192).get("overlap"), 0);
  EXPECT_EQ(default_for(16, 57344).get("split"), 1);
  // K-group scales on the partial sums at decode sizes, where the format has them (not per channel, not with zeros).
  auto default_of = [&](const char* spec, int64_t m) {
    return wgmma_family().default_config(Problem{FormatSpec::parse(spec), m, 8192, 8192, false}, hopper).get("gscale");
  };
  EXPECT_EQ(default_of("w4a16-int4-g128", 1), 1);
  EXPECT_EQ(default_of("w4a16-int4-g128", 64), 1);
  EXPECT_EQ(default_of("w4a16-int4-g128", 256), 0);
  EXPECT_EQ(default_of("w4a16-int4-ch", 16), 0);
  EXPECT_EQ(default_of("w4a16-int4-g128-zp", 16), 0);
}

TEST(KernelFamilies, ArchNames) {
  EXPECT_EQ(sm_of_arch("sm_90a"), 90);
  EXPECT_EQ(sm_of_arch("sm_120a"), 120);
  EXPECT_EQ(sm_of_arch("sm_80"), 80);
  EXPECT_EQ(sm_of_arch("compute_75"), 75);  // a PTX target: the driver compiles sm_75's code for the GPU it loads on
  EXPECT_THROW(sm_of_arch("compute_75a"), InputError);
  EXPECT_THROW(sm_of_arch("gfx90a"), InputError);
  expect_input_error([] { ArchLimits::for_sm(70); }, {"sm: ", "sm_70", "(known: 75, 80, 86, 89, 90, 100, 103, 120, 121)"});
  EXPECT_EQ(ArchLimits::for_sm(90).sm_count, 132);
}

// The datasheet numbers of every architecture, as they stood before they became a table.
TEST(KernelFamilies, ArchLimitsOfEveryKnownArchitecture) {
  // sm, SMs, shared per block, shared per SM, threads per SM, blocks per SM, registers per SM, per thread, threads
  // per block.
  using Numbers = std::array<int, 9>;
  auto numbers = [](const ArchLimits& l) {
    return Numbers{l.sm, l.sm_count, l.max_shared_per_block, l.shared_per_sm, l.max_threads_per_sm,
                   l.max_blocks_per_sm, l.registers_per_sm, l.max_registers_per_thread, l.max_threads_per_block};
  };
  for (const Numbers& expected : {Numbers{75, 68, 65536, 65536, 1024, 16, 65536, 255, 1024},
                                  Numbers{80, 108, 166912, 167936, 2048, 32, 65536, 255, 1024},
                                  Numbers{86, 82, 101376, 102400, 1536, 16, 65536, 255, 1024},
                                  Numbers{89, 128, 101376, 102400, 1536, 24, 65536, 255, 1024},
                                  Numbers{90, 132, 232448, 233472, 2048, 32, 65536, 255, 1024},
                                  Numbers{100, 148, 232448, 233472, 2048, 32, 65536, 255, 1024},
                                  Numbers{103, 148, 232448, 233472, 2048, 32, 65536, 255, 1024},
                                  Numbers{120, 170, 101376, 102400, 1536, 24, 65536, 255, 1024},
                                  Numbers{121, 48, 101376, 102400, 1536, 24, 65536, 255, 1024}}) {
    EXPECT_EQ(numbers(ArchLimits::for_sm(expected[0])), expected);
  }
}

TEST(MmaFamily, ParameterSpaceListsEveryTemplateKnob) {
  std::vector<std::string> names;
  for (const ParameterDomain& domain : mma_family().parameter_space()) {
    names.push_back(domain.name);
    EXPECT_FALSE(domain.values.empty()) << domain.name;
    EXPECT_FALSE(domain.meaning.empty()) << domain.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"bm", "bn", "bk", "wm", "wn", "wk", "stages", "split", "raster", "gscale"}));
}

TEST(MmaFamily, SupportsWeightOnlyFormatsOnTuringAndLater) {
  const FormatSpec format = FormatSpec::parse("w4a16-int4-ch");
  for (int sm : known_architectures()) EXPECT_TRUE(mma_family().supports(format, sm).supported) << sm;
  // Turing runs f16 activations only: bf16 is refused there, naming the architecture.
  const ArchSupport turing_bf16 = mma_family().supports(FormatSpec::parse("w4a16-int4-ch-bf16"), 75);
  EXPECT_FALSE(turing_bf16.supported);
  EXPECT_NE(turing_bf16.reason.find("unsupported on sm_75: bf16"), std::string::npos) << turing_bf16.reason;
  EXPECT_NE(mma_family().supports(format, 70).reason.find("unsupported on sm_70"), std::string::npos);
}

TEST(MmaFamily, RefusesWithAReasonNamingTheArchitecture) {
  const ArchSupport fp8_on_ampere = mma_family().supports(FormatSpec::parse("w8a8-fp8-ch"), 80);
  EXPECT_FALSE(fp8_on_ampere.supported);
  EXPECT_NE(fp8_on_ampere.reason.find("unsupported on sm_80"), std::string::npos) << fp8_on_ampere.reason;
  EXPECT_NE(fp8_on_ampere.reason.find("fp8"), std::string::npos) << fp8_on_ampere.reason;
}

// Each rule must reject what it is named for, and nothing earlier may catch it first.
struct RuleCase {
  const char* format;
  int64_t m, n, k;
  const char* config;
  const char* rule;
};

class MmaRules : public ::testing::TestWithParam<RuleCase> {};

TEST_P(MmaRules, RejectsWithTheRightRuleName) {
  const RuleCase& c = GetParam();
  const RuleVerdict verdict = mma_family().check(mma_config(c.config), problem(c.format, c.m, c.n, c.k), ArchLimits::for_sm(90));
  EXPECT_FALSE(verdict.valid);
  EXPECT_EQ(verdict.rule, c.rule) << verdict.detail;
  EXPECT_FALSE(verdict.detail.empty());
}

INSTANTIATE_TEST_SUITE_P(
    All, MmaRules,
    ::testing::Values(
        RuleCase{"w4a16-int4-ch", 1, 8192, 8192, "bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=4", "parameter-missing"},
        RuleCase{"w4a16-int4-ch", 1, 8192, 8192, "bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=7,split=4,raster=0",
                 "parameter-domain"},
        RuleCase{"w4a16-int4-ch", 1, 8192, 8192, "bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=4,raster=0,x=1",
                 "parameter-unknown"},
        RuleCase{"w4a4-int4-ch", 1, 8192, 8192, kBaseConfig, "format-unsupported-on-arch"},
        RuleCase{"w4a16-int4-g128", 1, 8192, 8000, kBaseConfig, "format-shape"},
        RuleCase{"w4a16-int4-ch", 1, 8192 + 64, 8192, kBaseConfig, "bn-divides-n"},
        RuleCase{"w4a16-int4-ch", 1, 8192, 8192 + 128, kBaseConfig, "bk-divides-k"},
        RuleCase{"w4a16-int4-ch", 1, 8192, 8192, "bm=16,bn=128,bk=256,wm=2,wn=4,wk=1,stages=4,split=4,raster=0", "warps-m"},
        RuleCase{"w4a16-int4-ch", 1, 8192, 8192, "bm=16,bn=64,bk=256,wm=1,wn=8,wk=1,stages=4,split=4,raster=0", "warps-n"},
        RuleCase{"w4a16-int4-ch", 1, 8192, 8192, "bm=16,bn=128,bk=128,wm=1,wn=4,wk=4,stages=4,split=4,raster=0", "warps-k"},
        RuleCase{"w4a16-int4-g192", 1, 8192, 12288, "bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=4,raster=0",
                 "bk-divides-group"},
        RuleCase{"w4a16-int4-ch", 1, 8192, 1024, "bm=16,bn=128,bk=512,wm=1,wn=4,wk=1,stages=4,split=4,raster=0",
                 "split-exceeds-k"},
        RuleCase{"w4a16-int4-ch", 256, 8192, 8192, "bm=256,bn=256,bk=128,wm=4,wn=8,wk=2,stages=2,split=1,raster=0",
                 "threads-per-block"},
        RuleCase{"w4a16-int4-ch", 256, 8192, 8192, "bm=256,bn=256,bk=64,wm=1,wn=4,wk=1,stages=2,split=1,raster=0",
                 "accumulators-per-thread"},
        RuleCase{"w4a16-int4-ch", 256, 8192, 8192, "bm=256,bn=128,bk=512,wm=4,wn=4,wk=1,stages=6,split=1,raster=0",
                 "smem-per-block"},
        RuleCase{"w4a16-int4-ch", 256, 8192, 8192, "bm=128,bn=256,bk=64,wm=4,wn=8,wk=1,stages=2,split=1,raster=0",
                 "registers-per-thread"},
        RuleCase{"w4a16-int4-ch", 1, 8192, 8192, "bm=64,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=4,raster=0", "bm-over-m"},
        RuleCase{"w4a16-int4-ch", 1, 8192, 8192, "bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=4,raster=1",
                 "raster-single-m-tile"},
        RuleCase{"w4a16-int4-g128", 1, 8192, 8192, "bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=4,raster=0,gscale=2",
                 "parameter-domain"},
        RuleCase{"w4a16-int4-ch", 1, 8192, 8192, "bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=4,raster=0,gscale=1",
                 "gscale-needs-groups"},
        RuleCase{"w4a16-int4-g128-zp", 1, 8192, 8192, "bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=4,raster=0,gscale=1",
                 "gscale-needs-groups"},
        RuleCase{"w8a8-int8-g128", 1, 8192, 8192, "bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=4,raster=0,gscale=1",
                 "gscale-needs-groups"},
        // 128 accumulators per thread, and as many partial sums with gscale=1.
        RuleCase{"w4a16-int4-g128", 64, 8192, 8192, "bm=64,bn=128,bk=128,wm=1,wn=2,wk=1,stages=3,split=1,raster=0,gscale=1",
                 "accumulators-per-thread"}));

// gscale=1 (K-group scales on the partial sums): K-group weight scales in the dequantization without zero points, on
// the swap-AB decode tile, with warps splitting K, split-K ranges inside a group, bf16, groups inside a K tile; the
// kernel's trailing SCALE_AFTER argument only when 1, so gscale=0 sources are those from before the option.
TEST(MmaFamily, GroupScalesOnPartialSums) {
  const ArchLimits hopper = ArchLimits::for_sm(90);
  auto rule = [&](const char* config, const Problem& p) {
    const RuleVerdict verdict = mma_family().check(mma_config(config), p, hopper);
    return verdict.valid ? std::string() : verdict.rule + ": " + verdict.detail;
  };
  const char* decode = "bm=16,bn=64,bk=128,wm=1,wn=4,wk=1,stages=4,split=4,raster=0,gscale=1";
  EXPECT_EQ(rule(decode, problem("w4a16-int4-g128", 1, 8192, 8192)), "");
  EXPECT_EQ(rule("bm=16,bn=128,bk=256,wm=1,wn=4,wk=2,stages=4,split=8,raster=0,gscale=1", problem("w4a16-int4-g128", 16, 8192, 8192)), "");
  EXPECT_EQ(rule("bm=16,bn=64,bk=64,wm=1,wn=4,wk=1,stages=4,split=3,raster=0,gscale=1", problem("w4a16-int4-g128-bf16", 1, 4096, 1024)), "");
  EXPECT_EQ(rule("bm=32,bn=128,bk=256,wm=1,wn=4,wk=1,stages=3,split=2,raster=0,gscale=1", problem("w4a16-int4-g32", 32, 4096, 4096)), "");
  EXPECT_EQ(rule("bm=64,bn=128,bk=128,wm=2,wn=4,wk=1,stages=3,split=1,raster=0,gscale=1", problem("w8a16-int8-g128-bf16", 64, 4096, 4096)), "");
  EXPECT_EQ(rule("bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=4,raster=0,gscale=1", problem("w4a16-e2m1-g32", 1, 4096, 4096)), "");
  // The same tile without gscale passes the accumulator rule: it is gscale's partial sums that the rule counts.
  const Problem g128_m64 = problem("w4a16-int4-g128", 64, 8192, 8192);
  EXPECT_EQ(rule("bm=64,bn=128,bk=128,wm=1,wn=2,wk=1,stages=3,split=1,raster=0,gscale=1", g128_m64).rfind("accumulators-per-thread", 0), 0u);
  EXPECT_EQ(rule("bm=64,bn=128,bk=128,wm=1,wn=2,wk=1,stages=3,split=1,raster=0,gscale=0", g128_m64).find("accumulators-per-thread"),
            std::string::npos);
  // More registers are estimated with the partial sums than without.
  const FormatSpec g128 = FormatSpec::parse("w4a16-int4-g128");
  EXPECT_GT(MmaFamily::estimated_registers(mma_config("bm=64,bn=128,bk=128,wm=2,wn=2,wk=1,stages=3,split=1,raster=0,gscale=1"), g128),
            MmaFamily::estimated_registers(mma_config("bm=64,bn=128,bk=128,wm=2,wn=2,wk=1,stages=3,split=1,raster=0,gscale=0"), g128));

  const std::string absent = mma_family().instantiation_source(mma_config(kBaseConfig), g128, "sm_90a");
  const std::string zero = mma_family().instantiation_source(mma_config(std::string(kBaseConfig) + ",gscale=0"), g128, "sm_90a");
  const std::string one = mma_family().instantiation_source(mma_config(decode), g128, "sm_90a");
  EXPECT_EQ(absent.substr(absent.find('\n')), zero.substr(zero.find('\n')));  // all but the comment naming the config
  EXPECT_NE(zero.find("qd::mma_gemm<QtuneFormat, QtuneTiles>(params)"), std::string::npos) << zero;
  EXPECT_NE(zero.find("qd::MmaGemm<QtuneFormat, QtuneTiles>::SHARED_BYTES"), std::string::npos) << zero;
  EXPECT_NE(one.find("qd::mma_gemm<QtuneFormat, QtuneTiles, 1>(params)"), std::string::npos) << one;
  EXPECT_NE(one.find("qd::MmaGemm<QtuneFormat, QtuneTiles, 1>::SHARED_BYTES"), std::string::npos) << one;
  // No shared memory of its own: the launch is gscale=0's.
  EXPECT_EQ(mma_family().launch_geometry(mma_config(decode), problem("w4a16-int4-g128", 1, 8192, 8192)).dynamic_shared_bytes,
            mma_family().launch_geometry(mma_config("bm=16,bn=64,bk=128,wm=1,wn=4,wk=1,stages=4,split=4,raster=0"),
                                         problem("w4a16-int4-g128", 1, 8192, 8192))
                .dynamic_shared_bytes);
  // The default takes gscale=1 at decode (M <= 8) where the format has K-group scales without zero points (14.75 against
  // 16.73 us at M = 1 on the H200), else 0, named so that it is the enumerated config of its kernel.
  EXPECT_EQ(mma_family().default_config(problem("w4a16-int4-g128", 1, 8192, 8192), hopper).get("gscale"), 1);
  EXPECT_EQ(mma_family().default_config(problem("w4a16-int4-g128", 8, 8192, 8192), hopper).get("gscale"), 1);
  EXPECT_EQ(mma_family().default_config(problem("w4a16-int4-g128", 16, 8192, 8192), hopper).get("gscale"), 0);
  EXPECT_EQ(mma_family().default_config(problem("w4a16-int4-ch", 1, 8192, 8192), hopper).get("gscale"), 0);
  EXPECT_EQ(mma_family().default_config(problem("w4a16-int4-g128-zp", 1, 8192, 8192), hopper).get("gscale"), 0);
}

TEST(MmaFamily, SmemRuleDependsOnTheArchitecture) {
  const KernelConfig config = mma_config("bm=16,bn=256,bk=512,wm=1,wn=8,wk=1,stages=2,split=1,raster=0");
  const Problem p = problem("w4a16-int4-ch", 16, 8192, 8192);
  EXPECT_TRUE(mma_family().check(config, p, ArchLimits::for_sm(90)).valid) << mma_family().check(config, p, ArchLimits::for_sm(90)).detail;
  const RuleVerdict on_ada = mma_family().check(config, p, ArchLimits::for_sm(89));
  EXPECT_FALSE(on_ada.valid);
  EXPECT_EQ(on_ada.rule, "smem-per-block");
}

TEST(MmaFamily, DefaultConfigPassesCheckForTargetShapes) {
  for (const char* format : {"w4a16-int4-ch", "w4a16-int4-g128", "w4a16-int4-g128-zp", "w8a16-int8-ch", "nvfp4", "mxfp4"}) {
    for (int sm : {80, 89, 90, 120}) {
      for (int64_t m : {1, 16, 33, 64, 256, 1024, 4096}) {
        for (auto [n, k] : {std::pair<int64_t, int64_t>{8192, 8192}, {28672, 8192}, {5120, 13824}, {4096, 128}}) {
          const Problem p = problem(format, m, n, k);
          const ArchLimits limits = ArchLimits::for_sm(sm);
          const KernelConfig config = mma_family().default_config(p, limits);
          const RuleVerdict verdict = mma_family().check(config, p, limits);
          EXPECT_TRUE(verdict.valid) << p.to_string() << " sm_" << sm << " " << config.to_string() << ": " << verdict.rule
                                     << " " << verdict.detail;
        }
      }
    }
  }
}

TEST(MmaFamily, SmallMDefaultFillsTheMachine) {
  const Problem p = problem("w4a16-int4-ch", 1, 8192, 8192);
  const KernelConfig config = mma_family().default_config(p, ArchLimits::for_sm(90));
  const LaunchGeometry geometry = mma_family().launch_geometry(config, p);
  EXPECT_GE(geometry.grid[0], 132u) << config.to_string();
}

// The rules as calibrated on H200 sweeps (docs/perf.md): each of these landed within 10% of the exhaustive best.
TEST(MmaFamily, DefaultConfigFollowsTheCalibratedH200Rules) {
  const ArchLimits h200 = ArchLimits::for_sm(90);
  auto expect = [&](int64_t m, int64_t n, int64_t k, const std::string& expected) {
    EXPECT_EQ(mma_family().default_config(problem("w4a16-int4-ch", m, n, k), h200).to_string(), expected + ",gscale=0")
        << "m=" << m << " n=" << n << " k=" << k;
  };
  expect(1, 8192, 8192, "bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=4,raster=0");   // 64 tiles: split to ~4 CTAs/SM
  expect(16, 57344, 8192, "bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=2,raster=0");  // 448 tiles
  expect(64, 8192, 28672, "bm=64,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=4,raster=0");
  // M=128: a wave of 64x256 tiles split 2 ways (64 tiles x 2), else 64x128 split 2 below two CTAs per SM.
  expect(128, 8192, 8192, "bm=64,bn=256,bk=128,wm=2,wn=4,wk=1,stages=4,split=2,raster=0");
  expect(128, 10240, 8192, "bm=64,bn=128,bk=128,wm=2,wn=2,wk=1,stages=3,split=2,raster=0");   // 160 tiles
  expect(128, 57344, 8192, "bm=64,bn=128,bk=128,wm=2,wn=2,wk=1,stages=3,split=1,raster=0");   // 896 tiles
  expect(256, 8192, 8192, "bm=128,bn=128,bk=128,wm=2,wn=4,wk=1,stages=3,split=1,raster=0");  // 128 tiles: one wave
  expect(256, 10240, 8192, "bm=64,bn=128,bk=128,wm=2,wn=2,wk=1,stages=3,split=1,raster=0");  // 160 tiles fill badly
  // DeepSeek-V3 shapes: short K is never split below 4 K tiles per CTA; very few tiles add a second warp per K tile.
  expect(1, 32768, 512, "bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=1,raster=0");
  expect(1, 576, 7168, "bm=16,bn=64,bk=128,wm=1,wn=4,wk=2,stages=4,split=8,raster=0");
}

TEST(MmaFamily, DefaultConfigGivesEightBitWeightsNarrowDeepTiles) {
  const ArchLimits h200 = ArchLimits::for_sm(90);
  auto expect = [&](int64_t m, int64_t n, int64_t k, const std::string& expected) {
    EXPECT_EQ(mma_family().default_config(problem("w8a8-fp8-ch", m, n, k), h200).to_string(), expected + ",gscale=0")
        << "m=" << m << " n=" << n << " k=" << k;
  };
  expect(1, 8192, 8192, "bm=16,bn=64,bk=256,wm=1,wn=4,wk=1,stages=3,split=2,raster=0");   // K >= 4096: 2 ways
  expect(1, 32768, 512, "bm=16,bn=64,bk=128,wm=1,wn=4,wk=1,stages=3,split=1,raster=0");   // 4 K tiles of 128
  expect(128, 10240, 8192, "bm=64,bn=64,bk=128,wm=2,wn=2,wk=1,stages=3,split=2,raster=0");
}

TEST(MmaFamily, LaunchGeometryAndBuffers) {
  const KernelConfig config = mma_config(kBaseConfig);
  Problem p = problem("w4a16-int4-g128", 20, 1024, 2048);
  p.has_bias = true;
  const LaunchGeometry geometry = mma_family().launch_geometry(config, p);
  EXPECT_EQ(geometry.grid[0], (1024u / 128) * 2 * 4);  // 8 N tiles x 2 M tiles x split 4
  EXPECT_EQ(geometry.block[0], 128u);
  EXPECT_GT(geometry.dynamic_shared_bytes, 48u * 1024);
  EXPECT_EQ(geometry.workspace_bytes, 4ull * 16 * 16 * 128 * 4 + 16 * 4);
  EXPECT_TRUE(geometry.workspace_starts_zeroed);

  std::map<std::string, uint64_t> addresses;
  uint64_t next = 0x1000;
  for (const BufferSpec& buffer : mma_family().buffers(config, p)) {
    EXPECT_GT(buffer.bytes, 0u) << buffer.name;
    addresses[buffer.name] = next;
    next += 0x1000;
  }
  EXPECT_EQ(addresses.count("zeros"), 0u);
  EXPECT_EQ(addresses.count("bias"), 1u);
  KernelArguments arguments = mma_family().pack_arguments(config, p, addresses);
  EXPECT_EQ(arguments.pointers().size(), 1u);
  addresses.erase("c");
  EXPECT_THROW(mma_family().pack_arguments(config, p, addresses), InputError);
}

TEST(MmaFamily, InstantiationSourceNamesTheKernelAndChecksSizes) {
  const KernelConfig config = mma_config(kBaseConfig);
  const FormatSpec format = FormatSpec::parse("w4a16-int4-ch");
  const std::string source = mma_family().instantiation_source(config, format, "sm_90a");
  EXPECT_NE(source.find("extern \"C\" __global__"), std::string::npos);
  EXPECT_NE(source.find(mma_family().kernel_name(config, format)), std::string::npos);
  EXPECT_NE(source.find("#include \"gemm/mma_gemm.cuh\""), std::string::npos);
  EXPECT_NE(source.find("SHARED_BYTES == "), std::string::npos);
  EXPECT_THROW(mma_family().instantiation_source(config, FormatSpec::parse("w8a8-fp8-ch"), "sm_80"), UnsupportedError);
}

}  // namespace
}  // namespace qtune
