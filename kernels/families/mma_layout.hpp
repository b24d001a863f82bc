#pragma once
// Host mirror of the mma family's device traits (kernels/device/gemm/format_traits.cuh): how a FormatSpec maps to
// the kernel's template arguments, the shared-memory budget of a tile configuration, and the prepacked layouts.
// Instantiation sources static_assert that the device computes the same sizes, so the two cannot drift apart.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kernels/family.hpp"
#include "kernels/format.hpp"
#include "kernels/quantize.hpp"

namespace qtune::mma {

// The Format<...> template arguments for one FormatSpec.
struct DeviceFormat {
  int activation = 0;  // device::ElementCode: the tensor-core A operand
  int compute = 0;     // tensor-core B operand type (device::ElementCode) the weights become
  int weight_kind = 0; // device::WeightKind
  int weight_bits = 4;
  int exponent_bits = 0;
  int mantissa_bits = 0;
  int scale_mode = 0;  // device::ScaleMode
  int group_k = 0;     // K elements per scale group; 0: one scale vector per channel
  int activation_scales = 0;  // device::ActivationScaleMode
  int activation_group_k = 0;
  int output = 0;      // device::ElementCode
  int scale_group_n = 1;  // weight columns per scale: Gn of Gn x Gk blocks, else 1

  int act_bits() const;
  int compute_bits() const;
  bool quantized_activations() const;  // int8, int4, e4m3 or e5m2 activations (8-bit / 4-bit MMA)
  bool integer_mma() const;            // s8 or s4 operands, s32 partial sums
  int kstep() const { return 256 / compute_bits(); }  // K elements of one mma.sync
  int atom_k() const { return 4 * kstep(); }
  int lane_bits() const { return compute_bits(); }
  int values_per_register() const { return 32 / compute_bits(); }
  int thread_words() const { return values_per_register() * weight_bits / 2; }
  int atom_bytes() const { return 32 * 4 * thread_words(); }
  int slice_bytes() const;
  bool has_zero() const;
  bool is_float() const;
  bool staged_scales() const;
  bool staged_zeros() const;
  bool staged_activation_scales() const;
  int scale_bytes() const;      // bytes of one stored weight scale: 4 (f32: epilogue, accumulator) or 2 (compute type)
  int stage_group_k() const;    // K elements per row of the vectors staged per K tile (0: none)
  int flush_k() const;          // K elements between flushes of the partial sums (0: none), see mma_gemm.cuh
  bool raw_operand() const;     // the stored code is the tensor-core operand as it is
  // Raw 8-bit operands: an atom is 16 core matrices of 8 columns x 16 K-bytes, readable by ldmatrix and by a wgmma
  // shared-memory descriptor (format_traits.cuh).
  bool core_matrix_atoms() const;
  bool offset_codes() const;    // signed integer codes are stored offset-binary (code + 2^(bits-1))
  // Multiplier from the value the kernel puts into the tensor core for a code (before any scale) to the code's true
  // value: 2^(target bias - bias) for float codes re-biased into f16/bf16/fp8, 2^-(lane - bits) for integers moved to
  // the top of an s8/s4 lane, else 1. The host divides the scales by it.
  double value_factor() const;

  // "qd::kElementF16, qd::kElementF16, qd::kWeightSignedInt, 4, 0, 0, qd::kScaleEpilogue, 0, 0, 0, qd::kElementF16"
  // (and a twelfth, scale_group_n, for block scales only, so other kernels' sources stay as they were)
  std::string template_arguments() const;
};

// Why this family cannot run `format` on any architecture (nullopt: it can).
std::optional<std::string> unsupported_format_reason(const FormatSpec& format);
// Throws UnsupportedError with unsupported_format_reason() when there is one.
DeviceFormat device_format(const FormatSpec& format);

// The Tiles<...> template arguments, and the kernel's SCALE_AFTER ("gscale", absent: 0).
struct TileShape {
  int bm = 16, bn = 128, bk = 256;
  int wm = 1, wn = 4, wk = 1;
  int stages = 4, split = 1, raster = 0;
  int gscale = 0;

