#include "tuner/jit/ptxas_report.hpp"

#include <regex>
#include <string>

namespace qtune::jit {
namespace {

// The number written just before `unit` in `line` ("... 4096 bytes smem" -> 4096 for unit "bytes smem"), if present.
std::optional<int> number_before(const std::string& line, const std::regex& pattern) {
  std::smatch match;
  if (!std::regex_search(line, match, pattern)) return std::nullopt;
  return std::stoi(match[1].str());
}

int sum_of_all(const std::string& line, const std::regex& pattern) {
  int total = 0;
  for (auto it = std::sregex_iterator(line.begin(), line.end(), pattern); it != std::sregex_iterator(); ++it) {
    total += std::stoi((*it)[1].str());
  }
  return total;
}

}  // namespace

std::optional<ResourceUsage> parse_ptxas_report(std::string_view log, std::string_view kernel_symbol) {
  static const std::regex entry_pattern(R"(Compiling entry function '([^']+)')");
  static const std::regex properties_pattern(R"(Function properties for (\S+))");
  static const std::regex stack_pattern(R"((\d+) bytes stack frame)");
  static const std::regex spill_store_pattern(R"((\d+) bytes spill stores)");
  static const std::regex spill_load_pattern(R"((\d+) bytes spill loads)");
  static const std::regex registers_pattern(R"(Used (\d+) registers)");
  static const std::regex barriers_pattern(R"(used (\d+) barriers)");
  static const std::regex shared_pattern(R"((\d+) bytes smem)");
  static const std::regex constant_pattern(R"((\d+) bytes cmem\[\d+\])");

  ResourceUsage usage;
  bool in_kernel = false;        // between "Compiling entry function 'kernel'" and the next entry function
  bool in_properties = false;    // the line after "Function properties for kernel" holds its stack and spills
  bool found_registers = false;
  std::size_t begin = 0;
  while (begin <= log.size()) {
    std::size_t end = log.find('\n', begin);
    if (end == std::string_view::npos) end = log.size();
    const std::string line(log.substr(begin, end - begin));
    begin = end + 1;

    std::smatch match;
    if (std::regex_search(line, match, entry_pattern)) {
      if (in_kernel && found_registers) break;  // our kernel's block is over
      in_kernel = match[1].str() == kernel_symbol;
      in_properties = false;
      continue;
    }
    if (!in_kernel) continue;
    if (std::regex_search(line, match, properties_pattern)) {
      in_properties = match[1].str() == kernel_symbol;
      continue;
    }
    if (in_properties) {
      if (auto stack = number_before(line, stack_pattern)) {
        usage.stack_frame_bytes = *stack;
        usage.spill_store_bytes = number_before(line, spill_store_pattern).value_or(0);
        usage.spill_load_bytes = number_before(line, spill_load_pattern).value_or(0);
        in_properties = false;
        continue;
      }
    }
    if (auto registers = number_before(line, registers_pattern)) {
      usage.registers = *registers;
      usage.barriers = number_before(line, barriers_pattern).value_or(0);
      usage.static_shared_bytes = number_before(line, shared_pattern).value_or(0);
      usage.constant_bytes = sum_of_all(line, constant_pattern);
      found_registers = true;
    }
  }
  if (!found_registers) return std::nullopt;
  return usage;
}

}  // namespace qtune::jit
