#include "tuner/jit/compiler.hpp"

#include <dlfcn.h>
#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>

#include "kernels/embedded_sources.hpp"
#include "kernels/error.hpp"
#include "tuner/jit/kernel_cache.hpp"
#include "tuner/jit/ptxas_report.hpp"
#include "tuner/jit/sha256.hpp"
#include "tuner/jit/thread_pool.hpp"

namespace qtune::jit {
namespace {

// The toolkit headers our kernels may include; their content goes into every cache key.
constexpr const char* kToolkitHeaders[] = {"cuda_fp16.h", "cuda_fp16.hpp", "cuda_bf16.h", "cuda_bf16.hpp",
                                           "cuda_fp8.h",  "cuda_fp8.hpp",  "cuda_fp6.h",  "cuda_fp6.hpp",
                                           "cuda_fp4.h",  "cuda_fp4.hpp"};

void check_nvrtc(nvrtcResult result, const std::string& call) {
  if (result != NVRTC_SUCCESS) QTUNE_LIBRARY_ERROR("NVRTC", call + " failed: " + nvrtcGetErrorString(result));
}

// Destroys the NVRTC program on every path out of compile_with_nvrtc.
class Program {
 public:
  Program(const std::string& source, const char* name, const std::vector<const char*>& header_texts,
          const std::vector<const char*>& header_names) {
    check_nvrtc(nvrtcCreateProgram(&program_, source.c_str(), name, static_cast<int>(header_texts.size()),
                                   header_texts.data(), header_names.data()),
                "nvrtcCreateProgram");
  }
  ~Program() { nvrtcDestroyProgram(&program_); }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram get() const { return program_; }

