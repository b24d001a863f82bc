#include "search/gpu_profile.hpp"

#include <algorithm>
#include <cctype>
#include <map>

#include "kernels/error.hpp"
#include "kernels/text_escape.hpp"
#include "search/config_files.hpp"

namespace qtune::search {

namespace fs = std::filesystem;

std::string_view tensor_type_name(TensorType type) {
  switch (type) {
    case TensorType::F16: return "f16";
    case TensorType::BF16: return "bf16";
    case TensorType::FP8: return "fp8";
    case TensorType::INT8: return "int8";
    case TensorType::INT4: return "int4";
    case TensorType::FP4: return "fp4";
  }
  return "?";
}

std::optional<TensorType> parse_tensor_type(std::string_view name) {
  for (const TensorType type : kAllTensorTypes) {
    if (tensor_type_name(type) == name) return type;
  }
  return std::nullopt;
}

namespace {

int positive_int_at_most(const ConfigObject& object, std::string_view key, std::int64_t max) {
  const std::int64_t value = object.required_positive_int(key);
  if (value > max) object.fail(key, "expected at most " + std::to_string(max) + ", got " + std::to_string(value));
  return static_cast<int>(value);
}

// A figure NVIDIA may not publish: null or absent is nullopt, anything else must be a positive integer up to `max`.
std::optional<std::int64_t> unpublished_or_positive_int(const ConfigObject& object, std::string_view key, std::int64_t max) {
  const std::optional<std::int64_t> value = object.optional_positive_int(key);
  if (value && *value > max) object.fail(key, "expected at most " + std::to_string(max) + ", got " + std::to_string(*value));
  return value;
}

// The first compute capability whose tensor cores take each type; a profile claiming a rate earlier is contradictory.
int first_sm_with(TensorType type) {
  switch (type) {
    case TensorType::F16: return 70;
    case TensorType::BF16: return 80;
    case TensorType::FP8: return 89;
    case TensorType::INT8: return 72;
    case TensorType::INT4: return 75;
    case TensorType::FP4: return 100;
  }
  return 0;
}

bool valid_profile_name(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  });
}

}  // namespace

ArchLimits limits_of_profile(const GpuProfile& profile) {
  ArchLimits limits;
  try {
    limits = ArchLimits::for_sm(profile.sm);
  } catch (const InputError&) {
    limits.sm = profile.sm;
  }
  limits.sm = profile.sm;
  if (profile.sm_count > 0) limits.sm_count = profile.sm_count;
  if (profile.shared_memory_per_block_optin_bytes > 0) limits.max_shared_per_block = profile.shared_memory_per_block_optin_bytes;
  if (profile.shared_memory_per_sm_bytes > 0) limits.shared_per_sm = profile.shared_memory_per_sm_bytes;
  if (profile.registers_per_sm > 0) limits.registers_per_sm = profile.registers_per_sm;
  if (profile.registers_per_thread_max > 0) limits.max_registers_per_thread = profile.registers_per_thread_max;
  if (profile.max_threads_per_sm > 0) limits.max_threads_per_sm = profile.max_threads_per_sm;
  if (profile.max_threads_per_block > 0) limits.max_threads_per_block = profile.max_threads_per_block;
  if (profile.max_blocks_per_sm > 0) limits.max_blocks_per_sm = profile.max_blocks_per_sm;
  return limits;
}

GpuProfile load_gpu_profile(const fs::path& file) { return gpu_profile_from_json(read_json_file(file), file); }

