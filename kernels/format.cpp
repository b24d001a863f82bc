#include "kernels/format.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "kernels/codec.hpp"
#include "kernels/error.hpp"
#include "kernels/text_escape.hpp"

// Every user-facing error starts with the field it is about.
#define QTUNE_FIELD_ERROR(field, message) QTUNE_INPUT_ERROR(std::string(field) + ": " + (message))

namespace qtune {
namespace {

// Bounded and escaped: a spec can be anything a user or a file passes.
std::string quote(std::string_view text) { return quote_input(text); }

std::string lower_trimmed(std::string_view text) {
  size_t begin = 0;
  size_t end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  std::string result(text.substr(begin, end - begin));
  for (char& c : result) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return result;
}

// A decimal count of at most 9 digits (no sign); false on anything else.
bool parse_count(std::string_view text, int& value) {
  if (text.empty() || text.size() > 9) return false;
  if (!std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size();
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t found = text.find(separator, start);
    parts.push_back(text.substr(start, found == std::string_view::npos ? std::string_view::npos : found - start));
    if (found == std::string_view::npos) break;
    start = found + 1;
  }
  return parts;
}

ElementType make_float(int exponent_bits, int mantissa_bits, std::string_view field) {
  std::string name = "e" + std::to_string(exponent_bits) + "m" + std::to_string(mantissa_bits);
  if (exponent_bits < 1) QTUNE_FIELD_ERROR(field, name + " needs at least one exponent bit");
  if (mantissa_bits < 0) QTUNE_FIELD_ERROR(field, name + " has a negative mantissa width");
  if (1 + exponent_bits + mantissa_bits > 8) {
    QTUNE_FIELD_ERROR(field, name + " has " + std::to_string(1 + exponent_bits + mantissa_bits) +
                                 " bits (1 sign + " + std::to_string(exponent_bits) + " + " +
                                 std::to_string(mantissa_bits) + "); floating-point types have at most 8");
  }
  ElementType type;
  type.kind = ElementKind::Float;
  type.bits = 1 + exponent_bits + mantissa_bits;
  type.exponent_bits = exponent_bits;
  type.mantissa_bits = mantissa_bits;
  return type;
}

ElementType make_int(ElementKind kind, int bits, std::string_view field) {
  std::string prefix = kind == ElementKind::SignedInt ? "int" : "uint";
  if (bits < 1 || bits > 8) {
    QTUNE_FIELD_ERROR(field, prefix + std::to_string(bits) + " is not one of " + prefix + "1.." + prefix + "8");
  }
  ElementType type;
  type.kind = kind;
  type.bits = bits;
  return type;
}

// The weight type as spec texts spell it: the fp8/fp6/fp4 aliases, and "int" for unsigned weights with a zero
// point (the -zp suffix is what makes them unsigned).
std::string spec_weight_name(const ElementType& type, ZeroPoint zero_point) {
  if (type.is_float()) {
    if (type == ElementType::floating(4, 3)) return "fp8";
    if (type == ElementType::floating(2, 1)) return "fp4";
    if (type == ElementType::floating(3, 2)) return "fp6";
    return type.name();
  }
  if (type.kind == ElementKind::UnsignedInt && zero_point != ZeroPoint::None) return "int" + std::to_string(type.bits);
  return type.name();
}

std::string spec_activation_name(ActivationType type) {
  if (type == ActivationType::E4M3) return "fp8";
  if (type == ActivationType::E2M1) return "fp4";
  return to_string(type);
}

std::optional<ActivationType> try_parse_activation(std::string_view text) {
  if (text == "f16" || text == "fp16") return ActivationType::F16;
  if (text == "bf16") return ActivationType::BF16;
  if (text == "fp8" || text == "e4m3") return ActivationType::E4M3;
  if (text == "e5m2") return ActivationType::E5M2;
  if (text == "int8") return ActivationType::Int8;
  if (text == "int4") return ActivationType::Int4;
  if (text == "fp4" || text == "e2m1") return ActivationType::E2M1;
  return std::nullopt;
}

// The activation type a name implies when it does not say: by width, integer for integer weights.
ActivationType default_activation(int activation_bits, bool integer_weights) {
  if (activation_bits == 8) return integer_weights ? ActivationType::Int8 : ActivationType::E4M3;
  if (activation_bits == 4) return integer_weights ? ActivationType::Int4 : ActivationType::E2M1;
  return ActivationType::F16;
}

// Sets every field the options control to the default the name fields imply.
void apply_defaults(FormatSpec& spec) {
  spec.weight_scale.type = spec.activation == ActivationType::F16    ? ScaleType::F16
                           : spec.activation == ActivationType::BF16 ? ScaleType::BF16
                                                                     : ScaleType::F32;
  spec.activation_scale = ActivationScaling{};
  if (spec.activation_is_quantized()) {
    switch (spec.weight_scale.granularity) {
      case WeightScaleGranularity::PerTensor:
        spec.activation_scale.granularity = ActivationScaleGranularity::PerTensor;
        break;
      case WeightScaleGranularity::PerBlock:
        spec.activation_scale.granularity = ActivationScaleGranularity::PerGroup;
        spec.activation_scale.group_k = spec.weight_scale.group_k;
        break;
      default: spec.activation_scale.granularity = ActivationScaleGranularity::PerToken; break;
    }
  }
  spec.output = spec.activation == ActivationType::BF16 ? OutputType::BF16 : OutputType::F16;
}

// g<G> or g<G>+t; nullopt when the text does not start like a group.
std::optional<std::pair<int, bool>> parse_group(std::string_view text, std::string_view field) {
  if (text.size() < 2 || text[0] != 'g' || !std::isdigit(static_cast<unsigned char>(text[1]))) return std::nullopt;
  std::string_view digits = text.substr(1);
  bool global = false;
  if (digits.ends_with("+t")) {
    global = true;
    digits.remove_suffix(2);
  }
  int group = 0;
  if (!parse_count(digits, group)) QTUNE_FIELD_ERROR(field, quote(text) + " is not g<G> or g<G>+t");
  if (group < 1) QTUNE_FIELD_ERROR(field, "the group size must be positive, got " + quote(text));
  return std::make_pair(group, global);
}

// A weight granularity token (ch, tensor, g<G>, g<G>+t, block<Gn>x<Gk>); nullopt when the token is something else.
std::optional<WeightScaling> parse_weight_granularity(std::string_view token) {
  WeightScaling scaling;
  if (token == "ch") return scaling;
  if (token == "tensor") {
    scaling.granularity = WeightScaleGranularity::PerTensor;
    return scaling;
  }
  if (token.starts_with("block")) {
    std::string_view sizes = token.substr(5);
    size_t cross = sizes.find('x');
    int group_n = 0;
    int group_k = 0;
    if (cross == std::string_view::npos || !parse_count(sizes.substr(0, cross), group_n) ||
        !parse_count(sizes.substr(cross + 1), group_k)) {
      QTUNE_FIELD_ERROR("block size", quote(token) + " is not block<Gn>x<Gk>, e.g. block128x128");
    }
    if (group_n < 1 || group_k < 1) QTUNE_FIELD_ERROR("block size", "both block sides must be positive in " + quote(token));
    if (group_n == 1) {  // a 1 x G block is a group along K
      scaling.granularity = WeightScaleGranularity::PerGroup;
      scaling.group_k = group_k;
      return scaling;
    }
    scaling.granularity = WeightScaleGranularity::PerBlock;
    scaling.group_n = group_n;
    scaling.group_k = group_k;
    return scaling;
  }
  if (auto group = parse_group(token, "group size")) {
    scaling.granularity = WeightScaleGranularity::PerGroup;
    scaling.group_k = group->first;
    scaling.global_scale = group->second;
    return scaling;
  }
  return std::nullopt;
}

std::string weight_granularity_text(const WeightScaling& scaling) {
  switch (scaling.granularity) {
    case WeightScaleGranularity::PerTensor: return "tensor";
    case WeightScaleGranularity::PerChannel: return "ch";
    case WeightScaleGranularity::PerGroup:
      return "g" + std::to_string(scaling.group_k) + (scaling.global_scale ? "+t" : "");
    case WeightScaleGranularity::PerBlock:
      return "block" + std::to_string(scaling.group_n) + "x" + std::to_string(scaling.group_k);
  }
  return "?";
}

std::string activation_scaling_text(const ActivationScaling& scaling) {
  switch (scaling.granularity) {
    case ActivationScaleGranularity::None: return "none";
    case ActivationScaleGranularity::PerTensor: return "tensor";
    case ActivationScaleGranularity::PerToken: return "token";
    case ActivationScaleGranularity::PerGroup:
      return "g" + std::to_string(scaling.group_k) + (scaling.global_scale ? "+t" : "");
  }
  return "?";
}

void parse_activation_scaling(std::string_view text, ActivationScaling& scaling) {
  scaling.group_k = 0;
  scaling.global_scale = false;
  if (text == "none") {
    scaling.granularity = ActivationScaleGranularity::None;
  } else if (text == "tensor") {
    scaling.granularity = ActivationScaleGranularity::PerTensor;
  } else if (text == "token") {
    scaling.granularity = ActivationScaleGranularity::PerToken;
  } else if (auto group = parse_group(text, "act-scale")) {
    scaling.granularity = ActivationScaleGranularity::PerGroup;
    scaling.group_k = group->first;
    scaling.global_scale = group->second;
  } else {
    QTUNE_FIELD_ERROR("act-scale", quote(text) + " is not none, tensor, token, g<G> or g<G>+t");
  }
}

const char* const kFormatNameHelp =
    "w<bits>a<bits>-<weight type>[-ch|-tensor|-g<G>|-g<G>+t|-block<Gn>x<Gk>][-zp|-fzp][-<activation type>]";

// The name part of a spec (no preset aliases), with every option-controlled field at its default.
FormatSpec parse_general_name(std::string_view name) {
  auto not_a_name = [&]() {
    QTUNE_FIELD_ERROR("format name", quote(name) + " is neither a preset (see `qtune formats`) nor a spec " +
                                         kFormatNameHelp);
  };
  size_t a_position = name.find('a');
  size_t dash = name.find('-');
  if (!name.starts_with('w') || a_position == std::string_view::npos || dash == std::string_view::npos ||
      a_position > dash) {
    not_a_name();
  }
  int weight_bits_in_name = 0;
  int activation_bits_in_name = 0;
  if (!parse_count(name.substr(1, a_position - 1), weight_bits_in_name) ||
      !parse_count(name.substr(a_position + 1, dash - a_position - 1), activation_bits_in_name)) {
    not_a_name();
  }
  std::vector<std::string_view> tokens = split(name.substr(dash + 1), '-');
  for (std::string_view token : tokens) {
    if (token.empty()) QTUNE_FIELD_ERROR("format name", quote(name) + " has an empty part between dashes");
  }

  FormatSpec spec;
  spec.weight = ElementType::parse(tokens[0], "weight type");
  spec.weight_scale = WeightScaling{};
  enum Stage { AfterWeight, AfterGranularity, AfterZeroPoint, AfterActivation } stage = AfterWeight;
  bool activation_given = false;
  for (size_t i = 1; i < tokens.size(); ++i) {
    std::string_view token = tokens[i];
    if (auto scaling = parse_weight_granularity(token)) {
      if (stage != AfterWeight) QTUNE_FIELD_ERROR("granularity", quote(token) + " must come right after the weight type");
      spec.weight_scale = *scaling;
      stage = AfterGranularity;
    } else if (token == "zp" || token == "fzp") {
      if (stage > AfterGranularity) QTUNE_FIELD_ERROR("zero point", "-" + std::string(token) + " must come before the activation type");
      spec.zero_point = token == "zp" ? ZeroPoint::Integer : ZeroPoint::Float;
      stage = AfterZeroPoint;
    } else if (auto activation = try_parse_activation(token)) {
      if (stage == AfterActivation) QTUNE_FIELD_ERROR("activation type", "given twice in " + quote(name));
      spec.activation = *activation;
      activation_given = true;
      stage = AfterActivation;
    } else {
      QTUNE_FIELD_ERROR("format name", "unknown part " + quote(token) + " in " + quote(name) +
                                           " (expected a granularity ch|tensor|g<G>|g<G>+t|block<Gn>x<Gk>, zp or fzp, "
                                           "or an activation type f16|bf16|fp8|e5m2|int8|int4|fp4)");
    }
  }

  if (spec.zero_point != ZeroPoint::None) {
    if (spec.weight.is_float()) {
      QTUNE_FIELD_ERROR("zero point", "a zero point needs integer weights, not " + spec.weight.name());
    }
    spec.weight = ElementType::unsigned_int(spec.weight.bits);  // w = (q - z) * s with unsigned q
  } else if (spec.weight.kind == ElementKind::UnsignedInt) {
    QTUNE_FIELD_ERROR("zero point", "unsigned weights (" + spec.weight.name() + ") need a zero point: add -zp or -fzp");
  }
  if (weight_bits_in_name != spec.weight.bits) {
    QTUNE_FIELD_ERROR("wbits", "w" + std::to_string(weight_bits_in_name) + " does not match the " +
                                   std::to_string(spec.weight.bits) + "-bit weight type " + quote(tokens[0]));
  }
  if (!activation_given) {
    if (activation_bits_in_name != 16 && activation_bits_in_name != 8 && activation_bits_in_name != 4) {
      QTUNE_FIELD_ERROR("abits", "a" + std::to_string(activation_bits_in_name) +
                                     " is not an activation width (16, 8 or 4)");
    }
    spec.activation = default_activation(activation_bits_in_name, spec.weight.is_integer());
  } else if (spec.activation_bits() != activation_bits_in_name) {
    QTUNE_FIELD_ERROR("abits", "a" + std::to_string(activation_bits_in_name) + " does not match the " +
                                   std::to_string(spec.activation_bits()) + "-bit activation type " +
                                   to_string(spec.activation));
  }
  apply_defaults(spec);
  return spec;
}

void apply_options(FormatSpec& spec, std::string_view options) {
  std::set<std::string, std::less<>> seen;
  for (std::string_view option : split(options, ',')) {
    if (option.empty()) QTUNE_FIELD_ERROR("option", "empty option in " + quote(options));
    size_t equals = option.find('=');
    if (equals == std::string_view::npos) QTUNE_FIELD_ERROR("option", quote(option) + " is not key=value");
    std::string_view key = option.substr(0, equals);
    std::string_view value = option.substr(equals + 1);
    if (!seen.insert(std::string(key)).second) QTUNE_FIELD_ERROR("option", quote(key) + " is given twice");
    if (key == "scale") {
      spec.weight_scale.type = parse_scale_type(value, "scale");
    } else if (key == "act-scale") {
      parse_activation_scaling(value, spec.activation_scale);
    } else if (key == "act-scale-type") {
      spec.activation_scale.type = parse_scale_type(value, "act-scale-type");
    } else if (key == "out") {
      spec.output = parse_output_type(value, "out");
    } else {
      QTUNE_FIELD_ERROR("option", "unknown key " + quote(key) + " (expected scale, act-scale, act-scale-type or out)");
    }
  }
}

FormatSpec parse_general(std::string_view text) {
  size_t colon = text.find(':');
  FormatSpec spec = parse_general_name(text.substr(0, colon));
  if (colon != std::string_view::npos) apply_options(spec, text.substr(colon + 1));
  return spec;
}

// OCP and NVIDIA names, and the alias the issue uses for GPTQ int3. Only `printed` aliases are canonical.
struct Alias {
  std::string_view name;
  std::string_view general;
  bool printed;
};
constexpr Alias kAliases[] = {
    {"mxfp4", "w4a16-fp4-g32:scale=ue8m0", true},
    {"nvfp4", "w4a16-fp4-g16+t:scale=e4m3", true},
    {"mxint4", "w4a16-int4-g32:scale=ue8m0", true},
    {"w4a4-nvfp4", "w4a4-fp4-g16+t:scale=e4m3,act-scale=g16+t,act-scale-type=e4m3", true},
    {"w4a4-mxfp4", "w4a4-fp4-g32:scale=ue8m0,act-scale=g32,act-scale-type=ue8m0", true},
    {"w4a16-int3-g128-zp", "w3a16-int3-g128-zp", false},
};

struct ResolvedAlias {
  std::string name;
  FormatSpec spec;
  bool printed;
};

const std::vector<ResolvedAlias>& aliases() {
  static const std::vector<ResolvedAlias> resolved = [] {
    std::vector<ResolvedAlias> list;
    for (const Alias& alias : kAliases) {
      list.push_back({std::string(alias.name), parse_general(alias.general), alias.printed});
    }
    return list;
  }();
  return resolved;
}

bool is_one_of(ScaleType type, std::initializer_list<ScaleType> allowed) {
  return std::find(allowed.begin(), allowed.end(), type) != allowed.end();
}

}  // namespace

// ---------------------------------------------------------------- ElementType

ElementType ElementType::signed_int(int bits) { return make_int(ElementKind::SignedInt, bits, "weight type"); }
ElementType ElementType::unsigned_int(int bits) { return make_int(ElementKind::UnsignedInt, bits, "weight type"); }
ElementType ElementType::floating(int exponent_bits, int mantissa_bits) {
  return make_float(exponent_bits, mantissa_bits, "weight type");
}

ElementType ElementType::parse(std::string_view text, std::string_view field) {
  std::string name = lower_trimmed(text);
  std::string_view view = name;
  if (view == "fp8") return floating(4, 3);
  if (view == "fp4") return floating(2, 1);
  if (view == "fp6") return floating(3, 2);
  int bits = 0;
  if (view.starts_with("uint") && parse_count(view.substr(4), bits)) return make_int(ElementKind::UnsignedInt, bits, field);
  if (view.starts_with("int") && parse_count(view.substr(3), bits)) return make_int(ElementKind::SignedInt, bits, field);
  size_t m_position = view.find('m');
  int exponent_bits = 0;
  int mantissa_bits = 0;
  if (view.starts_with('e') && m_position != std::string_view::npos &&
      parse_count(view.substr(1, m_position - 1), exponent_bits) &&
      parse_count(view.substr(m_position + 1), mantissa_bits)) {
    return make_float(exponent_bits, mantissa_bits, field);
  }
  QTUNE_FIELD_ERROR(field, quote(text) + " is not a type (int1..int8, uint1..uint8, eXmY with 1+X+Y <= 8, fp8, fp6, fp4)");
}

FloatEncoding ElementType::float_encoding() const {
  if (!is_float()) QTUNE_THROW(Error, name() + " is not a floating-point type");
  if (bits < 8) return FloatEncoding::Finite;
  if (exponent_bits == 5 && mantissa_bits == 2) return FloatEncoding::Ieee;
  return FloatEncoding::FiniteNaN;
}

int ElementType::exponent_bias() const {
  if (!is_float()) QTUNE_THROW(Error, name() + " is not a floating-point type");
  return (1 << (exponent_bits - 1)) - 1;
}

std::string ElementType::name() const {
  switch (kind) {
    case ElementKind::SignedInt: return "int" + std::to_string(bits);
    case ElementKind::UnsignedInt: return "uint" + std::to_string(bits);
    case ElementKind::Float: return "e" + std::to_string(exponent_bits) + "m" + std::to_string(mantissa_bits);
  }
  return "?";
}

// ---------------------------------------------------------------- enum names

std::string to_string(ActivationType type) {
  switch (type) {
    case ActivationType::F16: return "f16";
    case ActivationType::BF16: return "bf16";
    case ActivationType::E4M3: return "e4m3";
    case ActivationType::E5M2: return "e5m2";
    case ActivationType::Int8: return "int8";
    case ActivationType::Int4: return "int4";
    case ActivationType::E2M1: return "e2m1";
  }
  return "?";
}

std::string to_string(ScaleType type) {
  switch (type) {
    case ScaleType::F32: return "f32";
    case ScaleType::F16: return "f16";
    case ScaleType::BF16: return "bf16";
    case ScaleType::UE8M0: return "ue8m0";
    case ScaleType::E4M3: return "e4m3";
  }
  return "?";
}

std::string to_string(OutputType type) { return type == OutputType::BF16 ? "bf16" : "f16"; }

std::string to_string(ZeroPoint zero_point) {
  switch (zero_point) {
    case ZeroPoint::None: return "none";
    case ZeroPoint::Integer: return "int";
    case ZeroPoint::Float: return "float";
  }
  return "?";
}

std::string to_string(WeightScaleGranularity granularity) {
  switch (granularity) {
    case WeightScaleGranularity::PerTensor: return "tensor";
    case WeightScaleGranularity::PerChannel: return "channel";
    case WeightScaleGranularity::PerGroup: return "group";
    case WeightScaleGranularity::PerBlock: return "block";
  }
  return "?";
}

std::string to_string(ActivationScaleGranularity granularity) {
  switch (granularity) {
    case ActivationScaleGranularity::None: return "none";
    case ActivationScaleGranularity::PerTensor: return "tensor";
    case ActivationScaleGranularity::PerToken: return "token";
    case ActivationScaleGranularity::PerGroup: return "group";
  }
  return "?";
}

ActivationType parse_activation_type(std::string_view text, std::string_view field) {
  if (auto type = try_parse_activation(lower_trimmed(text))) return *type;
  QTUNE_FIELD_ERROR(field, quote(text) + " is not an activation type (f16, bf16, fp8 = e4m3, e5m2, int8, int4, fp4 = e2m1)");
}

ScaleType parse_scale_type(std::string_view text, std::string_view field) {
  std::string name = lower_trimmed(text);
  if (name == "f32" || name == "fp32") return ScaleType::F32;
  if (name == "f16" || name == "fp16") return ScaleType::F16;
  if (name == "bf16") return ScaleType::BF16;
  if (name == "ue8m0" || name == "e8m0") return ScaleType::UE8M0;
  if (name == "e4m3" || name == "fp8") return ScaleType::E4M3;
  QTUNE_FIELD_ERROR(field, quote(text) + " is not a scale type (f32, f16, bf16, ue8m0, e4m3)");
}

OutputType parse_output_type(std::string_view text, std::string_view field) {
  std::string name = lower_trimmed(text);
  if (name == "f16" || name == "fp16") return OutputType::F16;
  if (name == "bf16") return OutputType::BF16;
  QTUNE_FIELD_ERROR(field, quote(text) + " is not an output type (f16, bf16)");
}

ElementType element_type_of(ActivationType type) {
  switch (type) {
    case ActivationType::E4M3: return ElementType::floating(4, 3);
    case ActivationType::E5M2: return ElementType::floating(5, 2);
    case ActivationType::E2M1: return ElementType::floating(2, 1);
    case ActivationType::Int8: return ElementType::signed_int(8);
    case ActivationType::Int4: return ElementType::signed_int(4);
    case ActivationType::F16:
    case ActivationType::BF16: break;
  }
  QTUNE_THROW(Error, to_string(type) + " activations are not quantized and have no element type of 8 bits or fewer");
}

int bits_of(ScaleType type) {
  switch (type) {
    case ScaleType::F32: return 32;
    case ScaleType::F16:
    case ScaleType::BF16: return 16;
    case ScaleType::UE8M0:
    case ScaleType::E4M3: return 8;
  }
  return 0;
}

// ---------------------------------------------------------------- FormatSpec

int FormatSpec::activation_bits() const {
  switch (activation) {
    case ActivationType::F16:
    case ActivationType::BF16: return 16;
    case ActivationType::E4M3:
    case ActivationType::E5M2:
    case ActivationType::Int8: return 8;
    case ActivationType::Int4:
    case ActivationType::E2M1: return 4;
  }
  return 0;
}

std::string FormatSpec::family() const {
  return "w" + std::to_string(weight.bits) + "a" + std::to_string(activation_bits());
}

FormatSpec FormatSpec::parse(std::string_view text) {
  std::string normalized = lower_trimmed(text);
  if (normalized.empty()) QTUNE_FIELD_ERROR("format", "the spec is empty");
  std::string_view view = normalized;
  size_t colon = view.find(':');
  std::string_view name = view.substr(0, colon);
  FormatSpec spec;
  auto alias = std::find_if(aliases().begin(), aliases().end(), [&](const ResolvedAlias& a) { return a.name == name; });
  if (alias != aliases().end()) {
    spec = alias->spec;
  } else {
    spec = parse_general_name(name);
  }
  if (colon != std::string_view::npos) {
    if (colon + 1 == view.size()) QTUNE_FIELD_ERROR("option", "nothing follows ':' in " + quote(text));
    apply_options(spec, view.substr(colon + 1));
  }
  spec.validate();
  return spec;
}

std::string FormatSpec::to_string() const {
  for (const ResolvedAlias& alias : aliases()) {
    if (!alias.printed) continue;
    if (*this == alias.spec) return alias.name;
    FormatSpec with_alias_output = *this;
    with_alias_output.output = alias.spec.output;
    if (with_alias_output == alias.spec) return alias.name + ":out=" + qtune::to_string(output);
  }

  const int abits = activation_bits();
  const bool activation_printed = activation != default_activation(abits, weight.is_integer()) ||
                                  (activation_is_quantized() && abits != weight.bits);
  std::string text = family() + "-" + spec_weight_name(weight, zero_point);
  if (!(weight_scale.granularity == WeightScaleGranularity::PerChannel && activation_printed)) {
    text += "-" + weight_granularity_text(weight_scale);
  }
  if (zero_point == ZeroPoint::Integer) text += "-zp";
  if (zero_point == ZeroPoint::Float) text += "-fzp";
  if (activation_printed) text += "-" + spec_activation_name(activation);

  FormatSpec defaults = *this;
  apply_defaults(defaults);
  std::vector<std::string> options;
  if (weight_scale.type != defaults.weight_scale.type) options.push_back("scale=" + qtune::to_string(weight_scale.type));
  ActivationScaling scaling_without_type = activation_scale;
  scaling_without_type.type = defaults.activation_scale.type;
  if (scaling_without_type != defaults.activation_scale) {
    options.push_back("act-scale=" + activation_scaling_text(activation_scale));
  }
  if (activation_scale.type != defaults.activation_scale.type) {
    options.push_back("act-scale-type=" + qtune::to_string(activation_scale.type));
  }
  if (output != defaults.output) options.push_back("out=" + qtune::to_string(output));
  for (size_t i = 0; i < options.size(); ++i) text += (i == 0 ? ":" : ",") + options[i];
  return text;
}

void FormatSpec::validate() const {
  // Weight element type: the struct may come from JSON or code, so re-check what the constructors check.
  if (weight.is_float()) {
    if (weight.bits != 1 + weight.exponent_bits + weight.mantissa_bits) {
      QTUNE_FIELD_ERROR("weight type", "bits " + std::to_string(weight.bits) + " do not equal 1 + " +
                                           std::to_string(weight.exponent_bits) + " + " +
                                           std::to_string(weight.mantissa_bits));
    }
    make_float(weight.exponent_bits, weight.mantissa_bits, "weight type");
  } else {
    make_int(weight.kind, weight.bits, "weight type");
    if (weight.exponent_bits != 0 || weight.mantissa_bits != 0) {
      QTUNE_FIELD_ERROR("weight type", "integer types have no exponent or mantissa bits");
    }
  }

  if (zero_point != ZeroPoint::None) {
    if (weight.is_float()) QTUNE_FIELD_ERROR("zero point", "a zero point needs integer weights, not " + weight.name());
    if (weight.kind == ElementKind::SignedInt) {
      QTUNE_FIELD_ERROR("zero point", "a zero point makes the weights unsigned: use uint" + std::to_string(weight.bits) +
                                          " (the -zp suffix does this), not " + weight.name());
    }
    if (zero_point == ZeroPoint::Float && weight_scale.type == ScaleType::UE8M0) {
      QTUNE_FIELD_ERROR("zero point", "a float zero point is stored in the scale type, and ue8m0 holds only powers of two");
    }
  } else if (weight.kind == ElementKind::UnsignedInt) {
    QTUNE_FIELD_ERROR("zero point", "unsigned weights (" + weight.name() + ") need a zero point (-zp or -fzp)");
  }

  switch (weight_scale.granularity) {
    case WeightScaleGranularity::PerTensor:
    case WeightScaleGranularity::PerChannel:
      if (weight_scale.group_n != 1 || weight_scale.group_k != 0) {
        QTUNE_FIELD_ERROR("group size", "only group and block scales take a group size, not " +
                                            qtune::to_string(weight_scale.granularity) + " scales");
      }
      if (weight_scale.global_scale) {
        QTUNE_FIELD_ERROR("global scale", "a global tensor scale (+t) goes only with group scales g<G>+t");
      }
      break;
    case WeightScaleGranularity::PerGroup:
      if (weight_scale.group_k < 1) QTUNE_FIELD_ERROR("group size", "must be positive, got " + std::to_string(weight_scale.group_k));
      if (weight_scale.group_n != 1) QTUNE_FIELD_ERROR("block size", "group scales cover one output channel (group_n 1)");
      break;
    case WeightScaleGranularity::PerBlock:
      if (weight_scale.group_k < 1 || weight_scale.group_n < 1) {
        QTUNE_FIELD_ERROR("block size", "both block sides must be positive, got " + std::to_string(weight_scale.group_n) +
                                            "x" + std::to_string(weight_scale.group_k));
      }
      if (weight_scale.group_n == 1) QTUNE_FIELD_ERROR("block size", "a 1 x G block is the group granularity g<G>");
      if (weight_scale.global_scale) {
        QTUNE_FIELD_ERROR("global scale", "a global tensor scale (+t) goes only with group scales g<G>+t");
      }
      break;
  }
  if (weight_scale.global_scale && !is_one_of(weight_scale.type, {ScaleType::E4M3, ScaleType::F16})) {
    QTUNE_FIELD_ERROR("scale", "a global tensor scale (+t) needs e4m3 or f16 group scales, not " +
                                   qtune::to_string(weight_scale.type));
  }

  if (!activation_is_quantized()) {
    if (activation_scale.granularity != ActivationScaleGranularity::None || activation_scale.group_k != 0 ||
        activation_scale.global_scale) {
      QTUNE_FIELD_ERROR("act-scale", qtune::to_string(activation) + " activations are not quantized and take no scales");
    }
    if (activation_scale.type != ScaleType::F32) {
      QTUNE_FIELD_ERROR("act-scale-type", qtune::to_string(activation) + " activations are not quantized and take no scales");
    }
  } else {
    switch (activation_scale.granularity) {
      case ActivationScaleGranularity::None:
        if (activation_scale.type != ScaleType::F32) {
          QTUNE_FIELD_ERROR("act-scale-type", "activations without scales (act-scale=none) have no scale type");
        }
        [[fallthrough]];
      case ActivationScaleGranularity::PerTensor:
      case ActivationScaleGranularity::PerToken:
        if (activation_scale.group_k != 0 || activation_scale.global_scale) {
          QTUNE_FIELD_ERROR("act-scale", "only group activation scales g<G>[+t] take a group size or a global scale");
        }
        break;
      case ActivationScaleGranularity::PerGroup:
        if (activation_scale.group_k < 1) {
          QTUNE_FIELD_ERROR("act-scale", "the group size must be positive, got " + std::to_string(activation_scale.group_k));
        }
        if (activation_scale.global_scale && !is_one_of(activation_scale.type, {ScaleType::E4M3, ScaleType::F16})) {
          QTUNE_FIELD_ERROR("act-scale-type", "a global activation scale (+t) needs e4m3 or f16 group scales, not " +
                                                  qtune::to_string(activation_scale.type));
        }
        break;
    }
  }
}

void FormatSpec::validate_shape(int64_t n, int64_t k) const {
  validate();
  if (n < 1) QTUNE_FIELD_ERROR("N", "must be positive, got " + std::to_string(n));
  if (k < 1) QTUNE_FIELD_ERROR("K", "must be positive, got " + std::to_string(k));
  if ((weight_scale.granularity == WeightScaleGranularity::PerGroup ||
       weight_scale.granularity == WeightScaleGranularity::PerBlock) &&
      k % weight_scale.group_k != 0) {
    QTUNE_FIELD_ERROR("group size", std::to_string(weight_scale.group_k) + " does not divide K=" + std::to_string(k) +
                                        " (format " + to_string() + ")");
  }
  if (weight_scale.granularity == WeightScaleGranularity::PerBlock && n % weight_scale.group_n != 0) {
    QTUNE_FIELD_ERROR("block size", std::to_string(weight_scale.group_n) + " does not divide N=" + std::to_string(n) +
                                        " (format " + to_string() + ")");
  }
  if (activation_scale.granularity == ActivationScaleGranularity::PerGroup && k % activation_scale.group_k != 0) {
    QTUNE_FIELD_ERROR("act-scale", "group size " + std::to_string(activation_scale.group_k) + " does not divide K=" +
                                       std::to_string(k) + " (format " + to_string() + ")");
  }
}

namespace {
// Bits stored per weight scale: the scale plus its zero point (integer zero points take the weight's bits; float
// zero points are stored in the scale type).
int bits_per_scale(const FormatSpec& spec) {
  int bits = bits_of(spec.weight_scale.type);
  if (spec.zero_point == ZeroPoint::Integer) bits += spec.weight.bits;
  if (spec.zero_point == ZeroPoint::Float) bits += bits_of(spec.weight_scale.type);
  return bits;
}
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

double FormatSpec::bits_per_weight() const {
  double elements_per_scale = 0;
  if (weight_scale.granularity == WeightScaleGranularity::PerGroup) elements_per_scale = weight_scale.group_k;
  if (weight_scale.granularity == WeightScaleGranularity::PerBlock) {
    elements_per_scale = static_cast<double>(weight_scale.group_n) * weight_scale.group_k;
  }
  // Per-tensor and per-channel scales (and the global scale) vanish per weight as the matrix grows.
  if (elements_per_scale <= 0) return weight.bits;
  return weight.bits + bits_per_scale(*this) / elements_per_scale;
}

double FormatSpec::bits_per_weight(int64_t n, int64_t k) const {
  if (n < 1 || k < 1) QTUNE_FIELD_ERROR(n < 1 ? "N" : "K", "must be positive");
  int64_t scale_count = 1;
  switch (weight_scale.granularity) {
    case WeightScaleGranularity::PerTensor: scale_count = 1; break;
    case WeightScaleGranularity::PerChannel: scale_count = n; break;
    case WeightScaleGranularity::PerGroup: scale_count = n * ceil_div(k, std::max(weight_scale.group_k, 1)); break;
    case WeightScaleGranularity::PerBlock:
      scale_count = ceil_div(n, std::max(weight_scale.group_n, 1)) * ceil_div(k, std::max(weight_scale.group_k, 1));
      break;
  }
  double elements = static_cast<double>(n) * static_cast<double>(k);
  double total = elements * weight.bits + static_cast<double>(scale_count) * bits_per_scale(*this) +
                 (weight_scale.global_scale ? 32.0 : 0.0);
  return total / elements;
}

// ---------------------------------------------------------------- JSON

nlohmann::json FormatSpec::to_json() const {
  nlohmann::json json;
  json["spec"] = to_string();
  json["family"] = family();
  json["bits_per_weight"] = bits_per_weight();
  json["weight"] = {{"type", weight.name()},
                    {"zero_point", qtune::to_string(zero_point)},
                    {"scale",
                     {{"granularity", qtune::to_string(weight_scale.granularity)},
                      {"group_n", weight_scale.group_n},
                      {"group_k", weight_scale.group_k},
                      {"global_scale", weight_scale.global_scale},
                      {"type", qtune::to_string(weight_scale.type)}}}};
  json["activation"] = {{"type", qtune::to_string(activation)},
                        {"scale",
                         {{"granularity", qtune::to_string(activation_scale.granularity)},
                          {"group_k", activation_scale.group_k},
                          {"global_scale", activation_scale.global_scale},
                          {"type", qtune::to_string(activation_scale.type)}}}};
  json["output"] = qtune::to_string(output);
  return json;
}

namespace {

const nlohmann::json& member(const nlohmann::json& object, const std::string& path, const char* key) {
  std::string field = path + key;
  if (!object.is_object()) QTUNE_FIELD_ERROR(path.empty() ? "format" : path.substr(0, path.size() - 1), "expected an object");
  auto found = object.find(key);
  if (found == object.end()) QTUNE_FIELD_ERROR(field, "missing field");
  return *found;
}

std::string string_member(const nlohmann::json& object, const std::string& path, const char* key) {
  const nlohmann::json& value = member(object, path, key);
  if (!value.is_string()) QTUNE_FIELD_ERROR(path + key, "expected a string, got " + value.dump());
  return value.get<std::string>();
}

int int_member(const nlohmann::json& object, const std::string& path, const char* key) {
  const nlohmann::json& value = member(object, path, key);
  if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > (1 << 30)) {
    QTUNE_FIELD_ERROR(path + key, "expected a non-negative integer, got " + value.dump());
  }
  return value.get<int>();
}

bool bool_member(const nlohmann::json& object, const std::string& path, const char* key) {
  const nlohmann::json& value = member(object, path, key);
  if (!value.is_boolean()) QTUNE_FIELD_ERROR(path + key, "expected true or false, got " + value.dump());
  return value.get<bool>();
}

template <typename Enum, size_t Count>
Enum enum_member(const nlohmann::json& object, const std::string& path, const char* key,
                 const std::array<Enum, Count>& values) {
  std::string text = string_member(object, path, key);
  std::string expected;
  for (Enum value : values) {
    if (text == to_string(value)) return value;
    expected += (expected.empty() ? "" : ", ") + to_string(value);
  }
  QTUNE_FIELD_ERROR(path + key, quote(text) + " is not one of " + expected);
}

}  // namespace

FormatSpec FormatSpec::from_json(const nlohmann::json& json) {
  if (json.is_string()) return parse(json.get<std::string>());
  if (!json.is_object()) QTUNE_FIELD_ERROR("format", "expected a spec string or an object, got " + json.dump());
  if (!json.contains("weight") && json.contains("spec")) return parse(string_member(json, "", "spec"));

  FormatSpec spec;
  const nlohmann::json& weight_json = member(json, "", "weight");
  spec.weight = ElementType::parse(string_member(weight_json, "weight.", "type"), "weight.type");
  spec.zero_point = enum_member(weight_json, "weight.", "zero_point",
                                std::array{ZeroPoint::None, ZeroPoint::Integer, ZeroPoint::Float});
  const nlohmann::json& weight_scale_json = member(weight_json, "weight.", "scale");
  spec.weight_scale.granularity =
      enum_member(weight_scale_json, "weight.scale.", "granularity",
                  std::array{WeightScaleGranularity::PerTensor, WeightScaleGranularity::PerChannel,
                             WeightScaleGranularity::PerGroup, WeightScaleGranularity::PerBlock});
  spec.weight_scale.group_n = int_member(weight_scale_json, "weight.scale.", "group_n");
  spec.weight_scale.group_k = int_member(weight_scale_json, "weight.scale.", "group_k");
  spec.weight_scale.global_scale = bool_member(weight_scale_json, "weight.scale.", "global_scale");
  spec.weight_scale.type = parse_scale_type(string_member(weight_scale_json, "weight.scale.", "type"), "weight.scale.type");

  const nlohmann::json& activation_json = member(json, "", "activation");
  spec.activation = parse_activation_type(string_member(activation_json, "activation.", "type"), "activation.type");
  const nlohmann::json& activation_scale_json = member(activation_json, "activation.", "scale");
  spec.activation_scale.granularity =
      enum_member(activation_scale_json, "activation.scale.", "granularity",
                  std::array{ActivationScaleGranularity::None, ActivationScaleGranularity::PerTensor,
                             ActivationScaleGranularity::PerToken, ActivationScaleGranularity::PerGroup});
  spec.activation_scale.group_k = int_member(activation_scale_json, "activation.scale.", "group_k");
  spec.activation_scale.global_scale = bool_member(activation_scale_json, "activation.scale.", "global_scale");
  spec.activation_scale.type =
      parse_scale_type(string_member(activation_scale_json, "activation.scale.", "type"), "activation.scale.type");
  spec.output = parse_output_type(string_member(json, "", "output"), "output");
  spec.validate();

  if (json.contains("spec")) {
    std::string text = string_member(json, "", "spec");
    if (parse(text) != spec) {
      QTUNE_FIELD_ERROR("spec", quote(text) + " disagrees with the fields, which describe " + spec.to_string());
    }
  }
  return spec;
}

// ---------------------------------------------------------------- lists

std::vector<std::string> split_format_list(std::string_view text, std::string_view field) {
  const auto trimmed = [](std::string_view piece) {
    const auto first = piece.find_first_not_of(" \t");
    if (first == std::string_view::npos) return std::string();
    return std::string(piece.substr(first, piece.find_last_not_of(" \t") - first + 1));
  };
  std::vector<std::string> specs;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find_first_of(",;", start), text.size());
    const std::string piece = trimmed(text.substr(start, end - start));
    const bool continues = piece.find('=') != std::string::npos && piece.find(':') == std::string::npos;
    if (continues && !specs.empty() && specs.back().find(':') != std::string::npos) {
      specs.back() += "," + piece;
    } else {
      specs.push_back(piece);
    }
    start = end + 1;
  }
  for (const std::string& spec : specs) {
    if (spec.empty()) QTUNE_INPUT_ERROR(std::string(field) + ": empty format in " + quote_input(text));
  }
  return specs;
}

