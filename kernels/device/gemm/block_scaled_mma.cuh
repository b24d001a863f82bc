#pragma once
// The "bsmma" family's kernel: W4A4 NVFP4 and MXFP4 GEMMs on consumer Blackwell's block-scaled warp MMA (sm_120a and
// sm_121a: mma.sync m16n8k64, kind::mxf4nvf4, e2m1 x e2m1 with ue4m3 scales per 16 or ue8m0 scales per 32 along K).
//
// Both operands and their scales arrive prepacked in the instruction's fragment order (host side:
// kernels/families/block_scaled_family.cpp), so a warp reads each fragment with one coalesced vector load straight into
// registers and the kernel needs no shared memory: per K step of 64, one 16-byte load per m16 tile of activations, one
// 8-byte load per n8 tile of weights, and one 4-byte scale word each. The next step's fragments are loaded while this
// step's MMAs run. The f32 tensor scales of both operands (NVFP4) are applied in the epilogue.
//
// Fragment layout of m16n8k64 (lane = 4 g + t; nibble i of a register is k + i):
//   A  a0: row g, k 8t..8t+7   a1: row g + 8, k 8t..   a2: row g, k 32 + 8t..   a3: row g + 8, k 32 + 8t..
//   B  b0: column g, k 8t..    b1: column g, k 32 + 8t..
//   D  d0, d1: row g, columns 2t, 2t + 1     d2, d3: row g + 8, columns 2t, 2t + 1
//   scales (byte id 0, thread id 0): row g's word from lane 4g, row g + 8's from lane 4g + 1, column g's from lane 4g;
//   byte j of a word scales K chunk j (16 elements with 4X, 32 with 2X).
#include "gemm/abi.cuh"
#include "gemm/ptx.cuh"

namespace qtune {
namespace device {

// One configuration of the kernel: a CTA tile of BM x BN outputs, WM x WN warps, each warp BM/WM x BN/WN outputs.
// SCALE_VEC: 4 (NVFP4: ue4m3 per 16 elements) or 2 (MXFP4: ue8m0 per 32); OUTPUT: kElementF16 or kElementBF16.
template <int SCALE_VEC_, int OUTPUT_, int BM_, int BN_, int WM_, int WN_>
struct BlockScaledTiles {
  static constexpr int SCALE_VEC = SCALE_VEC_;
  static constexpr int OUTPUT = OUTPUT_;
  static constexpr int BM = BM_;
  static constexpr int BN = BN_;
  static constexpr int WM = WM_;
  static constexpr int WN = WN_;
  static constexpr int WARPS = WM * WN;
  static constexpr int THREADS = WARPS * 32;
  static constexpr int FRAGMENTS_M = BM / (16 * WM);  // m16 tiles per warp
  static constexpr int FRAGMENTS_N = BN / (8 * WN);   // n8 tiles per warp
  static_assert(OUTPUT == kElementF16 || OUTPUT == kElementBF16, "OUTPUT: f16 or bf16");
  static_assert(BM <= kBlockScaledRowPadding, "BM at most the rows the activations are padded to");
  static_assert(SCALE_VEC == 4 || SCALE_VEC == 2, "SCALE_VEC: 4 (NVFP4, ue4m3 per 16) or 2 (MXFP4, ue8m0 per 32)");
  static_assert(BM % (16 * WM) == 0, "BM must be a multiple of 16 * WM: each warp owns whole m16 tiles");
  static_assert(BN % (8 * WN) == 0, "BN must be a multiple of 8 * WN: each warp owns whole n8 tiles");
  static_assert(FRAGMENTS_M >= 1 && FRAGMENTS_M <= 8, "1 to 8 m16 tiles per warp");
  static_assert(FRAGMENTS_N >= 1 && FRAGMENTS_N <= 16, "1 to 16 n8 tiles per warp");
  static_assert(THREADS <= 1024, "at most 1024 threads per CTA");
  // Accumulators and two K steps of fragments, plus about 40 registers of addressing, within 255 (the host's
  // BlockScaledFamily::estimated_registers is the same sum).
  static_assert(FRAGMENTS_M * FRAGMENTS_N * 4 + 2 * (FRAGMENTS_M * 5 + FRAGMENTS_N * 3) + 40 <= 255,
                "accumulators and two steps of fragments must fit the registers without spilling");
};

template <int SCALE_VEC>
__device__ __forceinline__ void mma_block_scaled_e2m1(float (&d)[4], const uint4& a, const uint2& b, u32 scale_a,
                                                      u32 scale_b) {
  if constexpr (SCALE_VEC == 4) {
    asm volatile(
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1.f32.ue4m3 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3}, %10, {0, 0}, %11, {0, 0};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b.x), "r"(b.y), "r"(scale_a), "r"(scale_b));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::2X.f32.e2m1.e2m1.f32.ue8m0 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3}, %10, {0, 0}, %11, {0, 0};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b.x), "r"(b.y), "r"(scale_a), "r"(scale_b));
  }
}

// One K step's fragments of a warp.
template <class T>
struct BlockScaledFragments {
  uint4 a[T::FRAGMENTS_M];
  u32 scale_a[T::FRAGMENTS_M];
  uint2 b[T::FRAGMENTS_N];
  u32 scale_b[T::FRAGMENTS_N];
};

