#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "kernels/error.hpp"
#include "search/humming_space.hpp"
#include "tests/common/expect_error.hpp"

namespace qtune::search {
namespace {

Problem problem_of(const std::string& format, int64_t m, int64_t n = 8192, int64_t k = 8192) {
  return Problem{FormatSpec::parse(format), m, n, k};
}

// What Humming's Sm90Heuristics.get_config1 returns for f16 activations, N = K = 8192 (humming/tune/sm90.py):
// M = 1 takes an 8-token block and doubles bk; M = 4096 takes bm = 176 and multicasts A.
const nlohmann::json kSm90HeuristicM1 = nlohmann::json::parse(R"({
  "block_shape": [8, 256, 128], "warp_shape": [8, 32, 64], "use_stream_k": true, "use_f16_accum": false,
  "num_stages": 4, "use_warp_spec": true, "use_tma": true, "use_mbarrier": true})");
const nlohmann::json kSm90HeuristicM4096 = nlohmann::json::parse(R"({
  "block_shape": [176, 256, 64], "warp_shape": [176, 32, 64], "use_stream_k": true, "use_f16_accum": false,
  "num_stages": 4, "use_warp_spec": true, "use_tma": true, "use_mbarrier": true, "multi_cast_size_a": 2})");
// Sm80Heuristics' base config for 16-bit activations after get_config's M adjustment at M = 4096, on 108 SMs.
const nlohmann::json kSm80HeuristicM4096 = nlohmann::json::parse(R"({
  "block_shape": [128, 256, 64], "warp_shape": [64, 64, 64], "use_stream_k": true, "use_f16_accum": false,
  "num_sms": 108, "num_stages": 4, "num_ctas_per_sm": 1, "num_write_splits": 1})");

KernelConfig valid_sm90_config() { return HummingSpace::from_tuning_config(kSm90HeuristicM1); }

TEST(HummingLayer, MapsQtuneFormatsToHummingsLayerConfig) {
  const HummingLayer w4a16 = humming_layer_for(FormatSpec::parse("w4a16-int4-ch"), 8192, 8192);
  EXPECT_EQ(w4a16.a_dtype, "float16");
  EXPECT_EQ(w4a16.b_dtype, "uint4");  // symmetric int4 is stored with an offset of 8
  EXPECT_EQ(w4a16.c_dtype, "float16");
  EXPECT_EQ(w4a16.bs_dtype, "float16");
  EXPECT_EQ(w4a16.weight_scale_type, "channel");
  EXPECT_EQ(w4a16.weight_scale_group_size, 0);

  const HummingLayer g128 = humming_layer_for(FormatSpec::parse("w4a16-int4-g128-zp"), 4096, 4096);
  EXPECT_EQ(g128.weight_scale_type, "group");
  EXPECT_EQ(g128.weight_scale_group_size, 128);
  EXPECT_TRUE(g128.has_zero_point);
  EXPECT_FALSE(g128.is_fp_zero_point);

  const HummingLayer w4a8 = humming_layer_for(FormatSpec::parse("w4a8-int4-fp8:scale=f16"), 8192, 8192);
  EXPECT_EQ(w4a8.a_dtype, "float8e4m3");
  EXPECT_EQ(w4a8.b_dtype, "uint4");
  EXPECT_EQ(w4a8.input_scale_group_size, 0);

  const HummingLayer int8 = humming_layer_for(FormatSpec::parse("w8a8-int8-ch:scale=f16"), 8192, 8192);
  EXPECT_EQ(int8.a_dtype, "int8");
  EXPECT_EQ(int8.b_dtype, "int8");

  const HummingLayer block = humming_layer_for(FormatSpec::parse("w8a8-fp8-block128x128"), 7168, 7168);
  EXPECT_EQ(block.b_dtype, "float8e4m3");
  EXPECT_EQ(block.bs_dtype, "float32");
  EXPECT_EQ(block.weight_scale_type, "block");
  EXPECT_EQ(block.weight_scale_group_size_n, 128);
  EXPECT_EQ(block.input_scale_group_size, 128);

  const nlohmann::json json = w4a16.to_json();
  EXPECT_EQ(json.at("shape_n"), 8192);
  EXPECT_EQ(json.at("b_dtype"), "uint4");
  EXPECT_EQ(json.at("num_experts"), 0);
}

