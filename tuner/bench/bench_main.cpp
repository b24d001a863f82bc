// Google Benchmark's main for qtune-bench; the benchmarks live in the other files of tuner/bench/.
#include <benchmark/benchmark.h>

BENCHMARK_MAIN();