GpuProfile gpu_profile_from_json(const nlohmann::json& document, const fs::path& file) {
  const ConfigObject root(document, file.string());
  GpuProfile profile;
  profile.source_file = file;

  profile.name = root.required_string("name");
  if (!valid_profile_name(profile.name)) root.fail("name", "expected lower-case letters, digits, '-' or '_', got " + quote_input(profile.name));
  profile.display_name = root.required_string("display_name");
  profile.aliases = root.required_string_array("aliases");

  profile.sm = positive_int_at_most(root, "sm", 200);
  if (profile.sm < 70) root.fail("sm", "expected a compute capability of sm_70 or later, got " + std::to_string(profile.sm));
  profile.arch = root.required_string("arch");
  const std::string base_arch = "sm_" + std::to_string(profile.sm);
  if (profile.arch != base_arch && profile.arch != base_arch + "a" && profile.arch != base_arch + "f") {
    root.fail("arch", quote_input(profile.arch) + " does not match sm " + std::to_string(profile.sm) + " (expected " + base_arch +
                          ", " + base_arch + "a or " + base_arch + "f)");
  }
  profile.sm_count = positive_int_at_most(root, "sm_count", 1024);

  profile.max_threads_per_sm = positive_int_at_most(root, "max_threads_per_sm", 4096);
  if (profile.max_threads_per_sm % 32 != 0) root.fail("max_threads_per_sm", "expected a multiple of the warp size 32");
  profile.max_threads_per_block = positive_int_at_most(root, "max_threads_per_block", 1024);
  if (profile.max_threads_per_block > profile.max_threads_per_sm) {
    root.fail("max_threads_per_block", "exceeds max_threads_per_sm (" + std::to_string(profile.max_threads_per_sm) + ")");
  }
  profile.max_blocks_per_sm = positive_int_at_most(root, "max_blocks_per_sm", 64);
  profile.registers_per_sm = positive_int_at_most(root, "registers_per_sm", 1 << 20);
  profile.registers_per_block_max = positive_int_at_most(root, "registers_per_block_max", 1 << 20);
  if (profile.registers_per_block_max > profile.registers_per_sm) {
    root.fail("registers_per_block_max", "exceeds registers_per_sm (" + std::to_string(profile.registers_per_sm) + ")");
  }
  profile.registers_per_thread_max = positive_int_at_most(root, "registers_per_thread_max", 255);

  profile.shared_memory_per_block_bytes = positive_int_at_most(root, "shared_memory_per_block_bytes", 1 << 24);
  profile.shared_memory_per_block_optin_bytes = positive_int_at_most(root, "shared_memory_per_block_optin_bytes", 1 << 24);
  profile.shared_memory_per_sm_bytes = positive_int_at_most(root, "shared_memory_per_sm_bytes", 1 << 24);
  if (profile.shared_memory_per_block_bytes > profile.shared_memory_per_block_optin_bytes) {
    root.fail("shared_memory_per_block_bytes", "exceeds shared_memory_per_block_optin_bytes (" +
                                                   std::to_string(profile.shared_memory_per_block_optin_bytes) + ")");
  }
  if (profile.shared_memory_per_block_optin_bytes > profile.shared_memory_per_sm_bytes) {
    root.fail("shared_memory_per_block_optin_bytes",
              "exceeds shared_memory_per_sm_bytes (" + std::to_string(profile.shared_memory_per_sm_bytes) + ")");
  }
  profile.l2_bytes = unpublished_or_positive_int(root, "l2_bytes", std::int64_t(1) << 40);

  profile.memory_gb = root.required_positive_number("memory_gb");
  profile.memory_bandwidth_gbps = root.required_positive_number("memory_bandwidth_gbps");
  if (const auto clock = unpublished_or_positive_int(root, "boost_clock_mhz", 10000)) profile.boost_clock_mhz = static_cast<int>(*clock);

  const ConfigObject peaks = root.required_object("peak_dense_tflops");
  bool any_peak = false;
  for (const TensorType type : kAllTensorTypes) {
    const std::string_view key = tensor_type_name(type);
    const auto peak = peaks.optional_positive_number(key);
    if (peak && profile.sm < first_sm_with(type)) {
      peaks.fail(key, "sm_" + std::to_string(profile.sm) + " has no " + std::string(key) + " tensor cores (they start at sm_" +
                          std::to_string(first_sm_with(type)) + "); use null");
    }
    profile.peak_dense_tflops[static_cast<std::size_t>(type)] = peak;
    any_peak = any_peak || peak.has_value();
  }
  peaks.reject_unknown_fields();
  if (!any_peak) root.fail("peak_dense_tflops", "expected a rate for at least one type");

  root.optional_string("notes");
  root.optional_string("sources");
  root.reject_unknown_fields();
  return profile;
}

