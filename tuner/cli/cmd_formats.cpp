// `qtune formats` lists the format presets; `qtune formats show SPEC` describes one format field by field, with its
// bits per weight and the GPU architectures whose tensor cores can run it.
#include <nlohmann/json.hpp>

#include <iostream>
#include <sstream>
#include <string>

#include "kernels/codec.hpp"
#include "kernels/family_support.hpp"
#include "kernels/format.hpp"
#include "reports/table.hpp"
#include "tuner/cli/commands.hpp"

namespace qtune::cli {

namespace {

struct FormatsOptions {
  std::string output = "table";
  std::string spec;
  std::string show_output = "table";
};

// Shortest text that reads back as the same number ("4.125", "8", "57344").
std::string number_text(double value) {
  std::ostringstream out;
  out.precision(10);
  out << value;
  return out.str();
}

std::string weight_type_text(const FormatSpec& format) {
  const ElementType& type = format.weight;
  switch (type.kind) {
    case ElementKind::SignedInt:
      return type.name() + ": signed integer (two's complement), " + number_text(lowest_finite(type)) + ".." +
             number_text(max_finite(type));
    case ElementKind::UnsignedInt:
      return type.name() + ": unsigned integer 0.." + number_text(max_finite(type)) + ", w = (q - z) * s";
    case ElementKind::Float: break;
  }
  std::string encoding;
  switch (type.float_encoding()) {
    case FloatEncoding::Finite: encoding = "every code finite (no inf or NaN)"; break;
    case FloatEncoding::FiniteNaN: encoding = "no inf, only all-ones is NaN (fn)"; break;
    case FloatEncoding::Ieee: encoding = "IEEE inf and NaN"; break;
  }
  return type.name() + ": float, 1 sign + " + std::to_string(type.exponent_bits) + " exponent + " +
         std::to_string(type.mantissa_bits) + " mantissa bits, bias " + std::to_string(type.exponent_bias()) + ", " +
         encoding + ", max " + number_text(max_finite(type));
}

std::string weight_scale_text(const WeightScaling& scaling) {
  const std::string type = to_string(scaling.type);
  std::string text;
  switch (scaling.granularity) {
    case WeightScaleGranularity::PerTensor: text = "one " + type + " per tensor"; break;
    case WeightScaleGranularity::PerChannel: text = type + " per output channel"; break;
    case WeightScaleGranularity::PerGroup: text = type + " per group of " + std::to_string(scaling.group_k) + " along K"; break;
    case WeightScaleGranularity::PerBlock:
      text = type + " per block of " + std::to_string(scaling.group_n) + " x " + std::to_string(scaling.group_k) +
             " (N x K)";
      break;
  }
  if (scaling.global_scale) text += ", plus one f32 global tensor scale";
  return text;
}

std::string zero_point_text(const FormatSpec& format) {
  switch (format.zero_point) {
    case ZeroPoint::None: return "none";
    case ZeroPoint::Integer: return "integer, " + std::to_string(format.weight.bits) + " bits, one per weight scale";
    case ZeroPoint::Float: return "float, stored as " + to_string(format.weight_scale.type) + ", one per weight scale";
  }
  return "?";
}

std::string activation_text(const FormatSpec& format) {
  if (!format.activation_is_quantized()) return to_string(format.activation) + " (not quantized)";
  return to_string(format.activation) + ", quantized (" + std::to_string(format.activation_bits()) + " bits)";
}

std::string activation_scale_text(const ActivationScaling& scaling) {
  const std::string type = to_string(scaling.type);
  switch (scaling.granularity) {
    case ActivationScaleGranularity::None: return "none";
    case ActivationScaleGranularity::PerTensor: return "one " + type + " per tensor";
    case ActivationScaleGranularity::PerToken: return type + " per token (row of A)";
    case ActivationScaleGranularity::PerGroup:
      return type + " per group of 1 x " + std::to_string(scaling.group_k) + " along K" +
             (scaling.global_scale ? ", plus one f32 global tensor scale" : "");
  }
  return "?";
}

std::string bits_text(const FormatSpec& format) {
  const double total = format.bits_per_weight();
  const double overhead = total - format.weight.bits;
  std::string text = number_text(total) + " (" + std::to_string(format.weight.bits) + " element";
  if (overhead > 0) text += " + " + number_text(overhead) + " scales and zero points";
  if (format.weight_scale.granularity == WeightScaleGranularity::PerChannel) {
    text += "; per-channel scales add " + std::to_string(bits_of(format.weight_scale.type)) + "/K";
  }
  return text + ")";
}

void run_list(const FormatsOptions& options) {
  const reports::OutputStyle style = reports::parse_output_style(options.output);
  reports::Table table({"name", "family", "bits_per_weight", "description"});
  for (const FormatPreset& preset : format_presets()) {
    const FormatSpec format = FormatSpec::parse(preset.name);
    table.add_row({preset.name, format.family(), number_text(format.bits_per_weight()), preset.description});
  }
  table.print(std::cout, style);
}

void run_show(const FormatsOptions& options) {
  const reports::OutputStyle style = reports::parse_output_style(options.show_output);
  const FormatSpec format = FormatSpec::parse(options.spec);
  // The kernel families' answer, not the tensor cores': an architecture is "yes" only where a family runs the format.
  const std::vector<FamilySupport> support = family_support(format);

  if (style == reports::OutputStyle::Json) {
    nlohmann::json out;
    out["input"] = options.spec;
    out["spec"] = format.to_string();
    out["family"] = format.family();
    out["bits_per_weight"] = format.bits_per_weight();
    out["description"] = format.to_json();
    out["architectures"] = nlohmann::json::array();
    for (const FamilySupport& arch : support) {
      const bool supported = arch.family != nullptr;
      nlohmann::json families = nlohmann::json::array();
      for (const KernelFamily* family : arch.families) families.push_back(family->name());
      out["architectures"].push_back({{"sm", arch.sm},
                                      {"supported", supported},
                                      {"family", supported ? nlohmann::json(arch.family->name()) : nlohmann::json()},
                                      {"families", families},
                                      {"reason", arch.reason}});
    }
    std::cout << out.dump(2) << "\n";
    return;
  }

  reports::Table table({"field", "value"});
  table.add_row({"format", format.to_string()});
  for (const FormatPreset& preset : format_presets()) {
    if (preset.name == format.to_string()) table.add_row({"preset", preset.description});
  }
  table.add_row({"family", format.family()});
  table.add_row({"weights", weight_type_text(format)});
  table.add_row({"zero point", zero_point_text(format)});
  table.add_row({"weight scales", weight_scale_text(format.weight_scale)});
  table.add_row({"activations", activation_text(format)});
  table.add_row({"activation scales", activation_scale_text(format.activation_scale)});
  table.add_row({"output", to_string(format.output)});
  table.add_row({"bits per weight", bits_text(format)});
  for (const FamilySupport& arch : support) {
    std::string names;
    for (const KernelFamily* family : arch.families) names += (names.empty() ? "" : ", ") + family->name();
    const std::string answer = arch.family == nullptr       ? "no: " + arch.reason
                               : arch.families.size() == 1 ? "yes (" + names + " family)"
                                                           : "yes (" + names + " families)";
    table.add_row({"sm_" + std::to_string(arch.sm), answer});
  }
  table.print(std::cout, style);
}

}  // namespace

void add_formats_command(CLI::App& app) {
  auto options = std::make_shared<FormatsOptions>();
  CLI::App* formats = app.add_subcommand("formats", "List the quantization format presets, or describe one format");
  formats->add_option("--output", options->output, "output style: table, json or csv")->capture_default_str();
  CLI::App* show = formats->add_subcommand(
      "show", "Describe a format spec: its fields, bits per weight and, per architecture (sm_75..sm_120), the kernel "
              "family that runs it or why none does");
  show->add_option("spec", options->spec, "a preset name or spec, e.g. nvfp4 or w4a16-int4-g128-zp:out=bf16")
      ->required();
  show->add_option("--output", options->show_output, "output style: table, json or csv")->capture_default_str();
  show->callback([options]() { run_show(*options); });
  formats->callback([options, formats, show]() {
    if (formats->got_subcommand(show)) return;
    run_list(*options);
  });
}

}  // namespace qtune::cli
