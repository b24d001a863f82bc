#pragma once
// `qtune import`: GEMM times measured elsewhere (Marlin, DeepGEMM, Humming's published benchmarks, ...) read from
// JSON or CSV and stored as external results, with the file, the label and how they were timed, so that reports can
// put them beside qtune's CUPTI times and say which is which.
//
// Accepted files:
//  - Humming benchmark results: {"problem": {"shape_n", "shape_k", "a_dtype", "b_dtype", "bs_dtype", "c_dtype",
//    "weight_scale_group_size", "input_scale_group_size", "zero_point", "use_fp_zero_point", ...} or {"dtype"} for a
//    dense torch GEMM, "device": {"device_name"}, "result": {"<M>": {"time": <mean ms>}}} (CUDA-event means);
//  - a generic JSON list (or {"results": [...]}) of {"format", "m", "n", "k", "time_us", "label", "gpu", "source",
//    optional "timing", "notes"};
//  - CSV with a header row naming the same columns.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "db/store.hpp"

namespace qtune::reports {

// How a time was taken. Humming's files are CUDA-event means (triton do_bench, L2 flushed, launch overhead included).
inline constexpr std::string_view kTimingCudaEventMean = "cuda-event-mean";

struct ImportOptions {
  std::optional<std::string> label;   // replaces every row's label
  std::optional<std::string> gpu;     // replaces every row's GPU (a profile name or alias, or any name)
  std::optional<std::string> format;  // replaces the format read from a Humming file (e.g. to compare with another scale type)
  std::optional<std::string> timing;  // the timing method of rows that do not state one
};

enum class ExternalFileKind { Humming, JsonList, Csv };
std::string_view to_string(ExternalFileKind kind);  // "humming", "json", "csv"

struct ExternalRow {
  db::Problem problem;  // canonical format text (or "f16"/"bf16" for dense GEMMs)
  std::string source;
  std::string label;
  std::string gpu;  // a GPU key: the profile name where one matches ("h200")
  double time_us = 0;
  std::string notes;  // a JSON object: {"file", "timing", "timing_detail", ...}
};

struct ExternalFile {
  std::filesystem::path path;
  ExternalFileKind kind = ExternalFileKind::JsonList;
  std::vector<ExternalRow> rows;
};

// Reads and validates a whole file; stores nothing. Throws InputError "<file>: field '<name>': ..." (CSV:
// "<file>: line N: field '<column>': ...").
ExternalFile read_external_file(const std::filesystem::path& path, const ImportOptions& options = {});
// The same for the contents of the file `path`.
ExternalFile read_external_text(const std::string& text, const std::filesystem::path& path, const ImportOptions& options = {});

// Stores every row of one file in one transaction (all or nothing); a row with the same (source, label, problem,
// GPU) as a stored one replaces it. Returns the number of rows stored.
std::size_t store_external_file(db::Store& store, const ExternalFile& file);

// The timing method code in a stored result's notes ("" when not stated) and the legend text reports use for it:
// "external, CUDA-event mean", "external, CUPTI median", "external, <method>" or "external, timing not stated".
std::string timing_of(const db::ExternalResultRecord& result);
std::string timing_legend(std::string_view timing);

}  // namespace qtune::reports
