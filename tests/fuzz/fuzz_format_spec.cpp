// FormatSpec::parse (kernels/format.cpp): the spec text users type on every command.
#include <nlohmann/json.hpp>

#include "kernels/format.hpp"
#include "tests/fuzz/fuzz_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return qtune::fuzz::parse_or_reject(data, size, [](const std::string& text) {
    const qtune::FormatSpec format = qtune::FormatSpec::parse(text);
    // README, "Canonical text": parse(to_string(x)) == x, and to_string() of a canonical text is that text.
    const std::string canonical = format.to_string();
    const qtune::FormatSpec reparsed = qtune::FormatSpec::parse(canonical);
    if (!(reparsed == format)) qtune::fuzz::finding("parse(to_string(x)) != x for '" + text + "' (canonical '" + canonical + "')");
    if (reparsed.to_string() != canonical) qtune::fuzz::finding("'" + canonical + "' is not canonical: " + reparsed.to_string());
    if (!(qtune::FormatSpec::from_json(format.to_json()) == format)) qtune::fuzz::finding("the JSON round trip changes '" + canonical + "'");
    format.family();
    format.bits_per_weight();
    qtune::architecture_support(format);
    format.validate_shape(4096, 4096);  // last: may refuse the shape
    format.bits_per_weight(4096, 4096);
  });
}
