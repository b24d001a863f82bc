#include "kernels/families/mma_layout.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/codec.hpp"
#include "kernels/device/gemm/abi.cuh"
#include "kernels/error.hpp"
#include "kernels/parallel.hpp"

namespace qtune::mma {

namespace dv = qtune::device;

namespace {

int element_bits(int code) {
  if (code == dv::kElementF16 || code == dv::kElementBF16) return 16;
  if (code == dv::kElementS4 || code == dv::kElementE2M1) return 4;
  return 8;
}

const char* element_name(int code) {
  switch (code) {
    case dv::kElementF16: return "qd::kElementF16";
    case dv::kElementBF16: return "qd::kElementBF16";
    case dv::kElementE4M3: return "qd::kElementE4M3";
    case dv::kElementE5M2: return "qd::kElementE5M2";
    case dv::kElementS8: return "qd::kElementS8";
    case dv::kElementS4: return "qd::kElementS4";
    default: return "qd::kElementE2M1";
  }
}

const char* weight_kind_name(int kind) {
  switch (kind) {
    case dv::kWeightSignedInt: return "qd::kWeightSignedInt";
    case dv::kWeightUnsignedInt: return "qd::kWeightUnsignedInt";
    case dv::kWeightIntZero: return "qd::kWeightIntZero";
    case dv::kWeightFloatZero: return "qd::kWeightFloatZero";
    default: return "qd::kWeightFloat";
  }
}

const char* scale_mode_name(int mode) {
  switch (mode) {
    case dv::kScaleEpilogue: return "qd::kScaleEpilogue";
    case dv::kScaleDequant: return "qd::kScaleDequant";
    default: return "qd::kScaleAccumulator";
  }
}

const char* activation_scale_name(int mode) {
  switch (mode) {
    case dv::kActivationScaleNone: return "qd::kActivationScaleNone";
    case dv::kActivationScaleToken: return "qd::kActivationScaleToken";
    default: return "qd::kActivationScaleGroup";
  }
}

int plane_count(int bits) { return __builtin_popcount(static_cast<unsigned>(bits)); }
int plane_width(int bits, int j) {
  int seen = 0;
  for (int width = 8; width >= 1; width >>= 1) {
    if (bits & width) {
      if (seen == j) return width;
      ++seen;
    }
  }
  return 0;
}
int plane_offset(int bits, int j) {
  int offset = 0;
  for (int i = 0; i < j; ++i) offset += plane_width(bits, i);
  return offset;
}
int plane_word_base(int bits, int j, int values_per_register) {
  int base = 0;
  for (int i = 0; i < j; ++i) base += values_per_register * plane_width(bits, i) / 2;
  return base;
}

// Two's complement codes are stored offset-binary so the dequantizer subtracts a constant (the operand conversions of
// quantized activations flip the sign bit back); codes that are the tensor-core operand as they are stay raw.
uint32_t stored_code(const DeviceFormat& format, uint32_t code) {
  const uint32_t mask = (1u << format.weight_bits) - 1u;
  code &= mask;
  return format.offset_codes() ? code ^ (1u << (format.weight_bits - 1)) : code;
}

uint16_t to_compute_bits(const DeviceFormat& format, float value) {
  return format.compute == dv::kElementF16 ? float_to_f16_bits(value) : float_to_bf16_bits(value);
}
float from_compute_bits(const DeviceFormat& format, uint16_t bits) {
  return format.compute == dv::kElementF16 ? f16_bits_to_float(bits) : bf16_bits_to_float(bits);
}

void put_u16(std::vector<uint8_t>& buffer, size_t index, uint16_t value) { std::memcpy(buffer.data() + index * 2, &value, 2); }
uint16_t get_u16(const std::vector<uint8_t>& buffer, size_t index) {
  uint16_t value;
  std::memcpy(&value, buffer.data() + index * 2, 2);
  return value;
}
void put_f32(std::vector<uint8_t>& buffer, size_t index, float value) { std::memcpy(buffer.data() + index * 4, &value, 4); }
float get_f32(const std::vector<uint8_t>& buffer, size_t index) {
  float value;
  std::memcpy(&value, buffer.data() + index * 4, 4);
  return value;
}

// Byte offset inside an atom of word `word` of lane `lane`.
size_t word_offset(const DeviceFormat& format, int lane, int word) {
  if (format.core_matrix_atoms()) {
    // Word rho = (ks * 2 + nsub) * 2 + r of every lane is one 8 x 16-byte core matrix (lane 4 row + q at 4 lane),
    // stored at ((nsub * 4 + ks) * 2 + r) * 128: see format_traits.cuh.
    const int ks = word / 4, nsub = (word / 2) % 2, r = word % 2;
    return static_cast<size_t>(((nsub * 4 + ks) * 2 + r) * 128 + lane * 4);
  }
  const int slice_bytes = format.slice_bytes();
  const int slice = word * 4 / slice_bytes;
  const int within = word * 4 % slice_bytes;
  return static_cast<size_t>(slice) * 32 * slice_bytes + static_cast<size_t>(lane) * slice_bytes + within;
}

// Calls visit(n, k, word, bit) for every value of one atom: where the code bit `plane bit` of W[n][k] goes.
// Used by both prepack and unpack so the two are inverse by construction.
struct AtomValue {
  int n_in_strip;
  int k_in_atom;
  int lane;
  int rho;
  int v;
};

template <class Visit>
void for_each_atom_value(const DeviceFormat& format, Visit&& visit) {
  const int values_per_register = format.values_per_register();
  const int k_per_register = 128 / format.compute_bits();  // K elements in 16 bytes of a k-step row
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int rho = 0; rho < 16; ++rho) {
      const int ks = rho / 4, nsub = (rho / 2) % 2, r = rho % 2;
      for (int v = 0; v < values_per_register; ++v) {
        AtomValue value;
        value.n_in_strip = nsub * 8 + g;
        value.k_in_atom = ks * format.kstep() + r * k_per_register + t * values_per_register + v;
        value.lane = lane;
        value.rho = rho;
        value.v = v;
        visit(value);
      }
    }
  }
}

