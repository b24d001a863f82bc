#include "tuner/tune/moe_tune.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <cmath>
#include <set>
#include <sstream>

#include "kernels/error.hpp"
#include "kernels/families/mma_family.hpp"
#include "kernels/families/mma_moe.hpp"
#include "kernels/families/tma_family.hpp"
#include "kernels/families/wgmma_family.hpp"
#include "tuner/providers/moe_provider.hpp"
#include "tuner/tune/problem_set.hpp"
#include "tuner/tune/records.hpp"
#include "tuner/tune/tuner.hpp"

namespace qtune::tune {

namespace {

constexpr std::int64_t kMaxTokens = std::int64_t{1} << 20;

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    items.push_back(item);
  }
  return items;
}

}  // namespace

std::vector<std::int64_t> default_token_buckets() { return {1, 16, 64, 256, 1024, 4096}; }

std::vector<std::int64_t> parse_token_list(const std::string& text, const std::string& field) {
  std::set<std::int64_t> tokens;
  for (const std::string& item : split_list(text)) {
    std::size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size()) QTUNE_INPUT_ERROR(field + ": expected token counts such as 1,16,64, got '" + item + "'");
    if (value == 0) QTUNE_INPUT_ERROR(field + ": T = 0 tokens is no MoE problem (token counts are 1 to 2^20)");
    if (value < 0 || value > kMaxTokens) {
      QTUNE_INPUT_ERROR(field + ": " + item + " tokens is outside 1 to " + std::to_string(kMaxTokens));
    }
    tokens.insert(value);
  }
  if (tokens.empty()) QTUNE_INPUT_ERROR(field + ": no token counts");
  return {tokens.begin(), tokens.end()};
}

std::vector<MoeLayout> parse_layout_list(const std::string& text, const std::string& field) {
  std::vector<MoeLayout> layouts;
  for (const std::string& item : split_list(text)) {
    const MoeLayout layout = parse_moe_layout(item, field);
    if (std::find(layouts.begin(), layouts.end(), layout) == layouts.end()) layouts.push_back(layout);
  }
  if (layouts.empty()) QTUNE_INPUT_ERROR(field + ": no layouts");
  return layouts;
}

MoeProjection projection_of(const search::ShardedGemm& gemm) {
  return gemm.name.find("down") != std::string::npos ? MoeProjection::Down : MoeProjection::GateUp;
}

std::vector<MoeProblem> moe_problems_of_model(const search::ModelShapes& model, int tp, const std::vector<FormatSpec>& formats,
                                              const std::vector<std::int64_t>& tokens, const std::vector<MoeLayout>& layouts,
                                              const RoutingSpec& routing, const std::string& tp_field) {
  // Distinct expert GEMMs: two layers' experts of the same shape are one problem.
  std::vector<search::ShardedGemm> gemms;
  for (const search::ShardedGemm& gemm : search::sharded_gemms(model, tp, tp_field)) {
    if (gemm.kind != search::GemmKind::MoeExpert) continue;
    const bool seen = std::any_of(gemms.begin(), gemms.end(), [&](const search::ShardedGemm& other) {
      return other.n == gemm.n && other.k == gemm.k && other.experts == gemm.experts && other.top_k == gemm.top_k &&
             projection_of(other) == projection_of(gemm);
    });
    if (!seen) gemms.push_back(gemm);
  }
  std::vector<MoeProblem> problems;
  for (const FormatSpec& format : formats) {
    for (const search::ShardedGemm& gemm : gemms) {
      for (std::int64_t t : tokens) {
        for (MoeLayout layout : layouts) {
          MoeProblem problem{.format = format, .experts = gemm.experts, .top_k = gemm.top_k, .tokens = t, .n = gemm.n,
                             .k = gemm.k, .projection = projection_of(gemm), .layout = layout, .routing = routing};
          problem.validate();
          problems.push_back(problem);
        }
      }
    }
  }
  // A routing file is read and checked against every problem once here (its E, top_k and T must agree).
  if (routing.kind == RoutingKind::File) {
    for (const MoeProblem& problem : problems) static_cast<void>(problem.make_routing());
  }
  return problems;
}

