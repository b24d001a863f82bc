#pragma once
// Where `qtune bench --pin-algorithm` finds the algorithm to pin: the cuBLASLt algorithm an earlier `qtune bench`
// chose and stored. A bench stores one measurement per timed algorithm; the chosen one has the phase
// kBestOfTopKPhase (decided among the top k) or kPinnedPhase (itself pinned), and its config params are
// AlgoInfo::to_json().
#include <optional>
#include <string>

#include "db/store.hpp"
#include "tuner/baselines/cublaslt_baseline.hpp"

namespace qtune::baselines {

struct StoredChoiceQuery {
  db::Problem problem;   // as the bench stores it: the format it is compared with, M, N, K
  std::string family;    // the baseline id, e.g. "cublaslt-f16" (the config family)
  std::string gpu_name;  // the device name as the driver reports it (runs.gpu_name)
  db::L2Mode l2_mode = db::L2Mode::Cold;
};

struct StoredChoice {
  AlgoInfo algorithm;  // read back from the config params; heuristic_index is its position in that run's list
  db::RunId run{};
  std::string started_at;  // of the run
  std::string gpu_uuid;    // of the run's GPU
  std::string phase;       // kBestOfTopKPhase or kPinnedPhase
  double median_us = 0;
  // "run 12 of 2026-11-30T00:12:03.123Z", for notes.
  std::string origin() const;
};

// The algorithm the latest (by run start, then run id) completed bench run on a GPU of that name chose for the
// baseline at the problem in that L2 mode, from an ok measurement; nullopt when none is stored. Any GPU of the same
// name counts: the choice belongs to the model, and machines are often replaced. Throws Error when the stored
// params of the chosen config cannot be read as an AlgoInfo.
std::optional<StoredChoice> latest_stored_choice(db::Store& store, const StoredChoiceQuery& query);

}  // namespace qtune::baselines
