#pragma once
// Search strategies over a finite list of candidates. A strategy sees candidates only as ids with feature
// vectors and asks an Objective for times, so every strategy can be replayed offline against a database.
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "search/cost_model.hpp"

namespace qtune::search {

struct Candidate {
  size_t id = 0;                 // index into the caller's candidate list
  std::vector<double> features;  // for cost models; may be empty for strategies that ignore them
};

// Short: a quick, noisier measurement (successive halving's early rounds). Full: the measurement that is stored.
enum class Fidelity { Short, Full };

struct Evaluation {
  bool valid = false;  // false: failed verification, crashed, timed out, or was pruned after compiling
  double time_us = std::numeric_limits<double>::infinity();
};

class Objective {
 public:
  virtual ~Objective() = default;
  virtual Evaluation evaluate(const Candidate& candidate, Fidelity fidelity) = 0;
};

struct Budget {
  size_t max_evaluations = std::numeric_limits<size_t>::max();  // counts Full and Short evaluations alike
  double max_seconds = std::numeric_limits<double>::infinity();
};

struct EvaluationRecord {
  size_t id = 0;
  Fidelity fidelity = Fidelity::Full;
  Evaluation result;
};

struct SearchOutcome {
  std::optional<size_t> best_id;  // best valid candidate measured at Full fidelity
  double best_time_us = std::numeric_limits<double>::infinity();
  std::vector<EvaluationRecord> history;  // in evaluation order
  bool budget_exhausted = false;
  // Best Full-fidelity time after the first n evaluations (n = 1..history.size()); inf where none valid yet.
  std::vector<double> best_after_each_evaluation() const;
};

// Measurements from other problems or GPUs, used by the model-guided strategy as prior training data.
struct PriorObservation {
  std::vector<double> features;
  double time_us = 0;
};

struct StrategyOptions {
  uint64_t seed = 1;
  // Model-guided: evaluations per batch and the share of the budget spent on random exploration first.
  size_t batch_size = 4;
  double initial_random_fraction = 0.25;
  double ridge_lambda = 1e-3;
  std::string cost_model = "trees";  // make_cost_model: "trees" or "ridge"
  std::vector<PriorObservation> prior;
  // Successive halving: keep 1/eta of the candidates each round.
  size_t halving_eta = 3;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  virtual SearchOutcome run(std::span<const Candidate> candidates, Objective& objective, const Budget& budget) = 0;
};

// "exhaustive", "random", "halving", "model". Throws InputError (field "strategy") for other names.
std::unique_ptr<Strategy> make_strategy(std::string_view name, const StrategyOptions& options = {});
const std::vector<std::string>& strategy_names();


}  // namespace qtune::search
