#include "reports/moe_selection.hpp"

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/error.hpp"

namespace qtune::reports {

void add_moe_rules(SelectionTable& table, db::Store& store, const std::string& gpu,
                   const std::vector<std::string>& formats) {
  using Key = std::tuple<std::string, int, int, std::int64_t, std::int64_t, std::string, std::string>;
  // key -> routing -> the winners of its token buckets
  std::map<Key, std::map<std::string, std::vector<BucketWinner>>> winners;
  for (const db::MoeWinnerRecord& winner : db::list_moe_winners(store, gpu)) {
    const auto problem = db::get_moe_problem(store, winner.problem);
    const auto config = store.get_config(winner.config);
    if (!problem || !config) QTUNE_THROW(Error, "add_moe_rules: MoE winner of a missing problem or config");
    if (!formats.empty() && std::find(formats.begin(), formats.end(), problem->format) == formats.end()) continue;
    // Stored as the provider's ("mma-moe", "wgmma-moe"); the kernel is that family's MoE instantiation with these
    // parameters.
    const std::string provider_suffix = "-moe";
    const bool named = config->family.size() > provider_suffix.size() &&
                       config->family.compare(config->family.size() - provider_suffix.size(), provider_suffix.size(), provider_suffix) == 0;
    const std::string family = named ? config->family.substr(0, config->family.size() - provider_suffix.size()) : "mma";
    const KernelConfig kernel = KernelConfig::from_json(
        nlohmann::json{{"family", family}, {"params", nlohmann::json::parse(config->params_json)}});
    const Key key{problem->format, problem->experts, problem->top_k, problem->n, problem->k, problem->projection,
                  problem->layout};
    const std::string routing = problem->routing + (problem->seed == 1 ? "" : " seed " + std::to_string(problem->seed));
    winners[key][routing].push_back({problem->tokens, kernel, winner.median_us});
  }
  table.moe.clear();
  for (auto& [key, by_routing] : winners) {
    const auto uniform = by_routing.find("uniform");
    auto& [routing, buckets] = uniform != by_routing.end() ? *uniform : *by_routing.begin();
    MoeRules rules;
    std::tie(rules.format, rules.experts, rules.top_k, rules.n, rules.k, rules.projection, rules.layout) = key;
    rules.routing = routing;
    rules.ranges = compact_ranges(buckets);
    table.moe.push_back(std::move(rules));
  }
}

}  // namespace qtune::reports
