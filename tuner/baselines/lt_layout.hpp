#pragma once
// How a row-major qtune GEMM is described to cuBLASLt, which is column-major. Pure arithmetic on the
// descriptors, no cuBLASLt call, so the mapping is unit-tested on machines without a GPU.
//
// A row-major X[r,c] is the column-major X^T (c rows, r columns, ld = c). So cuBLASLt computes
// D = C^T[N,M] = W[N,K] * A^T[K,M]:
//   cuBLASLt A := the W buffer, column-major K x N, ld K, op T  -> N x K
//   cuBLASLt B := the A buffer, column-major K x M, ld K, op N  -> K x M
//   cuBLASLt D := the C buffer, column-major N x M, ld N        == row-major C[M,N]
// cuBLASLt's (m, n, k) are therefore qtune's (N, M, K). This "TN" form is the only one fp8 accepts on Hopper
// and the one int8 IMMA needs without special orders.
#include <cublasLt.h>

#include <cstdint>
#include <optional>
#include <string>

#include "kernels/format.hpp"
#include "tuner/baselines/baseline.hpp"

namespace qtune::baselines {

// One operand as cuBLASLt sees it (column-major).
struct LtMatrix {
  cudaDataType_t type = CUDA_R_32F;
  uint64_t rows = 0;
  uint64_t cols = 0;
  int64_t ld = 0;
};

struct LtTypes {
  cudaDataType_t input = CUDA_R_16F;   // A and W
  cudaDataType_t output = CUDA_R_16F;  // C and D
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;  // the type of alpha and beta
};
// fp8_output chooses the output of the fp8 baselines (bf16 by default); the other kinds have a fixed output.
LtTypes lt_types(BaselineKind kind, OutputType fp8_output = OutputType::BF16);

struct LtGemmLayout {
  int64_t lt_m = 0;  // qtune N
  int64_t lt_n = 0;  // qtune M
  int64_t lt_k = 0;  // qtune K
  cublasOperation_t trans_a = CUBLAS_OP_T;
  cublasOperation_t trans_b = CUBLAS_OP_N;
  LtMatrix a;  // the W buffer
  LtMatrix b;  // the A buffer
  LtMatrix c;  // the C buffer (beta is 0, C is only described)
  LtMatrix d;  // the C buffer
};
LtGemmLayout lt_gemm_layout(const GemmProblem& problem, const LtTypes& types);

// The scale modes of cuBLASLt's A (our W) and B (our A) for a baseline; SCALAR_32F for kinds without scales.
struct LtScaleModes {
  cublasLtMatmulMatrixScale_t weight = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  cublasLtMatmulMatrixScale_t activation = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  bool uses_scale_pointers = false;  // false for f16/bf16/int8, which take no scale pointers
  bool sets_scale_modes = false;     // false when the default (per-tensor scalar) mode is meant
};
LtScaleModes lt_scale_modes(BaselineKind kind);

// Where the f32 scales of the 128x128/1x128 baseline live (cuBLAS docs, "128-element 1D and 128x128 2D block
// scaling for FP8 data types", "Scaling factors layouts"):
//  - cuBLASLt A (our W, BLK128x128_32F): K-major, L4 x ceil(N/128), where L = ceil(K/128) and the stride between
//    columns, L4, is L rounded up to a multiple of 4. W block (n/128, k/128) is at k_block + n_block * L4.
//  - cuBLASLt B (our A, VEC128_32F): "N-major for B with shape N x L", cuBLASLt's N being our M: token index
//    contiguous, stride M between K groups. Token m, group k/128 is at m + k_block * M.
// cuBLAS also requires cuBLASLt's M and N (our N and M) to be multiples of 4 in these modes, so M is padded
// (executed_m) before this layout is built.
struct Block128ScaleLayout {
  int64_t k_blocks = 0;         // L
  int64_t k_blocks_padded = 0;  // L4: stride between the weight scale tensor's columns
  int64_t n_blocks = 0;         // ceil(N/128)
  int64_t m_rows = 0;           // the executed M: stride between the activation scale tensor's K groups
  size_t weight_index(int64_t n_block, int64_t k_block) const {
    return static_cast<size_t>(k_block + n_block * k_blocks_padded);
  }
  size_t activation_index(int64_t m, int64_t k_block) const { return static_cast<size_t>(m + k_block * m_rows); }
  size_t weight_elements() const { return static_cast<size_t>(k_blocks_padded * n_blocks); }
  size_t activation_elements() const { return static_cast<size_t>(m_rows * k_blocks); }
};
Block128ScaleLayout block128_scale_layout(const GemmProblem& executed_problem);

// The M cuBLASLt multiplies: M itself, or M rounded up to a multiple of 4 for the 128-block mode (see above).
// Extra rows hold random data; their output rows are ignored by verification.
int64_t executed_m(BaselineKind kind, int64_t m);
int64_t round_up(int64_t value, int64_t multiple);

// A documented cuBLASLt requirement the shape breaks, as a sentence for an "unsupported" report; nullopt when none
// is known (cuBLASLt's heuristic still has the last word).
std::optional<std::string> shape_unsupported_reason(BaselineKind kind, const GemmProblem& problem);

// Human-readable names for descriptors and algorithm attributes (reports and test output).
std::string data_type_name(cudaDataType_t type);
std::string scale_mode_name(cublasLtMatmulMatrixScale_t mode);
std::string tile_name(int tile_id);      // "128x256" from the cublasLtMatmulTile_t name, or "tile#N"
std::string stages_name(int stages_id);  // "64x4", "64xAUTO", or "stages#N"

}  // namespace qtune::baselines
