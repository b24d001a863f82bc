#pragma once
// Where tests find the qtune executable: beside the running test binary (a carried bundle), else the build tree.
#include <filesystem>
#include <system_error>

namespace qtune::test_support {

inline std::filesystem::path qtune_executable() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const std::filesystem::path beside = self.parent_path() / "qtune";
    if (std::filesystem::exists(beside, error)) return beside;
  }
  return std::filesystem::path(QTUNE_BINARY_DIR) / "bin" / "qtune";
}

}  // namespace qtune::test_support
