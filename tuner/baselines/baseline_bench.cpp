#include "tuner/baselines/baseline_bench.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>

#include "kernels/error.hpp"
#include "tuner/baselines/cublaslt_provider.hpp"
#include "tuner/measure/statistics.hpp"
#include "tuner/measure/worker.hpp"
#include "tuner/runtime/device.hpp"
#include "tuner/runtime/memory.hpp"

namespace qtune::baselines {

// ---------------------------------------------------------------- JSON

void to_json(nlohmann::json& json, const VerifyResult& result) {
  json = nlohmann::json{
      {"passed", result.passed},
      // JSON has no infinity: a non-finite error (NaN or inf in the output) is written as null.
      {"rel_error", std::isfinite(result.rel_error) ? nlohmann::json(result.rel_error) : nlohmann::json()},
      {"tolerance", result.tolerance},
      {"rows_checked", result.rows_checked},
      {"unwritten", result.unwritten},
      {"exact_mismatches", result.exact_mismatches},
      {"message", result.message}};
}

void from_json(const nlohmann::json& json, VerifyResult& result) {
  result.passed = json.at("passed").get<bool>();
  const auto& error = json.at("rel_error");
  result.rel_error = error.is_null() ? std::numeric_limits<double>::infinity() : error.get<double>();
  result.tolerance = json.at("tolerance").get<double>();
  result.rows_checked = json.value("rows_checked", int64_t{0});
  result.unwritten = json.value("unwritten", int64_t{0});
  result.exact_mismatches = json.value("exact_mismatches", int64_t{0});
  result.message = json.value("message", std::string());
}

void to_json(nlohmann::json& json, const VariantResult& result) {
  json = nlohmann::json{
      {"label", result.label}, {"params", result.params}, {"verify", result.verify}, {"error", result.error}};
  json["measurement"] = result.measurement ? nlohmann::json(*result.measurement) : nlohmann::json();
}

void from_json(const nlohmann::json& json, VariantResult& result) {
  result.label = json.at("label").get<std::string>();
  result.params = json.value("params", nlohmann::json::object());
  result.verify = json.at("verify").get<VerifyResult>();
  result.error = json.value("error", std::string());
  const auto& measurement = json.at("measurement");
  if (measurement.is_null()) {
    result.measurement.reset();
  } else {
    result.measurement = measurement.get<measure::Measurement>();
  }
}

void to_json(nlohmann::json& json, const Runoff& runoff) {
  json = nlohmann::json{{"first", runoff.first},         {"second", runoff.second}, {"first_us", runoff.first_us},
                        {"second_us", runoff.second_us}, {"ratio", runoff.ratio},   {"winner", runoff.winner},
                        {"decision", runoff.decision}};
}

void from_json(const nlohmann::json& json, Runoff& runoff) {
  runoff.first = json.at("first").get<int>();
  runoff.second = json.at("second").get<int>();
  runoff.first_us = json.value("first_us", std::vector<double>{});
  runoff.second_us = json.value("second_us", std::vector<double>{});
  runoff.ratio = json.value("ratio", 0.0);
  runoff.winner = json.at("winner").get<int>();
  runoff.decision = json.value("decision", std::string());
}

std::string_view to_string(PinOutcome outcome) {
  switch (outcome) {
    case PinOutcome::NotAsked:
      return "not-asked";
    case PinOutcome::Pinned:
      return "pinned";
    case PinOutcome::NotListed:
      return "not-listed";
    case PinOutcome::NotVerified:
      return "not-verified";
  }
  return "not-asked";
}

PinOutcome parse_pin_outcome(std::string_view text) {
  for (const PinOutcome outcome :
       {PinOutcome::NotAsked, PinOutcome::Pinned, PinOutcome::NotListed, PinOutcome::NotVerified}) {
    if (to_string(outcome) == text) return outcome;
  }
  QTUNE_INPUT_ERROR("pin: expected not-asked, pinned, not-listed or not-verified, got '" + std::string(text) + "'");
}

void to_json(nlohmann::json& json, const TargetResult& result) {
  json = nlohmann::json{{"target", result.target},
                        {"m", result.problem.m},
                        {"n", result.problem.n},
                        {"k", result.problem.k},
                        {"executed_m", result.executed_m},
                        {"supported", result.supported},
                        {"unsupported_reason", result.unsupported_reason},
                        {"notes", result.notes},
                        {"variants", result.variants},
                        {"best", result.best},
                        {"device", result.device},
                        {"pin", to_string(result.pin)},
                        {"placement_medians_us", result.placement_medians_us},
                        {"placement_second_pass_us", result.placement_second_pass_us}};
  json["runoff"] = result.runoff ? nlohmann::json(*result.runoff) : nlohmann::json();
}

void from_json(const nlohmann::json& json, TargetResult& result) {
  result.target = json.at("target").get<std::string>();
  result.problem = {json.at("m").get<int64_t>(), json.at("n").get<int64_t>(), json.at("k").get<int64_t>()};
  result.executed_m = json.value("executed_m", result.problem.m);
  result.supported = json.at("supported").get<bool>();
  result.unsupported_reason = json.value("unsupported_reason", std::string());
  result.notes = json.value("notes", std::string());
  result.variants = json.value("variants", std::vector<VariantResult>{});
  result.best = json.value("best", -1);
  result.placement_medians_us = json.value("placement_medians_us", std::vector<double>{});
  result.placement_second_pass_us = json.value("placement_second_pass_us", std::vector<double>{});
  result.device = json.value("device", nlohmann::json());
  result.pin = parse_pin_outcome(json.value("pin", std::string(to_string(PinOutcome::NotAsked))));
  if (json.contains("runoff") && !json.at("runoff").is_null()) {
    result.runoff = json.at("runoff").get<Runoff>();
  } else {
    result.runoff.reset();
  }
}

// ---------------------------------------------------------------- tuning

namespace {

// 0.0231 -> "2.31%".
std::string percent_text(double fraction) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.2f%%", 100 * fraction);
  return buffer;
}

}  // namespace

