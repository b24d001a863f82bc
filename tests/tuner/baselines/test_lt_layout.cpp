// The row-major -> cuBLASLt (column-major) mapping. The descriptors are checked by executing them: a small
// column-major GEMM that follows cuBLASLt's documented semantics (D = op(A) * op(B), element (i, j) of a
// column-major matrix at i + j * ld) reads the row-major buffers through them and must produce row-major C = A * W^T.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "tuner/baselines/lt_layout.hpp"

namespace qtune::baselines {
namespace {

// op(X)(i, j) for a column-major matrix described by `desc` stored in `data`.
double op_element(const std::vector<double>& data, const LtMatrix& desc, cublasOperation_t op, int64_t i, int64_t j) {
  const int64_t row = op == CUBLAS_OP_N ? i : j;
  const int64_t col = op == CUBLAS_OP_N ? j : i;
  EXPECT_LT(row, static_cast<int64_t>(desc.rows));
  EXPECT_LT(col, static_cast<int64_t>(desc.cols));
  return data.at(static_cast<size_t>(row + col * desc.ld));
}

// D (column-major, described by layout.d) = op(A) * op(B), as cuBLASLt defines it.
std::vector<double> run_column_major(const LtGemmLayout& layout, const std::vector<double>& a_buffer,
                                     const std::vector<double>& b_buffer) {
  std::vector<double> d(static_cast<size_t>(layout.d.ld) * layout.d.cols, -1.0);
  for (int64_t i = 0; i < layout.lt_m; ++i) {
    for (int64_t j = 0; j < layout.lt_n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < layout.lt_k; ++p) {
        sum +=
            op_element(a_buffer, layout.a, layout.trans_a, i, p) * op_element(b_buffer, layout.b, layout.trans_b, p, j);
      }
      d.at(static_cast<size_t>(i + j * layout.d.ld)) = sum;
    }
  }
  return d;
}

TEST(LtLayout, DescriptorsComputeTheRowMajorProblem) {
  for (const GemmProblem problem : {GemmProblem{1, 8, 16}, GemmProblem{5, 7, 3}, GemmProblem{17, 12, 9}}) {
    std::mt19937 generator(42);
    std::uniform_real_distribution<double> value(-1.0, 1.0);
    std::vector<double> a(static_cast<size_t>(problem.m * problem.k));  // row-major A[M,K]
    std::vector<double> w(static_cast<size_t>(problem.n * problem.k));  // row-major W[N,K]
    for (auto& x : a) x = value(generator);
    for (auto& x : w) x = value(generator);

    const LtGemmLayout layout = lt_gemm_layout(problem, lt_types(BaselineKind::F16));
    // cuBLASLt's A is the W buffer and its B the A buffer.
    const std::vector<double> d = run_column_major(layout, w, a);
    ASSERT_EQ(d.size(), static_cast<size_t>(problem.m * problem.n));
    for (int64_t m = 0; m < problem.m; ++m) {
      for (int64_t n = 0; n < problem.n; ++n) {
        double expected = 0;
        for (int64_t k = 0; k < problem.k; ++k) {
          expected += a[static_cast<size_t>(m * problem.k + k)] * w[static_cast<size_t>(n * problem.k + k)];
        }
        // Row-major C[m, n] is at m * N + n of the D buffer.
        EXPECT_NEAR(d[static_cast<size_t>(m * problem.n + n)], expected, 1e-12) << "m=" << m << " n=" << n;
      }
    }
  }
}

TEST(LtLayout, IsTheTnFormWithQtuneDimensionsSwapped) {
  const LtGemmLayout layout = lt_gemm_layout({17, 4096, 8192}, lt_types(BaselineKind::Fp8Tensor));
  EXPECT_EQ(layout.trans_a, CUBLAS_OP_T);
  EXPECT_EQ(layout.trans_b, CUBLAS_OP_N);
  EXPECT_EQ(layout.lt_m, 4096);
  EXPECT_EQ(layout.lt_n, 17);
  EXPECT_EQ(layout.lt_k, 8192);
  EXPECT_EQ(layout.a.rows, 8192u);
  EXPECT_EQ(layout.a.cols, 4096u);
  EXPECT_EQ(layout.a.ld, 8192);
  EXPECT_EQ(layout.b.rows, 8192u);
  EXPECT_EQ(layout.b.cols, 17u);
  EXPECT_EQ(layout.b.ld, 8192);
  EXPECT_EQ(layout.d.rows, 4096u);
  EXPECT_EQ(layout.d.cols, 17u);
  EXPECT_EQ(layout.d.ld, 4096);
  EXPECT_EQ(layout.a.type, CUDA_R_8F_E4M3);
  EXPECT_EQ(layout.d.type, CUDA_R_16BF);
  EXPECT_EQ(layout.c.type, layout.d.type);
}

TEST(LtLayout, TypesPerBaseline) {
  EXPECT_EQ(lt_types(BaselineKind::F16).input, CUDA_R_16F);
  EXPECT_EQ(lt_types(BaselineKind::F16).output, CUDA_R_16F);
  EXPECT_EQ(lt_types(BaselineKind::BF16).input, CUDA_R_16BF);
  EXPECT_EQ(lt_types(BaselineKind::BF16).compute, CUBLAS_COMPUTE_32F);
  EXPECT_EQ(lt_types(BaselineKind::Fp8Outer, OutputType::F16).output, CUDA_R_16F);
  EXPECT_EQ(lt_types(BaselineKind::Fp8Outer).output, CUDA_R_16BF);
  const LtTypes int8 = lt_types(BaselineKind::Int8);
  EXPECT_EQ(int8.input, CUDA_R_8I);
  EXPECT_EQ(int8.output, CUDA_R_32I);
  EXPECT_EQ(int8.compute, CUBLAS_COMPUTE_32I);
  EXPECT_EQ(int8.scale, CUDA_R_32I);
}

TEST(LtLayout, ScaleModesPerBaseline) {
  EXPECT_FALSE(lt_scale_modes(BaselineKind::F16).uses_scale_pointers);
  EXPECT_FALSE(lt_scale_modes(BaselineKind::Int8).uses_scale_pointers);
  const LtScaleModes tensor = lt_scale_modes(BaselineKind::Fp8Tensor);
  EXPECT_TRUE(tensor.uses_scale_pointers);
  EXPECT_FALSE(tensor.sets_scale_modes);
  const LtScaleModes outer = lt_scale_modes(BaselineKind::Fp8Outer);
  EXPECT_EQ(outer.weight, CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F);
  EXPECT_EQ(outer.activation, CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F);
  const LtScaleModes blocks = lt_scale_modes(BaselineKind::Fp8Block128);
  // cuBLASLt's A is the weight (128x128 blocks), its B the activation (1x128 groups).
  EXPECT_EQ(blocks.weight, CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F);
  EXPECT_EQ(blocks.activation, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F);
  EXPECT_TRUE(blocks.sets_scale_modes);
}

TEST(Block128Layout, WeightScalesAreKMajorWithColumnStridePaddedToFour) {
  const Block128ScaleLayout layout = block128_scale_layout({20, 260, 300});  // L = 3 -> L4 = 4, 3 N blocks
  EXPECT_EQ(layout.k_blocks, 3);
  EXPECT_EQ(layout.k_blocks_padded, 4);
  EXPECT_EQ(layout.n_blocks, 3);
  EXPECT_EQ(layout.weight_elements(), 12u);
  EXPECT_EQ(layout.weight_index(0, 0), 0u);
  EXPECT_EQ(layout.weight_index(0, 2), 2u);  // K blocks of one N block are contiguous
  EXPECT_EQ(layout.weight_index(1, 0), 4u);  // the next N block starts after the padded column
  EXPECT_EQ(layout.weight_index(2, 2), 10u);
  std::set<size_t> used;
  for (int64_t n = 0; n < layout.n_blocks; ++n) {
    for (int64_t k = 0; k < layout.k_blocks; ++k) {
      EXPECT_LT(layout.weight_index(n, k), layout.weight_elements());
      EXPECT_TRUE(used.insert(layout.weight_index(n, k)).second);
    }
  }
  EXPECT_EQ(used.size(), 9u);  // 3 padding slots stay unused
  const Block128ScaleLayout aligned = block128_scale_layout({4, 8192, 8192});
  EXPECT_EQ(aligned.k_blocks, 64);
  EXPECT_EQ(aligned.k_blocks_padded, 64);
  EXPECT_EQ(aligned.weight_elements(), 64u * 64u);
}

TEST(Block128Layout, ActivationScalesAreTokenMajor) {
  const Block128ScaleLayout layout = block128_scale_layout({20, 256, 384});  // 3 K groups, 20 (padded) tokens
  EXPECT_EQ(layout.m_rows, 20);
  EXPECT_EQ(layout.activation_elements(), 60u);
  EXPECT_EQ(layout.activation_index(0, 0), 0u);
  EXPECT_EQ(layout.activation_index(1, 0), 1u);   // consecutive tokens are contiguous
  EXPECT_EQ(layout.activation_index(0, 1), 20u);  // the next K group starts after all tokens
  EXPECT_EQ(layout.activation_index(19, 2), 59u);
  std::set<size_t> used;
  for (int64_t m = 0; m < layout.m_rows; ++m) {
    for (int64_t k = 0; k < layout.k_blocks; ++k) EXPECT_TRUE(used.insert(layout.activation_index(m, k)).second);
  }
  EXPECT_EQ(used.size(), layout.activation_elements());
}

TEST(ExecutedM, OnlyTheBlockModePadsToFour) {
  EXPECT_EQ(executed_m(BaselineKind::Fp8Block128, 1), 4);
  EXPECT_EQ(executed_m(BaselineKind::Fp8Block128, 17), 20);
  EXPECT_EQ(executed_m(BaselineKind::Fp8Block128, 256), 256);
  EXPECT_EQ(executed_m(BaselineKind::F16, 17), 17);
  EXPECT_EQ(executed_m(BaselineKind::Fp8Outer, 1), 1);
  EXPECT_EQ(round_up(0, 4), 0);
  EXPECT_EQ(round_up(5, 4), 8);
}

TEST(ShapeRules, DocumentedRequirementsAreReported) {
  EXPECT_EQ(shape_unsupported_reason(BaselineKind::Fp8Block128, {17, 4096, 8192}), std::nullopt);
  const auto odd_n = shape_unsupported_reason(BaselineKind::Fp8Block128, {16, 4098, 8192});
  ASSERT_TRUE(odd_n.has_value());
  EXPECT_NE(odd_n->find("N = 4098"), std::string::npos) << *odd_n;
  EXPECT_TRUE(shape_unsupported_reason(BaselineKind::Int8, {16, 4096, 8190}).has_value());
  EXPECT_EQ(shape_unsupported_reason(BaselineKind::F16, {1, 5, 7}), std::nullopt);
}

TEST(Names, TilesAndStagesComeFromTheEnumerators) {
  EXPECT_EQ(tile_name(CUBLASLT_MATMUL_TILE_128x256), "128x256");
  EXPECT_EQ(tile_name(CUBLASLT_MATMUL_TILE_64x64), "64x64");
  EXPECT_EQ(tile_name(CUBLASLT_MATMUL_TILE_UNDEFINED), "auto");
  EXPECT_EQ(tile_name(99999), "tile#99999");
  EXPECT_EQ(stages_name(CUBLASLT_MATMUL_STAGES_64xAUTO), "64xAUTO");
  EXPECT_EQ(stages_name(CUBLASLT_MATMUL_STAGES_128x3), "128x3");
  EXPECT_EQ(stages_name(12345), "stages#12345");
  EXPECT_EQ(data_type_name(CUDA_R_8F_E4M3), "e4m3");
  EXPECT_EQ(scale_mode_name(CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F), "BLK128x128_32F");
}

}  // namespace
}  // namespace qtune::baselines