std::string moe_baseline_provider(const std::string& baseline, const MoeProblem& problem) {
  if (baseline.empty()) return "";  // no --moe-baseline
  for (const char* known : kMoeBaselines) {
    if (baseline == known) return baseline;
  }
  const std::size_t dash = baseline.find('-');
  if (dash == std::string::npos) return baseline + "-" + problem.format.to_string();  // a peer
  // A peer's provider: its operands are a format, which must be the problem's.
  try {
    if (FormatSpec::parse(baseline.substr(dash + 1)) == problem.format) return baseline;
  } catch (const InputError&) {
  }
  return "";
}

db::MoeProblemKey moe_problem_key(const MoeProblem& problem) {
  db::MoeProblemKey key;
  key.format = problem.format.to_string();
  key.experts = problem.experts;
  key.top_k = problem.top_k;
  key.tokens = problem.tokens;
  key.n = problem.n;
  key.k = problem.k;
  key.projection = std::string(moe_projection_name(problem.projection));
  key.layout = std::string(moe_layout_name(problem.layout));
  key.routing = problem.routing.to_string();
  key.seed = problem.routing.seed;
  return key;
}

namespace {

struct CompiledCandidate {
  KernelConfig config;
  std::string cache_key;
};

// Compiles every configuration (and the reduction, when the problem launches one) into the kernel cache; keeps those
// that compiled without spilling.
std::vector<CompiledCandidate> compile_candidates(const std::vector<std::string>& configurations, const std::string& family,
                                                  const MoeProblem& problem, const std::string& arch,
                                                  const jit::Compiler& compiler, MoeProblemReport& report) {
  std::vector<jit::CompileRequest> requests;
  std::vector<KernelConfig> configs;
  for (const std::string& text : configurations) {
    configs.push_back(KernelConfig::parse(text, family));
    requests.push_back(providers::moe_compile_request(configs.back(), problem, arch));
  }
  // The second kernels the worker's load builds too: the token-indexed down projection's reduction, the tma family's
  // token-indexed gather (the same for every configuration of the problem).
  const std::size_t helpers_from = requests.size();
  if (providers::moe_reduces(problem)) requests.push_back(providers::moe_reduce_compile_request(problem, arch));
  if (!configs.empty() && mma_moe::gathers(configs.front(), problem)) requests.push_back(providers::moe_gather_compile_request(problem, arch));
  const std::vector<jit::CompileOutcome> outcomes = compiler.compile_all(requests);
  for (std::size_t i = helpers_from; i < outcomes.size(); ++i) {
    if (!outcomes[i].kernel) std::rethrow_exception(outcomes[i].error);
  }
  std::vector<CompiledCandidate> compiled;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const std::optional<jit::CompiledKernel>& kernel = outcomes[i].kernel;
    if (!kernel || kernel->resources.spill_store_bytes > 0 || kernel->resources.spill_load_bytes > 0) {
      ++report.compile_failures;
      continue;
    }
    compiled.push_back({configs[i], kernel->cache_key});
  }
  return compiled;
}

// The job of one configuration of a provider on a MoE problem, measured as the winners are.
CandidateJob moe_job(const std::string& provider, const providers::ProviderProblem& problem, const std::string& configuration,
                     const MoeTuneServices& services) {
  CandidateJob job;
  job.provider = provider;
  job.problem = problem;
  job.configuration = configuration;
  job.prepare.seed = services.measure.seed;
  job.prepare.device = 0;  // the worker sees its one GPU
  job.load.cache_directory = services.cache_directory;
  job.candidate.verify = services.measure.verify;
  job.candidate.measure = services.measure.full_fidelity;
  return job;
}

