#pragma once
// `qtune tune --family humming`: Humming's TuningConfig (search/humming_space.hpp) searched by qtune's strategies, each
// candidate run by the Humming peer (PeerHost::run with {"tuning_config": ...}: qtune's operands, verification against
// the CPU reference, qtune's measure()) and stored through tune/records.hpp as a config of family "humming", like a
// candidate of qtune's own families. Humming is no KernelFamily (it has no NVRTC source): the family names are split
// here, in one place, and `tune --family auto` tunes it where its peer is installed. A problem's winner is the fastest
// verified kernel of any provider: an earlier faster winner of another family stays, and qtune's families keep a
// faster Humming winner in turn (tuner.cpp).
//
// Humming compiles each configuration the first time it runs (7-15 s with nvcc or NVRTC), which the one measuring
// worker would do serially: before measuring, the kernels the search plans to run (Humming's own rules' kernels of
// each layer and each problem's first candidates, nearest to Humming's pick first) are built by --jobs peer workers
// at once into Humming's own cache (HUMMING_CACHE_DIR), where the measuring runs find them. A kernel Humming's
// compiler refuses is that candidate's failure (UnsupportedError with the compiler's first error line), not run.
#include <atomic>
#include <cstddef>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "db/store.hpp"
#include "kernels/family.hpp"
#include "search/humming_space.hpp"
#include "tuner/peers/peer_host.hpp"
#include "tuner/tune/backend.hpp"
#include "tuner/tune/tuner.hpp"

namespace qtune::peers {

inline constexpr const char* kHummingPeer = "humming";
// Evaluations per problem when no budget is given (besides Humming's own pick).
inline constexpr std::size_t kHummingDefaultEvaluations = 6;
// Seconds Humming is expected to spend compiling one configuration on one core, for the progress plan's ETA.
inline constexpr double kHummingCompileSeconds = 15;
// A Humming candidate's timeout covers its compile: at least this many seconds.
inline constexpr double kHummingMinTimeoutS = 600;
// A candidate built ahead compiles nothing when it runs: its timeout covers a restarted worker's imports (torch,
// Humming) and the measurement, so a hanging kernel costs this long instead of kHummingMinTimeoutS.
inline constexpr double kHummingBuiltTimeoutS = 90;

struct HummingTuneOptions;
// The watchdog's limit for one candidate's run: the user's --timeout, but at least what the run may spend (its
// compile when it was not built ahead).
double humming_run_timeout_s(const HummingTuneOptions& options, bool built_ahead);

// What `tune --family TEXT` asks of Humming, and the rest of the text for tune::families_to_tune ("" when none).
enum class HummingChoice { No, IfAvailable, Required };
struct FamilyChoice {
  std::string kernel_families;
  HummingChoice humming = HummingChoice::No;
};
// "auto" -> {"auto", IfAvailable}; "mma,humming" -> {"mma", Required}; "humming" -> {"", Required}.
FamilyChoice split_families(const std::string& text);

// The Humming provider of a format: "humming-<format>" (`peer`: the tests' fake stands in for Humming).
ProviderId humming_provider(const FormatSpec& format, const std::string& peer = kHummingPeer);
// Whether the described Humming peer is usable, and why not (its problem and what to install) otherwise.
bool humming_available(PeerHost& host, std::string* why_not, const std::string& peer = kHummingPeer);
// The problems whose format the Humming peer offers (describe()); the formats it does not are listed in `left_out`.
std::vector<Problem> humming_problems(PeerHost& host, const std::vector<Problem>& problems,
                                      std::vector<std::string>* left_out = nullptr,
                                      const std::string& peer = kHummingPeer);

// A candidate as the peer's job config: {"tuning_config": HummingSpace::tuning_config(config)}.
nlohmann::json humming_job_config(const KernelConfig& config);
// Humming's own pick as the run reported it ({"heuristic": TuningConfig dict}) as a point of the space, if it is one.
std::optional<KernelConfig> humming_heuristic(const nlohmann::json& ran_config, std::string* why_not = nullptr);
// The candidates of a problem (the curated space, or the full one), nearest to `heuristic` first (fewest parameters
// differing; enumeration order among equals), the heuristic itself left out. `enumeration` gets the counts.
std::vector<KernelConfig> humming_candidates(const Problem& problem, const ArchLimits& limits, bool full_space,
                                             const std::optional<KernelConfig>& heuristic,
                                             search::SpaceEnumeration* enumeration = nullptr);

struct HummingTuneOptions {
  tune::TuneOptions tune;            // problems, space, strategy, budget, timeout, command line
  tune::MeasureSettings measure;     // full and short fidelity, seed
  std::size_t default_evaluations = kHummingDefaultEvaluations;  // when tune.budget sets no cap
  std::string peer = kHummingPeer;  // the peer that runs the TuningConfigs (tests: "fake", which runs any the same)
  std::size_t compile_workers = 0;  // peer workers building kernels ahead at once (--jobs); 0: the CPU count
  bool build_ahead = true;          // false: each kernel is built by the run that first needs it (as before)
};

// The kernels a Humming tune plans to run, to build ahead: per layer (format, N, K) every configuration Humming's own
// rules list (its heuristic run builds them all), then per problem the first `budget` candidates in the search's
// order (nearest to Humming's pick first: what the exhaustive strategy runs; other strategies' picks beyond them are
// built by the run that needs them), less those the same Humming version already measured on this GPU.
struct HummingBuildPlan {
  std::vector<PeerCompileJob> jobs;
  std::map<std::string, std::size_t> index;  // build_key -> job
  std::vector<std::string> notes;            // layers whose heuristic list could not be had, and why
};
// What identifies a kernel to build: the provider, N, K and the job config (M changes no kernel).
std::string build_key(const ProviderId& provider, const Problem& problem, const nlohmann::json& job_config);
// The evaluations a problem of `candidates` gets: the budget's cap, else options.default_evaluations.
search::Budget humming_budget(const HummingTuneOptions& options, std::size_t candidates);
// The plan of what to build ahead for `options.tune.problems` (asks the peer for its rules' list per layer); results
// the same Humming version (`source_hash`) stored for this GPU in `store` are left out, as the tune reuses them.
HummingBuildPlan plan_humming_builds(const HummingTuneOptions& options, const tune::TuneTarget& target, PeerHost& host,
                                     db::Store& store, const std::string& source_hash);

// Tunes Humming on `options.tune.problems` (each must be one humming_problems keeps) into the store at `database`:
// one run of kind "tune" (notes: family humming, the peer's version); first the planned kernels built ahead
// (HummingBuildPlan, options.compile_workers at once; the observer's compile_progress), then per problem Humming's own
// pick (phase "heuristic") and the strategy's candidates, each stored as it is measured; a rerun reuses what the same
// Humming version measured on this GPU. Throws InputError when the Humming peer is unavailable.
tune::TuneReport run_humming_tune(const HummingTuneOptions& options, const tune::TuneTarget& target,
                                  const std::filesystem::path& database, PeerHost& host,
                                  tune::TuneObserver* observer = nullptr, const std::atomic<bool>* stop = nullptr);

}  // namespace qtune::peers
