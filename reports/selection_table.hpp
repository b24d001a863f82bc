#pragma once
// Tuned selection tables: the winners of one GPU compacted into M ranges per (format, N, K), a nearest-shape fallback
// for shapes that were never tuned, and the two artefacts production code reads: JSON and a self-contained C++ header.
//
// M rule (the same as search::m_bucket_for): a GEMM with M rows uses the winner of the smallest tuned bucket >= M, and
// the largest bucket's winner beyond it. Consecutive buckets with the same winner merge into one range, so the ranges
// of a shape cover [1, inf): range i is [previous range's m_max + 1, its last bucket], and the last has no upper end.
//
// Fallback for a shape not in the table: the tuned shape of the same format nearest in (ln N, ln K) (squared Euclidean
// distance, ties to the first shape in (N, K) order), then that shape's M ranges. The header's select() computes the
// same choice bit for bit (it pastes in the text of selection_table_distance.hpp).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "kernels/family.hpp"
#include "reports/selection_table_distance.hpp"

namespace qtune::reports {

// One tuned M bucket inside a range.
struct TunedBucket {
  std::int64_t m = 0;
  double median_us = 0;
};

struct MRange {
  std::int64_t m_min = 1;
  std::optional<std::int64_t> m_max;  // nullopt: every larger M
  KernelConfig config;
  std::vector<TunedBucket> buckets;  // the tuned buckets this range merged, ascending

  bool contains(std::int64_t m) const { return m >= m_min && (!m_max || m <= *m_max); }
};

// The winner of one tuned M bucket.
struct BucketWinner {
  std::int64_t m = 0;
  KernelConfig config;
  double median_us = 0;
};

// Merges consecutive buckets with the same config (sorted by M first). Throws Error for two winners of one M.
std::vector<MRange> compact_ranges(std::vector<BucketWinner> winners);

struct ShapeRules {
  std::int64_t n = 0;
  std::int64_t k = 0;
  std::vector<MRange> ranges;  // non-empty, ascending, covering [1, inf)

  const MRange& range_for(std::int64_t m) const;
};

// The fallback's quality, measured by leaving each tuned shape out in turn: its cells are answered by the nearest
// *other* shape's rules and the chosen config's measured time there is compared with the best kernel time there.
struct ShapeRegret {
  std::string format;
  std::int64_t n = 0;
  std::int64_t k = 0;
  std::int64_t neighbour_n = 0;
  std::int64_t neighbour_k = 0;
  int cells = 0;
  double geomean_regret = 0;  // geometric mean of time / best, minus 1
  double max_regret = 0;
};

// The heuristic as the fallback, measured the same way: its time on each held-out cell against the best there.
struct MethodRegret {
  int cells = 0;
  std::optional<double> geomean_regret;
  std::optional<double> max_regret;
};

struct FallbackRegret {
  std::map<std::string, MethodRegret> nearest_by_format;    // the nearest-shape fallback, per format
  std::map<std::string, MethodRegret> heuristic_by_format;  // the heuristic, per format
  int shapes = 0;           // shapes held out that had a neighbour
  int cells = 0;            // cells with a regret
  int heuristic_cells = 0;  // of those: the chosen config was not measured there, so the heuristic's time counts
  int skipped_cells = 0;    // neither the chosen config nor the heuristic was measured there
  std::optional<double> geomean_regret;  // geometric mean of time / best over all cells, minus 1
  std::optional<double> max_regret;
  std::string worst_cell;  // "w4a16-int4-ch n=8192 k=8192 m=64"
  std::vector<ShapeRegret> per_shape;

  nlohmann::json to_json() const;
};

// What answers a shape (N, K) the table did not tune, per format: the nearest tuned shape's rules, or the kernel
// family's hand-written heuristic. `qtune export` picks the one with the lower leave-one-shape-out regret.
enum class FallbackMethod { NearestShape, Heuristic };
std::string_view to_string(FallbackMethod method);  // "nearest-shape", "heuristic"

// A MoE GEMM's tuned token buckets (docs/moe.md): (format, experts, top_k, n, k, projection, layout) -> ranges over
// the token count T, by the M rule above with T for M (the smallest tuned T bucket >= T; the largest beyond). The
// routing the winners were tuned with (uniform, seed 1, unless the tune was told otherwise) stands for production's.
struct MoeRules {
  std::string format;      // canonical spec text
  int experts = 0;
  int top_k = 0;
  std::int64_t n = 0;      // per expert
  std::int64_t k = 0;
  std::string projection;  // "gate-up", "down"
  std::string layout;      // "token-indexed", "grouped-contiguous", "grouped-masked"
  std::string routing;     // what the winners were tuned with, e.g. "uniform"
  std::vector<MRange> ranges;  // m_min/m_max and the buckets' m are token counts; non-empty, covering [1, inf)