// One result row of a candidate; returns whether it was verified and measured.
bool store_result(db::Store& store, const db::KernelConfig& record, const providers::CandidateResult& result, db::RunId run,
                  db::MoeProblemId problem, const std::string& phase, db::ConfigId& config) {
  db::MoeResult row;
  row.run = run;
  row.problem = problem;
  row.outcome = providers::to_string(result.outcome);
  row.verified = result.verified;
  row.max_rel_error = result.max_rel_error;
  row.tolerance = result.tolerance;
  row.rows_checked = result.rows_checked;
  row.phase = phase;
  row.message = result.outcome == providers::CandidateOutcome::Measured ? result.verification_summary : result.message;
  const bool timed = result.outcome == providers::CandidateOutcome::Measured && std::isfinite(result.measurement.median_us) &&
                     result.measurement.median_us > 0;
  if (timed) {
    row.median_us = result.measurement.median_us;
    row.ci_low_us = result.measurement.ci_low_us;
    row.ci_high_us = result.measurement.ci_high_us;
    row.sample_count = static_cast<std::int64_t>(result.measurement.samples_us.size());
  } else if (result.outcome == providers::CandidateOutcome::Measured) {
    row.outcome = "error";  // nothing was timed: no measured row without a median
  }
  auto transaction = store.transaction();
  config = store.upsert_config(record);
  row.config = config;
  db::insert_moe_result(store, row);
  transaction.commit();
  return timed && result.verified;
}

// Thrown out of a strategy's evaluation when the run is asked to stop.
struct StopSearch {};

// The search's objective over one provider's compiled candidates.
class CandidateObjective : public search::Objective {
 public:
  using Evaluate = std::function<search::Evaluation(const search::Candidate&, search::Fidelity)>;
  explicit CandidateObjective(Evaluate evaluate) : evaluate_(std::move(evaluate)) {}
  search::Evaluation evaluate(const search::Candidate& candidate, search::Fidelity fidelity) override {
    return evaluate_(candidate, fidelity);
  }

 private:
  Evaluate evaluate_;
};

// Measures the baseline's provider on the problem (none when it applies to another format) into the report.
void measure_baseline(const std::string& baseline, const providers::ProviderProblem& problem, double timeout_s,
                      MoeTuneServices& services, db::Store& store, db::RunId run, db::MoeProblemId problem_id,
                      MoeProblemReport& report) {
  const std::string provider = moe_baseline_provider(baseline, problem.moe);
  if (provider.empty()) return;
  report.baseline = provider;
  const CandidateJob job = moe_job(provider, problem, "default", services);
  MoeBaselineResult measured;
  if (services.evaluate_baseline) {
    measured = services.evaluate_baseline(job, timeout_s);
  } else {
    measured.result = services.evaluate(job, timeout_s);
  }
  db::KernelConfig record;
  record.kind = db::ConfigKind::Baseline;
  record.family = provider;
  record.params_json = measured.params.dump();
  db::ConfigId config{};
  if (store_result(store, record, measured.result, run, problem_id, "baseline", config)) {
    report.baseline_us = measured.result.measurement.median_us;
  } else {
    const std::string why = measured.result.message.empty() ? measured.result.verification_summary : measured.result.message;
    report.baseline_failure = providers::to_string(measured.result.outcome) + (why.empty() ? "" : ": " + why);
  }
}

}  // namespace

bool moe_auto_tune_covers(std::string_view provider, const std::vector<std::string>& providers, const FormatSpec& format,
                          std::int64_t rows_per_expert, int sm) {
  const auto present = [&](std::string_view name) { return std::find(providers.begin(), providers.end(), name) != providers.end(); };
  const bool wgmma_runs_it = present(providers::kWgmmaMoeProviderName) && wgmma_family().supports(format, sm).supported;
  const bool tma_runs_it = present(providers::kTmaMoeProviderName) && tma_family().supports(format, sm).supported;
  const bool quantized = format.activation_is_quantized();
  // The wgmma MoE kernel where the hand-written rules prefer it: weight-only formats, and W4A8 widened to f16.
  const bool wgmma_preferred = wgmma_runs_it && (!quantized || WgmmaFamily::widened_preferred(format));
  if (provider == providers::kMoeProviderName) {
    // DeepSeek-V3 on the H200: mma-moe lost every token bucket to wgmma-moe once wgmma had its MoE tiles, W4A16 g128
    // by 1.2-1.4x (T = 1 ... 256, 4096) and W4A8 by 1.3-1.9x (docs/perf.md, thirteenth to sixteenth sessions).
    return !wgmma_preferred;
  }
  if (provider == providers::kTmaMoeProviderName && wgmma_preferred) {
    // From half its dense start (the dense tune's one bucket beyond): W4A8 at 8 rows per expert (T = 256) ran 1022.5 us
    // on wgmma-moe, at 32 (T = 1024) tma won (1527.2 against wgmma's 1621), H200 2026-12-03.
    return rows_per_expert >= TmaFamily::kPreferredFromM / 2;
  }
  if (provider == providers::kWgmmaMoeProviderName && quantized && tma_runs_it) {
    // Widened token tiles stop at kWidenedMaxBm rows (rule widened-bm): beyond, an expert's weights are read once per
    // 64 rows, where tma's 128-row tiles read them once (W4A8 T = 4096, 128 rows per expert: tma won, H200 2026-12-03).
    return rows_per_expert <= WgmmaFamily::kWidenedMaxBm;
  }
  return true;
}

