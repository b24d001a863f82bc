// Loading of configs/: GPU profiles, model shape sets and M buckets, and the one-line errors for bad files.
#include <gtest/gtest.h>

#include "tests/common/temp_dir.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <string>

#include "kernels/error.hpp"
#include "search/config_files.hpp"
#include "search/gpu_profile.hpp"
#include "search/m_buckets.hpp"
#include "search/model_shapes.hpp"
#include "tests/common/expect_error.hpp"
#include "tests/common/scoped_environment.hpp"

namespace qtune::search {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kConfigs = fs::path(QTUNE_SOURCE_DIR) / "configs";

using TempDir = ::qtune::test_support::TempDir;

using test_support::ScopedEnvironment;

// The model shape set shipped as configs/models/<name>.json.
ModelShapes shipped_model(const std::string& name) { return load_model_shapes(kConfigs / "models" / (name + ".json")); }

json read(const fs::path& file) {
  std::ifstream stream(file);
  return json::parse(stream);
}

using test_support::expect_input_error;

// ------------------------------------------------------------------------------------------------ config dir

TEST(ConfigDir, EnvironmentVariableWins) {
  TempDir dir;
  ScopedEnvironment env("QTUNE_CONFIG_DIR", dir.path().c_str());
  EXPECT_EQ(fs::canonical(config_dir()), fs::canonical(dir.path()));
}

TEST(ConfigDir, MissingEnvironmentDirectoryIsNamed) {
  ScopedEnvironment env("QTUNE_CONFIG_DIR", "/nonexistent/qtune-configs");
  expect_input_error([] { config_dir(); }, {"QTUNE_CONFIG_DIR", "/nonexistent/qtune-configs"});
}

TEST(ConfigDir, DefaultsToTheSourceTree) {
  ScopedEnvironment env("QTUNE_CONFIG_DIR", nullptr);
  EXPECT_EQ(fs::canonical(config_dir()), fs::canonical(kConfigs));
  ASSERT_FALSE(config_dir_candidates().empty());
}

TEST(ConfigFiles, InvalidJsonNamesTheFile) {
  TempDir dir;
  const fs::path file = dir.write("broken.json", "{\"name\": \"h200\",\n  \"sm\": }");
  expect_input_error([&] { read_json_file(file); }, {file.string(), "invalid JSON", "line 2"});
}

// Found by fuzz_m_buckets: nlohmann throws out_of_range (not parse_error) for a number no double holds.
TEST(ConfigFiles, NumberOverflowIsInvalidJson) {
  expect_input_error([] { parse_json_text(R"({"m_buckets": [44444e41840922]})", "m.json"); }, {"m.json", "invalid JSON", "number overflow"});
}

TEST(ConfigFiles, UnreadableFileIsNamed) {
  expect_input_error([] { read_json_file("/nonexistent/gpu.json"); }, {"/nonexistent/gpu.json", "cannot read"});
}

// ------------------------------------------------------------------------------------------------ GPU profiles

TEST(GpuProfiles, EveryShippedProfileLoads) {
  const auto profiles = load_gpu_profiles(kConfigs / "gpus");
  std::vector<std::string> names;
  for (const auto& profile : profiles) names.push_back(profile.name);
  EXPECT_EQ(names, (std::vector<std::string>{"a100", "b200", "b300", "gb10", "h100", "h20", "h200", "l20", "l40s",
                                                "rtx-pro-6000", "rtx4090", "rtx5090"}));
  for (const auto& profile : profiles) {
    SCOPED_TRACE(profile.name);
    EXPECT_GT(profile.sm_count, 0);
    EXPECT_LE(profile.shared_memory_per_block_optin_bytes, profile.shared_memory_per_sm_bytes);
    // Every profile states a rate where qtune can compare (GB10 publishes only fp4).
    EXPECT_TRUE(profile.supports(TensorType::F16) || profile.supports(TensorType::FP4));
    EXPECT_TRUE(profile.arch.starts_with("sm_" + std::to_string(profile.sm)));
  }
}

TEST(GpuProfiles, DatasheetNumbers) {
  const auto profiles = load_gpu_profiles(kConfigs / "gpus");
  const GpuProfile* h200 = find_gpu_profile(profiles, "h200");
  ASSERT_NE(h200, nullptr);
  EXPECT_EQ(h200->sm, 90);
  EXPECT_EQ(h200->arch, "sm_90a");
  EXPECT_EQ(h200->sm_count, 132);
  EXPECT_EQ(h200->l2_bytes, 62914560);
  EXPECT_EQ(h200->boost_clock_mhz, 1980);
  EXPECT_DOUBLE_EQ(h200->memory_bandwidth_gbps, 4800);
  EXPECT_DOUBLE_EQ(*h200->peak_tflops(TensorType::BF16), 989.4);
  EXPECT_DOUBLE_EQ(*h200->peak_tflops(TensorType::FP8), 1978.9);
  EXPECT_FALSE(h200->supports(TensorType::FP4));
  EXPECT_EQ(h200->compute_capability_major(), 9);
  EXPECT_EQ(h200->compute_capability_minor(), 0);

  const GpuProfile* h20 = find_gpu_profile(profiles, "H20");
  ASSERT_NE(h20, nullptr);
  EXPECT_EQ(h20->sm_count, 78);
  EXPECT_DOUBLE_EQ(h20->memory_bandwidth_gbps, 4000);
  EXPECT_DOUBLE_EQ(*h20->peak_tflops(TensorType::BF16), 148);
  EXPECT_DOUBLE_EQ(*h20->peak_tflops(TensorType::FP8), 296);

  const GpuProfile* rtx5090 = find_gpu_profile(profiles, "RTX 5090");
  ASSERT_NE(rtx5090, nullptr);
  EXPECT_EQ(rtx5090->sm, 120);
  EXPECT_EQ(rtx5090->sm_count, 170);
  EXPECT_TRUE(rtx5090->supports(TensorType::FP4));

  const GpuProfile* l20 = find_gpu_profile(profiles, "L20");
  ASSERT_NE(l20, nullptr);
  EXPECT_EQ(l20->sm, 89);
  EXPECT_EQ(l20->arch, "sm_89");
  EXPECT_EQ(l20->sm_count, 92);
  EXPECT_DOUBLE_EQ(l20->memory_bandwidth_gbps, 864);
  EXPECT_DOUBLE_EQ(*l20->peak_tflops(TensorType::FP8), 239);
  EXPECT_FALSE(l20->supports(TensorType::INT4));

  const GpuProfile* pro6000 = find_gpu_profile(profiles, "RTX PRO 6000");
  ASSERT_NE(pro6000, nullptr);
  EXPECT_EQ(pro6000->name, "rtx-pro-6000");
  EXPECT_EQ(pro6000->sm, 120);
  EXPECT_EQ(pro6000->arch, "sm_120a");
  EXPECT_EQ(pro6000->sm_count, 188);
  EXPECT_EQ(pro6000->l2_bytes, 134217728);
  EXPECT_DOUBLE_EQ(pro6000->memory_bandwidth_gbps, 1792);
  EXPECT_DOUBLE_EQ(*pro6000->peak_tflops(TensorType::FP4), 2015.2);

  const GpuProfile* a100 = find_gpu_profile(profiles, "a100");
  ASSERT_NE(a100, nullptr);
  EXPECT_EQ(a100->sm, 80);
  EXPECT_FALSE(a100->supports(TensorType::FP8));
  EXPECT_TRUE(a100->supports(TensorType::INT4));
}

// A profile's per-SM limits are its compute capability's, so they must be ArchLimits' for that architecture (the SM
// count is the part's own). rtx5090.json said 32 blocks per SM where compute capability 12.x has 24.
TEST(GpuProfiles, AgreeWithArchLimitsOfTheirArchitecture) {
  for (const GpuProfile& profile : load_gpu_profiles(kConfigs / "gpus")) {
    SCOPED_TRACE(profile.name);
    const ArchLimits arch = ArchLimits::for_sm(profile.sm);  // throws for an architecture ArchLimits does not know
    EXPECT_EQ(profile.max_blocks_per_sm, arch.max_blocks_per_sm);
    EXPECT_EQ(profile.max_threads_per_sm, arch.max_threads_per_sm);
    EXPECT_EQ(profile.max_threads_per_block, arch.max_threads_per_block);
    EXPECT_EQ(profile.registers_per_sm, arch.registers_per_sm);
    EXPECT_EQ(profile.registers_per_thread_max, arch.max_registers_per_thread);
    EXPECT_EQ(profile.shared_memory_per_block_optin_bytes, arch.max_shared_per_block);
    EXPECT_EQ(profile.shared_memory_per_sm_bytes, arch.shared_per_sm);
    const ArchLimits limits = limits_of_profile(profile);
    EXPECT_EQ(limits.sm_count, profile.sm_count);
    EXPECT_EQ(limits.max_blocks_per_sm, arch.max_blocks_per_sm);
    // Every profile's architecture is a compile target.
    EXPECT_NE(std::find(known_architectures().begin(), known_architectures().end(), profile.sm), known_architectures().end());
  }
}

// Figures NVIDIA does not publish are null (or absent), not guesses; the numbers that are published are pinned.
TEST(GpuProfiles, BlackwellProfilesAndUnpublishedFigures) {
  const auto profiles = load_gpu_profiles(kConfigs / "gpus");
  const GpuProfile* b200 = find_gpu_profile(profiles, "NVIDIA B200");
  ASSERT_NE(b200, nullptr);
  EXPECT_EQ(b200->sm, 100);
  EXPECT_EQ(b200->arch, "sm_100a");
  EXPECT_EQ(b200->sm_count, 148);
  EXPECT_FALSE(b200->l2_bytes.has_value());
  EXPECT_FALSE(b200->boost_clock_mhz.has_value());
  EXPECT_DOUBLE_EQ(*b200->peak_tflops(TensorType::FP4), 9000);
  EXPECT_FALSE(b200->supports(TensorType::INT4));

  const GpuProfile* b300 = find_gpu_profile(profiles, "NVIDIA B300 SXM6 AC");
  ASSERT_NE(b300, nullptr);
  EXPECT_EQ(b300->name, "b300");
  EXPECT_EQ(b300->sm, 103);
  EXPECT_EQ(b300->arch, "sm_103a");
  EXPECT_DOUBLE_EQ(b300->memory_gb, 288);
  EXPECT_FALSE(b300->peak_tflops(TensorType::INT8).has_value());

  const GpuProfile* gb10 = find_gpu_profile(profiles, "DGX Spark");
  ASSERT_NE(gb10, nullptr);
  EXPECT_EQ(gb10->name, "gb10");
  EXPECT_EQ(gb10->sm, 121);
  EXPECT_EQ(gb10->arch, "sm_121a");
  EXPECT_EQ(gb10->sm_count, 48);
  EXPECT_EQ(gb10->max_threads_per_sm, 1536);
  EXPECT_DOUBLE_EQ(gb10->memory_bandwidth_gbps, 273);
  EXPECT_FALSE(gb10->peak_tflops(TensorType::F16).has_value());
  EXPECT_DOUBLE_EQ(*gb10->peak_tflops(TensorType::FP4), 500);

  const GpuProfile* l40s = find_gpu_profile(profiles, "NVIDIA L40S");
  ASSERT_NE(l40s, nullptr);
  EXPECT_EQ(l40s->sm, 89);
  EXPECT_EQ(l40s->sm_count, 142);

  // null and absent both mean unpublished; present values are still checked.
  json h200 = read(kConfigs / "gpus" / "h200.json");
  TempDir dir;
  h200["l2_bytes"] = nullptr;
  h200.erase("boost_clock_mhz");
  const GpuProfile unpublished = load_gpu_profile(dir.write("h200.json", h200.dump()));
  EXPECT_FALSE(unpublished.l2_bytes.has_value());
  EXPECT_FALSE(unpublished.boost_clock_mhz.has_value());
  EXPECT_EQ(limits_of_profile(unpublished).sm_count, 132);
}

TEST(GpuProfiles, LookupByNameAndAliasIgnoresCaseAndPunctuation) {
  const auto profiles = load_gpu_profiles(kConfigs / "gpus");
  for (const char* name : {"H200", "h200", "NVIDIA H200", "nvidia h200", "H200 SXM"}) {
    const GpuProfile* profile = find_gpu_profile(profiles, name);
    ASSERT_NE(profile, nullptr) << name;
    EXPECT_EQ(profile->name, "h200") << name;
  }
  ASSERT_NE(find_gpu_profile(profiles, "NVIDIA GeForce RTX 4090"), nullptr);
  EXPECT_EQ(find_gpu_profile(profiles, "NVIDIA GeForce RTX 4090")->name, "rtx4090");
  EXPECT_EQ(find_gpu_profile(profiles, "rtx-4090")->name, "rtx4090");
  EXPECT_EQ(find_gpu_profile(profiles, "NVIDIA H100 80GB HBM3")->name, "h100");
  EXPECT_EQ(find_gpu_profile(profiles, "NVIDIA H100 PCIe"), nullptr);
  EXPECT_EQ(find_gpu_profile(profiles, "Tesla T4"), nullptr);
  EXPECT_EQ(find_gpu_profile(profiles, ""), nullptr);
  EXPECT_EQ(normalize_gpu_name("NVIDIA GeForce RTX 4090"), "geforcertx4090");
}

TEST(GpuProfiles, DeviceMatchRequiresAgreeingArchitectureAndSmCount) {
  const auto profiles = load_gpu_profiles(kConfigs / "gpus");
  const auto h200 = match_device(profiles, DeviceIdentity{"NVIDIA H200", 90, 132});
  ASSERT_TRUE(h200.has_value());
  EXPECT_EQ(h200->name, "h200");
  EXPECT_TRUE(match_device(profiles, DeviceIdentity{"NVIDIA H200", 0, 0}).has_value());
  EXPECT_FALSE(match_device(profiles, DeviceIdentity{"NVIDIA H200", 90, 114}).has_value());
  EXPECT_FALSE(match_device(profiles, DeviceIdentity{"NVIDIA H200", 100, 132}).has_value());
  EXPECT_TRUE(match_device(profiles, DeviceIdentity{"NVIDIA B200", 100, 148}).has_value());
  EXPECT_FALSE(match_device(profiles, DeviceIdentity{"NVIDIA B200", 100, 160}).has_value());
  EXPECT_FALSE(match_device(profiles, DeviceIdentity{"NVIDIA B100", 100, 148}).has_value());
}

TEST(GpuProfiles, ByNameFromShippedConfigsOrPath) {
  ScopedEnvironment env("QTUNE_CONFIG_DIR", nullptr);
  EXPECT_EQ(gpu_profile_by_name("NVIDIA H200").name, "h200");
  EXPECT_EQ(gpu_profile_by_name((kConfigs / "gpus" / "l40s.json").string()).name, "l40s");
  expect_input_error([] { gpu_profile_by_name("b400", "--gpu"); }, {"--gpu", "unknown GPU profile 'b400'", "h200"});
}

TEST(GpuProfiles, TensorTypeNamesRoundTrip) {
  for (const TensorType type : kAllTensorTypes) EXPECT_EQ(parse_tensor_type(tensor_type_name(type)), type);
  EXPECT_FALSE(parse_tensor_type("fp16").has_value());
  EXPECT_EQ(tensor_type_for(ActivationType::E4M3), TensorType::FP8);
  EXPECT_EQ(tensor_type_for(ActivationType::BF16), TensorType::BF16);
  EXPECT_EQ(tensor_type_for(ActivationType::E2M1), TensorType::FP4);
}

struct ProfileMutation {
  std::string description;
  std::function<void(json&)> mutate;
  std::vector<std::string> expected;  // pieces of the error message
};

// Writes each mutation of `good` to `file_name` in a fresh directory and expects `load` to refuse it with an error
// naming the file and every piece the mutation expects.
void expect_mutations_refused(const json& good, const std::vector<ProfileMutation>& mutations, const std::string& file_name,
                              const std::function<void(const fs::path&)>& load) {
  TempDir dir;
  for (const auto& mutation : mutations) {
    SCOPED_TRACE(mutation.description);
    json broken = good;
    mutation.mutate(broken);
    const fs::path file = dir.write(file_name, broken.dump(2));
    auto expected = mutation.expected;
    expected.push_back(file.string());
    expect_input_error([&] { load(file); }, expected);
  }
}

TEST(GpuProfiles, MalformedProfilesNameTheField) {
  const json good = read(kConfigs / "gpus" / "h200.json");
  const std::vector<ProfileMutation> mutations = {
      {"missing field", [](json& j) { j.erase("sm_count"); }, {"field 'sm_count'", "missing"}},
      {"string for integer", [](json& j) { j["sm_count"] = "132"; }, {"field 'sm_count'", "expected a positive integer"}},
      {"fraction for integer", [](json& j) { j["sm_count"] = 132.5; }, {"field 'sm_count'", "expected a positive integer"}},
      {"negative", [](json& j) { j["l2_bytes"] = -1; }, {"field 'l2_bytes'", "expected a positive integer"}},
      {"l2 as text", [](json& j) { j["l2_bytes"] = "unknown"; }, {"field 'l2_bytes'", "expected a positive integer"}},
      {"clock too high", [](json& j) { j["boost_clock_mhz"] = 20000; }, {"field 'boost_clock_mhz'", "at most 10000"}},
      {"zero bandwidth", [](json& j) { j["memory_bandwidth_gbps"] = 0; }, {"field 'memory_bandwidth_gbps'", "positive number"}},
      {"typo", [](json& j) { j["sm_cout"] = 132; }, {"field 'sm_cout'", "unknown field"}},
      {"arch contradicts sm", [](json& j) { j["arch"] = "sm_80"; }, {"field 'arch'", "does not match sm 90"}},
      {"too many registers", [](json& j) { j["registers_per_thread_max"] = 300; }, {"field 'registers_per_thread_max'", "at most 255"}},
      {"shared per block above per SM", [](json& j) { j["shared_memory_per_block_optin_bytes"] = 300000; },
       {"field 'shared_memory_per_block_optin_bytes'", "exceeds shared_memory_per_sm_bytes"}},
      {"fp8 before sm_89", [](json& j) { j["sm"] = 80; j["arch"] = "sm_80"; }, {"field 'peak_dense_tflops.fp8'", "sm_89"}},
      {"unknown tensor type", [](json& j) { j["peak_dense_tflops"]["fp6"] = 1; }, {"field 'peak_dense_tflops.fp6'", "unknown field"}},
      {"tensor rate as text", [](json& j) { j["peak_dense_tflops"]["bf16"] = "989"; }, {"field 'peak_dense_tflops.bf16'", "positive number"}},
      {"aliases not an array", [](json& j) { j["aliases"] = "H200"; }, {"field 'aliases'", "array of strings"}},
      {"empty alias", [](json& j) { j["aliases"] = json::array({"H200", ""}); }, {"field 'aliases[1]'", "non-empty string"}},
      {"bad name", [](json& j) { j["name"] = "H 200"; }, {"field 'name'", "lower-case"}},
      {"not an object", [](json& j) { j = json::array({1, 2}); }, {"expected a JSON object"}},
  };
  expect_mutations_refused(good, mutations, "h200.json", [](const fs::path& file) { load_gpu_profile(file); });
}

TEST(GpuProfiles, DirectoryRejectsDuplicateAliasesAndMismatchedNames) {
  const json h200 = read(kConfigs / "gpus" / "h200.json");
  {
    TempDir dir;
    dir.write("h200.json", h200.dump());
    json other = read(kConfigs / "gpus" / "h100.json");
    other["aliases"].push_back("nvidia h200");
    dir.write("h100.json", other.dump());
    expect_input_error([&] { load_gpu_profiles(dir.path()); }, {"h200.json", "field 'aliases'", "'h200'"});
  }
  {
    TempDir dir;
    dir.write("h100.json", h200.dump());
    expect_input_error([&] { load_gpu_profiles(dir.path()); }, {"h100.json", "field 'name'", "does not match the file name"});
  }
  {
    TempDir dir;
    expect_input_error([&] { load_gpu_profiles(dir.path()); }, {"no GPU profiles"});
  }
}

// ------------------------------------------------------------------------------------------------ models

ShardedGemm gemm_named(const std::vector<ShardedGemm>& gemms, const std::string& name) {
  for (const auto& gemm : gemms) {
    if (gemm.name == name) return gemm;
  }
  ADD_FAILURE() << "no GEMM named " << name;
  return {};
}

void expect_shape(const std::vector<ShardedGemm>& gemms, const std::string& name, std::int64_t n, std::int64_t k) {
  const ShardedGemm gemm = gemm_named(gemms, name);
  EXPECT_EQ(gemm.n, n) << name;
  EXPECT_EQ(gemm.k, k) << name;
}

struct NamedShape {
  std::string gemm;
  std::int64_t n;
  std::int64_t k;
};

// The N x K of each named GEMM of a shipped model sharded `tp` ways.
void expect_sharded_shapes(const std::string& model, int tp, const std::vector<NamedShape>& shapes) {
  SCOPED_TRACE(model + " at tp " + std::to_string(tp));
  const auto gemms = sharded_gemms(shipped_model(model), tp);
  for (const NamedShape& shape : shapes) expect_shape(gemms, shape.gemm, shape.n, shape.k);
}

TEST(ModelShapes, EveryShippedModelLoads) {
  const auto models = load_model_shape_sets(kConfigs / "models");
  std::vector<std::string> names;
  for (const auto& model : models) names.push_back(model.name);
  EXPECT_EQ(names, (std::vector<std::string>{"deepseek-v3", "llama-3-70b", "llama-3-8b", "mixtral-8x7b", "qwen2.5-72b",
                                             "qwen3-235b-a22b", "qwen3-30b-a3b"}));
  for (const auto& model : models) {
    EXPECT_EQ(model.tensor_parallel, (std::vector<int>{1, 8})) << model.name;
    for (const int tp : model.tensor_parallel) EXPECT_FALSE(distinct_shapes(model, tp).empty()) << model.name;
  }
}

TEST(ModelShapes, Llama3_70bKnownShapes) {
  const ModelShapes model = shipped_model("llama-3-70b");
  const auto tp1 = sharded_gemms(model, 1);
  expect_shape(tp1, "qkv_proj", 10240, 8192);
  expect_shape(tp1, "o_proj", 8192, 8192);
  expect_shape(tp1, "gate_up_proj", 57344, 8192);
  expect_shape(tp1, "down_proj", 8192, 28672);
  const auto tp8 = sharded_gemms(model, 8);
  expect_shape(tp8, "qkv_proj", 1280, 8192);
  expect_shape(tp8, "o_proj", 8192, 1024);
  expect_shape(tp8, "gate_up_proj", 7168, 8192);
  expect_shape(tp8, "down_proj", 8192, 3584);
  EXPECT_EQ(distinct_shapes(model, 1),
            (std::vector<GemmShape>{{8192, 8192}, {8192, 28672}, {10240, 8192}, {57344, 8192}}));
  EXPECT_EQ(gemm_named(tp1, "qkv_proj").layers, 80);
}

// Llama-style shapes follow from the published hyperparameters; checks every such model file against them.
TEST(ModelShapes, LlamaStyleShapesFollowTheirHyperparameters) {
  for (const char* name : {"llama-3-8b", "llama-3-70b", "qwen2.5-72b"}) {
    SCOPED_TRACE(name);
    const ModelShapes model = shipped_model(name);
    const auto& h = model.hyperparameters;
    const std::int64_t hidden = h.at("hidden_size");
    const std::int64_t inter = h.at("intermediate_size");
    const std::int64_t head_dim = h.at("head_dim");
    const std::int64_t heads = h.at("num_attention_heads");
    const std::int64_t kv_heads = h.at("num_key_value_heads");
    EXPECT_EQ(heads * head_dim, hidden);
    for (const int tp : {1, 8}) {
      const auto gemms = sharded_gemms(model, tp);
      expect_shape(gemms, "qkv_proj", (heads + 2 * kv_heads) * head_dim / tp, hidden);
      expect_shape(gemms, "o_proj", hidden, heads * head_dim / tp);
      expect_shape(gemms, "gate_up_proj", 2 * inter / tp, hidden);
      expect_shape(gemms, "down_proj", hidden, inter / tp);
    }
  }
}

TEST(ModelShapes, SmallerModelsKnownShapes) {
  expect_sharded_shapes("llama-3-8b", 8, {{"qkv_proj", 768, 4096}, {"down_proj", 4096, 1792}});
  expect_sharded_shapes("qwen2.5-72b", 1, {{"gate_up_proj", 59136, 8192}, {"down_proj", 8192, 29568}});
  expect_sharded_shapes("qwen2.5-72b", 8, {{"gate_up_proj", 7392, 8192}, {"down_proj", 8192, 3696}});
}

TEST(ModelShapes, DeepSeekV3DenseAndExpertShapes) {
  const ModelShapes model = shipped_model("deepseek-v3");
  const auto& h = model.hyperparameters;
  const std::int64_t hidden = h.at("hidden_size");
  const std::int64_t heads = h.at("num_attention_heads");
  EXPECT_EQ(hidden, 7168);
  const auto tp1 = sharded_gemms(model, 1);
  expect_shape(tp1, "q_a_proj", h.at("q_lora_rank"), hidden);
  expect_shape(tp1, "q_b_proj", heads * (h.at("qk_nope_head_dim") + h.at("qk_rope_head_dim")), h.at("q_lora_rank"));
  expect_shape(tp1, "kv_a_proj_with_mqa", h.at("kv_lora_rank") + h.at("qk_rope_head_dim"), hidden);
  expect_shape(tp1, "kv_b_proj", heads * (h.at("qk_nope_head_dim") + h.at("v_head_dim")), h.at("kv_lora_rank"));
  expect_shape(tp1, "o_proj", hidden, heads * h.at("v_head_dim"));
  expect_shape(tp1, "mlp.gate_up_proj", 2 * h.at("intermediate_size"), hidden);
  expect_shape(tp1, "mlp.down_proj", hidden, h.at("intermediate_size"));
  expect_shape(tp1, "experts.gate_up_proj", 2 * h.at("moe_intermediate_size"), hidden);
  expect_shape(tp1, "experts.down_proj", hidden, h.at("moe_intermediate_size"));
  expect_shape(tp1, "q_b_proj", 24576, 1536);
  expect_shape(tp1, "kv_b_proj", 32768, 512);
  expect_shape(tp1, "o_proj", 7168, 16384);

  const auto tp8 = sharded_gemms(model, 8);
  expect_shape(tp8, "q_a_proj", 1536, 7168);  // replicated
  expect_shape(tp8, "kv_a_proj_with_mqa", 576, 7168);
  expect_shape(tp8, "q_b_proj", 3072, 1536);
  expect_shape(tp8, "kv_b_proj", 4096, 512);
  expect_shape(tp8, "o_proj", 7168, 2048);
  expect_shape(tp8, "mlp.gate_up_proj", 4608, 7168);
  expect_shape(tp8, "mlp.down_proj", 7168, 2304);
  expect_shape(tp8, "experts.gate_up_proj", 512, 7168);
  expect_shape(tp8, "experts.down_proj", 7168, 256);

  const ShardedGemm experts = gemm_named(tp1, "experts.gate_up_proj");
  EXPECT_EQ(experts.kind, GemmKind::MoeExpert);
  EXPECT_EQ(experts.experts, 256);
  EXPECT_EQ(experts.top_k, 8);
  EXPECT_EQ(experts.layers, 58);
  EXPECT_EQ(gemm_named(tp1, "mlp.down_proj").layers, 3);

  EXPECT_EQ(distinct_shapes(model, 1, GemmFilter::MoeExpert), (std::vector<GemmShape>{{4096, 7168}, {7168, 2048}}));
  // The shared expert has the routed experts' shapes, so the dense set at TP 1 contains them too.
  const auto dense = distinct_shapes(model, 1, GemmFilter::Dense);
  EXPECT_EQ(dense.size(), 9u);
  EXPECT_EQ(distinct_shapes(model, 1, GemmFilter::All).size(), 9u);
}

// The MoE models: attention and expert shapes follow from their published hyperparameters, every layer is MoE.
TEST(ModelShapes, MoeModelsFollowTheirHyperparameters) {
  struct Expected {
    const char* name;
    const char* experts_key;
    std::int64_t expert_intermediate;  // per expert, at TP 1
    int experts;
    int top_k;
  };
  for (const Expected& expected : {Expected{"qwen3-235b-a22b", "num_experts", 1536, 128, 8},
                                   Expected{"qwen3-30b-a3b", "num_experts", 768, 128, 8},
                                   Expected{"mixtral-8x7b", "num_local_experts", 14336, 8, 2}}) {
    SCOPED_TRACE(expected.name);
    const ModelShapes model = shipped_model(expected.name);
    const auto& h = model.hyperparameters;
    const std::int64_t hidden = h.at("hidden_size");
    const std::int64_t heads = h.at("num_attention_heads");
    const std::int64_t kv_heads = h.at("num_key_value_heads");
    const std::int64_t head_dim = h.count("head_dim") ? h.at("head_dim") : hidden / heads;
    const std::int64_t inter = h.count("moe_intermediate_size") ? h.at("moe_intermediate_size") : h.at("intermediate_size");
    EXPECT_EQ(inter, expected.expert_intermediate);
    EXPECT_EQ(h.at(expected.experts_key), expected.experts);
    EXPECT_EQ(h.at("num_experts_per_tok"), expected.top_k);
    for (const int tp : {1, 8}) {
      const auto gemms = sharded_gemms(model, tp);
      EXPECT_EQ(gemms.size(), 4u);
      expect_shape(gemms, "qkv_proj", (heads + 2 * kv_heads) * head_dim / tp, hidden);
      expect_shape(gemms, "o_proj", hidden, heads * head_dim / tp);
      expect_shape(gemms, "experts.gate_up_proj", 2 * inter / tp, hidden);
      expect_shape(gemms, "experts.down_proj", hidden, inter / tp);
      for (const char* name : {"experts.gate_up_proj", "experts.down_proj"}) {
        const ShardedGemm experts = gemm_named(gemms, name);
        EXPECT_EQ(experts.kind, GemmKind::MoeExpert);
        EXPECT_EQ(experts.experts, expected.experts);
        EXPECT_EQ(experts.top_k, expected.top_k);
        EXPECT_EQ(experts.layers, h.at("num_hidden_layers"));
      }
    }
    EXPECT_EQ(distinct_shapes(model, 1, GemmFilter::MoeExpert).size(), 2u);
    EXPECT_EQ(distinct_shapes(model, 1, GemmFilter::Dense).size(), 2u);
  }
  // Known numbers: Qwen3-235B-A22B's experts at TP 1 and 8, Mixtral's at TP 1.
  expect_sharded_shapes("qwen3-235b-a22b", 8, {{"experts.gate_up_proj", 384, 4096}, {"experts.down_proj", 4096, 192}});
  expect_sharded_shapes("mixtral-8x7b", 1, {{"experts.gate_up_proj", 28672, 4096}, {"experts.down_proj", 4096, 14336}});
}

TEST(ModelShapes, UnlistedTensorParallelIsAnInputError) {
  const ModelShapes model = shipped_model("llama-3-70b");
  expect_input_error([&] { sharded_gemms(model, 4, "--tp"); }, {"--tp", "tensor parallel 4", "llama-3-70b", "1, 8"});
}

TEST(ModelShapes, ByNameIsCaseInsensitive) {
  ScopedEnvironment env("QTUNE_CONFIG_DIR", nullptr);
  EXPECT_EQ(model_shapes_by_name("Llama-3-70B").name, "llama-3-70b");
  EXPECT_EQ(model_shapes_by_name((kConfigs / "models" / "deepseek-v3.json").string()).name, "deepseek-v3");
  expect_input_error([] { model_shapes_by_name("llama-4", "--model"); }, {"--model", "unknown model 'llama-4'", "llama-3-8b"});
}

TEST(ModelShapes, MalformedModelsNameTheField) {
  const json good = read(kConfigs / "models" / "llama-3-70b.json");
  const std::vector<ProfileMutation> mutations = {
      {"column N not divisible", [](json& j) { j["gemms"][0]["n"] = 10244; }, {"field 'gemms[0].n'", "not divisible by tensor_parallel 8"}},
      {"row K not divisible", [](json& j) { j["gemms"][3]["k"] = 28676; }, {"field 'gemms[3].k'", "not divisible"}},
      {"missing k", [](json& j) { j["gemms"][1].erase("k"); }, {"field 'gemms[1].k'", "missing"}},
      {"bad kind", [](json& j) { j["gemms"][0]["kind"] = "sparse"; }, {"field 'gemms[0].kind'", "dense"}},
      {"bad parallel", [](json& j) { j["gemms"][0]["parallel"] = "diagonal"; }, {"field 'gemms[0].parallel'"}},
      {"dense with experts", [](json& j) { j["gemms"][0]["experts"] = 8; }, {"field 'gemms[0].experts'"}},
      {"expert without top_k",
       [](json& j) {
         j["gemms"][0]["kind"] = "moe_expert";
         j["gemms"][0]["experts"] = 8;
       },
       {"field 'gemms[0].top_k'", "missing"}},
      {"top_k above experts",
       [](json& j) {
         j["gemms"][0]["kind"] = "moe_expert";
         j["gemms"][0]["experts"] = 8;
         j["gemms"][0]["top_k"] = 9;
       },
       {"field 'gemms[0].top_k'", "exceeds experts"}},
      {"tp not starting at 1", [](json& j) { j["tensor_parallel"] = json::array({2, 8}); }, {"field 'tensor_parallel[0]'"}},
      {"tp descending", [](json& j) { j["tensor_parallel"] = json::array({1, 8, 4}); }, {"field 'tensor_parallel[2]'"}},
      {"layers above the model's", [](json& j) { j["gemms"][2]["layers"] = 81; }, {"field 'gemms[2].layers'", "num_hidden_layers"}},
      {"hyperparameter as text", [](json& j) { j["hyperparameters"]["hidden_size"] = "8192"; },
       {"field 'hyperparameters.hidden_size'", "positive integer"}},
      {"duplicate gemm", [](json& j) { j["gemms"][1]["name"] = "qkv_proj"; }, {"field 'gemms[1].name'", "appears twice"}},
      {"no gemms", [](json& j) { j["gemms"] = json::array(); }, {"field 'gemms'", "non-empty array"}},
      {"typo", [](json& j) { j["gemms"][0]["N"] = 1; }, {"field 'gemms[0].N'", "unknown field"}},
  };
  expect_mutations_refused(good, mutations, "model.json", [](const fs::path& file) { load_model_shapes(file); });
}

// ------------------------------------------------------------------------------------------------ M buckets

TEST(MBuckets, ShippedBucketsArePowersOfTwoTo8192) {
  const auto buckets = load_m_buckets(kConfigs / "m_buckets.json");
  ASSERT_EQ(buckets.size(), 14u);
  for (std::size_t i = 0; i < buckets.size(); ++i) EXPECT_EQ(buckets[i], std::int64_t{1} << i);
  ScopedEnvironment env("QTUNE_CONFIG_DIR", nullptr);
  EXPECT_EQ(load_m_buckets(), buckets);
}

TEST(MBuckets, BucketForM) {
  const std::vector<std::int64_t> buckets{1, 2, 4, 8, 16};
  EXPECT_EQ(m_bucket_for(buckets, 1), 1);
  EXPECT_EQ(m_bucket_for(buckets, 3), 4);
  EXPECT_EQ(m_bucket_for(buckets, 8), 8);
  EXPECT_EQ(m_bucket_for(buckets, 9), 16);
  EXPECT_EQ(m_bucket_for(buckets, 1000), 16);
  EXPECT_THROW(m_bucket_for({}, 1), Error);
}

TEST(MBuckets, ParseList) {
  EXPECT_EQ(parse_m_list("1, 2,4 ,8"), (std::vector<std::int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(parse_m_list("4096"), (std::vector<std::int64_t>{4096}));
  expect_input_error([] { parse_m_list("1,0"); }, {"--m", "'0'"});
  expect_input_error([] { parse_m_list("1,,2"); }, {"--m", "''"});
  expect_input_error([] { parse_m_list("4,2", "m"); }, {"m:", "ascending"});
  expect_input_error([] { parse_m_list("12x"); }, {"'12x'"});
  expect_input_error([] { parse_m_list(""); }, {"--m"});
}

TEST(MBuckets, MalformedFilesNameTheField) {
  TempDir dir;
  expect_input_error([&] { load_m_buckets(dir.write("a.json", R"({"m_buckets": [1, 4, 2]})")); }, {"field 'm_buckets[2]'", "ascending"});
  expect_input_error([&] { load_m_buckets(dir.write("b.json", R"({"m_buckets": [1, "2"]})")); }, {"field 'm_buckets[1]'", "positive integer"});
  expect_input_error([&] { load_m_buckets(dir.write("c.json", R"({"buckets": [1]})")); }, {"field 'm_buckets'", "missing"});
  expect_input_error([&] { load_m_buckets(dir.write("d.json", R"({"m_buckets": []})")); }, {"field 'm_buckets'", "non-empty"});
  expect_input_error([&] { load_m_buckets(dir.write("e.json", R"({"m_buckets": [1], "extra": 1})")); }, {"field 'extra'", "unknown"});
  expect_input_error([&] { load_m_buckets(dir.write("f.json", R"({"m_buckets": [1,)")); }, {"f.json", "invalid JSON"});
}

}  // namespace
}  // namespace qtune::search
