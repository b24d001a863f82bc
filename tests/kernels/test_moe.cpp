// MoE problems: routing generators and files, the layouts engines use, and the CPU reference against a naive loop.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/codec.hpp"
#include "kernels/error.hpp"
#include "kernels/families/mma_layout.hpp"
#include "kernels/families/mma_moe.hpp"
#include "kernels/moe.hpp"
#include "kernels/moe_layout.hpp"
#include "kernels/moe_reference.hpp"
#include "tests/common/expect_error.hpp"
#include "tests/common/temp_dir.hpp"

namespace qtune {
namespace {

using nlohmann::json;
using test_support::expect_input_error;

RoutingSpec spec_of(RoutingKind kind, uint64_t seed, double exponent = 1.2) {
  RoutingSpec spec;
  spec.kind = kind;
  spec.seed = seed;
  spec.zipf_exponent = exponent;
  return spec;
}

// ------------------------------------------------------------------------------------------------ routing

TEST(MoeRouting, GeneratedRoutingsAreValidAndDeterministicBySeed) {
  for (RoutingKind kind : {RoutingKind::Uniform, RoutingKind::Zipf, RoutingKind::Balanced}) {
    SCOPED_TRACE(static_cast<int>(kind));
    const Routing a = generate_routing(spec_of(kind, 7), 16, 4, 300);
    validate_routing(a);  // ids distinct per token and in range, weights positive
    EXPECT_EQ(a.ids.size(), 1200u);
    const Routing b = generate_routing(spec_of(kind, 7), 16, 4, 300);
    EXPECT_EQ(a.ids, b.ids);
    EXPECT_EQ(a.weights, b.weights);
    const Routing c = generate_routing(spec_of(kind, 8), 16, 4, 300);
    EXPECT_NE(a.ids, c.ids);
    for (int64_t t = 0; t < a.tokens; ++t) {
      float sum = 0;
      for (int s = 0; s < a.top_k; ++s) sum += a.weights[static_cast<size_t>(t * a.top_k + s)];
      EXPECT_NEAR(sum, 1.0f, 1e-5f);
    }
  }
}

TEST(MoeRouting, BalancedGivesEveryExpertTheSameCountWithinOne) {
  const Routing routing = generate_routing(spec_of(RoutingKind::Balanced, 3), 12, 5, 37);  // 185 pairs over 12 experts
  const auto counts = routing.pairs_per_expert();
  EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}), 185);
  for (int64_t count : counts) {
    EXPECT_GE(count, 185 / 12);
    EXPECT_LE(count, 185 / 12 + 1);
  }
  EXPECT_EQ(routing.experts_touched(), 12);
}

TEST(MoeRouting, UniformCountsStayNearTheMean) {
  const Routing routing = generate_routing(spec_of(RoutingKind::Uniform, 11), 8, 2, 8000);  // 2000 pairs per expert
  for (int64_t count : routing.pairs_per_expert()) {
    EXPECT_GT(count, 1800);
    EXPECT_LT(count, 2200);
  }
}

TEST(MoeRouting, ZipfSkewsTowardsTheMostPopularExpertsAndZeroExponentIsUniform) {
  const Routing skewed = generate_routing(spec_of(RoutingKind::Zipf, 5, 1.5), 64, 1, 20000);
  auto counts = skewed.pairs_per_expert();
  std::sort(counts.rbegin(), counts.rend());
  // Top-1 Zipf(1.5) over 64: the hottest expert gets 1 / H(64, 1.5) = 42.3% of the pairs, the 2nd 15.0%.
  EXPECT_NEAR(static_cast<double>(counts[0]) / 20000, 0.423, 0.015);
  EXPECT_NEAR(static_cast<double>(counts[1]) / 20000, 0.150, 0.015);
  EXPECT_LT(counts[63], 200);
  // The hot experts are a seeded permutation, not always expert 0.
  std::set<int> hottest;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const auto c = generate_routing(spec_of(RoutingKind::Zipf, seed, 2.0), 64, 1, 500).pairs_per_expert();
    hottest.insert(static_cast<int>(std::max_element(c.begin(), c.end()) - c.begin()));
  }
  EXPECT_GT(hottest.size(), 1u);
  // Exponent 0: every expert equally likely.
  for (int64_t count : generate_routing(spec_of(RoutingKind::Zipf, 5, 0.0), 8, 3, 8000).pairs_per_expert()) {
    EXPECT_NEAR(static_cast<double>(count) / 24000, 1.0 / 8, 0.01);
  }
  // Skew with top_k > 1 still gives distinct ids per token.
  validate_routing(generate_routing(spec_of(RoutingKind::Zipf, 9, 3.0), 10, 10, 50));
}