int best_variant_index(const std::vector<VariantResult>& variants) {
  int best = -1;
  for (size_t i = 0; i < variants.size(); ++i) {
    const VariantResult& variant = variants[i];
    if (!variant.verify.passed || !variant.measurement) continue;
    if (best < 0 || variant.measurement->median_us < variants[static_cast<size_t>(best)].measurement->median_us) {
      best = static_cast<int>(i);
    }
  }
  return best;
}

std::optional<std::pair<int, int>> runoff_pair(const std::vector<VariantResult>& variants) {
  std::vector<int> timed;
  for (size_t i = 0; i < variants.size(); ++i) {
    if (variants[i].verify.passed && variants[i].measurement) timed.push_back(static_cast<int>(i));
  }
  if (timed.size() < 2) return std::nullopt;
  // Stable: of equal medians the earlier (cuBLASLt's preference) comes first.
  std::stable_sort(timed.begin(), timed.end(), [&](int a, int b) {
    return variants[static_cast<size_t>(a)].measurement->median_us < variants[static_cast<size_t>(b)].measurement->median_us;
  });
  return std::make_pair(std::min(timed[0], timed[1]), std::max(timed[0], timed[1]));
}

void validate(const RunoffOptions& options) {
  if (options.rounds < 0 || options.rounds > 100) {
    QTUNE_INPUT_ERROR("runoff.rounds: must be in [0, 100], got " + std::to_string(options.rounds));
  }
  if (!(options.tie_tolerance >= 0 && options.tie_tolerance < 1)) {
    QTUNE_INPUT_ERROR("runoff.tie_tolerance: must be in [0, 1), got " + std::to_string(options.tie_tolerance));
  }
  if (!(options.round_time_budget_s >= 0)) {
    QTUNE_INPUT_ERROR("runoff.round_time_budget_s: must be >= 0, got " + std::to_string(options.round_time_budget_s));
  }
  if (!(options.screen_time_s >= 0 && options.screen_time_s <= kMaxScreenTimeS)) {
    QTUNE_INPUT_ERROR("runoff.screen_time_s: must be in [0, " + std::to_string(kMaxScreenTimeS) + "], got " +
                      std::to_string(options.screen_time_s));
  }
}

