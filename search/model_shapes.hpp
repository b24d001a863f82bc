#pragma once
// Model GEMM shape sets (configs/models/*.json): the weight GEMMs of a model's layers, and their tensor-parallel shards.
// Every weight W is [N, K] and a layer computes C[M, N] = A[M, K] · Wᵀ.
#include <nlohmann/json_fwd.hpp>

#include <compare>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace qtune::search {

// How Megatron-style tensor parallelism splits a weight over `tp` GPUs.
enum class Parallelism {
  Column,      // output features split: N / tp (qkv, gate_up, ...)
  Row,         // input features split:  K / tp (o_proj, down_proj, ...)
  Replicated,  // every GPU holds the whole weight (small low-rank projections)
};
std::string_view parallelism_name(Parallelism parallelism);  // "column", "row", "replicated"

enum class GemmKind {
  Dense,      // one weight, every token goes through it
  MoeExpert,  // one of `experts` weights of the same shape; each token goes through `top_k` of them
};
std::string_view gemm_kind_name(GemmKind kind);  // "dense", "moe_expert"

// One weight GEMM of the model at tensor parallel 1, as written in the file.
struct ModelGemm {
  std::string name;  // "qkv_proj", "experts.down_proj"
  GemmKind kind = GemmKind::Dense;
  Parallelism parallel = Parallelism::Column;
  std::int64_t n = 0;
  std::int64_t k = 0;
  int layers = 0;   // how many layers contain it
  int experts = 0;  // MoeExpert only
  int top_k = 0;    // MoeExpert only
};

struct ModelShapes {
  std::string name;          // "llama-3-70b"
  std::string display_name;  // "Llama-3-70B"
  std::string source;        // where the hyperparameters come from
  std::map<std::string, std::int64_t> hyperparameters;  // the published config values the shapes derive from
  std::vector<int> tensor_parallel;  // supported degrees, ascending, starting at 1
  std::vector<ModelGemm> gemms;
  std::filesystem::path source_file;
};

// A GEMM of the model on one GPU at a tensor-parallel degree.
struct ShardedGemm {
  std::string name;
  GemmKind kind = GemmKind::Dense;
  std::int64_t n = 0;
  std::int64_t k = 0;
  int layers = 0;
  int experts = 0;
  int top_k = 0;
};

struct GemmShape {
  std::int64_t n = 0;
  std::int64_t k = 0;
  friend auto operator<=>(const GemmShape&, const GemmShape&) = default;
};

enum class GemmFilter { All, Dense, MoeExpert };

// Loads and validates one model file. Throws InputError "<file>: field '<name>': <expected>"; every listed
// tensor-parallel degree must divide the split dimension of every column- and row-parallel GEMM.
ModelShapes load_model_shapes(const std::filesystem::path& file);
ModelShapes model_shapes_from_json(const nlohmann::json& document, const std::filesystem::path& file);  // parsed contents
std::vector<ModelShapes> load_model_shape_sets(const std::filesystem::path& directory);  // every *.json, sorted
std::vector<ModelShapes> load_model_shape_sets();  // config_dir()/models

// A model by name ("llama-3-70b", case-insensitive) from the shipped configs, or from a path to a model file.
// Throws InputError "<field>: unknown model 'x' (known: ...)".
ModelShapes model_shapes_by_name(std::string_view name_or_path, std::string_view field = "model");

// The model's GEMMs on one GPU at tensor parallel `tp`, in file order. Throws InputError naming `field` when the
// model does not list `tp`.
std::vector<ShardedGemm> sharded_gemms(const ModelShapes& model, int tp, std::string_view field = "tp");

// The distinct (N, K) of the model's GEMMs at `tp`, ascending.
std::vector<GemmShape> distinct_shapes(const ModelShapes& model, int tp, GemmFilter filter = GemmFilter::All,
                                       std::string_view field = "tp");

}  // namespace qtune::search
