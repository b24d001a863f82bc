#pragma once
// `qtune tune --family`: several kernel families tuned one after another, each in its own run (tuner.hpp), each on
// the M range where it can win; a problem's winner is the fastest over the families (run_tune keeps another
// family's faster winner).
#include <atomic>
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "kernels/family.hpp"
#include "tuner/tune/tuner.hpp"

namespace qtune::tune {

// The kernel families to tune, in order: "auto" is every family that runs one of the formats on `sm` (mma when none
// does: its refusal names the reason per problem); otherwise a comma-separated list of family names (InputError
// naming --family).
std::vector<const KernelFamily*> families_to_tune(const std::string& text, const std::vector<FormatSpec>& formats, int sm);

// What the command line hears of the families' runs besides each run's TuneObserver events.
class FamilyRunObserver {
 public:
  virtual ~FamilyRunObserver() = default;
  virtual void family_started(std::size_t /*index*/, const KernelFamily& /*family*/, std::size_t /*problems*/) {}
  virtual void family_finished(std::size_t /*index*/, const TuneReport& /*report*/) {}
};

struct FamilyRuns {
  std::vector<TuneReport> reports;  // one per family that had problems, in order
  bool interrupted = false;         // the last run stopped early; the families after it did not run
};

// Runs run_tune for each family on problems_of_family[i] (problems_for_family), with `options` narrowed to the
// family: its name and the parameter_values it has (InputError naming --param for a value no family has).
FamilyRuns run_tune_families(TuneOptions options, const std::vector<const KernelFamily*>& families,
                             const std::vector<std::vector<Problem>>& problems_of_family, const TuneTarget& target,
                             const std::filesystem::path& database, TuneServices& services, TuneObserver* observer,
                             FamilyRunObserver* family_observer, const std::atomic<bool>* stop);

}  // namespace qtune::tune
