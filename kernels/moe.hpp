#pragma once
// Mixture-of-experts GEMMs: the problem and its routing (docs/moe.md).
//
// A MoE layer has E experts, each with a weight W_e[N][K] of the same shape. Each of T tokens is routed to top_k
// distinct experts with router weights that sum to 1 per token. A (token, slot) pair is named by its flat index
// p = token * top_k + slot (vLLM's topk_ids.flatten() order).
//   gate-up: C[p][N] = A[token(p)][K] · W_{ids[p]}ᵀ          (A: [T][K], C: [T·top_k][N], one row per pair)
//   down:    C[t][N] = Σ_slot weight[t][slot] · (A[t·top_k + slot][K] · W_{ids[t][slot]}ᵀ)
//            (A: [T·top_k][K], the gate-up's activated rows; C: [T][N], the weighted top_k reduction)
// Routing is generated with a seed (uniform, Zipf-skewed, balanced) or read from a file (routing_from_json).
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/format.hpp"

namespace qtune {

enum class MoeProjection {
  GateUp,  // gathers token rows, one output row per (token, slot) pair
  Down,    // one input row per pair, outputs reduced over each token's slots with the router weights
};
std::string_view moe_projection_name(MoeProjection projection);  // "gate-up", "down"
// "gate-up" (also "gate_up"), "down". Throws InputError naming `field`.
MoeProjection parse_moe_projection(std::string_view text, std::string_view field = "projection");

// How an engine lays the pairs out for the GEMM (kernels/moe_layout.hpp builds each).
enum class MoeLayout {
  TokenIndexed,       // vLLM's moe_align_block_size / Humming's `indexed`: rows gathered through sorted pair ids
  GroupedContiguous,  // DeepGEMM's contiguous / Humming's `grouped_contiguous`: rows contiguous per expert, padded
  GroupedMasked,      // DeepGEMM's masked / Humming's `grouped_masked`: [E][max_rows] with a row count per expert
};
std::string_view moe_layout_name(MoeLayout layout);  // "token-indexed", "grouped-contiguous", "grouped-masked"
// The names above (case-insensitive). Throws InputError naming `field`.
MoeLayout parse_moe_layout(std::string_view text, std::string_view field = "layout");

enum class RoutingKind {
  Uniform,   // each token draws top_k distinct experts, every expert equally likely
  Zipf,      // expert of popularity rank r (a seeded permutation) drawn with weight 1 / (r + 1)^exponent
  Balanced,  // pair p goes to expert perm[p mod E]: every expert gets ⌊T·k/E⌋ or ⌈T·k/E⌉ pairs
  File,      // top-k ids (and optionally weights) from a JSON file
};

// Where a problem's routing comes from. Text form (parse_routing_spec / to_string): "uniform", "balanced",
// "zipf" (exponent 1.2) or "zipf:<exponent>", "file:<path>".
struct RoutingSpec {
  RoutingKind kind = RoutingKind::Uniform;
  double zipf_exponent = 1.2;  // Zipf only; >= 0 (0 is uniform)
  std::filesystem::path file;  // File only
  uint64_t seed = 1;           // generated ids and weights (and weights a file leaves out)

  std::string to_string() const;
  // Throws InputError naming `field`.
  static RoutingSpec parse(std::string_view text, uint64_t seed = 1, std::string_view field = "routing");
};

// Which experts each token goes to, and with what weight.
struct Routing {
  int experts = 0;
  int top_k = 0;
  int64_t tokens = 0;
  std::vector<int32_t> ids;    // [tokens][top_k], distinct within a row, each in [0, experts)
  std::vector<float> weights;  // [tokens][top_k], softmax-normalized: positive, each row sums to 1

  int64_t pairs() const { return tokens * top_k; }
  int32_t expert_of(int64_t pair) const { return ids[static_cast<size_t>(pair)]; }
  std::vector<int64_t> pairs_per_expert() const;  // [experts]
  int experts_touched() const;                    // experts with at least one pair
};

// Checks every rule of a routing: experts >= 1, 1 <= top_k <= experts, tokens >= 1, ids and weights of
// tokens · top_k entries, ids in range and distinct within a token, weights finite and positive. Throws InputError
// "<context>: field '<name>': ..." naming the first violation (ids[t][s], weights[t][s], top_k, ...).
void validate_routing(const Routing& routing, std::string_view context = "routing");

// A generated routing (kind Uniform, Zipf or Balanced): the same for the same spec, experts, top_k and tokens.
// Weights are the softmax of seeded normal logits over each token's chosen experts.
Routing generate_routing(const RoutingSpec& spec, int experts, int top_k, int64_t tokens);

// Router weights for `ids` (softmax of seeded normal logits per token), as generate_routing makes them.
std::vector<float> generate_router_weights(int64_t tokens, int top_k, uint64_t seed);

// The routing file format (docs/moe.md):
//   {"experts": E, "top_k": k, "ids": [[e, ...], ...], "weights": [[w, ...], ...]}
// `ids` has one row of top_k expert ids per token; `weights` is optional (same shape, positive; each row is
// normalized to sum 1) and generated from `seed` when absent. Throws InputError "<context>: field '...': ...".
Routing routing_from_json(const nlohmann::json& document, std::string_view context, uint64_t seed = 1);
nlohmann::json routing_to_json(const Routing& routing);
Routing load_routing_file(const std::filesystem::path& file, uint64_t seed = 1);

// One MoE GEMM: format, experts, top_k, tokens, per-expert N and K, routing, layout and projection.
struct MoeProblem {
  FormatSpec format;
  int experts = 0;
  int top_k = 0;
  int64_t tokens = 0;
  int64_t n = 0;  // per expert
  int64_t k = 0;
  MoeProjection projection = MoeProjection::GateUp;
  MoeLayout layout = MoeLayout::TokenIndexed;
  RoutingSpec routing{};  // {}: designated initializers may leave it out (uniform)

  // Throws InputError naming the field: experts, top_k (0, or more than experts), tokens (0), n, k (not positive,
  // or not fitting the format: FormatSpec::validate_shape), routing (a negative or non-finite Zipf exponent).
  void validate() const;
  // The problem's routing: generated, or read from the file and checked against experts, top_k and tokens
  // (InputError naming the file and the field that disagrees, e.g. a file of the wrong length names 'ids').
  Routing make_routing() const;
  // Rows of the GEMM's activation input: tokens (gate-up) or tokens · top_k (down).
  int64_t input_rows() const;
  // Rows of the final output: tokens · top_k (gate-up) or tokens (down).
  int64_t output_rows() const;

  std::string to_string() const;  // "w4a16-int4-g128 moe gate-up E=256 top_k=8 T=16 n=4096 k=7168 token-indexed uniform"
  nlohmann::json to_json() const;
  static MoeProblem from_json(const nlohmann::json& json);  // throws InputError naming the field
};

}  // namespace qtune
