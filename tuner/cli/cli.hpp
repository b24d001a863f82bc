#pragma once
// The qtune command line. main() only calls run_cli(); every command lives in a cmd_*.cpp of this folder.
namespace qtune::cli {

// Exit codes: 0 success, 1 a run-time failure, 2 bad input (usage, spec, config, JSON), 3 no GPU.
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitNoGpu = 3;

int run_cli(int argc, char** argv);

}  // namespace qtune::cli