measure::MeasureOptions screening_options(const measure::MeasureOptions& full, double screen_time_s) {
  if (!(screen_time_s > 0 && screen_time_s <= kMaxScreenTimeS)) {
    QTUNE_INPUT_ERROR("screen_time_s: must be in (0, " + std::to_string(kMaxScreenTimeS) + "], got " +
                      std::to_string(screen_time_s));
  }
  measure::MeasureOptions screen = full;
  screen.time_budget_s = 2 * screen_time_s;
  screen.min_measure_s = screen_time_s;
  screen.max_warmup_s = std::min(full.max_warmup_s, screen_time_s / 4);
  screen.min_warmup_s = std::min(full.min_warmup_s, screen.max_warmup_s);
  // A ranking within one run: slow phases and clock dips hit neighbouring candidates alike, and the winner's
  // final measurement keeps every check.
  screen.stability_blocks = 0;
  screen.clock_dip_fraction = 0;
  screen.throttle_retries = 0;
  return screen;
}

Runoff run_off(int first, int second, const RunoffOptions& options, const std::function<double(int)>& measure_median_us) {
  validate(options);
  if (options.rounds < 1) QTUNE_INPUT_ERROR("runoff.rounds: a run-off needs at least one round");
  if (first < 0 || second <= first) {
    QTUNE_INPUT_ERROR("runoff: expected two variant indices with first < second, got " + std::to_string(first) + " and " +
                      std::to_string(second));
  }
  Runoff runoff;
  runoff.first = first;
  runoff.second = second;
  const auto timed = [&](int index) {
    const double median_us = measure_median_us(index);
    if (!(median_us > 0) || !std::isfinite(median_us)) {
      QTUNE_THROW(Error, "run-off: variant " + std::to_string(index) + " measured no time (" + std::to_string(median_us) + ")");
    }
    return median_us;
  };
  std::vector<double> ratios;
  for (int round = 0; round < options.rounds; ++round) {
    // A B, then B A: a drift that is linear over two rounds weighs on both alike.
    double first_us = 0;
    double second_us = 0;
    if (round % 2 == 0) {
      first_us = timed(first);
      second_us = timed(second);
    } else {
      second_us = timed(second);
      first_us = timed(first);
    }
    runoff.first_us.push_back(first_us);
    runoff.second_us.push_back(second_us);
    ratios.push_back(first_us / second_us);
  }
  runoff.ratio = measure::median(ratios);
  const std::string rounds = " over " + std::to_string(options.rounds) + " interleaved rounds";
  if (runoff.ratio > 1 + options.tie_tolerance) {
    runoff.winner = second;
    runoff.decision = "second faster by " + percent_text(1 - 1 / runoff.ratio) + rounds;
  } else if (runoff.ratio < 1 - options.tie_tolerance) {
    runoff.winner = first;
    runoff.decision = "first faster by " + percent_text(1 - runoff.ratio) + rounds;
  } else {
    runoff.winner = first;
    runoff.decision = "tie within " + percent_text(options.tie_tolerance) + rounds +
                      ": cuBLASLt's earlier choice kept";
  }
  return runoff;
}

namespace {

// A sticky CUDA error leaves the context unusable: nothing after it can be trusted, so it ends the whole job.
void rethrow_if_context_lost() {
  if (const auto sticky = runtime::sticky_context_error()) {
    QTUNE_LIBRARY_ERROR("CUDA driver", "the CUDA context is lost (" + *sticky + ")");
  }
}

}  // namespace

