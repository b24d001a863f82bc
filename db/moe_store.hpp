#pragma once
// The store's mixture-of-experts rows (schema version 4, db/schema.cpp): MoE problems keyed by (format, experts,
// top-k, tokens, N, K, projection, layout, routing, seed), one result per candidate measured on one, and the winner
// per (MoE problem, GPU). Kernel configurations are the store's kernel_configs rows. Functions on a Store, so the
// dense store keeps its interface; every write runs in its own transaction (nested in the caller's when there is one).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "db/store.hpp"

namespace qtune::db {

enum class MoeProblemId : std::int64_t {};

// Texts as kernels/moe.hpp writes them: format FormatSpec::to_string, projection "gate-up"/"down", layout
// "token-indexed"/"grouped-contiguous"/"grouped-masked", routing RoutingSpec::to_string.
struct MoeProblemKey {
  std::string format;
  int experts = 0;
  int top_k = 0;
  std::int64_t tokens = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
  std::string projection;
  std::string layout;
  std::string routing;
  std::uint64_t seed = 1;
  friend bool operator==(const MoeProblemKey&, const MoeProblemKey&) = default;
};
struct MoeProblemRecord : MoeProblemKey {
  MoeProblemId id{};
};

// One candidate on one MoE problem: outcome as providers::to_string(CandidateOutcome) writes it ("measured",
// "verification-failed", "error", "crashed", "timeout"); median and CI when measured.
struct MoeResult {  // {}: designated initializers may leave fields out
  RunId run{};
  MoeProblemId problem{};
  ConfigId config{};
  std::string outcome{};
  bool verified = false;
  std::optional<double> max_rel_error{};
  std::optional<double> tolerance{};
  std::int64_t rows_checked = 0;
  std::optional<double> median_us{};
  std::optional<double> ci_low_us{};
  std::optional<double> ci_high_us{};
  std::int64_t sample_count = 0;
  std::string phase{};
  std::string message{};
};

struct MoeWinner {
  RunId run{};
  MoeProblemId problem{};
  ConfigId config{};
  double median_us = 0;
  std::string reason;
};
struct MoeWinnerRecord : MoeWinner {
  std::string gpu;
  std::string decided_at;
};

MoeProblemId upsert_moe_problem(Store& store, const MoeProblemKey& key);  // the existing id if already stored
std::optional<MoeProblemRecord> get_moe_problem(Store& store, MoeProblemId id);
std::vector<MoeProblemRecord> list_moe_problems(Store& store);
void insert_moe_result(Store& store, const MoeResult& result);
// Results of a problem on a GPU (the run's gpu_key()), oldest first.
std::vector<MoeResult> list_moe_results(Store& store, MoeProblemId problem, const std::string& gpu);
// Stores or replaces the winner of (problem, the run's GPU). Refused (Error) for a baseline, or for a config with no
// measured result of the problem on that GPU or with one that failed verification there.
void set_moe_winner(Store& store, const MoeWinner& winner);
std::optional<MoeWinnerRecord> get_moe_winner(Store& store, MoeProblemId problem, const std::string& gpu);
// Every MoE winner (of one GPU when given); empty for a file older than schema version 4 (read-only opens do not migrate).
std::vector<MoeWinnerRecord> list_moe_winners(Store& store, const std::optional<std::string>& gpu = std::nullopt);

}  // namespace qtune::db
