#include "tuner/measure/worker.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "kernels/error.hpp"
#include "tuner/runtime/device.hpp"
#include "tuner/runtime/driver.hpp"
#include "tuner/runtime/crash_report.hpp"

namespace qtune::measure {

namespace {

using Clock = std::chrono::steady_clock;

struct JobRegistry {
  std::mutex mutex;
  std::map<std::string, JobHandler> handlers;
};

JobRegistry& job_registry() {
  static JobRegistry* registry = new JobRegistry;  // never destroyed: handlers may run during exit
  return *registry;
}

std::string system_error(const std::string& what) { return what + ": " + std::strerror(errno); }

// Sends all of `text`; false when the peer is gone. MSG_NOSIGNAL: a dead peer must not SIGPIPE us.
bool send_all(int socket, const std::string& text) {
  std::size_t sent = 0;
  while (sent < text.size()) {
    const ssize_t written = send(socket, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (written < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    sent += static_cast<std::size_t>(written);
  }
  return true;
}

enum class ReadResult { Line, Timeout, Closed };

// Reads one '\n'-terminated line into `line`, keeping extra bytes in `buffer`. deadline nullopt: wait forever.
ReadResult read_line(int socket, std::string& buffer, std::string& line,
                     const std::optional<Clock::time_point>& deadline) {
  while (true) {
    const std::size_t end = buffer.find('\n');
    if (end != std::string::npos) {
      line = buffer.substr(0, end);
      buffer.erase(0, end + 1);
      return ReadResult::Line;
    }
    int wait_ms = -1;
    if (deadline) {
      const auto remaining = std::chrono::duration<double, std::milli>(*deadline - Clock::now()).count();
      if (remaining <= 0) return ReadResult::Timeout;
      wait_ms = static_cast<int>(std::min(std::ceil(remaining), static_cast<double>(INT_MAX)));
    }
    pollfd poll_fd{socket, POLLIN, 0};
    const int ready = poll(&poll_fd, 1, wait_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return ReadResult::Closed;
    }
    if (ready == 0) continue;  // the deadline is checked at the top
    char chunk[65536];
    const ssize_t received = recv(socket, chunk, sizeof chunk, 0);
    if (received < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ReadResult::Closed;
    }
    if (received == 0) return ReadResult::Closed;
    buffer.append(chunk, static_cast<std::size_t>(received));
  }
}

// The error fields of a response for the exception in flight; returns whether it is a sticky CUDA error.
bool describe_exception(nlohmann::json& response) {
  try {
    throw;
  } catch (const runtime::DriverError& error) {
    response["error"] = error.what();
    response["location"] = error.file() + ":" + std::to_string(error.line());
    response["error_type"] = "DriverError";
    response["library"] = error.library();
    return error.sticky();
  } catch (const NoGpuError& error) {
    response["error"] = error.what();
    response["location"] = error.file() + ":" + std::to_string(error.line());
    response["error_type"] = "NoGpuError";
  } catch (const InputError& error) {
    response["error"] = error.what();
    response["location"] = error.file() + ":" + std::to_string(error.line());
    response["error_type"] = "InputError";
  } catch (const UnsupportedError& error) {
    response["error"] = error.what();
    response["location"] = error.file() + ":" + std::to_string(error.line());
    response["error_type"] = "UnsupportedError";
  } catch (const LibraryError& error) {
    response["error"] = error.what();
    response["location"] = error.file() + ":" + std::to_string(error.line());
    response["error_type"] = "LibraryError";
    response["library"] = error.library();
  } catch (const Error& error) {
    response["error"] = error.what();
    response["location"] = error.file() + ":" + std::to_string(error.line());
    response["error_type"] = "Error";
  } catch (const std::exception& error) {
    response["error"] = error.what();
    response["error_type"] = "exception";
  } catch (...) {
    response["error"] = "a job threw something that is not an exception";
    response["error_type"] = "exception";
  }
  return false;
}

// Runs one job; returns the response and whether the worker must stop (sticky CUDA error).
std::pair<nlohmann::json, bool> execute(std::uint64_t id, const std::string& job, const nlohmann::json& params) {
  nlohmann::json response{{"id", id}};
  bool sticky = false;
  try {
    JobHandler handler;
    {
      JobRegistry& registry = job_registry();
      std::lock_guard lock(registry.mutex);
      const auto found = registry.handlers.find(job);
      if (found != registry.handlers.end()) handler = found->second;
    }
    if (!handler) {
      std::string known;
      for (const std::string& name : registered_jobs()) known += (known.empty() ? "" : ", ") + name;
      QTUNE_INPUT_ERROR("job: unknown job '" + job + "'; this worker knows: " + known);
    }
    response["result"] = handler(params);
    response["status"] = "ok";
  } catch (...) {
    sticky = describe_exception(response);
    response["status"] = "error";
  }
  // A kernel may have faulted without the job noticing; after that every later job would fail.
  if (const std::optional<std::string> context_error = runtime::sticky_context_error()) {
    sticky = true;
    if (response["status"] == "ok") {
      response.erase("result");
      response["error"] = *context_error;
      response["error_type"] = "DriverError";
      response["library"] = "CUDA driver";
    }
  }
  if (sticky) response["status"] = "fault";
  return {response, sticky};
}

// An orphaned worker (its parent was killed, e.g. kill -9 during a GPU hang) ends itself instead of running on: the
// parent's end of the socket closes when the parent dies, however it dies, so a hang-up is seen at once, even in the
// middle of a job. A changed parent pid is the fallback for a socket some other process still holds.
void watch_parent(int socket_fd) {
  const pid_t parent = getppid();
  std::thread([socket_fd, parent] {
    while (true) {
      pollfd hang_up{socket_fd, POLLRDHUP, 0};
      if (poll(&hang_up, 1, 500) > 0 && (hang_up.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) _exit(0);  // end of input
      if (getppid() != parent) _exit(kExitProtocolError);
    }
  }).detach();
}

std::string format_seconds(double seconds) {
  std::ostringstream text;
  text << seconds;
  return text.str();
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int signal_number = WTERMSIG(status);
    const char* name = strsignal(signal_number);
    return "was killed by signal " + std::to_string(signal_number) + " (" + (name != nullptr ? name : "?") + ")";
  }
  return "stopped with wait status " + std::to_string(status);
}

}  // namespace

// ---- worker side ----

JobOutcome run_job_here(const std::string& job, const nlohmann::json& params) {
  const auto [response, sticky] = execute(0, job, params);
  static_cast<void>(sticky);  // the response says "fault" then
  return parse_response(response.dump(), 0);
}

void register_job(const std::string& name, JobHandler handler) {
  if (name.empty()) QTUNE_THROW(Error, "register_job: empty job name");
  JobRegistry& registry = job_registry();
  std::lock_guard lock(registry.mutex);
  registry.handlers[name] = std::move(handler);
}

std::vector<std::string> registered_jobs() {
  JobRegistry& registry = job_registry();
  std::lock_guard lock(registry.mutex);
  std::vector<std::string> names;
  for (const auto& [name, handler] : registry.handlers) names.push_back(name);
  return names;
}

int run_worker(int socket_fd) {
  runtime::install_crash_report("qtune worker");
  register_selftest_jobs();
  watch_parent(socket_fd);
  const nlohmann::json ready{{"ready", true}, {"pid", getpid()}, {"jobs", registered_jobs()}};
  if (!send_all(socket_fd, ready.dump() + "\n")) return kExitProtocolError;
  std::string buffer;
  std::string line;
  while (read_line(socket_fd, buffer, line, std::nullopt) == ReadResult::Line) {
    nlohmann::json request;
    try {
      request = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& error) {
      send_all(socket_fd, nlohmann::json{{"status", "error"}, {"error", std::string("malformed request: ") + error.what()},
                                         {"error_type", "Error"}}
                                  .dump() +
                              "\n");
      return kExitProtocolError;
    }
    const std::uint64_t id = request.value("id", std::uint64_t{0});
    const std::string job = request.value("job", std::string{});
    const bool has_params = request.contains("params") && !request["params"].is_null();
    const nlohmann::json params = has_params ? request["params"] : nlohmann::json::object();
    auto [response, sticky] = execute(id, job, params);
    if (!send_all(socket_fd, response.dump() + "\n")) return kExitProtocolError;
    if (sticky) return kExitAfterFault;
  }
  return 0;
}

int worker_main(int argc, char** argv) {
  int socket_fd = -1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--fd") socket_fd = std::atoi(argv[i + 1]);
  }
  if (socket_fd < 0) {
    std::fprintf(stderr, "usage: %s __worker --fd N (started by qtune, not by hand)\n", argc > 0 ? argv[0] : "qtune");
    return kExitProtocolError;
  }
  return run_worker(socket_fd);
}

// ---- protocol ----

std::string to_string(JobStatus status) {
  switch (status) {
    case JobStatus::Ok: return "ok";
    case JobStatus::Error: return "error";
    case JobStatus::Fault: return "fault";
    case JobStatus::Crashed: return "crashed";
    case JobStatus::Timeout: return "timeout";
  }
  return "unknown";
}

nlohmann::json make_request(std::uint64_t id, const std::string& job, const nlohmann::json& params) {
  // No parameters travel as {} so that jobs can always call params.value(...).
  return nlohmann::json{{"id", id}, {"job", job}, {"params", params.is_null() ? nlohmann::json::object() : params}};
}

JobOutcome parse_response(const std::string& line, std::uint64_t id) {
  JobOutcome outcome;
  const auto malformed = [&](const std::string& why) {
    outcome.status = JobStatus::Crashed;
    outcome.error = "the worker broke the protocol (" + why + "): " + line.substr(0, 200);
    return outcome;
  };
  nlohmann::json response;
  try {
    response = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception&) {
    return malformed("not JSON");
  }
  if (!response.is_object() || !response.contains("status") || !response["status"].is_string()) {
    return malformed("no status");
  }
  if (!response.contains("id") || !response["id"].is_number_unsigned() || response["id"].get<std::uint64_t>() != id) {
    return malformed("expected id " + std::to_string(id));
  }
  const std::string status = response["status"];
  if (status == "ok") {
    outcome.status = JobStatus::Ok;
    outcome.result = response.contains("result") ? response["result"] : nlohmann::json();
    return outcome;
  }
  if (status != "error" && status != "fault") return malformed("unknown status '" + status + "'");
  outcome.status = status == "error" ? JobStatus::Error : JobStatus::Fault;
  outcome.error = response.value("error", std::string("(no message)"));
  outcome.error_type = response.value("error_type", std::string());
  outcome.library = response.value("library", std::string());
  return outcome;
}

void throw_if_failed(const JobOutcome& outcome, const std::string& job) {
  if (outcome.ok()) return;
  const std::string& message = outcome.error;
  if (outcome.status == JobStatus::Error) {
    if (outcome.error_type == "NoGpuError") QTUNE_THROW(NoGpuError, message);
    if (outcome.error_type == "InputError") QTUNE_THROW(InputError, message);
    if (outcome.error_type == "UnsupportedError") QTUNE_THROW(UnsupportedError, message);
    if (outcome.error_type == "LibraryError" || outcome.error_type == "DriverError") {
      // The library's name is already the message's prefix; LibraryError adds it again otherwise.
      const std::string prefix = outcome.library + ": ";
      QTUNE_LIBRARY_ERROR(outcome.library,
                          message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message);
    }
  }
  QTUNE_THROW(Error, "worker job '" + job + "' " + to_string(outcome.status) + ": " + message);
}

// ---- parent side ----

Worker::Worker(WorkerOptions options) : options_(std::move(options)) {}

Worker::~Worker() { stop(); }

void Worker::stop() {
  if (pid_ == 0) return;
  shutdown(socket_, SHUT_RDWR);  // the worker sees the end of its input and exits
  reap(false);
}

std::string Worker::reap(bool kill_first) {
  if (pid_ == 0) return "";
  if (kill_first) kill(pid_, SIGKILL);
  if (socket_ >= 0) close(socket_);
  socket_ = -1;
  buffer_.clear();
  const auto wait_until = [this](Clock::duration patience, int& status) {
    const auto deadline = Clock::now() + patience;
    while (true) {
      const pid_t reaped = waitpid(pid_, &status, WNOHANG);
      if (reaped == pid_) return true;
      if (reaped < 0 && errno != EINTR) {
        status = -1;  // not our child any more (SIGCHLD ignored): nothing to wait for
        return true;
      }
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  };
  int status = 0;
  std::string description;
  // A worker leaving a GPU context may need a moment to exit; one killed may need the driver to tear it down.
  bool reaped = wait_until(kill_first ? std::chrono::seconds(30) : std::chrono::seconds(10), status);
  if (!reaped && !kill_first) {
    kill(pid_, SIGKILL);
    reaped = wait_until(std::chrono::seconds(30), status);
    description = "(killed after it did not exit) ";
  }
  if (!reaped) {
    description += "did not exit even after SIGKILL";
  } else if (status == -1) {
    description += "exited (status unknown)";
  } else {
    description += describe_wait_status(status);
  }
  pid_ = 0;
  return description;
}

std::string Worker::start() {
  int sockets[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0) {
    QTUNE_LIBRARY_ERROR("system", system_error("socketpair for the worker failed"));
  }
  const int parent_socket = sockets[0];
  const int child_socket = sockets[1];
  // Everything the child needs is prepared before fork: between fork and exec only async-signal-safe calls.
  std::vector<std::string> arguments{options_.executable};
  arguments.insert(arguments.end(), options_.arguments.begin(), options_.arguments.end());
  arguments.push_back("--fd");
  arguments.push_back(std::to_string(child_socket));
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);
  const char* executable = options_.executable.c_str();

  const pid_t pid = fork();
  if (pid < 0) {
    const std::string error = system_error("fork of the worker failed");
    close(parent_socket);
    close(child_socket);
    QTUNE_LIBRARY_ERROR("system", error);
  }
  if (pid == 0) {
    const int flags = fcntl(child_socket, F_GETFD);
    fcntl(child_socket, F_SETFD, flags & ~FD_CLOEXEC);
    dup2(STDERR_FILENO, STDOUT_FILENO);  // whatever a job prints must not reach the parent's stdout
    const rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);  // crashing on purpose must not litter core files
    execv(executable, argv.data());
    _exit(127);
  }
  close(child_socket);
  pid_ = pid;
  socket_ = parent_socket;
  buffer_.clear();
  ++workers_started_;

