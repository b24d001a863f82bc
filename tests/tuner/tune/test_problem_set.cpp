// The tuner's problem set and sharding: order, parsing, and a disjoint, covering partition from every source of
// a shard index (flag, Slurm, Kubernetes).
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <set>
#include <string>

#include "kernels/error.hpp"
#include "search/model_shapes.hpp"
#include "tuner/tune/problem_set.hpp"

namespace qtune::tune {
namespace {

EnvironmentLookup fake_environment(std::map<std::string, std::string> values) {
  return [values](const char* name) -> std::optional<std::string> {
    auto found = values.find(name);
    if (found == values.end()) return std::nullopt;
    return found->second;
  };
}

std::vector<Problem> llama_problems() {
  const auto model = search::model_shapes_by_name("llama-3-70b");
  return build_problem_set({FormatSpec::parse("w4a16-int4-ch"), FormatSpec::parse("w8a16-int8-ch")},
                           search::distinct_shapes(model, 1), {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192});
}

TEST(ProblemSet, IsSortedDeduplicatedAndComplete) {
  const std::vector<Problem> problems = build_problem_set(
      {FormatSpec::parse("w8a16-int8-ch"), FormatSpec::parse("w4a16-int4-ch"), FormatSpec::parse("w4a16-int4-ch")},
      {{8192, 4096}, {4096, 4096}, {4096, 4096}}, {16, 1});
  ASSERT_EQ(problems.size(), 2u * 2u * 2u);
  EXPECT_EQ(problem_key(problems.front()), "w4a16-int4-ch m=1 n=4096 k=4096");
  EXPECT_EQ(problem_key(problems[1]), "w4a16-int4-ch m=16 n=4096 k=4096");
  EXPECT_EQ(problem_key(problems.back()), "w8a16-int8-ch m=16 n=8192 k=4096");
  std::set<std::string> keys;
  for (const Problem& problem : problems) keys.insert(problem_key(problem));
  EXPECT_EQ(keys.size(), problems.size());
}

TEST(ProblemSet, RefusesAShapeTheFormatCannotDescribe) {
  // Group size 128 does not divide K = 100.
  EXPECT_THROW(build_problem_set({FormatSpec::parse("w4a16-int4-g128")}, {{4096, 100}}, {1}), InputError);
}

TEST(FormatList, SplitsSpecsButKeepsTheirOwnOptions) {
  const std::vector<FormatSpec> formats =
      parse_format_list("w4a16-int4-ch,w4a4-fp4-g16+t:scale=e4m3,act-scale=g16+t,act-scale-type=e4m3;w8a16-int8-ch");
  ASSERT_EQ(formats.size(), 3u);
  EXPECT_EQ(formats[0], FormatSpec::parse("w4a16-int4-ch"));
  EXPECT_EQ(formats[1], FormatSpec::parse("w4a4-nvfp4"));
  EXPECT_EQ(formats[2], FormatSpec::parse("w8a16-int8-ch"));
  EXPECT_THROW(parse_format_list("w4a16-int4-ch,,w8a16-int8-ch"), InputError);
  EXPECT_THROW(parse_format_list("not-a-format"), InputError);
}

TEST(ShapeList, ParsesPairsAndNamesTheField) {
  const auto shapes = parse_shape_list("4096,4096; 8192,28672");
  ASSERT_EQ(shapes.size(), 2u);
  EXPECT_EQ(shapes[1].n, 8192);
  EXPECT_EQ(shapes[1].k, 28672);
  try {
    parse_shape_list("4096");
    FAIL() << "a single number is not a shape";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("--shape"), std::string::npos) << error.what();
  }
  EXPECT_THROW(parse_shape_list("4096,0"), InputError);
  EXPECT_THROW(parse_shape_list("4096,4096,1"), InputError);
}

TEST(Shard, ParsesIOfN) {
  EXPECT_EQ(parse_shard("2/8"), (Shard{2, 8}));
  EXPECT_EQ(parse_shard("0/1"), (Shard{0, 1}));
  EXPECT_THROW(parse_shard("8/8"), InputError);
  EXPECT_THROW(parse_shard("1"), InputError);
  EXPECT_THROW(parse_shard("-1/4"), InputError);
  EXPECT_THROW(parse_shard("1/0"), InputError);
  EXPECT_EQ(Shard{}.to_string(), "");
  EXPECT_EQ((Shard{3, 4}).to_string(), "3/4");
}

TEST(Shard, ComesFromTheFlagThenSlurmThenKubernetes) {
  const auto slurm = fake_environment({{"SLURM_ARRAY_TASK_ID", "3"}, {"SLURM_ARRAY_TASK_COUNT", "4"}, {"JOB_COMPLETION_INDEX", "1"}});
  EXPECT_EQ(resolve_shard(std::string("1/2"), std::nullopt, slurm), (Shard{1, 2}));
  EXPECT_EQ(resolve_shard(std::nullopt, std::nullopt, slurm), (Shard{3, 4}));
  // An array declared --array=1-4 numbers its tasks from 1.
  const auto one_based = fake_environment({{"SLURM_ARRAY_TASK_ID", "4"}, {"SLURM_ARRAY_TASK_COUNT", "4"}, {"SLURM_ARRAY_TASK_MIN", "1"}});
  EXPECT_EQ(resolve_shard(std::nullopt, std::nullopt, one_based), (Shard{3, 4}));
  const auto kubernetes = fake_environment({{"JOB_COMPLETION_INDEX", "5"}});
  EXPECT_EQ(resolve_shard(std::nullopt, 8, kubernetes), (Shard{5, 8}));
  EXPECT_EQ(resolve_shard(std::nullopt, std::nullopt, fake_environment({{"JOB_COMPLETION_INDEX", "2"}, {"QTUNE_SHARD_COUNT", "3"}})),
            (Shard{2, 3}));
  EXPECT_THROW(resolve_shard(std::nullopt, std::nullopt, kubernetes), InputError);  // no count
  EXPECT_THROW(resolve_shard(std::nullopt, 4, kubernetes), InputError);             // index 5 of 4
  EXPECT_THROW(resolve_shard(std::nullopt, std::nullopt, fake_environment({{"SLURM_ARRAY_TASK_ID", "1"}})), InputError);
  EXPECT_THROW(resolve_shard(std::nullopt, std::nullopt, fake_environment({{"SLURM_ARRAY_TASK_ID", "x"}, {"SLURM_ARRAY_TASK_COUNT", "2"}})),
               InputError);
  EXPECT_EQ(resolve_shard(std::nullopt, std::nullopt, fake_environment({})), Shard{});
}

TEST(Shard, PartitionIsDisjointAndCovers) {
  const std::vector<Problem> problems = llama_problems();
  ASSERT_EQ(problems.size(), 2u * 4u * 14u);  // two formats, four distinct Llama-3-70B shapes, 14 M buckets
  for (int count : {1, 2, 3, 7, 8, 112, 200}) {
    std::map<std::string, int> owner;
    size_t smallest = problems.size();
    size_t largest = 0;
    for (int index = 0; index < count; ++index) {
      const std::vector<Problem> part = select_shard(problems, Shard{index, count});
      smallest = std::min(smallest, part.size());
      largest = std::max(largest, part.size());
      for (const Problem& problem : part) {
        const auto [it, inserted] = owner.emplace(problem_key(problem), index);
        EXPECT_TRUE(inserted) << problem_key(problem) << " is in shards " << it->second << " and " << index << " of " << count;
      }
      // The same arguments give the same shard.
      const std::vector<Problem> again = select_shard(problems, Shard{index, count});
      ASSERT_EQ(again.size(), part.size());
      for (size_t i = 0; i < part.size(); ++i) EXPECT_EQ(problem_key(again[i]), problem_key(part[i]));
    }
    EXPECT_EQ(owner.size(), problems.size()) << "shards of " << count << " do not cover the set";
    if (count <= 8) {
      // Work grows with M by orders of magnitude: every shard must get small and large M alike.
      for (int index = 0; index < count; ++index) {
        int small = 0;
        int large = 0;
        for (const Problem& problem : select_shard(problems, Shard{index, count})) (problem.m <= 64 ? small : large)++;
        EXPECT_GT(small, 0) << "shard " << index << "/" << count;
        EXPECT_GT(large, 0) << "shard " << index << "/" << count;
      }
    }
    EXPECT_LE(largest - smallest, 1u) << "shards of " << count << " are unbalanced";
  }
}

}  // namespace
}  // namespace qtune::tune