// Rows of a vector buffer: K groups, or one row of per-channel values.
int64_t vector_rows(const DeviceFormat& format, int64_t k) { return format.group_k > 0 ? k / format.group_k : 1; }

// The largest magnitude the f16/bf16 dequantizer produces before the scale: |code - zero| for integers (the code
// itself with a float zero point), the re-biased value for floats.
double largest_dequantized_code(const DeviceFormat& format) {
  if (format.is_float()) {
    ElementType type = ElementType::floating(format.exponent_bits, format.mantissa_bits);
    return max_finite(type) / format.value_factor();
  }
  return std::ldexp(1.0, format.weight_bits);
}

}  // namespace

int DeviceFormat::act_bits() const { return element_bits(activation); }
int DeviceFormat::compute_bits() const { return element_bits(compute); }
bool DeviceFormat::quantized_activations() const { return activation != dv::kElementF16 && activation != dv::kElementBF16; }
bool DeviceFormat::integer_mma() const { return compute == dv::kElementS8 || compute == dv::kElementS4; }
int DeviceFormat::slice_bytes() const {
  const int bytes = thread_words() * 4;
  return bytes % 16 == 0 ? 16 : (bytes % 8 == 0 ? 8 : 4);
}
bool DeviceFormat::core_matrix_atoms() const { return raw_operand() && weight_bits == 8; }
bool DeviceFormat::has_zero() const { return weight_kind == dv::kWeightIntZero || weight_kind == dv::kWeightFloatZero; }
bool DeviceFormat::is_float() const { return weight_kind == dv::kWeightFloat; }
bool DeviceFormat::staged_scales() const { return scale_mode != dv::kScaleEpilogue && group_k > 0; }
bool DeviceFormat::staged_zeros() const { return has_zero() && group_k > 0; }
bool DeviceFormat::staged_activation_scales() const { return activation_scales == dv::kActivationScaleGroup; }
int DeviceFormat::scale_bytes() const { return scale_mode == dv::kScaleAccumulator ? 4 : 2; }
int DeviceFormat::stage_group_k() const {
  if (staged_scales() || staged_zeros()) return group_k;
  return staged_activation_scales() ? activation_group_k : 0;
}
int DeviceFormat::flush_k() const {
  if (scale_mode == dv::kScaleAccumulator || staged_activation_scales()) return stage_group_k();
  return compute == dv::kElementE4M3 || compute == dv::kElementE5M2 ? atom_k() : 0;
}
bool DeviceFormat::raw_operand() const { return quantized_activations() && weight_bits == compute_bits(); }
bool DeviceFormat::offset_codes() const { return weight_kind == dv::kWeightSignedInt && !raw_operand(); }
double DeviceFormat::value_factor() const {
  if (raw_operand()) return 1.0;
  if (is_float()) {
    const int source_bias = (1 << (exponent_bits - 1)) - 1;
    int target_bias = 127;  // bf16
    if (compute == dv::kElementF16) target_bias = 15;
    if (compute == dv::kElementE4M3) target_bias = 7;
    if (compute == dv::kElementE5M2) target_bias = 15;
    return std::ldexp(1.0, target_bias - source_bias);
  }
  if (integer_mma()) return std::ldexp(1.0, weight_bits - compute_bits());
  return 1.0;
}