TEST(HummingLayer, RefusesWhatHummingCannotRunSayingWhatToChange) {
  const auto refused = [](const std::string& format, const std::string& expected) {
    try {
      humming_layer_for(FormatSpec::parse(format), 8192, 8192);
      ADD_FAILURE() << format << " was accepted";
    } catch (const UnsupportedError& error) {
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
    }
  };
  refused("w4a8-int4-fp8", "use scale=f16");  // its default weight scale is f32
  refused("w8a8-fp8-tensor:scale=f16", "per token or per group");
  refused("w6a8-int6-fp8:scale=f16", "exactly only up to 5 bits");  // e4m3 holds integers of at most 5 bits
}

TEST(HummingLayer, ArchitecturesFollowHummingsSupportMatrix) {
  const HummingLayer int4 = humming_layer_for(FormatSpec::parse("w4a4-int4-ch:scale=f16"), 8192, 8192);
  std::string why;
  EXPECT_TRUE(humming_runs_on(int4, 80));
  EXPECT_FALSE(humming_runs_on(int4, 90, &why));
  EXPECT_NE(why.find("int4"), std::string::npos);
  const HummingLayer fp8 = humming_layer_for(FormatSpec::parse("w4a8-int4-fp8:scale=f16"), 8192, 8192);
  EXPECT_FALSE(humming_runs_on(fp8, 86, &why));
  EXPECT_NE(why.find("sm_89"), std::string::npos);
  EXPECT_TRUE(humming_runs_on(fp8, 90));
}

TEST(HummingSpace, HummingsOwnHeuristicConfigsAreValidPointsAndRoundTrip) {
  const ArchLimits h200 = ArchLimits::for_sm(90);
  for (const auto& [tuning, m] : {std::pair{kSm90HeuristicM1, int64_t{1}}, std::pair{kSm90HeuristicM4096, int64_t{4096}}}) {
    const KernelConfig config = HummingSpace::from_tuning_config(tuning);
    const RuleVerdict verdict = HummingSpace::check(config, problem_of("w4a16-int4-ch", m), h200);
    EXPECT_TRUE(verdict.valid) << verdict.rule << ": " << verdict.detail;
    nlohmann::json expected = tuning;
    expected.erase("use_f16_accum");  // the space accumulates in f32 always, so it writes no such field
    for (const char* defaulted : {"num_ctas_per_sm", "num_write_splits", "multi_cast_size_a", "multi_cast_size_b"}) {
      if (!expected.contains(defaulted)) expected[defaulted] = 1;
    }
    EXPECT_EQ(HummingSpace::tuning_config(config), expected);
  }
  const KernelConfig sm80 = HummingSpace::from_tuning_config(kSm80HeuristicM4096);
  EXPECT_EQ(sm80.params.at("warps_m"), 2);
  EXPECT_EQ(sm80.params.at("sms"), 108);
  const RuleVerdict verdict = HummingSpace::check(sm80, problem_of("w4a16-int4-ch", 4096), ArchLimits::for_sm(80));
  EXPECT_TRUE(verdict.valid) << verdict.rule << ": " << verdict.detail;
  EXPECT_EQ(HummingSpace::tuning_config(sm80).at("num_sms"), 108);
  EXPECT_FALSE(HummingSpace::tuning_config(valid_sm90_config()).contains("num_sms"));  // 0: every SM
}

TEST(HummingSpace, FromTuningConfigRefusesWhatTheSpaceCannotHoldNamingTheField) {
  // One field changed from a valid dict, and the field the error names.
  const std::vector<std::pair<std::string, nlohmann::json>> changes = {
      {"use_f16_accum", true},                  // the space accumulates in f32
      {"use_tma_c", false},                     // TMA is switched for every operand at once
      {"warp_shape", {2, 32, 64}},              // four warps along M
      {"block_shape", {8, 256}},                // not three numbers
      {"use_mbarrier", false},                  // mbarriers go with TMA and warp specialization
      {"swizzle", 3},                           // no such field
      {"num_stages", "4"},                      // not a number
  };
  for (const auto& [field, value] : changes) {
    nlohmann::json tuning = kSm90HeuristicM1;
    tuning[field] = value;
    test_support::expect_input_error([&] { HummingSpace::from_tuning_config(tuning); }, {"tuning_config." + field});
  }
}

