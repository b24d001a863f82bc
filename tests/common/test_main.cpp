#include <gtest/gtest.h>

#include <string_view>

// Test executables that exercise the measuring worker define this (tests/tuner/measure/worker_entry.cpp): the
// tests start their own executable as the worker, as `TEST_BINARY __worker --fd N`.
extern "C" int qtune_test_worker_main(int argc, char** argv) __attribute__((weak));

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "__worker" && qtune_test_worker_main != nullptr) {
    return qtune_test_worker_main(argc, argv);
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