std::string DeviceFormat::template_arguments() const {
  return std::string(element_name(activation)) + ", " + element_name(compute) + ", " + weight_kind_name(weight_kind) +
         ", " + std::to_string(weight_bits) + ", " + std::to_string(exponent_bits) + ", " + std::to_string(mantissa_bits) +
         ", " + scale_mode_name(scale_mode) + ", " + std::to_string(group_k) + ", " +
         activation_scale_name(activation_scales) + ", " + std::to_string(activation_group_k) + ", " + element_name(output) +
         (scale_group_n > 1 ? ", " + std::to_string(scale_group_n) : std::string());
}

namespace {

int activation_code(ActivationType type) {
  switch (type) {
    case ActivationType::F16: return dv::kElementF16;
    case ActivationType::BF16: return dv::kElementBF16;
    case ActivationType::E4M3: return dv::kElementE4M3;
    case ActivationType::E5M2: return dv::kElementE5M2;
    case ActivationType::Int8: return dv::kElementS8;
    case ActivationType::Int4: return dv::kElementS4;
    case ActivationType::E2M1: return dv::kElementE2M1;
  }
  return dv::kElementF16;
}

bool grouped(const WeightScaling& scaling) {
  return scaling.granularity == WeightScaleGranularity::PerGroup || scaling.granularity == WeightScaleGranularity::PerBlock;
}

// Why the 8-bit / 4-bit MMA path cannot run a format with quantized activations.
std::optional<std::string> quantized_activation_reason(const FormatSpec& format) {
  const std::string name = format.to_string();
  const ElementType operand = element_type_of(format.activation);
  const ElementType& weight = format.weight;
  if (format.activation == ActivationType::E2M1) {
    return name + ": fp4 activations need the block-scaled MMA of Blackwell, which the mma family does not use (the bsmma family runs them on sm_120a/sm_121a)";
  }
  if (format.zero_point != ZeroPoint::None) {
    return name + ": zero points are not implemented with quantized activations (use signed weights)";
  }
  if (format.activation_scale.global_scale) {
    return name + ": a global activation scale (+t) is not implemented in the mma family";
  }
  if (weight.is_integer()) {
    if (operand.is_integer() && weight.bits > operand.bits) {
      return name + ": " + weight.name() + " weights do not fit " + operand.name() + " tensor-core operands";
    }
    const int widest_exact = format.activation == ActivationType::E4M3 ? 5 : 4;
    if (operand.is_float() && weight.bits > widest_exact) {
      return name + ": " + weight.name() + " weights are not exact " + operand.name() + " values";
    }
  } else {
    if (operand.is_integer()) return name + ": float weights (" + weight.name() + ") need fp8 activations, not " + operand.name();
    if (weight.bits == 8) {
      if (weight != ElementType::floating(4, 3) && weight != ElementType::floating(5, 2)) {
        return name + ": 8-bit float weights must be e4m3 or e5m2 for the fp8 MMA, not " + weight.name();
      }
    } else if (weight.exponent_bits > operand.exponent_bits || weight.mantissa_bits > operand.mantissa_bits ||
               (operand == ElementType::floating(5, 2) && weight.exponent_bits == 5)) {
      return name + ": " + weight.name() + " weights are not bit-exact " + operand.name() + " operands";
    }
  }
  const int kstep = 256 / operand.bits;
  if (grouped(format.weight_scale) && format.weight_scale.group_k % kstep != 0) {
    return name + ": scale group " + std::to_string(format.weight_scale.group_k) +
           " along K is not a multiple of the mma k-step (" + std::to_string(kstep) + ")";
  }
  if (format.activation_scale.granularity == ActivationScaleGranularity::PerGroup) {
    if (format.activation_scale.group_k % kstep != 0) {
      return name + ": activation scale group " + std::to_string(format.activation_scale.group_k) +
             " is not a multiple of the mma k-step (" + std::to_string(kstep) + ")";
    }
    if (grouped(format.weight_scale) && format.weight_scale.group_k != format.activation_scale.group_k) {
      return name + ": weight scale groups (" + std::to_string(format.weight_scale.group_k) +
             " along K) and activation scale groups (" + std::to_string(format.activation_scale.group_k) +
             ") must be equal";
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> unsupported_format_reason(const FormatSpec& format) {
  const std::string name = format.to_string();
  if (format.activation_is_quantized()) return quantized_activation_reason(format);
  if (format.weight.is_float() && format.activation == ActivationType::F16 && format.weight.exponent_bits > 5) {
    return name + ": " + format.weight.name() + " weights have more exponent bits than f16; use bf16 activations";
  }
  if (grouped(format.weight_scale) && format.weight_scale.group_k % 16 != 0) {
    return name + ": scale group " + std::to_string(format.weight_scale.group_k) +
           " along K is not a multiple of the mma k-step (16)";
  }
  return std::nullopt;
}

DeviceFormat device_format(const FormatSpec& format) {
  if (auto reason = unsupported_format_reason(format)) QTUNE_THROW(UnsupportedError, *reason);
  DeviceFormat device;
  device.activation = activation_code(format.activation);
  device.compute = device.activation;
  if (format.weight == ElementType::floating(4, 3) && format.activation_is_quantized()) device.compute = dv::kElementE4M3;
  if (format.weight == ElementType::floating(5, 2) && format.activation_is_quantized()) device.compute = dv::kElementE5M2;
  device.weight_bits = format.weight.bits;
  if (format.weight.is_float()) {
    device.weight_kind = dv::kWeightFloat;
    device.exponent_bits = format.weight.exponent_bits;
    device.mantissa_bits = format.weight.mantissa_bits;
  } else if (format.weight.kind == ElementKind::SignedInt) {
    device.weight_kind = dv::kWeightSignedInt;
  } else {
    device.weight_kind = format.zero_point == ZeroPoint::Integer ? dv::kWeightIntZero
                         : format.zero_point == ZeroPoint::Float ? dv::kWeightFloatZero
                                                                 : dv::kWeightUnsignedInt;
  }
  const bool is_grouped = grouped(format.weight_scale);
  device.group_k = is_grouped ? format.weight_scale.group_k : 0;
  device.scale_group_n = format.weight_scale.granularity == WeightScaleGranularity::PerBlock ? format.weight_scale.group_n : 1;
  if (format.activation_is_quantized()) {
    // Channel and tensor scales go to the epilogue; groups and blocks (expanded per column) to the partial sums.
    device.scale_mode = is_grouped ? dv::kScaleAccumulator : dv::kScaleEpilogue;
    switch (format.activation_scale.granularity) {
      case ActivationScaleGranularity::None: device.activation_scales = dv::kActivationScaleNone; break;
      case ActivationScaleGranularity::PerTensor:
      case ActivationScaleGranularity::PerToken: device.activation_scales = dv::kActivationScaleToken; break;
      case ActivationScaleGranularity::PerGroup:
        device.activation_scales = dv::kActivationScaleGroup;
        device.activation_group_k = format.activation_scale.group_k;
        break;
    }
  } else {
    // Channel scales go to the f32 epilogue; groups (and float zero points, which need the scale) to the dequantizer.
    device.scale_mode = (is_grouped || device.weight_kind == dv::kWeightFloatZero) ? dv::kScaleDequant : dv::kScaleEpilogue;
    device.activation_scales = dv::kActivationScaleNone;
    device.activation_group_k = 0;
  }
  device.output = format.output == OutputType::F16 ? dv::kElementF16 : dv::kElementBF16;
  return device;
}

TileShape TileShape::from(const KernelConfig& config) {
  TileShape tiles;
  tiles.bm = config.get("bm");
  tiles.bn = config.get("bn");
  tiles.bk = config.get("bk");
  tiles.wm = config.get("wm");
  tiles.wn = config.get("wn");
  tiles.wk = config.get("wk");
  tiles.stages = config.get("stages");
  tiles.split = config.get("split");
  tiles.raster = config.get("raster");
  const auto gscale = config.params.find("gscale");
  tiles.gscale = gscale == config.params.end() ? 0 : gscale->second;
  return tiles;
}

std::string TileShape::template_arguments() const {
  return std::to_string(bm) + ", " + std::to_string(bn) + ", " + std::to_string(bk) + ", " + std::to_string(wm) + ", " +
         std::to_string(wn) + ", " + std::to_string(wk) + ", " + std::to_string(stages) + ", " +
         std::to_string(split) + ", " + std::to_string(raster);
}

SharedLayout shared_layout(const DeviceFormat& format, const TileShape& tiles) {
  SharedLayout layout;
  const int atoms_k = tiles.bk / format.atom_k();
  layout.a_stage = tiles.bm * tiles.bk * format.act_bits() / 8;
  layout.w_stage = (tiles.bn / 16) * atoms_k * format.atom_bytes();
  const int group = format.stage_group_k();
  const int group_rows = group > 0 ? (group < tiles.bk ? tiles.bk / group : 1) : 0;
  layout.s_stage = format.staged_scales() ? group_rows * tiles.bn * format.scale_bytes() : 0;
  layout.z_stage = format.staged_zeros() ? group_rows * tiles.bn * 2 : 0;
  layout.sa_stage = format.staged_activation_scales() ? group_rows * tiles.bm * 4 : 0;
  layout.stage = layout.a_stage + layout.w_stage + layout.s_stage + layout.z_stage + layout.sa_stage;
  layout.pipeline = tiles.stages * layout.stage;
  layout.reduce = (tiles.wk - 1) * tiles.bm * tiles.bn * 4;
  layout.dynamic_bytes = std::max(layout.pipeline, layout.reduce);
  return layout;
}

uint64_t packed_weight_bytes(const DeviceFormat& format, int64_t n, int64_t k) {
  return static_cast<uint64_t>(n / 16) * static_cast<uint64_t>(k / format.atom_k()) * format.atom_bytes();
}

uint64_t packed_vector_bytes(const DeviceFormat& format, int64_t n, int64_t k) {
  const int element_bytes = format.scale_mode == dv::kScaleDequant ? 2 : 4;
  return static_cast<uint64_t>(vector_rows(format, k)) * static_cast<uint64_t>(n) * element_bytes;
}

uint64_t packed_zero_bytes(const DeviceFormat& format, int64_t n, int64_t k) {
  return format.has_zero() ? static_cast<uint64_t>(vector_rows(format, k)) * static_cast<uint64_t>(n) * 2 : 0;
}

PackedBuffers prepack_weights(const QuantizedWeights& weights, const DeviceFormat& format) {
  const int64_t n = weights.n, k = weights.k;
  if (n % 16 != 0) QTUNE_INPUT_ERROR("n: " + std::to_string(n) + " is not a multiple of 16 (the weight atom width)");
  if (k % format.atom_k() != 0) {
    QTUNE_INPUT_ERROR("k: " + std::to_string(k) + " is not a multiple of " + std::to_string(format.atom_k()) +
                      " (the weight atom depth)");
  }
  if (weights.codes.size() != static_cast<size_t>(n * k)) QTUNE_INPUT_ERROR("weights.codes: size is not n * k");
  PackedBuffers packed;

  // ---- codes ----
  std::vector<uint8_t>& out = packed["weights"];
  out.assign(packed_weight_bytes(format, n, k), 0);
  const int64_t atoms_k = k / format.atom_k();
  const int planes = plane_count(format.weight_bits);
  parallel_for(n / 16, [&](int64_t begin, int64_t end) {
    std::vector<uint32_t> words(32 * static_cast<size_t>(format.thread_words()));
    for (int64_t strip = begin; strip < end; ++strip) {
      for (int64_t atom = 0; atom < atoms_k; ++atom) {
        std::fill(words.begin(), words.end(), 0u);
        for_each_atom_value(format, [&](const AtomValue& value) {
          const int64_t row = strip * 16 + value.n_in_strip;
          const int64_t column = atom * format.atom_k() + value.k_in_atom;
          const uint32_t code = stored_code(format, weights.codes[static_cast<size_t>(row * k + column)]);
          for (int j = 0; j < planes; ++j) {
            const int width = plane_width(format.weight_bits, j);
            const int fields_per_lane = format.lane_bits() / width;
            const int word = plane_word_base(format.weight_bits, j, format.values_per_register()) + value.rho / fields_per_lane;
            const int position = value.v * format.lane_bits() + (value.rho % fields_per_lane) * width;
            const uint32_t bits = (code >> plane_offset(format.weight_bits, j)) & ((1u << width) - 1u);
            words[static_cast<size_t>(value.lane * format.thread_words() + word)] |= bits << position;
          }
        });
        uint8_t* atom_bytes = out.data() + (strip * atoms_k + atom) * format.atom_bytes();
        for (int lane = 0; lane < 32; ++lane) {
          for (int word = 0; word < format.thread_words(); ++word) {
            std::memcpy(atom_bytes + word_offset(format, lane, word),
                        &words[static_cast<size_t>(lane * format.thread_words() + word)], 4);
          }
        }
      }
    }
  });

  // ---- scales, zero points, global scale ----
  const double factor = format.value_factor();
  const int64_t rows = vector_rows(format, k);
  const int64_t group = format.group_k > 0 ? format.group_k : k;
  float global = weights.global_scale;
  std::vector<uint8_t>& scales = packed["scales"];
  scales.assign(packed_vector_bytes(format, n, k), 0);
  if (format.scale_mode == dv::kScaleEpilogue) {
    for (int64_t column = 0; column < n; ++column) {
      put_f32(scales, static_cast<size_t>(column), static_cast<float>(weights.scales.at(column, 0) * factor * global));
    }
    global = 1.0f;
  } else if (format.scale_mode == dv::kScaleAccumulator) {
    // f32 per (K group, column) in natural column order; block scales repeat over their Gn columns.
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t column = 0; column < n; ++column) {
        put_f32(scales, static_cast<size_t>(row * n + column), static_cast<float>(weights.scales.at(column, row * group) * factor));
      }
    }
  } else {
    // Compute-type scales, normalised by a power of two that moves into the f32 global scale. Integer codes: the
    // largest scale lies in [1, 2), so the f16 range covers any reasonable spread. Float codes re-biased into f16/bf16
    // span a wide range of their own (e2m1: 2^-15 .. 6 * 2^-14 in f16, e5m2: all of f16): the largest scale lies in
    // [X, 2X) with X chosen so that the largest dequantized value times its scale is about 2^13 in f16 (1 in bf16),
    // far from f16's overflow (e5m2 codes reach 57344) and from subnormal products (small e2m1 codes).
    double largest = 0.0;
    for (float value : weights.scales.values) largest = std::max(largest, std::fabs(static_cast<double>(value)) * factor);
    int top = 0;  // log2 of X
    if (format.is_float()) {
      const bool f16 = format.compute == dv::kElementF16;
      const double target = f16 ? std::ldexp(1.0, 13) : 1.0;
      top = static_cast<int>(std::floor(std::log2(target / largest_dequantized_code(format))));
      if (f16) top = std::min(top, 14);  // the scale itself stays below 2^15
    }
    const double normaliser = largest > 0.0 ? std::ldexp(1.0, static_cast<int>(std::floor(std::log2(largest))) - top) : 1.0;
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t column = 0; column < n; ++column) {
        const double value = weights.scales.at(column, row * group) * factor / normaliser;
        put_u16(scales, static_cast<size_t>(row * n + permuted_column(column)), to_compute_bits(format, static_cast<float>(value)));
      }
    }
    global = static_cast<float>(global * normaliser);
  }
  if (format.has_zero()) {
    if (weights.zero_points.empty()) QTUNE_INPUT_ERROR("weights.zero_points: the format has zero points but none are given");
    std::vector<uint8_t>& zeros = packed["zeros"];
    zeros.assign(static_cast<size_t>(rows * n * 2), 0);
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t column = 0; column < n; ++column) {
        const float zero = weights.zero_points[static_cast<size_t>(weights.scales.index(column, row * group))];
        uint16_t bits;
        if (format.weight_kind == dv::kWeightIntZero) {
          bits = to_compute_bits(format, zero);
        } else {
          // The kernel computes code * scale + (-(zero * scale)) with the compute-type scale it was given.
          const float scale = from_compute_bits(format, get_u16(scales, static_cast<size_t>(row * n + permuted_column(column))));
          bits = to_compute_bits(format, -zero * scale);
        }
        put_u16(zeros, static_cast<size_t>(row * n + permuted_column(column)), bits);
      }
    }
  }
  std::vector<uint8_t>& global_buffer = packed["global_scale"];
  global_buffer.assign(4, 0);
  put_f32(global_buffer, 0, global);
  return packed;
}

