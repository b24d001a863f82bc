#pragma once
// The one check of a kernel's output against the CPU reference (reference.hpp), for every provider: the families'
// launcher (gemm::verify_output) and the cuBLASLt baselines (baselines::compare_with_reference) decode their
// outputs to floats and compare them here, each with its rules.
#include <cstdint>
#include <string>
#include <vector>

namespace qtune {

struct CheckRules {
  double tolerance = 0;  // the largest relative (Frobenius) error that passes
  // Also fail when an element is off by more than 8 x tolerance x rms(reference), so that a wrong column cannot hide
  // in a norm: the families' rule. cuBLASLt's outputs are judged by the norm (and exact int32 results) alone.
  bool element_bound = true;
};

struct OutputCheck {
  bool passed = false;
  double relative_error = 0;  // Frobenius, against the unrounded f32 reference; infinite with NaN/inf in the output
  double tolerance = 0;
  int64_t nan_count = 0;   // NaN or inf in the output (a poisoned element never written shows here)
  int64_t bad_count = 0;   // elements beyond the per-element bound (CheckRules::element_bound)
  int64_t first_bad = -1;  // first such element (row-major index), -1 if none
  float first_bad_got = 0, first_bad_expected = 0;
  int64_t worst = -1;      // element with the largest absolute error
  float worst_got = 0, worst_expected = 0;
  int64_t m = 0, n = 0;
  // "PASS rel 1.2e-3 <= 5e-3 (MxN); worst (r,c) got x expected y; ..." for test and sweep logs.
  std::string summary() const;
};

// Compares `got` with `expected` (the same number of elements, `n` per row). Passes when there is no NaN/inf, the
// relative error is within the tolerance and, with element_bound, no element is beyond the bound. Throws Error when
// the sizes differ.
OutputCheck compare_output(const std::vector<float>& got, const std::vector<float>& expected, int64_t n,
                           const CheckRules& rules);

}  // namespace qtune
