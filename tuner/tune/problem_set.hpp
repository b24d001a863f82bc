#pragma once
// The problems a tune covers: every (format, N, K, M bucket), in one deterministic order, and the shard of them
// one process tunes (--shard i/n, Slurm array tasks, Kubernetes indexed jobs).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/family.hpp"
#include "search/model_shapes.hpp"

namespace qtune::tune {

// Problems sorted by (format text, n, k, m), duplicates removed. Every format must pass validate_shape for every
// shape (InputError naming "--format" otherwise).
std::vector<Problem> build_problem_set(const std::vector<FormatSpec>& formats, const std::vector<search::GemmShape>& shapes,
                                       const std::vector<std::int64_t>& m_values);

using qtune::parse_format_list;  // "w4a16-int4-ch,w8a16-int8-ch" or ';'-separated (kernels/format.hpp)
// "4096,4096;8192,28672" -> {(4096, 4096), (8192, 28672)}. Throws InputError naming `field`.
std::vector<search::GemmShape> parse_shape_list(std::string_view text, std::string_view field = "--shape");

// Shard `index` of `count` (0 <= index < count).
struct Shard {
  int index = 0;
  int count = 1;
  bool sharded() const { return count > 1; }
  std::string to_string() const;  // "2/8"; "" when not sharded
  friend bool operator==(const Shard&, const Shard&) = default;
};

// "i/n" with 0 <= i < n. Throws InputError naming `field`.
Shard parse_shard(std::string_view text, std::string_view field = "--shard");

// Reads an environment variable; returns nullopt when unset. Tests pass their own.
using EnvironmentLookup = std::function<std::optional<std::string>(const char* name)>;
EnvironmentLookup process_environment();

// The shard of this process: `flag` ("i/n", from --shard) when given; else Slurm array variables
// (SLURM_ARRAY_TASK_ID minus SLURM_ARRAY_TASK_MIN, of SLURM_ARRAY_TASK_COUNT); else JOB_COMPLETION_INDEX of
// `count_flag` (--shard-count) or QTUNE_SHARD_COUNT; else 0/1. Throws InputError naming the variable or flag.
Shard resolve_shard(const std::optional<std::string>& flag, std::optional<int> count_flag, const EnvironmentLookup& environment);

// The problems of one shard: the set is dealt round-robin in a fixed pseudo-random order (a hash of each problem's
// key), so shards are disjoint, together cover the set, differ in size by at most one, and each gets a mix of small
// and large M. Each shard's problems stay in the set's order.
std::vector<Problem> select_shard(const std::vector<Problem>& problems, const Shard& shard);

// "w4a16-int4-ch m=16 n=4096 k=4096" without bias; the key problems are sorted and seeded by.
std::string problem_key(const Problem& problem);
// A stable 64-bit hash (FNV-1a) of a key such as problem_key's, for per-problem seeds that do not depend on order.
std::uint64_t fnv1a(std::string_view text);

// The problems `family` tunes when `families` are tuned one after another. With split_by_m (tune --family auto) each
// takes the M range where it can win, as the families' own rule says (auto_tune_covers, kernels/family.hpp);
// otherwise every problem.
std::vector<Problem> problems_for_family(const KernelFamily& family, const std::vector<const KernelFamily*>& families,
                                         const std::vector<Problem>& problems, int sm, bool split_by_m);

}  // namespace qtune::tune
