// Model GEMM shape sets (configs/models/*.json, or a file given to --model): search/model_shapes.cpp.
#include "search/config_files.hpp"
#include "search/model_shapes.hpp"
#include "tests/fuzz/fuzz_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return qtune::fuzz::parse_or_reject(data, size, [](const std::string& text) {
    const std::string file = "fuzz/model.json";
    const qtune::search::ModelShapes model =
        qtune::search::model_shapes_from_json(qtune::parse_json_text(text, file), file);
    for (const int tp : model.tensor_parallel) qtune::search::distinct_shapes(model, tp);
  });
}
