#pragma once
// How a quantization format is described, apart from any kernel that executes it.
// Every kernel, search space, measurement and report refers to a FormatSpec; its text form is the key users type.
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qtune {

enum class ElementKind { SignedInt, UnsignedInt, Float };

// How a floating-point eXmY type uses its top exponent code.
enum class FloatEncoding {
  Finite,     // every code is a finite number (OCP MX sub-byte types: e2m1, e2m3, e3m2, ...)
  FiniteNaN,  // no infinities; only all-ones exponent and mantissa is NaN (the "fn" types: e4m3fn, other 8-bit)
  Ieee,       // IEEE-754 style: all-ones exponent is inf (mantissa 0) or NaN (e5m2)
};

// A weight or activation element type: INT1..INT8 (signed two's complement or unsigned) or a signed float eXmY of at most 8 bits.
struct ElementType {
  ElementKind kind = ElementKind::SignedInt;
  int bits = 4;           // total storage bits, sign included
  int exponent_bits = 0;  // floats only
  int mantissa_bits = 0;  // floats only

  static ElementType signed_int(int bits);
  static ElementType unsigned_int(int bits);
  static ElementType floating(int exponent_bits, int mantissa_bits);
  // Accepts int1..int8, uint1..uint8, eXmY, and the aliases fp8 (e4m3), fp4 (e2m1), fp6 (e3m2). Throws InputError naming `field`.
  static ElementType parse(std::string_view text, std::string_view field = "weight type");

  bool is_float() const { return kind == ElementKind::Float; }
  bool is_integer() const { return kind != ElementKind::Float; }
  FloatEncoding float_encoding() const;  // floats only
  int exponent_bias() const;             // floats only: 2^(E-1) - 1
  std::string name() const;              // "int4", "uint3", "e2m1"
  friend bool operator==(const ElementType&, const ElementType&) = default;
};

enum class ActivationType { F16, BF16, E4M3, E5M2, Int8, Int4, E2M1 };
enum class ScaleType { F32, F16, BF16, UE8M0, E4M3 };
enum class OutputType { F16, BF16 };
enum class ZeroPoint { None, Integer, Float };

enum class WeightScaleGranularity {
  PerTensor,
  PerChannel,  // one scale per output channel (row n of W[N,K])
  PerGroup,    // one scale per (n, group of group_k along K)
  PerBlock,    // one scale per block of group_n x group_k
};

struct WeightScaling {
  WeightScaleGranularity granularity = WeightScaleGranularity::PerChannel;
  int group_n = 1;           // PerBlock only
  int group_k = 0;           // PerGroup and PerBlock
  bool global_scale = false; // PerGroup plus one f32 tensor scale (NVFP4)
  ScaleType type = ScaleType::F16;
  friend bool operator==(const WeightScaling&, const WeightScaling&) = default;
};

enum class ActivationScaleGranularity { None, PerTensor, PerToken, PerGroup };

struct ActivationScaling {
  ActivationScaleGranularity granularity = ActivationScaleGranularity::None;
  int group_k = 0;  // PerGroup only: 1 x group_k
  bool global_scale = false;  // PerGroup plus one f32 tensor scale (NVFP4 activations)
  ScaleType type = ScaleType::F32;
  friend bool operator==(const ActivationScaling&, const ActivationScaling&) = default;
};

// A complete quantized-GEMM format: C[M,N] = dequant(A[M,K]) · dequant(W[N,K])ᵀ.
struct FormatSpec {
  ElementType weight = ElementType::signed_int(4);
  ZeroPoint zero_point = ZeroPoint::None;  // only with unsigned integer weights
  WeightScaling weight_scale;
  ActivationType activation = ActivationType::F16;
  ActivationScaling activation_scale;
  OutputType output = OutputType::F16;

  // Parses the compact text spec documented in README.md (preset names are specs). Throws InputError naming the field.
  static FormatSpec parse(std::string_view text);
  // Canonical text: parse(to_string()) == *this, and to_string() of a canonical text returns that text.
  std::string to_string() const;
  // Throws InputError if the fields contradict each other (e.g. a zero point on a float weight).
  void validate() const;
  // Throws InputError if this format cannot describe an N x K weight (e.g. group size does not divide K).
  void validate_shape(int64_t n, int64_t k) const;

  // Bits per weight element including its share of scales and zero points (for a large N x K matrix).
  double bits_per_weight() const;
  // The same for an N x K matrix: per-tensor and per-channel scales and the global scale add their share too.
  double bits_per_weight(int64_t n, int64_t k) const;
  int activation_bits() const;
  bool activation_is_quantized() const { return activation != ActivationType::F16 && activation != ActivationType::BF16; }
  // The "w4a16"-style family name.
  std::string family() const;

  nlohmann::json to_json() const;
  static FormatSpec from_json(const nlohmann::json& json);  // throws InputError naming the field
  friend bool operator==(const FormatSpec&, const FormatSpec&) = default;
};

// The specs of a format list as users type it (`--format`): specs separated by ',' or ';', blanks around each
// ignored. Commas also separate a spec's own options, so a piece with '=' and no ':' continues the spec before it
// when that one has options: "w4a16-int4-ch,w8a8-fp8-ch:scale=f16,act-scale=token;w8a16-int8-ch" is three specs.
// Returns the spec texts in order, unparsed; throws InputError "<field>: empty format in '<text>'" for an empty one.
std::vector<std::string> split_format_list(std::string_view text, std::string_view field = "--format");
// The specs of such a list parsed (InputError "<field>: '<spec>': <why>"), the first of equal formats kept.
std::vector<FormatSpec> parse_format_list(std::string_view text, std::string_view field = "--format");

struct FormatPreset {
  std::string name;         // the spec text; FormatSpec::parse(name) gives the preset
  std::string description;  // one line for `qtune formats`
};
const std::vector<FormatPreset>& format_presets();

// GPU architectures (compute capability x10: 75, 80, 86, 89, 90, 100, 120) and whether their tensor cores
// can run a format, with the reason when they cannot.
struct ArchSupport {
  int sm = 0;
  bool supported = false;
  std::string reason;  // empty when supported
};
const std::vector<int>& known_architectures();
std::vector<ArchSupport> architecture_support(const FormatSpec& format);
ArchSupport architecture_support(const FormatSpec& format, int sm);

// Names as used in reports and JSON ("e4m3", "e2m1"); spec texts print e4m3/e2m1 activations as fp8/fp4, and
// parse_activation_type accepts both spellings.
std::string to_string(ActivationType type);
std::string to_string(ScaleType type);
std::string to_string(OutputType type);
std::string to_string(ZeroPoint zero_point);                    // "none", "int", "float"
std::string to_string(WeightScaleGranularity granularity);      // "tensor", "channel", "group", "block"
std::string to_string(ActivationScaleGranularity granularity);  // "none", "tensor", "token", "group"
ActivationType parse_activation_type(std::string_view text, std::string_view field = "activation type");
ScaleType parse_scale_type(std::string_view text, std::string_view field = "scale type");
OutputType parse_output_type(std::string_view text, std::string_view field = "output type");
ElementType element_type_of(ActivationType type);  // the element type of a quantized activation (int8, e4m3, ...)
int bits_of(ScaleType type);

}  // namespace qtune
