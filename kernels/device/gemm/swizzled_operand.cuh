#pragma once
// The wgmma shared-memory matrix descriptor of a K-major operand stored in 128-byte-swizzled slabs (8-row core groups
// 1024 bytes apart: SBO; LBO unused), and the descriptors of the k-steps inside it. Used by the wgmma and tma families;
// and that of the core-matrix weight atoms, which the tma family's wgmmas read from shared memory (SS).
#include "gemm/ptx.cuh"

namespace qtune {
namespace device {

// Descriptor of the swizzled operand at shared address `shared`.
__device__ __forceinline__ u64 swizzled_operand_descriptor(u32 shared) {
  return static_cast<u64>((shared & 0x3FFFFu) >> 4) | (1ull << 16) | (static_cast<u64>(1024 >> 4) << 32) | (1ull << 62);
}

// Descriptor of a K-major operand of 8 x 16-byte core matrices without swizzle (the core-matrix weight atoms of
// format_traits.cuh): the two core matrices of a k-step 128 bytes apart along K (LBO), 8-row groups 1024 apart (SBO).
__device__ __forceinline__ u64 core_matrix_operand_descriptor(u32 shared) {
  return static_cast<u64>((shared & 0x3FFFFu) >> 4) | (static_cast<u64>(128 >> 4) << 16) | (static_cast<u64>(1024 >> 4) << 32);
}

// The descriptors of the k-steps of one operand tile: the tile's own with offset / 16 added to its start-address field
// ((address & 0x3FFFF) >> 4, bits 0-13). Tile and offsets lie inside the 228 KB shared window, so the field takes the
// sum without a carry, and a step costs one add instead of the descriptor's mask, shift and or (decode tiles are
// bound by instruction issue: the DeepSeek-V3 MoE decode kernel lost 64 of its 2120 SASS instructions).
template <u64 (*DESCRIPTOR)(u32)>
struct OperandSteps {
  u32 low, high;
  __device__ __forceinline__ explicit OperandSteps(u32 shared) {
    const u64 descriptor = DESCRIPTOR(shared);
    low = static_cast<u32>(descriptor);
    high = static_cast<u32>(descriptor >> 32);
  }
  // `offset`: bytes from the tile's start, a multiple of 16.
  __device__ __forceinline__ u64 at(u32 offset) const { return (static_cast<u64>(high) << 32) | (low + (offset >> 4)); }
};
using SwizzledOperand = OperandSteps<swizzled_operand_descriptor>;
using CoreMatrixOperand = OperandSteps<core_matrix_operand_descriptor>;

}  // namespace device
}  // namespace qtune
