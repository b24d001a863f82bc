// `qtune import` (reports/external_import.cpp): Humming result JSON, generic JSON lists and CSV, told apart by content.
#include "reports/external_import.hpp"
#include "tests/fuzz/fuzz_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return qtune::fuzz::parse_or_reject(data, size, [](const std::string& text) {
    // No extension: a file that does not start like JSON is read as CSV.
    qtune::reports::read_external_text(text, "fuzz/h200_dense_n8192_k8192_g0_humming_w4a16_int4_float16");
  });
}
