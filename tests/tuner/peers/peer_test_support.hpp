#pragma once
// The peer tests' environment: the Python that runs the adapters (skipping, saying so, where there is none), with the
// tests' fake peers, and small helpers to run Python from a test.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <optional>
#include <string>

#include "kernels/error.hpp"
#include "tuner/peers/peer_host.hpp"

namespace qtune::peers::testing {

// The environment with the fake peers, or why there is none ("" when found).
inline std::optional<PeerEnvironment> test_environment(std::string& why_not) {
  try {
    PeerEnvironment environment = peer_environment();
    environment.test_peers = true;
    return environment;
  } catch (const InputError& error) {
    why_not = error.what();
    return std::nullopt;
  }
}

// Runs a shell command; returns its exit status and standard output.
inline std::pair<int, std::string> run_command(const std::string& command) {
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, ""};
  std::array<char, 4096> chunk{};
  while (std::fgets(chunk.data(), chunk.size(), pipe) != nullptr) output += chunk.data();
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

}  // namespace qtune::peers::testing

// Skips the calling test, saying why, when no Python for the adapters is found; defines `environment` otherwise.
#define QTUNE_REQUIRE_PEER_PYTHON(environment)                                                          \
  std::string environment##_why_not;                                                                    \
  const std::optional<::qtune::peers::PeerEnvironment> environment##_found =                            \
      ::qtune::peers::testing::test_environment(environment##_why_not);                                 \
  if (!environment##_found) GTEST_SKIP() << "needs a Python for the adapters: " << environment##_why_not; \
  const ::qtune::peers::PeerEnvironment& environment = *environment##_found
