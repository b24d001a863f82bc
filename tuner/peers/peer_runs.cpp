#include "tuner/peers/peer_runs.hpp"

#include <algorithm>
#include <cctype>
#include <limits>

#include "kernels/error.hpp"
#include "kernels/format.hpp"
#include "kernels/text_escape.hpp"
#include "search/gpu_profile.hpp"

namespace qtune::peers {

const std::vector<ProviderAlias>& provider_aliases() {
  // The names issue 15 and the peers' own documentation use; the output type is the one those kernels write.
  static const std::vector<ProviderAlias> aliases = {
      {"torch-fp8-rowwise", "torch-w8a8-fp8-ch:out=bf16"},
      {"deepgemm-w8a8-fp8-block128x128", "deepgemm-w8a8-fp8-block128x128:out=bf16"},
      {"deepgemm-fp8", "deepgemm-w8a8-fp8-block128x128:out=bf16"},
  };
  return aliases;
}

namespace {

std::string lower(std::string_view text) {
  std::string result(text);
  for (char& c : result) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return result;
}

std::string trimmed(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return std::string(text);
}

// Memory one GEMM moves at least, from the format's storage bits (scales counted with their operand).
baselines::TrafficModel peer_traffic(const ProviderId& provider, const baselines::GemmProblem& problem) {
  const auto m = static_cast<double>(problem.m);
  const auto n = static_cast<double>(problem.n);
  const auto k = static_cast<double>(problem.k);
  baselines::TrafficModel traffic;
  if (provider.operands == "f16" || provider.operands == "bf16") {
    traffic.activation_bytes = 2 * m * k;
    traffic.weight_bytes = 2 * n * k;
  } else {
    const FormatSpec format = FormatSpec::parse(provider.operands);
    traffic.activation_bytes = m * k * format.activation_bits() / 8.0;
    traffic.weight_bytes = n * k * format.bits_per_weight(problem.n, problem.k) / 8.0;
  }
  traffic.output_bytes = 2 * m * n;  // the peers write f16 or bf16
  return traffic;
}

search::TensorType peer_tensor_type(const ProviderId& provider) {
  if (provider.operands == "f16") return search::TensorType::F16;
  if (provider.operands == "bf16") return search::TensorType::BF16;
  return search::tensor_type_for(FormatSpec::parse(provider.operands).activation);
}

// The bench's display of one peer run: one variant labelled with the peer's version.
baselines::TargetResult target_result(const PeerResult& result, const providers::CandidateResult& candidate,
                                      const baselines::GemmProblem& problem) {
  baselines::TargetResult target;
  target.target = result.provider;
  target.problem = problem;
  target.executed_m = problem.m;
  target.supported = true;
  baselines::VariantResult variant;
  variant.label = result.peer_version.empty() ? "default" : "v" + result.peer_version;
  variant.params = config_params(result);
  variant.verify.passed = result.verification && result.verification->passed;
  variant.verify.rel_error = candidate.max_rel_error;
  variant.verify.tolerance = candidate.tolerance;
  variant.verify.unwritten = result.verification ? result.verification->nan_count : 0;
  variant.verify.message = candidate.verified ? candidate.verification_summary : candidate.message;
  if (candidate.outcome == providers::CandidateOutcome::Measured) variant.measurement = candidate.measurement;
  variant.error = candidate.message;
  target.variants.push_back(std::move(variant));
  if (candidate.outcome == providers::CandidateOutcome::Measured) target.best = 0;
  target.notes = "peer " + result.provider + (result.peer_version.empty() ? "" : " " + result.peer_version) +
                 ", config " + json_text(result.config);
  return target;
}

}  // namespace

bool names_cublaslt_baseline(std::string_view text) {
  const std::string name = lower(trimmed(text));
  return name == "all" || name.rfind("cublaslt-", 0) == 0;
}

std::vector<std::string> split_provider_list(std::string_view text) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string piece = trimmed(text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    const bool continues = !items.empty() && piece.find('=') != std::string::npos && piece.find(':') == std::string::npos &&
                           items.back().find(':') != std::string::npos;
    if (continues) {
      items.back() += "," + piece;
    } else if (!piece.empty()) {
      items.push_back(piece);
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return items;
}

ProviderId parse_provider(std::string_view text, std::string_view field) {
  const std::string name = lower(trimmed(text));
  for (const ProviderAlias& alias : provider_aliases()) {
    if (name == alias.alias) return parse_provider_id(alias.provider, field);
  }
  return parse_provider_id(trimmed(text), field);
}

providers::CandidateResult candidate_result(const PeerResult& result) {
  using providers::CandidateOutcome;
  providers::CandidateResult candidate;
  if (result.verification) {
    const PeerVerification& check = *result.verification;
    candidate.verified = true;
    candidate.max_rel_error =
        check.nan_count > 0 ? std::numeric_limits<double>::infinity() : check.relative_error;
    candidate.tolerance = check.tolerance;
    candidate.verification_summary = check.summary;
  }
  const std::string error = result.error_type.empty() ? result.error : result.error_type + ": " + result.error;
  switch (result.outcome) {
    case PeerOutcome::Measured:
      candidate.outcome = CandidateOutcome::Measured;
      candidate.measurement = *result.measurement;
      break;
    case PeerOutcome::Verified:
      candidate.outcome = CandidateOutcome::Error;
      candidate.message = "verified, not measured (measuring was not asked for)";
      break;
    case PeerOutcome::WrongAnswer:
      candidate.outcome = CandidateOutcome::VerificationFailed;
      candidate.message = result.verification ? result.verification->summary : result.error;
      break;
    case PeerOutcome::Error:
      candidate.outcome = CandidateOutcome::Error;
      candidate.message = error;
      break;
    case PeerOutcome::Fault:
      candidate.outcome = CandidateOutcome::Crashed;
      candidate.message = "fault: " + error;
      break;
    case PeerOutcome::Crashed:
      candidate.outcome = CandidateOutcome::Crashed;
      candidate.message = error;
      break;
    case PeerOutcome::Timeout:
      candidate.outcome = CandidateOutcome::Timeout;
      candidate.message = error;
      break;
  }
  return candidate;
}

nlohmann::json config_params(const PeerResult& result) {
  return {{"config", result.config.is_null() ? nlohmann::json::object() : result.config},
          {"peer_version", result.peer_version}};
}

tune::BenchTarget bench_target(PeerHost& host, const ProviderId& provider, const tune::BenchRequest& request) {
  tune::BenchTarget target;
  target.label = provider.text();
  target.traffic = [provider](const baselines::GemmProblem& problem) { return peer_traffic(provider, problem); };
  target.tensor_type = peer_tensor_type(provider);
  target.problem_format = request.format ? request.format->to_string() : provider.operands;
  target.config_kind = db::ConfigKind::Baseline;
  target.config_family = provider.text();
  PeerRunOptions options;
  options.measure = request.measure;
  options.timeout_s = request.timeout_s;
  const std::uint64_t seed = request.seed;
  const int device = request.device;
  target.measure_self = [&host, provider, options, seed, device](const baselines::GemmProblem& gemm) {
    const PeerProblem problem{gemm.m, gemm.n, gemm.k, seed, device};
    // The peer's default (its heuristic, or its only way), as its users run it.
    nlohmann::json config = nlohmann::json::object();
    PeerResult result;
    try {
      const std::vector<nlohmann::json> configs = host.configurations(provider, problem);
      if (!configs.empty()) config = configs.front();
      result = host.run(provider, problem, config, options);
    } catch (const InputError&) {
      throw;
    } catch (const NoGpuError&) {
      throw;
    } catch (const Error& error) {  // the worker died listing the configurations: a failed row like any other
      result.provider = provider.text();
      result.outcome = PeerOutcome::Error;
      result.error = error.what();
    }
    if (result.error_type == "NoGpuError") QTUNE_THROW(NoGpuError, provider.text() + ": " + result.error);
    tune::SelfMeasured measured;
    measured.candidate = candidate_result(result);
    measured.result = target_result(result, measured.candidate, gemm);
    const bool failed = !result.ok() && result.outcome != PeerOutcome::WrongAnswer;
    if (failed) measured.failure = to_string(result.outcome) + ": " + measured.candidate.message;
    return measured;
  };
  return target;
}

tune::MoeBaselineResult run_moe_job(PeerHost& host, const tune::CandidateJob& job, double timeout_s) {
  tune::MoeBaselineResult baseline;
  PeerResult result;
  result.provider = job.provider;
  try {
    const ProviderId provider = parse_provider_id(job.provider, "--moe-baseline");
    PeerProblem problem;
    problem.seed = job.prepare.seed;
    problem.device = job.prepare.device;
    problem.moe = job.problem.moe;
    PeerRunOptions options;
    options.measure = job.candidate.measure;
    options.timeout_s = std::max(timeout_s, kPeerMoeMinTimeoutS);
    const std::vector<nlohmann::json> configs = host.configurations(provider, problem, options.timeout_s);
    result = host.run(provider, problem, configs.empty() ? nlohmann::json::object() : configs.front(), options);
  } catch (const Error& error) {  // no worker, or it died listing the configurations: a failed row like any other
    result.outcome = PeerOutcome::Error;
    result.error = error.what();
  }
  baseline.result = candidate_result(result);
  if (result.verification) baseline.result.rows_checked = job.problem.moe.output_rows();
  baseline.params = config_params(result);
  return baseline;
}

}  // namespace qtune::peers