  std::string line;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(options_.startup_timeout_s));
  const ReadResult result = read_line(socket_, buffer_, line, deadline);
  if (result == ReadResult::Timeout) {
    reap(true);
    return "'" + options_.executable + "' did not report ready within " + format_seconds(options_.startup_timeout_s) +
           " s";
  }
  if (result == ReadResult::Closed) {
    const std::string how = reap(false);
    return "'" + options_.executable + "' " + how + " before it was ready" +
           (how == "exited with status 127" ? " (could it be executed?)" : "");
  }
  nlohmann::json ready;
  try {
    ready = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception&) {
  }
  if (!ready.is_object() || ready.value("ready", false) != true) {
    reap(true);
    return "'" + options_.executable + "' is not a qtune worker (it said: " + line.substr(0, 200) + ")";
  }
  return "";
}

bool Worker::forget_if_exited() {
  if (pid_ == 0) return true;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    close(socket_);
    socket_ = -1;
    buffer_.clear();
    pid_ = 0;
    return true;
  }
  // Between jobs an idle worker sends nothing: a readable socket means it closed (it is exiting) or misbehaves.
  pollfd poll_fd{socket_, POLLIN, 0};
  if (poll(&poll_fd, 1, 0) > 0) {
    reap(true);
    return true;
  }
  return false;
}

