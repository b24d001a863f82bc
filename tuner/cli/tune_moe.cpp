#include "tuner/cli/tune_moe.hpp"

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
                     "also measure this MoE baseline once per MoE problem searched: cublas-grouped-f16 (CUDA 13's cuBLAS "
                     "grouped GEMM over the touched experts, f16 weights dequantized, the same rows; stored as a baseline, "
                     "column baseline_us)");
}

std::vector<MoeProblem> moe_tune_problems(const MoeTuneCommandOptions& options, const search::ModelShapes* model, int tp,
                                          const std::vector<FormatSpec>& formats, bool moe_wanted) {
  const std::vector<std::int64_t> tokens =
      options.tokens.empty() ? tune::default_token_buckets() : tune::parse_token_list(options.tokens, "--tokens");
  const std::vector<MoeLayout> layouts = tune::parse_layout_list(options.layouts, "--moe-layout");
  const RoutingSpec routing = RoutingSpec::parse(options.routing, 1, "--routing");
  if (!options.baseline.empty() && options.baseline != tune::kMoeBaselines[0]) {
    QTUNE_INPUT_ERROR("--moe-baseline: unknown MoE baseline '" + options.baseline + "' (known: " + tune::kMoeBaselines[0] + ")");
  }
  std::vector<MoeProblem> problems;
  if (model != nullptr && moe_wanted) {
    problems = tune::moe_problems_of_model(*model, tp, formats, tokens, layouts, routing, "--tp");
  }
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
  reports::Table table({"format", "projection", "experts", "top_k", "tokens", "n", "k", "layout", "routing", "space",
                        "touched", "rows_per_expert", "candidates", "compile_failed", "measured", "invalid", "winner_us",
                        "winner_gbps", "baseline_us", "seconds", "winner"});
  for (const tune::MoeProblemReport& problem : report.reports) {
    const MoeProblem& moe = problem.problem;
    table.add_row({moe.format.to_string(), std::string(moe_projection_name(moe.projection)), std::to_string(moe.experts),
                   std::to_string(moe.top_k), std::to_string(moe.tokens), std::to_string(moe.n), std::to_string(moe.k),
                   std::string(moe_layout_name(moe.layout)), moe.routing.to_string(), std::to_string(problem.space_total),
                   std::to_string(problem.experts_touched), std::to_string(problem.rows_per_expert),
                   std::to_string(problem.candidates), std::to_string(problem.compile_failures),
                   std::to_string(problem.measured), std::to_string(problem.invalid),
                   problem.winner ? fixed(problem.winner_us, 3) : "",
                   problem.winner_bytes > 0 ? fixed(static_cast<double>(problem.winner_bytes) / problem.winner_us / 1e3, 1) : "",
                   problem.baseline_us ? fixed(*problem.baseline_us, 3) : "", fixed(problem.seconds, 1),
                   problem.winner ? problem.winner->family + ": " + problem.winner->to_string() + (problem.skipped ? " (stored)" : "") : ""});
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
