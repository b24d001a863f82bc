#include "kernels/family.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>

#include "kernels/error.hpp"
#include "kernels/text_escape.hpp"
#include "kernels/families/block_scaled_family.hpp"
#include "kernels/families/mma_family.hpp"
#include "kernels/families/tma_family.hpp"
#include "kernels/families/wgmma_family.hpp"
#include "kernels/family_support.hpp"

namespace qtune {

std::string Problem::to_string() const {
  std::string text = format.to_string() + " m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
  if (has_bias) text += " bias";
  return text;
}

int KernelConfig::get(std::string_view name) const {
  auto found = params.find(std::string(name));
  if (found == params.end()) QTUNE_INPUT_ERROR("config: missing parameter '" + std::string(name) + "'");
  return found->second;
}

int ParameterDomain::value_in(const KernelConfig& config) const {
  const auto found = config.params.find(name);
  if (found == config.params.end() && absent_means) return *absent_means;
  return config.get(name);
}

std::string KernelConfig::to_string() const {
  std::vector<std::string> order;
  if (const KernelFamily* known = family_named(family)) {
    for (const ParameterDomain& domain : known->parameter_space()) order.push_back(domain.name);
  }
  std::string text;
  auto append = [&](const std::string& name, int value) {
    text += (text.empty() ? "" : ",") + name + "=" + std::to_string(value);
  };
  for (const std::string& name : order) {
    auto found = params.find(name);
    if (found != params.end()) append(name, found->second);
  }
  for (const auto& [name, value] : params) {
    if (std::find(order.begin(), order.end(), name) == order.end()) append(name, value);
  }
  return text;
}

KernelConfig KernelConfig::parse(std::string_view text, std::string_view family) {
  KernelConfig config;
  config.family = std::string(family);
  const size_t colon = text.find(':');
  if (colon != std::string_view::npos) {
    config.family = std::string(text.substr(0, colon));
    text = text.substr(colon + 1);
  }
  if (config.family.empty()) QTUNE_INPUT_ERROR("config: empty family name");
  if (text.empty()) QTUNE_INPUT_ERROR("config: empty parameter list (expected name=value,...)");
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    const size_t equals = item.find('=');
    if (equals == std::string_view::npos || equals == 0) {
      QTUNE_INPUT_ERROR("config: " + quote_input(item) + " is not of the form name=value");
    }
    const std::string name(item.substr(0, equals));
    const std::string_view value_text = item.substr(equals + 1);
    int value = 0;
    const auto [end, error] = std::from_chars(value_text.data(), value_text.data() + value_text.size(), value);
    if (error != std::errc() || end != value_text.data() + value_text.size() || value_text.empty()) {
      QTUNE_INPUT_ERROR("config: parameter " + quote_input(name) + ": " + quote_input(value_text) + " is not an integer");
    }
    if (!config.params.emplace(name, value).second) QTUNE_INPUT_ERROR("config: parameter " + quote_input(name) + " given twice");
    start = comma + 1;
  }
  return config;
}

nlohmann::json KernelConfig::to_json() const {
  nlohmann::json json;
  json["family"] = family;
  json["params"] = nlohmann::json::object();
  for (const auto& [name, value] : params) json["params"][name] = value;
  return json;
}

KernelConfig KernelConfig::from_json(const nlohmann::json& json) {
  if (!json.is_object()) QTUNE_INPUT_ERROR("config: expected a JSON object with 'family' and 'params'");
  KernelConfig config;
  if (!json.contains("family") || !json["family"].is_string()) QTUNE_INPUT_ERROR("config.family: missing or not a string");
  config.family = json["family"].get<std::string>();
  if (!json.contains("params") || !json["params"].is_object()) QTUNE_INPUT_ERROR("config.params: missing or not an object");
  for (const auto& [name, value] : json["params"].items()) {
    if (!value.is_number_integer()) QTUNE_INPUT_ERROR("config.params." + name + ": not an integer");
    config.params[name] = value.get<int>();
  }
  return config;
}

