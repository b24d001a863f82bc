#pragma once
// What every libFuzzer target of tests/fuzz shares: the fuzz bytes as text, InputError as the parser's expected way to
// refuse them, and a promise of the parser that does not hold as a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/error.hpp"

namespace qtune::fuzz {

// Calls `parse` on the bytes. Any exception but InputError escapes; libFuzzer then keeps the input (std::terminate).
template <typename Parse>
int parse_or_reject(const std::uint8_t* data, std::size_t size, Parse&& parse) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    parse(text);
  } catch (const InputError&) {
    // The parser refused the input with a message naming the field: what it should do.
  }
  return 0;
}

// A broken promise of the parser (e.g. a round trip): says which and aborts, so that libFuzzer keeps the input.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "qtune fuzz finding: %s\n", what.c_str());
  std::abort();
}

}  // namespace qtune::fuzz
