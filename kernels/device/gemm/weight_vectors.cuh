#pragma once
// The per-lane inputs of register dequantization that every kernel on the prepacked weight layout reads the same way:
// the words of one weight atom, and the scales and zero points of a lane's two columns of a 16-column strip (column
// g and g + 8, stored side by side so one 32-bit load serves both n8 halves). Per-channel vectors are loaded once
// from global memory; grouped ones are staged to shared memory per K tile ([group row][BLOCK_N] each) and re-read
// whenever a K group starts.
#include "gemm/dequant.cuh"

namespace qtune {
namespace device {

// The lane's words of one weight atom (THREAD_WORDS, read slice by slice: conflict-free 4-, 8- or 16-byte loads;
// core-matrix atoms by one ldmatrix.x4 per k-step, whose four matrices are the words (nsub, r) of the k-step).
template <class F>
__device__ __forceinline__ void load_atom_words(u32 (&words)[F::THREAD_WORDS], u32 atom_base, int lane) {
  if constexpr (F::CORE_MATRIX_ATOMS) {
    static_assert(F::THREAD_WORDS == 16, "a core-matrix atom holds 16 words per lane");
    const int matrix = lane / 8;  // this lane gives the row address of matrix (nsub, r) = (matrix / 2, matrix % 2)
    const u32 row = atom_base + ((matrix / 2) * 8 + matrix % 2) * 128 + (lane % 8) * 16;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      u32 quad[4];
      ldmatrix_x4(quad, row + ks * 256);
#pragma unroll
      for (int j = 0; j < 4; ++j) words[ks * 4 + j] = quad[j];
    }
    return;
  }
#pragma unroll
  for (int slice = 0; slice < F::SLICES; ++slice) {
    const u32 address = atom_base + slice * 32 * F::SLICE_BYTES + lane * F::SLICE_BYTES;
    u32* target = &words[slice * F::SLICE_BYTES / 4];
    if constexpr (F::SLICE_BYTES == 16) {
      ld_shared_128(target, address);
    } else if constexpr (F::SLICE_BYTES == 8) {
      ld_shared_64(target, address);
    } else {
      ld_shared_32(target, address);
    }
  }
}

// Scale and zero point of a lane's two columns ([0]: column g, [1]: column g + 8), in the compute type.
template <class F>
struct StripVectors {
  u32 scale[2];
  u32 zero_raw[2];  // as stored (a float zero point is -(zero * scale))
  ZeroTerm zero[2]; // derived terms of integer zero points
};

// Per-channel values (formats without K groups), or neutral values that staged groups replace.
template <class F>
__device__ __forceinline__ StripVectors<F> channel_vectors(const GemmParams& p, long long column) {
  StripVectors<F> v;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    v.scale[half] = 0;
    v.zero_raw[half] = 0;
    v.zero[half] = constant_zero<F>();
  }
  if constexpr (F::SCALES == kScaleDequant && !F::STAGED_SCALES) {
    const u32 word = ld_global_32(reinterpret_cast<const char*>(p.scales) + column * 2);
    v.scale[0] = prmt(word, word, 0x1010);
    v.scale[1] = prmt(word, word, 0x3232);
  }
  if constexpr (F::HAS_ZERO && !F::STAGED_ZEROS) {
    const u32 word = ld_global_32(reinterpret_cast<const char*>(p.zeros) + column * 2);
    v.zero_raw[0] = prmt(word, word, 0x1010);
    v.zero_raw[1] = prmt(word, word, 0x3232);
    if constexpr (F::WEIGHT_KIND == kWeightIntZero) {
      v.zero[0] = loaded_zero<F>(v.zero_raw[0]);
      v.zero[1] = loaded_zero<F>(v.zero_raw[1]);
    }
  }
  return v;
}

// Replaces the grouped vectors with group row `row` of the staged ones; `offset` is the lane's byte offset in a row.
template <class F, int S_ROW_BYTES, int Z_ROW_BYTES>
__device__ __forceinline__ void load_staged_vectors(StripVectors<F>& v, u32 s_smem, u32 z_smem, int row, u32 offset) {
  if constexpr (F::STAGED_SCALES) {
    u32 word;
    ld_shared_32(&word, s_smem + row * S_ROW_BYTES + offset);
    v.scale[0] = prmt(word, word, 0x1010);
    v.scale[1] = prmt(word, word, 0x3232);
  }
  if constexpr (F::STAGED_ZEROS) {
    u32 word;
    ld_shared_32(&word, z_smem + row * Z_ROW_BYTES + offset);
    v.zero_raw[0] = prmt(word, word, 0x1010);
    v.zero_raw[1] = prmt(word, word, 0x3232);
    if constexpr (F::WEIGHT_KIND == kWeightIntZero) {
      v.zero[0] = loaded_zero<F>(v.zero_raw[0]);
      v.zero[1] = loaded_zero<F>(v.zero_raw[1]);
    }
  }
}