TEST(MoeRouting, SpecTextRoundTrips) {
  for (const char* text : {"uniform", "balanced", "zipf:1.2", "zipf:0.75", "file:trace.json"}) {
    EXPECT_EQ(RoutingSpec::parse(text).to_string(), text);
  }
  EXPECT_EQ(RoutingSpec::parse("ZIPF").zipf_exponent, 1.2);
  EXPECT_EQ(RoutingSpec::parse("zipf", 42).seed, 42u);
  expect_input_error([] { RoutingSpec::parse("zipf:-1", 1, "--routing"); }, {"--routing", "'-1'"});
  expect_input_error([] { RoutingSpec::parse("zipf:x"); }, {"routing", "Zipf exponent"});
  expect_input_error([] { RoutingSpec::parse("file:"); }, {"routing", "needs a path"});
  expect_input_error([] { RoutingSpec::parse("random"); }, {"routing", "unknown routing 'random'", "balanced"});
  EXPECT_EQ(parse_moe_layout("Grouped-Masked"), MoeLayout::GroupedMasked);
  EXPECT_EQ(parse_moe_projection("gate_up"), MoeProjection::GateUp);
  expect_input_error([] { parse_moe_layout("packed", "--layout"); }, {"--layout", "'packed'", "token-indexed"});
  expect_input_error([] { parse_moe_projection("up"); }, {"projection", "'up'"});
}

TEST(MoeRouting, FileRoundTripsAndNormalizesWeights) {
  const json document = {{"experts", 4}, {"top_k", 2}, {"ids", {{0, 3}, {2, 1}, {3, 0}}}, {"weights", {{1, 3}, {0.5, 0.5}, {2, 2}}}};
  const Routing routing = routing_from_json(document, "trace.json");
  EXPECT_EQ(routing.tokens, 3);
  EXPECT_EQ(routing.ids, (std::vector<int32_t>{0, 3, 2, 1, 3, 0}));
  EXPECT_EQ(routing.weights, (std::vector<float>{0.25f, 0.75f, 0.5f, 0.5f, 0.5f, 0.5f}));
  const Routing again = routing_from_json(routing_to_json(routing), "again");
  EXPECT_EQ(again.ids, routing.ids);
  EXPECT_EQ(again.weights, routing.weights);
  // Without weights they are generated from the seed.
  json no_weights = document;
  no_weights.erase("weights");
  const Routing generated = routing_from_json(no_weights, "trace.json", 5);
  EXPECT_EQ(generated.weights, generate_router_weights(3, 2, 5));

  test_support::TempDir dir;
  const auto file = dir.write("trace.json", document.dump());
  MoeProblem problem{.format = FormatSpec::parse("w4a16-int4-g128"), .experts = 4, .top_k = 2, .tokens = 3, .n = 64,
                     .k = 128};
  problem.routing = RoutingSpec::parse("file:" + file.string());
  EXPECT_EQ(problem.make_routing().ids, routing.ids);
  problem.tokens = 4;  // a file of the wrong length
  expect_input_error([&] { problem.make_routing(); }, {file.string(), "field 'ids'", "3 rows", "4 tokens"});
  problem.tokens = 3;
  problem.top_k = 1;
  expect_input_error([&] { problem.make_routing(); }, {"field 'top_k'"});
  problem.top_k = 2;
  problem.experts = 5;
  expect_input_error([&] { problem.make_routing(); }, {"field 'experts'", "4 experts"});
}

TEST(MoeRouting, BadRoutingFilesNameTheField) {
  const json good = {{"experts", 4}, {"top_k", 2}, {"ids", {{0, 3}, {2, 1}}}};
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"top_k above experts", [](json& j) { j["top_k"] = 5; }, {"field 'top_k'", "1 to 4"}},
      {"top_k zero", [](json& j) { j["top_k"] = 0; }, {"field 'top_k'"}},
      {"experts missing", [](json& j) { j.erase("experts"); }, {"field 'experts'", "missing"}},
      {"id out of range", [](json& j) { j["ids"][1][0] = 4; }, {"field 'ids[1][0]'", "out of range 0 to 3"}},
      {"negative id", [](json& j) { j["ids"][0][1] = -1; }, {"field 'ids[0][1]'", "out of range"}},
      {"duplicate id", [](json& j) { j["ids"][1] = {2, 2}; }, {"field 'ids[1][1]'", "appears twice"}},
      {"short row", [](json& j) { j["ids"][0] = {1}; }, {"field 'ids[0]'", "top_k (2)"}},
      {"id not a number", [](json& j) { j["ids"][0][0] = "a"; }, {"field 'ids[0][0]'", "integer"}},
      {"no tokens", [](json& j) { j["ids"] = json::array(); }, {"field 'ids'", "non-empty"}},
      {"weights of another length", [](json& j) { j["weights"] = {{1, 1}}; }, {"field 'weights'", "one row per row"}},
      {"zero weight", [](json& j) { j["weights"] = {{1, 0}, {1, 1}}; }, {"field 'weights[0][1]'", "positive"}},
      {"unknown field", [](json& j) { j["topk"] = 2; }, {"field 'topk'", "unknown"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    json broken = good;
    c.edit(broken);
    std::vector<std::string> expected = c.expected;
    expected.push_back("trace.json");
    expect_input_error([&] { routing_from_json(broken, "trace.json"); }, expected);
  }
  expect_input_error([] { routing_from_json(json::array(), "x.json"); }, {"x.json", "JSON object"});
  test_support::TempDir dir;
  expect_input_error([&] { load_routing_file(dir.write("bad.json", "{\"experts\": 4,")); }, {"bad.json"});
}