std::vector<void*> KernelArguments::pointers() {
  std::vector<void*> result;
  result.reserve(offsets.size());
  for (size_t offset : offsets) result.push_back(storage.data() + offset);
  return result;
}

int ArchLimits::resident_blocks_per_sm(std::uint64_t threads, int registers, std::uint64_t shared_bytes) const {
  if (threads == 0) return 0;
  const std::uint64_t warps = (threads + 31) / 32;
  const std::uint64_t registers_per_warp = (std::uint64_t(std::max(registers, 1)) * 32 + 255) / 256 * 256;
  const std::uint64_t by_registers = std::uint64_t(registers_per_sm) / (registers_per_warp * warps);
  const std::uint64_t by_threads = std::uint64_t(max_threads_per_sm) / threads;
  const std::uint64_t by_shared = shared_bytes == 0 ? std::uint64_t(max_blocks_per_sm) : std::uint64_t(shared_per_sm) / shared_bytes;
  return static_cast<int>(std::min({by_registers, by_threads, by_shared, std::uint64_t(max_blocks_per_sm)}));
}

namespace {

// What differs between the architectures ArchLimits::for_sm knows; the rest keeps ArchLimits' defaults.
// SM counts are of a reference part (sm_100: B200's 148, sm_103: B300's 148, sm_121: DGX Spark GB10's 48); per-SM limits per
// capability, blocks per SM as CUDA 13.0's cuda_occupancy.h gives them (12.x: 24). configs/gpus/*.json must agree (tested).
struct ArchTableRow {
  int sm;
  int sm_count;
  int max_shared_per_block;
  int shared_per_sm;
  int max_threads_per_sm;
  int max_blocks_per_sm;
};

constexpr ArchTableRow kArchTable[] = {
    {75, 68, 65536, 65536, 1024, 16},      {80, 108, 166912, 167936, 2048, 32}, {86, 82, 101376, 102400, 1536, 16},
    {89, 128, 101376, 102400, 1536, 24},   {90, 132, 232448, 233472, 2048, 32}, {100, 148, 232448, 233472, 2048, 32},
    {103, 148, 232448, 233472, 2048, 32},  {120, 170, 101376, 102400, 1536, 24}, {121, 48, 101376, 102400, 1536, 24},
};

}  // namespace

ArchLimits ArchLimits::for_sm(int sm) {
  for (const ArchTableRow& row : kArchTable) {
    if (row.sm != sm) continue;
    ArchLimits limits;
    limits.sm = sm;
    limits.sm_count = row.sm_count;
    limits.max_shared_per_block = row.max_shared_per_block;
    limits.shared_per_sm = row.shared_per_sm;
    limits.max_threads_per_sm = row.max_threads_per_sm;
    limits.max_blocks_per_sm = row.max_blocks_per_sm;
    return limits;
  }
  std::string known;
  for (const ArchTableRow& row : kArchTable) known += (known.empty() ? "" : ", ") + std::to_string(row.sm);
  QTUNE_INPUT_ERROR("sm: no architecture limits known for sm_" + std::to_string(sm) + " (known: " + known + ")");
}

const std::vector<const KernelFamily*>& kernel_families() {
  // heuristic_family takes the first that prefers a problem: tma before wgmma, which it replaces from M = 256 on.
  static const std::vector<const KernelFamily*> families = {&mma_family(), &tma_family(), &wgmma_family(),
                                                              &block_scaled_family()};
  return families;
}

const KernelFamily& packing_family(const FormatSpec& format, int sm) {
  const FamilySupport support = family_support(format, sm);
  if (support.family == nullptr) QTUNE_THROW(UnsupportedError, support.reason);
  return *support.family;
}

const KernelFamily& heuristic_family(const Problem& problem, int sm) {
  const KernelFamily& packing = packing_family(problem.format, sm);
  for (const KernelFamily* family : kernel_families()) {
    if (family->weight_layout() == packing.weight_layout() && family->supports(problem.format, sm).supported &&
        family->preferred_for(problem, sm)) {
      return *family;
    }
  }
  return packing;
}