namespace {

// Times the selected algorithm with the pipeline's measurement; a failure other than a missing GPU or a lost context
// comes back as nullopt, with the reason in `failure`.
std::optional<measure::Measurement> time_selected(CublasLtBaseline& baseline, const measure::MeasureOptions& options,
                                                  std::string& failure) {
  try {
    CublasLtRunnable runnable(baseline);
    return providers::measure_candidate(runnable, options);
  } catch (const NoGpuError&) {
    throw;
  } catch (const Error& error) {
    rethrow_if_context_lost();
    failure = error.what();
    return std::nullopt;
  }
}

// Checks `algo` through the pipeline (poison, launch, verify) and, when it passes, times it; failures are recorded
// in the result.
VariantResult verify_and_time(CublasLtBaseline& baseline, const AlgoInfo& algo,
                              const measure::MeasureOptions& options) {
  VariantResult variant;
  variant.label = algo.describe();
  variant.params = nlohmann::json::parse(algo.to_json());
  baseline.select_algorithm(algo.heuristic_index);
  try {
    CublasLtRunnable runnable(baseline);
    providers::check_candidate(runnable, nullptr);  // the legacy default stream; verify() surfaces any fault
    variant.verify = runnable.last_verification();
  } catch (const Error& error) {
    rethrow_if_context_lost();
    variant.verify.passed = false;
    variant.verify.rel_error = std::numeric_limits<double>::infinity();
    variant.verify.message = std::string("verification run failed: ") + error.what();
    variant.error = variant.verify.message;
    return variant;
  }
  if (!variant.verify.passed) {
    variant.error = "not timed: verification failed";
    return variant;
  }
  std::string failure;
  variant.measurement = time_selected(baseline, options, failure);
  if (!variant.measurement) variant.error = "measurement failed: " + failure;
  return variant;
}

void append_note(std::string& notes, const std::string& note) {
  notes += (notes.empty() ? "" : "; ") + note;
}

// The pinned algorithm alone, when it is listed and verifies and times; otherwise nullopt with `result.pin` and its
// note saying why.
std::optional<VariantResult> try_pinned(CublasLtBaseline& baseline, const PinnedAlgorithm& pinned,
                                        const measure::MeasureOptions& options, TargetResult& result) {
  const std::vector<AlgoInfo>& algorithms = baseline.algorithms();
  const std::string was = "h" + std::to_string(pinned.algorithm.heuristic_index);
  const std::optional<size_t> found = find_algorithm(algorithms, pinned.algorithm);
  if (!found) {
    result.pin = PinOutcome::NotListed;
    std::string chosen = pinned.algorithm.describe();
    chosen = chosen.substr(chosen.find(' ') + 1);  // without its old "hN"
    append_note(result.notes, "pin: the algorithm of " + pinned.origin + " (" + chosen + ") is not among the " +
                                  std::to_string(algorithms.size()) + " cuBLASLt lists now; top-k + run-off decided");
    return std::nullopt;
  }
  const AlgoInfo& algo = algorithms[*found];
  VariantResult variant = verify_and_time(baseline, algo, options);
  if (!variant.verify.passed || !variant.measurement) {
    result.pin = PinOutcome::NotVerified;
    append_note(result.notes, "pin: the algorithm of " + pinned.origin + " (h" + std::to_string(algo.heuristic_index) +
                                  " now) failed: " + variant.error + "; top-k + run-off decided");
    return std::nullopt;
  }
  result.pin = PinOutcome::Pinned;
  append_note(result.notes, "pinned h" + std::to_string(algo.heuristic_index) + " from " + pinned.origin + " (" + was +
                                " then; no run-off)");
  return variant;
}

// The selected winner of a screened first pass, measured again with the full options: that measurement replaces
// its screening one. When it fails, the variant keeps no measurement and the target has no best.
void measure_finalist(CublasLtBaseline& baseline, const measure::MeasureOptions& options, double screen_time_s,
                      TargetResult& result) {
  VariantResult& finalist = result.variants.at(static_cast<size_t>(result.best));
  const double screened_us = finalist.measurement->median_us;
  std::string failure;
  finalist.measurement = time_selected(baseline, options, failure);
  if (!finalist.measurement) {
    finalist.error = "final measurement failed: " + failure;
    result.best = -1;
    return;
  }
  char note[160];
  std::snprintf(note, sizeof note, "screened %zu algorithms for %.3g s each; the winner (%.2f us screened) measured in full",
                result.variants.size(), screen_time_s, screened_us);
  append_note(result.notes, note);
}

}  // namespace

