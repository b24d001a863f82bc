#pragma once
// Choosing a winner among measured candidates, so winners stay stable: within the measurement noise the
// incumbent (the previous winner) is kept, else the simplest candidate; a candidate that failed verification never wins.
#include <optional>
#include <span>
#include <string>

#include "kernels/family.hpp"

namespace qtune::search {

struct ScoredCandidate {
  std::string key;         // config text (or baseline id)
  double median_us = 0;
  double ci_high_us = 0;   // upper end of the median's confidence interval (0: unknown, use the median)
  double complexity = 0;   // lower is simpler (see config_complexity)
  bool valid = false;      // verified and measured
};

struct WinnerChoice {
  size_t index = 0;
  std::string reason;  // "fastest", "incumbent within noise", "simplest within noise"
};

// Ties: candidates whose median is within max(tolerance, the fastest's CI half-width) of the fastest median.
std::optional<WinnerChoice> choose_winner(std::span<const ScoredCandidate> candidates,
                                          const std::optional<std::string>& incumbent_key, double tolerance = 0.01);

// A simplicity order for configs: no split-K before split-K, then fewer stages, then smaller tiles.
double config_complexity(const KernelConfig& config);

}  // namespace qtune::search
