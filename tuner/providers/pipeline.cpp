#include "tuner/providers/pipeline.hpp"

#include <array>
#include <cmath>
#include <limits>
#include <utility>

#include "kernels/error.hpp"

namespace qtune::providers {

namespace {

constexpr std::array<std::pair<CandidateOutcome, const char*>, 5> kOutcomeNames{{
    {CandidateOutcome::Measured, "measured"},
    {CandidateOutcome::VerificationFailed, "verification-failed"},
    {CandidateOutcome::Error, "error"},
    {CandidateOutcome::Crashed, "crashed"},
    {CandidateOutcome::Timeout, "timeout"},
}};

}  // namespace

std::string to_string(CandidateOutcome outcome) {
  for (const auto& [value, name] : kOutcomeNames) {
    if (value == outcome) return name;
  }
  return "error";
}

CandidateOutcome candidate_outcome_from_text(const std::string& text) {
  for (const auto& [value, name] : kOutcomeNames) {
    if (text == name) return value;
  }
  QTUNE_INPUT_ERROR("outcome: unknown candidate outcome '" + text + "'");
}

void to_json(nlohmann::json& json, const CandidateResult& result) {
  json = nlohmann::json{{"outcome", to_string(result.outcome)},
                        {"verified", result.verified},
                        {"max_rel_error", std::isfinite(result.max_rel_error) ? nlohmann::json(result.max_rel_error)
                                                                              : nlohmann::json(nullptr)},
                        {"tolerance", result.tolerance},
                        {"rows_checked", result.rows_checked},
                        {"verification_summary", result.verification_summary},
                        {"message", result.message}};
  if (result.outcome == CandidateOutcome::Measured) json["measurement"] = result.measurement;
}

void from_json(const nlohmann::json& json, CandidateResult& result) {
  result = CandidateResult{};
  result.outcome = candidate_outcome_from_text(json.at("outcome").get<std::string>());
  result.verified = json.value("verified", false);
  const nlohmann::json& error = json.at("max_rel_error");
  result.max_rel_error = error.is_number() ? error.get<double>() : std::numeric_limits<double>::infinity();
  result.tolerance = json.value("tolerance", 0.0);
  result.rows_checked = json.value("rows_checked", std::int64_t{0});
  result.verification_summary = json.value("verification_summary", std::string{});
  result.message = json.value("message", std::string{});
  if (json.contains("measurement")) result.measurement = json.at("measurement").get<measure::Measurement>();
}

Check check_candidate(Runnable& runnable, CUstream stream) {
  runnable.poison_output();
  runnable.launch(stream);
  return runnable.verify();
}

measure::Measurement measure_candidate(Runnable& runnable, const measure::MeasureOptions& options) {
  return measure::measure([&](CUstream stream) { runnable.launch(stream); }, options);
}

CandidateResult run_candidate(Runnable& runnable, CUstream stream, const CandidateOptions& options) {
  CandidateResult result;
  if (options.verify) {
    const Check check = check_candidate(runnable, stream);
    result.verified = true;
    result.max_rel_error = check.relative_error;
    result.tolerance = check.tolerance;
    result.rows_checked = check.rows_checked;
    result.verification_summary = check.summary;
    if (!check.passed) {
      result.outcome = CandidateOutcome::VerificationFailed;
      result.message = check.summary;
      return result;
    }
  } else {
    result.verification_summary = "not verified";
  }
  result.measurement = measure_candidate(runnable, options.measure);
  result.outcome = CandidateOutcome::Measured;
  return result;
}

}  // namespace qtune::providers
