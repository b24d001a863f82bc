#pragma once
// The largest GEMM qtune accepts: the kernels take M, N and K as int and address A[M][K], W[N][K] and C[M][N] with
// 32-bit element offsets, so each dimension and each operand's element count must fit int32. Every command that
// takes shapes checks them here, before any work.
#include <cstdint>
#include <limits>
#include <string_view>

namespace qtune::search {

inline constexpr std::int64_t kMaxGemmDimension = std::int64_t{1} << 20;  // N, K and M each
inline constexpr std::int64_t kMaxGemmElements = std::numeric_limits<std::int32_t>::max();  // M*K, N*K and M*N

// N and K of a weight: each in [1, kMaxGemmDimension] and N*K at most kMaxGemmElements. InputError naming `field`.
void check_weight_shape(std::int64_t n, std::int64_t k, std::string_view field);
// M on its own: in [1, kMaxGemmDimension]. InputError naming `field`.
void check_m(std::int64_t m, std::string_view field);
// A whole problem: the weight (naming `shape_field`), M, and M*K and M*N (naming `m_field`).
void check_problem_shape(std::int64_t m, std::int64_t n, std::int64_t k, std::string_view m_field, std::string_view shape_field);

}  // namespace qtune::search
