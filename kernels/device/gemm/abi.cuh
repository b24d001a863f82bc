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

}  // namespace device
}  // namespace qtune
