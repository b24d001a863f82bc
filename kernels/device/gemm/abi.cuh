#pragma once
// The contract between host and device for the mma GEMM family: format codes used as template arguments and the
// kernel parameter block. Plain C++ (no CUDA keywords) so host code includes it too: one definition for both sides.

namespace qtune {
namespace device {

// Element types of activations and of the tensor-core operands.
enum ElementCode : int {
  kElementF16 = 0,
  kElementBF16 = 1,
  kElementE4M3 = 2,
  kElementE5M2 = 3,
  kElementS8 = 4,
  kElementS4 = 5,
  kElementE2M1 = 6,
};

// How a weight code turns into a number before scaling.
enum WeightKind : int {
  kWeightSignedInt = 0,    // two's complement INTb, stored offset-binary (code + 2^(b-1)); zero is a constant
  kWeightUnsignedInt = 1,  // UINTb without zero point
  kWeightIntZero = 2,      // UINTb minus an integer zero point per scale group
  kWeightFloatZero = 3,    // UINTb minus a floating-point zero point per scale group
  kWeightFloat = 4,        // signed eXmY
};

// Where the weight scale is applied.
enum ScaleMode : int {
  kScaleEpilogue = 0,     // one f32 per output channel (per-tensor scales are expanded), applied to the f32 result
  kScaleDequant = 1,      // per (K group, channel), compute type, multiplied into the weights before the mma
  kScaleAccumulator = 2,  // per (K group, channel), f32, multiplied into f32 partial sums of each K group
};

// Activation scaling (quantized activations only).
enum ActivationScaleMode : int {
  kActivationScaleNone = 0,
  kActivationScaleToken = 1,  // one f32 per row (per-tensor scales are expanded)
  kActivationScaleGroup = 2,  // one f32 per (row, K group)
};

// The single kernel parameter. Pointers are device addresses; unused ones are 0.
struct GemmParams {
  unsigned long long a;             // activations [M][K] (layout of the activation type)
  unsigned long long a_scales;      // activation scales
  unsigned long long weights;       // prepacked weights
  unsigned long long scales;        // prepacked weight scales
  unsigned long long zeros;         // prepacked zero points
  unsigned long long bias;          // [N] in the output type, or 0
  unsigned long long global_scale;  // one f32 multiplied into every output
  unsigned long long c;             // output [M][N]
  unsigned long long workspace;     // split-K partial sums then tile counters; counters start at zero, end at zero
  int m;
  int n;
  int k;
  int reserved;
};

// ---- MoE GEMMs (gemm/mma_moe.cuh, gemm/moe_rows.cuh) ----
enum MoeLayoutCode : int {
  kMoeTokenIndexed = 1,  // rows: sorted pair ids (vLLM's sorted_token_ids, padding >= pairs); expert per block
  kMoeContiguous = 2,    // rows: the expert of each row (DeepGEMM's m_indices, -1 on padding); rows read and written in place
  kMoeMasked = 3,        // [experts][max_rows] slabs with a count of live rows per expert; rows read and written in place
};

enum MoeProjectionCode : int {
  kMoeGateUp = 0,  // token-indexed: reads token row pair / top_k
  kMoeDown = 1,    // token-indexed: reads row pair, multiplies its output row by the pair's router weight
};

// The second kernel parameter of a MoE GEMM. Pointers are device addresses; unused ones are 0.
struct MoeParams {
  unsigned long long rows;            // int32 per launch row: sorted pair ids (token-indexed) or row experts (contiguous)
  unsigned long long block_experts;   // token-indexed: int32 expert per block of BLOCK_M rows
  unsigned long long counts;          // masked: int32 live rows per expert
  unsigned long long padded_rows;     // token-indexed: device int32 num_tokens_post_padded; 0: GemmParams::m rows
  unsigned long long router_weights;  // token-indexed down: f32 per pair
  long long expert_weight_bytes;      // distance between two experts' prepacked weights, scales and zero points
  long long expert_scale_bytes;
  long long expert_zero_bytes;
  int input_rows;  // rows of the activation matrix and of its scale grid
  int top_k;
  int pairs;       // tokens * top_k
  int max_rows;    // masked: rows of each expert's slab
};

// The gather before the tma family's token-indexed MoE GEMM (gemm/tma_moe.cuh): activation rows into layout order.
struct MoeGatherParams {
  unsigned long long a;                // activations [MoeParams::input_rows][row_bytes]
  unsigned long long a_scales;         // f32 [scale_groups][input_rows] (one group: per token), or 0
  unsigned long long gathered;         // [rows][row_bytes] in layout order
  unsigned long long gathered_scales;  // f32 [scale_groups][rows], or 0
  long long row_bytes;                 // bytes of one activation row: a multiple of 16
  int rows;                            // launch rows
  int scale_groups;                    // 0: no activation scales
};

// ---- The bsmma family (gemm/block_scaled_mma.cuh): block-scaled W4A4 on sm_120a ----
// Its kernel parameter. Pointers are device addresses; unused ones are 0.
struct BlockScaledParams {
  unsigned long long a;               // activation fragments, prepacked (e2m1)
  unsigned long long a_scales;        // activation scale words, prepacked
  unsigned long long a_global_scale;  // one f32 (NVFP4 activations), or 0
  unsigned long long weights;         // weight fragments, prepacked (e2m1)
  unsigned long long scales;          // weight scale words, prepacked
  unsigned long long global_scale;    // one f32 multiplied into every output (1 for MXFP4)
  unsigned long long bias;            // [N] in the output type, or 0
  unsigned long long c;               // output [M][N], row-major
  int m;
  int n;
  int k;
  int reserved;
};

// The two block-scaled MMA kinds: e2m1 x e2m1 with 4X (ue4m3) or 2X (ue8m0) scales, m16n8k64; and 8-bit (or fp4 in an
// 8-bit container) operands with 1X ue8m0 scales, m16n8k32, issued twice per K step of 64.
enum BlockScaledKind : int {
  kBlockScaledMxf4Nvf4 = 0,
  kBlockScaledMxf8f6f4 = 1,
};

// The activations are packed for a multiple of this many rows (zeros past M), so no CTA tile reads past the buffer.
constexpr int kBlockScaledRowPadding = 128;
// A lane's bytes of one prepacked fragment per (tile, K step of 64), for elements of `bits` bits in memory: m16 x k64
// activations 4 bits each (16 bytes for e2m1, 32 for 8-bit), n8 x k64 weights 2 bits each (8 or 16 bytes).
#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define QTUNE_ABI_FUNCTION __host__ __device__ constexpr  // the same arithmetic on both sides
#else
#define QTUNE_ABI_FUNCTION constexpr
#endif
QTUNE_ABI_FUNCTION int block_scaled_activation_lane_bytes(int bits) { return 4 * bits; }
QTUNE_ABI_FUNCTION int block_scaled_weight_lane_bytes(int bits) { return 2 * bits; }
#undef QTUNE_ABI_FUNCTION
constexpr int kBlockScaledActivationScaleBlockBytes = 32 * 4;  // a scale word per lane (lanes 4g, 4g + 1 used)
constexpr int kBlockScaledWeightScaleBlockBytes = 8 * 4;       // a scale word per column

}  // namespace device
}  // namespace qtune