TEST(MoeProblem, BadProblemsNameTheField) {
  const MoeProblem problem{.format = FormatSpec::parse("w4a16-int4-g128"), .experts = 8, .top_k = 2, .tokens = 16,
                           .n = 256, .k = 256};
  problem.validate();
  auto broken = [&](auto edit, std::vector<std::string> expected) {
    MoeProblem copy = problem;
    edit(copy);
    expect_input_error([&] { copy.validate(); }, expected);
    expect_input_error([&] { copy.make_routing(); }, expected);
  };
  broken([](MoeProblem& p) { p.top_k = 9; }, {"top_k", "1 to experts (8)", "9"});
  broken([](MoeProblem& p) { p.tokens = 0; }, {"tokens", "got 0"});
  broken([](MoeProblem& p) { p.experts = 0; }, {"experts"});
  broken([](MoeProblem& p) { p.experts = 4096; p.top_k = 64; p.tokens = 1 << 20; p.k = 128; p.n = 16; }, {"tokens", "pairs"});
  broken([](MoeProblem& p) { p.k = 100; }, {"group size"});  // g128 does not divide 100
  broken([](MoeProblem& p) { p.n = 0; }, {"n:"});
  broken([](MoeProblem& p) { p.routing.kind = RoutingKind::Zipf; p.routing.zipf_exponent = NAN; }, {"routing", "Zipf"});
  expect_input_error([] { generate_routing(RoutingSpec{}, 4, 5, 1); }, {"top_k"});
  expect_input_error([] { generate_routing(RoutingSpec{}, 4, 2, 0); }, {"tokens"});
}

TEST(MoeProblem, JsonRoundTripAndRows) {
  MoeProblem problem{.format = FormatSpec::parse("w4a8-int4-fp8"), .experts = 256, .top_k = 8, .tokens = 64, .n = 7168,
                     .k = 2048, .projection = MoeProjection::Down, .layout = MoeLayout::GroupedContiguous};
  problem.routing = RoutingSpec::parse("zipf:1.5", 9);
  const MoeProblem back = MoeProblem::from_json(problem.to_json());
  EXPECT_EQ(back.to_string(), problem.to_string());
  EXPECT_EQ(back.routing.seed, 9u);
  EXPECT_EQ(problem.to_string(), "w4a8-int4-fp8 moe down E=256 top_k=8 T=64 n=7168 k=2048 grouped-contiguous zipf:1.5");
  EXPECT_EQ(problem.input_rows(), 512);
  EXPECT_EQ(problem.output_rows(), 64);
  json bad = problem.to_json();
  bad["top_k"] = 300;
  expect_input_error([&] { MoeProblem::from_json(bad); }, {"top_k"});
  bad = problem.to_json();
  bad["layout"] = "dense";
  expect_input_error([&] { MoeProblem::from_json(bad); }, {"layout", "'dense'"});
}

// ------------------------------------------------------------------------------------------------ layouts

// Routings with empty experts: 10 experts of which pairs only reach a few.
Routing routing_with_empty_experts() {
  Routing routing;
  routing.experts = 10;
  routing.top_k = 2;
  routing.tokens = 7;
  routing.ids = {3, 7, 7, 3, 0, 3, 3, 9, 7, 0, 3, 7, 9, 3};  // experts 1, 2, 4, 5, 6, 8 get nothing
  routing.weights.assign(14, 0.5f);
  validate_routing(routing);
  return routing;
}

