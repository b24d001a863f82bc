// `qtune __worker --fd N`: the measuring worker process (tuner/measure/worker.hpp). Hidden from --help: the
// parent starts it, never a person.
#include "tuner/cli/cli.hpp"
#include "tuner/cli/commands.hpp"
#include "tuner/measure/worker.hpp"
#include "tuner/tune/worker_jobs.hpp"

namespace qtune::cli {

void add_worker_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand("__worker", "Serve measurement jobs for a parent qtune process (internal)");
  command->group("");
  auto socket_fd = std::make_shared<int>(-1);
  command->add_option("--fd", *socket_fd, "The socket inherited from the parent")
      ->check(integer_in(0, INT32_MAX))
      ->required();
  command->callback([socket_fd] {
    // Every job qtune has, from its one registry.
    tune::register_worker_jobs();
    // The exit status tells the parent why the worker stopped (e.g. after a sticky CUDA error).
    set_exit_status(measure::run_worker(*socket_fd));
  });
}

}  // namespace qtune::cli
