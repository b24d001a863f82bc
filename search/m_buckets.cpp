#include "search/m_buckets.hpp"

#include "search/shape_limits.hpp"

#include <algorithm>
#include <charconv>
#include <string>

#include "kernels/error.hpp"
#include "kernels/text_escape.hpp"
#include "search/config_files.hpp"

namespace qtune::search {

std::vector<std::int64_t> load_m_buckets(const std::filesystem::path& file) {
  return m_buckets_from_json(read_json_file(file), file);
}

std::vector<std::int64_t> m_buckets_from_json(const nlohmann::json& document, const std::filesystem::path& file) {
  const ConfigObject root(document, file.string());
  const auto buckets = root.required_positive_int_array("m_buckets");
  for (std::size_t i = 1; i < buckets.size(); ++i) {
    if (buckets[i] <= buckets[i - 1]) {
      root.fail("m_buckets[" + std::to_string(i) + "]", "expected buckets in ascending order without repeats (" +
                                                          std::to_string(buckets[i]) + " follows " + std::to_string(buckets[i - 1]) + ")");
    }
  }
  root.optional_string("notes");
  root.reject_unknown_fields();
  return buckets;
}

std::vector<std::int64_t> load_m_buckets() { return load_m_buckets(config_dir() / "m_buckets.json"); }

std::vector<std::int64_t> parse_m_list(std::string_view text, std::string_view field) {
  std::vector<std::int64_t> values;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    std::string_view item = text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    std::int64_t value = 0;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || error != std::errc() || end != item.data() + item.size() || value <= 0) {
      QTUNE_INPUT_ERROR(std::string(field) + ": " + quote_input(item) + " is not a positive integer");
    }
    if (!values.empty() && value <= values.back()) {
      QTUNE_INPUT_ERROR(std::string(field) + ": expected values in ascending order without repeats (" + std::to_string(value) +
                        " follows " + std::to_string(values.back()) + ")");
    }
    check_m(value, field);
    values.push_back(value);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return values;
}

std::int64_t m_bucket_for(const std::vector<std::int64_t>& buckets, std::int64_t m) {
  if (buckets.empty()) QTUNE_THROW(Error, "m_bucket_for: no buckets");
  const auto it = std::lower_bound(buckets.begin(), buckets.end(), m);
  return it == buckets.end() ? buckets.back() : *it;
}

}  // namespace qtune::search
