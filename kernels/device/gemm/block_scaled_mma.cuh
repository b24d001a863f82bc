#pragma once
// The "bsmma" family's kernel: block-scaled GEMMs on consumer Blackwell's warp MMA (sm_120a and sm_121a). W4A4 NVFP4
// and MXFP4 run mma.sync m16n8k64 kind::mxf4nvf4 (e2m1 x e2m1, ue4m3 scales per 16 or ue8m0 per 32 along K); MX W8A8
// (e4m3/e5m2) and W4A8 fp4 x fp8 run m16n8k32 kind::mxf8f6f4 (ue8m0 per 32), twice per K step of 64, the fp4 weights
// kept 4-bit in memory and moved into the instruction's 8-bit containers (value in bits 5..2) in registers.
//
// Both operands and their scales arrive prepacked in the instruction's fragment order (host side:
// kernels/families/block_scaled_family.cpp), so a warp reads each fragment with one coalesced vector load straight into
// registers and the kernel needs no shared memory: per K step of 64, one 16-byte load per m16 tile of activations, one
// 8-byte load per n8 tile of weights, and one 4-byte scale word each. The next step's fragments are loaded while this
// step's MMAs run. The f32 tensor scales of both operands (NVFP4) are applied in the epilogue.
//
// Fragment layouts (PTX ISA; lane = 4 g + t):
//   m16n8k64 e2m1 (nibble i of a register is k + i):
//     A  a0: row g, k 8t..8t+7   a1: row g + 8, k 8t..   a2: row g, k 32 + 8t..   a3: row g + 8, k 32 + 8t..
//     B  b0: column g, k 8t..    b1: column g, k 32 + 8t..
//   m16n8k32 8-bit (byte i of a register is k + i):
//     A  a0: row g, k 4t..4t+3   a1: row g + 8, k 4t..   a2: row g, k 16 + 4t..   a3: row g + 8, k 16 + 4t..
//     B  b0: column g, k 4t..    b1: column g, k 16 + 4t..
//   D  d0, d1: row g, columns 2t, 2t + 1     d2, d3: row g + 8, columns 2t, 2t + 1
//   scales (thread id 0): row g's word from lane 4g, row g + 8's from lane 4g + 1, column g's from lane 4g; with 4X and
//   2X byte j of a word scales K chunk j (16 or 32 elements); with 1X the byte id picks the byte (byte h for the h-th
//   m16n8k32 of a K step of 64), so the scale words are laid out as for 2X.
#include "gemm/abi.cuh"
#include "gemm/ptx.cuh"

