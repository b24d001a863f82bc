#pragma once
// The MoE part of `qtune tune` (tuner/tune/moe_tune.hpp): its options (--tokens, --routing, --moe-layout), the MoE
// problems of a model's moe_expert GEMMs, and the run with its report. cmd_tune.cpp calls these beside the dense run.
#include <CLI/CLI.hpp>

#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

#include "kernels/moe.hpp"
#include "reports/table.hpp"
#include "search/model_shapes.hpp"
#include "tuner/peers/peer_host.hpp"
#include "tuner/tune/moe_tune.hpp"

namespace qtune::cli {

struct MoeTuneCommandOptions {
  std::string tokens;                   // "": the default token buckets
  std::string routing = "uniform";      // RoutingSpec text: uniform, balanced, zipf[:s], file:PATH
  std::string layouts = "token-indexed";
  std::string baseline;                 // --moe-baseline: "", cublas-grouped-f16, a peer or a peer's provider
};
void add_moe_tune_options(CLI::App& command, MoeTuneCommandOptions& options);

// The model's MoE problems (none for a dense model, or with --gemms dense). Bad input (T = 0, a bad routing, a routing
// file whose E, top_k or length disagree, ids out of range, a --moe-baseline that is no baseline, peer or provider of
// one of `formats`) is an InputError naming the field. The MoE options given without a MoE GEMM to apply to are
// refused naming the option.
std::vector<MoeProblem> moe_tune_problems(const MoeTuneCommandOptions& options, const search::ModelShapes* model, int tp,
                                          const std::vector<FormatSpec>& formats, bool moe_wanted);

// The MoE tune's table: one row per problem.
reports::Table moe_report_table(const tune::MoeTuneReport& report);
// --moe-baseline as the tune stores it: a provider's format made canonical ("humming-W4A16-INT4-G128" ->
// "humming-w4a16-int4-g128"); cublas-grouped-f16 and peer names as they are.
std::string canonical_moe_baseline(const std::string& baseline);
// The peer providers a --moe-baseline of a peer measures on `problems`, one per format it applies to (none for
// cublas-grouped-f16 or no baseline), for the peer host to require before anything runs.
std::vector<peers::ProviderId> moe_baseline_peer_providers(const std::string& baseline, const std::vector<MoeProblem>& problems);

// Prints the MoE tune's table, and in text the run's line.
void print_moe_report(const tune::MoeTuneReport& report, bool dry_run, reports::OutputStyle style);

}  // namespace qtune::cli
