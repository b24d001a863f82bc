#include "tuner/tune/family_runs.hpp"

#include <algorithm>
#include <map>
#include <sstream>

#include "kernels/error.hpp"

namespace qtune::tune {

std::vector<const KernelFamily*> families_to_tune(const std::string& text, const std::vector<FormatSpec>& formats, int sm) {
  std::vector<const KernelFamily*> families;
  if (text == "auto") {
    for (const KernelFamily* family : kernel_families()) {
      const bool runs_one = std::any_of(formats.begin(), formats.end(),
                                        [&](const FormatSpec& format) { return family->supports(format, sm).supported; });
      if (runs_one) families.push_back(family);
    }
    if (families.empty()) families.push_back(&find_family("mma"));  // its refusal names the reason per problem
    return families;
  }
  std::stringstream stream(text);
  std::string name;
  while (std::getline(stream, name, ',')) {
    try {
      families.push_back(&find_family(name));
    } catch (const InputError& error) {
      QTUNE_INPUT_ERROR(std::string("--family: ") + error.what());
    }
  }
  if (families.empty()) QTUNE_INPUT_ERROR("--family: expected auto or a comma-separated list of families");
  return families;
}

FamilyRuns run_tune_families(TuneOptions options, const std::vector<const KernelFamily*>& families,
                             const std::vector<std::vector<Problem>>& problems_of_family, const TuneTarget& target,
                             const std::filesystem::path& database, TuneServices& services, TuneObserver* observer,
                             FamilyRunObserver* family_observer, const std::atomic<bool>* stop) {
  if (problems_of_family.size() != families.size()) QTUNE_THROW(Error, "run_tune_families: one problem list per family");
  const std::map<std::string, std::vector<int>> parameter_values = options.parameter_values;
  for (const auto& entry : parameter_values) {
    const std::string& name = entry.first;  // a plain reference: clang 14 cannot capture a structured binding
    if (std::none_of(families.begin(), families.end(), [&](const KernelFamily* family) { return has_parameter(*family, name); })) {
      QTUNE_INPUT_ERROR("--param: no family tuned here has a parameter '" + name + "'");
    }
  }
  FamilyRuns runs;
  for (std::size_t i = 0; i < families.size(); ++i) {
    const KernelFamily& family = *families[i];
    options.family = family.name();
    options.parameter_values.clear();
    for (const auto& [name, values] : parameter_values) {
      if (has_parameter(family, name)) options.parameter_values[name] = values;
    }
    options.problems = problems_of_family[i];
    if (family_observer != nullptr) family_observer->family_started(i, family, options.problems.size());
    if (options.problems.empty()) continue;
    runs.reports.push_back(run_tune(options, target, database, services, observer, stop));
    if (family_observer != nullptr) family_observer->family_finished(i, runs.reports.back());
    if (runs.reports.back().interrupted) {
      runs.interrupted = true;
      break;
    }
  }
  return runs;
}

}  // namespace qtune::tune
