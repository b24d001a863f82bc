#pragma once
// `qtune tune` of mixture-of-experts GEMMs (docs/moe.md): a model's moe_expert GEMMs become MoE problems over token
// buckets (T = 1, 16, 64, 256, 1024, 4096 by default), each with its routing (uniform, seed 1, unless --routing) and
// layout, tuned through the MoE providers ("mma-moe", and "wgmma-moe" on sm_90a: tuner/providers/moe_provider.hpp).
// Per problem and provider:
//   plan     the provider's space (its family's curated ranges at the rows per expert the routing gives, kept by
//            mma_moe::check), spread evenly to the evaluation budget;
//   compile  every configuration's GEMM (and the token-indexed down projection's reduction) into the kernel cache the
//            worker loads from; configurations that fail to compile or spill are dropped;
//   measure  each one in the measuring worker (prepare once, then poison, launch, verify every output row, measure),
//            one result row per candidate (db/moe_store.hpp) in its own transaction;
//   finish   the fastest verified configuration of every provider is the winner of (format, E, top-k, N, K, T, layout, projection,
//            routing) on this GPU.
// The search is exhaustive over that space by default; with `--strategy random|halving|model` the strategy picks
// what to measure within --budget-evals (the model strategy on MoE features, MoeTuneOptions::strategy). A problem
// with a stored winner is skipped unless retune.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "db/moe_store.hpp"
#include "kernels/family.hpp"
#include "kernels/moe.hpp"
#include "search/model_shapes.hpp"
#include "search/strategy.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/providers/moe_provider.hpp"
#include "tuner/providers/provider.hpp"
#include "tuner/tune/backend.hpp"
#include "tuner/tune/tuner.hpp"
#include "tuner/tune/worker_jobs.hpp"

