#pragma once
// A table Humming users can adopt: per layer shape and dtypes, the list Humming's
// forward_layer(..., tuning_config=...) accepts, [[m_lo, m_hi, config], ...] as its heuristics return it (a GEMM with
// m_lo < M <= m_hi runs config), built from the fastest verified configurations of the Humming provider on one GPU.
// tuner/peers/python/qtune_peers/humming_table.py loads the file and installs it in place of Humming's heuristic.
//
// File (JSON, "format": "qtune-humming-table", "version": 1):
//   {"format": ..., "version": 1, "gpu": "H200", "device_name": "NVIDIA H200", "sm": 90,
//    "layers": [{"format": "w4a16-int4-ch",                       qtune's format
//                "layer": {"a_dtype": "float16", "b_dtype": "uint4", "shape_n": 8192, "shape_k": 8192, ...},
//                "tuning_config": [[0, 1, {...}], [1, 16, {...}], ..., [1024, 1073741824, {...}]],
//                "measured": [{"m": 1, "median_us": 15.1, "range": 0}, ...]}]}
// The M rule is qtune's (reports/selection_table.hpp): M uses the winner of the smallest tuned M >= M, and the largest
// tuned M's winner beyond it; consecutive tuned Ms with the same winner merge into one range.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "db/store.hpp"
#include "kernels/family.hpp"
#include "reports/selection_table.hpp"
#include "search/humming_space.hpp"

namespace qtune::reports {

inline constexpr std::int64_t kHummingUnboundedM = std::int64_t{1} << 30;  // Humming's "no upper end"

// The fastest verified Humming configuration of one problem.
struct HummingCell {
  std::string format;  // canonical qtune format text
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
  KernelConfig config;  // family "humming" (search/humming_space.hpp)
  double median_us = 0;
};

struct HummingLayerRules {
  std::string format;
  search::HummingLayer layer;
  std::vector<MRange> ranges;  // ascending, covering [1, inf)

  // [[m_lo, m_hi, tuning config], ...]: the argument of forward_layer(tuning_config=...).
  nlohmann::json tuning_config() const;
};

struct HummingTable {
  std::string gpu;          // the store's GPU key (profile name, else device name)
  std::string device_name;  // as the driver names it: the loader compares it with torch.cuda.get_device_name()
  int sm = 0;               // compute capability x 10
  std::vector<HummingLayerRules> layers;  // ordered by (format, N, K)
};

// Groups the cells by (format, N, K) and merges their Ms into ranges. Throws InputError naming the cell for a config
// that is no point of the Humming space or a format Humming cannot run, Error for two cells of one problem.
HummingTable build_humming_table(std::string gpu, std::string device_name, int sm, std::vector<HummingCell> cells);

// The cells of a store for one GPU key: per problem, the fastest ok cold-L2 measurement of a "humming" config that
// passed verification of the problem on that GPU and never failed it there. With the GPU's name and compute capability
// from its runs. Throws InputError naming `gpu` when the store has no run on it.
struct HummingCells {
  std::string device_name;
  int sm = 0;
  std::vector<HummingCell> cells;
};
HummingCells humming_cells_from_store(db::Store& store, const std::string& gpu);

nlohmann::json humming_table_json(const HummingTable& table);
// Reads a table file's JSON back (tests and tools); throws InputError naming the field that is wrong.
HummingTable humming_table_from_json(const nlohmann::json& json);
// Writes the table atomically (a temporary file, then a rename).
void write_humming_table(const HummingTable& table, const std::filesystem::path& path);

}  // namespace qtune::reports
