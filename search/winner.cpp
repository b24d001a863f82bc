#include "search/winner.hpp"

#include <algorithm>
#include <cmath>

namespace qtune::search {

std::optional<WinnerChoice> choose_winner(std::span<const ScoredCandidate> candidates,
                                          const std::optional<std::string>& incumbent_key, double tolerance) {
  std::optional<size_t> fastest;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!candidates[i].valid) continue;
    if (!fastest || candidates[i].median_us < candidates[*fastest].median_us) fastest = i;
  }
  if (!fastest) return std::nullopt;
  const ScoredCandidate& best = candidates[*fastest];
  const double noise = std::max(tolerance * best.median_us,
                                best.ci_high_us > best.median_us ? best.ci_high_us - best.median_us : 0.0);
  const double tie_limit = best.median_us + noise;
  std::vector<size_t> tied;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (candidates[i].valid && candidates[i].median_us <= tie_limit) tied.push_back(i);
  }
  if (incumbent_key) {
    for (size_t i : tied) {
      if (candidates[i].key == *incumbent_key) {
        return WinnerChoice{i, i == *fastest ? "fastest" : "incumbent within noise"};
      }
    }
  }
  size_t simplest = *fastest;
  for (size_t i : tied) {
    const auto& c = candidates[i];
    const auto& s = candidates[simplest];
    if (c.complexity < s.complexity || (c.complexity == s.complexity && c.median_us < s.median_us)) simplest = i;
  }
  return WinnerChoice{simplest, simplest == *fastest ? "fastest" : "simplest within noise"};
}

double config_complexity(const KernelConfig& config) {
  auto value = [&](const char* name) {
    auto it = config.params.find(name);
    return it == config.params.end() ? 1.0 : double(std::max(it->second, 1));
  };
  // Weights make split-K dominate, then pipeline depth, then tile area.
  return 1000.0 * std::log2(value("split")) + 10.0 * value("stages") +
         std::log2(value("bm") * value("bn") * value("bk"));
}

}  // namespace qtune::search