template <class T>
__device__ __forceinline__ void load_block_scaled_fragments(BlockScaledFragments<T>& f, const BlockScaledParams& p,
                                                            int m_tile0, int n_tile0, int step, int k_steps, int lane) {
  const char* a = reinterpret_cast<const char*>(p.a);
  const char* a_scales = reinterpret_cast<const char*>(p.a_scales);
  const char* w = reinterpret_cast<const char*>(p.weights);
  const char* w_scales = reinterpret_cast<const char*>(p.scales);
#pragma unroll
  for (int i = 0; i < T::FRAGMENTS_M; ++i) {
    const long long block = static_cast<long long>(m_tile0 + i) * k_steps + step;
    f.a[i] = __ldg(reinterpret_cast<const uint4*>(a + block * kBlockScaledActivationBlockBytes) + lane);
    f.scale_a[i] = __ldg(reinterpret_cast<const unsigned int*>(a_scales + block * kBlockScaledActivationScaleBlockBytes) + lane);
  }
#pragma unroll
  for (int j = 0; j < T::FRAGMENTS_N; ++j) {
    const long long block = static_cast<long long>(n_tile0 + j) * k_steps + step;
    f.b[j] = __ldg(reinterpret_cast<const uint2*>(w + block * kBlockScaledWeightBlockBytes) + lane);
    f.scale_b[j] = __ldg(reinterpret_cast<const unsigned int*>(w_scales + block * kBlockScaledWeightScaleBlockBytes) + (lane >> 2));
  }
}

template <class T>
__device__ __forceinline__ void block_scaled_mma_gemm(const BlockScaledParams& p) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warp_m = warp / T::WN, warp_n = warp % T::WN;
  const int n_tiles = p.n / T::BN;
  const int tile_m = blockIdx.x / n_tiles, tile_n = blockIdx.x % n_tiles;
  const int m_tile0 = (tile_m * T::BM + warp_m * (T::BM / T::WM)) / 16;  // first m16 tile of the warp
  const int n_tile0 = (tile_n * T::BN + warp_n * (T::BN / T::WN)) / 8;   // first n8 tile of the warp
  const int k_steps = p.k / 64;
  // A warp whose rows all lie past M skips its MMAs (its reads would stay inside the padded activations anyway).
  const bool live = m_tile0 * 16 < p.m;

  float acc[T::FRAGMENTS_M][T::FRAGMENTS_N][4];
#pragma unroll
  for (int i = 0; i < T::FRAGMENTS_M; ++i)
#pragma unroll
    for (int j = 0; j < T::FRAGMENTS_N; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  if (live) {
    BlockScaledFragments<T> current, next;
    load_block_scaled_fragments<T>(current, p, m_tile0, n_tile0, 0, k_steps, lane);
    for (int step = 0; step < k_steps; ++step) {
      if (step + 1 < k_steps) load_block_scaled_fragments<T>(next, p, m_tile0, n_tile0, step + 1, k_steps, lane);
#pragma unroll
      for (int i = 0; i < T::FRAGMENTS_M; ++i)
#pragma unroll
        for (int j = 0; j < T::FRAGMENTS_N; ++j)
          mma_block_scaled_e2m1<T::SCALE_VEC>(acc[i][j], current.a[i], current.b[j], current.scale_a[i], current.scale_b[j]);
      current = next;
    }
  }

  // Epilogue: the tensor scales of both operands (one f32 each; 1 for MXFP4), bias, f16/bf16 output, rows past M skipped.
  float global_scale = ld_global_f32(reinterpret_cast<const float*>(p.global_scale));
  if (p.a_global_scale != 0) global_scale *= ld_global_f32(reinterpret_cast<const float*>(p.a_global_scale));
  const int g = lane >> 2, t = lane & 3;
  unsigned short* c = reinterpret_cast<unsigned short*>(p.c);
  const unsigned short* bias = reinterpret_cast<const unsigned short*>(p.bias);
#pragma unroll
  for (int i = 0; i < T::FRAGMENTS_M; ++i) {
#pragma unroll
    for (int j = 0; j < T::FRAGMENTS_N; ++j) {
      const int column = (n_tile0 + j) * 8 + 2 * t;
      float bias0 = 0.0f, bias1 = 0.0f;
      if (p.bias != 0) {
        bias0 = T::OUTPUT == kElementF16 ? f16_to_f32(bias[column]) : bf16_to_f32(bias[column]);
        bias1 = T::OUTPUT == kElementF16 ? f16_to_f32(bias[column + 1]) : bf16_to_f32(bias[column + 1]);
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = (m_tile0 + i) * 16 + g + 8 * half;
        if (row < p.m) {
          const float lo = acc[i][j][2 * half] * global_scale + bias0;
          const float hi = acc[i][j][2 * half + 1] * global_scale + bias1;
          const u32 packed = T::OUTPUT == kElementF16 ? pack_f16x2(lo, hi) : pack_bf16x2(lo, hi);
          st_global_32(c + static_cast<long long>(row) * p.n + column, packed);
        }
      }
    }
  }
}

}  // namespace device
}  // namespace qtune