 private:
  nvrtcProgram program_ = nullptr;
};

std::string program_log(nvrtcProgram program) {
  std::size_t size = 0;
  check_nvrtc(nvrtcGetProgramLogSize(program, &size), "nvrtcGetProgramLogSize");
  std::string log(size, '\0');
  if (size > 0) check_nvrtc(nvrtcGetProgramLog(program, log.data()), "nvrtcGetProgramLog");
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

}  // namespace

bool is_ptx_target(std::string_view arch) { return arch.starts_with("compute_"); }

namespace {

bool starts_with_any(const std::string& option, std::initializer_list<std::string_view> prefixes) {
  return std::any_of(prefixes.begin(), prefixes.end(), [&](std::string_view prefix) { return option.starts_with(prefix); });
}

void validate(const CompileRequest& request, const std::set<std::string, std::less<>>& base_header_names) {
  if (request.kernel_name.empty()) QTUNE_INPUT_ERROR("kernel_name: empty");
  if (request.source.empty()) QTUNE_INPUT_ERROR("source: empty (kernel " + request.kernel_name + ")");
  static const std::regex arch_pattern(R"((?:sm_(\d+)[af]?|compute_(\d+)))");
  std::smatch match;
  if (!std::regex_match(request.arch, match, arch_pattern)) {
    QTUNE_INPUT_ERROR("arch: '" + request.arch + "' is not of the form sm_<number>[a|f], e.g. sm_90a, or compute_<number>");
  }
  const std::vector<std::string> supported = Compiler::supported_archs();
  const std::string number = match[1].matched ? match[1].str() : match[2].str();
  if (std::find(supported.begin(), supported.end(), "sm_" + number) == supported.end()) {
    std::string list;
    for (const std::string& arch : supported) list += (list.empty() ? "" : ", ") + arch;
    QTUNE_INPUT_ERROR("arch: NVRTC cannot compile for '" + request.arch + "' (it supports " + list + ")");
  }
  for (const std::string& option : request.options) {
    if (starts_with_any(option, {"-arch", "--gpu-architecture", "-std", "--std"})) {
      QTUNE_INPUT_ERROR("options: '" + option + "' is set by the compiler from arch and the language standard");
    }
  }
  std::set<std::string_view> extra_names;
  for (const HeaderSource& header : request.extra_headers) {
    if (header.name.empty()) QTUNE_INPUT_ERROR("extra_headers: a header has an empty name");
    if (base_header_names.contains(header.name) || !extra_names.insert(header.name).second) {
      QTUNE_INPUT_ERROR("extra_headers: '" + header.name + "' is given twice (or repeats an embedded header)");
    }
  }
}

// Digest of a set of headers sorted by name, so the key does not depend on their order.
std::string digest_of_headers(std::vector<const HeaderSource*> headers) {
  std::sort(headers.begin(), headers.end(), [](const HeaderSource* a, const HeaderSource* b) { return a->name < b->name; });
  Sha256 hash;
  hash.update_field(std::to_string(headers.size()));
  for (const HeaderSource* header : headers) hash.update_field(header->name).update_field(header->text);
  return hash.finish_hex();
}

std::string digest_of_toolkit_headers(const std::optional<std::filesystem::path>& include_directory) {
  Sha256 hash;
  if (!include_directory) return hash.update_field("no toolkit include directory").finish_hex();
  hash.update_field(include_directory->string());
  for (const char* name : kToolkitHeaders) {
    std::ifstream file(*include_directory / name, std::ios::binary);
    if (!file) {
      hash.update_field(std::string(name) + " absent");
      continue;
    }
    std::ostringstream content;
    content << file.rdbuf();
    hash.update_field(name).update_field(content.str());
  }
  return hash.finish_hex();
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

struct Compiler::State {
  CompilerSettings settings;
  std::vector<HeaderSource> base_headers;  // the embedded kernels/device/ headers, or settings.headers
  std::set<std::string, std::less<>> base_header_names;
  std::string base_headers_digest;
  std::optional<std::filesystem::path> toolkit_include;
  std::string toolkit_headers_digest;
  std::optional<KernelCache> cache;
};

Compiler::Compiler(CompilerSettings settings) : state_(std::make_unique<State>()) {
  State& state = *state_;
  if (settings.headers) {
    state.base_headers = *settings.headers;
  } else {
    for (const EmbeddedSource& source : embedded_device_sources()) {
      state.base_headers.push_back({std::string(source.name), std::string(source.text)});
    }
  }
  std::vector<const HeaderSource*> pointers;
  for (const HeaderSource& header : state.base_headers) {
    if (!state.base_header_names.insert(header.name).second) {
      QTUNE_INPUT_ERROR("headers: '" + header.name + "' is given twice");
    }
    pointers.push_back(&header);
  }
  state.base_headers_digest = digest_of_headers(pointers);
  if (settings.toolkit_include_directory) {
    if (!settings.toolkit_include_directory->empty()) state.toolkit_include = settings.toolkit_include_directory;
  } else {
    state.toolkit_include = find_toolkit_include_directory();
  }
  state.toolkit_headers_digest = digest_of_toolkit_headers(state.toolkit_include);
  if (settings.use_cache) {
    state.cache.emplace(settings.cache_directory ? *settings.cache_directory : KernelCache::default_directory());
  }
  state.settings = std::move(settings);
}

Compiler::~Compiler() = default;
Compiler::Compiler(Compiler&&) noexcept = default;
Compiler& Compiler::operator=(Compiler&&) noexcept = default;

const KernelCache* Compiler::cache() const { return state_->cache ? &*state_->cache : nullptr; }
const std::optional<std::filesystem::path>& Compiler::toolkit_include_directory() const { return state_->toolkit_include; }
const CompilerSettings& Compiler::settings() const { return state_->settings; }

std::pair<int, int> Compiler::nvrtc_version() {
  int major = 0, minor = 0;
  check_nvrtc(nvrtcVersion(&major, &minor), "nvrtcVersion");
  return {major, minor};
}

std::vector<std::string> Compiler::supported_archs() {
  int count = 0;
  check_nvrtc(nvrtcGetNumSupportedArchs(&count), "nvrtcGetNumSupportedArchs");
  std::vector<int> numbers(static_cast<std::size_t>(count));
  if (count > 0) check_nvrtc(nvrtcGetSupportedArchs(numbers.data()), "nvrtcGetSupportedArchs");
  std::vector<std::string> archs;
  for (int number : numbers) archs.push_back("sm_" + std::to_string(number));
  return archs;
}

std::vector<std::string> Compiler::nvrtc_options(const CompileRequest& request) const {
  std::vector<std::string> options = {"-std=" + state_->settings.language_standard, "-arch=" + request.arch};
  if (!is_ptx_target(request.arch)) options.emplace_back("--ptxas-options=-v");  // a PTX target runs no ptxas
  // NVRTC 12.9+ keeps its own cache; a hit there skips ptxas and with it the resource report we parse (and makes
  // "cold" compiles warm). qtune has its own cache, so NVRTC's is turned off.
  const auto [major, minor] = nvrtc_version();
  if (major > 12 || (major == 12 && minor >= 9)) options.emplace_back("--no-cache");
  if (state_->toolkit_include) options.push_back("-I" + state_->toolkit_include->string());
  options.insert(options.end(), request.options.begin(), request.options.end());
  return options;
}

std::string Compiler::cache_key(const CompileRequest& request) const {
  const auto [major, minor] = nvrtc_version();
  Sha256 hash;
  hash.update_field("qtune kernel cache format " + std::to_string(kCacheFormatVersion));
  hash.update_field("nvrtc " + std::to_string(major) + "." + std::to_string(minor));
  hash.update_field(request.arch);
  const std::vector<std::string> options = nvrtc_options(request);
  hash.update_field(std::to_string(options.size()));
  for (const std::string& option : options) hash.update_field(option);
  hash.update_field(request.kernel_name);
  hash.update_field(request.source);
  hash.update_field(state_->base_headers_digest);
  std::vector<const HeaderSource*> extras;
  for (const HeaderSource& header : request.extra_headers) extras.push_back(&header);
  hash.update_field(digest_of_headers(extras));
  hash.update_field(state_->toolkit_headers_digest);
  return hash.finish_hex();
}

CompiledKernel Compiler::compile(const CompileRequest& request) const {
  const State& state = *state_;
  validate(request, state.base_header_names);
  CompiledKernel kernel;
  kernel.cache_key = cache_key(request);
  if (state.cache) {
    if (std::optional<CompiledKernel> cached = state.cache->load(kernel.cache_key)) return std::move(*cached);
  }
  kernel.kernel_name = request.kernel_name;
  kernel.arch = request.arch;

  const auto start = std::chrono::steady_clock::now();
  std::vector<const char*> header_texts, header_names;
  for (const auto* headers : {&state.base_headers, &request.extra_headers}) {
    for (const HeaderSource& header : *headers) {
      header_texts.push_back(header.text.c_str());
      header_names.push_back(header.name.c_str());
    }
  }
  Program program(request.source, "instantiation.cu", header_texts, header_names);
  check_nvrtc(nvrtcAddNameExpression(program.get(), request.kernel_name.c_str()), "nvrtcAddNameExpression");
  const std::vector<std::string> options = nvrtc_options(request);
  std::vector<const char*> option_pointers;
  for (const std::string& option : options) option_pointers.push_back(option.c_str());
  const nvrtcResult result =
      nvrtcCompileProgram(program.get(), static_cast<int>(option_pointers.size()), option_pointers.data());
  kernel.log = program_log(program.get());
  if (result != NVRTC_SUCCESS) {
    std::string message = "compiling kernel '" + request.kernel_name + "' for " + request.arch + " failed (" +
                          nvrtcGetErrorString(result) + "):\n" + kernel.log;
    if (!state.toolkit_include && kernel.log.find("could not open source file \"cuda_") != std::string::npos) {
      message += "\n(no CUDA toolkit include directory was found for cuda_fp16.h and friends: set CUDA_HOME)";
    }
    QTUNE_LIBRARY_ERROR("NVRTC", message);
  }
  const char* lowered = nullptr;
  check_nvrtc(nvrtcGetLoweredName(program.get(), request.kernel_name.c_str(), &lowered), "nvrtcGetLoweredName");
  kernel.lowered_name = lowered;
  if (is_ptx_target(request.arch)) {
    // PTX for the driver to compile on the GPU it is loaded on; no ptxas ran, so there is no resource report.
    std::size_t ptx_size = 0;
    check_nvrtc(nvrtcGetPTXSize(program.get(), &ptx_size), "nvrtcGetPTXSize");
    kernel.cubin.resize(ptx_size);  // with its terminating NUL, as cuModuleLoadData wants PTX
    check_nvrtc(nvrtcGetPTX(program.get(), kernel.cubin.data()), "nvrtcGetPTX");
    kernel.compile_seconds = seconds_since(start);
    kernel.original_compile_seconds = kernel.compile_seconds;
    if (state.cache) {
      try {
        state.cache->store(kernel);
      } catch (const LibraryError&) {
      }
    }
    return kernel;
  }
  std::size_t cubin_size = 0;
  check_nvrtc(nvrtcGetCUBINSize(program.get(), &cubin_size), "nvrtcGetCUBINSize");
  if (cubin_size == 0) {
    QTUNE_LIBRARY_ERROR("NVRTC", "no cubin for kernel '" + request.kernel_name + "' (arch " + request.arch +
                                     " must name a real architecture, sm_XX)");
  }
  kernel.cubin.resize(cubin_size);
  check_nvrtc(nvrtcGetCUBIN(program.get(), kernel.cubin.data()), "nvrtcGetCUBIN");
  kernel.compile_seconds = seconds_since(start);
  kernel.original_compile_seconds = kernel.compile_seconds;

  std::optional<ResourceUsage> resources = parse_ptxas_report(kernel.log, kernel.lowered_name);
  if (!resources) {
    const bool no_report = kernel.log.find("ptxas") == std::string::npos;
    QTUNE_LIBRARY_ERROR("NVRTC", "the ptxas report has no entry for '" + kernel.lowered_name + "'" +
                                     (no_report ? " (the log has no ptxas report at all: ptxas did not run)" : "") +
                                     "; log:\n" + kernel.log);
  }
  kernel.resources = *resources;
  if (state.cache) {
    try {
      state.cache->store(kernel);
    } catch (const LibraryError&) {
      // An unwritable cache costs the next compile, not this one (callers check KernelCache::unusable_reason once).
    }
  }
  return kernel;
}

std::vector<CompileOutcome> Compiler::compile_all(const std::vector<CompileRequest>& requests,
                                                  const CompileProgress& progress) const {
  std::vector<CompileOutcome> outcomes(requests.size());
  // Requests with one key are compiled once; `first_with_key[i]` is the request whose result i shares.
  std::vector<std::size_t> first_with_key(requests.size());
  std::vector<std::size_t> unique;
  std::vector<std::size_t> sharing_count(requests.size(), 0);  // how many requests each unique one answers
  std::map<std::string, std::size_t> index_of_key;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    std::string key;
    try {
      validate(requests[i], state_->base_header_names);
      key = cache_key(requests[i]);
    } catch (...) {
      key = "invalid " + std::to_string(i);  // compile() reports the error for this request alone
    }
    const auto [it, inserted] = index_of_key.emplace(key, i);
    first_with_key[i] = it->second;
    ++sharing_count[it->second];
    if (inserted) unique.push_back(i);
  }

  std::mutex progress_mutex;
  std::size_t done = 0;
  {
    ThreadPool pool(std::min(compiler_thread_count(state_->settings.threads), std::max<std::size_t>(unique.size(), 1)));
    std::vector<std::future<void>> finished;
    for (std::size_t index : unique) {
      finished.push_back(pool.submit([&, index] {
        CompileOutcome& outcome = outcomes[index];
        try {
          outcome.kernel = compile(requests[index]);
        } catch (const std::exception& error) {
          outcome.error = std::current_exception();
          outcome.error_message = error.what();
        } catch (...) {
          outcome.error = std::current_exception();
          outcome.error_message = "unknown exception";
        }
        std::lock_guard lock(progress_mutex);
        done += sharing_count[index];  // duplicates finish together with the request they share
        if (progress) progress(done, requests.size());
      }));
    }
    for (std::future<void>& future : finished) future.get();
  }
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (first_with_key[i] != i) outcomes[i] = outcomes[first_with_key[i]];
  }
  return outcomes;
}

std::optional<std::filesystem::path> find_toolkit_include_directory() {
  std::vector<std::filesystem::path> candidates;
  for (const char* variable : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* value = std::getenv(variable); value != nullptr && *value != '\0') {
      candidates.push_back(std::filesystem::path(value) / "include");
    }
  }
  Dl_info library{};
  if (dladdr(reinterpret_cast<const void*>(&nvrtcVersion), &library) != 0 && library.dli_fname != nullptr) {
    std::error_code error;
    const std::filesystem::path real = std::filesystem::canonical(library.dli_fname, error);
    if (!error) candidates.push_back(real.parent_path().parent_path() / "include");
  }
  candidates.emplace_back("/usr/local/cuda/include");
  for (const std::filesystem::path& candidate : candidates) {
    std::error_code error;
    if (std::filesystem::is_regular_file(candidate / "cuda_fp16.h", error)) return candidate;
  }
  return std::nullopt;
}

}  // namespace qtune::jit
