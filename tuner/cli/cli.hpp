#pragma once
// The qtune command line. main() only calls run_cli(); every command lives in a cmd_*.cpp of this folder.
namespace qtune::cli {

// Exit codes: 0 success, 1 a run-time failure, 2 bad input (usage, spec, config, JSON), 3 no GPU, 130 stopped by a
// signal (as shells report a Ctrl-C).
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitNoGpu = 3;
inline constexpr int kExitInterrupted = 130;

// A command that ends without an error but with another status (an interrupted tune, a worker after a fault) says
// so here; run_cli returns it. Commands never call exit().
void set_exit_status(int status);

int run_cli(int argc, char** argv);

}  // namespace qtune::cli
