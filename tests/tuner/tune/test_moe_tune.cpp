// The MoE tune on the CPU (docs/moe.md): token buckets and layouts parse with bad input named, a model's moe_expert
// GEMMs become MoE problems, routing files are checked against every problem before anything runs, the MoE provider's
// space is the mma family's curated ranges at the rows per expert the routing gives (every configuration passing
// mma_moe::check), the store keeps MoE problems, results and winners apart from dense ones (schema version 4), and
// run_moe_tune compiles, measures through its evaluator (a double here), stores every result and the fastest verified
// winner, and skips a problem with a winner on a rerun. The wgmma MoE provider ("wgmma-moe") enumerates the wgmma
// family's small token tiles on sm_90 only; --family picks the providers, and a tune over both stores the faster.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "db/moe_store.hpp"
#include "kernels/error.hpp"
#include "kernels/families/mma_moe.hpp"
#include "kernels/families/wgmma_family.hpp"
#include "search/gpu_profile.hpp"
#include "search/space.hpp"
#include "tests/common/expect_error.hpp"
#include "tests/common/temp_dir.hpp"
#include "tuner/providers/moe_provider.hpp"
#include "tuner/tune/moe_tune.hpp"

namespace qtune::tune {
namespace {

using test_support::expect_input_error;
using test_support::TempDir;

TEST(MoeTune, TokenBucketsAndLayoutsParseAndNameTheField) {
  EXPECT_EQ(default_token_buckets(), (std::vector<std::int64_t>{1, 16, 64, 256, 1024, 4096}));
  EXPECT_EQ(parse_token_list("64, 1,16,64", "--tokens"), (std::vector<std::int64_t>{1, 16, 64}));
  expect_input_error([] { parse_token_list("1,0,4", "--tokens"); }, {"--tokens", "T = 0"});
  expect_input_error([] { parse_token_list("-3", "--tokens"); }, {"--tokens", "-3"});
  expect_input_error([] { parse_token_list("many", "--tokens"); }, {"--tokens", "many"});
  expect_input_error([] { parse_token_list("2000000", "--tokens"); }, {"--tokens", "2000000"});
  EXPECT_EQ(parse_layout_list("token-indexed,grouped-masked", "--moe-layout"),
            (std::vector<MoeLayout>{MoeLayout::TokenIndexed, MoeLayout::GroupedMasked}));
  expect_input_error([] { parse_layout_list("scattered", "--moe-layout"); }, {"--moe-layout", "scattered"});
}

TEST(MoeTune, DeepSeekV3ExpertsBecomeMoeProblemsOverTokenBuckets) {
  const search::ModelShapes model = search::model_shapes_by_name("deepseek-v3");
  const std::vector<MoeProblem> problems =
      moe_problems_of_model(model, 1, {FormatSpec::parse("w4a16-int4-g128")}, default_token_buckets(),
                            {MoeLayout::TokenIndexed}, RoutingSpec{});
  ASSERT_EQ(problems.size(), 12u);  // gate-up and down, 6 token buckets each
  std::map<std::string, int> by_projection;
  for (const MoeProblem& problem : problems) {
    EXPECT_EQ(problem.experts, 256);
    EXPECT_EQ(problem.top_k, 8);
    EXPECT_EQ(problem.routing.kind, RoutingKind::Uniform);
    EXPECT_EQ(problem.routing.seed, 1u);
    ++by_projection[std::string(moe_projection_name(problem.projection))];
    if (problem.projection == MoeProjection::GateUp) {
      EXPECT_EQ(problem.n, 4096);
      EXPECT_EQ(problem.k, 7168);
    } else {
      EXPECT_EQ(problem.n, 7168);
      EXPECT_EQ(problem.k, 2048);
    }
  }
  EXPECT_EQ(by_projection["gate-up"], 6);
  EXPECT_EQ(by_projection["down"], 6);
  // A dense model has none.
  EXPECT_TRUE(moe_problems_of_model(search::model_shapes_by_name("llama-3-70b"), 1, {FormatSpec::parse("w4a16-int4-g128")},
                                    default_token_buckets(), {MoeLayout::TokenIndexed}, RoutingSpec{})
                  .empty());
}

// Bad routing files are refused before anything runs, naming the file's field.
TEST(MoeTune, RoutingFilesAreCheckedAgainstEveryProblem) {
  TempDir dir;
  const search::ModelShapes model = search::model_shapes_by_name("mixtral-8x7b");  // 8 experts, top-2
  auto problems_with = [&](const nlohmann::json& document, std::vector<std::int64_t> tokens) {
    const std::string file = (dir / "routing.json").string();
    std::ofstream(file) << document.dump();
    return moe_problems_of_model(model, 1, {FormatSpec::parse("w4a16-int4-g128")}, tokens, {MoeLayout::TokenIndexed},
                                 RoutingSpec::parse("file:" + file));
  };
  const nlohmann::json good = {{"experts", 8}, {"top_k", 2}, {"ids", {{0, 3}, {5, 1}, {3, 7}}}};
  EXPECT_EQ(problems_with(good, {3}).size(), 2u);  // gate-up and down at T = 3
  expect_input_error([&] { problems_with(good, {3, 4}); }, {"ids", "3 rows", "4 tokens"});
  nlohmann::json out_of_range = good;
  out_of_range["ids"][1][1] = 8;
  expect_input_error([&] { problems_with(out_of_range, {3}); }, {"ids[1][1]", "out of range"});
  nlohmann::json too_many = good;
  too_many["top_k"] = 9;
  expect_input_error([&] { problems_with(too_many, {3}); }, {"top_k"});
  nlohmann::json other_experts = good;
  other_experts["experts"] = 16;
  expect_input_error([&] { problems_with(other_experts, {3}); }, {"experts"});
}

// The tune tests' compiler: the build's test kernel cache, two threads.
jit::CompilerSettings test_compiler_settings() {
  jit::CompilerSettings settings;
  settings.cache_directory = std::filesystem::path(QTUNE_BINARY_DIR) / "test-cache";
  settings.threads = 2;
  return settings;
}

MoeProblem small_problem(std::int64_t tokens, MoeProjection projection = MoeProjection::GateUp) {
  return MoeProblem{.format = FormatSpec::parse("w4a16-int4-g128"), .experts = 8, .top_k = 2, .tokens = tokens, .n = 256,
                    .k = 512, .projection = projection, .layout = MoeLayout::TokenIndexed};
}

TEST(MoeProvider, SpaceIsTheCuratedRangesAtTheRowsPerExpert) {
  const ArchLimits limits = search::limits_of_profile(search::gpu_profile_by_name("h200"));
  providers::MoeProvider& provider = providers::moe_provider();
  MoeProblem decode = small_problem(1);
  decode.experts = 256;
  decode.top_k = 8;
  decode.n = 4096;
  decode.k = 7168;
  EXPECT_EQ(providers::rows_per_expert(decode.make_routing()), 1);
  const providers::ProviderSpace small = provider.enumerate(providers::moe_provider_problem(decode), limits, {}, nullptr);
  ASSERT_FALSE(small.configurations.empty());
  for (const std::string& text : small.configurations) {
    const KernelConfig config = KernelConfig::parse(text);
    EXPECT_EQ(config.get("bm"), 16) << text;
    EXPECT_TRUE(mma_moe::check(config, decode, limits).valid) << text;
  }
  MoeProblem prefill = decode;
  prefill.tokens = 4096;  // 32768 pairs over 256 experts: 128 rows each
  EXPECT_EQ(providers::rows_per_expert(prefill.make_routing()), 128);
  const providers::ProviderSpace large = provider.enumerate(providers::moe_provider_problem(prefill), limits, {}, nullptr);
  ASSERT_FALSE(large.configurations.empty());
  for (const std::string& text : large.configurations) EXPECT_GE(KernelConfig::parse(text).get("bm"), 64) << text;
  // A budget spreads the space; named values replace the curated ones.
  providers::SpaceRequest request;
  request.max_configs = 5;
  request.parameter_values["split"] = {1};
  const providers::ProviderSpace narrowed = provider.enumerate(providers::moe_provider_problem(decode), limits, request, nullptr);
  EXPECT_EQ(narrowed.configurations.size(), 5u);
  for (const std::string& text : narrowed.configurations) EXPECT_EQ(KernelConfig::parse(text).get("split"), 1) << text;
  EXPECT_GT(narrowed.total, narrowed.configurations.size());
  // Dense problems are not the MoE provider's.
  providers::ProviderProblem dense;
  dense.gemm = Problem{FormatSpec::parse("w4a16-int4-g128"), 16, 256, 512, false};
  EXPECT_THROW(provider.enumerate(dense, limits, {}, nullptr), UnsupportedError);
}

db::RunInfo test_run() {
  db::RunInfo info;
  info.kind = "tune-moe";
  info.tool_version = "test";
  info.git_sha = "test";
  info.gpu_profile = "h200";
  return info;
}

TEST(MoeStore, ProblemsResultsAndWinnersLiveBesideTheDenseOnes) {
  TempDir dir;
  db::Store store = db::Store::open(dir / "q.db");
  EXPECT_EQ(store.schema_version(), 4);
  const db::MoeProblemKey key = moe_problem_key(small_problem(16));
  const db::MoeProblemId id = db::upsert_moe_problem(store, key);
  EXPECT_EQ(db::upsert_moe_problem(store, key), id);
  db::MoeProblemKey other = key;
  other.layout = "grouped-contiguous";
  EXPECT_NE(db::upsert_moe_problem(store, other), id);
  const auto stored = db::get_moe_problem(store, id);
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(static_cast<const db::MoeProblemKey&>(*stored), key);
  // A dense problem of the same N x K at M = T is another row of another table.
  store.upsert_problem(db::Problem{key.format, 16, 256, 512});
  EXPECT_EQ(store.list_problems().size(), 1u);
  EXPECT_EQ(db::list_moe_problems(store).size(), 2u);

  const db::RunId run = store.insert_run(test_run());
  const db::ConfigId fast = store.upsert_config({db::ConfigKind::Kernel, "mma-moe", R"({"bm":16})", "h"});
  const db::ConfigId wrong = store.upsert_config({db::ConfigKind::Kernel, "mma-moe", R"({"bm":32})", "h"});
  db::MoeResult result{.run = run, .problem = id, .config = fast, .outcome = "measured", .verified = true, .median_us = 5.0};
  db::insert_moe_result(store, result);
  db::insert_moe_result(store, {.run = run, .problem = id, .config = wrong, .outcome = "verification-failed"});
  EXPECT_THROW(db::insert_moe_result(store, {.run = run, .problem = id, .config = fast, .outcome = "measured"}), Error);
  EXPECT_EQ(db::list_moe_results(store, id, "h200").size(), 2u);
  EXPECT_TRUE(db::list_moe_results(store, id, "l40s").empty());
  EXPECT_THROW(db::set_moe_winner(store, {run, id, wrong, 1.0, "fastest"}), Error);  // failed verification
  db::set_moe_winner(store, {run, id, fast, 5.0, "fastest"});
  const auto winner = db::get_moe_winner(store, id, "h200");
  ASSERT_TRUE(winner.has_value());
  EXPECT_EQ(winner->config, fast);
  EXPECT_EQ(db::list_moe_winners(store).size(), 1u);
  EXPECT_TRUE(store.check().empty());
}

TEST(MoeStore, MergeCopiesMoeRowsOnce) {
  TempDir dir;
  {
    db::Store source = db::Store::open(dir / "a.db");
    const db::MoeProblemId id = db::upsert_moe_problem(source, moe_problem_key(small_problem(64)));
    const db::RunId run = source.insert_run(test_run());
    const db::ConfigId config = source.upsert_config({db::ConfigKind::Kernel, "mma-moe", R"({"bm":64})", "h"});
    db::insert_moe_result(source, {.run = run, .problem = id, .config = config, .outcome = "measured", .verified = true,
                                   .median_us = 7.5});
    db::set_moe_winner(source, {run, id, config, 7.5, "fastest"});
  }
  db::Store target = db::Store::open(dir / "b.db");
  db::upsert_moe_problem(target, moe_problem_key(small_problem(1)));  // ids differ between the files
  target.merge(dir / "a.db");
  target.merge(dir / "a.db");  // twice: nothing more
  const std::vector<db::MoeProblemRecord> problems = db::list_moe_problems(target);
  ASSERT_EQ(problems.size(), 2u);
  const db::MoeProblemId merged = problems.at(1).id;
  EXPECT_EQ(problems.at(1).tokens, 64);
  EXPECT_EQ(db::list_moe_results(target, merged, "h200").size(), 1u);
  const auto winner = db::get_moe_winner(target, merged, "h200");
  ASSERT_TRUE(winner.has_value());
  EXPECT_DOUBLE_EQ(winner->median_us, 7.5);
  EXPECT_TRUE(target.check().empty());
}

// The wgmma MoE provider: the wgmma family's parameters, a token tile at and below the rows per expert (16 to 64 for
// T <= 256 on DeepSeek-V3), split-K while blocks are small, every configuration passing mma_moe::check; nothing off sm_90.
TEST(MoeProvider, WgmmaSpaceIsSmallTokenTilesOnHopperOnly) {
  const ArchLimits hopper = search::limits_of_profile(search::gpu_profile_by_name("h200"));
  providers::MoeProvider& provider = providers::wgmma_moe_provider();
  EXPECT_EQ(provider.name(), "wgmma-moe");
  EXPECT_EQ(providers::find_moe_provider("wgmma"), &provider);
  EXPECT_EQ(providers::find_moe_provider("wgmma-moe"), &provider);
  EXPECT_EQ(providers::find_moe_provider("mma"), &providers::moe_provider());
  EXPECT_EQ(providers::find_moe_provider("tma"), &providers::tma_moe_provider());
  EXPECT_EQ(providers::find_moe_provider("bsmma"), nullptr);
  MoeProblem deepseek = small_problem(1);
  deepseek.experts = 256;
  deepseek.top_k = 8;
  deepseek.n = 4096;
  deepseek.k = 7168;
  const std::map<std::int64_t, std::vector<int>> token_tiles = {{1, {16}}, {64, {16}}, {256, {16}}, {1024, {16, 32, 64}}, {4096, {64, 128}}};
  for (const auto& [tokens, tiles] : token_tiles) {
    MoeProblem problem = deepseek;
    problem.tokens = tokens;
    const providers::ProviderSpace space = provider.enumerate(providers::moe_provider_problem(problem), hopper, {}, nullptr);
    ASSERT_FALSE(space.configurations.empty()) << tokens;
    std::set<int> seen_tiles, seen_splits, seen_overlap, seen_gscale;
    for (const std::string& text : space.configurations) {
      const KernelConfig config = KernelConfig::parse(text, "wgmma");
      EXPECT_TRUE(config.params.count("overlap")) << text << ": a wgmma configuration";
      seen_tiles.insert(config.get("bm"));
      seen_splits.insert(config.get("split"));
      seen_overlap.insert(config.get("overlap"));
      seen_gscale.insert(config.get("gscale"));
      const RuleVerdict verdict = mma_moe::check(config, problem, hopper);
      EXPECT_TRUE(verdict.valid) << tokens << " " << text << ": " << verdict.rule;
    }
    EXPECT_EQ(seen_tiles, std::set<int>(tiles.begin(), tiles.end())) << "T = " << tokens;
    // A stage in flight from the 64-row tile on (above 16 rows per expert); group scales on the partial sums (g128)
    // while the tiles are decode-sized.
    EXPECT_EQ(seen_overlap, tokens == 1024 ? (std::set<int>{0, 1}) : tokens > 1024 ? (std::set<int>{1}) : (std::set<int>{0})) << "T = " << tokens;
    EXPECT_EQ(seen_gscale, tokens <= 1024 ? (std::set<int>{0, 1}) : (std::set<int>{0})) << "T = " << tokens;
    if (tokens <= 256) {
      EXPECT_EQ(seen_splits, (std::set<int>{1, 2, 4})) << "T = " << tokens << ": split-K for the small grid";
    }
  }
  // Off Hopper the family runs nothing: every configuration is refused, naming the architecture.
  const ArchLimits ampere = search::limits_of_profile(search::gpu_profile_by_name("a100"));
  const providers::ProviderSpace none = provider.enumerate(providers::moe_provider_problem(deepseek), ampere, {}, nullptr);
  EXPECT_TRUE(none.configurations.empty());
  EXPECT_EQ(none.removed_by_rule.count("format-unsupported-on-arch"), 1u);
}

// The tma MoE provider: the tma family's parameters at the same token tiles and splits as wgmma-moe, no clusters,
// one CTA per unit or persistent, every configuration passing mma_moe::check (multicast of weights refused by name);
// nothing off sm_90.
TEST(MoeProvider, TmaSpaceIsSmallTokenTilesWithoutClustersOnHopperOnly) {
  const ArchLimits hopper = search::limits_of_profile(search::gpu_profile_by_name("h200"));
  providers::MoeProvider& provider = providers::tma_moe_provider();
  EXPECT_EQ(provider.name(), "tma-moe");
  EXPECT_EQ(providers::find_moe_provider("tma-moe"), &provider);
  MoeProblem deepseek = small_problem(1);
  deepseek.format = FormatSpec::parse("w4a8-int4-fp8");
  deepseek.experts = 256;
  deepseek.top_k = 8;
  deepseek.n = 4096;
  deepseek.k = 7168;
  const std::map<std::int64_t, std::vector<int>> token_tiles = {{1, {16}}, {256, {16}}, {1024, {16, 32, 64}}, {4096, {64, 128}}};
  for (const auto& [tokens, tiles] : token_tiles) {
    MoeProblem problem = deepseek;
    problem.tokens = tokens;
    const providers::ProviderSpace space = provider.enumerate(providers::moe_provider_problem(problem), hopper, {}, nullptr);
    ASSERT_FALSE(space.configurations.empty()) << tokens;
    std::set<int> seen_tiles, seen_persistent;
    for (const std::string& text : space.configurations) {
      const KernelConfig config = KernelConfig::parse(text, "tma");
      EXPECT_TRUE(config.params.count("promote")) << text << ": a tma configuration";
      EXPECT_EQ(config.get("cluster"), 1) << text;
      seen_tiles.insert(config.get("bm"));
      seen_persistent.insert(config.get("persistent"));
      const RuleVerdict verdict = mma_moe::check(config, problem, hopper);
      EXPECT_TRUE(verdict.valid) << tokens << " " << text << ": " << verdict.rule;
    }
    EXPECT_EQ(seen_tiles, std::set<int>(tiles.begin(), tiles.end())) << "T = " << tokens;
    if (tokens >= 1024) {
      EXPECT_EQ(seen_persistent, (std::set<int>{0, 1})) << "T = " << tokens << ": a grid of many units";
    }
  }
  // A cluster along M pairs two row blocks, which may belong to two experts: refused by name.
  MoeProblem problem = deepseek;
  problem.tokens = 1024;
  const KernelConfig paired = KernelConfig::parse(
      "bm=64,bn=128,bk=128,stages=4,split=1,raster=0,cluster=2,multicast=2,persistent=0,overlap=0,promote=128,pingpong=0", "tma");
  EXPECT_EQ(mma_moe::check(paired, problem, hopper).rule, "moe-multicast-weights");
  // Off Hopper the family runs nothing: every configuration is refused, naming the architecture.
  const ArchLimits ampere = search::limits_of_profile(search::gpu_profile_by_name("a100"));
  const providers::ProviderSpace none = provider.enumerate(providers::moe_provider_problem(deepseek), ampere, {}, nullptr);
  EXPECT_TRUE(none.configurations.empty());
  EXPECT_EQ(none.removed_by_rule.count("format-unsupported-on-arch"), 1u);
}

// --family picks the MoE providers: auto adds wgmma-moe where the wgmma family runs a format (sm_90, weight-only and
// fp8 activations) and tma-moe where the tma family runs a format with quantized activations (sm_90, W4A8 and W8A8).
TEST(MoeTune, FamilyPicksTheMoeProviders) {
  const std::vector<FormatSpec> w4a16 = {FormatSpec::parse("w4a16-int4-g128")};
  const std::vector<FormatSpec> w4a8 = {FormatSpec::parse("w4a8-int4-fp8")};
  using Names = std::vector<std::string>;
  EXPECT_EQ(moe_providers_for_families("auto", w4a16, 90), (Names{"mma-moe", "wgmma-moe"}));
  EXPECT_EQ(moe_providers_for_families("auto", w4a16, 80), (Names{"mma-moe"}));
  EXPECT_EQ(moe_providers_for_families("auto", w4a8, 90), (Names{"mma-moe", "wgmma-moe", "tma-moe"}));
  EXPECT_EQ(moe_providers_for_families("auto", {FormatSpec::parse("w8a8-int8-ch")}, 90), (Names{"mma-moe", "tma-moe"}));
  EXPECT_EQ(moe_providers_for_families("auto", w4a8, 80), (Names{"mma-moe"}));
  EXPECT_EQ(moe_providers_for_families("wgmma", w4a16, 90), (Names{"wgmma-moe"}));
  EXPECT_EQ(moe_providers_for_families("tma", w4a8, 90), (Names{"tma-moe"}));
  EXPECT_EQ(moe_providers_for_families("tma", w4a16, 90), (Names{"tma-moe"}));  // by name: weight-only formats too
  EXPECT_EQ(moe_providers_for_families("mma,tma,wgmma", w4a16, 90), (Names{"mma-moe", "tma-moe", "wgmma-moe"}));
  expect_input_error([&] { moe_providers_for_families("bsmma", w4a16, 90); }, {"--family", "MoE kernel"});
  expect_input_error([&] { moe_providers_for_families("tma", w4a8, 80); }, {"--family", "tma", "sm_80"});
  expect_input_error([&] { moe_providers_for_families("wgmma", w4a16, 80); }, {"--family", "wgmma", "sm_80"});
}

// --family auto searches each MoE kernel only where it can win, by rows per touched expert: on sm_90 no mma-moe where
// wgmma-moe is the preferred path, tma-moe for W4A8 from 16 rows, widened wgmma-moe up to 64; elsewhere all of them.
TEST(MoeTune, AutoSearchesEachMoeKernelWhereItCanWin) {
  const FormatSpec w4a16 = FormatSpec::parse("w4a16-int4-g128"), w4a8 = FormatSpec::parse("w4a8-int4-fp8");
  const FormatSpec w8a8_fp8 = FormatSpec::parse("w8a8-fp8-ch"), w8a8_int8 = FormatSpec::parse("w8a8-int8-ch");
  const auto covered = [](const FormatSpec& format, std::int64_t rows, int sm = 90) {
    const std::vector<std::string> all = moe_providers_for_families("auto", {format}, sm);
    std::vector<std::string> searched;
    for (const std::string& provider : all) {
      if (moe_auto_tune_covers(provider, all, format, rows, sm)) searched.push_back(provider);
    }
    return searched;
  };
  using Names = std::vector<std::string>;
  for (const std::int64_t rows : {1, 8, 32, 128, 1024}) {
    EXPECT_EQ(covered(w4a16, rows), (Names{"wgmma-moe"})) << rows;
    EXPECT_EQ(covered(w4a16, rows, 80), (Names{"mma-moe"})) << rows;
    EXPECT_EQ(covered(w8a8_int8, rows), (Names{"mma-moe", "tma-moe"})) << rows;  // wgmma does not widen int8
  }
  EXPECT_EQ(covered(w4a8, 1), (Names{"wgmma-moe"}));
  EXPECT_EQ(covered(w4a8, 8), (Names{"wgmma-moe"}));
  EXPECT_EQ(covered(w4a8, 16), (Names{"wgmma-moe", "tma-moe"}));
  EXPECT_EQ(covered(w4a8, 64), (Names{"wgmma-moe", "tma-moe"}));
  EXPECT_EQ(covered(w4a8, 65), (Names{"tma-moe"}));
  EXPECT_EQ(covered(w4a8, 128, 80), (Names{"mma-moe"}));
  // W8A8 fp8: the widened path is not the preferred one (it lost at M = 1 and 16), so mma and tma stay at every size.
  EXPECT_EQ(covered(w8a8_fp8, 1), (Names{"mma-moe", "wgmma-moe", "tma-moe"}));
  EXPECT_EQ(covered(w8a8_fp8, 128), (Names{"mma-moe", "tma-moe"}));
  // With one provider there is nothing to choose between: it covers every problem.
  EXPECT_TRUE(moe_auto_tune_covers("mma-moe", {"mma-moe"}, w4a16, 1, 90));
}

// The whole MoE tune with a double for the worker: every candidate's result is stored, the fastest verified one wins,
// a failed verification never does, and a rerun skips the problem.
TEST(MoeTune, RunStoresEveryResultAndTheFastestVerifiedWinner) {
  TempDir dir;
  const search::GpuProfile profile = search::gpu_profile_by_name("h200");
  const TuneTarget target = target_from_profile(profile);
  MoeTuneOptions options;
  options.problems = {small_problem(16, MoeProjection::Down)};  // token-indexed down: the reduction compiles too
  options.space.parameter_values = {{"bm", {16}}, {"bn", {128}}, {"bk", {128}}, {"wm", {1}}, {"wn", {4}},
                                    {"wk", {1}},  {"stages", {4}}, {"split", {1, 2, 4}}, {"raster", {0}}, {"gscale", {0}}};
  const jit::Compiler compiler(test_compiler_settings());
  MoeTuneServices services;
  services.compiler = &compiler;
  options.baseline = "cublas-grouped-f16";
  std::vector<CandidateJob> jobs;
  services.evaluate = [&jobs](const CandidateJob& job, double) {
    jobs.push_back(job);
    providers::CandidateResult result;
    if (job.provider == "cublas-grouped-f16") {  // faster than every candidate, but a baseline never wins
      result.outcome = providers::CandidateOutcome::Measured;
      result.verified = true;
      result.measurement.median_us = 1.0;
      result.measurement.samples_us = {1.0};
      return result;
    }
    const int split = KernelConfig::parse(job.configuration).get("split");
    if (split == 4) {  // the fastest would be split 4, but it computes wrong results
      result.outcome = providers::CandidateOutcome::VerificationFailed;
      result.verified = true;
      return result;
    }
    result.outcome = providers::CandidateOutcome::Measured;
    result.verified = true;
    result.measurement.median_us = split == 2 ? 3.0 : 4.0;
    result.measurement.samples_us = {result.measurement.median_us};
    return result;
  };
  const MoeTuneReport report = run_moe_tune(options, target, dir / "q.db", services);
  ASSERT_EQ(report.reports.size(), 1u);
  const MoeProblemReport& problem = report.reports.front();
  EXPECT_EQ(problem.candidates, 3u);
  EXPECT_EQ(problem.measured, 2u);
  EXPECT_EQ(problem.invalid, 1u);
  ASSERT_TRUE(problem.winner.has_value());
  EXPECT_EQ(problem.winner->get("split"), 2);
  EXPECT_DOUBLE_EQ(problem.winner_us, 3.0);
  const Routing routing = options.problems.front().make_routing();
  EXPECT_EQ(problem.experts_touched, routing.experts_touched());
  EXPECT_EQ(problem.rows_per_expert, providers::rows_per_expert(routing));
  // The touched experts' int4 weights and f16 group scales at least, and the outputs.
  EXPECT_GT(problem.winner_bytes, static_cast<std::uint64_t>(routing.experts_touched()) * (256 * 512 / 2 + 256 * 512 / 128 * 2));
  ASSERT_TRUE(problem.baseline_us.has_value());
  EXPECT_DOUBLE_EQ(*problem.baseline_us, 1.0);
  ASSERT_EQ(jobs.size(), 4u);
  EXPECT_EQ(jobs.back().provider, "cublas-grouped-f16");
  EXPECT_EQ(jobs.back().configuration, "default");
  jobs.pop_back();
  for (const CandidateJob& job : jobs) {
    EXPECT_EQ(job.provider, "mma-moe");
    EXPECT_EQ(job.problem.kind, providers::ProblemKind::Moe);
    EXPECT_EQ(job.problem.moe.to_string(), options.problems.front().to_string());
    EXPECT_FALSE(job.load.expected_cache_key.empty()) << "the worker loads what the tune compiled";
  }
  {
    db::Store store = db::Store::open(dir / "q.db");
    const std::vector<db::MoeProblemRecord> problems = db::list_moe_problems(store);
    ASSERT_EQ(problems.size(), 1u);
    const std::vector<db::MoeResult> results = db::list_moe_results(store, problems.front().id, "h200");
    ASSERT_EQ(results.size(), 4u);
    EXPECT_EQ(results.back().phase, "baseline");
    EXPECT_EQ(store.get_config(results.back().config)->kind, db::ConfigKind::Baseline);
    const auto winner = db::get_moe_winner(store, problems.front().id, "h200");
    ASSERT_TRUE(winner.has_value());
    EXPECT_DOUBLE_EQ(winner->median_us, 3.0);
    EXPECT_EQ(store.get_config(winner->config)->family, "mma-moe");
  }
  // A rerun keeps the winner and measures nothing.
  jobs.clear();
  const MoeTuneReport again = run_moe_tune(options, target, dir / "q.db", services);
  ASSERT_EQ(again.reports.size(), 1u);
  EXPECT_TRUE(again.reports.front().skipped);
  EXPECT_TRUE(jobs.empty());
}

// A tune over both MoE providers measures each one's candidates under its own name; the faster (wgmma here) is the
// winner, stored as "wgmma-moe", and read back as a wgmma configuration when a rerun skips the problem.
TEST(MoeTune, BothProvidersTheFasterWins) {
  TempDir dir;
  const TuneTarget target = target_from_profile(search::gpu_profile_by_name("h200"));
  MoeTuneOptions options;
  options.problems = {small_problem(16)};
  options.providers = {"mma-moe", "wgmma-moe"};
  options.space.parameter_values = {{"bm", {16}}, {"bn", {128}}, {"bk", {128}},  {"wm", {1}},     {"wn", {4}},
                                    {"wk", {1}},  {"stages", {4}}, {"split", {1, 2}}, {"raster", {0}}, {"overlap", {0}},
                                    {"gscale", {0}}};
  const jit::Compiler compiler(test_compiler_settings());
  MoeTuneServices services;
  services.compiler = &compiler;
  std::map<std::string, int> jobs_of_provider;
  services.evaluate = [&jobs_of_provider](const CandidateJob& job, double) {
    ++jobs_of_provider[job.provider];
    providers::CandidateResult result;
    result.outcome = providers::CandidateOutcome::Measured;
    result.verified = true;
    const KernelConfig config = KernelConfig::parse(job.configuration, job.provider == "wgmma-moe" ? "wgmma" : "mma");
    result.measurement.median_us = (job.provider == "wgmma-moe" ? 2.0 : 3.0) + config.get("split");
    result.measurement.samples_us = {result.measurement.median_us};
    return result;
  };
  const MoeTuneReport report = run_moe_tune(options, target, dir / "q.db", services);
  ASSERT_EQ(report.reports.size(), 1u);
  EXPECT_EQ(jobs_of_provider, (std::map<std::string, int>{{"mma-moe", 2}, {"wgmma-moe", 2}}));
  const MoeProblemReport& problem = report.reports.front();
  EXPECT_EQ(problem.candidates, 4u);
  ASSERT_TRUE(problem.winner.has_value());
  EXPECT_EQ(problem.winner->family, "wgmma");
  EXPECT_EQ(problem.winner->get("split"), 1);
  EXPECT_DOUBLE_EQ(problem.winner_us, 3.0);
  {
    db::Store store = db::Store::open(dir / "q.db");
    const auto winner = db::get_moe_winner(store, db::list_moe_problems(store).front().id, "h200");
    ASSERT_TRUE(winner.has_value());
    EXPECT_EQ(store.get_config(winner->config)->family, "wgmma-moe");
  }
  const MoeTuneReport again = run_moe_tune(options, target, dir / "q.db", services);
  ASSERT_TRUE(again.reports.front().skipped);
  ASSERT_TRUE(again.reports.front().winner.has_value());
  EXPECT_EQ(again.reports.front().winner->family, "wgmma");
  // --family auto: wgmma-moe is Hopper's path for W4A16 at every size, so mma-moe's space is not searched.
  jobs_of_provider.clear();
  options.auto_families = true;
  options.retune = true;
  const MoeTuneReport automatic = run_moe_tune(options, target, dir / "q.db", services);
  EXPECT_EQ(jobs_of_provider, (std::map<std::string, int>{{"wgmma-moe", 2}}));
  EXPECT_EQ(automatic.reports.front().candidates, 2u);
  options.auto_families = false;
  options.retune = false;
  // Only the MoE providers are known.
  options.providers = {"bsmma-moe"};
  expect_input_error([&] { run_moe_tune(options, target, dir / "q.db", services); }, {"providers", "bsmma-moe"});
}

// The heuristic's config (what production runs without a table) is measured first, in phase "heuristic", by the
// provider of its family, also when the narrowed space lacks it; it wins when it is the fastest, so a tuned winner is
// never slower than no table. A heuristic of another family is measured by none, and one that refuses is skipped.
TEST(MoeTune, TheHeuristicIsMeasuredFirstAndWinsWhenFastest) {
  TempDir dir;
  const TuneTarget target = target_from_profile(search::gpu_profile_by_name("h200"));
  MoeTuneOptions options;
  options.problems = {small_problem(16)};
  options.space.parameter_values = {{"bm", {16}}, {"bn", {128}}, {"bk", {128}},     {"wm", {1}},     {"wn", {4}},
                                    {"wk", {1}},  {"stages", {4}}, {"split", {1, 2}}, {"raster", {0}}, {"gscale", {0}}};
  const KernelConfig outside = KernelConfig::parse("bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=3,split=1,raster=0,gscale=0", "mma");
  options.heuristic = [&outside](const MoeProblem&) -> std::optional<KernelConfig> { return outside; };
  const jit::Compiler compiler(test_compiler_settings());
  MoeTuneServices services;
  services.compiler = &compiler;
  std::vector<std::string> measured;
  double heuristic_time = 1.5;  // faster than split 1 (4.0) and split 2 (3.0)
  services.evaluate = [&](const CandidateJob& job, double) {
    measured.push_back(job.configuration);
    const KernelConfig config = KernelConfig::parse(job.configuration, "mma");
    providers::CandidateResult result;
    result.outcome = providers::CandidateOutcome::Measured;
    result.verified = true;
    result.measurement.median_us = config.get("stages") == 3 ? heuristic_time : config.get("split") == 2 ? 3.0 : 4.0;
    result.measurement.samples_us = {result.measurement.median_us};
    return result;
  };
  const MoeTuneReport report = run_moe_tune(options, target, dir / "q.db", services);
  ASSERT_EQ(report.reports.size(), 1u);
  const MoeProblemReport& problem = report.reports.front();
  ASSERT_EQ(measured.size(), 3u);
  EXPECT_EQ(KernelConfig::parse(measured.front(), "mma").get("stages"), 3) << "the heuristic is measured first";
  EXPECT_EQ(problem.candidates, 3u);
  EXPECT_EQ(problem.measured, 3u);
  ASSERT_TRUE(problem.heuristic_us.has_value());
  EXPECT_DOUBLE_EQ(*problem.heuristic_us, 1.5);
  ASSERT_TRUE(problem.winner.has_value());
  EXPECT_EQ(problem.winner->to_string(), outside.to_string());
  EXPECT_DOUBLE_EQ(problem.winner_us, 1.5);
  {
    db::Store store = db::Store::open(dir / "q.db");
    const std::vector<db::MoeResult> results = db::list_moe_results(store, db::list_moe_problems(store).front().id, "h200");
    ASSERT_EQ(results.size(), 3u);
    EXPECT_EQ(std::count_if(results.begin(), results.end(), [](const db::MoeResult& r) { return r.phase == "heuristic"; }), 1);
  }
  // Slower than the search's best: measured all the same, and the search wins.
  options.retune = true;
  heuristic_time = 9.0;
  measured.clear();
  const MoeTuneReport slower = run_moe_tune(options, target, dir / "q.db", services);
  EXPECT_EQ(measured.size(), 3u);
  ASSERT_TRUE(slower.reports.front().heuristic_us.has_value());
  EXPECT_DOUBLE_EQ(*slower.reports.front().heuristic_us, 9.0);
  EXPECT_EQ(slower.reports.front().winner->get("split"), 2);
  // A heuristic of a family no provider of the tune runs, or one that refuses the problem: nothing extra measured.
  const KernelConfig wgmma = KernelConfig::parse("bm=16,bn=128,bk=128,stages=4,split=1,overlap=0,gscale=0", "wgmma");
  options.heuristic = [&wgmma](const MoeProblem&) -> std::optional<KernelConfig> { return wgmma; };
  measured.clear();
  const MoeTuneReport other = run_moe_tune(options, target, dir / "q.db", services);
  EXPECT_EQ(measured.size(), 2u);
  EXPECT_FALSE(other.reports.front().heuristic_us.has_value());
  options.heuristic = [](const MoeProblem&) -> std::optional<KernelConfig> { QTUNE_THROW(UnsupportedError, "no rule"); };
  measured.clear();
  const MoeTuneReport refused = run_moe_tune(options, target, dir / "q.db", services);
  EXPECT_EQ(measured.size(), 2u);
  EXPECT_FALSE(refused.reports.front().heuristic_us.has_value());
}

// The model strategy measures --budget-evals of the compiled space (not the space capped and spread) per problem and
// provider, each bucket with its own seed, stores each under its phase, and keeps the fastest as the winner; an
// unknown strategy is refused naming the field.
TEST(MoeTune, ModelStrategyMeasuresTheBudgetOfTheWholeSpace) {
  TempDir dir;
  const TuneTarget target = target_from_profile(search::gpu_profile_by_name("h200"));
  MoeTuneOptions options;
  options.problems = {small_problem(16), small_problem(64)};
  options.space.parameter_values = {{"bm", {16}}, {"bn", {128}}, {"bk", {64, 128}},   {"wm", {1}},
                                    {"wn", {4}},  {"wk", {1}},   {"stages", {3, 4}}, {"split", {1, 2, 4}}, {"raster", {0}},
                                    {"gscale", {0}}};
  options.strategy = "model";
  options.budget.max_evaluations = 4;
  const jit::Compiler compiler(test_compiler_settings());
  MoeTuneServices services;
  services.compiler = &compiler;
  std::map<std::int64_t, std::vector<std::string>> measured_of_tokens;
  const auto time_at_16 = [](const KernelConfig& config) {
    return 1.0 + std::abs(config.get("split") - 2) + (config.get("stages") == 4 ? 0.0 : 0.5) + (config.get("bk") == 128 ? 0.0 : 0.25);
  };
  services.evaluate = [&measured_of_tokens, &time_at_16](const CandidateJob& job, double) {
    measured_of_tokens[job.problem.moe.tokens].push_back(job.configuration);
    const KernelConfig config = KernelConfig::parse(job.configuration);
    providers::CandidateResult result;
    result.outcome = providers::CandidateOutcome::Measured;
    result.verified = true;
    // split 2, 4 stages, bk 128 is the fastest at every T; time grows with T.
    result.measurement.median_us = double(job.problem.moe.tokens) * time_at_16(config);
    result.measurement.samples_us = {result.measurement.median_us};
    return result;
  };
  const MoeTuneReport report = run_moe_tune(options, target, dir / "q.db", services);
  ASSERT_EQ(report.reports.size(), 2u);
  for (const MoeProblemReport& problem : report.reports) {
    EXPECT_EQ(problem.candidates, 12u);
    EXPECT_EQ(problem.measured, 4u) << "the budget, not the space";
  }
  const std::vector<std::string>& small = measured_of_tokens[16];
  const std::vector<std::string>& large = measured_of_tokens[64];
  ASSERT_EQ(small.size(), 4u);
  ASSERT_EQ(large.size(), 4u);
  EXPECT_NE(small, large) << "each bucket explores with its own seed";
  // The winner is the fastest of what was measured, at full fidelity.
  for (const MoeProblemReport& problem : report.reports) {
    const std::vector<std::string>& measured = measured_of_tokens[problem.problem.tokens];
    double fastest = 1e30;
    for (const std::string& text : measured) fastest = std::min(fastest, double(problem.problem.tokens) * time_at_16(KernelConfig::parse(text)));
    ASSERT_TRUE(problem.winner.has_value());
    EXPECT_DOUBLE_EQ(problem.winner_us, fastest);
  }
  {
    db::Store store = db::Store::open(dir / "q.db");
    for (const db::MoeProblemRecord& problem : db::list_moe_problems(store)) {
      for (const db::MoeResult& result : db::list_moe_results(store, problem.id, "h200")) EXPECT_EQ(result.phase, "model");
    }
  }
  // --budget-fraction: a share of each provider's candidates (0.1 of 12 is 2), the smaller of the two budgets.
  options.retune = true;
  options.budget_fraction = 0.1;
  measured_of_tokens.clear();
  run_moe_tune(options, target, dir / "q.db", services);
  EXPECT_EQ(measured_of_tokens[16].size(), 2u);
  EXPECT_EQ(measured_of_tokens[64].size(), 2u);
  options.strategy = "nosuch";
  expect_input_error([&] { run_moe_tune(options, target, dir / "q.db", services); }, {"strategy"});
}

// The MoE features have one layout for every problem (so one cost model spans the token buckets) and say what the
// routing does: experts touched, skew, empty blocks.
TEST(MoeProvider, CostFeaturesSayHowManyExpertsAndHowSkewed) {
  const ArchLimits limits = search::limits_of_profile(search::gpu_profile_by_name("h200"));
  const KernelConfig config = KernelConfig::parse("bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=1,raster=0", "mma");
  const auto features_of = [&](const MoeProblem& problem) {
    return providers::moe_cost_features(mma_family(), config, problem, problem.make_routing(), limits);
  };
  MoeProblem uniform = small_problem(64);
  uniform.experts = 64;
  uniform.top_k = 4;
  MoeProblem skewed = uniform;
  skewed.routing = RoutingSpec::parse("zipf:2");
  MoeProblem decode = uniform;
  decode.tokens = 1;
  const std::vector<double> a = features_of(uniform), b = features_of(skewed), c = features_of(decode);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), c.size());
  const std::size_t touched = search::tiling_features(Problem{uniform.format, 1, 1, 1, false}, 1, 1, 1).size();
  EXPECT_DOUBLE_EQ(c[touched], std::log2(4.0)) << "one token touches top_k experts";
  EXPECT_GT(a[touched], b[touched]) << "Zipf routing concentrates the pairs on fewer experts";
  EXPECT_GT(b[touched + 1], a[touched + 1]) << "and makes the largest expert larger than the mean";
  EXPECT_GE(a[touched + 1], 1.0);
  for (const auto& features : {a, b, c}) {
    EXPECT_GE(features[touched + 2], 0.0);
    EXPECT_LT(features[touched + 2], 1.0);
  }
  // The token-indexed launch covers pairs + min(E, pairs) x (bm - 1) rows: exact at T = 1 (one pair per expert, one
  // block each), a bound with blocks left empty once experts hold several pairs.
  EXPECT_DOUBLE_EQ(c[touched + 2], 0.0);
  EXPECT_GT(a[touched + 2], 0.0);
}

