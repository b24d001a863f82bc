#include "kernels/moe_layout.hpp"

#include <algorithm>

#include "kernels/error.hpp"

namespace qtune {
namespace {

void check_block(int block_m, const char* field = "block_m") {
  if (block_m < 1 || block_m > 4096) {
    QTUNE_INPUT_ERROR(std::string(field) + ": expected 1 to 4096 rows per block, got " + std::to_string(block_m));
  }
}

int64_t padded(int64_t count, int block_m) { return (count + block_m - 1) / block_m * block_m; }

// Each expert's pairs in ascending pair order (a counting sort: stable by construction).
std::vector<std::vector<int32_t>> pairs_by_expert(const Routing& routing) {
  std::vector<std::vector<int32_t>> lists(static_cast<size_t>(routing.experts));
  const auto counts = routing.pairs_per_expert();
  for (int e = 0; e < routing.experts; ++e) lists[static_cast<size_t>(e)].reserve(static_cast<size_t>(counts[static_cast<size_t>(e)]));
  for (int64_t p = 0; p < routing.pairs(); ++p) {
    lists[static_cast<size_t>(routing.expert_of(p))].push_back(static_cast<int32_t>(p));
  }
  return lists;
}

}  // namespace

TokenIndexedLayout token_indexed_layout(const Routing& routing, int block_m) {
  check_block(block_m);
  TokenIndexedLayout layout;
  layout.block_m = block_m;
  layout.sentinel = static_cast<int32_t>(routing.pairs());
  const auto lists = pairs_by_expert(routing);
  for (int e = 0; e < routing.experts; ++e) {
    const auto& pairs = lists[static_cast<size_t>(e)];
    if (pairs.empty()) continue;
    const int64_t rows = padded(static_cast<int64_t>(pairs.size()), block_m);
    layout.sorted_token_ids.insert(layout.sorted_token_ids.end(), pairs.begin(), pairs.end());
    layout.sorted_token_ids.resize(layout.sorted_token_ids.size() + static_cast<size_t>(rows) - pairs.size(), layout.sentinel);
    layout.expert_ids.resize(layout.expert_ids.size() + static_cast<size_t>(rows / block_m), e);
  }
  layout.num_tokens_post_padded = static_cast<int32_t>(layout.sorted_token_ids.size());
  return layout;
}

GroupedContiguousLayout grouped_contiguous_layout(const Routing& routing, int block_m) {
  check_block(block_m);
  GroupedContiguousLayout layout;
  layout.block_m = block_m;
  layout.expert_first_row.push_back(0);
  const auto lists = pairs_by_expert(routing);
  for (int e = 0; e < routing.experts; ++e) {
    const auto& pairs = lists[static_cast<size_t>(e)];
    const int64_t rows = padded(static_cast<int64_t>(pairs.size()), block_m);
    layout.row_pair.insert(layout.row_pair.end(), pairs.begin(), pairs.end());
    layout.row_pair.resize(layout.row_pair.size() + static_cast<size_t>(rows) - pairs.size(), -1);
    layout.row_expert.resize(layout.row_expert.size() + pairs.size(), e);
    layout.row_expert.resize(layout.row_pair.size(), -1);
    layout.expert_first_row.push_back(static_cast<int64_t>(layout.row_pair.size()));
  }
  layout.rows = static_cast<int64_t>(layout.row_pair.size());
  return layout;
}

GroupedMaskedLayout grouped_masked_layout(const Routing& routing, int block_m, int64_t min_rows) {
  check_block(block_m);
  if (min_rows < 0) QTUNE_INPUT_ERROR("max_rows: expected a capacity >= 0, got " + std::to_string(min_rows));
  GroupedMaskedLayout layout;
  layout.block_m = block_m;
  const auto lists = pairs_by_expert(routing);
  int64_t largest = 0;
  for (const auto& pairs : lists) largest = std::max(largest, static_cast<int64_t>(pairs.size()));
  layout.max_rows = padded(std::max(largest, min_rows), block_m);
  layout.row_pair.assign(static_cast<size_t>(routing.experts * layout.max_rows), -1);
  for (int e = 0; e < routing.experts; ++e) {
    const auto& pairs = lists[static_cast<size_t>(e)];
    layout.counts.push_back(static_cast<int32_t>(pairs.size()));
    std::copy(pairs.begin(), pairs.end(), layout.row_pair.begin() + e * layout.max_rows);
  }
  return layout;
}

MoeRowMap row_map(const TokenIndexedLayout& layout, const Routing& routing) {
  MoeRowMap map;
  map.block_m = layout.block_m;
  map.row_pair.reserve(layout.sorted_token_ids.size());
  for (size_t i = 0; i < layout.sorted_token_ids.size(); ++i) {
    const int32_t pair = layout.sorted_token_ids[i];
    const bool padding = pair == layout.sentinel;
    map.row_pair.push_back(padding ? -1 : pair);
    map.row_expert.push_back(padding ? -1 : routing.expert_of(pair));
  }
  map.block_expert = layout.expert_ids;
  return map;
}

MoeRowMap row_map(const GroupedContiguousLayout& layout, const Routing&) {
  MoeRowMap map;
  map.block_m = layout.block_m;
  map.row_pair = layout.row_pair;
  map.row_expert = layout.row_expert;
  for (int e = 0; e + 1 < static_cast<int>(layout.expert_first_row.size()); ++e) {
    const int64_t blocks = (layout.expert_first_row[static_cast<size_t>(e) + 1] - layout.expert_first_row[static_cast<size_t>(e)]) / layout.block_m;
    map.block_expert.resize(map.block_expert.size() + static_cast<size_t>(blocks), e);
  }
  return map;
}

MoeRowMap row_map(const GroupedMaskedLayout& layout, const Routing&) {
  MoeRowMap map;
  map.block_m = layout.block_m;
  map.row_pair = layout.row_pair;
  map.row_expert.resize(layout.row_pair.size(), -1);
  for (size_t e = 0; e < layout.counts.size(); ++e) {
    const int64_t first = static_cast<int64_t>(e) * layout.max_rows;
    std::fill_n(map.row_expert.begin() + first, layout.counts[e], static_cast<int32_t>(e));
    for (int64_t block = 0; block < layout.max_rows / layout.block_m; ++block) {
      // A kernel launched over the whole slab skips blocks past the count: they are padding only.
      map.block_expert.push_back(block * layout.block_m < layout.counts[e] ? static_cast<int32_t>(e) : -1);
    }
  }
  return map;
}

MoeRowMap moe_row_map(MoeLayout layout, const Routing& routing, int block_m) {
  switch (layout) {
    case MoeLayout::TokenIndexed: return row_map(token_indexed_layout(routing, block_m), routing);
    case MoeLayout::GroupedContiguous: return row_map(grouped_contiguous_layout(routing, block_m), routing);
    case MoeLayout::GroupedMasked: return row_map(grouped_masked_layout(routing, block_m), routing);
  }
  QTUNE_THROW(Error, "moe_row_map: unknown layout");
}

int64_t input_row_of_pair(MoeProjection projection, const Routing& routing, int64_t pair) {
  return projection == MoeProjection::GateUp ? pair / routing.top_k : pair;
}

std::vector<float> gather_rows(const MoeRowMap& map, MoeProjection projection, const Routing& routing,
                               std::span<const float> input, int64_t width) {
  const int64_t input_rows = projection == MoeProjection::GateUp ? routing.tokens : routing.pairs();
  if (static_cast<int64_t>(input.size()) != input_rows * width) {
    QTUNE_INPUT_ERROR("input: " + std::to_string(input.size()) + " values for " + std::to_string(input_rows) +
                      " rows of " + std::to_string(width));
  }
  std::vector<float> out(static_cast<size_t>(map.rows() * width), 0.0f);
  for (int64_t r = 0; r < map.rows(); ++r) {
    const int32_t pair = map.row_pair[static_cast<size_t>(r)];
    if (pair < 0) continue;
    const int64_t source = input_row_of_pair(projection, routing, pair);
    std::copy_n(input.begin() + source * width, width, out.begin() + r * width);
  }
  return out;
}

std::vector<float> scatter_rows(const MoeRowMap& map, std::span<const float> rows, int64_t pairs, int64_t width) {
  if (static_cast<int64_t>(rows.size()) != map.rows() * width) {
    QTUNE_INPUT_ERROR("rows: " + std::to_string(rows.size()) + " values for " + std::to_string(map.rows()) +
                      " rows of " + std::to_string(width));
  }
  std::vector<float> out(static_cast<size_t>(pairs * width), 0.0f);
  for (int64_t r = 0; r < map.rows(); ++r) {
    const int32_t pair = map.row_pair[static_cast<size_t>(r)];
    if (pair < 0) continue;
    std::copy_n(rows.begin() + r * width, width, out.begin() + static_cast<int64_t>(pair) * width);
  }
  return out;
}

std::vector<float> reduce_top_k(const Routing& routing, std::span<const float> per_pair, int64_t width) {
  if (static_cast<int64_t>(per_pair.size()) != routing.pairs() * width) {
    QTUNE_INPUT_ERROR("per_pair: " + std::to_string(per_pair.size()) + " values for " + std::to_string(routing.pairs()) +
                      " pairs of " + std::to_string(width));
  }
  std::vector<float> out(static_cast<size_t>(routing.tokens * width), 0.0f);
  for (int64_t token = 0; token < routing.tokens; ++token) {
    for (int slot = 0; slot < routing.top_k; ++slot) {
      const int64_t pair = token * routing.top_k + slot;
      const float weight = routing.weights[static_cast<size_t>(pair)];
      for (int64_t c = 0; c < width; ++c) {
        out[static_cast<size_t>(token * width + c)] += weight * per_pair[static_cast<size_t>(pair * width + c)];
      }
    }
  }
  return out;
}

}  // namespace qtune