TargetResult tune_baseline(CublasLtBaseline& baseline, const measure::MeasureOptions& options,
                           const RunoffOptions& runoff_options, const std::optional<PinnedAlgorithm>& pinned,
                           int top_k) {
  validate(runoff_options);
  if (top_k < 0) QTUNE_INPUT_ERROR("top_k: must be >= 0 (0: every listed algorithm), got " + std::to_string(top_k));
  TargetResult result;
  result.target = baseline.id();
  result.problem = baseline.problem();
  result.executed_m = baseline.executed_m();
  result.supported = baseline.supported();
  result.unsupported_reason = baseline.unsupported_reason();
  result.notes = baseline.notes();
  if (!baseline.supported()) return result;

  const std::vector<AlgoInfo>& algorithms = baseline.algorithms();
  if (pinned) {
    if (std::optional<VariantResult> variant = try_pinned(baseline, *pinned, options, result)) {
      result.variants.push_back(std::move(*variant));
      result.best = 0;  // the pinned algorithm is selected: try_pinned timed it last
      return result;
    }
  }

  const bool screening = runoff_options.screen_time_s > 0;
  const measure::MeasureOptions first_pass =
      screening ? screening_options(options, runoff_options.screen_time_s) : options;
  const size_t timed_count =
      top_k > 0 ? std::min(algorithms.size(), static_cast<size_t>(top_k)) : algorithms.size();
  for (size_t i = 0; i < timed_count; ++i) {
    result.variants.push_back(verify_and_time(baseline, algorithms[i], first_pass));
  }
  // variants[i] is algorithms[i] from here on.
  result.best = best_variant_index(result.variants);
  const std::optional<std::pair<int, int>> pair =
      runoff_options.rounds > 0 ? runoff_pair(result.variants) : std::nullopt;
  if (pair) {
    measure::MeasureOptions round = options;
    if (screening && runoff_options.round_time_budget_s == 0) {
      round = first_pass;
    } else {
      round.time_budget_s =
          runoff_options.round_time_budget_s > 0 ? runoff_options.round_time_budget_s : options.time_budget_s / 4;
      round.max_warmup_s = std::min(options.max_warmup_s, round.time_budget_s / 2);
      round.min_measure_s = std::min(options.min_measure_s, round.time_budget_s / 2);
      round.min_warmup_s = std::min(options.min_warmup_s, round.max_warmup_s);
    }
    round.clock_dip_fraction = 0;  // the rounds alternate, so a dip slows both; a cooled-down retry only costs time
    round.stability_blocks = 0;    // likewise a slow phase: alternating rounds, not long ones, cancel it out
    try {
      Runoff runoff = run_off(pair->first, pair->second, runoff_options, [&](int index) {
        baseline.select_algorithm(algorithms.at(static_cast<size_t>(index)).heuristic_index);
        CublasLtRunnable runnable(baseline);
        return providers::measure_candidate(runnable, round).median_us;
      });
      result.best = runoff.winner;
      result.runoff = std::move(runoff);
    } catch (const NoGpuError&) {
      throw;
    } catch (const Error& error) {
      rethrow_if_context_lost();
      Runoff failed;
      failed.first = pair->first;
      failed.second = pair->second;
      failed.winner = result.best;
      failed.decision = std::string("run-off failed, the first pass decides: ") + error.what();
      result.runoff = std::move(failed);
    }
  }
  if (result.best >= 0) baseline.select_algorithm(algorithms.at(static_cast<size_t>(result.best)).heuristic_index);
  if (screening && result.best >= 0) measure_finalist(baseline, options, runoff_options.screen_time_s, result);
  return result;
}

namespace {

// Copies of `baseline`'s operands in other physical memory, each behind a spacer allocation, with `chosen` selected
// and verified on each. Every set stays alive as long as this does, so that the allocator cannot hand the same
// pages back.
struct PlacedCopies {
  std::vector<runtime::DeviceBuffer> spacers;
  std::vector<std::unique_ptr<CublasLtBaseline>> copies;
};

PlacedCopies place_copies(const CublasLtBaseline& baseline, const AlgoInfo& chosen, int count) {
  PlacedCopies placed;
  for (int placement = 1; placement <= count; ++placement) {
    placed.spacers.emplace_back(static_cast<std::size_t>(placement) * (std::size_t{7} << 20) + (std::size_t{3} << 20));
    auto copy = std::make_unique<CublasLtBaseline>(baseline.kind(), baseline.options());
    copy->prepare_copy_of(baseline);  // the same operands elsewhere in memory, not drawn again
    const std::optional<size_t> position = find_algorithm(copy->algorithms(), chosen);
    if (!position) {
      QTUNE_THROW(Error, "placements: cuBLASLt did not list the chosen algorithm again (" + chosen.describe() + ")");
    }
    copy->select_algorithm(copy->algorithms()[*position].heuristic_index);
    const VerifyResult verified = copy->verify();
    if (!verified.passed) {
      QTUNE_THROW(Error, "placements: the chosen algorithm failed verification on placement " +
                             std::to_string(placement) + ": " + verified.message);
    }
    placed.copies.push_back(std::move(copy));
  }
  return placed;
}

std::string medians_text(const std::vector<double>& values) {
  std::string text;
  for (const double value : values) {
    char item[32];
    std::snprintf(item, sizeof item, "%.2f", value);
    text += (text.empty() ? "" : " / ") + std::string(item);
  }
  return text;
}

// --placements: the chosen algorithm timed on every set, in two passes, and the samples of all of them pooled.
void time_each_placement(CublasLtBaseline& baseline, PlacedCopies& placed, const measure::MeasureOptions& options,
                         TargetResult& result) {
  VariantResult& best = result.variants.at(static_cast<size_t>(result.best));
  const auto set = [&](size_t index) -> CublasLtBaseline& { return index == 0 ? baseline : *placed.copies[index - 1]; };
  const size_t sets = placed.copies.size() + 1;
  std::vector<measure::Measurement> parts = {*best.measurement};
  result.placement_medians_us.push_back(best.measurement->median_us);
  for (size_t index = 1; index < sets; ++index) {
    CublasLtRunnable runnable(set(index));
    parts.push_back(providers::measure_candidate(runnable, options));
    result.placement_medians_us.push_back(parts.back().median_us);
  }
  // A second pass, in reverse order, times every set again: a set that repeats its own time shows that the time
  // follows where the operands sit, not when they were timed.
  for (size_t index = sets; index-- > 0;) {
    CublasLtRunnable runnable(set(index));
    parts.push_back(providers::measure_candidate(runnable, options));
    result.placement_second_pass_us.insert(result.placement_second_pass_us.begin(), parts.back().median_us);
  }
  // The stored measurement is every sample of both passes on every set: its median weighs each set alike.
  *best.measurement = measure::pool_measurements(parts, options.confidence);
  append_note(result.notes, "all samples of " + std::to_string(sets) + " operand placements timed twice, medians " +
                                medians_text(result.placement_medians_us) + " us; again, in reverse order: " +
                                medians_text(result.placement_second_pass_us) + " us");
}

}  // namespace