void expect_layout_invariants(const MoeRowMap& map, const Routing& routing) {
  const int block = map.block_m;
  ASSERT_EQ(map.rows() % block, 0);
  ASSERT_EQ(static_cast<int64_t>(map.block_expert.size()), map.rows() / block);
  ASSERT_EQ(map.row_expert.size(), map.row_pair.size());
  // Every pair appears exactly once, on a row of its own expert.
  std::vector<int> seen(static_cast<size_t>(routing.pairs()), 0);
  for (int64_t r = 0; r < map.rows(); ++r) {
    const int32_t pair = map.row_pair[static_cast<size_t>(r)];
    if (pair < 0) {
      EXPECT_EQ(map.row_expert[static_cast<size_t>(r)], -1);
      continue;
    }
    ++seen[static_cast<size_t>(pair)];
    EXPECT_EQ(map.row_expert[static_cast<size_t>(r)], routing.expert_of(pair));
    // No block straddles experts: a row's expert is its block's.
    EXPECT_EQ(map.block_expert[static_cast<size_t>(r / block)], routing.expert_of(pair)) << "row " << r;
  }
  for (int64_t p = 0; p < routing.pairs(); ++p) EXPECT_EQ(seen[static_cast<size_t>(p)], 1) << "pair " << p;
  // Padding rule: within each block, an expert's pairs come first (ascending), padding after; no block is padding
  // only unless the layout marks it -1.
  for (int64_t b = 0; b < map.rows() / block; ++b) {
    bool padding_seen = false;
    int32_t previous = -1;
    int live = 0;
    for (int64_t r = b * block; r < (b + 1) * block; ++r) {
      const int32_t pair = map.row_pair[static_cast<size_t>(r)];
      if (pair < 0) {
        padding_seen = true;
        continue;
      }
      EXPECT_FALSE(padding_seen) << "pair after padding in block " << b;
      EXPECT_GT(pair, previous);
      previous = pair;
      ++live;
    }
    EXPECT_EQ(live > 0, map.block_expert[static_cast<size_t>(b)] >= 0) << "block " << b;
  }
  // Empty experts have no blocks.
  const auto counts = routing.pairs_per_expert();
  for (int e = 0; e < routing.experts; ++e) {
    const auto blocks = std::count(map.block_expert.begin(), map.block_expert.end(), e);
    EXPECT_EQ(blocks, (counts[static_cast<size_t>(e)] + block - 1) / block) << "expert " << e;
  }
}

TEST(MoeLayout, TokenIndexedFollowsMoeAlignBlockSize) {
  const Routing routing = routing_with_empty_experts();
  const TokenIndexedLayout layout = token_indexed_layout(routing, 4);
  // Expert 0: pairs 4, 9; expert 3: 0, 3, 5, 6, 10, 13; expert 7: 1, 2, 8, 11; expert 9: 7, 12. Sentinel 14.
  const std::vector<int32_t> expected = {4, 9, 14, 14, 0, 3, 5, 6, 10, 13, 14, 14, 1, 2, 8, 11, 7, 12, 14, 14};
  EXPECT_EQ(layout.sorted_token_ids, expected);
  EXPECT_EQ(layout.expert_ids, (std::vector<int32_t>{0, 3, 3, 7, 9}));
  EXPECT_EQ(layout.num_tokens_post_padded, 20);
  EXPECT_EQ(layout.sentinel, 14);
  expect_layout_invariants(row_map(layout, routing), routing);
}

TEST(MoeLayout, GroupedContiguousPadsEveryExpertToTheBlock) {
  const Routing routing = routing_with_empty_experts();
  const GroupedContiguousLayout layout = grouped_contiguous_layout(routing, 4);
  EXPECT_EQ(layout.rows, 20);
  EXPECT_EQ(layout.expert_first_row, (std::vector<int64_t>{0, 4, 4, 4, 12, 12, 12, 12, 16, 16, 20}));
  EXPECT_EQ(std::vector<int32_t>(layout.row_expert.begin(), layout.row_expert.begin() + 6),
            (std::vector<int32_t>{0, 0, -1, -1, 3, 3}));
  expect_layout_invariants(row_map(layout, routing), routing);
}

TEST(MoeLayout, GroupedMaskedHasOneSlabPerExpert) {
  const Routing routing = routing_with_empty_experts();
  const GroupedMaskedLayout layout = grouped_masked_layout(routing, 4);
  EXPECT_EQ(layout.max_rows, 8);  // the largest count, 6, rounded up to the block
  EXPECT_EQ(layout.counts, (std::vector<int32_t>{2, 0, 0, 6, 0, 0, 0, 4, 0, 2}));
  EXPECT_EQ(layout.row_pair.size(), 80u);
  const MoeRowMap map = row_map(layout, routing);
  expect_layout_invariants(map, routing);
  EXPECT_EQ(grouped_masked_layout(routing, 4, 13).max_rows, 16);  // a requested capacity, rounded to the block
}

