#pragma once
// The peers in qtune's commands: provider names as users write them, the one mapping of a peer's run into qtune's
// result type (stored by tune/records.hpp like every other candidate), and `qtune bench` targets that run a peer
// through PeerHost. `qtune tune --family humming` is humming_tune.hpp.
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tuner/peers/peer_host.hpp"
#include "tuner/providers/pipeline.hpp"
#include "tuner/tune/bench_run.hpp"
#include "tuner/tune/moe_tune.hpp"

namespace qtune::peers {

// Short names for providers whose full name carries an option users rarely write (docs/peers.md lists them).
struct ProviderAlias {
  std::string_view alias;     // "torch-fp8-rowwise"
  std::string_view provider;  // "torch-w8a8-fp8-ch:out=bf16"
};
const std::vector<ProviderAlias>& provider_aliases();
// A provider as written on a command line: an alias, or what parse_provider_id accepts. InputError naming `field`.
ProviderId parse_provider(std::string_view text, std::string_view field);

// A cuBLASLt baseline id ("cublaslt-...", or "all"), which qtune's worker runs, rather than a peer.
bool names_cublaslt_baseline(std::string_view text);
// "a,b:x=1,y=2,c" -> {"a", "b:x=1,y=2", "c"}: a piece with '=' and no ':' continues the item before it, whose
// format options it is (as format lists are split).
std::vector<std::string> split_provider_list(std::string_view text);

// The one mapping of a peer's run into qtune's result type:
//   measured -> measured; verified (measuring not asked) -> error "not measured"; wrong-answer -> verification failed
//   (never timed); error -> error (error_type: message); fault and crashed -> crashed; timeout -> timeout.
providers::CandidateResult candidate_result(const PeerResult& result);
// What identifies a peer's run as a stored configuration: {"config": what the adapter ran, "peer_version": ...}.
nlohmann::json config_params(const PeerResult& result);

// A `qtune bench` target for `provider` (PeerHost::require it first): the peer's first configuration (its default),
// verified against the CPU reference and then measured with the bench's MeasureOptions, in the peer worker; stored
// as a baseline whose family is the provider id, under --format when given, else the provider's operands. `host`
// must outlive the target.
tune::BenchTarget bench_target(PeerHost& host, const ProviderId& provider, const tune::BenchRequest& request);

// A peer MoE job's timeout covers making the operands (quantizing every touched expert: all 256 of DeepSeek-V3 from
// T = 64), packing them and the peer's compile: at least this many seconds.
inline constexpr double kPeerMoeMinTimeoutS = 900;

// A MoE tune's baseline job run by a peer (tune::MoeBaselineEvaluator): job.provider ("humming-w4a16-int4-g128") on
// job.problem.moe with qtune's operands of job.prepare.seed, the peer's first configuration (its default: Humming's
// heuristic), verified against the MoE CPU reference and measured with job.candidate.measure; the result mapped by
// candidate_result and identified by config_params. Never throws for what the peer does.
tune::MoeBaselineResult run_moe_job(PeerHost& host, const tune::CandidateJob& job, double timeout_s);

}  // namespace qtune::peers