JobOutcome Worker::run(const std::string& job, const nlohmann::json& params, double timeout_s) {
  JobOutcome outcome;
  const std::uint64_t id = next_request_id_++;
  const std::string request = make_request(id, job, params).dump() + "\n";
  // A worker that died between jobs must not take the blame for this one: start another and send again.
  bool sent = false;
  for (int attempt = 0; attempt < 2 && !sent; ++attempt) {
    if (forget_if_exited()) {
      const std::string failure = start();
      if (!failure.empty()) {
        outcome.status = JobStatus::Crashed;
        outcome.error = "the worker could not be started: " + failure;
        return outcome;
      }
    }
    sent = send_all(socket_, request);
    if (!sent) reap(true);
  }
  const int pid = pid_;
  outcome.worker_pid = pid;
  const auto started = Clock::now();
  const auto elapsed = [&started] { return std::chrono::duration<double>(Clock::now() - started).count(); };
  if (!sent) {
    outcome.status = JobStatus::Crashed;
    outcome.error = "job '" + job + "' could not be sent to a fresh worker either";
    return outcome;
  }
  std::optional<Clock::time_point> deadline;
  if (timeout_s > 0) {
    deadline = started + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  }
  std::string line;
  const ReadResult result = read_line(socket_, buffer_, line, deadline);
  if (result == ReadResult::Timeout) {
    const std::string how = reap(true);
    outcome.status = JobStatus::Timeout;
    outcome.error = "job '" + job + "' did not finish within " + format_seconds(timeout_s) +
                    " s; the watchdog killed its worker (pid " + std::to_string(pid) + "), which " + how;
  } else if (result == ReadResult::Closed) {
    const std::string how = reap(false);
    outcome.status = JobStatus::Crashed;
    outcome.error = "the worker (pid " + std::to_string(pid) + ") " + how + " during job '" + job + "'";
  } else {
    outcome = parse_response(line, id);
    outcome.worker_pid = pid;
    if (outcome.status == JobStatus::Fault) {
      const std::string how = reap(false);  // the worker exits by itself after a fault
      outcome.error += " (the worker " + how + ")";
    } else if (outcome.status == JobStatus::Crashed) {
      reap(true);
    }
  }
  outcome.seconds = elapsed();
  return outcome;
}

}  // namespace qtune::measure
