#pragma once
// The host side of the layouts MoE engines use (docs/moe.md). Every layout orders the (token, slot) pairs by expert,
// and within an expert by ascending pair index p = token · top_k + slot, then pads each expert's rows to a multiple
// of a block; an expert with no pairs takes no rows and no blocks.
//
// Padding rule: expert e with c_e pairs takes ceil(c_e / block) · block rows (0 when c_e = 0). The first c_e rows
// are its pairs, the rest padding. A block of `block` rows therefore never holds rows of two experts.
//
// - token-indexed (vLLM's moe_align_block_size): no rows are copied. sorted_token_ids lists, per expert in expert
//   order, its pair indices padded with the sentinel T · top_k; expert_ids gives each block's expert. A kernel
//   gathers input row token(p) (gate-up) or p (down) for each listed pair, skips sentinels, and writes output row p.
// - grouped-contiguous (DeepGEMM's contiguous layout): the same row order, materialized: the activations are
//   copied into [rows][K] in that order; row_expert (DeepGEMM's m_indices) is the expert of each row, -1 on padding.
//   DeepGEMM aligns every expert to its block M (128): pass that as `block`.
// - grouped-masked (DeepGEMM's masked layout): [E][max_rows][K] with counts[e] valid rows per expert; max_rows is
//   the largest count rounded up to `block` (a caller may ask for more). Rows past an expert's count are padding.
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/moe.hpp"

namespace qtune {

// vLLM's moe_align_block_size output.
struct TokenIndexedLayout {
  int block_m = 0;
  int32_t sentinel = 0;                  // T · top_k: a padding entry of sorted_token_ids
  std::vector<int32_t> sorted_token_ids; // [num_tokens_post_padded]: pair indices p, sentinel on padding
  std::vector<int32_t> expert_ids;       // [num_tokens_post_padded / block_m]: the expert of each block
  int32_t num_tokens_post_padded = 0;

  int blocks() const { return static_cast<int>(expert_ids.size()); }
};

// DeepGEMM's contiguous layout.
struct GroupedContiguousLayout {
  int block_m = 0;                      // every expert's rows padded to a multiple of it
  int64_t rows = 0;                     // total rows, padding included
  std::vector<int32_t> row_expert;      // [rows]: expert of each row, -1 on padding (DeepGEMM's m_indices)
  std::vector<int32_t> row_pair;        // [rows]: the pair p each row holds, -1 on padding
  std::vector<int64_t> expert_first_row;  // [E + 1]: expert e's rows are [expert_first_row[e], expert_first_row[e+1])
};

// DeepGEMM's masked layout.
struct GroupedMaskedLayout {
  int block_m = 0;
  int64_t max_rows = 0;             // rows per expert slab
  std::vector<int32_t> counts;      // [E]: valid rows of each expert
  std::vector<int32_t> row_pair;    // [E][max_rows]: the pair p each row holds, -1 past the count
};

// Throws InputError naming `block_m` when it is not positive. The routing must be valid (validate_routing).
TokenIndexedLayout token_indexed_layout(const Routing& routing, int block_m);
GroupedContiguousLayout grouped_contiguous_layout(const Routing& routing, int block_m);
// max_rows = max(min_rows, the largest count) rounded up to block_m (min_rows: a capacity the caller wants; 0: none).
GroupedMaskedLayout grouped_masked_layout(const Routing& routing, int block_m, int64_t min_rows = 0);

// The pair each row of a layout holds (-1: padding), in the row order the GEMM sees: for token-indexed, entry i of
// sorted_token_ids (sentinel -> -1); for the grouped layouts, row_pair. Also the expert of each row (-1: padding).
struct MoeRowMap {
  int block_m = 0;
  std::vector<int32_t> row_pair;    // [rows]
  std::vector<int32_t> row_expert;  // [rows]
  std::vector<int32_t> block_expert;  // [rows / block_m]: -1 for a block of padding only (masked slabs)
  int64_t rows() const { return static_cast<int64_t>(row_pair.size()); }
};
MoeRowMap row_map(const TokenIndexedLayout& layout, const Routing& routing);
MoeRowMap row_map(const GroupedContiguousLayout& layout, const Routing& routing);
MoeRowMap row_map(const GroupedMaskedLayout& layout, const Routing& routing);
// The layout `layout` of the routing with blocks of block_m rows, as a row map.
MoeRowMap moe_row_map(MoeLayout layout, const Routing& routing, int block_m);

// The GEMM input row of pair p: token(p) = p / top_k for gate-up, p itself for down.
int64_t input_row_of_pair(MoeProjection projection, const Routing& routing, int64_t pair);

// Host gathers and scatters through a row map, `width` values per row (tests and the grouped layouts' inputs):
// gather: out[r] = in[input_row_of_pair(row_pair[r])], zero on padding rows;
// scatter: out[row_pair[r]] = in[r] for every non-padding row (out has tokens · top_k rows).
std::vector<float> gather_rows(const MoeRowMap& map, MoeProjection projection, const Routing& routing,
                               std::span<const float> input, int64_t width);
std::vector<float> scatter_rows(const MoeRowMap& map, std::span<const float> rows, int64_t pairs, int64_t width);
// The down projection's top-k weighted reduction: out[t] = Σ_slot weights[t][slot] · per_pair[t · top_k + slot],
// summed in slot order in f32 (the order a deterministic second pass uses).
std::vector<float> reduce_top_k(const Routing& routing, std::span<const float> per_pair, int64_t width);

}  // namespace qtune