const KernelFamily* family_named(std::string_view name) {
  for (const KernelFamily* family : kernel_families()) {
    if (family->name() == name) return family;
  }
  return nullptr;
}

ParameterRanges KernelFamily::curated_ranges(int64_t) const {
  ParameterRanges ranges;
  for (const ParameterDomain& domain : parameter_space()) ranges[domain.name] = domain.values;
  return ranges;
}

bool has_parameter(const KernelFamily& family, std::string_view name) {
  const std::vector<ParameterDomain> space = family.parameter_space();
  return std::any_of(space.begin(), space.end(), [&](const ParameterDomain& domain) { return domain.name == name; });
}

const KernelFamily& find_family(std::string_view name) {
  if (const KernelFamily* family = family_named(name)) return *family;
  std::string known;
  for (const KernelFamily* family : kernel_families()) known += (known.empty() ? "" : ", ") + family->name();
  QTUNE_INPUT_ERROR("family: unknown kernel family " + quote_input(name) + " (known: " + known + ")");
}

bool auto_tune_covers(const KernelFamily& family, const std::vector<const KernelFamily*>& families, const Problem& problem,
                      int sm) {
  const auto present = [&](const KernelFamily& wanted) {
    return std::find(families.begin(), families.end(), &wanted) != families.end();
  };
  if (families.size() < 2) return true;
  const bool is_mma = &family == &mma_family();
  const bool is_wgmma = &family == &wgmma_family();
  // The tma family where its rules prefer it (from M = 32: kPreferredFromM, kPreferredFromMWeightOnly);
  // the family it takes over from only one M bucket beyond.
  if (present(tma_family()) && tma_family().supports(problem.format, sm).supported) {
    const bool quantized = problem.format.activation_is_quantized();
    if (&family == &tma_family() && !tma_family().preferred_for(problem, sm)) return false;
    if (is_mma && quantized && problem.m > 2 * TmaFamily::kPreferredFromM) return false;
    if (is_wgmma && problem.m > 2 * (quantized ? TmaFamily::kPreferredFromM : TmaFamily::kPreferredFromMWeightOnly)) return false;
  }
  // Where wgmma starts to win, and mma one bucket beyond it: tuning both everywhere would double the time for nothing.
  // Widened fp8 activations from M = 1: W4A8 at M = 1 ran 17.46 us on wgmma against 26.50 on mma (H200, 2026-12-03).
  if (present(mma_family()) && present(wgmma_family())) {
    const bool wgmma_runs_it = wgmma_family().supports(problem.format, sm).supported;
    const bool widened = WgmmaFamily::widens_activations(problem.format);
    if (is_mma && wgmma_runs_it && problem.m > 2 * WgmmaFamily::kPreferredFromM) return false;
    if (is_wgmma && (!wgmma_runs_it || (problem.m < WgmmaFamily::kPreferredFromM && !widened))) return false;
  }
  return true;
}

int sm_of_arch(std::string_view arch, std::string_view field) {
  // compute_NN is a PTX target (the driver compiles it for the GPU it loads on): the code of sm_NN.
  const bool ptx = arch.starts_with("compute_");
  std::string_view digits = arch;
  digits.remove_prefix(ptx ? 8 : arch.starts_with("sm_") ? 3 : 0);
  while (!ptx && !digits.empty() && (digits.back() == 'a' || digits.back() == 'f')) digits.remove_suffix(1);
  int sm = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), sm);
  if (!(ptx || arch.starts_with("sm_")) || error != std::errc() || end != digits.data() + digits.size() || sm <= 0) {
    QTUNE_INPUT_ERROR(std::string(field) + ": " + quote_input(arch) + " is not an architecture such as sm_90a (or a PTX target such as compute_75)");
  }
  return sm;
}

}  // namespace qtune
