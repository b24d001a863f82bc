#pragma once
// Reads the resource report that ptxas prints with -v (NVRTC option --ptxas-options=-v) into ResourceUsage.
#include <optional>
#include <string_view>

#include "tuner/jit/compiler.hpp"

namespace qtune::jit {

// The report for the entry function whose (lowered) name is `kernel_symbol`, or nullopt when the log has none.
// A report looks like:
//   ptxas info    : Compiling entry function 'k' for 'sm_90a'
//   ptxas info    : Function properties for k
//   ptxas         .     784 bytes stack frame, 1492 bytes spill stores, 1128 bytes spill loads
//   ptxas info    : Used 32 registers, used 1 barriers, 784 bytes cumulative stack size, 4096 bytes smem, 372 bytes cmem[0]
std::optional<ResourceUsage> parse_ptxas_report(std::string_view log, std::string_view kernel_symbol);

}  // namespace qtune::jit
