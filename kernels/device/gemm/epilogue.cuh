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

}  // namespace device
}  // namespace qtune