TEST(HummingSpace, EachRuleRemovesWhatItNames) {
  const ArchLimits h200 = ArchLimits::for_sm(90);
  struct Case {
    std::string parameter;
    int value;
    std::string rule;
    int64_t m = 1;
    std::string format = "w4a16-int4-ch";
  };
  const std::vector<Case> cases = {
      {"bm", 12, "block-shape"},
      {"bn", 32, "block-shape"},
      {"bk", 96, "block-shape"},
      {"warps_m", 4, "block-shape"},
      {"wn", 128, "warp-shape"},
      {"bm", 16, "bm-exceeds-m"},
      {"bn", 512, "threads-per-block"},  // 16 warps along N x 2 along K, plus 128 producer threads
      {"wn", 16, "warp-shape-for-activation"},
      {"wk", 128, "warp-shape-for-activation"},
      {"bm", 136, "mma-shape", 256},  // 136 / 2 warps = 68 tokens per warp
      {"stages", 2, "warp-spec-stages"},
      {"stages", 9, "stages"},
      {"multicast_b", 3, "multicast"},
      {"write_splits", 2, "write-splits"},
      {"ctas_per_sm", 5, "ctas-per-sm"},
      {"sms", 500, "sms"},
      {"stages", 8, "smem-per-block", 256},
  };
  for (const Case& test : cases) {
    KernelConfig config = valid_sm90_config();
    if (test.rule == "mma-shape") config.params["warps_m"] = 2;
    if (test.rule == "smem-per-block") config.params["bm"] = 256;
    config.params[test.parameter] = test.value;
    const RuleVerdict verdict = HummingSpace::check(config, problem_of(test.format, test.m), h200);
    EXPECT_EQ(verdict.rule, test.rule) << test.parameter << "=" << test.value << ": " << verdict.detail;
    EXPECT_FALSE(verdict.detail.empty());
  }
}

TEST(HummingSpace, ArchitectureAndClusterRules) {
  KernelConfig config = valid_sm90_config();
  const Problem problem = problem_of("w4a16-int4-ch", 1);
  EXPECT_EQ(HummingSpace::check(config, problem, ArchLimits::for_sm(80)).rule, "sm90-feature");

  config.params["multicast_a"] = 2;
  ArchLimits odd = ArchLimits::for_sm(90);
  odd.sm_count = 131;  // an odd grid cannot split into clusters of two
  EXPECT_EQ(HummingSpace::check(config, problem, odd).rule, "multicast-cluster");
  config.params["tma"] = 0;
  config.params["warp_spec"] = 0;
  EXPECT_EQ(HummingSpace::check(config, problem, ArchLimits::for_sm(90)).rule, "multicast");
  config = valid_sm90_config();
  config.params["multicast_a"] = 2;
  EXPECT_EQ(HummingSpace::check(config, problem_of("w4a16-int4-ch", 1, 256 * 3, 8192), ArchLimits::for_sm(90)).rule,
            "multicast-divides-n");

  config = valid_sm90_config();
  config.params["bn"] = 64;
  config.params["wn"] = 32;
  EXPECT_EQ(HummingSpace::check(config, problem, ArchLimits::for_sm(90)).rule, "wgmma-bn-4x-wn");
  config.params["warp_spec"] = 0;
  config.params["tma"] = 0;
  EXPECT_TRUE(HummingSpace::check(config, problem, ArchLimits::for_sm(80)).valid);  // mma.sync has no 4x rule

  // A partial last N tile, as Humming's sm90 rules run bn = 128 on N = 576 (multicast still pairs whole tiles).
  EXPECT_TRUE(HummingSpace::check(valid_sm90_config(), problem_of("w4a16-int4-ch", 1, 8192 + 64, 8192), ArchLimits::for_sm(90)).valid);
  EXPECT_FALSE(HummingSpace::enumerate(problem_of("w4a16-int4-ch", 1, 576, 7168), ArchLimits::for_sm(90)).candidates.empty())
      << "DeepSeek-V3's kv_a_proj (N = 576) has no bn dividing it that a wgmma warp shape allows";
  EXPECT_EQ(HummingSpace::check(valid_sm90_config(), problem_of("w4a4-int4-ch:scale=f16", 1), ArchLimits::for_sm(90)).rule,
            "format-unsupported-on-arch");
  EXPECT_EQ(HummingSpace::check(valid_sm90_config(), problem_of("w4a8-int4-fp8", 1), ArchLimits::for_sm(90)).rule,
            "format-unsupported");
  KernelConfig missing = valid_sm90_config();
  missing.params.erase("stages");
  EXPECT_EQ(HummingSpace::check(missing, problem, ArchLimits::for_sm(90)).rule, "missing-parameter");
}

