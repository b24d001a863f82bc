#pragma once
// The epilogue's per-column terms and its conversion: the f32 scale of an output column (the global scale, times the
// channel scale where the format applies it to the f32 result), output-type values (bias) as f32, and f32 pairs
// packed into the output type. Shared by every GEMM kernel of the families.
#include "gemm/format_traits.cuh"
#include "gemm/ptx.cuh"

namespace qtune {
namespace device {

template <class F>
__device__ __forceinline__ float output_scale(const GemmParams& p, float global_scale, int column) {
  float scale = global_scale;
  if constexpr (F::SCALES == kScaleEpilogue) scale *= ld_global_f32(reinterpret_cast<const float*>(p.scales) + column);
  return scale;
}

// The f32 scale of activation row `row` (formats with per-token or per-tensor activation scales), else 1.
template <class F>
__device__ __forceinline__ float activation_row_scale(const GemmParams& p, long long row) {
  if constexpr (F::ACTIVATION_SCALES == kActivationScaleToken) {
    return ld_global_f32(reinterpret_cast<const char*>(p.a_scales) + row * 4LL);
  } else {
    return 1.0f;
  }
}

// A value of the output type (f16 or bf16 bits) as f32.
template <class F>
__device__ __forceinline__ float output_to_f32(unsigned short bits) {
  return F::OUTPUT == kElementF16 ? f16_to_f32(bits) : bf16_to_f32(bits);
}

// Two f32 as an output-type pair, `lo` in the low 16 bits.
template <class F>
__device__ __forceinline__ u32 pack_output(float lo, float hi) {
  return F::OUTPUT == kElementF16 ? pack_f16x2(lo, hi) : pack_bf16x2(lo, hi);
}

// Stores one lane's accumulators of a swap-AB tile (wgmma with the weights as its 64-row A and the tokens as its N):
// acc[4 j + e] is D[column + 8 (e / 2)][token m0 + 8 j + 2 quad + e % 2], `column` the lane's first output column.
// Channel, token and global scales, bias, conversion to the output type; rows past M are not stored. Rows go outside:
// with columns outside, 256-token tiles of the tma kernel spill (ptxas, sm_90a).
template <class F, int OCTETS>
__device__ __forceinline__ void store_swap_ab_tile(const GemmParams& p, const float* acc, int m0, int column, int quad,
                                                   float global_scale) {
  const char* bias = reinterpret_cast<const char*>(p.bias);
  unsigned short* c_global = reinterpret_cast<unsigned short*>(p.c);
  float scale[2], bias_value[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    scale[half] = output_scale<F>(p, global_scale, column + half * 8);
    bias_value[half] = p.bias != 0 ? output_to_f32<F>(*reinterpret_cast<const unsigned short*>(bias + (column + half * 8) * 2LL)) : 0.0f;
  }
#pragma unroll
  for (int j = 0; j < OCTETS; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int row = m0 + j * 8 + quad * 2 + e;
      if (row < p.m) {
        const float row_scale = activation_row_scale<F>(p, row);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const float value = acc[4 * j + half * 2 + e] * scale[half] * row_scale + bias_value[half];
          c_global[static_cast<long long>(row) * p.n + column + half * 8] = static_cast<unsigned short>(pack_output<F>(value, 0.0f) & 0xFFFFu);
        }
      }
    }
  }
}

}  // namespace device
}  // namespace qtune
