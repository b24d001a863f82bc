// MoE routing files (`file:PATH` routings, docs/moe.md): kernels/moe.cpp, and the layouts built from what it accepts.
#include <string>

#include "kernels/input_file.hpp"
#include "kernels/moe.hpp"
#include "kernels/moe_layout.hpp"
#include "tests/fuzz/fuzz_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return qtune::fuzz::parse_or_reject(data, size, [](const std::string& text) {
    const std::string file = "fuzz/routing.json";
    const qtune::Routing routing = qtune::routing_from_json(qtune::parse_json(text, file), file, 7);
    // What it accepts is a valid routing, written back unchanged, and every layout holds each pair exactly once.
    const qtune::Routing again = qtune::routing_from_json(qtune::routing_to_json(routing), "again");
    if (again.ids != routing.ids) qtune::fuzz::finding("routing_to_json does not round-trip the ids");
    for (const qtune::MoeLayout layout :
         {qtune::MoeLayout::TokenIndexed, qtune::MoeLayout::GroupedContiguous, qtune::MoeLayout::GroupedMasked}) {
      const qtune::MoeRowMap map = qtune::moe_row_map(layout, routing, 16);
      int64_t live = 0;
      for (const int32_t pair : map.row_pair) live += pair >= 0;
      if (live != routing.pairs()) qtune::fuzz::finding("a layout does not hold every pair once");
    }
  });
}
