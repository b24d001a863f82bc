#pragma once
// Shared by the kernel compile and GPU tests: the NVRTC request for one configuration of a family, and compiling
// a batch of them with a check of each kernel.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "kernels/family.hpp"
#include "kernels/format.hpp"
#include "tuner/jit/compiler.hpp"

namespace qtune::test_support {

inline jit::CompileRequest family_compile_request(const KernelFamily& family, const KernelConfig& config,
                                                  const FormatSpec& format, const std::string& arch) {
  jit::CompileRequest request;
  request.source = family.instantiation_source(config, format, arch);
  request.kernel_name = family.kernel_name(config, format);
  request.arch = arch;
  return request;
}

// Compiles every request (labels[i] names requests[i]) and runs `check` on each kernel that compiled; a failed compile
// is a test failure naming its label and the start of the compiler's message.
inline void check_each_compiled(const std::vector<jit::CompileRequest>& requests, const std::vector<std::string>& labels,
                                const std::function<void(const std::string&, const jit::CompiledKernel&)>& check) {
  ASSERT_EQ(labels.size(), requests.size());
  const std::vector<jit::CompileOutcome> outcomes = jit::Compiler().compile_all(requests);
  ASSERT_EQ(outcomes.size(), requests.size());
  for (size_t i = 0; i < outcomes.size(); ++i) {
    if (!outcomes[i].ok()) {
      ADD_FAILURE() << labels[i] << ": " << outcomes[i].error_message.substr(0, 4000);
      continue;
    }
    check(labels[i], *outcomes[i].kernel);
  }
}

}  // namespace qtune::test_support
