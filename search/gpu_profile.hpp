#pragma once
// GPU profiles (configs/gpus/*.json): the datasheet and architectural limits the search prunes and models with.
#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/family.hpp"
#include "kernels/format.hpp"

namespace qtune::search {

// The tensor-core input types a profile states a peak rate for.
enum class TensorType { F16, BF16, FP8, INT8, INT4, FP4 };
inline constexpr std::array<TensorType, 6> kAllTensorTypes = {TensorType::F16, TensorType::BF16, TensorType::FP8,
                                                               TensorType::INT8, TensorType::INT4, TensorType::FP4};
std::string_view tensor_type_name(TensorType type);  // "f16", "bf16", "fp8", "int8", "int4", "fp4"
std::optional<TensorType> parse_tensor_type(std::string_view name);

// The tensor-core type a GEMM runs at is that of its activations (weights are converted to it).
constexpr TensorType tensor_type_for(ActivationType activation) {
  switch (activation) {
    case ActivationType::F16: return TensorType::F16;
    case ActivationType::BF16: return TensorType::BF16;
    case ActivationType::E4M3:
    case ActivationType::E5M2: return TensorType::FP8;
    case ActivationType::Int8: return TensorType::INT8;
    case ActivationType::Int4: return TensorType::INT4;
    case ActivationType::E2M1: return TensorType::FP4;
  }
  return TensorType::F16;
}

struct GpuProfile {
  std::string name;          // profile key, lower case: "h200"
  std::string display_name;  // "NVIDIA H200 SXM"
  std::vector<std::string> aliases;  // other names it is known by, including what the driver reports: "NVIDIA H200"

  int sm = 0;        // compute capability as major*10+minor: 90
  std::string arch;  // the NVRTC target to compile for: "sm_90a"
  int sm_count = 0;

  int max_threads_per_sm = 0;
  int max_threads_per_block = 0;
  int max_blocks_per_sm = 0;
  int registers_per_sm = 0;
  int registers_per_block_max = 0;
  int registers_per_thread_max = 0;
  int shared_memory_per_block_bytes = 0;        // without opt-in (48 KiB)
  int shared_memory_per_block_optin_bytes = 0;  // the most one block may request with cudaFuncAttributeMaxDynamicSharedMemorySize
  int shared_memory_per_sm_bytes = 0;
  // L2 size as the device reports it; nullopt where NVIDIA publishes none (the profile's notes say so). Nothing
  // qtune decides depends on it: cold-L2 flushing sizes its buffer from the device's own report.
  std::optional<std::int64_t> l2_bytes;

  double memory_gb = 0;              // datasheet capacity, decimal GB
  double memory_bandwidth_gbps = 0;  // datasheet peak, GB/s (1e9 bytes/s)
  std::optional<int> boost_clock_mhz;  // maximum SM clock; nullopt where unpublished

  // Datasheet peak dense (non-sparse) tensor throughput in TFLOP/s (TOP/s for integers) with FP32 (INT32) accumulation,
  // indexed by TensorType; nullopt where the GPU has no tensor-core support for the type.
  std::array<std::optional<double>, kAllTensorTypes.size()> peak_dense_tflops{};

  std::filesystem::path source_file;

  int compute_capability_major() const { return sm / 10; }
  int compute_capability_minor() const { return sm % 10; }
  std::optional<double> peak_tflops(TensorType type) const { return peak_dense_tflops[static_cast<std::size_t>(type)]; }
  bool supports(TensorType type) const { return peak_tflops(type).has_value(); }
};

// The limits static rules check against, from a profile's datasheet values: ArchLimits::for_sm(profile.sm) (or only the
// sm for an architecture qtune does not know) with every limit the profile states put in its place.
ArchLimits limits_of_profile(const GpuProfile& profile);

// Loads and validates one profile file. Throws InputError "<file>: field '<name>': <expected>".
GpuProfile load_gpu_profile(const std::filesystem::path& file);
// The same for the parsed contents of `file`.
GpuProfile gpu_profile_from_json(const nlohmann::json& document, const std::filesystem::path& file);

// Every *.json under `directory`, sorted by name. Two profiles sharing a name or alias is an InputError.
std::vector<GpuProfile> load_gpu_profiles(const std::filesystem::path& directory);
std::vector<GpuProfile> load_gpu_profiles();  // config_dir()/gpus

// Lower case with everything but letters and digits dropped, and a leading "nvidia" removed:
// "NVIDIA GeForce RTX 4090" -> "geforcertx4090", "H200" and "NVIDIA H200" -> "h200".
std::string normalize_gpu_name(std::string_view name);

// The profile whose name or alias matches (case, spaces, dashes and an "NVIDIA " prefix ignored); nullptr if none.
const GpuProfile* find_gpu_profile(const std::vector<GpuProfile>& profiles, std::string_view name_or_alias);

// A profile by name or alias from the shipped configs, or from a path to a profile file.
// Throws InputError "<field>: unknown GPU profile 'x' (known: a100, h100, ...)".
GpuProfile gpu_profile_by_name(std::string_view name_alias_or_path, std::string_view field = "gpu");

// What the driver says about a device (filled in by the runtime).
struct DeviceIdentity {
  std::string name;  // cuDeviceGetName: "NVIDIA H200"
  int sm = 0;        // 0: unknown
  int sm_count = 0;  // 0: unknown
};

// The profile for a device: its reported name must match a name or alias, and where the device reports its compute
// capability and SM count they must agree with the profile (so a cut-down variant never gets the full part's numbers).
std::optional<GpuProfile> match_device(const std::vector<GpuProfile>& profiles, const DeviceIdentity& device);

}  // namespace qtune::search