std::vector<FormatSpec> parse_format_list(std::string_view text, std::string_view field) {
  std::vector<FormatSpec> formats;
  for (const std::string& spec : split_format_list(text, field)) {
    FormatSpec format;
    try {
      format = FormatSpec::parse(spec);
    } catch (const InputError& error) {
      QTUNE_INPUT_ERROR(std::string(field) + ": " + quote_input(spec) + ": " + error.what());
    }
    if (std::find(formats.begin(), formats.end(), format) == formats.end()) formats.push_back(format);
  }
  return formats;
}

// ---------------------------------------------------------------- presets

const std::vector<FormatPreset>& format_presets() {
  static const std::vector<FormatPreset> presets = {
      {"w4a16-int4-ch", "int4 weights, an f16 scale per output channel; f16 activations"},
      {"w4a16-int4-g128", "int4 weights, an f16 scale per 128 weights along K; f16 activations"},
      {"w4a16-int4-g128-zp", "uint4 weights with an f16 scale and a 4-bit zero point per 128 along K (AWQ/GPTQ)"},
      {"w3a16-int3-g128-zp", "GPTQ-style int3: uint3 weights, f16 scale and 3-bit zero point per 128 along K"},
      {"w8a16-int8-ch", "int8 weights, an f16 scale per output channel; f16 activations"},
      {"w8a16-fp8-ch", "fp8 e4m3 weights, an f16 scale per output channel; f16 activations"},
      {"w4a16-fp4-g32", "fp4 e2m1 weights, an f16 scale per 32 along K; f16 activations"},
      {"w8a8-int8-ch", "int8 weights per output channel x int8 activations per token (f32 scales)"},
      {"w8a8-fp8-tensor", "fp8 e4m3 weights and activations, one f32 scale per tensor each"},
      {"w8a8-fp8-ch", "fp8 e4m3 weights per output channel x fp8 activations per token (f32 scales)"},
      {"w8a8-fp8-block128x128", "DeepSeek-style fp8: f32 scales per 128x128 weight block and per 1x128 activation group"},
      {"w4a8-int4-fp8", "int4 weights per output channel x fp8 e4m3 activations per token (f32 scales)"},
      {"w4a8-fp4-fp8", "fp4 e2m1 weights per output channel x fp8 e4m3 activations per token (f32 scales)"},
      {"w8a8-int8-tensor", "int8 weights and int8 activations, one f32 scale per tensor each"},
      {"w8a8-int8-block128x128", "int8 with f32 scales per 128x128 weight block and per 1x128 activation group"},
      {"w8a8-e5m2-e5m2", "fp8 e5m2 weights per output channel x fp8 e5m2 activations per token (f32 scales)"},
      {"w4a8-int4-int8", "int4 weights per output channel x int8 activations per token (f32 scales)"},
      {"w4a8-int4-g128-int8", "int4 weights with an f32 scale per 128 along K x int8 activations per token"},
      {"w4a8-fp4-g32-fp8", "fp4 e2m1 weights with an f32 scale per 32 along K x fp8 e4m3 activations per token"},
      {"w4a4-int4-ch", "int4 weights per output channel x int4 activations per token (f32 scales; sm_80 to sm_89)"},
      {"mxfp4", "OCP MXFP4: e2m1 weights with a ue8m0 scale per 32 along K; f16 activations"},
      {"nvfp4", "NVIDIA NVFP4: e2m1 weights, an e4m3 scale per 16 along K plus one f32 tensor scale; f16 activations"},
      {"mxint4", "MX-style int4: int4 weights with a ue8m0 scale per 32 along K; f16 activations"},
      {"w4a4-nvfp4", "NVFP4 weights and NVFP4 activations (e4m3 scale per 16 plus an f32 tensor scale each)"},
      {"w4a4-mxfp4", "MXFP4 weights and MXFP4 activations (ue8m0 scale per 32 each)"},
  };
  return presets;
}