std::vector<std::string> moe_providers_for_families(const std::string& family_text, const std::vector<FormatSpec>& formats, int sm) {
  const auto runs_one = [&](const KernelFamily& family) {
    return std::any_of(formats.begin(), formats.end(), [&](const FormatSpec& format) { return family.supports(format, sm).supported; });
  };
  if (family_text == "auto") {
    std::vector<std::string> chosen{providers::kMoeProviderName};
    if (runs_one(wgmma_family())) chosen.push_back(providers::kWgmmaMoeProviderName);
    // The tma MoE kernel where it is Hopper's path: quantized activations (W4A8, W8A8; the wgmma family runs fp8 ones
    // widened to f16, faster at decode); weight-only formats take it by name (--family tma), as the dense tune takes it
    // only from M = 256.
    const bool quantized_on_tma = std::any_of(formats.begin(), formats.end(), [&](const FormatSpec& format) {
      return format.activation_is_quantized() && tma_family().supports(format, sm).supported;
    });
    if (quantized_on_tma) chosen.push_back(providers::kTmaMoeProviderName);
    return chosen;
  }
  std::vector<std::string> chosen;
  std::stringstream stream(family_text);
  std::string name;
  while (std::getline(stream, name, ',')) {
    const providers::MoeProvider* provider = providers::find_moe_provider(name);
    if (provider == nullptr) continue;
    if (!runs_one(provider->family())) {
      QTUNE_INPUT_ERROR("--family: " + name + " runs none of the formats on sm_" + std::to_string(sm) +
                        (formats.empty() ? std::string{} : " (" + provider->family().supports(formats.front(), sm).reason + ")"));
    }
    chosen.push_back(provider->name());
  }
  if (chosen.empty()) {
    QTUNE_INPUT_ERROR("--family: '" + family_text + "' names no family with a MoE kernel (mma, wgmma, tma) for the MoE expert GEMMs");
  }
  return chosen;
}