  auto key() const { return std::tie(format, experts, top_k, n, k, projection, layout); }
};

struct SelectionTable {
  std::string gpu;
  std::vector<MoeRules> moe;  // sorted by key(), one entry per key; empty for a table without MoE winners
  std::map<std::string, std::vector<ShapeRules>> formats;  // canonical format text -> shapes sorted by (n, k)
  std::map<std::string, FallbackMethod> fallback_methods;   // per format; absent: NearestShape
  nlohmann::json provenance = nlohmann::json::object();    // the runs the winners came from (db data only)
  std::optional<FallbackRegret> fallback_regret;

  struct Selection {
    const KernelConfig* config = nullptr;
    const ShapeRules* shape = nullptr;  // the tuned shape whose rules answered
    bool tuned_shape = false;           // (n, k) itself is in the table
  };
  // The config for a GEMM; config == nullptr when the table has no shape of `format`, or when (n, k) was not tuned
  // and the format's fallback is the heuristic.
  Selection select(std::string_view format, std::int64_t m, std::int64_t n, std::int64_t k) const;
  // The nearest shape of `format` to (n, k), leaving out `excluded` (for leave-one-out); nullptr if none.
  const ShapeRules* nearest_shape(std::string_view format, std::int64_t n, std::int64_t k,
                                  const ShapeRules* excluded = nullptr) const;

  // The config of a MoE GEMM at `tokens` tokens; nullptr when the table has no rules for the key (no fallback).
  const KernelConfig* select_moe(std::string_view format, int experts, int top_k, std::int64_t n, std::int64_t k,
                                 std::string_view projection, std::string_view layout, std::int64_t tokens) const;

  std::size_t shape_count() const;
  std::size_t range_count() const;

  // {"schema", "gpu", "formats": {spec: {"shapes": [{"n", "k", "ranges": [{"m_min", "m_max" (null: no end), "config",
  // "family", "params", "median_us", "buckets": [{"m", "median_us"}]}]}]}}, "fallback", "provenance"}.
  // "median_us" of a range is that of its first tuned bucket. Keys are sorted, so equal tables give equal bytes.
  // MoE rules, when there are any: "moe": [{"format", "experts", "top_k", "n", "k", "projection", "layout", "routing",
  // "ranges": [{"t_min", "t_max" (null: no end), "config", "family", "params", "median_us", "buckets": [{"t",
  // "median_us"}]}]}].
  nlohmann::json to_json() const;
  // Reads to_json()'s output. Throws InputError "<source>: field '<path>': ..." for a malformed table.
  static SelectionTable from_json(const nlohmann::json& json, std::string_view source = "table");

  // A C++ header that needs only <array>, <cstdint> and <string_view> (C++17), with constexpr tables and
  // `select(format, m, n, k)` returning a `const Config*` (nullptr for a format not in the table); with MoE rules also
  // kMoeRanges, kMoeEntries and `select_moe(format, experts, top_k, n, k, projection, layout, tokens)`, answering as
  // select_moe() above (nothing MoE is written for a table without them, so such a header is unchanged).
  // Throws InputError("--namespace: ...") for a name check_cpp_namespace refuses.
  std::string to_cpp_header(std::string_view namespace_name = "qtune_table") const;
};

// Throws InputError("--namespace: ...") unless `name` is an identifier the header can use as its namespace: not a
// keyword or alternative token, not reserved (`_X`, `__`), not a standard macro (INT64_MAX, assert) or a name
// spelled like a macro (no lower-case letter).
void check_cpp_namespace(std::string_view name);

// Writes `text` to `path` atomically (a temporary file beside it, then a rename). Throws LibraryError("system", ...).
void write_file_atomically(const std::filesystem::path& path, const std::string& text);

struct FileText {
  std::filesystem::path path;
  std::string text;
};
// Writes every file or none: each into a temporary file beside it first, then all renamed into place; on a failure
// the temporary files are removed and no target is touched. Throws LibraryError("system", ...).
void write_files_atomically(const std::vector<FileText>& files);

}  // namespace qtune::reports