// Humming copies one activation-scale row per load thread (128 with warp specialization): a block of quantized
// activations taller than that leaves rows unscaled (NaN rows from row 128 of each block on the H200, Humming's own
// W4A8 pick at M = 1024). 16-bit activations have no such scales; without warp specialization every math thread loads.
TEST(HummingSpace, QuantizedActivationBlocksFitTheScaleLoadThreads) {
  const ArchLimits h200 = ArchLimits::for_sm(90);
  const Problem w4a8 = problem_of("w4a8-int4-fp8:scale=f16", 1024);
  KernelConfig config = valid_sm90_config();  // bn 256, wn 32: 8 math warps and the producer warpgroup
  config.params["wk"] = 64;                   // an fp8 warp shape
  config.params["bm"] = 128;
  EXPECT_TRUE(HummingSpace::check(config, w4a8, h200).valid) << HummingSpace::check(config, w4a8, h200).detail;
  for (int bm : {136, 160, 176, 256}) {
    config.params["bm"] = bm;
    const RuleVerdict verdict = HummingSpace::check(config, w4a8, h200);
    EXPECT_EQ(verdict.rule, "activation-scale-rows") << "bm=" << bm << ": " << verdict.detail;
    EXPECT_NE(verdict.detail.find("128 load threads"), std::string::npos) << verdict.detail;
  }
  config.params["bm"] = 176;
  config.params["stages"] = 3;  // f16 activations: no activation scales to load (3 stages of 176 rows fit)
  const RuleVerdict f16 = HummingSpace::check(config, problem_of("w4a16-int4-ch", 1024), h200);
  EXPECT_TRUE(f16.valid) << f16.rule << ": " << f16.detail;
  for (int64_t m : {1024, 4096}) {
    for (const KernelConfig& candidate : HummingSpace::enumerate(problem_of("w4a8-int4-fp8:scale=f16", m), h200).candidates) {
      EXPECT_LE(candidate.params.at("bm"), 128) << candidate.to_string();
    }
  }
}

TEST(HummingSpace, SharedMemoryFollowsHummingsEstimate) {
  const HummingLayer layer = humming_layer_for(FormatSpec::parse("w4a16-int4-ch"), 8192, 8192);
  KernelConfig config = valid_sm90_config();
  config.params["bm"] = 16;
  config.params["bk"] = 128;
  config.params["stages"] = 4;
  // A stage: 16 x 128 f16 activations (4096 B) + 256 x 128 int4 weights (16384 B); one channel-scale row of 256 f16.
  EXPECT_EQ(HummingSpace::shared_memory_bytes(config, layer), (4096 + 16384) * 4 + 512);

  const HummingLayer grouped = humming_layer_for(FormatSpec::parse("w4a8-int4-g128-int8:scale=f16"), 8192, 8192);
  config.params["bk"] = 256;
  config.params["stages"] = 2;
  // int8 activations (16 x 256 B), two groups of 256 f16 scales per stage, one f32 scale per token.
  EXPECT_EQ(HummingSpace::shared_memory_bytes(config, grouped), (16 * 256 + 256 * 256 / 2 + 2 * 256 * 2) * 2 + 16 * 4);
}