TEST(MoeLayout, InvariantsHoldForGeneratedRoutingsAndBlockSizes) {
  for (RoutingKind kind : {RoutingKind::Uniform, RoutingKind::Zipf, RoutingKind::Balanced}) {
    for (int64_t tokens : {1, 16, 300}) {
      for (int block : {1, 16, 64}) {
        SCOPED_TRACE(std::to_string(static_cast<int>(kind)) + " T=" + std::to_string(tokens) + " bm=" + std::to_string(block));
        const Routing routing = generate_routing(spec_of(kind, 4, 2.0), 32, 4, tokens);
        for (MoeLayout layout : {MoeLayout::TokenIndexed, MoeLayout::GroupedContiguous, MoeLayout::GroupedMasked}) {
          expect_layout_invariants(moe_row_map(layout, routing, block), routing);
        }
      }
    }
  }
  expect_input_error([] { token_indexed_layout(routing_with_empty_experts(), 0); }, {"block_m"});
}

TEST(MoeLayout, GatherScatterAndReduce) {
  const Routing routing = routing_with_empty_experts();
  const MoeRowMap map = moe_row_map(MoeLayout::TokenIndexed, routing, 4);
  std::vector<float> tokens(static_cast<size_t>(routing.tokens * 2));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<float>(i);
  const auto gathered = gather_rows(map, MoeProjection::GateUp, routing, tokens, 2);
  ASSERT_EQ(gathered.size(), 40u);
  EXPECT_EQ(gathered[0], 4.0f);  // row 0 holds pair 4 = token 2
  EXPECT_EQ(gathered[1], 5.0f);
  EXPECT_EQ(gathered[4], 0.0f);  // padding
  const auto pairs = scatter_rows(map, gathered, routing.pairs(), 2);
  for (int64_t p = 0; p < routing.pairs(); ++p) EXPECT_EQ(pairs[static_cast<size_t>(p * 2)], static_cast<float>((p / 2) * 2));
  Routing weighted = routing;
  for (size_t i = 0; i < weighted.weights.size(); ++i) weighted.weights[i] = i % 2 ? 0.25f : 0.75f;
  std::vector<float> per_pair(static_cast<size_t>(routing.pairs()), 0.0f);
  for (size_t i = 0; i < per_pair.size(); ++i) per_pair[i] = static_cast<float>(i);
  const auto reduced = reduce_top_k(weighted, per_pair, 1);
  EXPECT_EQ(reduced[3], 0.75f * 6 + 0.25f * 7);
}

// ------------------------------------------------------------------------------------------------ reference

double naive_weight(const QuantizedWeights& w, int64_t row, int64_t col) {
  const double value = decode(w.format.weight, w.codes[static_cast<size_t>(row * w.k + col)]);
  const double zero = w.zero_points.empty() ? 0.0 : w.zero_points[static_cast<size_t>(w.scales.index(row, col))];
  return (value - zero) * w.scales.at(row, col) * w.global_scale;
}

double naive_activation(const QuantizedActivations& a, int64_t row, int64_t col) {
  const size_t i = static_cast<size_t>(row * a.k + col);
  if (!a.format.activation_is_quantized()) return a.values[i];
  return static_cast<double>(decode(element_type_of(a.format.activation), a.codes[i])) * a.scales.at(row, col) * a.global_scale;
}

// The MoE definition of kernels/moe.hpp, a loop over tokens and slots.
std::vector<double> naive_moe(const MoeProblem& problem, const MoeOperands& operands) {
  const Routing& routing = operands.routing;
  const int64_t out_rows = problem.output_rows();
  std::vector<double> c(static_cast<size_t>(out_rows * problem.n), 0.0);
  for (int64_t t = 0; t < routing.tokens; ++t) {
    for (int s = 0; s < routing.top_k; ++s) {
      const int64_t pair = t * routing.top_k + s;
      const QuantizedWeights& w = operands.experts[static_cast<size_t>(routing.expert_of(pair))];
      const int64_t in_row = problem.projection == MoeProjection::GateUp ? t : pair;
      const int64_t out_row = problem.projection == MoeProjection::GateUp ? pair : t;
      const double weight = problem.projection == MoeProjection::GateUp ? 1.0 : routing.weights[static_cast<size_t>(pair)];
      for (int64_t j = 0; j < problem.n; ++j) {
        double sum = 0.0;
        for (int64_t p = 0; p < problem.k; ++p) sum += naive_activation(operands.activations, in_row, p) * naive_weight(w, j, p);
        c[static_cast<size_t>(out_row * problem.n + j)] += weight * sum;
      }
    }
  }
  return c;
}

