#pragma once
// Running qtune's command line from tests: in this process through run_cli (stdout and stderr captured), or the
// built executables through a shell (for what only a process shows: exit codes of other programs, environments).
#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "tuner/cli/cli.hpp"

namespace qtune::cli::testing {

struct CliResult {
  int status = 0;
  std::string out;
  std::string err;
};

// `qtune ARGUMENTS...` in this process.
inline CliResult run_qtune(std::vector<std::string> arguments) {
  arguments.insert(arguments.begin(), "qtune");
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  CliResult result;
  result.status = run_cli(static_cast<int>(argv.size()), argv.data());
  result.out = ::testing::internal::GetCapturedStdout();
  result.err = ::testing::internal::GetCapturedStderr();
  return result;
}

// A shell command line's exit status and its stdout (in `out`; add 2>&1 for stderr too).
inline CliResult run_shell(const std::string& command) {
  CliResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    result.status = -1;
    return result;
  }
  std::array<char, 4096> buffer{};
  std::size_t read = 0;
  while ((read = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.out.append(buffer.data(), read);
  const int status = ::pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// How many times `needle` occurs in `text`.
inline std::size_t occurrences(const std::string& text, const std::string& needle) {
  std::size_t count = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++count;
  return count;
}

// Sets QTUNE_CACHE_DIR for one test and restores the previous value.
class CacheDirectory {
 public:
  explicit CacheDirectory(const std::string& directory) {
    if (const char* previous = std::getenv("QTUNE_CACHE_DIR")) previous_ = previous;
    ::setenv("QTUNE_CACHE_DIR", directory.c_str(), 1);
  }
  ~CacheDirectory() {
    if (previous_) {
      ::setenv("QTUNE_CACHE_DIR", previous_->c_str(), 1);
    } else {
      ::unsetenv("QTUNE_CACHE_DIR");
    }
  }
  CacheDirectory(const CacheDirectory&) = delete;
  CacheDirectory& operator=(const CacheDirectory&) = delete;

 private:
  std::optional<std::string> previous_;
};

}  // namespace qtune::cli::testing