MoeTuneReport run_moe_tune(const MoeTuneOptions& options, const TuneTarget& target, const std::filesystem::path& database,
                           MoeTuneServices& services, const std::atomic<bool>* stop) {
  if (services.compiler == nullptr) QTUNE_THROW(Error, "run_moe_tune: no compiler");
  if (!options.dry_run && !services.evaluate) QTUNE_THROW(Error, "run_moe_tune: no measuring backend");
  db::Store store = db::Store::open(database);
  db::RunInfo info = tune_run_on(target, options.command_line, "", "tune-moe");
  if (info.gpu_key().empty()) QTUNE_INPUT_ERROR("gpu: neither a profile nor a device name");
  MoeTuneReport report;
  report.gpu = info.gpu_key();
  report.run = store.insert_run(info);
  std::vector<const providers::MoeProvider*> moe_providers;
  for (const std::string& name : options.providers) {
    const providers::MoeProvider* provider = providers::find_moe_provider(name);
    if (provider == nullptr) QTUNE_INPUT_ERROR("providers: '" + name + "' is not a MoE provider (mma-moe, wgmma-moe, tma-moe)");
    moe_providers.push_back(provider);
  }
  if (moe_providers.empty()) QTUNE_INPUT_ERROR("providers: no MoE provider to tune with");
  const bool exhaustive = options.strategy == "exhaustive";
  search::make_strategy(options.strategy, options.strategy_options);  // InputError for an unknown name, before any work
  std::map<std::string, std::vector<search::PriorObservation>> prior;  // per provider: this run's full measurements

  for (const MoeProblem& problem : options.problems) {
    if (stop != nullptr && stop->load()) {
      report.interrupted = true;
      break;
    }
    const auto started = std::chrono::steady_clock::now();
    MoeProblemReport problem_report;
    problem_report.problem = problem;
    const db::MoeProblemId problem_id = db::upsert_moe_problem(store, moe_problem_key(problem));
    if (!options.retune && !options.dry_run) {
      if (const auto winner = db::get_moe_winner(store, problem_id, report.gpu)) {
        problem_report.skipped = true;
        problem_report.winner_us = winner->median_us;
        if (const auto config = store.get_config(winner->config)) {
          const providers::MoeProvider* stored = providers::find_moe_provider(config->family);
          problem_report.winner = KernelConfig::from_json(
              nlohmann::json{{"family", stored != nullptr ? stored->family().name() : mma_family().name()},
                             {"params", nlohmann::json::parse(config->params_json)}});
        }
        report.reports.push_back(problem_report);
        if (services.problem_finished) services.problem_finished(problem_report);
        continue;
      }
    }
    const providers::ProviderProblem provider_problem = providers::moe_provider_problem(problem);
    const Routing routing = problem.make_routing();
    problem_report.experts_touched = routing.experts_touched();
    problem_report.rows_per_expert = providers::rows_per_expert(routing);
    // What production would run without a table; a rule that refuses every config leaves none to measure.
    std::optional<KernelConfig> heuristic;
    if (options.heuristic) {
      try {
        heuristic = options.heuristic(problem);
      } catch (const UnsupportedError&) {
      }
    }
    // Every provider's space is compiled and searched; the fastest verified configuration of any of them wins.
    std::optional<std::pair<KernelConfig, double>> best;
    db::ConfigId best_config{};
    for (const providers::MoeProvider* provider : moe_providers) {
      if (report.interrupted) break;
      if (options.auto_families &&
          !moe_auto_tune_covers(provider->name(), options.providers, problem.format, problem_report.rows_per_expert, target.limits.sm)) {
        continue;
      }
      providers::SpaceRequest space_request = options.space;
      if (!exhaustive) space_request.max_configs = 0;  // the strategy chooses within the budget
      providers::ProviderSpace space = provider->enumerate(provider_problem, target.limits, space_request, nullptr);
      problem_report.space_total += space.total;
      for (const auto& [rule, count] : space.removed_by_rule) problem_report.removed_by_rule[rule] += count;
      // The heuristic's config is this provider's when it is of its family: compiled with the space (added if the
      // space lacks it) and measured before the search.
      std::optional<std::string> heuristic_text;
      if (heuristic && heuristic->family == provider->family().name()) {
        heuristic_text = heuristic->to_string();
        if (std::find(space.configurations.begin(), space.configurations.end(), *heuristic_text) == space.configurations.end()) {
          space.configurations.push_back(*heuristic_text);
        }
      }
      std::vector<CompiledCandidate> candidates = compile_candidates(
          space.configurations, provider->family().name(), problem, target.arch, *services.compiler, problem_report);
      std::optional<CompiledCandidate> heuristic_candidate;
      if (heuristic_text) {
        const auto found = std::find_if(candidates.begin(), candidates.end(),
                                        [&](const CompiledCandidate& c) { return c.config.to_string() == *heuristic_text; });
        if (found != candidates.end()) {
          heuristic_candidate = *found;
          candidates.erase(found);  // measured once, as the heuristic
        }
      }
      problem_report.candidates += candidates.size() + (heuristic_candidate ? 1 : 0);
      if (options.dry_run) continue;
      const std::string source_hash = kernel_source_hash(provider->family());
      std::vector<search::PriorObservation>& provider_prior = prior[provider->name()];
      const auto evaluate = [&](const CompiledCandidate& candidate, const std::vector<double>& features,
                                search::Fidelity fidelity, bool is_heuristic = false) -> search::Evaluation {
        if (stop != nullptr && stop->load()) {
          report.interrupted = true;
          throw StopSearch{};
        }
        CandidateJob job = moe_job(provider->name(), provider_problem, candidate.config.to_string(), services);
        job.load.arch = target.arch;
        job.load.expected_cache_key = candidate.cache_key;
        const bool full = fidelity == search::Fidelity::Full;
        if (!full) job.candidate.measure = services.measure.short_fidelity;
        const providers::CandidateResult result = services.evaluate(job, options.timeout_s);
        db::KernelConfig record = config_record(candidate.config, source_hash);
        record.family = provider->name();  // MoE configs never mix with the dense family's priors
        db::ConfigId config{};
        const std::string phase = is_heuristic ? "heuristic" : full ? options.strategy : options.strategy + "-screen";
        const bool measured = store_result(store, record, result, report.run, problem_id, phase, config);
        if (!measured) {
          ++problem_report.invalid;
          return {};
        }
        if (!full) return {true, result.measurement.median_us};  // a screening time never makes a winner
        ++problem_report.measured;
        if (is_heuristic) problem_report.heuristic_us = result.measurement.median_us;
        if (!features.empty()) provider_prior.push_back({features, result.measurement.median_us});
        if (!best || result.measurement.median_us < best->second) {
          best = std::make_pair(candidate.config, result.measurement.median_us);
          best_config = config;
        }
        return {true, result.measurement.median_us};
      };
      try {
        if (heuristic_candidate) {
          evaluate(*heuristic_candidate,
                   providers::moe_cost_features(provider->family(), heuristic_candidate->config, problem, routing, target.limits),
                   search::Fidelity::Full, true);
        }
        if (exhaustive) {
          for (const CompiledCandidate& candidate : candidates) evaluate(candidate, {}, search::Fidelity::Full);
        } else {
          std::vector<search::Candidate> searched;
          searched.reserve(candidates.size());
          for (std::size_t i = 0; i < candidates.size(); ++i) {
            searched.push_back({i, providers::moe_cost_features(provider->family(), candidates[i].config, problem, routing,
                                                                target.limits)});
          }
          search::StrategyOptions strategy_options = options.strategy_options;
          strategy_options.seed ^= fnv1a(problem.to_string());  // each bucket explores its own random picks
          strategy_options.prior = provider_prior;
          CandidateObjective objective([&](const search::Candidate& candidate, search::Fidelity fidelity) {
            return evaluate(candidates.at(candidate.id), searched.at(candidate.id).features, fidelity);
          });
          search::Budget budget = options.budget;
          if (options.budget_fraction) {
            const auto share = static_cast<std::size_t>(std::ceil(*options.budget_fraction * double(searched.size())));
            budget.max_evaluations = std::min(budget.max_evaluations, std::max<std::size_t>(1, share));
          }
          search::make_strategy(options.strategy, strategy_options)->run(searched, objective, budget);
        }
      } catch (const StopSearch&) {
        break;
      }
    }
    if (!options.dry_run) {
      if (!options.baseline.empty() && !report.interrupted) {
        measure_baseline(options.baseline, provider_problem, options.timeout_s, services, store, report.run, problem_id,
                         problem_report);
      }
      if (best) {
        db::set_moe_winner(store, db::MoeWinner{report.run, problem_id, best_config, best->second,
                                                "fastest of " + std::to_string(problem_report.measured) + " verified"});
        problem_report.winner = best->first;
        problem_report.winner_us = best->second;
        problem_report.winner_bytes = providers::moe_compulsory_bytes(problem, routing, best->first);
        ++report.winners;
      }
    }
    problem_report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    report.reports.push_back(problem_report);
    if (services.problem_finished) services.problem_finished(problem_report);
    if (report.interrupted) break;
  }
  store.finish_run(report.run, report.interrupted ? db::RunStatus::Interrupted : db::RunStatus::Completed);
  return report;
}

}  // namespace qtune::tune
