#pragma once
// M buckets (configs/m_buckets.json): the token counts M a format and shape are tuned at. A GEMM with another M
// uses the winner of its bucket (the smallest bucket >= M).
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

namespace qtune::search {

// Loads and validates a bucket file: {"m_buckets": [1, 2, 4, ...]}, positive, strictly ascending.
// Throws InputError "<file>: field 'm_buckets[3]': ...".
std::vector<std::int64_t> load_m_buckets(const std::filesystem::path& file);
std::vector<std::int64_t> m_buckets_from_json(const nlohmann::json& document, const std::filesystem::path& file);  // parsed contents
std::vector<std::int64_t> load_m_buckets();  // config_dir()/m_buckets.json

// Parses a comma-separated list "1,2,4,8" (spaces allowed) into positive, strictly ascending values.
// Throws InputError naming `field` ("--m: '0' is not a positive integer").
std::vector<std::int64_t> parse_m_list(std::string_view text, std::string_view field = "--m");

// The bucket a GEMM with `m` rows uses: the smallest bucket >= m, or the largest bucket when m exceeds them all.
// `buckets` must be non-empty and ascending.
std::int64_t m_bucket_for(const std::vector<std::int64_t>& buckets, std::int64_t m);

}  // namespace qtune::search
