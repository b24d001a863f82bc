#include "tuner/jit/kernel_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include "kernels/error.hpp"
#include "tuner/jit/sha256.hpp"

namespace qtune::jit {
namespace {

constexpr std::string_view kMagic = "qtune-kernel-cache";

std::string system_message(const std::string& what, const std::filesystem::path& path, int error_number) {
  return what + " " + path.string() + ": " + std::strerror(error_number);
}

bool is_valid_key(std::string_view key) {
  if (key.size() != 64) return false;
  for (char c : key) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

// Closes a file descriptor on every path out of a function.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  // Closes now and reports close's own failure (it can carry a delayed write error).
  int close() {
    const int result = ::close(fd_);
    fd_ = -1;
    return result;
  }

 private:
  int fd_;
};

bool read_whole_file(const std::filesystem::path& path, std::string& content) {
  FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.get() < 0) return false;
  struct stat status {};
  if (::fstat(file.get(), &status) != 0 || status.st_size <= 0) return false;
  content.resize(static_cast<std::size_t>(status.st_size));
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t got = ::read(file.get(), content.data() + done, content.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    done += static_cast<std::size_t>(got);
  }
  return true;
}

void write_all(int fd, std::string_view bytes, const std::filesystem::path& path) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t wrote = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0) QTUNE_LIBRARY_ERROR("system", system_message("cannot write cache file", path, errno));
    done += static_cast<std::size_t>(wrote);
  }
}

// A name no other thread or process picks: pid, thread and 64 random bits.
std::string unique_temporary_suffix() {
  thread_local std::mt19937_64 generator([] {
    std::random_device device;
    std::seed_seq seed{device(), device(), static_cast<unsigned>(::getpid()),
                       static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count())};
    return std::mt19937_64(seed);
  }());
  std::ostringstream suffix;
  suffix << ".tmp." << ::getpid() << '.' << std::hex << std::hash<std::thread::id>{}(std::this_thread::get_id()) << '.'
         << generator();
  return suffix.str();
}

nlohmann::json resources_to_json(const ResourceUsage& usage) {
  return {{"registers", usage.registers},
          {"spill_store_bytes", usage.spill_store_bytes},
          {"spill_load_bytes", usage.spill_load_bytes},
          {"static_shared_bytes", usage.static_shared_bytes},
          {"stack_frame_bytes", usage.stack_frame_bytes},
          {"constant_bytes", usage.constant_bytes},
          {"barriers", usage.barriers}};
}

ResourceUsage resources_from_json(const nlohmann::json& json) {
  ResourceUsage usage;
  usage.registers = json.at("registers").get<int>();
  usage.spill_store_bytes = json.at("spill_store_bytes").get<int>();
  usage.spill_load_bytes = json.at("spill_load_bytes").get<int>();
  usage.static_shared_bytes = json.at("static_shared_bytes").get<int>();
  usage.stack_frame_bytes = json.at("stack_frame_bytes").get<int>();
  usage.constant_bytes = json.at("constant_bytes").get<int>();
  usage.barriers = json.at("barriers").get<int>();
  return usage;
}

}  // namespace

KernelCache::KernelCache(std::filesystem::path directory) : directory_(std::move(directory)) {
  if (directory_.empty()) QTUNE_INPUT_ERROR("cache directory: the path is empty");
}

std::filesystem::path KernelCache::default_directory() {
  if (std::string dir = environment("QTUNE_CACHE_DIR"); !dir.empty()) return dir;
  if (std::string dir = environment("XDG_CACHE_HOME"); !dir.empty()) return std::filesystem::path(dir) / "qtune";
  if (std::string home = environment("HOME"); !home.empty()) return std::filesystem::path(home) / ".cache" / "qtune";
  QTUNE_INPUT_ERROR("QTUNE_CACHE_DIR: not set, and neither XDG_CACHE_HOME nor HOME is set to derive a cache directory");
}

std::filesystem::path KernelCache::entry_path(std::string_view key) const {
  if (!is_valid_key(key)) QTUNE_THROW(Error, "cache key '" + std::string(key) + "' is not 64 lowercase hex digits");
  return directory_ / "kernels" / std::string(key.substr(0, 2)) / (std::string(key) + ".qkc");
}