namespace qtune {
namespace device {

// One configuration of the kernel: a CTA tile of BM x BN outputs, WM x WN warps, each warp BM/WM x BN/WN outputs.
// KIND: kBlockScaledMxf4Nvf4 or kBlockScaledMxf8f6f4. ACTIVATION, WEIGHT: element codes (kElementE2M1, kElementE4M3,
// kElementE5M2). SCALE_VEC: scale bytes per K step of 64 (4: NVFP4's ue4m3 per 16; 2: ue8m0 per 32). OUTPUT: f16/bf16.
template <int KIND_, int ACTIVATION_, int WEIGHT_, int SCALE_VEC_, int OUTPUT_, int BM_, int BN_, int WM_, int WN_>
struct BlockScaledTiles {
  static constexpr int KIND = KIND_;
  static constexpr int ACTIVATION = ACTIVATION_;
  static constexpr int WEIGHT = WEIGHT_;
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
  static constexpr int ACTIVATION_BITS = ACTIVATION == kElementE2M1 ? 4 : 8;
  static constexpr int WEIGHT_BITS = WEIGHT == kElementE2M1 ? 4 : 8;
  static constexpr int A_VECTORS = block_scaled_activation_lane_bytes(ACTIVATION_BITS) / 16;  // uint4 per lane
  static constexpr int B_WORDS = block_scaled_weight_lane_bytes(WEIGHT_BITS) / 4;             // u32 per lane
  static_assert(KIND == kBlockScaledMxf4Nvf4 || KIND == kBlockScaledMxf8f6f4, "KIND: mxf4nvf4 or mxf8f6f4");
  static_assert(KIND != kBlockScaledMxf4Nvf4 || (ACTIVATION == kElementE2M1 && WEIGHT == kElementE2M1),
                "kind::mxf4nvf4 multiplies e2m1 by e2m1");
  static_assert(KIND != kBlockScaledMxf4Nvf4 || SCALE_VEC == 4 || SCALE_VEC == 2,
                "kind::mxf4nvf4: SCALE_VEC 4 (NVFP4, ue4m3 per 16) or 2 (MXFP4, ue8m0 per 32)");
  static_assert(KIND != kBlockScaledMxf8f6f4 || (ACTIVATION == kElementE4M3 || ACTIVATION == kElementE5M2),
                "kind::mxf8f6f4 here takes fp8 activations (fp4 activations run kind::mxf4nvf4)");
  static_assert(KIND != kBlockScaledMxf8f6f4 || (WEIGHT == kElementE2M1 || WEIGHT == kElementE4M3 || WEIGHT == kElementE5M2),
                "kind::mxf8f6f4 here takes e2m1, e4m3 or e5m2 weights");
  static_assert(KIND != kBlockScaledMxf8f6f4 || SCALE_VEC == 2, "kind::mxf8f6f4: one ue8m0 per 32, two per K step of 64");
  static_assert(OUTPUT == kElementF16 || OUTPUT == kElementBF16, "OUTPUT: f16 or bf16");
  static_assert(BM <= kBlockScaledRowPadding, "BM at most the rows the activations are padded to");
  static_assert(BM % (16 * WM) == 0, "BM must be a multiple of 16 * WM: each warp owns whole m16 tiles");
  static_assert(BN % (8 * WN) == 0, "BN must be a multiple of 8 * WN: each warp owns whole n8 tiles");
  static_assert(FRAGMENTS_M >= 1 && FRAGMENTS_M <= 8, "1 to 8 m16 tiles per warp");
  static_assert(FRAGMENTS_N >= 1 && FRAGMENTS_N <= 16, "1 to 16 n8 tiles per warp");
  static_assert(THREADS <= 1024, "at most 1024 threads per CTA");
  // Accumulators and two K steps of fragments, plus about 40 registers of addressing, within 255 (the host's
  // BlockScaledFamily::estimated_registers is the same sum).
  static_assert(FRAGMENTS_M * FRAGMENTS_N * 4 + 2 * (FRAGMENTS_M * (4 * A_VECTORS + 1) + FRAGMENTS_N * (B_WORDS + 1)) + 40 <= 255,
                "accumulators and two steps of fragments must fit the registers without spilling");
};

// The block-scaled MMAs. ATYPE/BTYPE are the PTX type names of the activations (A) and the weights (B).
#define QTUNE_BLOCK_SCALED_MMA_K32(ATYPE, BTYPE, BYTE_ID)                                                              \
  asm volatile("mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X.f32." ATYPE "." BTYPE      \
               ".f32.ue8m0 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3}, %10, {" BYTE_ID ", 0}, %11, " \
               "{" BYTE_ID ", 0};\n"                                                                                  \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                                        \
               : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1), "r"(scale_a), "r"(scale_b))

template <int SCALE_VEC>
__device__ __forceinline__ void mma_block_scaled_k64_e2m1(float (&d)[4], const uint4& a, u32 b0, u32 b1, u32 scale_a,
                                                          u32 scale_b) {
  if constexpr (SCALE_VEC == 4) {
    asm volatile(
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1.f32.ue4m3 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3}, %10, {0, 0}, %11, {0, 0};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1), "r"(scale_a), "r"(scale_b));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::2X.f32.e2m1.e2m1.f32.ue8m0 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3}, %10, {0, 0}, %11, {0, 0};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1), "r"(scale_a), "r"(scale_b));
  }
}

// The HALF-th m16n8k32 of a K step (scale byte HALF of both words).
template <int ACTIVATION, int WEIGHT, int HALF>
__device__ __forceinline__ void mma_block_scaled_k32(float (&d)[4], const uint4& a, u32 b0, u32 b1, u32 scale_a,
                                                     u32 scale_b) {
  static_assert(HALF == 0 || HALF == 1, "two m16n8k32 per K step of 64");
#define QTUNE_BLOCK_SCALED_MMA_K32_HALVES(ATYPE, BTYPE)  \
  if constexpr (HALF == 0) {                             \
    QTUNE_BLOCK_SCALED_MMA_K32(ATYPE, BTYPE, "0");       \
  } else {                                               \
    QTUNE_BLOCK_SCALED_MMA_K32(ATYPE, BTYPE, "1");       \
  }
  if constexpr (ACTIVATION == kElementE4M3 && WEIGHT == kElementE2M1) {
    QTUNE_BLOCK_SCALED_MMA_K32_HALVES("e4m3", "e2m1")
  } else if constexpr (ACTIVATION == kElementE4M3 && WEIGHT == kElementE4M3) {
    QTUNE_BLOCK_SCALED_MMA_K32_HALVES("e4m3", "e4m3")
  } else if constexpr (ACTIVATION == kElementE4M3 && WEIGHT == kElementE5M2) {
    QTUNE_BLOCK_SCALED_MMA_K32_HALVES("e4m3", "e5m2")
  } else if constexpr (ACTIVATION == kElementE5M2 && WEIGHT == kElementE2M1) {
    QTUNE_BLOCK_SCALED_MMA_K32_HALVES("e5m2", "e2m1")
  } else if constexpr (ACTIVATION == kElementE5M2 && WEIGHT == kElementE4M3) {
    QTUNE_BLOCK_SCALED_MMA_K32_HALVES("e5m2", "e4m3")
  } else {
    QTUNE_BLOCK_SCALED_MMA_K32_HALVES("e5m2", "e5m2")
  }
#undef QTUNE_BLOCK_SCALED_MMA_K32_HALVES
}
#undef QTUNE_BLOCK_SCALED_MMA_K32

