#pragma once
// Who runs a format on an architecture, derived from the kernel families' own rules (KernelFamily::supports): what
// `qtune formats show`, `qtune compile --help` and the refusals of commands report, so that none claims more than
// the families compile and run.
#include <string>
#include <vector>

#include "kernels/family.hpp"

namespace qtune {

// The first family of kernel_families() that runs `format` on `sm` (the packing family), every family that runs it
// (in that order: what `tune --family auto` may search), or none, with every family's reason.
struct FamilySupport {
  int sm = 0;
  const KernelFamily* family = nullptr;         // null when no family runs the format on `sm`
  std::vector<const KernelFamily*> families;    // every family that runs it, `family` first
  std::string reason;                           // every family's distinct reason, '; '-separated, when none does
};
FamilySupport family_support(const FormatSpec& format, int sm);
// family_support for each of known_architectures().
std::vector<FamilySupport> family_support(const FormatSpec& format);
// The architectures of known_architectures() on which some family runs at least one preset format: the targets
// worth compiling for.
std::vector<int> architectures_with_a_family();

}  // namespace qtune
