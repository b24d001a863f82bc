#pragma once
// The error types every qtune library throws. Library code never exits; the CLI maps errors to exit codes.
#include <stdexcept>
#include <string>

namespace qtune {

// Base of every qtune error: a message plus the file:line that raised it.
class Error : public std::runtime_error {
 public:
  Error(const std::string& message, const char* file, int line)
      : std::runtime_error(message), file_(file), line_(line) {}
  const std::string& file() const { return file_; }
  int line() const { return line_; }
  // "message (file:line)"; what() stays the bare message so one-line user errors read cleanly.
  std::string located() const { return std::string(what()) + " (" + file_ + ":" + std::to_string(line_) + ")"; }

 private:
  std::string file_;
  int line_;
};

// Bad user input (spec, config, JSON, shape). The message names the offending field; the CLI exits with status 2.
class InputError : public Error {
 public:
  using Error::Error;
};

// A library call failed. `library` is "CUDA driver", "CUDA runtime", "NVRTC", "CUPTI", "NVML", "cuBLASLt", "SQLite" or "system".
class LibraryError : public Error {
 public:
  LibraryError(std::string library, const std::string& message, const char* file, int line)
      : Error(library + ": " + message, file, line), library_(std::move(library)) {}
  const std::string& library() const { return library_; }

 private:
  std::string library_;
};

// A command needs a GPU and none is usable (no driver, no device). The message says which.
class NoGpuError : public Error {
 public:
  using Error::Error;
};

// The requested combination is valid but not supported here (e.g. a format on an architecture).
class UnsupportedError : public Error {
 public:
  using Error::Error;
};

}  // namespace qtune

#define QTUNE_THROW(ErrorType, message) throw ErrorType((message), __FILE__, __LINE__)
#define QTUNE_INPUT_ERROR(message) QTUNE_THROW(::qtune::InputError, message)
#define QTUNE_LIBRARY_ERROR(library, message) throw ::qtune::LibraryError((library), (message), __FILE__, __LINE__)
