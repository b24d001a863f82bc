// `qtune __worker --fd N`: the measuring worker process (tuner/measure/worker.hpp). Hidden from --help: the
// parent starts it, never a person.
#include <cstdlib>

#include "tuner/cli/commands.hpp"
#include "tuner/measure/worker.hpp"
#include "tuner/tune/worker_backend.hpp"

namespace qtune::cli {

void add_worker_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand("__worker", "Serve measurement jobs for a parent qtune process (internal)");
  command->group("");
  auto socket_fd = std::make_shared<int>(-1);
  command->add_option("--fd", *socket_fd, "The socket inherited from the parent")
      ->check(integer_in(0, INT32_MAX))
      ->required();
  command->callback([socket_fd] {
    // Other parts of qtune register their jobs when their commands are added (e.g. add_bench_command) or here,
    // before serving; run_worker adds the selftest jobs.
    tune::register_tune_jobs();
    const int exit_code = measure::run_worker(*socket_fd);
    // The exit status tells the parent why the worker stopped (e.g. after a sticky CUDA error).
    if (exit_code != 0) std::exit(exit_code);
  });
}

}  // namespace qtune::cli