  static TileShape from(const KernelConfig& config);  // throws InputError for a missing parameter (gscale may be absent)
  int threads() const { return 32 * wm * wn * wk; }
  int warp_tile_m() const { return bm / wm; }
  int warp_tile_n() const { return bn / wn; }
  std::string template_arguments() const;  // "16, 128, 256, 1, 4, 1, 4, 1, 0"
  // The kernel templates' trailing SCALE_AFTER argument: "" for gscale=0 (the default), so that those sources, and
  // their cubins and cache keys, are the ones from before the option; ", 1" otherwise.
  std::string scale_after_argument() const { return gscale == 0 ? "" : ", " + std::to_string(gscale); }
};

// Shared-memory use of one configuration, mirroring device::MmaGemm.
struct SharedLayout {
  int a_stage = 0;
  int w_stage = 0;
  int s_stage = 0;
  int z_stage = 0;
  int sa_stage = 0;  // activation group scales
  int stage = 0;
  int pipeline = 0;
  int reduce = 0;
  int dynamic_bytes = 0;  // what the launch passes
  int static_bytes = 16;  // the split-K flag, rounded
};
SharedLayout shared_layout(const DeviceFormat& format, const TileShape& tiles);

// ---- prepacked layouts ----
uint64_t packed_weight_bytes(const DeviceFormat& format, int64_t n, int64_t k);
// Bytes of the scale buffer: rows (K groups, or 1) x n values of 2 (compute type) or 4 (f32) bytes.
uint64_t packed_vector_bytes(const DeviceFormat& format, int64_t n, int64_t k);
// Bytes of the zero-point buffer: rows x n compute-type values.
uint64_t packed_zero_bytes(const DeviceFormat& format, int64_t n, int64_t k);

// The first lines of every instantiation source of a kernel on this layout: the comment saying what it is ("qtune " +
// `what`), the device header under gemm/, and the QtuneFormat and QtuneTiles aliases (qd::`tiles_template`<...>).
std::string instantiation_preamble(const std::string& what, const std::string& header, const DeviceFormat& format,
                                   const std::string& tiles_template, const std::string& tiles_arguments);

// The device address pack_arguments() gets for a buffer; 0 for a missing optional one. A required one that is missing
// (or 0) throws InputError naming it.
uint64_t buffer_address(const std::map<std::string, uint64_t>& device_addresses, const std::string& buffer_name,
                        bool required);

// Activations: "a" [m][k] in the activation type (4-bit codes two per byte, the lower k in the low nibble) and, for
// quantized activations with scales, "a_scales" in f32: [m] per token (a per-tensor scale repeated), or [k/G][m] per
// group (group-major, so a tile's rows are contiguous).
uint64_t packed_activation_bytes(const DeviceFormat& format, int64_t m, int64_t k);
uint64_t packed_activation_scale_bytes(const DeviceFormat& format, int64_t m, int64_t k);  // 0: no "a_scales"
PackedBuffers prepack_activations(const QuantizedActivations& activations, const DeviceFormat& format);

PackedBuffers prepack_weights(const QuantizedWeights& weights, const DeviceFormat& format);
QuantizedWeights unpack_weights(const PackedBuffers& packed, const FormatSpec& spec, const DeviceFormat& format,
                                int64_t n, int64_t k);
// The weights W[n][k] the kernel multiplies the activations by, from the packed buffers, emulating its arithmetic:
// for f16/bf16 activations the dequantized value times its compute-type scale (plus a float zero point) rounded to
// the compute type as the device rounds (an overflow gives inf, as on the GPU), for quantized activations the exact
// operand; then the f32 scales (epilogue or per K group) and the global scale. Tests compare it with the quantized
// weights, so a layout or a scale that only the GPU would get wrong fails on the CPU.
std::vector<float> kernel_weights(const PackedBuffers& packed, const FormatSpec& spec, const DeviceFormat& format,
                                  int64_t n, int64_t k);

// Position of column `column` inside a compute-type scale row: within each 16-column strip, the values for
// columns g and g + 8 sit next to each other at 2g, 2g + 1 so one 32-bit load serves both n8 tiles of a lane.
inline int64_t permuted_column(int64_t column) {
  const int64_t strip = column / 16, within = column % 16;
  return strip * 16 + (within % 8) * 2 + within / 8;
}

}  // namespace qtune::mma
