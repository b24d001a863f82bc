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
#include "kernels/families/mma_family.hpp"
#include "kernels/families/mma_layout.hpp"
#include "kernels/families/mma_moe.hpp"
#include "kernels/families/tma_family.hpp"
#include "kernels/families/wgmma_family.hpp"
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

nlohmann::json MoeCubinEntry::to_json() const {
  nlohmann::json json = {{"kernel", to_string(kernel.kind)}, {"arch", kernel.arch}, {"kernel_name", kernel_name},
                         {"file", file}, {"sha256", sha256}, {"origin", origin}};
  switch (kernel.kind) {
    case MoeKernelKind::Gemm:
      json["format"] = kernel.format;
      json["projection"] = kernel.projection;
      json["family"] = kernel.config.family;
      json["config"] = kernel.config.to_string();
      break;
    case MoeKernelKind::Align:
      json["bm"] = kernel.bm;
      json["threads"] = kernel.threads;
      break;
    case MoeKernelKind::Gather: json["projection"] = kernel.projection; break;
    case MoeKernelKind::Reduce: json["output"] = kernel.output; break;
  }
  return json;
}

nlohmann::json CubinManifest::to_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const CubinEntry& entry : kernels) list.push_back(entry.to_json());
  nlohmann::json json = {{"schema", kManifestSchema}, {"weight_layout", kWeightLayout}, {"kernels", list}};
  if (!moe_kernels.empty()) {
    nlohmann::json moe = nlohmann::json::array();
    for (const MoeCubinEntry& entry : moe_kernels) moe.push_back(entry.to_json());
    json["moe_kernels"] = moe;
  }
  return json;
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

// Reads one manifest entry's fields, each InputError "<source>: field '<path>.<key>': ...".
class EntryReader {
 public:
  EntryReader(const nlohmann::json& item, std::string path, std::string_view source)
      : item_(item), path_(std::move(path)), source_(source) {
    if (!item_.is_object()) fail("", "expected an object");
  }
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    QTUNE_INPUT_ERROR(std::string(source_) + ": field '" + path_ + (key.empty() ? "" : "." + key) + "': " + what);
  }
  std::string text(const char* key) const {
    const auto found = item_.find(key);
    if (found == item_.end()) fail(key, "missing");
    if (!found->is_string() || found->get<std::string>().empty()) fail(key, "expected a non-empty string");
    return found->get<std::string>();
  }
  int positive(const char* key) const {
    const auto found = item_.find(key);
    if (found == item_.end()) fail(key, "missing");
    if (!found->is_number_integer() || found->get<std::int64_t>() < 1 || found->get<std::int64_t>() > 65536) {
      fail(key, "expected an integer from 1 to 65536");
    }
    return found->get<int>();
  }
  std::string format() const {
    try {
      return FormatSpec::parse(text("format")).to_string();
    } catch (const InputError& error) {
      fail("format", error.what());
    }
  }
  // "family" and "config": every parameter of the family, except one added after configs were stored (absent_means),
  // which may be left out.
  KernelConfig config() const {
    const std::string family_name = text("family");
    const KernelFamily* family = nullptr;
    KernelConfig config;
    try {
      family = &find_family(family_name);
      config = KernelConfig::parse(text("config"), family_name);
    } catch (const InputError& error) {
      fail(family == nullptr ? "family" : "config", error.what());
    }
    for (const auto& [name, value] : config.params) {
      if (!has_parameter(*family, name)) fail("config", "the " + family_name + " family has no parameter '" + name + "'");
    }
    for (const ParameterDomain& domain : family->parameter_space()) {
      if (!config.params.contains(domain.name) && !domain.absent_means) {
        fail("config", "missing the " + family_name + " family's parameter '" + domain.name + "'");
      }
    }
    return config;
  }
  std::string arch() const {
    std::string arch = text("arch");
    try {
      ArchTarget::parse(arch);
    } catch (const InputError& error) {
      fail("arch", error.what());
    }
    return arch;
  }
  std::string file() const {
    std::string file = text("file");
    if (!is_inside(file)) fail("file", "expected a relative path inside the cubin directory");
    return file;
  }
  std::string sha256() const {
    std::string sha256 = text("sha256");
    if (!is_sha256(sha256)) fail("sha256", "expected 64 lowercase hex digits");
    return sha256;
  }
  std::string origin() const {
    const auto origin = item_.find("origin");
    return origin != item_.end() && origin->is_string() ? origin->get<std::string>() : std::string();
  }

 private:
  const nlohmann::json& item_;
  std::string path_;
  std::string_view source_;
};

