#include "kernels/family_support.hpp"

#include <algorithm>
#include <set>

namespace qtune {

FamilySupport family_support(const FormatSpec& format, int sm) {
  FamilySupport result{sm, nullptr, {}, ""};
  std::set<std::string> said;  // a family built on another (wgmma on mma) repeats its reason
  for (const KernelFamily* family : kernel_families()) {
    const ArchSupport support = family->supports(format, sm);
    if (support.supported) {
      result.families.push_back(family);
    } else if (said.insert(support.reason).second) {
      result.reason += (result.reason.empty() ? "" : "; ") + support.reason;
    }
  }
  if (!result.families.empty()) {
    result.family = result.families.front();
    result.reason.clear();
  } else if (result.reason.empty()) {
    result.reason = format.to_string() + ": no kernel family";
  }
  return result;
}

std::vector<FamilySupport> family_support(const FormatSpec& format) {
  std::vector<FamilySupport> list;
  for (int sm : known_architectures()) list.push_back(family_support(format, sm));
  return list;
}

std::vector<int> architectures_with_a_family() {
  std::vector<int> archs;
  for (int sm : known_architectures()) {
    const bool runs_one = std::any_of(format_presets().begin(), format_presets().end(), [&](const FormatPreset& preset) {
      return family_support(FormatSpec::parse(preset.name), sm).family != nullptr;
    });
    if (runs_one) archs.push_back(sm);
  }
  return archs;
}

}  // namespace qtune
