#pragma once
// The MoE GEMMs of the mma family (kernels/device/gemm/mma_moe.cuh, sm_75+), of the wgmma family
// (kernels/device/gemm/wgmma_moe.cuh, sm_90a) and of the tma family (kernels/device/gemm/tma_moe.cuh, sm_90a),
// docs/moe.md: a dense family's tiles and parameters (a KernelConfig of family "mma", "wgmma" or "tma"; an empty family
// is mma) run over the blocks of a MoE layout (kernels/moe_layout.hpp). The three families use the mma family's
// prepacked layout, so everything but the rules, the instantiation and the launch geometry is shared; the tma kernel
// reads its activations through a TMA tensor map in layout order, so for the token-indexed layout a gather kernel
// (gathers()) copies the pairs' rows into layout order before it. This is the host side a MoE provider needs: rules, instantiation source, launch geometry,
// argument packing and the experts' prepacked weights. Layout blocks: a token-indexed layout is built with
// block_m = bm; a grouped-contiguous layout's block is a multiple of bm; a grouped-masked layout's max_rows is a
// multiple of bm. A config of another family is an InputError naming it.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kernels/family.hpp"
#include "kernels/moe.hpp"
#include "kernels/moe_layout.hpp"
#include "kernels/quantize.hpp"

namespace qtune::mma_moe {

std::string kernel_name(const KernelConfig& config);  // "qtune_mma_moe_gemm", "qtune_wgmma_moe_gemm", "qtune_tma_moe_gemm"
std::string reduce_kernel_name();  // "qtune_moe_reduce_top_k"

// Rows the GEMM is launched over, known without the routing for token-indexed (so no host synchronisation: every
// expert touched pads at most bm - 1 rows): round_up(pairs + min(E, pairs) · (bm - 1), bm). For the grouped layouts,
// the layout's rows (contiguous: its rows; masked: E · max_rows).
int64_t launch_rows(const MoeProblem& problem, int bm, const MoeRowMap& map);

// The token tiles and K splits the swap-AB MoE kernels (wgmma, tma) are tuned over at a routing's rows per expert:
// the tile at the mean, the one below it (skewed routing leaves many experts below the mean) and the one above it,
// which holds most experts' rows in one block so each expert's weights are read once (at T = 1024 on the H200,
// 32 +- 6 rows per expert in 32-row blocks read them about twice: 34% of copy); split-K while blocks are small and
// few (the grid is touched experts x N tiles). The tuner's curated spaces and the runtime's heuristic both use them.
std::vector<int> swap_ab_token_tiles(int64_t rows_per_expert);
std::vector<int> swap_ab_splits(int64_t rows_per_expert);

// The config's dense family's rules on an N x K expert (with M = the launch rows), plus the MoE kernel's own:
// one thread per row of a block (threads >= bm) and the row tables' shared memory. RuleVerdict names the rule.
RuleVerdict check(const KernelConfig& config, const MoeProblem& problem, const ArchLimits& limits);

// The translation unit of one MoE GEMM instantiation (kernel_name()), for the problem's format, layout and projection.
// Throws UnsupportedError when the family cannot run the format on `arch`, InputError for a bad config.
std::string instantiation_source(const KernelConfig& config, const MoeProblem& problem, const std::string& arch);
// The top-k reduction of the token-indexed down projection (reduce_kernel_name()) for the format's output type.
std::string reduce_instantiation_source(const FormatSpec& format, const std::string& arch);

// Dynamic shared memory of the GEMM: the dense tiles' plus the row tables (12 bytes per row of a block).
LaunchGeometry launch_geometry(const KernelConfig& config, const MoeProblem& problem, int64_t launch_rows);
// One thread per pair of output columns of every token.
LaunchGeometry reduce_launch_geometry(const MoeProblem& problem);

// The buffers a launch reads and writes, with their sizes:
//   "a" (and "a_scales"): the activations as the dense family packs them: [problem.input_rows()][K] for token-indexed,
//     the gathered [launch_rows][K] for the grouped layouts;
//   "weights", "scales", "zeros", "global_scale": every expert's prepacked buffers back to back (prepack_experts);
//   "rows" (token-indexed: sorted_token_ids, contiguous: row_expert), "block_experts" (token-indexed), "counts"
//   (masked), "padded_rows" (token-indexed: one int32, num_tokens_post_padded), "router_weights" (token-indexed down);
//   "c": token-indexed [pairs][N] (down: each row times its router weight, reduced by the second kernel into
//   "reduced" [tokens][N]); grouped layouts [launch_rows][N] in layout order, rows left unwritten on padding;
//   "workspace" with split-K; "gathered" and "gathered_scales" for the tma family's token-indexed GEMM (gathers()).
std::vector<BufferSpec> buffers(const KernelConfig& config, const MoeProblem& problem, int64_t launch_rows);
// GemmParams and MoeParams from the device address of each buffer by name (the tma family's: then a TMA tensor map
// over the activations in layout order, a KernelArguments::tensor_maps request for gemm::encode_tensor_maps).
// Throws InputError naming a missing one.
KernelArguments pack_arguments(const KernelConfig& config, const MoeProblem& problem, int64_t launch_rows,
                               const std::map<std::string, uint64_t>& device_addresses);
// The reduction's arguments: "c" (the down GEMM's rows) into "reduced".
KernelArguments pack_reduce_arguments(const MoeProblem& problem, const std::map<std::string, uint64_t>& device_addresses);

// The tma family's token-indexed MoE GEMM reads its rows gathered into layout order: the gather kernel runs before
// it, on the same stream, in the same timed call (its time belongs to the MoE GEMM, as the top-k reduction's does).
// "gathered" ([launch_rows][K]) and "gathered_scales" are then among buffers(), and the GEMM's activations.
bool gathers(const KernelConfig& config, const MoeProblem& problem);
std::string gather_kernel_name();  // "qtune_moe_gather_rows"
std::string gather_instantiation_source(const MoeProblem& problem, const std::string& arch);
// One CTA per launch row (rows past num_tokens_post_padded return at once).
LaunchGeometry gather_launch_geometry(int64_t launch_rows);
// From the device addresses of "a", "a_scales", "gathered", "gathered_scales" and the GEMM's row tables.
KernelArguments pack_gather_arguments(const KernelConfig& config, const MoeProblem& problem, int64_t launch_rows,
                                      const std::map<std::string, uint64_t>& device_addresses);

// Every expert's prepacked weights back to back, each expert_bytes(...) apart. An expert with no weights (n = 0:
// no pair routes to it) is filled with 0xFF bytes: NaN scales, so a kernel that read it would show NaN.
PackedBuffers prepack_experts(const std::vector<QuantizedWeights>& experts, const FormatSpec& format, int64_t n, int64_t k);
// Its two steps, for a caller that keeps packed experts between problems of the same format, N and K: one expert's
// buffers (InputError if its shape or format differs), and the experts' buffers placed back to back (nullptr: 0xFF).
PackedBuffers prepack_expert(const QuantizedWeights& weights, const FormatSpec& format, int64_t n, int64_t k, size_t index);
PackedBuffers place_experts(const std::vector<const PackedBuffers*>& experts, const FormatSpec& format, int64_t n, int64_t k);
struct ExpertStrides {
  uint64_t weights = 0, scales = 0, zeros = 0;
};
ExpertStrides expert_strides(const FormatSpec& format, int64_t n, int64_t k);

// The device's row tables of a layout, as int32 bytes: "rows", "block_experts", "counts", "padded_rows".
PackedBuffers pack_layout(MoeLayout layout, const Routing& routing, int bm);

// The token-indexed tables built on the device from the top-k ids (gemm/moe_align.cuh, one CTA), so that a production
// MoE call needs no host synchronisation: the same "rows" (launch_rows entries: pack_layout's, then the sentinel),
// "block_experts" (pack_layout's, then -1) and "padded_rows" as pack_layout(TokenIndexed, routing, bm).
std::string align_kernel_name();  // "qtune_moe_align"
// Threads of the align CTA for `experts`: 1024 down to 32, the most whose shared memory (one count per warp and expert)
// fits in 48 KiB; 32 beyond that (the launch then opts in to more). InputError naming "experts" when even one warp's
// tables exceed `limits`.
int align_threads(int experts, const ArchLimits& limits);
std::string align_instantiation_source(int bm, int threads, const std::string& arch);
LaunchGeometry align_launch_geometry(int experts, int threads);
// Arguments from the device addresses of "topk_ids" (int32 [tokens][top_k]), "rows", "block_experts", "padded_rows".
KernelArguments pack_align_arguments(const MoeProblem& problem, int64_t launch_rows,
                                     const std::map<std::string, uint64_t>& device_addresses);

}  // namespace qtune::mma_moe
