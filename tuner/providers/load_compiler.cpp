#include "tuner/providers/load_compiler.hpp"

#include "kernels/error.hpp"

namespace qtune::providers {

jit::Compiler& LoadCompiler::compiler_for(const LoadOptions& options) {
  const std::string directory = options.cache_directory ? options.cache_directory->string() : std::string{};
  if (!compiler_ || cache_directory_ != directory) {
    jit::CompilerSettings settings;
    if (options.cache_directory) settings.cache_directory = *options.cache_directory;
    settings.threads = 1;
    compiler_ = std::make_unique<jit::Compiler>(settings);
    cache_directory_ = directory;
  }
  return *compiler_;
}

void check_expected_cache_key(const jit::CompiledKernel& kernel, const LoadOptions& options) {
  if (!options.expected_cache_key.empty() && kernel.cache_key != options.expected_cache_key) {
    QTUNE_THROW(Error, "gemm-candidate: the worker built cache key " + kernel.cache_key + " but the tuner compiled " +
                           options.expected_cache_key + " (different kernel sources or NVRTC?)");
  }
}

}  // namespace qtune::providers
