#include "db/process_identity.hpp"

#include <unistd.h>

#include <fstream>
#include <sstream>

namespace qtune::db {

namespace {

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

std::string boot_id() {
  std::ifstream stream("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(stream, id);
  return id;
}

// Field 22 of /proc/PID/stat, the start time in clock ticks since boot; "" when the process does not exist.
std::string start_ticks(std::int64_t pid) {
  std::ifstream stream("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(stream, stat)) return "";
  // The command name (field 2) may hold blanks and parentheses: the fields after it start after its last ')'.
  const auto name_end = stat.rfind(')');
  if (name_end == std::string::npos) return "";
  std::istringstream fields(stat.substr(name_end + 1));
  std::string field;
  for (int index = 3; index <= 22 && fields >> field; ++index) {
    if (index == 22) return field;
  }
  return "";
}

std::string process_start(const std::string& boot, const std::string& ticks) {
  if (boot.empty() || ticks.empty()) return "";
  return boot + " " + ticks;
}

std::string boot_of(const std::string& start) { return start.substr(0, start.find(' ')); }

}  // namespace

ProcessIdentity current_process() {
  const std::int64_t pid = getpid();
  return ProcessIdentity{host_name(), pid, process_start(boot_id(), start_ticks(pid))};
}

std::optional<ProcessIdentity> running_process(std::int64_t pid) {
  if (pid <= 0) return std::nullopt;
  const std::string ticks = start_ticks(pid);
  if (ticks.empty()) return std::nullopt;
  return ProcessIdentity{host_name(), pid, process_start(boot_id(), ticks)};
}

ProcessState process_state(const ProcessIdentity& process) {
  const ProcessIdentity self = current_process();
  if (process.host.empty() || process.host != self.host || process.start.empty() || self.start.empty()) return ProcessState::Unknown;
  if (boot_of(process.start) != boot_of(self.start)) return ProcessState::Gone;  // this host has rebooted since
  const auto now = running_process(process.pid);
  return now && now->start == process.start ? ProcessState::Running : ProcessState::Gone;
}

}  // namespace qtune::db