QuantizedWeights unpack_weights(const PackedBuffers& packed, const FormatSpec& spec, const DeviceFormat& format, int64_t n,
                                int64_t k) {
  auto buffer = [&](const char* name) -> const std::vector<uint8_t>& {
    auto found = packed.find(name);
    if (found == packed.end()) QTUNE_INPUT_ERROR(std::string("packed: no '") + name + "' buffer");
    return found->second;
  };
  const std::vector<uint8_t>& in = buffer("weights");
  if (in.size() != packed_weight_bytes(format, n, k)) QTUNE_INPUT_ERROR("packed.weights: wrong size for the shape");
  QuantizedWeights weights;
  weights.format = spec;
  weights.n = n;
  weights.k = k;
  weights.codes.assign(static_cast<size_t>(n * k), 0);
  const int64_t atoms_k = k / format.atom_k();
  const int planes = plane_count(format.weight_bits);
  for (int64_t strip = 0; strip < n / 16; ++strip) {
    for (int64_t atom = 0; atom < atoms_k; ++atom) {
      const uint8_t* atom_bytes = in.data() + (strip * atoms_k + atom) * format.atom_bytes();
      for_each_atom_value(format, [&](const AtomValue& value) {
        uint32_t code = 0;
        for (int j = 0; j < planes; ++j) {
          const int width = plane_width(format.weight_bits, j);
          const int fields_per_lane = format.lane_bits() / width;
          const int word = plane_word_base(format.weight_bits, j, format.values_per_register()) + value.rho / fields_per_lane;
          const int position = value.v * format.lane_bits() + (value.rho % fields_per_lane) * width;
          uint32_t bits;
          std::memcpy(&bits, atom_bytes + word_offset(format, value.lane, word), 4);
          code |= ((bits >> position) & ((1u << width) - 1u)) << plane_offset(format.weight_bits, j);
        }
        const int64_t row = strip * 16 + value.n_in_strip;
        const int64_t column = atom * format.atom_k() + value.k_in_atom;
        weights.codes[static_cast<size_t>(row * k + column)] = static_cast<uint8_t>(stored_code(format, code));
      });
    }
  }

  // Scales (and zero points) per (channel, K group) as the kernel applies them; the global scale as it multiplies.
  const double factor = format.value_factor();
  const int64_t rows = vector_rows(format, k);
  const std::vector<uint8_t>& scales = buffer("scales");
  if (scales.size() != packed_vector_bytes(format, n, k)) QTUNE_INPUT_ERROR("packed.scales: wrong size for the shape");
  weights.scales.type = ScaleType::F32;
  weights.scales.rows = n;
  weights.scales.cols = rows;
  weights.scales.rows_per_scale = 1;
  weights.scales.cols_per_scale = format.group_k > 0 ? format.group_k : k;
  weights.scales.values.assign(static_cast<size_t>(n * rows), 0.0f);
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t column = 0; column < n; ++column) {
      float stored = 0.0f;
      switch (format.scale_mode) {
        case dv::kScaleEpilogue: stored = get_f32(scales, static_cast<size_t>(column)); break;
        case dv::kScaleAccumulator: stored = get_f32(scales, static_cast<size_t>(row * n + column)); break;
        default: stored = from_compute_bits(format, get_u16(scales, static_cast<size_t>(row * n + permuted_column(column))));
      }
      weights.scales.values[static_cast<size_t>(column * rows + row)] = static_cast<float>(stored / factor);
    }
  }
  for (float value : weights.scales.values) weights.scales.bits.push_back(encode_scale(ScaleType::F32, value));
  if (format.has_zero()) {
    const std::vector<uint8_t>& zeros = buffer("zeros");
    weights.zero_points.assign(static_cast<size_t>(n * rows), 0.0f);
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t column = 0; column < n; ++column) {
        const size_t index = static_cast<size_t>(row * n + permuted_column(column));
        float zero = from_compute_bits(format, get_u16(zeros, index));
        if (format.weight_kind == dv::kWeightFloatZero) {
          zero = -zero / from_compute_bits(format, get_u16(scales, index));
        }
        weights.zero_points[static_cast<size_t>(column * rows + row)] = zero;
      }
    }
    for (float value : weights.zero_points) weights.zero_point_bits.push_back(encode_scale(ScaleType::F32, value));
  }
  const std::vector<uint8_t>& global = buffer("global_scale");
  if (global.size() != 4) QTUNE_INPUT_ERROR("packed.global_scale: expected 4 bytes");
  weights.global_scale = get_f32(global, 0);
  return weights;
}

