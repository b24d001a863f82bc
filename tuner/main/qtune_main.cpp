#include "tuner/cli/cli.hpp"

int main(int argc, char** argv) { return qtune::cli::run_cli(argc, argv); }
