#pragma once
// Containment: candidates are compiled, checked and measured in a worker process, so that an illegal address,
// an illegal instruction or a hang kills only the worker. The parent (which never initialises CUDA for measured
// work) starts the worker by fork + exec of an executable (by default its own, /proc/self/exe) with the hidden
// subcommand `__worker --fd N`, and talks to it in JSON lines over a Unix socket pair:
//   worker -> parent, once:  {"ready": true, "pid": 123, "jobs": ["measure-kernel", ...]}
//   parent -> worker:        {"id": 7, "job": "measure-kernel", "params": {...}}
//   worker -> parent:        {"id": 7, "status": "ok", "result": {...}}
//                         or {"id": 7, "status": "error" | "fault", "error": "...", "error_type": "InputError", ...}
// A job that outlives its timeout gets the worker SIGKILLed ("timeout"); a worker that dies without answering is
// "crashed" (signal or exit status in the message); a job that leaves a sticky CUDA error answers "fault" and the
// worker exits. In every case the next job starts a fresh worker.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/error.hpp"

namespace qtune::measure {

// Job parameters: `name` of a JSON object as a T, `fallback` when absent; a value of the wrong type is an InputError
// naming the field ("<prefix><name>: ...").
template <typename T>
T job_field(const nlohmann::json& json, const char* name, const T& fallback, const std::string& prefix = "") {
  if (!json.contains(name)) return fallback;
  try {
    return json.at(name).get<T>();
  } catch (const nlohmann::json::exception& error) {
    QTUNE_INPUT_ERROR(prefix + name + ": " + error.what());
  }
}

// ---- Inside the worker process ----

// A job takes its parameters and returns its result; it reports failure by throwing (qtune errors keep their type).
using JobHandler = std::function<nlohmann::json(const nlohmann::json& params)>;

// Registers a job by name (replacing one of the same name). Jobs must be registered before run_worker runs; the
// `qtune __worker` command registers every job qtune has (tuner/cli/cmd_worker.cpp).
void register_job(const std::string& name, JobHandler handler);
std::vector<std::string> registered_jobs();  // sorted
// The built-in jobs (idempotent):
//   selftest-echo      returns its params
//   selftest-throw     throws InputError(params.message) (the worker survives)
//   selftest-segfault  raises SIGSEGV (CPU-only crash)
//   selftest-sleep     sleeps params.seconds, returns {"slept_s": ...} (CPU-only hang when long)
//   selftest-device    GPU: returns the DeviceInfo of params.device (default 0)
//   selftest-fault     GPU: a kernel faults; params.kind: "illegal-address" (default) or "trap" (an illegal
//                      instruction)
//   selftest-hang      GPU: a kernel spins forever
//   selftest-copy      GPU: measures a device-to-device copy kernel of params.bytes (default 1 GiB); returns
//                      {"measurement", "bytes", "bandwidth_gbps" ((read + write bytes) / median), "device"}
void register_selftest_jobs();

// Serves requests on `socket_fd` until the parent closes it. Returns the process exit code: 0 after end of input,
// kExitAfterFault after a sticky CUDA error (the context is unusable), kExitProtocolError on malformed input.
inline constexpr int kExitAfterFault = 3;
inline constexpr int kExitProtocolError = 4;
int run_worker(int socket_fd);
// Entry for `PROGRAM __worker --fd N`: registers the selftest jobs and runs run_worker. Returns an exit code.
int worker_main(int argc, char** argv);

// ---- In the parent ----

enum class JobStatus { Ok, Error, Fault, Crashed, Timeout };
std::string to_string(JobStatus status);  // "ok", "error", "fault", "crashed", "timeout"

struct JobOutcome {
  JobStatus status = JobStatus::Crashed;
  nlohmann::json result;   // the job's answer when ok
  std::string error;       // what went wrong otherwise (the job's error message, signal, exit status, timeout)
  std::string error_type;  // "InputError", "NoGpuError", "UnsupportedError", "LibraryError", "DriverError",
                           // "Error", "exception"; "" for crashes and timeouts
  std::string library;     // for LibraryError/DriverError: "CUDA driver", "NVRTC", ...
  int worker_pid = 0;
  double seconds = 0;      // from sending the request to the answer (or the kill)
  bool ok() const { return status == JobStatus::Ok; }
};

// Runs a registered job in this process, answering as the worker would (ok, error with its type, or fault after a
// sticky CUDA error; no containment): `qtune bench --in-process`, for debugging a job under a debugger.
JobOutcome run_job_here(const std::string& job, const nlohmann::json& params);

// Rethrows a failed outcome as the qtune error it was in the worker (NoGpuError stays NoGpuError, ...); crashes,
// faults and timeouts become qtune::Error naming the job. Does nothing for an ok outcome.
void throw_if_failed(const JobOutcome& outcome, const std::string& job);

struct WorkerOptions {
  std::string executable = "/proc/self/exe";
  std::vector<std::string> arguments = {"__worker"};  // "--fd N" is appended
  double startup_timeout_s = 60;  // until the worker says it is ready
};

// A worker process seen from the parent; started on the first job and again after one died. Not thread-safe:
// use one Worker per thread.
class Worker {
 public:
  explicit Worker(WorkerOptions options = {});
  ~Worker();  // closes the socket (the worker exits), killing it if it does not within a few seconds
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Runs one job with a watchdog of timeout_s seconds (<= 0: no watchdog). Never throws for what the job or the worker does; throws
  // LibraryError("system", ...) only when no process can be started at all.
  JobOutcome run(const std::string& job, const nlohmann::json& params, double timeout_s);

  int pid() const { return pid_; }  // 0 when no worker is running
  int workers_started() const { return workers_started_; }
  void stop();

 private:
  // Starts a worker; on failure returns the reason (a crash of the startup) instead of throwing.
  std::string start();
  std::string reap(bool kill_first);  // waits for the worker, returns "exited with status 1" etc.
  bool forget_if_exited();            // true when no worker is running (any exited one is reaped quietly)
  WorkerOptions options_;
  int pid_ = 0;
  int socket_ = -1;
  int workers_started_ = 0;
  std::uint64_t next_request_id_ = 1;
  std::string buffer_;  // bytes received after the last complete line
};

// The protocol's messages, for tests and for other transports.
nlohmann::json make_request(std::uint64_t id, const std::string& job, const nlohmann::json& params);
// Parses a worker answer to request `id`; a malformed line yields a Crashed outcome that says so.
JobOutcome parse_response(const std::string& line, std::uint64_t id);

}  // namespace qtune::measure
