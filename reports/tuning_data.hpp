#pragma once
// What export and report read from a store, gathered once per GPU: for every problem (format, M, N, K) the fastest
// time of each kernel config, the winner, the heuristic's config, each baseline and each external result.
// Only the public db::Store API is used; nothing here writes to the store.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "db/store.hpp"
#include "kernels/family.hpp"

namespace qtune::reports {

// The Measurement::phase the tuner gives the heuristic's own config (measured like any other candidate).
inline constexpr std::string_view kHeuristicPhase = "heuristic";

// Problem formats "f16" and "bf16" are dense GEMMs without quantization (cuBLASLt f16/bf16 baselines, torch results).
// They are shown beside every quantized format with the same N and K.
bool is_dense_format(std::string_view format);

// The canonical text of a format as problems store it: FormatSpec::to_string(), or "f16"/"bf16" for dense GEMMs.
// Throws InputError naming `field`.
std::string canonical_format_text(std::string_view text, std::string_view field = "format");

// A format list (split_format_list's grammar, kernels/format.hpp) as canonical texts, dense "f16"/"bf16" included:
// "w4a16-int4-ch,w8a8-fp8-ch:scale=f16,act-scale=g128;f16" is three formats.
std::vector<std::string> parse_format_list(std::string_view text, std::string_view field = "--format");

// The key results are stored under for a GPU name: the matching GPU profile's name ("NVIDIA H200" -> "h200"), else
// the name as given.
std::string gpu_key_for(std::string_view gpu_name);

using db::to_kernel_config;  // a stored kernel config as a kernels/ KernelConfig (db/store.hpp)

// The least memory one GEMM of a problem moves (A with its scales, W with its scales, C once) and its FLOPs (2 M N K).
struct ProblemCost {
  double bytes = 0;
  double flops = 0;
  double arithmetic_intensity() const { return bytes > 0 ? flops / bytes : 0; }
};
ProblemCost problem_cost(const db::Problem& problem);

// One problem on one GPU.
struct Cell {
  db::ProblemRecord problem;
  // Kernel config id -> its fastest ok cold-L2 median on this problem, for configs with no failed, invalid or crashed
  // verification of the problem on this GPU (the same rule as Store::best_measurement).
  std::map<std::int64_t, double> kernel_us;
  std::optional<db::WinnerRecord> winner;
  std::optional<std::int64_t> heuristic_config;      // the config measured with phase "heuristic"
  std::map<std::string, double> baseline_us;         // baseline family ("cublaslt-f16") -> its fastest config's median
  std::vector<db::ExternalResultRecord> external;    // results imported for this problem and GPU

  std::optional<double> heuristic_us() const;
  std::optional<double> best_kernel_us() const;
  std::optional<double> kernel_time(std::int64_t config) const;
};

// A (format, N, K) weight shape.
struct ShapeKey {
  std::string format;
  std::int64_t n = 0;
  std::int64_t k = 0;
  friend auto operator<=>(const ShapeKey&, const ShapeKey&) = default;
};

struct GpuData {
  std::string gpu;
  std::vector<Cell> cells;          // sorted by (format, n, k, m)
  std::vector<db::RunRecord> runs;  // runs that measured or decided a winner on this GPU, by id

  // Cells grouped by shape, each group sorted by M.
  std::map<ShapeKey, std::vector<const Cell*>> shapes() const;
};

struct TuningData {
  std::map<std::int64_t, db::KernelConfigRecord> configs;  // every config of the store by id
  std::map<KernelConfig, std::int64_t> kernel_config_ids;   // each kernel config's lowest id (find_kernel_config)
  std::map<std::string, GpuData> gpus;                      // by GPU key

  const db::KernelConfigRecord& config(std::int64_t id) const;
  // The stored kernel config equal to `config` (same family and params), if any.
  std::optional<std::int64_t> find_kernel_config(const KernelConfig& config) const;
};

struct DataFilter {
  std::optional<std::string> gpu;    // a GPU key or name; empty: every GPU
  std::vector<std::string> formats;  // canonical format texts; empty: every format (dense ones are always kept)
};

// Reads everything export and report need, for the GPUs and formats the filter selects.
TuningData load_tuning_data(db::Store& store, const DataFilter& filter = {});

// The geometric mean of positive values; nullopt for none.
std::optional<double> geometric_mean(const std::vector<double>& values);

}  // namespace qtune::reports