std::vector<float> kernel_weights(const PackedBuffers& packed, const FormatSpec& spec, const DeviceFormat& format,
                                  int64_t n, int64_t k) {
  const QuantizedWeights unpacked = unpack_weights(packed, spec, format, n, k);  // checks the buffers' sizes
  const std::vector<uint8_t>& scales = packed.at("scales");
  const float global = get_f32(packed.at("global_scale"), 0);
  const std::vector<uint8_t>* zeros = format.has_zero() ? &packed.at("zeros") : nullptr;
  const DecodeTable decoded(spec.weight);
  const double factor = format.value_factor();
  const int64_t group = format.group_k > 0 ? format.group_k : k;
  // Rounds like the device's f16x2 / bf16x2 arithmetic (round to nearest even, overflow to inf).
  auto round_compute = [&](double value) {
    const float single = static_cast<float>(value);
    return format.compute == dv::kElementF16 ? round_to_f16(single) : round_to_bf16(single);
  };
  std::vector<float> result(static_cast<size_t>(n * k));
  for (int64_t column = 0; column < n; ++column) {
    for (int64_t depth = 0; depth < k; ++depth) {
      const int64_t row = depth / group;
      const size_t vector_index = static_cast<size_t>(row * n + permuted_column(column));
      const uint8_t code = unpacked.codes[static_cast<size_t>(column * k + depth)];
      double weight = 0.0;
      if (format.quantized_activations()) {
        const double operand = decoded[code] / factor;  // what the tensor core multiplies, exactly
        const float scale = format.scale_mode == dv::kScaleEpilogue ? get_f32(scales, static_cast<size_t>(column))
                                                                    : get_f32(scales, static_cast<size_t>(row * n + column));
        weight = operand * scale * global;
      } else {
        double value = format.is_float() ? decoded[code] / factor : decoded[code];  // exact in the compute type
        if (format.weight_kind == dv::kWeightIntZero) value -= from_compute_bits(format, get_u16(*zeros, vector_index));
        if (format.scale_mode == dv::kScaleDequant) {
          const double scale = from_compute_bits(format, get_u16(scales, vector_index));
          const double zero_term =
              format.weight_kind == dv::kWeightFloatZero ? from_compute_bits(format, get_u16(*zeros, vector_index)) : 0.0;
          weight = static_cast<double>(round_compute(value * scale + zero_term)) * global;
        } else {
          weight = value * get_f32(scales, static_cast<size_t>(column)) * global;
        }
      }
      result[static_cast<size_t>(column * k + depth)] = static_cast<float>(weight);
    }
  }
  return result;
}

