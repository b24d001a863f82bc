#pragma once
// The on-disk cache of compiled kernels, shared safely by threads and processes.
// One file per entry, <dir>/kernels/<key[0:2]>/<key>.qkc:
//   line 1: "qtune-kernel-cache <format> <metadata bytes> <cubin bytes> <sha256 of metadata and cubin>\n"
//   then the metadata JSON (names, arch, resources, log, compile seconds), then the cubin.
// Writers write a uniquely named temporary file in the same directory, fsync it, then rename it over the entry, so
// a reader sees a whole entry or none. Readers check sizes and the hash; a damaged entry reads as a miss and is
// replaced by the next store.
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "tuner/jit/compiler.hpp"

namespace qtune::jit {

inline constexpr int kCacheFormatVersion = 1;

class KernelCache {
 public:
  explicit KernelCache(std::filesystem::path directory);

  // $QTUNE_CACHE_DIR, else $XDG_CACHE_HOME/qtune, else $HOME/.cache/qtune. Throws InputError naming
  // QTUNE_CACHE_DIR when none of them is set.
  static std::filesystem::path default_directory();

  const std::filesystem::path& directory() const { return directory_; }
  // Where the entry of `key` (64 lowercase hex digits) lives.
  std::filesystem::path entry_path(std::string_view key) const;

  // The entry stored under `key`, with from_cache set and compile_seconds 0; nullopt if absent, unreadable or damaged.
  std::optional<CompiledKernel> load(std::string_view key) const;
  // Why entries cannot be stored here (the folder cannot be created, or a file cannot be written in it), or nullopt
  // when the cache is usable. Creates the folder; leaves no file behind.
  std::optional<std::string> unusable_reason() const;
  // Stores `kernel` under kernel.cache_key, replacing any entry. Throws LibraryError("system", ...) on I/O failure.
  void store(const CompiledKernel& kernel) const;

 private:
  std::filesystem::path directory_;
};

}  // namespace qtune::jit