TEST(HummingSpace, CuratedSpaceIsAFewHundredValidPointsHoldingHummingsOwnChoice) {
  const ArchLimits h200 = ArchLimits::for_sm(90);
  for (int64_t m : {1, 16, 64, 256, 1024, 4096}) {
    const Problem problem = problem_of("w4a16-int4-ch", m);
    const SpaceEnumeration space = HummingSpace::enumerate(problem, h200);
    size_t removed = 0;
    for (const auto& [rule, count] : space.removed_by_rule) removed += count;
    EXPECT_EQ(space.candidates.size() + removed, space.total) << "M=" << m;
    EXPECT_GE(space.candidates.size(), 20u) << "M=" << m;
    EXPECT_LE(space.candidates.size(), 1000u) << "M=" << m;
    for (const KernelConfig& config : space.candidates) {
      ASSERT_TRUE(HummingSpace::check(config, problem, h200).valid) << config.to_string();
      EXPECT_LE(config.params.at("bm"), std::max<int64_t>((m + 7) / 8 * 8, 8));
    }
  }
  const auto holds = [&](const nlohmann::json& tuning, int64_t m) {
    const SpaceEnumeration space = HummingSpace::enumerate(problem_of("w4a16-int4-ch", m), h200);
    const KernelConfig wanted = HummingSpace::from_tuning_config(tuning);
    return std::find(space.candidates.begin(), space.candidates.end(), wanted) != space.candidates.end();
  };
  EXPECT_TRUE(holds(kSm90HeuristicM1, 1));
  EXPECT_TRUE(holds(kSm90HeuristicM4096, 4096));
}

TEST(HummingSpace, CostFeaturesDescribeTheTilingForTheModels) {
  const ArchLimits h200 = ArchLimits::for_sm(90);
  const KernelConfig config = HummingSpace::from_tuning_config(kSm90HeuristicM4096);  // bm 176, bn 256
  const std::vector<double> features = HummingSpace::cost_features(config, problem_of("w4a16-int4-ch", 4096), h200);
  const std::vector<std::string> names = HummingSpace::cost_feature_names();
  ASSERT_EQ(features.size(), names.size());
  ASSERT_EQ(names.size(), 8 + HummingSpace::parameter_space().size());
  const auto feature = [&](const std::string& name) {
    return features[static_cast<size_t>(std::find(names.begin(), names.end(), name) - names.begin())];
  };
  // 24 M tiles (4096 / 176, rounded up) x 32 N tiles = 768 tiles over 132 SMs.
  EXPECT_DOUBLE_EQ(feature("log2_m"), 12.0);
  EXPECT_DOUBLE_EQ(feature("log2_tiles"), std::log2(768.0));
  EXPECT_DOUBLE_EQ(feature("waves"), 768.0 / 132.0);
  EXPECT_DOUBLE_EQ(feature("wave_efficiency"), 768.0 / (6 * 132.0));
  EXPECT_DOUBLE_EQ(feature("m_tile_efficiency"), 4096.0 / (24 * 176.0));
  EXPECT_DOUBLE_EQ(feature("log2_bm"), std::log2(177.0));
  EXPECT_DOUBLE_EQ(feature("log2_multicast_a"), std::log2(3.0));
}

TEST(HummingSpace, FullSpaceCountsEveryPointAndStaysEnumerable) {
  size_t product = 1;
  for (const ParameterDomain& domain : HummingSpace::parameter_space()) product *= domain.values.size();
  const ArchLimits h200 = ArchLimits::for_sm(90);
  const SpaceEnumeration small = HummingSpace::enumerate(problem_of("w4a16-int4-ch", 1), h200, HummingSpaceKind::Full);
  EXPECT_EQ(small.total, product);
  EXPECT_GT(small.removed_by_rule.at("bm-exceeds-m"), 0u);
  const SpaceEnumeration large = HummingSpace::enumerate(problem_of("w4a16-int4-ch", 4096), h200, HummingSpaceKind::Full);
  EXPECT_GT(large.candidates.size(), small.candidates.size());
  EXPECT_LT(large.candidates.size(), 200000u);  // what the strategies are handed as one list
  const SpaceEnumeration refused =
      HummingSpace::enumerate(problem_of("w4a4-int4-ch:scale=f16", 16), h200, HummingSpaceKind::Curated);
  EXPECT_TRUE(refused.candidates.empty());
  EXPECT_EQ(refused.removed_by_rule.at("format-unsupported-on-arch"), refused.total);
}

}  // namespace
}  // namespace qtune::search
