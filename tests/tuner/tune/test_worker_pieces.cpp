// The CPU parts of the GPU candidate job: which rows are verified, the reference on a sample of rows, the check
// that every output element was written, and how a worker is pinned to one GPU.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>

#include "kernels/codec.hpp"
#include "kernels/quantize.hpp"
#include "kernels/reference.hpp"
#include "tuner/providers/family_provider.hpp"
#include "tuner/tune/worker_backend.hpp"

namespace qtune::tune {
namespace {

using providers::count_non_finite;
using providers::rows_to_verify;

TEST(RowsToVerify, AllRowsOfSmallOutputsASeededSampleOfLargeOnes) {
  EXPECT_EQ(rows_to_verify(16, 256, 64, 1).size(), 16u);
  const auto rows = rows_to_verify(8192, 256, 64, 7);
  ASSERT_EQ(rows.size(), 64u);
  EXPECT_EQ(rows.front(), 0);
  EXPECT_EQ(rows.back(), 8191);
  EXPECT_TRUE(std::is_sorted(rows.begin(), rows.end()));
  EXPECT_EQ(std::set<std::int64_t>(rows.begin(), rows.end()).size(), rows.size());
  EXPECT_EQ(rows_to_verify(8192, 256, 64, 7), rows);  // seeded
  EXPECT_NE(rows_to_verify(8192, 256, 64, 8), rows);
}

// The reference of the selected rows must equal those rows of the full reference, for every kind of activation scale.
void expect_sampled_reference_matches(const std::string& spec) {
  SCOPED_TRACE(spec);
  const FormatSpec format = FormatSpec::parse(spec);
  const std::int64_t m = 40;
  const std::int64_t n = 128;  // the 128x128 block format needs N divisible by 128
  const std::int64_t k = 256;
  const QuantizedWeights weights = quantize_weights(format, random_normal(static_cast<size_t>(n * k), 3, 0.0f, 0.02f), n, k);
  const QuantizedActivations activations = quantize_activations(format, random_normal(static_cast<size_t>(m * k), 4), m, k);
  const ReferenceResult full = reference_gemm(activations, weights);
  const std::vector<std::int64_t> rows = rows_to_verify(m, 8, 6, 11);
  ASSERT_EQ(rows.size(), 6u);
  const QuantizedActivations selected = select_rows(activations, rows);
  EXPECT_EQ(selected.m, 6);
  const ReferenceResult sampled = reference_gemm(selected, weights);
  for (size_t i = 0; i < rows.size(); ++i) {
    for (std::int64_t col = 0; col < n; ++col) {
      EXPECT_EQ(sampled.output_bits[i * static_cast<size_t>(n) + static_cast<size_t>(col)],
                full.output_bits[static_cast<size_t>(rows[i] * n + col)])
          << "row " << rows[i] << " col " << col;
    }
  }
}

TEST(SelectRows, SampledReferenceEqualsTheFullReferenceRows) {
  expect_sampled_reference_matches("w4a16-int4-ch");   // f16 activations, no scales
  expect_sampled_reference_matches("w8a8-int8-ch");    // per-token scales
  expect_sampled_reference_matches("w8a8-fp8-tensor"); // one scale for the tensor
  expect_sampled_reference_matches("w8a8-fp8-block128x128");  // per 1x128 group
}

TEST(CountNonFinite, FindsThePoisonAndInfinities) {
  std::vector<std::uint16_t> f16 = {float_to_f16_bits(1.0f), 0xFFFF, float_to_f16_bits(-2.5f), 0x7C00, 0x0000};
  EXPECT_EQ(count_non_finite(f16, OutputType::F16), 2);
  std::vector<std::uint16_t> bf16 = {float_to_bf16_bits(3.0f), 0xFFFF, 0x7F80, float_to_bf16_bits(-1e30f)};
  EXPECT_EQ(count_non_finite(bf16, OutputType::BF16), 2);
}

TEST(WorkerOptions, PinsTheWorkerToOneGpuThroughEnv) {
  measure::WorkerOptions base;
  base.executable = "/opt/qtune/bin/qtune";
  const measure::WorkerOptions pinned = worker_options_for_device(base, "GPU-1234");
  EXPECT_EQ(pinned.executable, "/usr/bin/env");
  ASSERT_EQ(pinned.arguments.size(), 3u);
  EXPECT_EQ(pinned.arguments[0], "CUDA_VISIBLE_DEVICES=GPU-1234");
  EXPECT_EQ(pinned.arguments[1], "/opt/qtune/bin/qtune");
  EXPECT_EQ(pinned.arguments[2], "__worker");
  const measure::WorkerOptions self = worker_options_for_device(measure::WorkerOptions{}, "0");
  EXPECT_NE(self.arguments[1], "/proc/self/exe");  // resolved, since env would otherwise run itself
  EXPECT_EQ(worker_options_for_device(base, "").executable, base.executable);
}

TEST(WorkerBackends, ThereIsOneSlotPerVisibleDevice) {
  const BackendFactory backends = worker_backends({"GPU-a", "GPU-b"}, default_measure_settings(), "/tmp/cache");
  EXPECT_THROW(backends(2), std::out_of_range);  // a third slot has no GPU of its own
}

}  // namespace
}  // namespace qtune::tune
