// libqtune_runtime's MoE entry point without a GPU (a Runtime for sm_90a): which configuration select_moe picks (the
// table's exact MoE entry and its token ranges, the nearest entry, the heuristic, a table config the MoE rules refuse),
// which family's kernel (a wgmma winner on sm_90, refused on sm_80 and for quantized activations; a W4A8 tma winner on
// sm_90 with its gathered rows in the scratch, refused on sm_80; the heuristic's wgmma config on Hopper inside the
// wgmma-moe provider's curated space), the launch it sizes, prepack_moe against the family's packing, and one-line
// InputErrors naming the field; NVRTC compiles the wgmma MoE GEMMs, and the tma MoE GEMMs with their gather kernels,
// that the Runtime selects for sm_90a.
#include <gtest/gtest.h>

#include "tests/common/temp_dir.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/error.hpp"
#include "kernels/families/mma_family.hpp"
#include "kernels/families/mma_moe.hpp"
#include "kernels/families/tma_family.hpp"
#include "kernels/families/wgmma_family.hpp"
#include "kernels/moe.hpp"
#include "kernels/moe_reference.hpp"
#include "tests/tuner/kernel/kernel_test_support.hpp"
#include "tests/tuner/production/production_test_support.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/production/qtune_runtime.hpp"
#include "tuner/production/selector.hpp"
#include "tuner/providers/moe_provider.hpp"