// Four packed e2m1 codes (the low 16 bits of `codes`, code i in bits 4i..4i+3) in four 8-bit containers, each code
// in bits 5..2 of its byte, as kind::mxf8f6f4 reads fp4 operands.
__device__ __forceinline__ u32 e2m1_containers(u32 codes) {
  const u32 spread = (codes & 0xFu) | ((codes & 0xF0u) << 4) | ((codes & 0xF00u) << 8) | ((codes & 0xF000u) << 12);
  return spread << 2;
}

// One K step's fragments of a warp.
template <class T>
struct BlockScaledFragments {
  uint4 a[T::FRAGMENTS_M][T::A_VECTORS];
  u32 scale_a[T::FRAGMENTS_M];
  u32 b[T::FRAGMENTS_N][T::B_WORDS];
  u32 scale_b[T::FRAGMENTS_N];
};

template <class T>
__device__ __forceinline__ void load_block_scaled_fragments(BlockScaledFragments<T>& f, const BlockScaledParams& p,
                                                            int m_tile0, int n_tile0, int step, int k_steps, int lane) {
  constexpr int kActivationBlockBytes = 32 * block_scaled_activation_lane_bytes(T::ACTIVATION_BITS);
  constexpr int kWeightBlockBytes = 32 * block_scaled_weight_lane_bytes(T::WEIGHT_BITS);
  const char* a = reinterpret_cast<const char*>(p.a);
  const char* a_scales = reinterpret_cast<const char*>(p.a_scales);
  const char* w = reinterpret_cast<const char*>(p.weights);
  const char* w_scales = reinterpret_cast<const char*>(p.scales);
#pragma unroll
  for (int i = 0; i < T::FRAGMENTS_M; ++i) {
    const long long block = static_cast<long long>(m_tile0 + i) * k_steps + step;
    const uint4* vectors = reinterpret_cast<const uint4*>(a + block * kActivationBlockBytes) + lane * T::A_VECTORS;
#pragma unroll
    for (int v = 0; v < T::A_VECTORS; ++v) f.a[i][v] = __ldg(vectors + v);
    f.scale_a[i] = __ldg(reinterpret_cast<const unsigned int*>(a_scales + block * kBlockScaledActivationScaleBlockBytes) + lane);
  }
#pragma unroll
  for (int j = 0; j < T::FRAGMENTS_N; ++j) {
    const long long block = static_cast<long long>(n_tile0 + j) * k_steps + step;
    const char* lane_bytes = w + block * kWeightBlockBytes + lane * block_scaled_weight_lane_bytes(T::WEIGHT_BITS);
    if constexpr (T::B_WORDS == 2) {
      const uint2 words = __ldg(reinterpret_cast<const uint2*>(lane_bytes));
      f.b[j][0] = words.x;
      f.b[j][1] = words.y;
    } else {
      const uint4 words = __ldg(reinterpret_cast<const uint4*>(lane_bytes));
      f.b[j][0] = words.x;
      f.b[j][1] = words.y;
      f.b[j][2] = words.z;
      f.b[j][3] = words.w;
    }
    f.scale_b[j] = __ldg(reinterpret_cast<const unsigned int*>(w_scales + block * kBlockScaledWeightScaleBlockBytes) + (lane >> 2));
  }
}

// The MMAs of one K step on one (m16, n8) pair.
template <class T>
__device__ __forceinline__ void block_scaled_step(float (&d)[4], const uint4 (&a)[T::A_VECTORS], const u32 (&b)[T::B_WORDS],
                                                  u32 scale_a, u32 scale_b) {
  if constexpr (T::KIND == kBlockScaledMxf4Nvf4) {
    mma_block_scaled_k64_e2m1<T::SCALE_VEC>(d, a[0], b[0], b[1], scale_a, scale_b);
  } else if constexpr (T::WEIGHT_BITS == 4) {
    // Word h holds the h-th k32's 8 codes: its low 4 go to register 0, its high 4 to register 1.
    mma_block_scaled_k32<T::ACTIVATION, T::WEIGHT, 0>(d, a[0], e2m1_containers(b[0]), e2m1_containers(b[0] >> 16), scale_a, scale_b);
    mma_block_scaled_k32<T::ACTIVATION, T::WEIGHT, 1>(d, a[1], e2m1_containers(b[1]), e2m1_containers(b[1] >> 16), scale_a, scale_b);
  } else {
    mma_block_scaled_k32<T::ACTIVATION, T::WEIGHT, 0>(d, a[0], b[0], b[1], scale_a, scale_b);
    mma_block_scaled_k32<T::ACTIVATION, T::WEIGHT, 1>(d, a[1], b[2], b[3], scale_a, scale_b);
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
          block_scaled_step<T>(acc[i][j], current.a[i], current.b[j], current.scale_a[i], current.scale_b[j]);
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