// ---------------------------------------------------------------- architectures

const std::vector<int>& known_architectures() {
  static const std::vector<int> architectures = {75, 80, 86, 89, 90, 100, 103, 120, 121};
  return architectures;
}

namespace {

// Whether every weight code value is exactly an operand value of the activation type, so kernels can feed the
// converted weights to the activation type's tensor-core MMA.
bool weights_fit_activation_type(const FormatSpec& format) {
  ElementType operand = element_type_of(format.activation);
  if (format.weight.is_integer() && operand.is_integer()) {
    return format.weight.bits <= operand.bits;  // IMMA takes signed and unsigned operands (s8/u8, s4/u4)
  }
  for (uint32_t code = 0; code < code_count(format.weight); ++code) {
    if (!is_finite_code(format.weight, code)) continue;
    double value = decode(format.weight, code);
    if (operand.is_integer()) {
      if (value != std::round(value) || value < lowest_finite(operand) || value > max_finite(operand)) return false;
    } else if (round_to(operand, value) != value) {
      return false;
    }
  }
  return true;
}

bool is_fp8(const ElementType& type) {
  return type == ElementType::floating(4, 3) || type == ElementType::floating(5, 2);
}

// The operand types of the sm_100/sm_120 mixed-precision MMA (kind::f8f6f4).
bool is_f8f6f4(const ElementType& type) {
  return is_fp8(type) || type == ElementType::floating(2, 1) || type == ElementType::floating(3, 2) ||
         type == ElementType::floating(2, 3);
}

}  // namespace

