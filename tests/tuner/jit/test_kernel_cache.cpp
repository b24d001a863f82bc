#include "tuner/jit/kernel_cache.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "kernels/error.hpp"
#include "tests/common/scoped_environment.hpp"
#include "tests/tuner/jit/jit_test_support.hpp"
#include "tuner/jit/sha256.hpp"

namespace qtune::jit {
namespace {

using testing_support::files_under;
using testing_support::ScratchDirectory;

// A kernel whose cubin is `size` bytes of `fill`, so a reader can tell whether it got one writer's bytes whole.
CompiledKernel fake_kernel(const std::string& key, char fill, std::size_t size = 20000) {
  CompiledKernel kernel;
  kernel.cache_key = key;
  kernel.kernel_name = "fake_kernel";
  kernel.lowered_name = "fake_kernel";
  kernel.arch = "sm_90a";
  kernel.cubin.assign(size, fill);
  kernel.resources = {.registers = 40, .spill_store_bytes = 8, .spill_load_bytes = 4, .static_shared_bytes = 1024,
                      .stack_frame_bytes = 16, .constant_bytes = 372, .barriers = 1};
  kernel.log = "ptxas info    : Used 40 registers";
  kernel.original_compile_seconds = 0.25;
  kernel.compile_seconds = 0.25;
  return kernel;
}

// True when the cubin is `size` copies of one byte: one writer's content, not a mix.
bool is_whole(const CompiledKernel& kernel, std::size_t size = 20000) {
  if (kernel.cubin.size() != size) return false;
  for (char byte : kernel.cubin) {
    if (byte != kernel.cubin.front()) return false;
  }
  return true;
}

const std::string kKey = sha256_hex("some instantiation");

TEST(KernelCache, StoreThenLoadRoundTrips) {
  ScratchDirectory scratch;
  const KernelCache cache(scratch.path());
  EXPECT_FALSE(cache.load(kKey).has_value());
  const CompiledKernel stored = fake_kernel(kKey, 'x');
  cache.store(stored);
  const std::optional<CompiledKernel> loaded = cache.load(kKey);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_TRUE(loaded->from_cache);
  EXPECT_EQ(loaded->compile_seconds, 0);
  EXPECT_EQ(loaded->original_compile_seconds, 0.25);
  EXPECT_EQ(loaded->cache_key, kKey);
  EXPECT_EQ(loaded->kernel_name, stored.kernel_name);
  EXPECT_EQ(loaded->lowered_name, stored.lowered_name);
  EXPECT_EQ(loaded->arch, stored.arch);
  EXPECT_EQ(loaded->log, stored.log);
  EXPECT_EQ(loaded->cubin, stored.cubin);
  EXPECT_EQ(loaded->resources.registers, 40);
  EXPECT_EQ(loaded->resources.spill_store_bytes, 8);
  EXPECT_EQ(loaded->resources.spill_load_bytes, 4);
  EXPECT_EQ(loaded->resources.static_shared_bytes, 1024);
  EXPECT_EQ(loaded->resources.stack_frame_bytes, 16);
  EXPECT_EQ(loaded->resources.constant_bytes, 372);
  EXPECT_EQ(loaded->resources.barriers, 1);
  // Exactly one file, the entry, and no temporary left behind.
  const auto files = files_under(scratch.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0], cache.entry_path(kKey));
}

TEST(KernelCache, DamagedEntriesReadAsMissesAndAreReplaced) {
  ScratchDirectory scratch;
  const KernelCache cache(scratch.path());
  cache.store(fake_kernel(kKey, 'x'));
  const std::filesystem::path path = cache.entry_path(kKey);
  const auto full_size = std::filesystem::file_size(path);

  // Truncated (a torn write from a writer that did not use rename).
  std::filesystem::resize_file(path, full_size - 100);
  EXPECT_FALSE(cache.load(kKey).has_value());

  // Same size, one cubin byte flipped.
  cache.store(fake_kernel(kKey, 'x'));
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(full_size - 10));
    file.put('y');
  }
  EXPECT_EQ(std::filesystem::file_size(path), full_size);
  EXPECT_FALSE(cache.load(kKey).has_value());

  // Garbage and an empty file.
  std::ofstream(path, std::ios::binary | std::ios::trunc) << "not a cache entry";
  EXPECT_FALSE(cache.load(kKey).has_value());
  std::ofstream(path, std::ios::binary | std::ios::trunc).close();
  EXPECT_FALSE(cache.load(kKey).has_value());

  // An intact entry filed under another key does not answer for this one.
  const std::string other_key = sha256_hex("another instantiation");
  cache.store(fake_kernel(other_key, 'z'));
  std::filesystem::copy_file(cache.entry_path(other_key), path, std::filesystem::copy_options::overwrite_existing);
  EXPECT_FALSE(cache.load(kKey).has_value());

  cache.store(fake_kernel(kKey, 'x'));
  const std::optional<CompiledKernel> reloaded = cache.load(kKey);
  ASSERT_TRUE(reloaded.has_value());
  EXPECT_TRUE(is_whole(*reloaded));
  EXPECT_EQ(reloaded->cubin.front(), 'x');
}

TEST(KernelCache, RejectsKeysThatAreNotHashes) {
  ScratchDirectory scratch;
  const KernelCache cache(scratch.path());
  EXPECT_THROW(cache.entry_path("../../etc/passwd"), Error);
  EXPECT_THROW(cache.load(std::string(64, 'G')), Error);
  EXPECT_THROW(cache.store(fake_kernel("ABC", 'x')), Error);
}

