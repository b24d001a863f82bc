// M buckets: configs/m_buckets.json and the --m list (search/m_buckets.cpp).
#include "search/config_files.hpp"
#include "search/m_buckets.hpp"
#include "tests/fuzz/fuzz_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  qtune::fuzz::parse_or_reject(data, size, [](const std::string& text) { qtune::search::parse_m_list(text); });
  return qtune::fuzz::parse_or_reject(data, size, [](const std::string& text) {
    const std::string file = "fuzz/m_buckets.json";
    const std::vector<std::int64_t> buckets =
        qtune::search::m_buckets_from_json(qtune::parse_json_text(text, file), file);
    for (const std::int64_t m : buckets) {
      if (qtune::search::m_bucket_for(buckets, m) != m) qtune::fuzz::finding("bucket " + std::to_string(m) + " is not its own bucket");
    }
  });
}
