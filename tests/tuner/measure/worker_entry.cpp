// Lets test_tuner serve as the measuring worker: the worker tests start this executable as
// `test_tuner __worker --fd N` (tests/common/test_main.cpp calls this when argv[1] is "__worker"). It serves every
// job qtune's worker serves, from the one registry.
#include "tuner/measure/worker.hpp"
#include "tuner/tune/worker_jobs.hpp"

extern "C" int qtune_test_worker_main(int argc, char** argv) {
  qtune::tune::register_worker_jobs();
  return qtune::measure::worker_main(argc, argv);
}