namespace qtune::production {
namespace {

using runtime_api::ConfigSource;
using runtime_api::MoeShape;
using runtime_api::Runtime;
using runtime_api::RuntimeOptions;
using test_support::TempDir;
using namespace testing;

constexpr const char* kMoeFormat = "w4a16-int4-g128";
constexpr const char* kDecodeTile = "bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=2,raster=0";
constexpr const char* kPrefillTile = "bm=64,bn=128,bk=128,wm=2,wn=2,wk=1,stages=3,split=1,raster=0";
constexpr const char* kDownTile = "bm=32,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=1,raster=0";

reports::MoeRules moe_rules(int experts, int top_k, std::int64_t n, std::int64_t k, const char* projection,
                            const std::vector<RangeSpec>& ranges, const char* layout = "token-indexed",
                            const char* format = kMoeFormat) {
  reports::MoeRules rules;
  rules.format = FormatSpec::parse(format).to_string();
  rules.experts = experts;
  rules.top_k = top_k;
  rules.n = n;
  rules.k = k;
  rules.projection = projection;
  rules.layout = layout;
  rules.routing = "uniform";
  rules.ranges = shape_rules(n, k, ranges).ranges;  // one tuned bucket per range, at its upper end (4096 when open)
  return rules;
}

// DeepSeek-V3's expert GEMMs tuned: gate-up with two token ranges, down with one; a grouped-layout entry the runtime
// (token-indexed only) must not take.
reports::SelectionTable moe_table() {
  reports::SelectionTable table = sample_table();
  table.moe = {moe_rules(256, 8, 4096, 7168, "gate-up", {{1, 64, kDecodeTile}, {65, std::nullopt, kPrefillTile}}),
               moe_rules(256, 8, 7168, 2048, "down", {{1, std::nullopt, kDownTile}}),
               moe_rules(256, 8, 4096, 7168, "down", {{1, std::nullopt, kPrefillTile}}, "grouped-contiguous")};
  std::sort(table.moe.begin(), table.moe.end(), [](const auto& a, const auto& b) { return a.key() < b.key(); });
  return table;
}

MoeShape deepseek(std::int64_t tokens, std::string_view projection = "gate-up") {
  const bool gate_up = projection != "down";
  return {.experts = 256, .top_k = 8, .n = gate_up ? 4096 : 7168, .k = gate_up ? 7168 : 2048, .tokens = tokens,
          .projection = projection};
}

class RuntimeMoeSelect : public ::testing::Test {
 protected:
  void SetUp() override {
    RuntimeOptions options;
    options.table = write_table(dir_ / "table.json", moe_table());
    options.arch = "sm_90a";
    runtime_ = std::make_unique<Runtime>(options);
  }
  TempDir dir_;
  std::unique_ptr<Runtime> runtime_;
};

TEST(RuntimeMoeSelectFixture, TableConfigsPassTheMoeRulesOnHopper) {
  for (const auto& [config, tokens] : std::vector<std::pair<const char*, std::int64_t>>{{kDecodeTile, 64}, {kPrefillTile, 4096}}) {
    MoeProblem problem = make_moe_problem(FormatSpec::parse(kMoeFormat), 256, 8, 4096, 7168, tokens, "gate-up");
    const RuleVerdict verdict = mma_moe::check(KernelConfig::parse(config), problem, ArchLimits::for_sm(90));
    EXPECT_TRUE(verdict.valid) << config << ": " << verdict.rule << " " << verdict.detail;
  }
}

TEST_F(RuntimeMoeSelect, TunedEntryTakesTheTokenRangeHoldingT) {
  for (const auto& [tokens, config] : std::vector<std::pair<std::int64_t, const char*>>{
           {1, kDecodeTile}, {64, kDecodeTile}, {65, kPrefillTile}, {4096, kPrefillTile}}) {
    const runtime_api::MoeChoice choice = runtime_->select_moe(kMoeFormat, deepseek(tokens));
    EXPECT_EQ(choice.choice.source, ConfigSource::Tuned) << tokens << ": " << choice.choice.detail;
    EXPECT_EQ(choice.choice.config, config) << tokens;
    EXPECT_EQ(choice.choice.family, "mma");
  }
  const runtime_api::MoeChoice down = runtime_->select_moe(kMoeFormat, deepseek(16, "down"));
  EXPECT_EQ(down.choice.source, ConfigSource::Tuned);
  EXPECT_EQ(down.choice.config, kDownTile);
  EXPECT_NE(runtime_->select_moe(kMoeFormat, deepseek(16)).choice.detail.find("tuned MoE shape E=256 top_k=8 n=4096 k=7168, token range [1, 64]"),
            std::string::npos)
      << runtime_->select_moe(kMoeFormat, deepseek(16)).choice.detail;
  // "gate_up" is the same projection.
  EXPECT_EQ(runtime_->select_moe(kMoeFormat, deepseek(16, "gate_up")).choice.config, kDecodeTile);
}

TEST_F(RuntimeMoeSelect, LaunchIsSizedWithoutTheRouting) {
  // T = 16, top-8: 128 pairs over at most 128 experts, each padding at most bm - 1 = 15 rows.
  const runtime_api::MoeChoice choice = runtime_->select_moe(kMoeFormat, deepseek(16));
  EXPECT_EQ(choice.block_rows, 16);
  EXPECT_EQ(choice.launch_rows, (128 + 128 * 15 + 15) / 16 * 16);
  // Row tables (rows, a block expert per 16 rows, the padded count) and the split-K workspace; gate-up reduces nothing.
  const auto tables = static_cast<std::uint64_t>(choice.launch_rows + choice.launch_rows / 16 + 1) * 4;
  EXPECT_GT(choice.scratch_bytes, tables);
  // Down keeps T · top_k unreduced rows of N halves besides.
  const runtime_api::MoeChoice down = runtime_->select_moe(kMoeFormat, deepseek(16, "down"));
  EXPECT_EQ(down.scratch_bytes, static_cast<std::uint64_t>(down.launch_rows + down.launch_rows / 32 + 1) * 4 + 128u * 7168 * 2);
}

TEST_F(RuntimeMoeSelect, UntunedShapeFallsBackToTheNearestEntryOfItsProjection) {
  // Qwen3-30B-A3B's experts (128, top-8, gate-up 1536 x 2048): nearest gate-up entry is DeepSeek-V3's.
  const runtime_api::MoeChoice choice =
      runtime_->select_moe(kMoeFormat, {.experts = 128, .top_k = 8, .n = 1536, .k = 2048, .tokens = 8, .projection = "gate-up"});
  EXPECT_EQ(choice.choice.source, ConfigSource::Fallback) << choice.choice.detail;
  EXPECT_EQ(choice.choice.config, kDecodeTile);
  EXPECT_NE(choice.choice.detail.find("nearest tuned MoE shape E=256"), std::string::npos) << choice.choice.detail;
  // A down projection takes the down entry, never the grouped layout's.
  const runtime_api::MoeChoice down =
      runtime_->select_moe(kMoeFormat, {.experts = 128, .top_k = 8, .n = 2048, .k = 768, .tokens = 8, .projection = "down"});
  EXPECT_EQ(down.choice.source, ConfigSource::Fallback) << down.choice.detail;
  EXPECT_EQ(down.choice.config, kDownTile);
}

TEST_F(RuntimeMoeSelect, FormatWithoutEntriesAndAConfigTheRulesRefuseTakeTheHeuristic) {
  const MoeShape shape{.experts = 8, .top_k = 2, .n = 4096, .k = 4096, .tokens = 32, .projection = "gate-up"};
  const runtime_api::MoeChoice other = runtime_->select_moe("w8a8-fp8-ch", shape);
  EXPECT_EQ(other.choice.source, ConfigSource::Heuristic);
  EXPECT_NE(other.choice.detail.find("no token-indexed gate-up MoE entry of w8a8-fp8-ch"), std::string::npos) << other.choice.detail;
  // N = 192 is no multiple of the nearest entry's 128 columns: its config fails the rules, the heuristic's fits.
  const runtime_api::MoeChoice narrow =
      runtime_->select_moe(kMoeFormat, {.experts = 256, .top_k = 8, .n = 192, .k = 7168, .tokens = 4, .projection = "gate-up"});
  EXPECT_EQ(narrow.choice.source, ConfigSource::Heuristic);
  EXPECT_NE(narrow.choice.detail.find("fails rule"), std::string::npos) << narrow.choice.detail;
  const MoeProblem problem = make_moe_problem(FormatSpec::parse(kMoeFormat), 256, 8, 192, 7168, 4, "gate-up");
  EXPECT_TRUE(mma_moe::check(KernelConfig::parse(narrow.choice.config, narrow.choice.family), problem, ArchLimits::for_sm(90)).valid)
      << narrow.choice.family << ":" << narrow.choice.config;
}

TEST(RuntimeMoeSelectWithoutTable, HeuristicPassesTheMoeRulesFromDecodeToPrefill) {
  Runtime runtime({.arch = "sm_90a"});
  for (const char* format : {"w4a16-int4-g128", "w4a8-int4-fp8", "w8a8-fp8-ch", "w4a16-int4-g128-zp"}) {
    for (const std::int64_t tokens : {1, 16, 64, 256, 1024, 4096}) {
      for (const char* projection : {"gate-up", "down"}) {
        const MoeShape shape = deepseek(tokens, projection);
        const runtime_api::MoeChoice choice = runtime.select_moe(format, shape);
        EXPECT_EQ(choice.choice.source, ConfigSource::Heuristic);
        EXPECT_EQ(choice.choice.detail, "no table");
        const MoeProblem problem =
            make_moe_problem(FormatSpec::parse(format), shape.experts, shape.top_k, shape.n, shape.k, tokens, projection);
        const KernelConfig config = KernelConfig::parse(choice.choice.config, choice.choice.family);
        const RuleVerdict verdict = mma_moe::check(config, problem, ArchLimits::for_sm(90));
        EXPECT_TRUE(verdict.valid) << format << " T=" << tokens << " " << choice.choice.family << ":" << choice.choice.config << ": "
                                   << verdict.rule;
        EXPECT_EQ(choice.launch_rows % choice.block_rows, 0);
      }
    }
  }
  // Decode spreads one row over each touched expert: 16-row blocks; 4096 tokens give 128 rows per expert: taller ones.
  EXPECT_EQ(runtime.select_moe(kMoeFormat, deepseek(1)).block_rows, 16);
  EXPECT_GE(runtime.select_moe(kMoeFormat, deepseek(4096)).block_rows, 64);
  // Decode tiles on wgmma take 256-deep K tiles (every DeepSeek-V3 decode bucket's winner on the H200), and the down
  // projection the persistent schedule (its winner at T = 1, 16 and 256).
  for (const char* projection : {"gate-up", "down"}) {
    const runtime_api::MoeChoice decode = runtime.select_moe(kMoeFormat, deepseek(16, projection));
    EXPECT_EQ(decode.choice.family, "wgmma");
    EXPECT_EQ(decode.choice.params.at("bk"), 256) << decode.choice.config;
    EXPECT_EQ(decode.choice.params.count("persistent") ? decode.choice.params.at("persistent") : 0,
              std::string(projection) == "down" ? 1 : 0)
        << projection << " " << decode.choice.config;
  }
  // At T = 1 the 8 touched experts' tiles are few: the K split stays; at T = 4096 there are plenty: no split.
  EXPECT_EQ(runtime.select_moe(kMoeFormat, deepseek(4096)).choice.params.at("split"), 1);
  // W4A8 takes the tma kernel's measured winners: 128-token tiles at 128 rows per expert (T = 4096) in both projections,
  // 64-token tiles for the gate-up at 32 (T = 1024), whose down projection stays on wgmma; decode stays on wgmma.
  for (const char* projection : {"gate-up", "down"}) {
    const runtime_api::MoeChoice prefill = runtime.select_moe("w4a8-int4-fp8", deepseek(4096, projection));
    EXPECT_EQ(prefill.choice.family, "tma") << projection;
    EXPECT_EQ(prefill.choice.config,
              "bm=128,bn=128,bk=256,stages=4,split=1,raster=0,cluster=1,multicast=0,persistent=1,overlap=1,promote=0,pingpong=0,kgroups=1,ss=0");
    EXPECT_EQ(runtime.select_moe("w4a8-int4-fp8", deepseek(16, projection)).choice.family, "wgmma") << projection;
  }
  const runtime_api::MoeChoice gate_up = runtime.select_moe("w4a8-int4-fp8", deepseek(1024, "gate-up"));
  EXPECT_EQ(gate_up.choice.family, "tma");
  EXPECT_EQ(gate_up.choice.params.at("bm"), 64);
  EXPECT_EQ(runtime.select_moe("w4a8-int4-fp8", deepseek(1024, "down")).choice.family, "wgmma");
  // W8A8 fp8 with 128 rows per expert: the tma kernel too (its dense kernels lead from M = 32); below, mma as before.
  EXPECT_EQ(runtime.select_moe("w8a8-fp8-ch", deepseek(4096)).choice.family, "tma");
  EXPECT_EQ(runtime.select_moe("w8a8-fp8-ch", deepseek(1024)).choice.family, "mma");
}

// ---- which family's MoE kernel: mma everywhere, on sm_90 wgmma for weight-only formats and tma ----

// The H200's wgmma winners of DeepSeek-V3 at T = 1 (docs/perf.md, eleventh session) and a tall tile beyond 16 tokens.
constexpr const char* kWgmmaDecode = "bm=16,bn=128,bk=256,stages=4,split=1,raster=0,overlap=0";
constexpr const char* kWgmmaPrefill = "bm=64,bn=128,bk=64,stages=4,split=1,raster=0,overlap=1";
constexpr const char* kWgmmaDown = "bm=16,bn=64,bk=128,stages=3,split=1,raster=0,overlap=0";
constexpr const char* kTmaDecode =
    "bm=16,bn=64,bk=128,stages=4,split=1,raster=0,cluster=1,multicast=0,persistent=0,overlap=0,promote=128,pingpong=0";

std::string prefixed(const char* family, const char* config) { return std::string(family) + ":" + config; }

// wgmma winners of w4a16-int4-g128 (gate-up with two token ranges, down), a tma winner of W4A8 gate-up, and a wgmma
// config of W8A8 int8 down (which the wgmma family cannot run: it widens fp8 activations only).
reports::SelectionTable family_table() {
  reports::SelectionTable table = sample_table();
  table.moe = {moe_rules(256, 8, 4096, 7168, "gate-up",
                         {{1, 16, prefixed("wgmma", kWgmmaDecode)}, {17, std::nullopt, prefixed("wgmma", kWgmmaPrefill)}}),
               moe_rules(256, 8, 7168, 2048, "down", {{1, std::nullopt, prefixed("wgmma", kWgmmaDown)}}),
               moe_rules(256, 8, 4096, 7168, "gate-up", {{1, std::nullopt, prefixed("tma", kTmaDecode)}}, "token-indexed",
                         "w4a8-int4-fp8"),
               moe_rules(256, 8, 7168, 2048, "down", {{1, std::nullopt, prefixed("wgmma", kWgmmaDown)}}, "token-indexed",
                         "w8a8-int8-ch")};
  std::sort(table.moe.begin(), table.moe.end(), [](const auto& a, const auto& b) { return a.key() < b.key(); });
  return table;
}

class RuntimeMoeSelectFamilies : public ::testing::Test {
 protected:
  std::unique_ptr<Runtime> runtime_for(const char* arch) {
    return std::make_unique<Runtime>(RuntimeOptions{.table = table_, .arch = arch});
  }
  TempDir dir_;
  std::filesystem::path table_ = write_table(dir_ / "table.json", family_table());
};

TEST_F(RuntimeMoeSelectFamilies, WgmmaWinnerIsTunedOnHopper) {
  for (const char* arch : {"sm_90a", "sm_90"}) {
    const auto runtime = runtime_for(arch);
    for (const auto& [tokens, config, rows] : std::vector<std::tuple<std::int64_t, const char*, int>>{
             {1, kWgmmaDecode, 16}, {16, kWgmmaDecode, 16}, {17, kWgmmaPrefill, 64}, {4096, kWgmmaPrefill, 64}}) {
      const runtime_api::MoeChoice choice = runtime->select_moe(kMoeFormat, deepseek(tokens));
      EXPECT_EQ(choice.choice.source, ConfigSource::Tuned) << arch << " T=" << tokens << ": " << choice.choice.detail;
      EXPECT_EQ(choice.choice.family, "wgmma") << arch << " T=" << tokens;
      EXPECT_EQ(choice.choice.config, config) << arch << " T=" << tokens;
      EXPECT_EQ(choice.block_rows, rows);
      // wgmma is sm_90a code: a Runtime for plain sm_90 compiles it for sm_90a too (the only sm_90 devices run it).
      EXPECT_EQ(choice.arch, "sm_90a") << arch;
    }
    const runtime_api::MoeChoice down = runtime->select_moe(kMoeFormat, deepseek(1, "down"));
    EXPECT_EQ(down.choice.source, ConfigSource::Tuned) << down.choice.detail;
    EXPECT_EQ(down.choice.family, "wgmma");
    EXPECT_EQ(down.choice.config, kWgmmaDown);
  }
  // The selector's family is the config's: its kernel, launch geometry and shared memory are wgmma's.
  const reports::SelectionTable table = family_table();
  const MoeProblem problem = make_moe_problem(FormatSpec::parse(kMoeFormat), 256, 8, 4096, 7168, 1, "gate-up");
  const Selection selection = select_moe_config(&table, problem, ArchLimits::for_sm(90));
  EXPECT_EQ(selection.family, &wgmma_family());
  EXPECT_EQ(mma_moe::kernel_name(selection.config), "qtune_wgmma_moe_gemm");
  const std::int64_t launch_rows = mma_moe::launch_rows(problem, 16, MoeRowMap{});
  EXPECT_EQ(mma_moe::launch_geometry(selection.config, problem, launch_rows).block[0],
            static_cast<unsigned>(WgmmaFamily::threads(selection.config)));
}

TEST_F(RuntimeMoeSelectFamilies, WgmmaWinnerIsRefusedOnAmpereWithTheFamilyReason) {
  const auto ampere = runtime_for("sm_80");
  const runtime_api::MoeChoice choice = ampere->select_moe(kMoeFormat, deepseek(1));
  EXPECT_EQ(choice.choice.source, ConfigSource::Heuristic);
  EXPECT_EQ(choice.choice.family, "mma");
  EXPECT_EQ(choice.arch, "sm_80");
  EXPECT_NE(choice.choice.detail.find("fails rule 'family'"), std::string::npos) << choice.choice.detail;
  EXPECT_NE(choice.choice.detail.find("wgmma exists only on sm_90"), std::string::npos) << choice.choice.detail;
  const MoeProblem problem = make_moe_problem(FormatSpec::parse(kMoeFormat), 256, 8, 4096, 7168, 1, "gate-up");
  const reports::SelectionTable table = family_table();
  EXPECT_EQ(select_moe_config(&table, problem, ArchLimits::for_sm(80)).family, &mma_family());
  // On Hopper, a wgmma config of int8 activations is refused too (the wgmma family's reason: it widens fp8 only).
  const runtime_api::MoeChoice int8 = runtime_for("sm_90a")->select_moe("w8a8-int8-ch", deepseek(1, "down"));
  EXPECT_EQ(int8.choice.source, ConfigSource::Heuristic);
  EXPECT_EQ(int8.choice.family, "mma");
  EXPECT_NE(int8.choice.detail.find("fails rule 'family'"), std::string::npos) << int8.choice.detail;
  EXPECT_NE(int8.choice.detail.find("widens fp8 activations"), std::string::npos) << int8.choice.detail;
}

TEST_F(RuntimeMoeSelectFamilies, TmaWinnerIsTunedOnHopperWithItsGatheredRowsInTheScratch) {
  for (const char* arch : {"sm_90a", "sm_90"}) {
    const runtime_api::MoeChoice choice = runtime_for(arch)->select_moe("w4a8-int4-fp8", deepseek(1));
    EXPECT_EQ(choice.choice.source, ConfigSource::Tuned) << arch << ": " << choice.choice.detail;
    EXPECT_EQ(choice.choice.family, "tma") << arch;
    EXPECT_EQ(choice.choice.config, kTmaDecode) << arch;
    EXPECT_EQ(choice.block_rows, 16);
    // tma is sm_90a code, as wgmma: a Runtime for plain sm_90 compiles it for sm_90a too.
    EXPECT_EQ(choice.arch, "sm_90a") << arch;
    // T = 1, top-8: 8 pairs on 8 experts, 15 padding rows each, in 16-row blocks.
    EXPECT_EQ(choice.launch_rows, 128);
    // Row tables, then the gathered fp8 rows (K bytes each, 7168 · 128 is a multiple of 256) and one f32 token scale
    // per row; no split-K, no unreduced rows for gate-up.
    const std::uint64_t tables = (128 + 128 / 16 + 1) * 4;
    EXPECT_EQ(choice.scratch_bytes, tables + 128u * 7168 + 128u * 4) << arch;
  }
  const reports::SelectionTable table = family_table();
  const MoeProblem problem = make_moe_problem(FormatSpec::parse("w4a8-int4-fp8"), 256, 8, 4096, 7168, 1, "gate-up");
  const Selection selection = select_moe_config(&table, problem, ArchLimits::for_sm(90));
  EXPECT_EQ(selection.family, &tma_family());
  EXPECT_EQ(mma_moe::kernel_name(selection.config), "qtune_tma_moe_gemm");
  EXPECT_TRUE(mma_moe::gathers(selection.config, problem));
  // The scratch the runtime sizes is what the tuner's launch of the same config declares.
  std::uint64_t gathered = 0;
  for (const BufferSpec& spec : mma_moe::buffers(selection.config, problem, 128)) {
    if (spec.name == "gathered" || spec.name == "gathered_scales") gathered += spec.bytes;
  }
  EXPECT_EQ(gathered, 128u * 7168 + 128u * 4);
}

// Off Hopper the W4A8 winner gives way to the mma heuristic on Ada (fp8 from sm_89); on Ampere no MoE kernel runs
// fp8 activations at all, which select_moe says as the format's UnsupportedError.
TEST_F(RuntimeMoeSelectFamilies, TmaWinnerIsRefusedOffHopperWithTheFamilyReason) {
  const auto ada = runtime_for("sm_89");
  const runtime_api::MoeChoice choice = ada->select_moe("w4a8-int4-fp8", deepseek(1));
  EXPECT_EQ(choice.choice.source, ConfigSource::Heuristic);
  EXPECT_EQ(choice.choice.family, "mma");
  EXPECT_EQ(choice.arch, "sm_89");
  for (const char* words : {"fails rule 'family'", "family 'tma'", "only on sm_90"}) {
    EXPECT_NE(choice.choice.detail.find(words), std::string::npos) << words << " in: " << choice.choice.detail;
  }
  const reports::SelectionTable table = family_table();
  const MoeProblem problem = make_moe_problem(FormatSpec::parse("w4a8-int4-fp8"), 256, 8, 4096, 7168, 1, "gate-up");
  EXPECT_EQ(select_moe_config(&table, problem, ArchLimits::for_sm(89)).family, &mma_family());
  EXPECT_THROW(runtime_for("sm_80")->select_moe("w4a8-int4-fp8", deepseek(1)), UnsupportedError);
  EXPECT_THROW(select_moe_config(&table, problem, ArchLimits::for_sm(80)), UnsupportedError);
  // The family rule itself refuses a tma config on sm_80 for a format the mma kernel runs there.
  std::string why_not;
  EXPECT_EQ(runtime_moe_family(KernelConfig::parse(kTmaDecode, "tma"), FormatSpec::parse(kMoeFormat), 80, &why_not), nullptr);
  EXPECT_NE(why_not.find("family 'tma'"), std::string::npos) << why_not;
  EXPECT_NE(why_not.find("only on sm_90"), std::string::npos) << why_not;
  // On Hopper too, a format with 4-bit compute has no tma kernel (wgmma has no 4-bit operands).
  EXPECT_EQ(runtime_moe_family(KernelConfig::parse(kTmaDecode, "tma"), FormatSpec::parse("w4a4-nvfp4"), 90, &why_not), nullptr);
  EXPECT_NE(why_not.find("family 'tma'"), std::string::npos) << why_not;
  // Any other family is refused naming it.
  EXPECT_EQ(runtime_moe_family(KernelConfig::parse("bm=16", "bsmma"), FormatSpec::parse(kMoeFormat), 90, &why_not), nullptr);
  EXPECT_NE(why_not.find("'bsmma'"), std::string::npos) << why_not;
}

// On sm_90 the heuristic of a weight-only or W4A8 (fp8 activations widened) format is the wgmma family's dense config
// at the expected rows per expert, one of the points of the wgmma-moe provider's curated space (what a tune of that
// provider measures), except W4A8's prefill, the tma-moe winners of its curated space; W8A8 (fp8 or int8) below 64
// rows per expert, and any format on sm_80, take the mma family's.
TEST(RuntimeMoeSelectWithoutTable, HopperWeightOnlyHeuristicIsWgmmaInsideTheCuratedSpace) {
  Runtime hopper({.arch = "sm_90a"});
  Runtime ampere({.arch = "sm_80"});
  for (const char* format : {"w4a16-int4-g128", "w4a16-int4-g128-zp", "w4a16-int4-ch", "w4a8-int4-fp8"}) {
    for (const std::int64_t tokens : {1, 16, 64, 256, 1024, 4096}) {
      for (const char* projection : {"gate-up", "down"}) {
        const MoeShape shape = deepseek(tokens, projection);
        const std::string label = std::string(format) + " " + projection + " T=" + std::to_string(tokens);
        const runtime_api::MoeChoice choice = hopper.select_moe(format, shape);
        // W4A8 prefill takes the tma kernel's measured winners (128 rows per expert; the gate-up's 32).
        const bool on_tma = std::string(format) == "w4a8-int4-fp8" && (tokens == 4096 || (tokens == 1024 && std::string(projection) == "gate-up"));
        ASSERT_EQ(choice.choice.family, on_tma ? "tma" : "wgmma") << label << ": " << choice.choice.config;
        EXPECT_EQ(choice.arch, "sm_90a");
        const MoeProblem problem =
            make_moe_problem(FormatSpec::parse(format), shape.experts, shape.top_k, shape.n, shape.k, tokens, projection);
        // The provider's curated space at the uniform routing's rows per expert, every point of it.
        const providers::MoeProvider& provider = on_tma ? providers::tma_moe_provider() : providers::wgmma_moe_provider();
        const providers::ProviderSpace space =
            provider.enumerate(providers::moe_provider_problem(problem), ArchLimits::for_sm(90), providers::SpaceRequest{}, nullptr);
        EXPECT_NE(std::find(space.configurations.begin(), space.configurations.end(), choice.choice.config),
                  space.configurations.end())
            << label << ": " << choice.choice.config << " is not in the " << provider.name() << " curated space ("
            << space.configurations.size() << " configs)";
        if (!FormatSpec::parse(format).activation_is_quantized()) {  // fp8 activations need sm_89
          EXPECT_EQ(ampere.select_moe(format, shape).choice.family, "mma") << label;
        }
      }
    }
  }
  EXPECT_EQ(hopper.select_moe("w8a8-int8-ch", deepseek(16)).choice.family, "mma");
  EXPECT_EQ(hopper.select_moe("w8a8-fp8-ch", deepseek(16)).choice.family, "mma");  // 8-bit weights: not widened by rule
  // Widened fp8 activations keep 128-deep K tiles and one CTA per unit at decode (256 and the persistent down were
  // slower on the H200); weight-only decode tiles take 256.
  for (const char* projection : {"gate-up", "down"}) {
    const runtime_api::MoeChoice w4a8 = hopper.select_moe("w4a8-int4-fp8", deepseek(16, projection));
    EXPECT_EQ(w4a8.choice.params.at("bk"), 128) << projection << " " << w4a8.choice.config;
    EXPECT_EQ(w4a8.choice.params.count("persistent") ? w4a8.choice.params.at("persistent") : 0, 0) << w4a8.choice.config;
    EXPECT_EQ(hopper.select_moe(kMoeFormat, deepseek(16, projection)).choice.params.at("bk"), 256) << projection;
  }
  // DeepSeek-V3 gate-up at T = 1: 8 experts x 32 column tiles already fill the GPU, so no K split (the H200's winner
  // had none either).
  EXPECT_EQ(hopper.select_moe(kMoeFormat, deepseek(1)).choice.params.at("split"), 1);
}

// What the Runtime compiles for a wgmma choice (mma_moe::instantiation_source of the choice's config for its arch,
// as load_moe does) compiles with NVRTC for sm_90a without spills: tuned and heuristic, gate-up and down.
TEST(RuntimeMoeCompile, WgmmaGemmsTheRuntimeSelectsCompileForSm90a) {
  TempDir dir;
  Runtime runtime({.table = write_table(dir / "table.json", family_table()), .arch = "sm_90"});
  Runtime untuned({.arch = "sm_90a"});
  std::vector<jit::CompileRequest> requests;
  std::vector<std::string> labels;
  auto add = [&](const Runtime& from, const char* format, const MoeShape& shape) {
    const runtime_api::MoeChoice choice = from.select_moe(format, shape);
    ASSERT_EQ(choice.choice.family, "wgmma") << choice.choice.detail;
    const MoeProblem problem =
        make_moe_problem(FormatSpec::parse(format), shape.experts, shape.top_k, shape.n, shape.k, shape.tokens, shape.projection);
    const KernelConfig config = KernelConfig::parse(choice.choice.config, choice.choice.family);
    jit::CompileRequest request;
    request.source = mma_moe::instantiation_source(config, problem, choice.arch);
    request.kernel_name = mma_moe::kernel_name(config);
    request.arch = choice.arch;
    requests.push_back(request);
    labels.push_back(std::string(format) + " " + std::string(shape.projection) + " T=" + std::to_string(shape.tokens) + " " +
                     std::string(runtime_api::to_string(choice.choice.source)) + " " + choice.choice.config);
  };
  add(runtime, kMoeFormat, deepseek(1));
  add(runtime, kMoeFormat, deepseek(256));
  add(runtime, kMoeFormat, deepseek(1, "down"));
  add(untuned, "w4a16-int4-g128-zp", deepseek(16));
  add(untuned, "w4a16-int4-ch", deepseek(4096, "down"));
  test_support::check_each_compiled(requests, labels, [](const std::string& label, const jit::CompiledKernel& kernel) {
    EXPECT_FALSE(kernel.cubin.empty()) << label;
    EXPECT_EQ(kernel.arch, "sm_90a") << label;
    EXPECT_EQ(kernel.resources.spill_store_bytes, 0) << label << " spills";
  });
}

// tma winners (the H200's W4A8 DeepSeek-V3 MoE winners are all tma up to T = 256, docs/perf.md, thirteenth session):
// a split-K 16-row tile up to T = 16 and a persistent 64-row tile beyond, for W4A8 int4 x fp8 and W8A8 fp8 per
// channel, gate-up and down (the kernel tests' tma tiles, tests/tuner/kernel/test_moe_gpu.cpp).
constexpr const char* kTmaSplitTile =
    "bm=16,bn=64,bk=256,stages=3,split=2,raster=0,cluster=1,multicast=0,persistent=0,overlap=0,promote=128,pingpong=0";
constexpr const char* kTmaPersistentTile =
    "bm=64,bn=128,bk=128,stages=4,split=1,raster=0,cluster=1,multicast=0,persistent=1,overlap=0,promote=128,pingpong=0";

reports::SelectionTable tma_table() {
  reports::SelectionTable table = sample_table();
  for (const char* format : {"w4a8-int4-fp8", "w8a8-fp8-ch"}) {
    table.moe.push_back(moe_rules(256, 8, 4096, 7168, "gate-up",
                                  {{1, 16, prefixed("tma", kTmaSplitTile)}, {17, std::nullopt, prefixed("tma", kTmaPersistentTile)}},
                                  "token-indexed", format));
    table.moe.push_back(moe_rules(256, 8, 7168, 2048, "down",
                                  {{1, 16, prefixed("tma", kTmaSplitTile)}, {17, std::nullopt, prefixed("tma", kTmaPersistentTile)}},
                                  "token-indexed", format));
  }
  std::sort(table.moe.begin(), table.moe.end(), [](const auto& a, const auto& b) { return a.key() < b.key(); });
  return table;
}

// The GPU tests' tma table entries (test_runtime_moe_gpu.cpp: E = 32 top-4 512 x 2048, and the graph capture's E = 16
// top-4 1024 x 512) pass the MoE rules on Hopper at the token counts their ranges were tuned at, so there they are
// selected as tuned rather than giving way to the heuristic (a persistent tile needs more than one wave of tiles).
TEST(RuntimeMoeSelectFixture, GpuTestsTmaEntriesPassTheMoeRulesOnHopper) {
  for (const char* format : {"w4a8-int4-fp8", "w8a8-fp8-ch"}) {
    for (const auto& [experts, n, k] : std::vector<std::tuple<int, std::int64_t, std::int64_t>>{{32, 512, 2048}, {16, 1024, 512}}) {
      for (const char* projection : {"gate-up", "down"}) {
        for (const auto& [config, tokens] : std::vector<std::pair<const char*, std::int64_t>>{{kTmaSplitTile, 16},
                                                                                            {kTmaPersistentTile, 256}}) {
          const MoeProblem problem = make_moe_problem(FormatSpec::parse(format), experts, 4, n, k, tokens, projection);
          const KernelConfig parsed = KernelConfig::parse(config, "tma");
          EXPECT_EQ(runtime_moe_family(parsed, problem.format, 90), &tma_family()) << format;
          const RuleVerdict verdict = mma_moe::check(parsed, problem, ArchLimits::for_sm(90));
          EXPECT_TRUE(verdict.valid) << format << " E=" << experts << " n=" << n << " k=" << k << " " << projection << " " << config << ": "
                                     << verdict.rule << " " << verdict.detail;
        }
      }
    }
  }
}

// What the Runtime compiles for a tma choice (load_moe: the GEMM and the gather of its projection, both for the
// choice's arch) compiles with NVRTC for sm_90a without spills: both tiles, both formats, gate-up and down.
TEST(RuntimeMoeCompile, TmaGemmsAndGathersTheRuntimeSelectsCompileForSm90a) {
  TempDir dir;
  Runtime runtime({.table = write_table(dir / "table.json", tma_table()), .arch = "sm_90"});
  std::vector<jit::CompileRequest> requests;
  std::vector<std::string> labels;
  std::vector<std::string> gathers_added;
  auto add = [&](const char* format, const MoeShape& shape, const char* expected_config) {
    const runtime_api::MoeChoice choice = runtime.select_moe(format, shape);
    ASSERT_EQ(choice.choice.source, ConfigSource::Tuned) << choice.choice.detail;
    ASSERT_EQ(choice.choice.family, "tma") << choice.choice.detail;
    EXPECT_EQ(choice.choice.config, expected_config);
    ASSERT_EQ(choice.arch, "sm_90a");
    const MoeProblem problem =
        make_moe_problem(FormatSpec::parse(format), shape.experts, shape.top_k, shape.n, shape.k, shape.tokens, shape.projection);
    const KernelConfig config = KernelConfig::parse(choice.choice.config, choice.choice.family);
    ASSERT_TRUE(mma_moe::gathers(config, problem));
    const std::string label = std::string(format) + " " + std::string(shape.projection) + " T=" + std::to_string(shape.tokens) +
                              " " + choice.choice.config;
    jit::CompileRequest gemm;
    gemm.source = mma_moe::instantiation_source(config, problem, choice.arch);
    gemm.kernel_name = mma_moe::kernel_name(config);
    gemm.arch = choice.arch;
    requests.push_back(gemm);
    labels.push_back(label);
    // The gather's source depends on the projection only (the Runtime keys it so).
    const std::string gather_key(shape.projection);
    if (std::find(gathers_added.begin(), gathers_added.end(), gather_key) == gathers_added.end()) {
      gathers_added.push_back(gather_key);
      jit::CompileRequest gather;
      gather.source = mma_moe::gather_instantiation_source(problem, choice.arch);
      gather.kernel_name = mma_moe::gather_kernel_name();
      gather.arch = choice.arch;
      requests.push_back(gather);
      labels.push_back("gather " + gather_key);
    }
  };
  add("w4a8-int4-fp8", deepseek(1), kTmaSplitTile);
  add("w4a8-int4-fp8", deepseek(256), kTmaPersistentTile);
  add("w4a8-int4-fp8", deepseek(16, "down"), kTmaSplitTile);
  add("w8a8-fp8-ch", deepseek(64), kTmaPersistentTile);
  add("w8a8-fp8-ch", deepseek(256, "down"), kTmaPersistentTile);
  ASSERT_EQ(gathers_added.size(), 2u);
  test_support::check_each_compiled(requests, labels, [](const std::string& label, const jit::CompiledKernel& kernel) {
    EXPECT_FALSE(kernel.cubin.empty()) << label;
    EXPECT_EQ(kernel.arch, "sm_90a") << label;
    EXPECT_EQ(kernel.resources.spill_store_bytes, 0) << label << " spills";
  });
}

TEST(RuntimeMoeSelectWithoutTable, ExpectedRowsPerExpertFollowUniformRouting) {
  auto rows = [](int experts, int top_k, std::int64_t tokens) {
    return expected_rows_per_expert(make_moe_problem(FormatSpec::parse(kMoeFormat), experts, top_k, 256, 256, tokens, "gate-up"));
  };
  EXPECT_EQ(rows(256, 8, 1), 1);      // 8 pairs on 8 experts
  EXPECT_EQ(rows(256, 8, 4096), 128);  // every expert touched: 32768 / 256
  EXPECT_EQ(rows(8, 2, 1), 1);
  EXPECT_EQ(rows(8, 2, 1000), 250);
}

TEST(RuntimeMoeErrors, BadShapesAreOneLineNamingTheField) {
  Runtime runtime({.arch = "sm_90a"});
  auto select = [&](MoeShape shape) { return [&runtime, shape] { runtime.select_moe(kMoeFormat, shape); }; };
  MoeShape shape = deepseek(16);
  shape.top_k = 300;
  EXPECT_EQ(input_error(select(shape)).substr(0, 7), "top_k: ");
  shape = deepseek(16);
  shape.top_k = 0;
  EXPECT_EQ(input_error(select(shape)).substr(0, 7), "top_k: ");
  shape = deepseek(0);
  EXPECT_EQ(input_error(select(shape)).substr(0, 8), "tokens: ");
  shape = deepseek(16, "sideways");
  EXPECT_EQ(input_error(select(shape)), "projection: unknown projection 'sideways' (known: gate-up, down)");
  shape = deepseek(16);
  shape.experts = 0;
  EXPECT_EQ(input_error(select(shape)).substr(0, 9), "experts: ");
  shape = deepseek(16);
  shape.n = 0;
  EXPECT_EQ(input_error(select(shape)).substr(0, 3), "n: ");
  shape = deepseek(16);
  shape.k = 100;  // not a multiple of the 128-wide groups: the format's field
  EXPECT_EQ(input_error(select(shape)), "group size: 128 does not divide K=100 (format w4a16-int4-g128)");
  // A bad call is refused before anything touches a device (this Runtime has none).
  runtime_api::MoeGemmArguments arguments;
  EXPECT_EQ(input_error([&] { runtime.moe_gemm(kMoeFormat, deepseek(0), arguments, nullptr); }).substr(0, 8), "tokens: ");
  EXPECT_EQ(input_error([&] { runtime.moe_gemm(kMoeFormat, deepseek(4), arguments, nullptr); }).substr(0, 10), "topk_ids: ");
  int ids = 0;
  arguments.topk_ids = &ids;
  EXPECT_EQ(input_error([&] { runtime.moe_gemm(kMoeFormat, deepseek(4, "down"), arguments, nullptr); }).substr(0, 14), "topk_weights: ");
}

TEST(RuntimeMoePrepack, EveryExpertPacksLikeTheFamilyBackToBack) {
  Runtime runtime({.arch = "sm_90a"});
  const MoeProblem problem = make_moe_problem(FormatSpec::parse(kMoeFormat), 3, 2, 256, 512, 4, "gate-up");
  const MoeOperands operands = make_moe_operands(problem, problem.make_routing(), 7, /*every_expert=*/true);
  std::vector<runtime_api::HostQuantizedWeights> experts;
  for (const QuantizedWeights& w : operands.experts) experts.push_back({w.codes, w.scales.bits, w.zero_point_bits, w.global_scale});
  const runtime_api::PackedExperts packed = runtime.prepack_moe(kMoeFormat, 256, 512, experts);
  const PackedBuffers expected = mma_moe::prepack_experts(operands.experts, problem.format, 256, 512);
  EXPECT_EQ(packed.format, "w4a16-int4-g128");
  EXPECT_EQ(packed.family, "mma");
  EXPECT_EQ(packed.experts, 3);
  EXPECT_EQ(packed.weights, expected.at("weights"));
  EXPECT_EQ(packed.scales, expected.at("scales"));
  EXPECT_EQ(packed.global_scale, expected.at("global_scale"));
  EXPECT_TRUE(packed.zeros.empty());
  const mma_moe::ExpertStrides strides = mma_moe::expert_strides(problem.format, 256, 512);
  EXPECT_EQ(packed.weight_stride, strides.weights);
  EXPECT_EQ(packed.weights.size(), 3 * strides.weights);
  EXPECT_EQ(packed.scale_stride, strides.scales);
  // Experts differ, so their slices do.
  EXPECT_NE(std::vector<std::uint8_t>(packed.weights.begin(), packed.weights.begin() + static_cast<std::ptrdiff_t>(strides.weights)),
            std::vector<std::uint8_t>(packed.weights.begin() + static_cast<std::ptrdiff_t>(strides.weights),
                                      packed.weights.begin() + static_cast<std::ptrdiff_t>(2 * strides.weights)));

  // A short expert is named with its index; no experts at all is refused.
  std::vector<runtime_api::HostQuantizedWeights> short_one = experts;
  short_one[1].codes = short_one[1].codes.subspan(1);
  const std::string error = input_error([&] { runtime.prepack_moe(kMoeFormat, 256, 512, short_one); });
  EXPECT_EQ(error.substr(0, 12), "experts[1]: ") << error;
  EXPECT_EQ(input_error([&] { runtime.prepack_moe(kMoeFormat, 256, 512, {}); }).substr(0, 9), "experts: ");
}

}  // namespace
}  // namespace qtune::production