namespace qtune::tune {

// The MoE baselines qtune's worker measures beside the candidates (tuner/baselines/moe_grouped_baseline.hpp). A
// baseline may also be a peer's MoE kernel (docs/peers.md), which the peer host runs: a peer ("humming": its provider
// of each problem's format) or one provider ("humming-w4a16-int4-g128": problems of that format only).
inline constexpr const char* kMoeBaselines[] = {"cublas-grouped-f16"};

// The provider a baseline measures on `problem`: a kMoeBaselines name itself; a peer name "<peer>-<format>"; a
// provider "<peer>-<format>" itself where the format is the problem's, else "" (no baseline for this problem).
std::string moe_baseline_provider(const std::string& baseline, const MoeProblem& problem);

// T = 1, 16, 64, 256, 1024, 4096.
std::vector<std::int64_t> default_token_buckets();
// "1,16,64": positive token counts (at most 2^20), ascending and distinct after sorting. InputError naming `field`
// (a T of 0 is refused: "--tokens: T = 0 ...").
std::vector<std::int64_t> parse_token_list(const std::string& text, const std::string& field);
// "token-indexed,grouped-contiguous": InputError naming `field`.
std::vector<MoeLayout> parse_layout_list(const std::string& text, const std::string& field);

// Which projection a model's expert GEMM is: its name says down ("experts.down_proj"), else gate-up.
MoeProjection projection_of(const search::ShardedGemm& gemm);

// The MoE problems of a model's moe_expert GEMMs at `tp`: formats x distinct expert GEMMs x token buckets x layouts,
// with `routing`. Every problem is validated and its routing made once, so bad input (top_k > E, a routing file of the
// wrong length or with ids out of range, T = 0) is an InputError naming the field before anything runs.
std::vector<MoeProblem> moe_problems_of_model(const search::ModelShapes& model, int tp, const std::vector<FormatSpec>& formats,
                                              const std::vector<std::int64_t>& tokens, const std::vector<MoeLayout>& layouts,
                                              const RoutingSpec& routing, const std::string& tp_field = "--tp");

// The MoE providers `--family` selects on `sm`: auto = mma-moe, and wgmma-moe where the wgmma family runs one of the
// formats (sm_90); a list keeps the families with a MoE kernel (mma, wgmma). InputError naming --family when a list
// names none, or names wgmma where it runs none of the formats.
std::vector<std::string> moe_providers_for_families(const std::string& family_text, const std::vector<FormatSpec>& formats, int sm);

// With --family auto, whether `provider` is searched on a problem of `format` with `rows_per_expert` rows per touched
// expert when `providers` are all searched: each MoE kernel only where it can win, as auto_tune_covers does for the
// dense families by M (searching all three everywhere took the DeepSeek-V3 W4A8 tune past the main job's 10 minutes).
bool moe_auto_tune_covers(std::string_view provider, const std::vector<std::string>& providers, const FormatSpec& format,
                          std::int64_t rows_per_expert, int sm);

// The store's key of a MoE problem.
db::MoeProblemKey moe_problem_key(const MoeProblem& problem);

struct MoeTuneOptions {
  std::vector<MoeProblem> problems;
  // The MoE providers searched, in order ("mma-moe", "wgmma-moe"; moe_providers_for_families picks them from --family).
  std::vector<std::string> providers{providers::kMoeProviderName};
  // --family auto: each provider searches only the problems moe_auto_tune_covers gives it (a named list: all of them).
  bool auto_families = false;
  // What production runs without a table (the CLI passes production::moe_heuristic_config; nullopt or none: nothing):
  // measured first, in phase "heuristic", by its family's provider when that one searches the problem, so that a tuned
  // winner is never slower than no table.
  std::function<std::optional<KernelConfig>(const MoeProblem&)> heuristic;
  providers::SpaceRequest space;  // curated or whole, narrowed parameters, max_configs = the evaluation budget
  // "exhaustive": every configuration of the space (capped by space.max_configs, spread evenly). "random", "halving",
  // "model": the whole space is compiled and the strategy measures budget.max_evaluations of it; the model strategy's
  // cost model learns from providers::moe_cost_features (rows per expert, experts touched, skew, empty blocks) of what
  // this run measured before with the same provider -- the token buckets run in ascending order, so a larger T
  // starts from the smaller ones' times.
  std::string strategy = "exhaustive";
  search::StrategyOptions strategy_options;
  search::Budget budget;
  std::optional<double> budget_fraction;  // (0, 1]: the budget is also at most this share of a provider's candidates
  double timeout_s = 30;          // per candidate (load, verify, measure)
  bool dry_run = false;           // plan and compile only; nothing is stored but the run
  bool retune = false;            // search problems again even when they have a winner
  std::string command_line;
  // A MoE baseline measured once per problem searched, beside the candidates (moe_baseline_provider: cublas-grouped-f16,
  // a peer, or a peer's provider); its result is stored under a baseline config of family the provider (never a
  // winner). "": none.
  std::string baseline;
};

struct MoeProblemReport {
  MoeProblem problem;
  bool skipped = false;  // a winner was stored already
  std::size_t space_total = 0;
  std::map<std::string, std::size_t> removed_by_rule;
  std::size_t candidates = 0;      // after the rules, the budget and compiling
  std::size_t compile_failures = 0;
  std::size_t measured = 0;  // verified and measured
  std::size_t invalid = 0;   // failed verification, errors, crashes, timeouts
  std::optional<KernelConfig> winner;
  double winner_us = 0;
  std::optional<double> heuristic_us;  // MoeTuneOptions::heuristic's median, when it was measured and verified
  std::optional<double> baseline_us;  // MoeTuneOptions::baseline's median, when it was measured and verified
  std::string baseline;               // the provider measured as the baseline ("" when none)
  std::string baseline_failure;       // why it has no median: its outcome and message ("" when measured)
  int experts_touched = 0;            // by the problem's routing
  std::int64_t rows_per_expert = 0;   // pairs / experts touched, rounded up
  std::uint64_t winner_bytes = 0;     // providers::moe_compulsory_bytes of the winner: winner_bytes / winner_us = its GB/s
  double seconds = 0;
};

struct MoeTuneReport {
  db::RunId run{};
  std::string gpu;
  std::vector<MoeProblemReport> reports;
  std::size_t winners = 0;
  bool interrupted = false;
};

// Measures one MoE candidate job: the worker (WorkerBackend::evaluate_job) or a test double.
using MoeJobEvaluator = std::function<providers::CandidateResult(const CandidateJob& job, double timeout_s)>;

// A baseline's result and what identifies the run as a stored config (a peer's {"config", "peer_version"}).
struct MoeBaselineResult {
  providers::CandidateResult result;
  nlohmann::json params = nlohmann::json::object();
};
// Measures the baseline job (job.provider: moe_baseline_provider's answer): qtune's worker, or a peer's host.
using MoeBaselineEvaluator = std::function<MoeBaselineResult(const CandidateJob& job, double timeout_s)>;

struct MoeTuneServices {
  const jit::Compiler* compiler = nullptr;  // required: fills the kernel cache the worker loads from
  std::optional<std::filesystem::path> cache_directory;
  MoeJobEvaluator evaluate;  // required unless dry_run
  MoeBaselineEvaluator evaluate_baseline;  // the baseline's jobs; empty: `evaluate`, with params {}
  MeasureSettings measure = default_measure_settings();
  std::function<void(const MoeProblemReport&)> problem_finished;  // progress; may be empty
};

// Runs the MoE tune into the store at `database` (one run of kind "tune-moe"). `stop` (may be null) ends it after
// the candidate in flight; the run is marked interrupted.
MoeTuneReport run_moe_tune(const MoeTuneOptions& options, const TuneTarget& target, const std::filesystem::path& database,
                           MoeTuneServices& services, const std::atomic<bool>* stop = nullptr);

}  // namespace qtune::tune