std::string instantiation_preamble(const std::string& what, const std::string& header, const DeviceFormat& format,
                                   const std::string& tiles_template, const std::string& tiles_arguments) {
  return "// qtune " + what + "\n#include \"gemm/" + header + "\"\nnamespace qd = qtune::device;\n" +
         "using QtuneFormat = qd::Format<" + format.template_arguments() + ">;\n" + "using QtuneTiles = qd::" + tiles_template +
         "<" + tiles_arguments + ">;\n";
}

uint64_t buffer_address(const std::map<std::string, uint64_t>& device_addresses, const std::string& buffer_name,
                        bool required) {
  const auto found = device_addresses.find(buffer_name);
  if (found == device_addresses.end() || found->second == 0) {
    if (required) QTUNE_INPUT_ERROR("buffers: no device address for required buffer '" + buffer_name + "'");
    return 0;
  }
  return found->second;
}

uint64_t packed_activation_bytes(const DeviceFormat& format, int64_t m, int64_t k) {
  return static_cast<uint64_t>(m) * static_cast<uint64_t>(k) * static_cast<uint64_t>(format.act_bits()) / 8;
}

uint64_t packed_activation_scale_bytes(const DeviceFormat& format, int64_t m, int64_t k) {
  switch (format.activation_scales) {
    case dv::kActivationScaleToken: return static_cast<uint64_t>(m) * 4;
    case dv::kActivationScaleGroup:
      return static_cast<uint64_t>(k / format.activation_group_k) * static_cast<uint64_t>(m) * 4;
    default: return 0;
  }
}

