#pragma once
// Helpers shared by the JIT tests: a scratch directory that removes itself, and small kernel sources.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

namespace qtune::jit::testing_support {

// A fresh directory under the system temp directory, removed with its content at scope exit.
class ScratchDirectory {
 public:
  ScratchDirectory() {
    std::string pattern = (std::filesystem::temp_directory_path() / "qtune-jit-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~ScratchDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Every regular file under `directory`, recursively.
inline std::vector<std::filesystem::path> files_under(const std::filesystem::path& directory) {
  std::vector<std::filesystem::path> files;
  if (!std::filesystem::exists(directory)) return files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(directory)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  return files;
}

// A kernel that includes a header given in memory; its output depends on the header so a change there matters.
inline const char* kScaleSource = R"(#include "test/scale.cuh"
extern "C" __global__ void scale_kernel(const float* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = qtune_test::scale(in[i]);
}
)";

inline const char* kScaleHeader = R"(#pragma once
namespace qtune_test {
__device__ inline float scale(float x) { return 3.0f * x + 1.0f; }
}
)";

}  // namespace qtune::jit::testing_support
