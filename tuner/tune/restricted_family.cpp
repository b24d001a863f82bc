#include "tuner/tune/restricted_family.hpp"

#include <algorithm>
#include <sstream>

#include "kernels/error.hpp"

namespace qtune::tune {

RestrictedFamily::RestrictedFamily(const KernelFamily& family, std::map<std::string, std::vector<int>> values)
    : base_(family), values_(std::move(values)) {
  const std::vector<ParameterDomain> domains = base_.parameter_space();
  for (auto& [name, chosen] : values_) {
    // A named capture: clang before 16 cannot capture a structured binding.
    auto domain = std::find_if(domains.begin(), domains.end(), [&wanted = name](const ParameterDomain& d) { return d.name == wanted; });
    if (domain == domains.end()) {
      std::string known;
      for (const ParameterDomain& d : domains) known += (known.empty() ? "" : ", ") + d.name;
      QTUNE_INPUT_ERROR("--param: the " + base_.name() + " family has no parameter '" + name + "' (known: " + known + ")");
    }
    if (chosen.empty()) QTUNE_INPUT_ERROR("--param: no values for '" + name + "'");
    for (int value : chosen) {
      if (std::find(domain->values.begin(), domain->values.end(), value) == domain->values.end()) {
        std::string allowed;
        for (int v : domain->values) allowed += (allowed.empty() ? "" : ",") + std::to_string(v);
        QTUNE_INPUT_ERROR("--param: " + name + "=" + std::to_string(value) + " is not one of the family's values (" +
                          allowed + ")");
      }
    }
    std::sort(chosen.begin(), chosen.end());
    chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
  }
}

std::vector<ParameterDomain> RestrictedFamily::parameter_space() const {
  std::vector<ParameterDomain> domains = base_.parameter_space();
  for (ParameterDomain& domain : domains) {
    auto found = values_.find(domain.name);
    if (found == values_.end()) continue;
    // Keep the family's own order of values.
    std::vector<int> kept;
    for (int value : domain.values) {
      if (std::find(found->second.begin(), found->second.end(), value) != found->second.end()) kept.push_back(value);
    }
    domain.values = kept;
  }
  return domains;
}

std::pair<std::string, std::vector<int>> parse_parameter_values(const std::string& text) {
  const size_t equals = text.find('=');
  if (equals == std::string::npos || equals == 0 || equals + 1 == text.size()) {
    QTUNE_INPUT_ERROR("--param: expected NAME=V1[,V2...], got '" + text + "'");
  }
  std::pair<std::string, std::vector<int>> result{text.substr(0, equals), {}};
  std::stringstream stream(text.substr(equals + 1));
  std::string item;
  while (std::getline(stream, item, ',')) {
    size_t used = 0;
    int value = 0;
    try {
      value = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size()) {
      QTUNE_INPUT_ERROR("--param: '" + item + "' is not an integer (in '" + text + "')");
    }
    result.second.push_back(value);
  }
  if (result.second.empty() || text.back() == ',') QTUNE_INPUT_ERROR("--param: expected NAME=V1[,V2...], got '" + text + "'");
  return result;
}

}  // namespace qtune::tune
