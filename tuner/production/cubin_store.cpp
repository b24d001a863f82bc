#include "tuner/production/cubin_store.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <tuple>

#include "kernels/error.hpp"
#include "kernels/input_file.hpp"
#include "tuner/jit/sha256.hpp"
#include "tuner/production/selector.hpp"

namespace qtune::production {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------------- architectures

ArchTarget ArchTarget::parse(std::string_view text, std::string_view field) {
  auto fail = [&]() -> ArchTarget {
    QTUNE_INPUT_ERROR(std::string(field) + ": '" + std::string(text) + "' is not an NVRTC target such as sm_90a or sm_80");
  };
  if (text.substr(0, 3) != "sm_") return fail();
  std::size_t digits_end = 3;
  while (digits_end < text.size() && std::isdigit(static_cast<unsigned char>(text[digits_end]))) ++digits_end;
  const std::string_view digits = text.substr(3, digits_end - 3);
  const std::string_view suffix = text.substr(digits_end);
  if (digits.size() < 2 || digits.size() > 3 || (suffix != "" && suffix != "a" && suffix != "f")) return fail();
  ArchTarget target;
  target.sm = std::stoi(std::string(digits));
  target.suffix = std::string(suffix);
  return target;
}

bool ArchTarget::runs_on(int device_sm) const {
  if (suffix == "a") return sm == device_sm;
  return sm / 10 == device_sm / 10 && sm % 10 <= device_sm % 10;
}

// ---------------------------------------------------------------------------------------------------- manifest

nlohmann::json CubinEntry::to_json() const {
  return {{"format", format}, {"family", config.family}, {"config", config.to_string()}, {"arch", arch},
          {"kernel_name", kernel_name}, {"file", file}, {"sha256", sha256}, {"origin", origin}};
}

nlohmann::json CubinManifest::to_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const CubinEntry& entry : kernels) list.push_back(entry.to_json());
  return {{"schema", kManifestSchema}, {"kernels", list}};
}