double relative_difference(const std::vector<float>& out, const std::vector<double>& ref) {
  double difference = 0, norm = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    difference += (out[i] - ref[i]) * (out[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(difference / norm);
}

TEST(MoeReference, MatchesNaiveLoopForBothProjections) {
  // Formats with every activation scaling: none (f16), per token (fp8, int8), per tensor, per group.
  for (const char* spec : {"w4a16-int4-g128", "w4a8-int4-fp8", "w8a8-fp8-ch", "w8a8-int8-tensor", "w8a8-fp8-block128x128",
                           "w4a16-int4-g128-zp-bf16"}) {
    for (MoeProjection projection : {MoeProjection::GateUp, MoeProjection::Down}) {
      SCOPED_TRACE(std::string(spec) + " " + std::string(moe_projection_name(projection)));
      MoeProblem problem{.format = FormatSpec::parse(spec), .experts = 6, .top_k = 2, .tokens = 9, .n = 128, .k = 256,
                         .projection = projection};
      problem.routing = spec_of(RoutingKind::Zipf, 3, 1.5);
      const Routing routing = problem.make_routing();
      const MoeOperands operands = make_moe_operands(problem, routing, 21);
      const std::vector<double> expected = naive_moe(problem, operands);
      ReferenceOptions options;
      options.accumulation = Accumulation::F64;
      const MoeReferenceResult result = reference_moe(problem, operands, options);
      ASSERT_EQ(result.unrounded.size(), expected.size());
      EXPECT_LT(relative_difference(result.unrounded, expected), 1e-6);
      // The rounded output is the unrounded one rounded to the output type, and passes the format's tolerance.
      const bool bf16 = problem.format.output == OutputType::BF16;
      for (size_t i = 0; i < result.output.size(); ++i) {
        ASSERT_EQ(result.output[i], bf16 ? round_to_bf16(result.unrounded[i]) : round_to_f16(result.unrounded[i]));
      }
      EXPECT_LT(relative_error(result.output, result.unrounded), default_tolerance(problem.format) / 4);
      EXPECT_EQ(result.pair_unrounded.size(), static_cast<size_t>(routing.pairs() * problem.n));
    }
  }
}

TEST(MoeReference, EmptyExpertsAreNeverReadAndWrongOperandsAreRefused) {
  MoeProblem problem{.format = FormatSpec::parse("w4a16-int4-g128"), .experts = 10, .top_k = 2, .tokens = 7, .n = 64,
                     .k = 128};
  MoeOperands operands = make_moe_operands(problem, routing_with_empty_experts(), 5);
  EXPECT_EQ(operands.experts[1].n, 0);  // untouched experts are not even quantized
  EXPECT_EQ(operands.experts[3].n, 64);
  const MoeReferenceResult result = reference_moe(problem, operands);
  EXPECT_EQ(result.output.size(), 14u * 64u);
  // A kernel's rows in any layout map back to the same pairs: gathering the reference through a layout and
  // scattering it back is the identity on every pair.
  for (MoeLayout layout : {MoeLayout::TokenIndexed, MoeLayout::GroupedContiguous, MoeLayout::GroupedMasked}) {
    const MoeRowMap map = moe_row_map(layout, operands.routing, 16);
    std::vector<float> kernel_rows(static_cast<size_t>(map.rows() * 64), NAN);  // poisoned: padding rows stay NaN
    for (int64_t r = 0; r < map.rows(); ++r) {
      const int32_t pair = map.row_pair[static_cast<size_t>(r)];
      if (pair >= 0) std::copy_n(result.output.begin() + pair * 64, 64, kernel_rows.begin() + r * 64);
    }
    EXPECT_EQ(scatter_rows(map, kernel_rows, 14, 64), result.output);
  }
  MoeOperands wrong = operands;
  wrong.experts[3] = {};
  expect_input_error([&] { reference_moe(problem, wrong); }, {"experts[3]"});
  wrong = operands;
  wrong.activations.m = 3;
  expect_input_error([&] { reference_moe(problem, wrong); }, {"activations"});
  problem.top_k = 3;
  expect_input_error([&] { reference_moe(problem, operands); }, {"routing"});
}


// ------------------------------------------------------------------------------------------------ mma MoE host side

MoeProblem small_problem(const char* spec, MoeLayout layout, MoeProjection projection) {
  return MoeProblem{.format = FormatSpec::parse(spec), .experts = 10, .top_k = 2, .tokens = 7, .n = 128, .k = 256,
                    .projection = projection, .layout = layout};
}

TEST(MmaMoe, TokenIndexedLaunchRowsBoundThePaddedRows) {
  for (RoutingKind kind : {RoutingKind::Uniform, RoutingKind::Zipf, RoutingKind::Balanced}) {
    for (int64_t tokens : {1, 16, 64, 300}) {
      for (int bm : {16, 64}) {
        MoeProblem problem = small_problem("w4a16-int4-g128", MoeLayout::TokenIndexed, MoeProjection::GateUp);
        problem.experts = 32;
        problem.top_k = 4;
        problem.tokens = tokens;
        problem.routing = spec_of(kind, 2, 2.0);
        const Routing routing = problem.make_routing();
        const MoeRowMap map = moe_row_map(MoeLayout::TokenIndexed, routing, bm);
        const int64_t rows = mma_moe::launch_rows(problem, bm, map);
        EXPECT_GE(rows, map.rows());
        EXPECT_EQ(rows % bm, 0);
        EXPECT_EQ(mma_moe::launch_rows(problem, bm, moe_row_map(MoeLayout::TokenIndexed, generate_routing(spec_of(kind, 9, 2.0), 32, 4, tokens), bm)),
                  rows) << "the bound does not depend on the routing";
      }
    }
  }
}

TEST(MmaMoe, ExpertsArePackedBackToBackAndEmptyOnesPoisoned) {
  const MoeProblem problem = small_problem("w4a16-int4-g128-zp", MoeLayout::TokenIndexed, MoeProjection::GateUp);
  const MoeOperands operands = make_moe_operands(problem, routing_with_empty_experts(), 3);
  const PackedBuffers packed = mma_moe::prepack_experts(operands.experts, problem.format, problem.n, problem.k);
  const mma_moe::ExpertStrides strides = mma_moe::expert_strides(problem.format, problem.n, problem.k);
  ASSERT_EQ(packed.at("weights").size(), 10 * strides.weights);
  ASSERT_EQ(packed.at("zeros").size(), 10 * strides.zeros);
  ASSERT_EQ(packed.at("global_scale").size(), 40u);
  const PackedBuffers expert3 = mma::prepack_weights(operands.experts[3], mma::device_format(problem.format));
  EXPECT_TRUE(std::equal(expert3.at("weights").begin(), expert3.at("weights").end(), packed.at("weights").begin() + 3 * strides.weights));
  EXPECT_TRUE(std::equal(expert3.at("scales").begin(), expert3.at("scales").end(), packed.at("scales").begin() + 3 * strides.scales));
  // Expert 1 has no pairs: every byte 0xFF.
  EXPECT_TRUE(std::all_of(packed.at("scales").begin() + strides.scales, packed.at("scales").begin() + 2 * strides.scales,
                          [](uint8_t b) { return b == 0xFF; }));
  std::vector<QuantizedWeights> wrong = operands.experts;
  wrong[3] = quantize_weights(problem.format, random_normal(64 * 256, 1), 64, 256);
  expect_input_error([&] { mma_moe::prepack_experts(wrong, problem.format, problem.n, problem.k); }, {"experts[3]"});
}

// The two steps a caller that keeps packed experts between buckets uses give prepack_experts' bytes exactly.
TEST(MmaMoe, ExpertsPackedOneByOneAndPlacedEqualPrepackExperts) {
  const MoeProblem problem = small_problem("w4a16-int4-g128-zp", MoeLayout::TokenIndexed, MoeProjection::GateUp);
  const MoeOperands operands = make_moe_operands(problem, routing_with_empty_experts(), 3);
  std::vector<PackedBuffers> each(operands.experts.size());
  std::vector<const PackedBuffers*> placed(operands.experts.size(), nullptr);
  for (size_t e = 0; e < operands.experts.size(); ++e) {
    if (operands.experts[e].n == 0) continue;
    each[e] = mma_moe::prepack_expert(operands.experts[e], problem.format, problem.n, problem.k, e);
    placed[e] = &each[e];
  }
  ASSERT_EQ(std::count(placed.begin(), placed.end(), nullptr), 6) << "experts 1, 2, 4, 5, 6 and 8 get no pair";
  EXPECT_EQ(mma_moe::place_experts(placed, problem.format, problem.n, problem.k),
            mma_moe::prepack_experts(operands.experts, problem.format, problem.n, problem.k));
  const QuantizedWeights wrong = quantize_weights(problem.format, random_normal(64 * 256, 1), 64, 256);
  expect_input_error([&] { mma_moe::prepack_expert(wrong, problem.format, problem.n, problem.k, 7); }, {"experts[7]"});
  PackedBuffers short_scales = each[0];
  short_scales.at("scales").pop_back();
  placed[0] = &short_scales;
  EXPECT_THROW(mma_moe::place_experts(placed, problem.format, problem.n, problem.k), Error);
}

TEST(MmaMoe, LayoutTablesBuffersAndArguments) {
  const Routing routing = routing_with_empty_experts();
  const KernelConfig config = KernelConfig::parse("bm=16,bn=64,bk=128,wm=1,wn=2,wk=1,stages=3,split=2,raster=0");
  for (MoeLayout layout : {MoeLayout::TokenIndexed, MoeLayout::GroupedContiguous, MoeLayout::GroupedMasked}) {
    for (MoeProjection projection : {MoeProjection::GateUp, MoeProjection::Down}) {
      SCOPED_TRACE(std::string(moe_layout_name(layout)) + " " + std::string(moe_projection_name(projection)));
      const MoeProblem problem = small_problem("w8a8-fp8-ch", layout, projection);
      const MoeRowMap map = moe_row_map(layout, routing, 16);
      const int64_t rows = mma_moe::launch_rows(problem, 16, map);
      const PackedBuffers tables = mma_moe::pack_layout(layout, routing, 16);
      std::map<std::string, uint64_t> addresses;
      uint64_t next = 0x1000;
      for (const BufferSpec& buffer : mma_moe::buffers(config, problem, rows)) {
        addresses[buffer.name] = next;
        next += 0x100000;
        if (const auto found = tables.find(buffer.name); found != tables.end()) {
          EXPECT_LE(found->second.size(), buffer.bytes) << buffer.name;  // the tables fit their buffers
        }
      }
      EXPECT_EQ(addresses.count("reduced"), layout == MoeLayout::TokenIndexed && projection == MoeProjection::Down ? 1u : 0u);
      EXPECT_EQ(addresses.count("workspace"), 1u);
      const KernelArguments arguments = mma_moe::pack_arguments(config, problem, rows, addresses);
      EXPECT_EQ(arguments.offsets.size(), 2u);
      const LaunchGeometry geometry = mma_moe::launch_geometry(config, problem, rows);
      EXPECT_EQ(geometry.grid[0], (128 / 64) * (rows / 16) * 2);
      addresses.erase("a");
      expect_input_error([&] { mma_moe::pack_arguments(config, problem, rows, addresses); }, {"'a'"});
    }
  }
  const MoeProblem problem = small_problem("w4a16-int4-g128", MoeLayout::TokenIndexed, MoeProjection::GateUp);
  expect_input_error([&] { mma_moe::launch_geometry(config, problem, 24); }, {"launch rows", "bm=16"});
}

TEST(MmaMoe, RulesAndInstantiationSource) {
  const ArchLimits h100 = ArchLimits::for_sm(90);
  const MoeProblem problem = small_problem("w4a16-int4-g128", MoeLayout::TokenIndexed, MoeProjection::Down);
  EXPECT_TRUE(mma_moe::check(KernelConfig::parse("bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=1,raster=0"), problem, h100).valid);
  // A 64-row block is allowed whatever the rows per expert (no bm-over-m), but needs a thread per row.
  EXPECT_TRUE(mma_moe::check(KernelConfig::parse("bm=64,bn=128,bk=128,wm=2,wn=2,wk=1,stages=3,split=1,raster=0"), problem, h100).valid);
  EXPECT_EQ(mma_moe::check(KernelConfig::parse("bm=64,bn=32,bk=128,wm=1,wn=1,wk=1,stages=3,split=1,raster=0"), problem, h100).rule,
            "moe-threads-rows");
  EXPECT_EQ(mma_moe::check(KernelConfig::parse("bm=16,bn=96,bk=128,wm=1,wn=2,wk=1,stages=3,split=1,raster=0"), problem, h100).rule,
            "parameter-domain");
  MoeProblem bad = problem;
  bad.top_k = 11;
  EXPECT_EQ(mma_moe::check(KernelConfig::parse("bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=1,raster=0"), bad, h100).rule,
            "moe-problem");
  const std::string source = mma_moe::instantiation_source(
      KernelConfig::parse("bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=1,raster=0"), problem, "sm_90a");
  EXPECT_NE(source.find("qtune_mma_moe_gemm"), std::string::npos);
  EXPECT_NE(source.find("qd::kMoeTokenIndexed, qd::kMoeDown"), std::string::npos);
  EXPECT_NE(mma_moe::reduce_instantiation_source(problem.format, "sm_80").find("qtune_moe_reduce_top_k"), std::string::npos);
  const MoeProblem fp8 = small_problem("w8a8-fp8-ch", MoeLayout::GroupedMasked, MoeProjection::GateUp);
  EXPECT_THROW(mma_moe::instantiation_source(KernelConfig::parse("bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=1,raster=0"),
                                             fp8, "sm_80"),
               UnsupportedError);
}

}  // namespace
}  // namespace qtune
