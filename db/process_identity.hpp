#pragma once
// Which process runs a run, told apart from a later process that reuses its pid: the host, the pid and the process's
// start ("<boot id> <start time in clock ticks since boot>", from /proc). A run still marked running whose process is
// gone was killed (kill -9, a crash, a reboot) and is interrupted.
#include <cstdint>
#include <optional>
#include <string>

namespace qtune::db {

struct ProcessIdentity {
  std::string host;
  std::int64_t pid = 0;
  std::string start;  // "" where /proc cannot tell
  friend bool operator==(const ProcessIdentity&, const ProcessIdentity&) = default;
};

// This process.
ProcessIdentity current_process();

// The identity of process `pid` on this host now; nullopt when no such process is running.
std::optional<ProcessIdentity> running_process(std::int64_t pid);

enum class ProcessState { Running, Gone, Unknown };  // Unknown: another host's process, which cannot be looked at
ProcessState process_state(const ProcessIdentity& process);

}  // namespace qtune::db
