#pragma once
// Kernel providers hosted in Python (PyTorch, Marlin, Humming, DeepGEMM), seen from qtune's C++ side.
//
// An adapter (tuner/peers/python/qtune_peers/adapters/) packs qtune's quantized operands with its peer's own helpers
// and launches the peer's kernel on the stream qtune gives it; everything else stays qtune's. The adapters run in a
// Python worker process (qtune_peer_worker.py) that speaks qtune's worker protocol (tuner/measure/worker.hpp: JSON
// lines over a socket, started with "--fd N") and reaches qtune's measuring library through a C ABI loaded with
// ctypes (peer_abi.h: operands from qtune's quantizer, poison, verification against the CPU reference, measure()).
// So the users' Python (a venv with PyTorch, any version) is never built against, and the containment is the one
// qtune's kernels have: a peer that faults, hangs or crashes kills only its worker, and the outcome is recorded.
//
// Providers are named "<peer>-<operands>": "humming-w4a16-int4-ch", "marlin-w4a16-int4-g128", "torch-f16",
// "torch-w8a8-fp8-ch:out=bf16" (operands: a qtune format, or "f16"/"bf16" for dense GEMMs).
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/moe.hpp"
#include "tuner/measure/measure.hpp"
#include "tuner/measure/worker.hpp"

namespace qtune::peers {

// Where the adapters run and where the peers live.
struct PeerEnvironment {
  std::filesystem::path python;                   // QTUNE_PYTHON (a name is looked up on PATH), default python3
  std::vector<std::filesystem::path> peer_paths;  // prepended to the adapters' sys.path: --peer-path, QTUNE_PEER_PATH
  std::filesystem::path package_dir;              // holds qtune_peer_worker.py and the qtune_peers package
  std::filesystem::path abi_library;              // libqtune_peer_abi.so
  bool test_peers = false;                        // also offer the tests' fake peers
};

// The environment of this process: QTUNE_PYTHON, then `peer_paths` (from --peer-path) before QTUNE_PEER_PATH's
// ':'-separated folders, and qtune's Python package and C ABI library from QTUNE_PEERS_DIR, else beside the executable
// (the library in its folder, the package in ../tuner/peers/python or ../share/qtune/peers/python), else the source
// and build trees. Throws InputError naming QTUNE_PYTHON or QTUNE_PEERS_DIR when something is not found.
PeerEnvironment peer_environment(const std::vector<std::string>& peer_paths = {});

struct ProviderId {
  std::string peer;      // "humming"
  std::string operands;  // "w4a16-int4-ch" (canonical qtune format text), "f16" or "bf16"
  std::string text() const { return peer + "-" + operands; }
  friend bool operator==(const ProviderId&, const ProviderId&) = default;
};
// "humming-w4a16-int4-ch" -> {"humming", "w4a16-int4-ch"}; the operands are checked (a format spec, f16 or bf16) and
// made canonical. Throws InputError naming `field`.
ProviderId parse_provider_id(std::string_view text, std::string_view field = "provider");

// The formats of `offered` providers that are `provider`'s format with more options ("humming-w4a8-int4-fp8" ->
// "w4a8-int4-fp8:scale=f16": Humming's W4A8 takes f16 scales), for a refusal that says what to ask for instead.
std::vector<std::string> offered_variants(const ProviderId& provider, const std::vector<std::string>& offered);

// One peer as the worker found it.
struct PeerInfo {
  std::string peer;
  bool available = false;
  std::string version;     // the peer's version ("" when unavailable)
  std::string problem;     // why it is unavailable: not importable, a version the adapter does not understand, ...
  std::string install;     // what to install, one line
  std::vector<std::string> providers;  // the provider ids it offers
  std::vector<std::string> moe_providers;  // those it also runs MoE GEMMs with
};

struct PeerProblem {
  std::int64_t m = 1;
  std::int64_t n = 0;
  std::int64_t k = 0;
  std::uint64_t seed = 1;
  int device = 0;
  // A MoE GEMM instead (m, n and k unused): qtune's MoE operands of this problem and `seed`, its output as peer_abi.h
  // defines it (gate-up: a row per pair; down: a row per token, the top-k weighted sum). Its format is the provider's
  // operands.
  std::optional<MoeProblem> moe{};
};

enum class PeerOutcome {
  Measured,     // verified, then measured
  Verified,     // verified; measuring was not asked for
  WrongAnswer,  // verification failed (never measured)
  Error,        // the adapter or the peer refused or failed (the worker lives on)
  Fault,        // a sticky CUDA error: the worker exited
  Crashed,      // the worker died (signal, exit)
  Timeout,      // the watchdog killed the worker
};
std::string to_string(PeerOutcome outcome);  // "measured", "verified", "wrong-answer", "error", "fault", ...

struct PeerVerification {
  bool passed = false;
  double relative_error = 0;
  double tolerance = 0;
  std::int64_t nan_count = 0;
  std::int64_t bad_count = 0;
  std::string summary;
};

struct PeerResult {
  PeerOutcome outcome = PeerOutcome::Error;
  std::string provider;
  std::string peer_version;
  nlohmann::json config;  // the configuration the adapter ran (peer-specific)
  std::optional<PeerVerification> verification;
  std::optional<measure::Measurement> measurement;
  std::string error;       // what went wrong, one line
  std::string error_type;  // the worker protocol's error_type ("InputError", ...); "" for crashes and timeouts
  double seconds = 0;      // the job, in the parent
  bool ok() const { return outcome == PeerOutcome::Measured || outcome == PeerOutcome::Verified; }
};

struct PeerRunOptions {
  measure::MeasureOptions measure;
  bool measure_time = true;  // false: prepare, launch and verify only
  double timeout_s = 300;    // a peer may JIT-compile its kernel inside the job (Humming runs nvcc)
};

// One Python worker for the peers, started on first use and again after one died. Not thread-safe.
class PeerHost {
 public:
  explicit PeerHost(PeerEnvironment environment);

