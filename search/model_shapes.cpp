#include "search/model_shapes.hpp"

#include <algorithm>
#include <cctype>
#include <set>

#include "kernels/error.hpp"
#include "kernels/text_escape.hpp"
#include "search/config_files.hpp"

namespace qtune::search {

namespace fs = std::filesystem;

std::string_view parallelism_name(Parallelism parallelism) {
  switch (parallelism) {
    case Parallelism::Column: return "column";
    case Parallelism::Row: return "row";
    case Parallelism::Replicated: return "replicated";
  }
  return "?";
}

std::string_view gemm_kind_name(GemmKind kind) {
  switch (kind) {
    case GemmKind::Dense: return "dense";
    case GemmKind::MoeExpert: return "moe_expert";
  }
  return "?";
}

namespace {

int int_at_most(const ConfigObject& object, std::string_view key, std::int64_t max) {
  const std::int64_t value = object.required_positive_int(key);
  if (value > max) object.fail(key, "expected at most " + std::to_string(max) + ", got " + std::to_string(value));
  return static_cast<int>(value);
}

std::string lower(std::string_view text) {
  std::string result(text);
  for (char& c : result) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return result;
}

ModelGemm load_gemm(const ConfigObject& object, const std::map<std::string, std::int64_t>& hyperparameters) {
  ModelGemm gemm;
  gemm.name = object.required_string("name");
  const std::string kind = object.required_string("kind");
  if (kind == "dense") {
    gemm.kind = GemmKind::Dense;
  } else if (kind == "moe_expert") {
    gemm.kind = GemmKind::MoeExpert;
  } else {
    object.fail("kind", "expected \"dense\" or \"moe_expert\", got \"" + kind + "\"");
  }
  const std::string parallel = object.required_string("parallel");
  if (parallel == "column") {
    gemm.parallel = Parallelism::Column;
  } else if (parallel == "row") {
    gemm.parallel = Parallelism::Row;
  } else if (parallel == "replicated") {
    gemm.parallel = Parallelism::Replicated;
  } else {
    object.fail("parallel", "expected \"column\", \"row\" or \"replicated\", got \"" + parallel + "\"");
  }
  gemm.n = object.required_positive_int("n");
  gemm.k = object.required_positive_int("k");
  gemm.layers = int_at_most(object, "layers", 100000);
  if (const auto it = hyperparameters.find("num_hidden_layers"); it != hyperparameters.end() && gemm.layers > it->second) {
    object.fail("layers", std::to_string(gemm.layers) + " exceeds the model's num_hidden_layers (" + std::to_string(it->second) + ")");
  }
  if (gemm.kind == GemmKind::MoeExpert) {
    gemm.experts = int_at_most(object, "experts", 1 << 20);
    gemm.top_k = int_at_most(object, "top_k", 1 << 20);
    if (gemm.top_k > gemm.experts) object.fail("top_k", "exceeds experts (" + std::to_string(gemm.experts) + ")");
  } else {
    if (object.has("experts")) object.fail("experts", "only a moe_expert GEMM has experts");
    if (object.has("top_k")) object.fail("top_k", "only a moe_expert GEMM has top_k");
  }
  object.optional_string("notes");
  object.reject_unknown_fields();
  return gemm;
}

}  // namespace

ModelShapes load_model_shapes(const fs::path& file) { return model_shapes_from_json(read_json_file(file), file); }

ModelShapes model_shapes_from_json(const nlohmann::json& document, const fs::path& file) {
  const ConfigObject root(document, file.string());
  ModelShapes model;
  model.source_file = file;
  model.name = root.required_string("name");
  model.display_name = root.required_string("display_name");
  model.source = root.required_string("source");

  const ConfigObject hyperparameters = root.required_object("hyperparameters");
  for (const auto& key : hyperparameters.keys()) model.hyperparameters[key] = hyperparameters.required_positive_int(key);

  const auto degrees = root.required_positive_int_array("tensor_parallel");
  for (std::size_t i = 0; i < degrees.size(); ++i) {
    const std::string key = "tensor_parallel[" + std::to_string(i) + "]";
    if (degrees[i] > 4096) root.fail(key, "expected at most 4096");
    if (i == 0 && degrees[i] != 1) root.fail(key, "expected the first degree to be 1");
    if (i > 0 && degrees[i] <= degrees[i - 1]) root.fail(key, "expected degrees in ascending order without repeats");
    model.tensor_parallel.push_back(static_cast<int>(degrees[i]));
  }

  const auto gemm_objects = root.required_object_array("gemms");
  std::set<std::string> names;
  for (std::size_t i = 0; i < gemm_objects.size(); ++i) {
    const ConfigObject& object = gemm_objects[i];
    ModelGemm gemm = load_gemm(object, model.hyperparameters);
    if (!names.insert(gemm.name).second) object.fail("name", quote_input(gemm.name) + " appears twice");
    for (const int tp : model.tensor_parallel) {
      if (gemm.parallel == Parallelism::Column && gemm.n % tp != 0) {
        object.fail("n", std::to_string(gemm.n) + " is not divisible by tensor_parallel " + std::to_string(tp));
      }
      if (gemm.parallel == Parallelism::Row && gemm.k % tp != 0) {
        object.fail("k", std::to_string(gemm.k) + " is not divisible by tensor_parallel " + std::to_string(tp));
      }
    }
    model.gemms.push_back(std::move(gemm));
  }
  root.optional_string("notes");
  root.reject_unknown_fields();
  return model;
}

std::vector<ModelShapes> load_model_shape_sets(const fs::path& directory) {
  std::vector<ModelShapes> models;
  std::set<std::string> names;
  for (const auto& file : json_files_in(directory)) {
    ModelShapes model = load_model_shapes(file);
    if (!names.insert(lower(model.name)).second) {
      QTUNE_INPUT_ERROR(file.string() + ": field 'name': " + quote_input(model.name) + " is the name of another model file");
    }
    models.push_back(std::move(model));
  }
  if (models.empty()) QTUNE_INPUT_ERROR(directory.string() + ": no model shape sets (*.json) found");
  return models;
}

std::vector<ModelShapes> load_model_shape_sets() { return load_model_shape_sets(config_dir() / "models"); }

ModelShapes model_shapes_by_name(std::string_view name_or_path, std::string_view field) {
  // A path names a file ("configs/models/x.json", "./my-model.json"); anything else is a model name.
  if (name_or_path.ends_with(".json") || name_or_path.find('/') != std::string_view::npos) {
    return load_model_shapes(fs::path(name_or_path));
  }
  const auto models = load_model_shape_sets();
  for (const auto& model : models) {
    if (lower(model.name) == lower(name_or_path)) return model;
  }
  std::string known;
  for (const auto& model : models) known += (known.empty() ? "" : ", ") + model.name;
  QTUNE_INPUT_ERROR(std::string(field) + ": unknown model " + quote_input(name_or_path) + " (known: " + known + ")");
}

std::vector<ShardedGemm> sharded_gemms(const ModelShapes& model, int tp, std::string_view field) {
  if (std::find(model.tensor_parallel.begin(), model.tensor_parallel.end(), tp) == model.tensor_parallel.end()) {
    std::string supported;
    for (const int degree : model.tensor_parallel) supported += (supported.empty() ? "" : ", ") + std::to_string(degree);
    QTUNE_INPUT_ERROR(std::string(field) + ": tensor parallel " + std::to_string(tp) + " is not defined for model '" +
                      model.name + "' (defined: " + supported + ")");
  }
  std::vector<ShardedGemm> result;
  for (const auto& gemm : model.gemms) {
    ShardedGemm sharded{gemm.name, gemm.kind, gemm.n, gemm.k, gemm.layers, gemm.experts, gemm.top_k};
    if (gemm.parallel == Parallelism::Column) sharded.n /= tp;
    if (gemm.parallel == Parallelism::Row) sharded.k /= tp;
    result.push_back(std::move(sharded));
  }
  return result;
}

std::vector<GemmShape> distinct_shapes(const ModelShapes& model, int tp, GemmFilter filter, std::string_view field) {
  std::set<GemmShape> shapes;
  for (const auto& gemm : sharded_gemms(model, tp, field)) {
    const bool wanted = filter == GemmFilter::All || (filter == GemmFilter::Dense && gemm.kind == GemmKind::Dense) ||
                        (filter == GemmFilter::MoeExpert && gemm.kind == GemmKind::MoeExpert);
    if (wanted) shapes.insert(GemmShape{gemm.n, gemm.k});
  }
  return {shapes.begin(), shapes.end()};
}

}  // namespace qtune::search