MoeCubinEntry moe_entry_from_json(const EntryReader& reader) {
  MoeCubinEntry entry;
  MoeKernelSpec& kernel = entry.kernel;
  try {
    kernel.kind = parse_moe_kernel_kind(reader.text("kernel"));
  } catch (const InputError& error) {
    reader.fail("kernel", error.what());
  }
  auto projection = [&] {
    try {
      return std::string(moe_projection_name(parse_moe_projection(reader.text("projection"))));
    } catch (const InputError& error) {
      reader.fail("projection", error.what());
    }
  };
  switch (kernel.kind) {
    case MoeKernelKind::Gemm:
      kernel.format = reader.format();
      kernel.projection = projection();
      kernel.config = reader.config();
      if (kernel.config.family != mma_family().name() && kernel.config.family != wgmma_family().name() &&
          kernel.config.family != tma_family().name()) {
        reader.fail("family", "the " + kernel.config.family + " family has no MoE GEMM (mma, wgmma and tma have)");
      }
      break;
    case MoeKernelKind::Align:
      kernel.bm = reader.positive("bm");
      kernel.threads = reader.positive("threads");
      break;
    case MoeKernelKind::Gather: kernel.projection = projection(); break;
    case MoeKernelKind::Reduce:
      try {
        kernel.output = qtune::to_string(parse_output_type(reader.text("output")));
      } catch (const InputError& error) {
        reader.fail("output", error.what());
      }
      break;
  }
  kernel.arch = reader.arch();
  entry.kernel_name = reader.text("kernel_name");
  entry.file = reader.file();
  entry.sha256 = reader.sha256();
  entry.origin = reader.origin();
  return entry;
}

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
  int layout = 1;
  if (const auto field = json.find("weight_layout"); field != json.end()) {
    if (!field->is_number_integer() || *field < 1) fail("weight_layout", "expected a positive integer");
    if (*field > kWeightLayout) {
      fail("weight_layout", "layout " + field->dump() + " is newer than this qtune's (" + std::to_string(kWeightLayout) +
                                "): re-export with this version (`qtune export --cubins DIR`)");
    }
    layout = field->get<int>();
  }
  // Kernels of raw 8-bit weights exported before their atoms became core matrices read another layout than the
  // runtime packs.
  auto require_layout = [&](const std::string& format, const std::string& path) {
    if (layout >= 2) return;
    bool core_matrices = false;
    try {
      core_matrices = mma::device_format(FormatSpec::parse(format)).core_matrix_atoms();
    } catch (const std::exception&) {
      return;  // not an mma-layout format
    }
    if (core_matrices) {
      fail(path, format + " was exported for weight layout " + std::to_string(layout) + ", before raw 8-bit weights were packed as " +
                     "core matrices (layout 2): re-export with `qtune export --cubins DIR`");
    }
  };
  CubinManifest manifest;
  for (std::size_t i = 0; i < kernels->size(); ++i) {
    const EntryReader reader((*kernels)[i], "kernels[" + std::to_string(i) + "]", source);
    CubinEntry entry;
    entry.format = reader.format();
    require_layout(entry.format, "kernels[" + std::to_string(i) + "].format");
    entry.config = reader.config();
    entry.arch = reader.arch();
    entry.kernel_name = reader.text("kernel_name");
    entry.file = reader.file();
    entry.sha256 = reader.sha256();
    entry.origin = reader.origin();
    manifest.kernels.push_back(std::move(entry));
  }
  if (const auto moe = json.find("moe_kernels"); moe != json.end()) {
    if (!moe->is_array()) fail("moe_kernels", "expected an array");
    for (std::size_t i = 0; i < moe->size(); ++i) {
      manifest.moe_kernels.push_back(moe_entry_from_json(EntryReader((*moe)[i], "moe_kernels[" + std::to_string(i) + "]", source)));
      if (manifest.moe_kernels.back().kernel.kind == MoeKernelKind::Gemm) {
        require_layout(manifest.moe_kernels.back().kernel.format, "moe_kernels[" + std::to_string(i) + "].format");
      }
    }
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

const MoeCubinEntry* CubinManifest::find_moe(const MoeKernelSpec& kernel, int device_sm) const {
  const std::string instance = kernel.instance();
  const MoeCubinEntry* best = nullptr;
  int best_sm = -1;
  for (const MoeCubinEntry& entry : moe_kernels) {
    if (entry.kernel.instance() != instance) continue;
    if (entry.kernel.arch == kernel.arch) return &entry;
    const ArchTarget target = ArchTarget::parse(entry.kernel.arch);
    if (target.runs_on(device_sm) && target.sm > best_sm) {
      best = &entry;
      best_sm = target.sm;
    }
  }
  return best;
}

namespace {

// `field` is the manifest's "<dir>/manifest.json: field 'kernels[2]": the file's and the hash's errors name it.
std::vector<char> read_checked(const fs::path& directory, const std::string& name, const std::string& sha256, const std::string& field) {
  const fs::path file = directory / name;
  std::ifstream stream(file, std::ios::binary);
  if (!stream) QTUNE_INPUT_ERROR(field + ".file': cannot read " + file.string());
  std::vector<char> bytes{std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
  jit::Sha256 hash;
  hash.update(bytes.data(), bytes.size());
  const std::string actual = hash.finish_hex();
  if (actual != sha256) {
    QTUNE_INPUT_ERROR(field + ".sha256': " + file.string() + " has sha256 " + actual + ", the manifest says " + sha256);
  }
  return bytes;
}

std::string manifest_field(const fs::path& directory, const std::string& list, std::size_t index) {
  return (directory / kManifestName).string() + ": field '" + list + "[" + std::to_string(index) + "]";
}

}  // namespace

std::vector<char> read_cubin(const fs::path& directory, const CubinEntry& entry, std::size_t index) {
  return read_checked(directory, entry.file, entry.sha256, manifest_field(directory, "kernels", index));
}

std::vector<char> read_cubin(const fs::path& directory, const MoeCubinEntry& entry, std::size_t index) {
  return read_checked(directory, entry.file, entry.sha256, manifest_field(directory, "moe_kernels", index));
}

// ---------------------------------------------------------------------------------------------------- export

namespace {

// The kernels of the table's token-indexed MoE configs that a Runtime for `arch` launches (the runtime runs no other
// layout), each config checked as select_moe checks it: its family launched here, mma_moe::check at the range's
// largest tuned token count.
void plan_moe_cubins(const reports::SelectionTable& table, const std::string& arch, const ArchLimits& limits,
                     std::map<MoeKernelSpec, MoeCubinRequest>& requests,
                     std::map<std::pair<std::string, std::string>, MoeCubinSkip>& skipped) {
  for (const reports::MoeRules& rules : table.moe) {
    if (rules.layout != moe_layout_name(MoeLayout::TokenIndexed)) continue;
    for (const reports::MRange& range : rules.ranges) {
      const std::string what = rules.format + " " + rules.projection + " E=" + std::to_string(rules.experts) + " top_k=" +
                               std::to_string(rules.top_k) + " n=" + std::to_string(rules.n) + " k=" + std::to_string(rules.k) +
                               " " + range.config.family + ":" + range.config.to_string();
      const auto skip_key = std::make_pair(what, arch);
      std::string why_not;
      try {
        const std::int64_t tokens = range.buckets.empty() ? range.m_min : std::max(range.m_min, range.buckets.back().m);
        const MoeProblem problem = make_moe_problem(FormatSpec::parse(rules.format), rules.experts, rules.top_k, rules.n, rules.k,
                                                    tokens, rules.projection);
        if (runtime_moe_family(range.config, problem.format, limits.sm, &why_not) != nullptr) {
          const RuleVerdict verdict = mma_moe::check(range.config, problem, limits);
          if (verdict.valid) {
            for (MoeKernelSpec& kernel : moe_call_kernels(range.config, problem, limits, arch)) {
              requests.try_emplace(kernel, MoeCubinRequest{kernel, "table"});
            }
            continue;
          }
          why_not = verdict.rule + ": " + verdict.detail + " (" + problem.to_string() + ")";
        } else {
          why_not = "family: " + why_not;
        }
      } catch (const Error& error) {
        why_not = error.what();
      }
      skipped.try_emplace(skip_key, MoeCubinSkip{what, arch, "table", why_not});
    }
  }
}

}  // namespace

CubinPlan plan_cubins(const reports::SelectionTable& table, const std::vector<std::string>& archs, bool with_heuristic) {
  if (archs.empty()) QTUNE_INPUT_ERROR("--arch: give at least one architecture (e.g. sm_90a)");
  std::map<std::tuple<std::string, KernelConfig, std::string>, CubinRequest> requests;
  std::map<std::tuple<std::string, KernelConfig, std::string>, CubinSkip> skipped;
  std::map<MoeKernelSpec, MoeCubinRequest> moe_requests;
  std::map<std::pair<std::string, std::string>, MoeCubinSkip> moe_skipped;
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
        const std::string compile_arch = kernel_arch(config.family, arch);
        const auto key = std::make_tuple(format_text, config, compile_arch);
        if (requests.count(key) > 0) return;
        CubinRequest request{format_text, config, compile_arch, origin};
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
    plan_moe_cubins(table, arch, limits, moe_requests, moe_skipped);
  }
  CubinPlan plan;
  for (auto& [key, request] : requests) plan.requests.push_back(std::move(request));
  for (auto& [key, skip] : skipped) plan.skipped.push_back(std::move(skip));
  for (auto& [key, request] : moe_requests) plan.moe_requests.push_back(std::move(request));
  for (auto& [key, skip] : moe_skipped) plan.moe_skipped.push_back(std::move(skip));
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
  for (const MoeCubinEntry& entry : result.manifest.moe_kernels) listed.insert((directory / entry.file).lexically_normal());
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
  // Dense requests first, then MoE ones, compiled together: index i < dense_count is compiled_dense[i].
  std::vector<jit::CompileRequest> requests;
  std::vector<const CubinRequest*> compiled_dense;
  std::vector<const MoeCubinRequest*> compiled_moe;
  for (const CubinRequest& request : plan.requests) {
    try {
      requests.push_back(gemm_compile_request(request.config, FormatSpec::parse(request.format), request.arch));
      compiled_dense.push_back(&request);
    } catch (const Error& failure) {
      result.failed.push_back({request, failure.what()});
    }
  }
  for (const MoeCubinRequest& request : plan.moe_requests) {
    try {
      requests.push_back(request.kernel.compile_request());
      compiled_moe.push_back(&request);
    } catch (const Error& failure) {
      result.moe_failed.push_back({request.kernel.instance(), request.kernel.arch, request.origin, failure.what()});
    }
  }
  const std::vector<jit::CompileOutcome> outcomes = compiler.compile_all(requests);
  std::error_code error;
  fs::create_directories(directory, error);
  if (error) QTUNE_LIBRARY_ERROR("system", "cannot create " + directory.string() + ": " + error.message());
  // Writes a cubin as <arch>/<sha256>.cubin; the file's name relative to the directory, and its hash.
  auto write = [&](const jit::CompiledKernel& kernel, const std::string& arch) {
    jit::Sha256 hash;
    hash.update(kernel.cubin.data(), kernel.cubin.size());
    const std::string sha256 = hash.finish_hex();
    const std::string file = arch + "/" + sha256 + ".cubin";
    fs::create_directories(directory / arch, error);
    if (error) QTUNE_LIBRARY_ERROR("system", "cannot create " + (directory / arch).string() + ": " + error.message());
    reports::write_file_atomically(directory / file, std::string(kernel.cubin.begin(), kernel.cubin.end()));
    return std::make_pair(file, sha256);
  };
  auto symbol = [](const jit::CompiledKernel& kernel) { return kernel.lowered_name.empty() ? kernel.kernel_name : kernel.lowered_name; };
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    if (i < compiled_dense.size()) {
      const CubinRequest& request = *compiled_dense[i];
      if (!outcomes[i].ok()) {
        result.failed.push_back({request, outcomes[i].error_message});
        continue;
      }
      CubinEntry entry;
      entry.format = request.format;
      entry.config = request.config;
      entry.arch = request.arch;
      entry.kernel_name = symbol(*outcomes[i].kernel);
      std::tie(entry.file, entry.sha256) = write(*outcomes[i].kernel, request.arch);
      entry.origin = request.origin;
      result.manifest.kernels.push_back(std::move(entry));
    } else {
      const MoeCubinRequest& request = *compiled_moe[i - compiled_dense.size()];
      if (!outcomes[i].ok()) {
        result.moe_failed.push_back({request.kernel.instance(), request.kernel.arch, request.origin, outcomes[i].error_message});
        continue;
      }
      MoeCubinEntry entry;
      entry.kernel = request.kernel;
      entry.kernel_name = symbol(*outcomes[i].kernel);
      std::tie(entry.file, entry.sha256) = write(*outcomes[i].kernel, request.kernel.arch);
      entry.origin = request.origin;
      result.manifest.moe_kernels.push_back(std::move(entry));
    }
  }
  std::sort(result.manifest.kernels.begin(), result.manifest.kernels.end(),
            [](const CubinEntry& a, const CubinEntry& b) { return entry_key(a) < entry_key(b); });
  std::sort(result.manifest.moe_kernels.begin(), result.manifest.moe_kernels.end(),
            [](const MoeCubinEntry& a, const MoeCubinEntry& b) { return a.kernel < b.kernel; });
  reports::write_file_atomically(directory / kManifestName, result.manifest.to_json().dump(2) + "\n");
  remove_stale_cubins(directory, result);
  return result;
}

}  // namespace qtune::production
