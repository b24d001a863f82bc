#include "tuner/peers/peer_host.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <exception>
#include <limits>
#include <mutex>
#include <system_error>
#include <thread>

#include "kernels/error.hpp"
#include "kernels/format.hpp"
#include "kernels/text_escape.hpp"

namespace qtune::peers {

namespace fs = std::filesystem;

namespace {

constexpr const char* kWorkerScript = "qtune_peer_worker.py";
constexpr const char* kAbiLibrary = "libqtune_peer_abi.so";

std::string environment_text(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string part;
  for (char c : text) {
    if (c == separator) {
      if (!part.empty()) parts.push_back(part);
      part.clear();
    } else {
      part += c;
    }
  }
  if (!part.empty()) parts.push_back(part);
  return parts;
}

bool is_executable_file(const fs::path& path) {
  std::error_code error;
  return fs::is_regular_file(path, error) && access(path.c_str(), X_OK) == 0;
}

fs::path find_python() {
  const std::string wanted = environment_text("QTUNE_PYTHON").empty() ? "python3" : environment_text("QTUNE_PYTHON");
  if (wanted.find('/') != std::string::npos) {
    if (!is_executable_file(wanted)) QTUNE_INPUT_ERROR("QTUNE_PYTHON: " + quote_input(wanted) + " is no executable");
    return fs::absolute(wanted);
  }
  for (const std::string& directory : split(environment_text("PATH"), ':')) {
    const fs::path candidate = fs::path(directory) / wanted;
    if (is_executable_file(candidate)) return candidate;
  }
  QTUNE_INPUT_ERROR("QTUNE_PYTHON: " + quote_input(wanted) +
                    " is not on PATH; set QTUNE_PYTHON to the Python that has PyTorch and the peers");
}

std::optional<fs::path> executable_dir() {
  std::error_code error;
  const fs::path exe = fs::read_symlink("/proc/self/exe", error);
  if (error || exe.empty()) return std::nullopt;
  return exe.parent_path();
}

// The first candidate for which `found` holds, else an InputError naming `variable` and what was tried.
fs::path first_found(const std::vector<fs::path>& candidates, bool (*found)(const fs::path&), const char* variable,
                     const std::string& what) {
  std::string tried;
  for (const fs::path& candidate : candidates) {
    if (found(candidate)) return candidate.lexically_normal();
    tried += (tried.empty() ? "" : ", ") + candidate.string();
  }
  QTUNE_INPUT_ERROR(std::string(variable) + ": " + what + " not found (tried " + tried + ")");
}

bool holds_worker_script(const fs::path& directory) {
  std::error_code error;
  return fs::is_regular_file(directory / kWorkerScript, error);
}

bool is_file(const fs::path& path) {
  std::error_code error;
  return fs::is_regular_file(path, error);
}

PeerInfo peer_info_from_json(const nlohmann::json& json) {
  PeerInfo info;
  info.peer = measure::job_field<std::string>(json, "peer", "", "peers.");
  info.available = measure::job_field<bool>(json, "available", false, "peers.");
  info.version = measure::job_field<std::string>(json, "version", "", "peers.");
  info.problem = measure::job_field<std::string>(json, "problem", "", "peers.");
  info.install = measure::job_field<std::string>(json, "install", "", "peers.");
  info.providers = measure::job_field<std::vector<std::string>>(json, "providers", {}, "peers.");
  info.moe_providers = measure::job_field<std::vector<std::string>>(json, "moe_providers", {}, "peers.");
  return info;
}

nlohmann::json problem_json(const ProviderId& provider, const PeerProblem& problem) {
  if (problem.moe) {
    return {{"operands", provider.operands}, {"moe", problem.moe->to_json()}, {"seed", problem.seed}, {"device", problem.device}};
  }
  return {{"operands", provider.operands}, {"m", problem.m},       {"n", problem.n},
          {"k", problem.k},                {"seed", problem.seed}, {"device", problem.device}};
}

PeerVerification verification_from_json(const nlohmann::json& json) {
  PeerVerification check;
  check.passed = measure::job_field<bool>(json, "passed", false, "verification.");
  // An output holding NaN or inf has an infinite error, which JSON writes as null.
  const auto error = json.find("relative_error");
  check.relative_error = error != json.end() && error->is_null()
                             ? std::numeric_limits<double>::infinity()
                             : measure::job_field<double>(json, "relative_error", 0.0, "verification.");
  check.tolerance = measure::job_field<double>(json, "tolerance", 0.0, "verification.");
  check.nan_count = measure::job_field<std::int64_t>(json, "nan_count", 0, "verification.");
  check.bad_count = measure::job_field<std::int64_t>(json, "bad_count", 0, "verification.");
  check.summary = measure::job_field<std::string>(json, "summary", "", "verification.");
  return check;
}

}  // namespace

PeerEnvironment peer_environment(const std::vector<std::string>& peer_paths) {
  PeerEnvironment environment;
  environment.python = find_python();
  for (const std::string& path : peer_paths) environment.peer_paths.emplace_back(path);
  for (const std::string& path : split(environment_text("QTUNE_PEER_PATH"), ':')) environment.peer_paths.emplace_back(path);

  std::vector<fs::path> packages;
  std::vector<fs::path> libraries;
  if (const std::string dir = environment_text("QTUNE_PEERS_DIR"); !dir.empty()) {
    // An explicit choice is never silently replaced by another folder.
    packages = {fs::path(dir) / "python", fs::path(dir)};
    libraries = {fs::path(dir) / kAbiLibrary};
  } else {
    if (const auto exe = executable_dir()) {
      libraries.push_back(*exe / kAbiLibrary);
      packages.push_back(*exe / ".." / "tuner" / "peers" / "python");
      packages.push_back(*exe / ".." / "share" / "qtune" / "peers" / "python");
    }
#ifdef QTUNE_PEERS_SOURCE_DIR
    packages.emplace_back(QTUNE_PEERS_SOURCE_DIR);
#endif
#ifdef QTUNE_PEER_ABI_BUILD_PATH
    libraries.emplace_back(QTUNE_PEER_ABI_BUILD_PATH);
#endif
  }
  environment.package_dir = first_found(packages, holds_worker_script, "QTUNE_PEERS_DIR",
                                        std::string("qtune's Python package (") + kWorkerScript + ")");
  environment.abi_library = first_found(libraries, is_file, "QTUNE_PEERS_DIR", kAbiLibrary);
  return environment;
}

ProviderId parse_provider_id(std::string_view text, std::string_view field) {
  const std::string name(field);
  const std::size_t dash = text.find('-');
  if (dash == std::string_view::npos || dash == 0 || dash + 1 == text.size()) {
    QTUNE_INPUT_ERROR(name + ": " + quote_input(text) +
                      " is no provider; write <peer>-<operands>, e.g. humming-w4a16-int4-ch or torch-f16");
  }
  ProviderId provider{std::string(text.substr(0, dash)), std::string(text.substr(dash + 1))};
  for (char& c : provider.peer) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (provider.operands != "f16" && provider.operands != "bf16") {
    try {
      provider.operands = FormatSpec::parse(provider.operands).to_string();
    } catch (const InputError& error) {
      QTUNE_INPUT_ERROR(name + ": " + quote_input(text) + ": the operands are f16, bf16 or a format (" + error.what() +
                        ")");
    }
  }
  return provider;
}

std::string to_string(PeerOutcome outcome) {
  // In PeerOutcome's order.
  static constexpr std::array<const char*, 7> kNames = {"measured", "verified", "wrong-answer", "error",
                                                        "fault",    "crashed",  "timeout"};
  return kNames.at(static_cast<std::size_t>(outcome));
}

measure::WorkerOptions peer_worker_options(const PeerEnvironment& environment) {
  measure::WorkerOptions options;
  options.executable = environment.python.string();
  options.arguments = {(environment.package_dir / kWorkerScript).string(), "--library", environment.abi_library.string()};
  for (const fs::path& path : environment.peer_paths) {
    options.arguments.push_back("--peer-path");
    options.arguments.push_back(path.string());
  }
  if (environment.test_peers) options.arguments.push_back("--test-peers");
  return options;
}

PeerHost::PeerHost(PeerEnvironment environment)
    : environment_(std::move(environment)), worker_(peer_worker_options(environment_)) {}

const std::vector<PeerInfo>& PeerHost::describe(double timeout_s) {
  if (peers_) return *peers_;
  const measure::JobOutcome outcome = worker_.run("describe", nlohmann::json::object(), timeout_s);
  if (!outcome.ok()) {
    QTUNE_INPUT_ERROR("QTUNE_PYTHON: the peer worker (" + environment_.python.string() + " " +
                      (environment_.package_dir / kWorkerScript).string() + ") failed: " + outcome.error);
  }
  std::vector<PeerInfo> peers;
  for (const nlohmann::json& peer : measure::job_field<nlohmann::json>(outcome.result, "peers", nlohmann::json::array())) {
    peers.push_back(peer_info_from_json(peer));
  }
  peers_ = std::move(peers);
  return *peers_;
}

std::vector<std::string> offered_variants(const ProviderId& provider, const std::vector<std::string>& offered) {
  std::vector<std::string> formats;
  for (const std::string& text : offered) {
    if (text.rfind(provider.text() + ":", 0) == 0) formats.push_back(text.substr(provider.peer.size() + 1));
  }
  return formats;
}

void PeerHost::require(const ProviderId& provider, double timeout_s) {
  const std::vector<PeerInfo>& peers = describe(timeout_s);
  std::string known;
  for (const PeerInfo& peer : peers) {
    known += (known.empty() ? "" : ", ") + peer.peer;
    if (peer.peer != provider.peer) continue;
    if (!peer.available) {
      QTUNE_INPUT_ERROR("provider '" + provider.text() + "': " + peer.problem + "; " + peer.install);
    }
    for (const std::string& offered : peer.providers) {
      if (offered == provider.text()) return;
    }
    std::string offers;
    for (const std::string& offered : peer.providers) offers += (offers.empty() ? "" : ", ") + offered;
    std::string variants;
    for (const std::string& format : offered_variants(provider, peer.providers)) {
      variants += (variants.empty() ? "" : " or ") + format;
    }
    QTUNE_INPUT_ERROR("provider '" + provider.text() + "': " + peer.peer + " " + peer.version + " offers " + offers +
                      (variants.empty() ? "" : "; for these operands use the format " + variants));
  }
  QTUNE_INPUT_ERROR("provider '" + provider.text() + "': no peer '" + provider.peer + "' (known: " + known + ")");
}

void PeerHost::require_moe(const ProviderId& provider, double timeout_s) {
  require(provider, timeout_s);
  std::string with_moe;
  for (const PeerInfo& peer : describe(timeout_s)) {
    if (peer.available && !peer.moe_providers.empty()) with_moe += (with_moe.empty() ? "" : ", ") + peer.peer;
    if (peer.peer != provider.peer) continue;
    if (std::find(peer.moe_providers.begin(), peer.moe_providers.end(), provider.text()) != peer.moe_providers.end()) return;
    if (!peer.moe_providers.empty()) {
      std::string offers;
      for (const std::string& offered : peer.moe_providers) offers += (offers.empty() ? "" : ", ") + offered;
      QTUNE_INPUT_ERROR("provider '" + provider.text() + "': " + peer.peer + " " + peer.version + " runs MoE GEMMs as " + offers);
    }
  }
  QTUNE_INPUT_ERROR("provider '" + provider.text() + "': " + provider.peer + " runs no MoE GEMMs (peers that do: " +
                    (with_moe.empty() ? std::string("none installed") : with_moe) + ")");
}

std::vector<nlohmann::json> PeerHost::configurations(const ProviderId& provider, const PeerProblem& problem,
                                                     double timeout_s) {
  const nlohmann::json params{{"provider", provider.text()}, {"problem", problem_json(provider, problem)}};
  const measure::JobOutcome outcome = worker_.run("configurations", params, timeout_s);
  measure::throw_if_failed(outcome, "configurations");
  return measure::job_field<std::vector<nlohmann::json>>(outcome.result, "configurations", {});
}

nlohmann::json PeerHost::heuristic_configs(const ProviderId& provider, const PeerProblem& problem, double timeout_s) {
  const nlohmann::json params{{"provider", provider.text()}, {"problem", problem_json(provider, problem)}};
  const measure::JobOutcome outcome = worker_.run("heuristic", params, timeout_s);
  measure::throw_if_failed(outcome, "heuristic");
  const nlohmann::json configs = measure::job_field<nlohmann::json>(outcome.result, "configs", nlohmann::json::array());
  if (!configs.is_array()) QTUNE_THROW(Error, "the peer worker's heuristic configs are no list");
  return configs;
}

PeerResult PeerHost::run(const ProviderId& provider, const PeerProblem& problem, const nlohmann::json& config,
                         const PeerRunOptions& options) {
  const nlohmann::json params{{"provider", provider.text()},
                              {"problem", problem_json(provider, problem)},
                              {"config", config.is_null() ? nlohmann::json::object() : config},
                              {"measure", measure::measure_options_to_json(options.measure)},
                              {"measure_time", options.measure_time}};
  const measure::JobOutcome outcome = worker_.run("run", params, options.timeout_s);
  PeerResult result;
  result.provider = provider.text();
  result.config = params["config"];
  result.seconds = outcome.seconds;
  switch (outcome.status) {
    case measure::JobStatus::Ok: break;
    case measure::JobStatus::Error: result.outcome = PeerOutcome::Error; break;
    case measure::JobStatus::Fault: result.outcome = PeerOutcome::Fault; break;
    case measure::JobStatus::Crashed: result.outcome = PeerOutcome::Crashed; break;
    case measure::JobStatus::Timeout: result.outcome = PeerOutcome::Timeout; break;
  }
  if (!outcome.ok()) {
    result.error = outcome.error;
    result.error_type = outcome.error_type;
    return result;
  }
  try {
    const nlohmann::json& answer = outcome.result;
    result.peer_version = measure::job_field<std::string>(answer, "peer_version", "");
    result.config = measure::job_field<nlohmann::json>(answer, "config", result.config);
    result.verification = verification_from_json(measure::job_field<nlohmann::json>(answer, "verification", {}));
    if (answer.contains("measurement")) result.measurement = answer.at("measurement").get<measure::Measurement>();
  } catch (const std::exception& error) {
    result.outcome = PeerOutcome::Error;
    result.error = std::string("the peer worker answered something unreadable: ") + error.what();
    return result;
  }
  if (!result.verification->passed) {
    result.outcome = PeerOutcome::WrongAnswer;
    result.error = result.verification->summary;
    result.measurement.reset();
  } else {
    result.outcome = result.measurement ? PeerOutcome::Measured : PeerOutcome::Verified;
  }
  return result;
}

std::vector<PeerCompileResult> compile_in_parallel(const PeerEnvironment& environment, const std::vector<PeerCompileJob>& jobs,
                                                   const PeerCompileOptions& options,
                                                   const std::function<void(std::size_t, const PeerCompileResult&)>& done,
                                                   const std::atomic<bool>* stop) {
  std::vector<PeerCompileResult> results(jobs.size());
  const std::size_t cpus = std::max<std::size_t>(1, std::thread::hardware_concurrency());
  const std::size_t workers = std::min(options.workers == 0 ? cpus : options.workers, jobs.size());
  std::atomic<std::size_t> next{0};
  std::mutex reporting;
  std::exception_ptr failure;  // a worker that cannot be started at all
  const auto build = [&] {
    measure::Worker worker(peer_worker_options(environment));
    try {
      for (std::size_t index = next++; index < jobs.size(); index = next++) {
        if (stop != nullptr && stop->load()) break;
        const PeerCompileJob& job = jobs[index];
        const nlohmann::json params{{"provider", job.provider.text()},
                                    {"problem", problem_json(job.provider, job.problem)},
                                    {"config", job.config.is_null() ? nlohmann::json::object() : job.config}};
        const measure::JobOutcome outcome = worker.run("compile", params, options.timeout_s);
        PeerCompileResult& result = results[index];
        result.seconds = outcome.seconds;
        if (outcome.ok()) {
          result.compiled = measure::job_field<bool>(outcome.result, "compiled", false);
          if (!result.compiled) result.error = "the peer builds nothing ahead";
        } else {
          result.refused = outcome.status == measure::JobStatus::Error && outcome.error_type == "UnsupportedError";
          result.error = outcome.status == measure::JobStatus::Error ? outcome.error
                                                                     : measure::to_string(outcome.status) + ": " + outcome.error;
          result.error_type = outcome.error_type;
        }
        const std::lock_guard<std::mutex> lock(reporting);
        if (done) done(index, result);
      }
    } catch (...) {
      const std::lock_guard<std::mutex> lock(reporting);
      if (!failure) failure = std::current_exception();
      next = jobs.size();  // the others stop too
    }
  };
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < workers; ++i) threads.emplace_back(build);
  for (std::thread& thread : threads) thread.join();
  if (failure) std::rethrow_exception(failure);
  return results;
}

}  // namespace qtune::peers
