// The baseline catalog: ids, parsing, FormatSpec -> baseline mapping, bytes and FLOP accounting, verified rows.
#include <gtest/gtest.h>

#include <set>

#include "kernels/error.hpp"
#include "tuner/baselines/baseline.hpp"

namespace qtune::baselines {
namespace {

TEST(BaselineCatalog, IdsAreUniqueAndRoundTrip) {
  std::set<std::string> ids;
  for (const auto& info : baseline_catalog()) {
    EXPECT_TRUE(ids.insert(info.id).second) << "duplicate id " << info.id;
    EXPECT_EQ(parse_baseline_id(info.id), info.kind);
    EXPECT_EQ(baseline_id(info.kind), info.id);
    EXPECT_EQ(info.id.rfind("cublaslt-", 0), 0u) << info.id;
  }
  EXPECT_EQ(ids, (std::set<std::string>{"cublaslt-f16", "cublaslt-bf16", "cublaslt-fp8-tensor", "cublaslt-fp8-outer",
                                        "cublaslt-fp8-block128", "cublaslt-int8"}));
}

TEST(BaselineCatalog, UnknownIdNamesTheFieldAndListsValidIds) {
  try {
    parse_baseline_id("cublaslt-fp4", "--baseline");
    FAIL() << "no InputError";
  } catch (const InputError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("--baseline"), std::string::npos) << message;
    EXPECT_NE(message.find("cublaslt-fp4"), std::string::npos) << message;
    EXPECT_NE(message.find("cublaslt-fp8-block128"), std::string::npos) << message;
  }
}

TEST(BaselineCatalog, ParsesListsWithAllDuplicatesAndSpaces) {
  EXPECT_EQ(parse_baseline_list("cublaslt-fp8-tensor, cublaslt-f16,cublaslt-fp8-tensor"),
            (std::vector<BaselineKind>{BaselineKind::Fp8Tensor, BaselineKind::F16}));
  const auto all = parse_baseline_list("all");
  ASSERT_EQ(all.size(), baseline_catalog().size());
  EXPECT_EQ(all.front(), BaselineKind::F16);
  EXPECT_EQ(parse_baseline_list("cublaslt-int8,all").front(), BaselineKind::Int8);
  EXPECT_THROW(parse_baseline_list("cublaslt-f16,,cublaslt-bf16"), InputError);
  EXPECT_THROW(parse_baseline_list(""), InputError);
}

TEST(BaselineCatalog, StorageBitsMatchTheOperandTypes) {
  EXPECT_EQ(baseline_info(BaselineKind::F16).weight_bits, 16);
  EXPECT_EQ(baseline_info(BaselineKind::Fp8Block128).activation_bits, 8);
  EXPECT_EQ(baseline_info(BaselineKind::Fp8Block128).output_bits, 16);
  EXPECT_EQ(baseline_info(BaselineKind::Int8).output_bits, 32);
  EXPECT_EQ(baseline_info(BaselineKind::Int8).output_type, "int32");
}

TEST(NaturalBaseline, EveryBaselineFormatMapsBackToItsBaseline) {
  for (const auto& info : baseline_catalog()) {
    const auto format = baseline_format(info.kind);
    if (info.kind == BaselineKind::F16 || info.kind == BaselineKind::BF16) {
      EXPECT_FALSE(format.has_value()) << info.id;
      continue;
    }
    ASSERT_TRUE(format.has_value()) << info.id;
    EXPECT_EQ(natural_baseline(*format), info.kind) << info.id;
  }
}

FormatSpec fp8_format(WeightScaleGranularity weight, ActivationScaleGranularity activation) {
  FormatSpec format = *baseline_format(BaselineKind::Fp8Tensor);
  format.weight_scale.granularity = weight;
  format.activation_scale.granularity = activation;
  return format;
}

TEST(NaturalBaseline, Fp8ScalingsPickTheirCublasLtMode) {
  EXPECT_EQ(natural_baseline(fp8_format(WeightScaleGranularity::PerTensor, ActivationScaleGranularity::PerTensor)),
            BaselineKind::Fp8Tensor);
  EXPECT_EQ(natural_baseline(fp8_format(WeightScaleGranularity::PerChannel, ActivationScaleGranularity::PerToken)),
            BaselineKind::Fp8Outer);
  // Scalings cuBLASLt has no mode for have no natural baseline.
  EXPECT_EQ(natural_baseline(fp8_format(WeightScaleGranularity::PerChannel, ActivationScaleGranularity::PerTensor)),
            std::nullopt);
  FormatSpec grouped = fp8_format(WeightScaleGranularity::PerGroup, ActivationScaleGranularity::PerToken);
  grouped.weight_scale.group_k = 128;
  EXPECT_EQ(natural_baseline(grouped), std::nullopt);
  FormatSpec blocks64 = *baseline_format(BaselineKind::Fp8Block128);
  blocks64.weight_scale.group_n = 64;
  blocks64.weight_scale.group_k = 64;
  blocks64.activation_scale.group_k = 64;
  EXPECT_EQ(natural_baseline(blocks64), std::nullopt);
}

TEST(NaturalBaseline, WeightOnlyFormatsCompareWithTheDenseGemmOfTheirActivations) {
  FormatSpec w4a16;  // int4 per channel, f16 activations
  w4a16.weight = ElementType::signed_int(4);
  w4a16.activation = ActivationType::F16;
  w4a16.activation_scale.granularity = ActivationScaleGranularity::None;
  EXPECT_EQ(natural_baseline(w4a16), BaselineKind::F16);
  w4a16.activation = ActivationType::BF16;
  EXPECT_EQ(natural_baseline(w4a16), BaselineKind::BF16);
}

TEST(NaturalBaseline, MixedQuantizedFormatsHaveNone) {
  FormatSpec w4a8 = *baseline_format(BaselineKind::Fp8Outer);
  w4a8.weight = ElementType::signed_int(4);  // int4 x fp8
  EXPECT_EQ(natural_baseline(w4a8), std::nullopt);
  FormatSpec w8a8_e5m2 = *baseline_format(BaselineKind::Fp8Outer);
  w8a8_e5m2.activation = ActivationType::E5M2;
  EXPECT_EQ(natural_baseline(w8a8_e5m2), std::nullopt);
  FormatSpec uint8_zp = *baseline_format(BaselineKind::Int8);
  uint8_zp.weight = ElementType::unsigned_int(8);
  uint8_zp.zero_point = ZeroPoint::Integer;
  EXPECT_EQ(natural_baseline(uint8_zp), std::nullopt);
}

TEST(Accounting, SixteenBitGemmMovesTwoBytesPerElement) {
  const GemmProblem problem{16, 4096, 8192};
  const TrafficModel bytes = traffic(BaselineKind::F16, problem);
  EXPECT_DOUBLE_EQ(bytes.activation_bytes, 16.0 * 8192 * 2);
  EXPECT_DOUBLE_EQ(bytes.weight_bytes, 4096.0 * 8192 * 2);
  EXPECT_DOUBLE_EQ(bytes.output_bytes, 16.0 * 4096 * 2);
  EXPECT_DOUBLE_EQ(bytes.total(), 16.0 * 8192 * 2 + 4096.0 * 8192 * 2 + 16.0 * 4096 * 2);
  EXPECT_DOUBLE_EQ(gemm_flops(problem), 2.0 * 16 * 4096 * 8192);
}

TEST(Accounting, ScalesAreCountedWithTheirOperand) {
  const GemmProblem problem{3, 260, 300};  // 3 K blocks of 128, 3 N blocks
  const TrafficModel tensor = traffic(BaselineKind::Fp8Tensor, problem);
  EXPECT_DOUBLE_EQ(tensor.activation_bytes, 3.0 * 300 + 4);
  EXPECT_DOUBLE_EQ(tensor.weight_bytes, 260.0 * 300 + 4);
  EXPECT_DOUBLE_EQ(tensor.output_bytes, 3.0 * 260 * 2);
  const TrafficModel outer = traffic(BaselineKind::Fp8Outer, problem);
  EXPECT_DOUBLE_EQ(outer.activation_bytes, 3.0 * 300 + 3 * 4);
  EXPECT_DOUBLE_EQ(outer.weight_bytes, 260.0 * 300 + 260 * 4);
  const TrafficModel blocks = traffic(BaselineKind::Fp8Block128, problem);
  EXPECT_DOUBLE_EQ(blocks.activation_bytes, 3.0 * 300 + 3 * 3 * 4);
  EXPECT_DOUBLE_EQ(blocks.weight_bytes, 260.0 * 300 + 3 * 3 * 4);
  const TrafficModel int8 = traffic(BaselineKind::Int8, problem);
  EXPECT_DOUBLE_EQ(int8.activation_bytes, 3.0 * 300);
  EXPECT_DOUBLE_EQ(int8.output_bytes, 3.0 * 260 * 4);
}

TEST(Accounting, ProblemValidationNamesTheField) {
  EXPECT_NO_THROW(validate_problem({1, 1, 1}));
  try {
    validate_problem({4, 0, 8}, "--shape");
    FAIL() << "no InputError";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("--shape"), std::string::npos);
    EXPECT_NE(std::string(error.what()).find('N'), std::string::npos);
  }
}

TEST(VerificationRows, AllRowsWhenFew) {
  EXPECT_EQ(verification_rows(5, 32), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(verification_rows(1, 32), (std::vector<int64_t>{0}));
  EXPECT_TRUE(verification_rows(0, 32).empty());
}

TEST(VerificationRows, SpreadOverLargeMIncludingBothEnds) {
  const auto rows = verification_rows(4096, 32);
  ASSERT_EQ(rows.size(), 32u);
  EXPECT_EQ(rows.front(), 0);
  EXPECT_EQ(rows.back(), 4095);
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_GT(rows[i], rows[i - 1]);
    EXPECT_LT(rows[i] - rows[i - 1], 4096 / 31 + 2) << "rows bunch up at " << i;
  }
  const auto few = verification_rows(33, 32);
  EXPECT_EQ(few.front(), 0);
  EXPECT_EQ(few.back(), 32);
}

}  // namespace
}  // namespace qtune::baselines