std::optional<CompiledKernel> KernelCache::load(std::string_view key) const {
  std::string content;
  if (!read_whole_file(entry_path(key), content)) return std::nullopt;

  const std::size_t header_end = content.find('\n');
  if (header_end == std::string::npos) return std::nullopt;
  std::istringstream header(content.substr(0, header_end));
  std::string magic, hash;
  int format = 0;
  std::size_t metadata_bytes = 0, cubin_bytes = 0;
  if (!(header >> magic >> format >> metadata_bytes >> cubin_bytes >> hash)) return std::nullopt;
  if (magic != kMagic || format != kCacheFormatVersion) return std::nullopt;
  const std::size_t body_begin = header_end + 1;
  if (content.size() - body_begin != metadata_bytes + cubin_bytes || cubin_bytes == 0) return std::nullopt;
  const std::string_view body = std::string_view(content).substr(body_begin);
  if (Sha256().update(body).finish_hex() != hash) return std::nullopt;

  CompiledKernel kernel;
  try {
    const nlohmann::json metadata = nlohmann::json::parse(body.substr(0, metadata_bytes));
    if (metadata.at("cache_key").get<std::string>() != key) return std::nullopt;
    kernel.cache_key = std::string(key);
    kernel.kernel_name = metadata.at("kernel_name").get<std::string>();
    kernel.lowered_name = metadata.at("lowered_name").get<std::string>();
    kernel.arch = metadata.at("arch").get<std::string>();
    kernel.log = metadata.at("log").get<std::string>();
    kernel.original_compile_seconds = metadata.at("compile_seconds").get<double>();
    kernel.resources = resources_from_json(metadata.at("resources"));
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // the hash matched but the metadata is not ours: treat it as damaged
  }
  const std::string_view cubin = body.substr(metadata_bytes);
  kernel.cubin.assign(cubin.begin(), cubin.end());
  kernel.from_cache = true;
  kernel.compile_seconds = 0;
  return kernel;
}

std::optional<std::string> KernelCache::unusable_reason() const {
  const std::filesystem::path kernels = directory_ / "kernels";
  std::error_code error;
  std::filesystem::create_directories(kernels, error);
  if (error) return "cannot create " + kernels.string() + ": " + error.message();
  const std::filesystem::path probe = kernels / ("probe" + unique_temporary_suffix());
  FileDescriptor file(::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (file.get() < 0) return system_message("cannot create a file in", kernels, errno);
  file.close();
  ::unlink(probe.c_str());
  return std::nullopt;
}

void KernelCache::store(const CompiledKernel& kernel) const {
  const std::filesystem::path final_path = entry_path(kernel.cache_key);
  if (kernel.cubin.empty()) QTUNE_THROW(Error, "refusing to cache an empty cubin for " + kernel.kernel_name);

  const nlohmann::json metadata = {
      {"format", kCacheFormatVersion},
      {"cache_key", kernel.cache_key},
      {"kernel_name", kernel.kernel_name},
      {"lowered_name", kernel.lowered_name},
      {"arch", kernel.arch},
      {"resources", resources_to_json(kernel.resources)},
      {"compile_seconds", kernel.original_compile_seconds},
      {"log", kernel.log},
      {"created_unix_seconds",
       std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count()}};
  // Invalid UTF-8 in a log must not abort the store.
  const std::string metadata_text = metadata.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const std::string_view cubin(kernel.cubin.data(), kernel.cubin.size());
  const std::string hash = Sha256().update(metadata_text).update(cubin).finish_hex();
  const std::string header = std::string(kMagic) + ' ' + std::to_string(kCacheFormatVersion) + ' ' +
                             std::to_string(metadata_text.size()) + ' ' + std::to_string(cubin.size()) + ' ' + hash + '\n';

  const std::filesystem::path directory = final_path.parent_path();
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) QTUNE_LIBRARY_ERROR("system", "cannot create cache directory " + directory.string() + ": " + error.message());

  const std::filesystem::path temporary_path = final_path.string() + unique_temporary_suffix();
  FileDescriptor file(::open(temporary_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (file.get() < 0) QTUNE_LIBRARY_ERROR("system", system_message("cannot create cache file", temporary_path, errno));
  try {
    write_all(file.get(), header, temporary_path);
    write_all(file.get(), metadata_text, temporary_path);
    write_all(file.get(), cubin, temporary_path);
    if (::fsync(file.get()) != 0) QTUNE_LIBRARY_ERROR("system", system_message("cannot fsync", temporary_path, errno));
    if (file.close() != 0) QTUNE_LIBRARY_ERROR("system", system_message("cannot close", temporary_path, errno));
    if (::rename(temporary_path.c_str(), final_path.c_str()) != 0) {
      QTUNE_LIBRARY_ERROR("system", system_message("cannot rename cache file to", final_path, errno));
    }
  } catch (...) {
    ::unlink(temporary_path.c_str());
    throw;
  }
  // The rename is durable only once the directory itself is on disk.
  FileDescriptor directory_file(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (directory_file.get() < 0 || ::fsync(directory_file.get()) != 0) {
    QTUNE_LIBRARY_ERROR("system", system_message("cannot fsync cache directory", directory, errno));
  }
}

}  // namespace qtune::jit