// Register slot `slot` and `slot + 1` of a strip's n8 half as compute-type pairs: dequantized, then scaled when the
// scale is applied in the dequantization (f16/bf16 activations) and the kernel does not scale the partial sums instead
// (SCALED = false: the mma and wgmma families' SCALE_AFTER, config gscale=1).
template <class F, bool SCALED = true>
__device__ __forceinline__ void dequant_pair(u32& b0, u32& b1, const u32* words, int slot, const StripVectors<F>& v, int half) {
  b0 = dequant_slot<F>(words, slot, v.zero[half]);
  b1 = dequant_slot<F>(words, slot + 1, v.zero[half]);
  if constexpr (F::SCALES == kScaleDequant && SCALED) {
    b0 = apply_scale<F>(b0, v.scale[half], v.zero_raw[half]);
    b1 = apply_scale<F>(b1, v.scale[half], v.zero_raw[half]);
  }
}

// Copies one K tile of prepacked weights, BLOCK_N / 16 contiguous strip runs of STRIP_CHUNKS 16-byte chunks each
// (W_CHUNKS in all), to `target` when the chunks split evenly among THREADS threads (REGULAR_WEIGHT_CHUNKS): chunk
// tid + c * THREADS comes from `source` (the thread's first chunk of the tile: see the kernels' per-thread bases) plus
// the strip and byte of c. No evict-first hint: in this unrolled loop sm_90a ptxas left the hint's descriptor
// registers unset for some tiles (illegal instructions on the H200: the mma main job, call Q; the wgmma kernel, call N).
template <int W_CHUNKS, int STRIP_CHUNKS, int THREADS>
struct RegularWeightChunks {
  static constexpr bool value = W_CHUNKS % THREADS == 0 && (STRIP_CHUNKS % THREADS == 0 || THREADS % STRIP_CHUNKS == 0);
};
template <int W_CHUNKS, int STRIP_CHUNKS, int THREADS>
__device__ __forceinline__ void copy_weight_strips(u32 target, const char* source, long long strip_stride, int tid) {
  static_assert(RegularWeightChunks<W_CHUNKS, STRIP_CHUNKS, THREADS>::value, "the weight chunks must split evenly among the threads");
#pragma unroll
  for (int c = 0; c < W_CHUNKS / THREADS; ++c) {
    // The strip and byte of chunk tid + c * THREADS, relative to the thread's first chunk.
    constexpr int per_strip = STRIP_CHUNKS >= THREADS ? STRIP_CHUNKS / THREADS : 1;
    const int strip = STRIP_CHUNKS >= THREADS ? c / per_strip : c * (THREADS / STRIP_CHUNKS);
    const int byte = STRIP_CHUNKS >= THREADS ? (c % per_strip) * THREADS * 16 : 0;
    copy_16(target + (tid + c * THREADS) * 16, source + strip * strip_stride + byte);
  }
}

// Stages one K tile's weight scale and zero-point rows ([group][n0, n0 + BN), GROUP_ROWS of them) with cp.async (through registers on sm_75),
// THREADS threads from `tid`.
template <class F, int BN, int GROUP_ROWS, int THREADS>
__device__ __forceinline__ void stage_weight_vectors(u32 s_base, u32 z_base, const GemmParams& p, int first_group, int n0,
                                                     int tid) {
  const char* s_global = reinterpret_cast<const char*>(p.scales);
  const char* z_global = reinterpret_cast<const char*>(p.zeros);
  if constexpr (F::STAGED_SCALES) {
    constexpr int row_chunks = BN * F::SCALE_BYTES / 16;
    for (int i = tid; i < GROUP_ROWS * row_chunks; i += THREADS) {
      const int row = i / row_chunks;
      copy_16(s_base + i * 16,
                  s_global + (static_cast<long long>(first_group + row) * p.n + n0) * F::SCALE_BYTES + (i % row_chunks) * 16);
    }
  }
  if constexpr (F::STAGED_ZEROS) {
    constexpr int row_chunks = BN * 2 / 16;
    for (int i = tid; i < GROUP_ROWS * row_chunks; i += THREADS) {
      const int row = i / row_chunks;
      copy_16(z_base + i * 16, z_global + (static_cast<long long>(first_group + row) * p.n + n0) * 2 + (i % row_chunks) * 16);
    }
  }
}

}  // namespace device
}  // namespace qtune