PackedBuffers prepack_activations(const QuantizedActivations& activations, const DeviceFormat& format) {
  const int64_t m = activations.m, k = activations.k;
  PackedBuffers packed;
  std::vector<uint8_t>& a = packed["a"];
  if (!format.quantized_activations()) {
    if (activations.bits16.size() != static_cast<size_t>(m * k)) QTUNE_INPUT_ERROR("activations.bits16: expected m * k 16-bit values");
    a.resize(activations.bits16.size() * 2);
    std::memcpy(a.data(), activations.bits16.data(), a.size());
    return packed;
  }
  if (activations.codes.size() != static_cast<size_t>(m * k)) QTUNE_INPUT_ERROR("activations.codes: expected m * k codes");
  if (format.act_bits() == 4 && k % 2 != 0) QTUNE_INPUT_ERROR("k: 4-bit activations need an even K, got " + std::to_string(k));
  a.assign(packed_activation_bytes(format, m, k), 0);
  if (format.act_bits() == 8) {
    std::memcpy(a.data(), activations.codes.data(), a.size());
  } else {
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = static_cast<uint8_t>((activations.codes[2 * i] & 0x0Fu) | ((activations.codes[2 * i + 1] & 0x0Fu) << 4));
    }
  }
  if (format.activation_scales == dv::kActivationScaleNone) return packed;
  if (activations.scales.empty()) QTUNE_INPUT_ERROR("activations.scales: the format scales its activations but none are given");
  std::vector<uint8_t>& scales = packed["a_scales"];
  scales.assign(packed_activation_scale_bytes(format, m, k), 0);
  const float global = activations.global_scale;
  if (format.activation_scales == dv::kActivationScaleToken) {
    for (int64_t row = 0; row < m; ++row) put_f32(scales, static_cast<size_t>(row), activations.scales.at(row, 0) * global);
  } else {
    const int64_t group = format.activation_group_k;
    for (int64_t g = 0; g < k / group; ++g) {
      for (int64_t row = 0; row < m; ++row) {
        put_f32(scales, static_cast<size_t>(g * m + row), activations.scales.at(row, g * group) * global);
      }
    }
  }
  return packed;
}

}  // namespace qtune::mma