TargetResult bench_baseline(const BenchBaselineRequest& request) {
  validate_placements(request);
  BaselineOptions listing = request.baseline;
  if (request.pinned) {
    if (request.pinned->search_depth < 1) {
      QTUNE_INPUT_ERROR("pinned.search_depth: must be at least 1, got " + std::to_string(request.pinned->search_depth));
    }
    listing.top_k = std::max(listing.top_k, request.pinned->search_depth);
  }
  CublasLtBaseline baseline(request.kind, listing);
  baseline.prepare(request.problem, request.seed);
  TargetResult result = tune_baseline(baseline, request.measure, request.runoff, request.pinned, request.baseline.top_k);
  result.problem = request.problem;
  result.device = runtime::Device::get(request.baseline.device).info();
  const VariantResult* best = result.best_variant();
  if (request.placements == 1 || best == nullptr || !best->measurement) return result;
  PlacedCopies placed = place_copies(baseline, algo_info_from_json(best->params.dump()), request.placements - 1);
  time_each_placement(baseline, placed, request.measure, result);
  return result;
}

void validate_placements(const BenchBaselineRequest& request) {
  if (request.placements < 1 || request.placements > kMaxPlacements) {
    QTUNE_INPUT_ERROR("placements: must be 1.." + std::to_string(kMaxPlacements) + ", got " +
                      std::to_string(request.placements));
  }
}

// ---------------------------------------------------------------- worker job

using measure::job_field;


nlohmann::json to_job_params(const BenchBaselineRequest& request) {
  nlohmann::json params{{"baseline", baseline_id(request.kind)},
                        {"m", request.problem.m},
                        {"n", request.problem.n},
                        {"k", request.problem.k},
                        {"seed", request.seed},
                        {"top_k", request.baseline.top_k},
                        {"workspace_bytes", request.baseline.workspace_bytes},
                        {"max_verify_rows", request.baseline.max_verify_rows},
                        {"fp8_output", to_string(request.baseline.fp8_output)},
                        {"measure", measure::measure_options_to_json(request.measure)},
                        {"runoff",
                         {{"rounds", request.runoff.rounds},
                          {"tie_tolerance", request.runoff.tie_tolerance},
                          {"round_time_budget_s", request.runoff.round_time_budget_s},
                          {"screen_time_s", request.runoff.screen_time_s}}}};
  params["placements"] = request.placements;
  if (request.pinned) {
    params["pinned"] = {{"algorithm", nlohmann::json::parse(request.pinned->algorithm.to_json())},
                        {"origin", request.pinned->origin},
                        {"search_depth", request.pinned->search_depth}};
  }
  return params;
}

