#pragma once
// One function per top-level command; each adds its subcommand (and options, and callback) to the app.
#include <CLI/CLI.hpp>

namespace qtune::cli {

void add_formats_command(CLI::App& app);

}  // namespace qtune::cli