namespace {

bool is_sha256(const std::string& text) {
  return text.size() == 64 && std::all_of(text.begin(), text.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f'); });
}

// A relative path that stays inside the directory: no root, no "..".
bool is_inside(const std::string& file) {
  const fs::path path(file);
  if (file.empty() || path.is_absolute() || path.has_root_name()) return false;
  return std::none_of(path.begin(), path.end(), [](const fs::path& part) { return part == ".."; });
}

auto entry_key(const CubinEntry& entry) { return std::tie(entry.format, entry.config, entry.arch); }

}  // namespace

CubinManifest CubinManifest::from_json(const nlohmann::json& json, std::string_view source) {
  auto fail = [&](const std::string& path, const std::string& what) {
    QTUNE_INPUT_ERROR(std::string(source) + ": field '" + path + "': " + what);
  };
  if (!json.is_object()) fail("", "expected an object");
  const auto schema = json.find("schema");
  if (schema == json.end()) fail("schema", "missing");
  if (*schema != kManifestSchema) fail("schema", "expected \"" + std::string(kManifestSchema) + "\"");
  const auto kernels = json.find("kernels");
  if (kernels == json.end()) fail("kernels", "missing");
  if (!kernels->is_array()) fail("kernels", "expected an array");
  CubinManifest manifest;
  for (std::size_t i = 0; i < kernels->size(); ++i) {
    const std::string path = "kernels[" + std::to_string(i) + "]";
    const nlohmann::json& item = (*kernels)[i];
    if (!item.is_object()) fail(path, "expected an object");
    auto text = [&](const char* key) {
      const auto found = item.find(key);
      if (found == item.end()) fail(path + "." + key, "missing");
      if (!found->is_string() || found->get<std::string>().empty()) fail(path + "." + key, "expected a non-empty string");
      return found->get<std::string>();
    };
    CubinEntry entry;
    try {
      entry.format = FormatSpec::parse(text("format")).to_string();
    } catch (const InputError& error) {
      fail(path + ".format", error.what());
    }
    const std::string family_name = text("family");
    const KernelFamily* family = nullptr;
    try {
      family = &find_family(family_name);
      entry.config = KernelConfig::parse(text("config"), family_name);
    } catch (const InputError& error) {
      fail(path + (family == nullptr ? ".family" : ".config"), error.what());
    }
    // Every parameter of the family, except one added after configs were stored (absent_means), which may be left out.
    for (const auto& [name, value] : entry.config.params) {
      if (!has_parameter(*family, name)) fail(path + ".config", "the " + family_name + " family has no parameter '" + name + "'");
    }
    for (const ParameterDomain& domain : family->parameter_space()) {
      if (!entry.config.params.contains(domain.name) && !domain.absent_means) {
        fail(path + ".config", "missing the " + family_name + " family's parameter '" + domain.name + "'");
      }
    }
    entry.arch = text("arch");
    try {
      ArchTarget::parse(entry.arch);
    } catch (const InputError& error) {
      fail(path + ".arch", error.what());
    }
    entry.kernel_name = text("kernel_name");
    entry.file = text("file");
    if (!is_inside(entry.file)) fail(path + ".file", "expected a relative path inside the cubin directory");
    entry.sha256 = text("sha256");
    if (!is_sha256(entry.sha256)) fail(path + ".sha256", "expected 64 lowercase hex digits");
    if (const auto origin = item.find("origin"); origin != item.end() && origin->is_string()) entry.origin = origin->get<std::string>();
    manifest.kernels.push_back(std::move(entry));
  }
  return manifest;
}

CubinManifest CubinManifest::read(const fs::path& directory) {
  const fs::path file = directory / kManifestName;
  return from_json(qtune::read_json_file(file, "cubins", "write it with `qtune export --cubins DIR --arch ...`"), file.string());
}

const CubinEntry* CubinManifest::find(std::string_view format, const KernelConfig& config, int device_sm,
                                      std::string_view preferred_arch) const {
  const CubinEntry* best = nullptr;
  int best_sm = -1;
  for (const CubinEntry& entry : kernels) {
    if (entry.format != format || entry.config != config) continue;
    if (entry.arch == preferred_arch) return &entry;
    const ArchTarget target = ArchTarget::parse(entry.arch);
    if (target.runs_on(device_sm) && target.sm > best_sm) {
      best = &entry;
      best_sm = target.sm;
    }
  }
  return best;
}

std::vector<char> read_cubin(const fs::path& directory, const CubinEntry& entry, std::size_t index) {
  const fs::path file = directory / entry.file;
  std::ifstream stream(file, std::ios::binary);
  const std::string field = (directory / kManifestName).string() + ": field 'kernels[" + std::to_string(index) + "]";
  if (!stream) QTUNE_INPUT_ERROR(field + ".file': cannot read " + file.string());
  std::vector<char> bytes{std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
  jit::Sha256 hash;
  hash.update(bytes.data(), bytes.size());
  const std::string actual = hash.finish_hex();
  if (actual != entry.sha256) {
    QTUNE_INPUT_ERROR(field + ".sha256': " + file.string() + " has sha256 " + actual + ", the manifest says " + entry.sha256);
  }
  return bytes;
}

// ---------------------------------------------------------------------------------------------------- export

CubinPlan plan_cubins(const reports::SelectionTable& table, const std::vector<std::string>& archs, bool with_heuristic) {
  if (archs.empty()) QTUNE_INPUT_ERROR("--arch: give at least one architecture (e.g. sm_90a)");
  std::map<std::tuple<std::string, KernelConfig, std::string>, CubinRequest> requests;
  std::map<std::tuple<std::string, KernelConfig, std::string>, CubinSkip> skipped;
  for (const std::string& arch : archs) {
    const ArchTarget target = ArchTarget::parse(arch, "--arch");
    ArchLimits limits;
    try {
      limits = ArchLimits::for_sm(target.sm);
    } catch (const InputError&) {
      QTUNE_INPUT_ERROR("--arch: qtune has no limits for " + arch + " (known: sm_75, sm_80, sm_86, sm_89, sm_90, sm_100, sm_103, sm_120, sm_121)");
    }
    for (const auto& [format_key, shapes] : table.formats) {
      const std::string& format_text = format_key;  // the lambda below captures it: clang before 16 cannot capture a binding
      const FormatSpec format = FormatSpec::parse(format_text);
      auto add = [&](const KernelConfig& config, const Problem& problem, const std::string& origin) {
        const auto key = std::make_tuple(format_text, config, arch);
        if (requests.count(key) > 0) return;
        CubinRequest request{format_text, config, arch, origin};
        const KernelFamily& family = find_family(config.family);
        const ArchSupport support = family.supports(format, target.sm);
        const RuleVerdict verdict = support.supported ? family.check(config, problem, limits)
                                                      : RuleVerdict::fail("format-unsupported-on-arch", support.reason);
        if (verdict.valid) {
          skipped.erase(key);
          requests.emplace(key, std::move(request));
        } else if (skipped.count(key) == 0) {
          skipped.emplace(key, CubinSkip{std::move(request), verdict.rule + ": " + verdict.detail + " (" + problem.to_string() + ")"});
        }
      };
      for (const reports::ShapeRules& shape : shapes) {
        std::set<std::int64_t> ms;
        for (const reports::MRange& range : shape.ranges) {
          add(range.config, rule_check_problem(range, Problem{format, range.m_min, shape.n, shape.k}), "table");
          ms.insert(range.m_min);
          for (const reports::TunedBucket& bucket : range.buckets) ms.insert(bucket.m);
        }
        if (!with_heuristic) continue;
        for (const std::int64_t m : ms) {
          const Problem problem{format, m, shape.n, shape.k};
          try {
            add(heuristic_family(problem, target.sm).default_config(problem, limits), problem, "heuristic");
          } catch (const UnsupportedError&) {
            // The format does not run on this architecture, or nothing fits the shape: the table's configs say so already.
          }
        }
      }
    }
  }
  CubinPlan plan;
  for (auto& [key, request] : requests) plan.requests.push_back(std::move(request));
  for (auto& [key, skip] : skipped) plan.skipped.push_back(std::move(skip));
  return plan;
}

namespace {

// A file an export writes: <arch dir>/<sha256 hex>.cubin.
bool is_export_cubin(const fs::path& file) {
  const std::string stem = file.stem().string();
  return file.extension() == ".cubin" && stem.size() == 64 &&
         std::all_of(stem.begin(), stem.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
}

// Removes the cubins of earlier exports that `result`'s manifest no longer lists (after the new manifest is written,
// so a reader never sees a manifest naming a removed file).
void remove_stale_cubins(const fs::path& directory, CubinExport& result) {
  std::set<fs::path> listed;
  for (const CubinEntry& entry : result.manifest.kernels) listed.insert((directory / entry.file).lexically_normal());
  std::error_code error;
  for (fs::directory_iterator arch(directory, error), end; !error && arch != end; arch.increment(error)) {
    if (!arch->is_directory()) continue;
    for (fs::directory_iterator file(arch->path(), error); !error && file != end; file.increment(error)) {
      const fs::path path = file->path().lexically_normal();
      if (!file->is_regular_file() || !is_export_cubin(path) || listed.count(path) > 0) continue;
      std::error_code removal;
      if (fs::remove(path, removal)) result.removed.push_back(path);
      if (removal) QTUNE_LIBRARY_ERROR("system", "cannot remove the stale cubin " + path.string() + ": " + removal.message());
    }
  }
  if (error) QTUNE_LIBRARY_ERROR("system", "cannot list " + directory.string() + ": " + error.message());
  std::sort(result.removed.begin(), result.removed.end());
}

}  // namespace

CubinExport write_cubins(const CubinPlan& plan, const fs::path& directory, const jit::Compiler& compiler) {
  CubinExport result;
  std::vector<jit::CompileRequest> requests;
  std::vector<const CubinRequest*> compiled_requests;
  for (const CubinRequest& request : plan.requests) {
    try {
      const KernelFamily& family = find_family(request.config.family);
      const FormatSpec format = FormatSpec::parse(request.format);
      jit::CompileRequest compile;
      compile.source = family.instantiation_source(request.config, format, request.arch);
      compile.kernel_name = family.kernel_name(request.config, format);
      compile.arch = request.arch;
      requests.push_back(std::move(compile));
      compiled_requests.push_back(&request);
    } catch (const Error& failure) {
      result.failed.push_back({request, failure.what()});
    }
  }
  const std::vector<jit::CompileOutcome> outcomes = compiler.compile_all(requests);
  std::error_code error;
  fs::create_directories(directory, error);
  if (error) QTUNE_LIBRARY_ERROR("system", "cannot create " + directory.string() + ": " + error.message());
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    const CubinRequest& request = *compiled_requests[i];
    if (!outcomes[i].ok()) {
      result.failed.push_back({request, outcomes[i].error_message});
      continue;
    }
    const jit::CompiledKernel& kernel = *outcomes[i].kernel;
    jit::Sha256 hash;
    hash.update(kernel.cubin.data(), kernel.cubin.size());
    CubinEntry entry;
    entry.format = request.format;
    entry.config = request.config;
    entry.arch = request.arch;
    entry.kernel_name = kernel.lowered_name.empty() ? kernel.kernel_name : kernel.lowered_name;
    entry.sha256 = hash.finish_hex();
    entry.file = request.arch + "/" + entry.sha256 + ".cubin";
    entry.origin = request.origin;
    fs::create_directories(directory / request.arch, error);
    if (error) QTUNE_LIBRARY_ERROR("system", "cannot create " + (directory / request.arch).string() + ": " + error.message());
    reports::write_file_atomically(directory / entry.file, std::string(kernel.cubin.begin(), kernel.cubin.end()));
    result.manifest.kernels.push_back(std::move(entry));
  }
  std::sort(result.manifest.kernels.begin(), result.manifest.kernels.end(),
            [](const CubinEntry& a, const CubinEntry& b) { return entry_key(a) < entry_key(b); });
  reports::write_file_atomically(directory / kManifestName, result.manifest.to_json().dump(2) + "\n");
  remove_stale_cubins(directory, result);
  return result;
}

}  // namespace qtune::production