std::string normalize_gpu_name(std::string_view name) {
  std::string normalized;
  for (const char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c))) normalized += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (normalized.starts_with("nvidia") && normalized.size() > 6) normalized.erase(0, 6);
  return normalized;
}

std::vector<GpuProfile> load_gpu_profiles(const fs::path& directory) {
  std::vector<GpuProfile> profiles;
  std::map<std::string, std::string> owner_of_name;  // normalized name or alias -> profile name
  for (const auto& file : json_files_in(directory)) {
    GpuProfile profile = load_gpu_profile(file);
    if (profile.name != file.stem().string()) {
      QTUNE_INPUT_ERROR(file.string() + ": field 'name': " + quote_input(profile.name) + " does not match the file name " +
                        quote_input(file.stem().string()));
    }
    std::vector<std::string> names{profile.name, profile.display_name};
    names.insert(names.end(), profile.aliases.begin(), profile.aliases.end());
    for (const auto& name : names) {
      const std::string key = normalize_gpu_name(name);
      const auto [it, inserted] = owner_of_name.emplace(key, profile.name);
      if (!inserted && it->second != profile.name) {
        QTUNE_INPUT_ERROR(file.string() + ": field 'aliases': " + quote_input(name) + " is already a name of profile '" + it->second + "'");
      }
    }
    profiles.push_back(std::move(profile));
  }
  if (profiles.empty()) QTUNE_INPUT_ERROR(directory.string() + ": no GPU profiles (*.json) found");
  return profiles;
}

std::vector<GpuProfile> load_gpu_profiles() { return load_gpu_profiles(config_dir() / "gpus"); }

const GpuProfile* find_gpu_profile(const std::vector<GpuProfile>& profiles, std::string_view name_or_alias) {
  const std::string wanted = normalize_gpu_name(name_or_alias);
  if (wanted.empty()) return nullptr;
  for (const auto& profile : profiles) {
    if (normalize_gpu_name(profile.name) == wanted || normalize_gpu_name(profile.display_name) == wanted) return &profile;
    for (const auto& alias : profile.aliases) {
      if (normalize_gpu_name(alias) == wanted) return &profile;
    }
  }
  return nullptr;
}

GpuProfile gpu_profile_by_name(std::string_view name_alias_or_path, std::string_view field) {
  // A path names a file ("configs/gpus/h200.json", "./my-gpu.json"); anything else is a profile name or alias.
  if (name_alias_or_path.ends_with(".json") || name_alias_or_path.find('/') != std::string_view::npos) {
    return load_gpu_profile(fs::path(name_alias_or_path));
  }
  const auto profiles = load_gpu_profiles();
  if (const GpuProfile* profile = find_gpu_profile(profiles, name_alias_or_path)) return *profile;
  std::string known;
  for (const auto& profile : profiles) known += (known.empty() ? "" : ", ") + profile.name;
  QTUNE_INPUT_ERROR(std::string(field) + ": unknown GPU profile " + quote_input(name_alias_or_path) + " (known: " + known + ")");
}

std::optional<GpuProfile> match_device(const std::vector<GpuProfile>& profiles, const DeviceIdentity& device) {
  const GpuProfile* profile = find_gpu_profile(profiles, device.name);
  if (profile == nullptr) return std::nullopt;
  if (device.sm != 0 && device.sm != profile->sm) return std::nullopt;
  if (device.sm_count != 0 && device.sm_count != profile->sm_count) return std::nullopt;
  return *profile;
}

}  // namespace qtune::search