BenchBaselineRequest request_from_job_params(const nlohmann::json& params) {
  BenchBaselineRequest request;
  if (!params.contains("baseline")) QTUNE_INPUT_ERROR("baseline: missing");
  request.kind = parse_baseline_id(job_field(params, "baseline", std::string()), "baseline");
  request.problem = {job_field(params, "m", int64_t{0}), job_field(params, "n", int64_t{0}), job_field(params, "k", int64_t{0})};
  validate_problem(request.problem, "m, n, k");
  request.seed = job_field(params, "seed", request.seed);
  request.placements = job_field(params, "placements", request.placements);
  validate_placements(request);
  request.baseline.top_k = job_field(params, "top_k", request.baseline.top_k);
  request.baseline.workspace_bytes = job_field(params, "workspace_bytes", request.baseline.workspace_bytes);
  request.baseline.max_verify_rows = job_field(params, "max_verify_rows", request.baseline.max_verify_rows);
  request.baseline.fp8_output =
      parse_output_type(job_field(params, "fp8_output", to_string(request.baseline.fp8_output)), "fp8_output");
  if (request.baseline.top_k < 1) QTUNE_INPUT_ERROR("top_k: must be at least 1");
  request.measure = measure::measure_options_from_json(params.value("measure", nlohmann::json::object()));
  request.baseline.device = request.measure.device;
  const nlohmann::json runoff = params.value("runoff", nlohmann::json::object());
  request.runoff.rounds = job_field(runoff, "rounds", request.runoff.rounds, "runoff.");
  request.runoff.tie_tolerance = job_field(runoff, "tie_tolerance", request.runoff.tie_tolerance, "runoff.");
  request.runoff.round_time_budget_s = job_field(runoff, "round_time_budget_s", request.runoff.round_time_budget_s, "runoff.");
  request.runoff.screen_time_s = job_field(runoff, "screen_time_s", request.runoff.screen_time_s, "runoff.");
  validate(request.runoff);
  if (params.contains("pinned") && !params.at("pinned").is_null()) {
    const nlohmann::json& pinned = params.at("pinned");
    if (!pinned.is_object()) QTUNE_INPUT_ERROR("pinned: expected an object, got " + pinned.dump());
    if (!pinned.contains("algorithm")) QTUNE_INPUT_ERROR("pinned.algorithm: missing");
    PinnedAlgorithm pin;
    try {
      pin.algorithm = algo_info_from_json(pinned.at("algorithm").dump());
    } catch (const InputError& error) {
      QTUNE_INPUT_ERROR(std::string("pinned.") + error.what());
    }
    pin.origin = job_field(pinned, "origin", std::string("an earlier run"), "pinned.");
    pin.search_depth = job_field(pinned, "search_depth", kDefaultPinSearchDepth, "pinned.");
    if (pin.search_depth < 1) {
      QTUNE_INPUT_ERROR("pinned.search_depth: must be at least 1, got " + std::to_string(pin.search_depth));
    }
    request.pinned = std::move(pin);
  }
  return request;
}

// ---------------------------------------------------------------- row figures

RowMetrics row_metrics(const TrafficModel& traffic, double flops, double median_us,
                       std::optional<double> copy_bandwidth_gbps, std::optional<double> peak_tflops) {
  RowMetrics metrics;
  if (!(median_us > 0)) return metrics;
  const double seconds = median_us * 1e-6;
  metrics.gigabytes_per_second = traffic.total() / seconds / 1e9;
  metrics.tflops = flops / seconds / 1e12;
  if (copy_bandwidth_gbps && *copy_bandwidth_gbps > 0) {
    metrics.bandwidth_percent = 100.0 * metrics.gigabytes_per_second / *copy_bandwidth_gbps;
  }
  if (peak_tflops && *peak_tflops > 0) metrics.peak_percent = 100.0 * metrics.tflops / *peak_tflops;
  return metrics;
}

search::TensorType tensor_type(BaselineKind kind) {
  switch (kind) {
    case BaselineKind::F16:
      return search::TensorType::F16;
    case BaselineKind::BF16:
      return search::TensorType::BF16;
    case BaselineKind::Fp8Tensor:
    case BaselineKind::Fp8Outer:
    case BaselineKind::Fp8Block128:
      return search::TensorType::FP8;
    case BaselineKind::Int8:
      return search::TensorType::INT8;
  }
  return search::TensorType::F16;
}

}  // namespace qtune::baselines
