// libqtune_runtime's MoE entry point without a GPU (a Runtime for sm_90a): which configuration select_moe picks (the
// table's exact MoE entry and its token ranges, the nearest entry, the heuristic, a table config the MoE rules refuse),
// the launch it sizes, prepack_moe against the family's packing, and one-line InputErrors naming the field.
#include <gtest/gtest.h>

#include "tests/common/temp_dir.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "kernels/families/mma_moe.hpp"
#include "kernels/moe.hpp"
#include "kernels/moe_reference.hpp"
#include "tests/tuner/production/production_test_support.hpp"
#include "tuner/production/qtune_runtime.hpp"
#include "tuner/production/selector.hpp"

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
                            const std::vector<RangeSpec>& ranges, const char* layout = "token-indexed") {
  reports::MoeRules rules;
  rules.format = FormatSpec::parse(kMoeFormat).to_string();
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
  EXPECT_TRUE(mma_moe::check(KernelConfig::parse(narrow.choice.config), problem, ArchLimits::for_sm(90)).valid) << narrow.choice.config;
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
        const RuleVerdict verdict = mma_moe::check(KernelConfig::parse(choice.choice.config), problem, ArchLimits::for_sm(90));
        EXPECT_TRUE(verdict.valid) << format << " T=" << tokens << " " << choice.choice.config << ": " << verdict.rule;
        EXPECT_EQ(choice.launch_rows % choice.block_rows, 0);
      }
    }
  }
  // Decode spreads one row over each touched expert: 16-row blocks; 4096 tokens give 128 rows per expert: taller ones.
  EXPECT_EQ(runtime.select_moe(kMoeFormat, deepseek(1)).block_rows, 16);
  EXPECT_GE(runtime.select_moe(kMoeFormat, deepseek(4096)).block_rows, 64);
  // At T = 1 the 8 touched experts' tiles are few: the K split stays; at T = 4096 there are plenty: no split.
  EXPECT_EQ(runtime.select_moe(kMoeFormat, deepseek(4096)).choice.params.at("split"), 1);
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