  const PeerEnvironment& environment() const { return environment_; }
  // Every peer the worker knows, imported and probed (cached after the first call).
  const std::vector<PeerInfo>& describe(double timeout_s = 600);
  // Refuses a provider that cannot run here with an InputError of one line naming the provider and what to install
  // (exit status 2): an unknown peer, a peer that is not importable or of a version its adapter does not understand,
  // or operands the peer does not offer.
  void require(const ProviderId& provider, double timeout_s = 600);
  // require(), and the peer runs MoE GEMMs in those operands (else an InputError naming the provider and the peers
  // that run MoE GEMMs).
  void require_moe(const ProviderId& provider, double timeout_s = 600);
  // The peer's own configurations for a problem (its defaults first); [{}] for a peer with nothing to choose.
  std::vector<nlohmann::json> configurations(const ProviderId& provider, const PeerProblem& problem,
                                             double timeout_s = 600);
  // Prepares the operands (qtune's quantizer; packed by the adapter), poisons the output, launches `config` on qtune's
  // stream, verifies against the CPU reference and, when asked, measures: one outcome, never an exception for what
  // the peer does. Throws only when no worker can be started at all.
  PeerResult run(const ProviderId& provider, const PeerProblem& problem, const nlohmann::json& config,
                 const PeerRunOptions& options = {});
  // The peer's own rules for the layer of `problem` over every M: [[m_lo, m_hi, config], ...] (a GEMM with
  // m_lo < M <= m_hi runs config), for building their kernels ahead; empty for a peer without such rules. Throws the
  // worker's error (InputError for a provider it cannot run).
  nlohmann::json heuristic_configs(const ProviderId& provider, const PeerProblem& problem, double timeout_s = 600);
  int workers_started() const { return worker_.workers_started(); }

 private:
  PeerEnvironment environment_;
  measure::Worker worker_;
  std::optional<std::vector<PeerInfo>> peers_;
};

// A kernel to build ahead, into the peer's own cache, without launching it (the `compile` job).
struct PeerCompileJob {
  ProviderId provider;
  PeerProblem problem;     // N and K (and the device); M does not change a kernel
  nlohmann::json config;   // as `run` takes it
};
struct PeerCompileResult {
  bool compiled = false;   // built (or found built): a run finds it in the peer's cache
  bool refused = false;    // the peer's compiler refused it (UnsupportedError): the candidate's failure
  std::string error;       // why it was not built, one line ("" when it was)
  std::string error_type;  // the worker protocol's error_type; "" for crashes and timeouts
  double seconds = 0;
};
struct PeerCompileOptions {
  std::size_t workers = 0;  // Python workers building at once; 0: the CPU count
  double timeout_s = 600;   // per kernel, the worker's start (imports) included
};
// Builds `jobs` with `options.workers` peer workers at once (each a process of its own, started on its first job and
// ended when the jobs are done). `done(index, result)` is called once per job as it finishes, one call at a time;
// `stop` (may be null) leaves the jobs not yet started unbuilt. Returns one result per job, in the jobs' order.
std::vector<PeerCompileResult> compile_in_parallel(const PeerEnvironment& environment, const std::vector<PeerCompileJob>& jobs,
                                                   const PeerCompileOptions& options,
                                                   const std::function<void(std::size_t, const PeerCompileResult&)>& done = {},
                                                   const std::atomic<bool>* stop = nullptr);

// The worker's command line for an environment (the parent appends "--fd N"), for tests and for people.
measure::WorkerOptions peer_worker_options(const PeerEnvironment& environment);

}  // namespace qtune::peers