TEST(MoeTune, ABaselineNamesItsProviderPerProblem) {
  const MoeProblem g128 = small_problem(4);
  EXPECT_EQ(moe_baseline_provider("", g128), "") << "no --moe-baseline: no baseline";
  EXPECT_EQ(moe_baseline_provider("cublas-grouped-f16", g128), "cublas-grouped-f16");
  EXPECT_EQ(moe_baseline_provider("humming", g128), "humming-w4a16-int4-g128");  // a peer: its provider of the format
  EXPECT_EQ(moe_baseline_provider("humming-w4a16-int4-g128", g128), "humming-w4a16-int4-g128");
  EXPECT_EQ(moe_baseline_provider("humming-w4a16-int4-ch", g128), "") << "a provider of another format: no baseline";
}

// A peer's MoE kernel as the baseline: its job (the peer's provider of the problem's format) goes to the baseline
// evaluator, and the row stores the provider as its family and the peer's params; a problem of another format than
// a provider's gets none.
TEST(MoeTune, APeerBaselineIsMeasuredThroughItsEvaluatorAndStoredWithItsParams) {
  TempDir dir;
  const TuneTarget target = target_from_profile(search::gpu_profile_by_name("h200"));
  MoeTuneOptions options;
  options.problems = {small_problem(16, MoeProjection::Down)};  // the candidate of the test above: compiled already
  options.space.parameter_values = {{"bm", {16}}, {"bn", {128}}, {"bk", {128}}, {"wm", {1}}, {"wn", {4}},
                                    {"wk", {1}},  {"stages", {4}}, {"split", {1}}, {"raster", {0}}, {"gscale", {0}}};
  jit::CompilerSettings settings;
  settings.cache_directory = std::filesystem::path(QTUNE_BINARY_DIR) / "test-cache";
  settings.threads = 2;
  const jit::Compiler compiler(settings);
  MoeTuneServices services;
  services.compiler = &compiler;
  services.evaluate = [](const CandidateJob& job, double) {
    EXPECT_EQ(job.provider, "mma-moe") << "baselines go to evaluate_baseline";
    providers::CandidateResult result;
    result.outcome = providers::CandidateOutcome::Measured;
    result.verified = true;
    result.measurement.median_us = 4.0;
    result.measurement.samples_us = {4.0};
    return result;
  };
  std::vector<CandidateJob> baseline_jobs;
  services.evaluate_baseline = [&baseline_jobs](const CandidateJob& job, double) {
    baseline_jobs.push_back(job);
    MoeBaselineResult baseline;
    baseline.result.outcome = providers::CandidateOutcome::Measured;
    baseline.result.verified = true;
    baseline.result.measurement.median_us = 8.0;
    baseline.result.measurement.samples_us = {8.0};
    baseline.params = {{"config", {{"heuristic", {{"block_shape", {16, 128, 128}}}}}}, {"peer_version", "1.0"}};
    return baseline;
  };
  options.baseline = "humming";
  const MoeTuneReport report = run_moe_tune(options, target, dir / "q.db", services);
  ASSERT_EQ(report.reports.size(), 1u);
  const MoeProblemReport& problem = report.reports.front();
  EXPECT_EQ(problem.baseline, "humming-w4a16-int4-g128");
  ASSERT_TRUE(problem.baseline_us.has_value());
  EXPECT_DOUBLE_EQ(*problem.baseline_us, 8.0);
  ASSERT_EQ(baseline_jobs.size(), 1u);
  EXPECT_EQ(baseline_jobs[0].provider, "humming-w4a16-int4-g128");
  EXPECT_EQ(baseline_jobs[0].problem.moe.to_string(), options.problems.front().to_string());
  {
    db::Store store = db::Store::open(dir / "q.db");
    const db::MoeProblemId id = db::list_moe_problems(store).front().id;
    const std::vector<db::MoeResult> results = db::list_moe_results(store, id, "h200");
    ASSERT_EQ(results.size(), 2u);
    EXPECT_EQ(results.back().phase, "baseline");
    const auto config = store.get_config(results.back().config);
    ASSERT_TRUE(config.has_value());
    EXPECT_EQ(config->kind, db::ConfigKind::Baseline);
    EXPECT_EQ(config->family, "humming-w4a16-int4-g128");
    EXPECT_EQ(nlohmann::json::parse(config->params_json).at("peer_version"), "1.0");
    EXPECT_EQ(store.get_config(db::get_moe_winner(store, id, "h200")->config)->family, "mma-moe");
  }
  // A failed baseline says why in the report, and a provider of another format measures nothing.
  services.evaluate_baseline = [](const CandidateJob&, double) {
    MoeBaselineResult baseline;
    baseline.result.outcome = providers::CandidateOutcome::VerificationFailed;
    baseline.result.verified = true;
    baseline.result.message = "FAIL: 12 of 4096 outputs beyond tolerance";
    return baseline;
  };
  options.retune = true;
  const MoeTuneReport failed = run_moe_tune(options, target, dir / "q.db", services);
  EXPECT_FALSE(failed.reports.front().baseline_us.has_value());
  EXPECT_NE(failed.reports.front().baseline_failure.find("12 of 4096"), std::string::npos) << failed.reports.front().baseline_failure;
  baseline_jobs.clear();
  services.evaluate_baseline = [&baseline_jobs](const CandidateJob& job, double) {
    baseline_jobs.push_back(job);
    return MoeBaselineResult{};
  };
  options.baseline = "humming-w4a16-int4-ch";
  const MoeTuneReport other = run_moe_tune(options, target, dir / "q.db", services);
  EXPECT_TRUE(baseline_jobs.empty());
  EXPECT_TRUE(other.reports.front().baseline.empty());
}

}  // namespace
}  // namespace qtune::tune
