#pragma once
// The compiler a measuring worker loads configurations with, shared by the providers that compile through the kernel
// cache (family_provider, moe_provider): one thread (the parent already compiled in parallel), on the cache directory
// the parent filled, made again when the load options name another one.
#include <memory>
#include <string>

#include "tuner/jit/compiler.hpp"
#include "tuner/providers/provider.hpp"

namespace qtune::providers {

class LoadCompiler {
 public:
  // The compiler for `options.cache_directory`. Not thread-safe: callers hold their provider's lock.
  jit::Compiler& compiler_for(const LoadOptions& options);

 private:
  std::unique_ptr<jit::Compiler> compiler_;
  std::string cache_directory_;
};

// Throws Error when the worker built another cache key than the one the parent compiled (different kernel sources
// or NVRTC); nothing when the options name none.
void check_expected_cache_key(const jit::CompiledKernel& kernel, const LoadOptions& options);

}  // namespace qtune::providers
