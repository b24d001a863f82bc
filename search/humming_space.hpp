#pragma once
// Humming's TuningConfig as a qtune search space: its parameters, the validity rules of Humming's docs/config.md and
// of its kernel's checks (humming/kernel/humming.py, the static_asserts of its device code), its shared-memory
// estimate (humming/utils/smem.py), and the conversion to and from the dict that Humming's
// forward_layer(..., tuning_config=...) accepts. Plain data and rules, no CUDA, so the strategies search it and the
// pruning counts are kept exactly as for qtune's own families (KernelConfig, RuleVerdict, SpaceEnumeration).
//
// A point is a KernelConfig of family "humming" with these integer parameters (TuningConfig field in brackets):
//   bm bn bk      block shape M, N, K                            [block_shape]
//   warps_m       warps along M (1 or 2); warp M = bm / warps_m  [warp_shape[0]]
//   wn wk         warp shape N, K                                [warp_shape[1], warp_shape[2]]
//   stages        pipeline stages                                [num_stages]
//   stream_k      0/1                                            [use_stream_k]
//   warp_spec     0/1 warp specialization (sm_90)                [use_warp_spec]
//   tma           0/1 TMA loads and stores (sm_90)               [use_tma; use_mbarrier follows warp_spec or tma]
//   multicast_a   1/2 TMA multicast of A across a cluster        [multi_cast_size_a]
//   multicast_b   1/2 TMA multicast of B                         [multi_cast_size_b]
//   ctas_per_sm   CTAs launched per SM                           [num_ctas_per_sm]
//   write_splits  1/2 output written in halves                   [num_write_splits]
//   sms           SMs the stream-K grid uses, 0 = all            [num_sms, read by the launcher]
// The MMA kind is not a parameter: it fixes the weight layout (Humming's LayerConfig), wgmma on sm_90, mma elsewhere.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/family.hpp"
#include "search/space.hpp"

namespace qtune::search {

inline constexpr std::string_view kHummingFamily = "humming";

// A qtune format as Humming's LayerConfig names it (humming/config/config.py), for one N x K weight.
struct HummingLayer {
  std::string a_dtype;   // "float16", "bfloat16", "float8e4m3", "float8e5m2", "int8", "int4", "float4e2m1"
  std::string b_dtype;   // "uint4" (symmetric ints are stored with an offset), "int8", "float4e2m1", ...
  std::string c_dtype;   // "float16" or "bfloat16"
  std::string bs_dtype;  // weight scale type: "float16", "bfloat16", "float8e4m3", "float8e8m0", "float32" (blocks)
  int a_bits = 16;
  int b_bits = 4;
  int a_mantissa_bits = 10;  // 0 for integer activations
  int64_t n = 0;
  int64_t k = 0;
  int input_scale_group_size = 0;     // 0: per token (or none for 16-bit activations)
  int weight_scale_group_size = 0;    // 0: per channel (or tensor)
  int weight_scale_group_size_n = 0;  // block scales only
  std::string weight_scale_type;      // "channel", "group", "block", "tensor", "group_tensor"
  bool has_zero_point = false;
  bool is_fp_zero_point = false;

  // The fields Humming's layer meta carries (the keys of its LayerConfig), for the exported table and the loader.
  nlohmann::json to_json() const;
};

// Throws UnsupportedError saying why when Humming has no kernel for the format (e.g. f32 weight scales other than
// blocks: "Humming takes f16, bf16, e4m3 or ue8m0 weight scales; use scale=f16"), InputError when the shape does not
// fit the format.
HummingLayer humming_layer_for(const FormatSpec& format, int64_t n, int64_t k);
// The lowest compute capability whose tensor cores Humming uses for these activations, and whether sm_90 lacks them
// (int4 activations stop at sm_89). Part of check()'s "format-unsupported-on-arch" rule.
bool humming_runs_on(const HummingLayer& layer, int sm, std::string* why = nullptr);

// Which part of the space enumerate() walks: Curated is a few hundred points per problem around what Humming's own
// heuristics pick for that M; Full is every point of parameter_space() that passes check().
enum class HummingSpaceKind { Curated, Full };

class HummingSpace {
 public:
  // The parameters above with every value the full space tries, in canonical text order.
  static std::vector<ParameterDomain> parameter_space();
  // The values the curated space tries for `problem` on `sm` (a subset of parameter_space()'s, per parameter).
  static std::map<std::string, std::vector<int>> curated_values(const Problem& problem, int sm);

  // Every rule in one place, first failing rule reported. Rule names: "format-unsupported", "format-unsupported-on-arch",
  // "missing-parameter", "block-shape", "warp-shape", "bm-exceeds-m", "bk-divides-k",
  // "warp-shape-for-activation", "mma-shape", "wgmma-bn-4x-wn", "threads-per-block", "wgmma-warpgroup", "stages",
  // "sm90-feature", "warp-spec-stages", "multicast", "multicast-divides-n", "multicast-cluster", "write-splits",
  // "ctas-per-sm", "sms", "smem-per-block", "smem-per-sm".
  static RuleVerdict check(const KernelConfig& config, const Problem& problem, const ArchLimits& limits);

  // The valid points (check() passes) of the chosen part of the space, with the count each rule removed.
  static SpaceEnumeration enumerate(const Problem& problem, const ArchLimits& limits,
                                    HummingSpaceKind kind = HummingSpaceKind::Curated);

  // Features for the cost models, as search::cost_features lays them out for qtune's families: log2 M, N, K, log2 of
  // the output tiles, waves of tiles over ctas_per_sm x SMs, their efficiency, the M tile's efficiency, log2 of bytes
  // per flop, then log2(value + 1) of each parameter in parameter_space() order.
  static std::vector<double> cost_features(const KernelConfig& config, const Problem& problem, const ArchLimits& limits);
  static std::vector<std::string> cost_feature_names();

  // Shared memory one CTA of `config` uses, as Humming's estimate_smem_size computes it (dense GEMM).
  static int64_t shared_memory_bytes(const KernelConfig& config, const HummingLayer& layer);

  // The dict forward_layer(tuning_config=...) takes for one M range: {"block_shape": [bm, bn, bk], "warp_shape":
  // [...], "use_stream_k": ..., "num_stages": ..., ...}; "num_sms" only when sms > 0. Throws InputError naming a
  // missing parameter.
  static nlohmann::json tuning_config(const KernelConfig& config);
  // The inverse: a TuningConfig dict (as Humming's heuristics return it) as a point of this space. Fields this space
  // does not tune are refused when they differ from what the space implies (use_f16_accum true, use_tma_a without
  // use_tma, ...), so a round trip never changes what Humming runs. Throws InputError naming the field.
  static KernelConfig from_tuning_config(const nlohmann::json& tuning_config);
};

}  // namespace qtune::search