ArchSupport architecture_support(const FormatSpec& format, int sm) {
  ArchSupport support{sm, false, ""};
  const bool blackwell = sm >= 100;
  if (sm < 75) {
    support.reason = "qtune's tensor-core kernels need sm_75 or later";
    return support;
  }
  switch (format.activation) {
    case ActivationType::F16:
    case ActivationType::Int8: break;
    case ActivationType::BF16:
      if (sm < 80) support.reason = "bf16 activations need sm_80 or later";
      break;
    case ActivationType::E4M3:
    case ActivationType::E5M2:
      if (sm < 89) support.reason = "fp8 activations need sm_89 or later";
      break;
    case ActivationType::Int4:
      if (sm >= 90) support.reason = "int4 tensor-core MMA was removed in sm_90 and later";
      break;
    case ActivationType::E2M1:
      if (!blackwell) support.reason = "fp4 activations need Blackwell (sm_100, sm_103, sm_120 or sm_121)";
      break;
  }
  if (!support.reason.empty()) return support;

  // Weight-only formats convert weights to f16/bf16 in registers, so they run wherever the activation type runs.
  if (format.activation_is_quantized() && !weights_fit_activation_type(format)) {
    ElementType operand = element_type_of(format.activation);
    const bool both_fp8 = is_fp8(format.weight) && is_fp8(operand);
    const bool both_f8f6f4 = is_f8f6f4(format.weight) && is_f8f6f4(operand);
    if (both_fp8 && sm >= 89) return {sm, true, ""};  // e4m3 x e5m2 MMA exists wherever fp8 does
    if (both_f8f6f4 && blackwell) return {sm, true, ""};
    std::string base = format.weight.name() + " weights are not exactly representable as " + operand.name() +
                       " tensor-core operands";
    if (format.weight.is_integer() && operand.is_integer()) {
      base = format.weight.name() + " weights do not fit " + operand.name() + " tensor-core operands";
    }
    support.reason = both_f8f6f4 ? base + ", and mixing fp4/fp6/fp8 operands needs sm_100 or sm_120" : base;
    return support;
  }
  support.supported = true;
  return support;
}

std::vector<ArchSupport> architecture_support(const FormatSpec& format) {
  std::vector<ArchSupport> list;
  for (int sm : known_architectures()) list.push_back(architecture_support(format, sm));
  return list;
}

}  // namespace qtune