TEST(KernelCache, UnwritableDirectoryThrowsSystemError) {
  ScratchDirectory scratch;
  const std::filesystem::path blocker = scratch.path() / "file";
  std::ofstream(blocker) << "a file where the cache directory should be";
  const KernelCache cache(blocker);
  try {
    cache.store(fake_kernel(kKey, 'x'));
    FAIL() << "store into a path below a regular file succeeded";
  } catch (const LibraryError& error) {
    EXPECT_EQ(error.library(), "system");
    EXPECT_NE(std::string(error.what()).find(blocker.string()), std::string::npos) << error.what();
  }
}

// Threads write different cubins under one key while others read: every read sees one writer's whole entry,
// and one valid entry and no temporary file remain.
TEST(KernelCache, ConcurrentThreadsLeaveOneValidEntry) {
  ScratchDirectory scratch;
  const KernelCache cache(scratch.path());
  constexpr int kWriters = 6;
  constexpr int kStoresEach = 15;
  std::atomic<bool> writing{true};
  std::atomic<bool> stored_once{false};
  std::atomic<int> torn_reads{0}, whole_reads{0}, missing_reads{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (writing.load()) {
        // Once an entry exists, rewriting it must never make it vanish or look damaged to a reader.
        const bool must_exist = stored_once.load();
        if (std::optional<CompiledKernel> kernel = cache.load(kKey)) {
          (is_whole(*kernel) ? whole_reads : torn_reads).fetch_add(1);
        } else if (must_exist) {
          missing_reads.fetch_add(1);
        }
      }
    });
  }
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < kStoresEach; ++i) {
        try {
          cache.store(fake_kernel(kKey, static_cast<char>('a' + w)));
          stored_once = true;
        } catch (...) {
          failures.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& writer : writers) writer.join();
  writing = false;
  for (std::thread& reader : readers) reader.join();

  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(torn_reads.load(), 0);
  EXPECT_EQ(missing_reads.load(), 0);
  EXPECT_GT(whole_reads.load(), 0) << "the readers never overlapped the writers";
  const auto files = files_under(scratch.path());
  ASSERT_EQ(files.size(), 1u) << "temporary files left behind";
  const std::optional<CompiledKernel> final_entry = cache.load(kKey);
  ASSERT_TRUE(final_entry.has_value());
  EXPECT_TRUE(is_whole(*final_entry));
}

// Same, across processes: forked children store under one key at once.
TEST(KernelCache, ConcurrentProcessesLeaveOneValidEntry) {
  ScratchDirectory scratch;
  const KernelCache cache(scratch.path());
  constexpr int kChildren = 4;
  std::vector<pid_t> children;
  for (int c = 0; c < kChildren; ++c) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) {
      int status = 0;
      try {
        for (int i = 0; i < 20; ++i) {
          cache.store(fake_kernel(kKey, static_cast<char>('k' + c)));
          std::optional<CompiledKernel> seen = cache.load(kKey);
          if (!seen || !is_whole(*seen)) status = 2;  // a reader in another process must never see a torn entry
        }
      } catch (...) {
        status = 1;
      }
      ::_exit(status);
    }
    children.push_back(pid);
  }
  for (pid_t child : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "child " << child << " (1: store threw, 2: saw a torn or missing entry)";
  }
  const auto files = files_under(scratch.path());
  ASSERT_EQ(files.size(), 1u) << "temporary files left behind";
  const std::optional<CompiledKernel> final_entry = cache.load(kKey);
  ASSERT_TRUE(final_entry.has_value());
  EXPECT_TRUE(is_whole(*final_entry));
  EXPECT_GE(final_entry->cubin.front(), 'k');
  EXPECT_LT(final_entry->cubin.front(), 'k' + kChildren);
}

using test_support::ScopedEnvironment;

TEST(KernelCache, DefaultDirectoryFollowsEnvironment) {
  {
    ScopedEnvironment qtune("QTUNE_CACHE_DIR", "/tmp/qtune-explicit");
    ScopedEnvironment xdg("XDG_CACHE_HOME", "/tmp/xdg");
    EXPECT_EQ(KernelCache::default_directory(), "/tmp/qtune-explicit");
  }
  {
    ScopedEnvironment qtune("QTUNE_CACHE_DIR", nullptr);
    ScopedEnvironment xdg("XDG_CACHE_HOME", "/tmp/xdg");
    EXPECT_EQ(KernelCache::default_directory(), "/tmp/xdg/qtune");
  }
  {
    ScopedEnvironment qtune("QTUNE_CACHE_DIR", nullptr);
    ScopedEnvironment xdg("XDG_CACHE_HOME", nullptr);
    ScopedEnvironment home("HOME", "/home/someone");
    EXPECT_EQ(KernelCache::default_directory(), "/home/someone/.cache/qtune");
  }
  {
    ScopedEnvironment qtune("QTUNE_CACHE_DIR", nullptr);
    ScopedEnvironment xdg("XDG_CACHE_HOME", nullptr);
    ScopedEnvironment home("HOME", nullptr);
    EXPECT_THROW(KernelCache::default_directory(), InputError);
  }
}

}  // namespace
}  // namespace qtune::jit
