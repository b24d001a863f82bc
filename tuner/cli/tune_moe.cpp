#include "tuner/cli/tune_moe.hpp"

#include <algorithm>
#include <cctype>
#include <iostream>

#include "kernels/error.hpp"
#include "kernels/text_escape.hpp"
#include "tuner/cli/commands.hpp"

namespace qtune::cli {

void add_moe_tune_options(CLI::App& command, MoeTuneCommandOptions& options) {
  command.add_option("--tokens", options.tokens,
                     "token buckets T of the model's MoE expert GEMMs, e.g. 1,16,64 (default: 1,16,64,256,1024,4096)");
  command.add_option("--routing", options.routing,
                     "routing of the MoE problems: uniform, balanced, zipf[:EXPONENT] or file:PATH (a JSON routing file, "
                     "docs/moe.md); generated ones use seed 1")
      ->capture_default_str();
  command.add_option("--moe-layout", options.layouts,
                     "MoE layouts to tune: token-indexed, grouped-contiguous, grouped-masked (comma-separated)")
      ->capture_default_str();
  command.add_option("--moe-baseline", options.baseline,
                     "also measure this MoE baseline once per MoE problem searched, stored as a baseline (columns "
                     "baseline, baseline_us): cublas-grouped-f16 (CUDA 13's cuBLAS grouped GEMM over the touched experts, "
                     "f16 weights dequantized, the same rows), or a peer's MoE kernel: humming (Humming's indexed MoE "
                     "GEMM in each problem's format, its heuristic; docs/peers.md) or one provider such as "
                     "humming-w4a16-int4-g128 (problems of that format)");
}

std::string canonical_moe_baseline(const std::string& baseline) {
  for (const char* known : tune::kMoeBaselines) {
    if (baseline == known) return baseline;
  }
  if (baseline.find('-') == std::string::npos) return baseline;
  return peers::parse_provider_id(baseline, "--moe-baseline").text();
}

std::vector<peers::ProviderId> moe_baseline_peer_providers(const std::string& text, const std::vector<MoeProblem>& problems) {
  const std::string baseline = canonical_moe_baseline(text);
  std::vector<peers::ProviderId> providers;
  for (const char* known : tune::kMoeBaselines) {
    if (baseline == known) return providers;
  }
  for (const MoeProblem& problem : problems) {
    const std::string provider = tune::moe_baseline_provider(baseline, problem);
    if (provider.empty()) continue;
    const peers::ProviderId id = peers::parse_provider_id(provider, "--moe-baseline");
    if (std::find(providers.begin(), providers.end(), id) == providers.end()) providers.push_back(id);
  }
  return providers;
}

namespace {

// cublas-grouped-f16, a peer name, or a peer's provider of one of the tune's formats; InputError naming --moe-baseline.
void check_moe_baseline(const std::string& baseline, const std::vector<FormatSpec>& formats) {
  if (baseline.empty()) return;
  for (const char* known : tune::kMoeBaselines) {
    if (baseline == known) return;
  }
  const std::string known = std::string(tune::kMoeBaselines[0]) + ", a peer such as humming, or a provider such as humming-" +
                            (formats.empty() ? std::string("w4a16-int4-g128") : formats.front().to_string());
  const std::size_t dash = baseline.find('-');
  const std::string peer = baseline.substr(0, dash);
  const bool named = !peer.empty() && std::all_of(peer.begin(), peer.end(), [](char c) {
    return std::islower(static_cast<unsigned char>(c)) != 0 || std::isdigit(static_cast<unsigned char>(c)) != 0 || c == '_';
  });
  const auto unknown = [&] {
    QTUNE_INPUT_ERROR("--moe-baseline: unknown MoE baseline " + quote_input(baseline) + " (known: " + known + ")");
  };
  if (!named) unknown();
  if (dash == std::string::npos) return;
  peers::ProviderId provider;
  try {
    provider = peers::parse_provider_id(baseline, "--moe-baseline");
  } catch (const InputError&) {
    unknown();
  }
  const bool tuned = std::any_of(formats.begin(), formats.end(),
                                 [&](const FormatSpec& format) { return format.to_string() == provider.operands; });
  if (!tuned) {
    QTUNE_INPUT_ERROR("--moe-baseline: " + quote_input(baseline) + " runs " + provider.operands +
                      ", which is none of the tune's --format (give the peer's name, e.g. " + provider.peer +
                      ", for its provider of each format)");
  }
}

}  // namespace

std::vector<MoeProblem> moe_tune_problems(const MoeTuneCommandOptions& options, const search::ModelShapes* model, int tp,
                                          const std::vector<FormatSpec>& formats, bool moe_wanted) {
  const std::vector<std::int64_t> tokens =
      options.tokens.empty() ? tune::default_token_buckets() : tune::parse_token_list(options.tokens, "--tokens");
  const std::vector<MoeLayout> layouts = tune::parse_layout_list(options.layouts, "--moe-layout");
  const RoutingSpec routing = RoutingSpec::parse(options.routing, 1, "--routing");
  std::vector<MoeProblem> problems;
  if (model != nullptr && moe_wanted) {
    problems = tune::moe_problems_of_model(*model, tp, formats, tokens, layouts, routing, "--tp");
  }
  check_moe_baseline(options.baseline, formats);
  if (problems.empty()) {
    const MoeTuneCommandOptions defaults;
    const char* given = !options.tokens.empty()                 ? "--tokens"
                        : options.routing != defaults.routing   ? "--routing"
                        : options.layouts != defaults.layouts   ? "--moe-layout"
                        : !options.baseline.empty()             ? "--moe-baseline"
                                                                : nullptr;
    if (given != nullptr) {
      QTUNE_INPUT_ERROR(std::string(given) + ": applies to MoE expert GEMMs, and this tune has none (give --model with "
                                             "moe_expert GEMMs and --gemms all or moe)");
    }
  }
  return problems;
}

reports::Table moe_report_table(const tune::MoeTuneReport& report) {
  // The baseline's columns appear when one was asked for: its provider, median (or why it has none), and the
  // winner's speedup over it.
  const bool with_baseline = std::any_of(report.reports.begin(), report.reports.end(),
                                         [](const tune::MoeProblemReport& problem) { return !problem.baseline.empty(); });
  std::vector<std::string> header{"format", "projection", "experts", "top_k", "tokens", "n", "k", "layout", "routing",
                                  "space", "touched", "rows_per_expert", "candidates", "compile_failed", "measured",
                                  "invalid", "winner_us", "winner_gbps", "heuristic_us", "baseline_us"};
  if (with_baseline) header.insert(header.end(), {"baseline", "vs_baseline"});
  header.insert(header.end(), {"seconds", "winner"});
  reports::Table table(header);
  for (const tune::MoeProblemReport& problem : report.reports) {
    const MoeProblem& moe = problem.problem;
    std::vector<std::string> row{
        moe.format.to_string(), std::string(moe_projection_name(moe.projection)), std::to_string(moe.experts),
        std::to_string(moe.top_k), std::to_string(moe.tokens), std::to_string(moe.n), std::to_string(moe.k),
        std::string(moe_layout_name(moe.layout)), moe.routing.to_string(), std::to_string(problem.space_total),
        std::to_string(problem.experts_touched), std::to_string(problem.rows_per_expert),
        std::to_string(problem.candidates), std::to_string(problem.compile_failures),
        std::to_string(problem.measured), std::to_string(problem.invalid),
        problem.winner ? fixed(problem.winner_us, 3) : "",
        problem.winner_bytes > 0 ? fixed(static_cast<double>(problem.winner_bytes) / problem.winner_us / 1e3, 1) : "",
        problem.heuristic_us ? fixed(*problem.heuristic_us, 3) : "",
        problem.baseline_us ? fixed(*problem.baseline_us, 3) : problem.baseline_failure};
    if (with_baseline) {
      row.push_back(problem.baseline);
      row.push_back(problem.baseline_us && problem.winner && problem.winner_us > 0 ? fixed(*problem.baseline_us / problem.winner_us, 3) : "");
    }
    row.push_back(fixed(problem.seconds, 1));
    row.push_back(problem.winner ? problem.winner->family + ": " + problem.winner->to_string() + (problem.skipped ? " (stored)" : "") : "");
    table.add_row(row);
  }
  return table;
}

void print_moe_report(const tune::MoeTuneReport& report, bool dry_run, reports::OutputStyle style) {
  moe_report_table(report).print(std::cout, style);
  if (style != reports::OutputStyle::Text) return;
  std::cout << "\nMoE run #" << db::id_value(report.run) << " on " << report.gpu << ": " << report.reports.size()
            << " MoE problems" << (dry_run ? " (dry run: planned and compiled)" : ", " + std::to_string(report.winners) + " winners stored")
            << (report.interrupted ? " -- interrupted; rerun the same command to resume\n" : "\n");
}

}  // namespace qtune::cli
