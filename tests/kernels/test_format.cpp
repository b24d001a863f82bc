// Format descriptions: the text spec (parse/print), presets, validation errors, JSON, bits per weight and the
// architecture support table.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "kernels/format.hpp"
#include "tests/common/expect_error.hpp"

namespace qtune {
namespace {

// Specs that are canonical but no preset.
const std::vector<std::string> kCanonicalSpecs = {
    "w4a16-int4-g128-bf16",
    "w4a16-int4-g64-fzp",
    "w8a16-e5m2-tensor",
    "w6a16-fp6-g32",
    "w6a16-e2m3-g32:scale=ue8m0",
    "w2a16-int2-g64-zp:scale=bf16",
    "w1a16-int1-ch",
    "w1a16-int1-g32-zp",
    "w7a16-e3m3-block64x64",
    "w5a16-e2m2-g32:scale=e4m3",
    "w8a8-int8-tensor",
    "w8a8-fp8-e5m2",
    "w8a8-e5m2-ch",
    "w4a8-int4-g128-fp8",
    "w4a8-int4-g128-zp-fp8",
    "w4a8-int4-int8",
    "w4a4-int4-ch",
    "w4a4-fp4-g16+t:scale=e4m3,act-scale=g16",
    "w8a8-fp8-g128:act-scale=g128+t,act-scale-type=e4m3",
    "nvfp4:out=bf16",
    "mxfp4:out=bf16",
    "w8a8-fp8-block128x128:act-scale=token",
    "w8a8-int8-ch:act-scale=none",
    "w8a8-int8-ch:act-scale-type=f16",
    "w8a16-int8-ch:out=bf16",
    "w8a16-int8-bf16:out=f16",  // per channel is left out when an activation type follows
    "w4a16-fp4-g16+t",
    "w4a16-fp4-g32:scale=e4m3",
    "w8a8-int8-g128:scale=bf16",
    "w4a16-int4-g128:scale=f32",
    "w3a16-int3-g128-zp-bf16:scale=f16,out=f16",
};

TEST(FormatSpec, PresetsAreCanonicalAndComplete) {
  std::set<std::string> names;
  for (const FormatPreset& preset : format_presets()) {
    FormatSpec spec = FormatSpec::parse(preset.name);
    EXPECT_EQ(spec.to_string(), preset.name);
    EXPECT_EQ(FormatSpec::parse(spec.to_string()), spec);
    EXPECT_FALSE(preset.description.empty()) << preset.name;
    EXPECT_TRUE(names.insert(preset.name).second) << "duplicate " << preset.name;
  }
  for (const char* required : {"w4a16-int4-ch", "w4a16-int4-g128", "w4a16-int4-g128-zp", "w3a16-int3-g128-zp",
                               "w8a16-int8-ch", "w8a16-fp8-ch", "w4a16-fp4-g32", "w8a8-int8-ch", "w8a8-fp8-tensor",
                               "w8a8-fp8-ch", "w8a8-fp8-block128x128", "w4a8-int4-fp8", "w4a8-fp4-fp8", "mxfp4",
                               "nvfp4", "mxint4", "w4a4-nvfp4", "w4a4-mxfp4"}) {
    EXPECT_TRUE(names.count(required)) << required;
  }
}

TEST(FormatSpec, PresetFields) {
  FormatSpec nvfp4 = FormatSpec::parse("nvfp4");
  EXPECT_EQ(nvfp4.weight, ElementType::floating(2, 1));
  EXPECT_EQ(nvfp4.weight_scale.granularity, WeightScaleGranularity::PerGroup);
  EXPECT_EQ(nvfp4.weight_scale.group_k, 16);
  EXPECT_TRUE(nvfp4.weight_scale.global_scale);
  EXPECT_EQ(nvfp4.weight_scale.type, ScaleType::E4M3);
  EXPECT_EQ(nvfp4.activation, ActivationType::F16);
  EXPECT_EQ(nvfp4.output, OutputType::F16);

  FormatSpec mxfp4 = FormatSpec::parse("mxfp4");
  EXPECT_EQ(mxfp4.weight_scale.type, ScaleType::UE8M0);
  EXPECT_EQ(mxfp4.weight_scale.group_k, 32);
  EXPECT_FALSE(mxfp4.weight_scale.global_scale);

  FormatSpec mxint4 = FormatSpec::parse("mxint4");
  EXPECT_EQ(mxint4.weight, ElementType::signed_int(4));
  EXPECT_EQ(mxint4.weight_scale.type, ScaleType::UE8M0);

  FormatSpec gptq = FormatSpec::parse("w4a16-int4-g128-zp");
  EXPECT_EQ(gptq.weight, ElementType::unsigned_int(4));
  EXPECT_EQ(gptq.zero_point, ZeroPoint::Integer);
  EXPECT_EQ(gptq.weight_scale.type, ScaleType::F16);
  EXPECT_EQ(FormatSpec::parse("w4a16-int3-g128-zp"), FormatSpec::parse("w3a16-int3-g128-zp"));  // the alias
  EXPECT_EQ(FormatSpec::parse("w4a16-int3-g128-zp").weight, ElementType::unsigned_int(3));

  FormatSpec deepseek = FormatSpec::parse("w8a8-fp8-block128x128");
  EXPECT_EQ(deepseek.weight, ElementType::floating(4, 3));
  EXPECT_EQ(deepseek.weight_scale.granularity, WeightScaleGranularity::PerBlock);
  EXPECT_EQ(deepseek.weight_scale.group_n, 128);
  EXPECT_EQ(deepseek.weight_scale.group_k, 128);
  EXPECT_EQ(deepseek.weight_scale.type, ScaleType::F32);
  EXPECT_EQ(deepseek.activation, ActivationType::E4M3);
  EXPECT_EQ(deepseek.activation_scale.granularity, ActivationScaleGranularity::PerGroup);
  EXPECT_EQ(deepseek.activation_scale.group_k, 128);

  FormatSpec int8 = FormatSpec::parse("w8a8-int8-ch");
  EXPECT_EQ(int8.activation, ActivationType::Int8);
  EXPECT_EQ(int8.activation_scale.granularity, ActivationScaleGranularity::PerToken);
  EXPECT_EQ(int8.weight_scale.granularity, WeightScaleGranularity::PerChannel);
  EXPECT_EQ(FormatSpec::parse("w8a8-fp8-tensor").activation_scale.granularity, ActivationScaleGranularity::PerTensor);

  FormatSpec w4a8 = FormatSpec::parse("w4a8-int4-fp8");
  EXPECT_EQ(w4a8.weight, ElementType::signed_int(4));
  EXPECT_EQ(w4a8.activation, ActivationType::E4M3);
  EXPECT_EQ(w4a8.weight_scale.granularity, WeightScaleGranularity::PerChannel);
  EXPECT_EQ(FormatSpec::parse("w4a8-fp4-fp8").weight, ElementType::floating(2, 1));

  FormatSpec w4a4 = FormatSpec::parse("w4a4-nvfp4");
  EXPECT_EQ(w4a4.activation, ActivationType::E2M1);
  EXPECT_EQ(w4a4.activation_scale.granularity, ActivationScaleGranularity::PerGroup);
  EXPECT_EQ(w4a4.activation_scale.group_k, 16);
  EXPECT_TRUE(w4a4.activation_scale.global_scale);
  EXPECT_EQ(w4a4.activation_scale.type, ScaleType::E4M3);
  EXPECT_EQ(FormatSpec::parse("w4a4-mxfp4").activation_scale.type, ScaleType::UE8M0);

  EXPECT_EQ(FormatSpec::parse("w4a16-int4-g128-bf16").weight_scale.type, ScaleType::BF16);
  EXPECT_EQ(FormatSpec::parse("w4a16-int4-g128-bf16").output, OutputType::BF16);
  EXPECT_EQ(FormatSpec::parse("w8a8-int8-ch").weight_scale.type, ScaleType::F32);
}

TEST(FormatSpec, CanonicalNonPresetSpecsRoundTrip) {
  for (const std::string& text : kCanonicalSpecs) {
    FormatSpec spec = FormatSpec::parse(text);
    EXPECT_EQ(spec.to_string(), text);
    EXPECT_EQ(FormatSpec::parse(spec.to_string()), spec) << text;
  }
}

TEST(FormatSpec, NonCanonicalSpellingsPrintCanonically) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {" W4A16-INT4-G128 ", "w4a16-int4-g128"},
      {"w4a16-uint4-g128-zp", "w4a16-int4-g128-zp"},
      {"w4a16-int4", "w4a16-int4-ch"},
      {"w4a16-int4-ch-f16", "w4a16-int4-ch"},
      {"w8a8-int8-ch:scale=f32", "w8a8-int8-ch"},
      {"w8a8-int8-ch-int8", "w8a8-int8-ch"},
      {"w4a16-e2m1-g32:scale=ue8m0", "mxfp4"},
      {"w4a16-fp4-g16+t:scale=e4m3", "nvfp4"},
      {"w4a16-int4-block1x128", "w4a16-int4-g128"},
      {"w4a8-int4-ch-fp8", "w4a8-int4-fp8"},
      {"w8a8-e4m3-tensor-e4m3", "w8a8-fp8-tensor"},
      {"w4a8-e2m1-e4m3", "w4a8-fp4-fp8"},
      {"w4a16-int3-g128-zp", "w3a16-int3-g128-zp"},
      {"w8a8-fp8-block128x128:act-scale=g128,out=f16", "w8a8-fp8-block128x128"},
      {"nvfp4:out=f16", "nvfp4"},
      {"w6a16-e3m2-g32", "w6a16-fp6-g32"},
      {"w8a16-fp8-ch:out=bf16,scale=bf16", "w8a16-fp8-ch:scale=bf16,out=bf16"},
  };
  for (const auto& [input, canonical] : cases) {
    EXPECT_EQ(FormatSpec::parse(input).to_string(), canonical) << input;
  }
}

// parse(to_string(x)) == x for every valid x, over a broad grid of field combinations.
TEST(FormatSpec, EveryValidCombinationRoundTrips) {
  std::vector<ElementType> weights = {ElementType::signed_int(1), ElementType::signed_int(4), ElementType::signed_int(8),
                                      ElementType::unsigned_int(4), ElementType::unsigned_int(3),
                                      ElementType::floating(2, 1), ElementType::floating(4, 3),
                                      ElementType::floating(5, 2), ElementType::floating(3, 2), ElementType::floating(2, 3)};
  std::vector<WeightScaling> weight_scalings;
  for (auto granularity : {WeightScaleGranularity::PerTensor, WeightScaleGranularity::PerChannel,
                           WeightScaleGranularity::PerGroup, WeightScaleGranularity::PerBlock}) {
    for (bool global : {false, true}) {
      WeightScaling scaling;
      scaling.granularity = granularity;
      scaling.global_scale = global;
      if (granularity == WeightScaleGranularity::PerGroup) scaling.group_k = 32;
      if (granularity == WeightScaleGranularity::PerBlock) {
        scaling.group_n = 128;
        scaling.group_k = 64;
      }
      weight_scalings.push_back(scaling);
    }
  }
  std::vector<ActivationScaling> activation_scalings;
  for (auto granularity : {ActivationScaleGranularity::None, ActivationScaleGranularity::PerTensor,
                           ActivationScaleGranularity::PerToken, ActivationScaleGranularity::PerGroup}) {
    for (bool global : {false, true}) {
      ActivationScaling scaling;
      scaling.granularity = granularity;
      scaling.global_scale = global;
      if (granularity == ActivationScaleGranularity::PerGroup) scaling.group_k = 128;
      activation_scalings.push_back(scaling);
    }
  }
  const auto scale_types = {ScaleType::F32, ScaleType::F16, ScaleType::BF16, ScaleType::UE8M0, ScaleType::E4M3};
  auto is_valid = [](const FormatSpec& spec) {
    try {
      spec.validate();
      return true;
    } catch (const InputError&) {
      return false;
    }
  };
  int valid = 0;
  int total = 0;
  for (const ElementType& weight : weights)
    for (auto zero_point : {ZeroPoint::None, ZeroPoint::Integer, ZeroPoint::Float})
      for (WeightScaling weight_scaling : weight_scalings)
        for (auto weight_scale_type : scale_types) {
          FormatSpec weight_part;
          weight_part.weight = weight;
          weight_part.zero_point = zero_point;
          weight_part.weight_scale = weight_scaling;
          weight_part.weight_scale.type = weight_scale_type;
          if (!is_valid(weight_part)) continue;  // no activation side makes a bad weight side valid
          for (auto activation : {ActivationType::F16, ActivationType::BF16, ActivationType::E4M3, ActivationType::E5M2,
                                  ActivationType::Int8, ActivationType::Int4, ActivationType::E2M1})
            for (ActivationScaling activation_scaling : activation_scalings)
              for (auto activation_scale_type : scale_types)
                for (auto output : {OutputType::F16, OutputType::BF16}) {
                  FormatSpec spec = weight_part;
                  spec.activation = activation;
                  spec.activation_scale = activation_scaling;
                  spec.activation_scale.type = activation_scale_type;
                  spec.output = output;
                  ++total;
                  if (!is_valid(spec)) continue;
                  ++valid;
                  std::string text = spec.to_string();
                  FormatSpec parsed = FormatSpec::parse(text);
                  ASSERT_EQ(parsed, spec) << text;
                  ASSERT_EQ(parsed.to_string(), text);
                }
        }
  EXPECT_GT(valid, 5000);
  EXPECT_LT(valid, total);
}

// The message must start with the field, stay on one line, and say what is wrong.
void expect_field_error(const std::string& spec, const std::string& field) {
  try {
    FormatSpec::parse(spec);
    ADD_FAILURE() << "'" << spec << "' parsed, expected an error naming " << field;
  } catch (const InputError& error) {
    std::string message = error.what();
    EXPECT_EQ(message.rfind(field + ": ", 0), 0u) << "'" << spec << "' gave: " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_GT(message.size(), field.size() + 10) << message;
  }
}

TEST(FormatSpec, BadSpecsNameTheField) {
  expect_field_error("w4a16-int9-g128", "weight type");
  expect_field_error("w11a16-e9m2-ch", "weight type");
  expect_field_error("w4a16-e0m3-ch", "weight type");
  expect_field_error("w9a16-e5m3", "weight type");
  expect_field_error("w4a16-fp5-g128", "weight type");
  expect_field_error("w4a16-g128", "weight type");
  expect_field_error("w4a16-fp4-g32-zp", "zero point");
  expect_field_error("w8a16-fp8-fzp", "zero point");
  expect_field_error("w4a16-uint4-g128", "zero point");
  expect_field_error("w4a16-int4-g128-fzp:scale=ue8m0", "zero point");
  expect_field_error("w4a16-int4-g128-f16-zp", "zero point");
  expect_field_error("w3a16-int4-g128", "wbits");
  expect_field_error("w4a8-int4-f16", "abits");
  expect_field_error("w4a6-int4", "abits");
  expect_field_error("foo", "format name");
  expect_field_error("w4-int4", "format name");
  expect_field_error("wxa16-int4", "format name");
  expect_field_error("w4a16-int4-bar", "format name");
  expect_field_error("w4a16-int4--g128", "format name");
  expect_field_error("mxfp5", "format name");
  expect_field_error("w4a16-int4-g128x", "group size");
  expect_field_error("w4a16-int4-g0", "group size");
  expect_field_error("w4a16-int4-blockx", "block size");
  expect_field_error("w4a16-int4-block0x128", "block size");
  expect_field_error("w4a16-int4-zp-g128", "granularity");
  expect_field_error("w4a16-int4-g128:foo=1", "option");
  expect_field_error("w4a16-int4-g128:scale", "option");
  expect_field_error("w4a16-int4-g128:", "option");
  expect_field_error("w4a16-int4-g128:scale=f16,,out=f16", "option");
  expect_field_error("w4a16-int4-g128:scale=f16,scale=f32", "option");
  expect_field_error("nvfp4:bogus=1", "option");
  expect_field_error("w4a16-int4-g128:scale=e5m2", "scale");
  expect_field_error("w4a16-fp4-g16+t-bf16", "scale");  // a global scale needs e4m3 or f16 group scales
  expect_field_error("w4a16-int4-g128+t:scale=f32", "scale");
  expect_field_error("w4a16-int4-g128:act-scale=token", "act-scale");
  expect_field_error("w8a8-int8-ch:act-scale=g0", "act-scale");
  expect_field_error("w8a8-int8-ch:act-scale=rows", "act-scale");
  expect_field_error("w8a8-int8-ch:act-scale=none,act-scale-type=f16", "act-scale-type");
  expect_field_error("w8a8-int8-ch:act-scale=g64+t", "act-scale-type");
  expect_field_error("w4a16-int4-g128:act-scale-type=f16", "act-scale-type");
  expect_field_error("w4a16-int4-g128:out=f32", "out");
  expect_field_error("", "format");
  expect_field_error("w4a16-int4-f16-bf16", "activation type");
}

TEST(FormatSpec, ValidateShapeNamesTheField) {
  auto expect_shape_error = [](const std::string& spec, int64_t n, int64_t k, const std::string& field) {
    try {
      FormatSpec::parse(spec).validate_shape(n, k);
      ADD_FAILURE() << spec << " accepted " << n << "x" << k;
    } catch (const InputError& error) {
      EXPECT_EQ(std::string(error.what()).rfind(field + ": ", 0), 0u) << error.what();
    }
  };
  expect_shape_error("w4a16-int4-g128", 4096, 4000, "group size");
  expect_shape_error("nvfp4", 64, 100, "group size");
  expect_shape_error("w8a8-fp8-block128x128", 100, 256, "block size");
  expect_shape_error("w8a8-fp8-ch:act-scale=g96", 64, 128, "act-scale");
  expect_shape_error("w4a16-int4-ch", 0, 128, "N");
  expect_shape_error("w4a16-int4-ch", 128, -1, "K");
  EXPECT_NO_THROW(FormatSpec::parse("w8a8-fp8-block128x128").validate_shape(256, 7168));
  EXPECT_NO_THROW(FormatSpec::parse("w4a16-int4-ch").validate_shape(3, 5));
}

TEST(FormatSpec, StructValidationCatchesWhatTheParserCannotProduce) {
  FormatSpec spec;  // the default is a valid w4a16-int4-ch
  EXPECT_NO_THROW(spec.validate());
  EXPECT_EQ(spec.to_string(), "w4a16-int4-ch");
  FormatSpec signed_with_zero = spec;
  signed_with_zero.zero_point = ZeroPoint::Integer;
  EXPECT_THROW(signed_with_zero.validate(), InputError);
  FormatSpec channel_with_group = spec;
  channel_with_group.weight_scale.group_k = 128;
  EXPECT_THROW(channel_with_group.validate(), InputError);
  FormatSpec block_of_one_row = spec;
  block_of_one_row.weight_scale.granularity = WeightScaleGranularity::PerBlock;
  block_of_one_row.weight_scale.group_k = 128;
  EXPECT_THROW(block_of_one_row.validate(), InputError);
  FormatSpec bad_bits = spec;
  bad_bits.weight.bits = 9;
  EXPECT_THROW(bad_bits.validate(), InputError);
  FormatSpec bad_float = spec;
  bad_float.weight = ElementType::floating(2, 1);
  bad_float.weight.bits = 5;
  EXPECT_THROW(bad_float.validate(), InputError);
  EXPECT_THROW(ElementType::signed_int(0), InputError);
  EXPECT_THROW(ElementType::floating(4, 4), InputError);
}

TEST(FormatSpec, ElementTypeParsing) {
  EXPECT_EQ(ElementType::parse("fp8"), ElementType::floating(4, 3));
  EXPECT_EQ(ElementType::parse("fp4"), ElementType::floating(2, 1));
  EXPECT_EQ(ElementType::parse("fp6"), ElementType::floating(3, 2));
  EXPECT_EQ(ElementType::parse("e3m4"), ElementType::floating(3, 4));
  EXPECT_EQ(ElementType::parse("uint7"), ElementType::unsigned_int(7));
  EXPECT_EQ(ElementType::parse("INT2"), ElementType::signed_int(2));
  EXPECT_EQ(ElementType::parse("e4m3").name(), "e4m3");
  EXPECT_EQ(ElementType::parse("e4m3").exponent_bias(), 7);
  EXPECT_EQ(ElementType::parse("e4m3").float_encoding(), FloatEncoding::FiniteNaN);
  EXPECT_EQ(ElementType::parse("e5m2").float_encoding(), FloatEncoding::Ieee);
  EXPECT_EQ(ElementType::parse("e2m1").float_encoding(), FloatEncoding::Finite);
  try {
    ElementType::parse("int12", "activation element");
    ADD_FAILURE();
  } catch (const InputError& error) {
    EXPECT_EQ(std::string(error.what()).rfind("activation element: ", 0), 0u) << error.what();
  }
}

TEST(FormatSpec, JsonRoundTrip) {
  std::vector<std::string> specs = kCanonicalSpecs;
  for (const FormatPreset& preset : format_presets()) specs.push_back(preset.name);
  for (const std::string& text : specs) {
    FormatSpec spec = FormatSpec::parse(text);
    nlohmann::json json = spec.to_json();
    EXPECT_EQ(json.at("spec"), text);
    EXPECT_EQ(FormatSpec::from_json(json), spec) << json.dump();
    nlohmann::json fields_only = json;
    fields_only.erase("spec");
    EXPECT_EQ(FormatSpec::from_json(nlohmann::json::parse(fields_only.dump())), spec) << text;
    EXPECT_EQ(FormatSpec::from_json(nlohmann::json(text)), spec);
    EXPECT_EQ(FormatSpec::from_json(nlohmann::json{{"spec", text}}), spec);
  }
  nlohmann::json nvfp4 = FormatSpec::parse("nvfp4").to_json();
  EXPECT_EQ(nvfp4.at("weight").at("type"), "e2m1");
  EXPECT_EQ(nvfp4.at("weight").at("scale").at("type"), "e4m3");
  EXPECT_EQ(nvfp4.at("weight").at("scale").at("global_scale"), true);
  EXPECT_EQ(nvfp4.at("family"), "w4a16");
}

TEST(FormatSpec, JsonErrorsNameTheField) {
  auto expect_json_error = [](const nlohmann::json& json, const std::string& field) {
    try {
      FormatSpec::from_json(json);
      ADD_FAILURE() << json.dump() << " was accepted";
    } catch (const InputError& error) {
      EXPECT_EQ(std::string(error.what()).rfind(field + ": ", 0), 0u) << error.what();
    }
  };
  nlohmann::json good = FormatSpec::parse("w4a16-int4-g128-zp").to_json();
  nlohmann::json missing = good;
  missing.erase("output");
  expect_json_error(missing, "output");
  nlohmann::json missing_nested = good;
  missing_nested["weight"]["scale"].erase("group_k");
  expect_json_error(missing_nested, "weight.scale.group_k");
  nlohmann::json wrong_type = good;
  wrong_type["weight"]["scale"]["group_k"] = "128";
  expect_json_error(wrong_type, "weight.scale.group_k");
  nlohmann::json bad_enum = good;
  bad_enum["weight"]["scale"]["granularity"] = "row";
  expect_json_error(bad_enum, "weight.scale.granularity");
  nlohmann::json bad_type = good;
  bad_type["weight"]["type"] = "int9";
  expect_json_error(bad_type, "weight.type");
  nlohmann::json contradictory = good;
  contradictory["weight"]["type"] = "int4";  // signed weights with a zero point
  expect_json_error(contradictory, "zero point");
  nlohmann::json disagreeing = good;
  disagreeing["spec"] = "w4a16-int4-g128";
  expect_json_error(disagreeing, "spec");
  expect_json_error(nlohmann::json(42), "format");
  expect_json_error(nlohmann::json("w4a16-int9"), "weight type");
}

TEST(FormatSpec, BitsPerWeight) {
  EXPECT_DOUBLE_EQ(FormatSpec::parse("w4a16-int4-g128").bits_per_weight(), 4.125);
  EXPECT_DOUBLE_EQ(FormatSpec::parse("w4a16-int4-g128-zp").bits_per_weight(), 4 + 20.0 / 128);
  EXPECT_DOUBLE_EQ(FormatSpec::parse("w4a16-int4-g64-fzp").bits_per_weight(), 4 + 32.0 / 64);
  EXPECT_DOUBLE_EQ(FormatSpec::parse("w3a16-int3-g128-zp").bits_per_weight(), 3 + 19.0 / 128);
  EXPECT_DOUBLE_EQ(FormatSpec::parse("mxfp4").bits_per_weight(), 4.25);
  EXPECT_DOUBLE_EQ(FormatSpec::parse("nvfp4").bits_per_weight(), 4.5);
  EXPECT_DOUBLE_EQ(FormatSpec::parse("w8a8-fp8-block128x128").bits_per_weight(), 8 + 32.0 / (128 * 128));
  EXPECT_DOUBLE_EQ(FormatSpec::parse("w8a16-int8-ch").bits_per_weight(), 8.0);
  EXPECT_DOUBLE_EQ(FormatSpec::parse("w8a16-int8-ch").bits_per_weight(4096, 4096), 8 + 16.0 / 4096);
  EXPECT_DOUBLE_EQ(FormatSpec::parse("w8a8-fp8-tensor").bits_per_weight(64, 64), 8 + 32.0 / 4096);
  EXPECT_DOUBLE_EQ(FormatSpec::parse("nvfp4").bits_per_weight(64, 64), 4.5 + 32.0 / 4096);
}

TEST(FormatSpec, Family) {
  EXPECT_EQ(FormatSpec::parse("nvfp4").family(), "w4a16");
  EXPECT_EQ(FormatSpec::parse("w4a4-nvfp4").family(), "w4a4");
  EXPECT_EQ(FormatSpec::parse("w3a16-int3-g128-zp").family(), "w3a16");
  EXPECT_EQ(FormatSpec::parse("w4a8-int4-fp8").family(), "w4a8");
  EXPECT_EQ(FormatSpec::parse("w8a8-fp8-ch").family(), "w8a8");
}

std::vector<int> supported_architectures(const std::string& spec) {
  std::vector<int> supported;
  for (const ArchSupport& support : architecture_support(FormatSpec::parse(spec))) {
    EXPECT_EQ(support.supported, support.reason.empty()) << spec << " sm_" << support.sm;
    if (support.supported) supported.push_back(support.sm);
  }
  return supported;
}

std::string reason(const std::string& spec, int sm) { return architecture_support(FormatSpec::parse(spec), sm).reason; }

TEST(FormatSpec, ArchitectureSupport) {
  EXPECT_EQ(known_architectures(), (std::vector<int>{75, 80, 86, 89, 90, 100, 103, 120, 121}));
  const std::vector<int> all = {75, 80, 86, 89, 90, 100, 103, 120, 121};
  const std::vector<int> fp8 = {89, 90, 100, 103, 120, 121};
  const std::vector<int> blackwell = {100, 103, 120, 121};
  EXPECT_EQ(supported_architectures("w4a16-int4-g128"), all);
  EXPECT_EQ(supported_architectures("nvfp4"), all);  // weight-only: runs wherever f16 runs
  EXPECT_EQ(supported_architectures("w4a16-int4-g128-bf16"), (std::vector<int>{80, 86, 89, 90, 100, 103, 120, 121}));
  EXPECT_EQ(reason("w4a16-int4-g128-bf16", 75), "bf16 activations need sm_80 or later");
  EXPECT_EQ(supported_architectures("w8a8-int8-ch"), all);
  EXPECT_EQ(supported_architectures("w8a8-fp8-ch"), fp8);
  EXPECT_EQ(reason("w8a8-fp8-ch", 86), "fp8 activations need sm_89 or later");
  EXPECT_EQ(supported_architectures("w8a8-fp8-block128x128"), fp8);
  EXPECT_EQ(supported_architectures("w4a8-int4-fp8"), fp8);  // int4 values are exact in e4m3
  EXPECT_EQ(supported_architectures("w4a8-fp4-fp8"), fp8);
  EXPECT_EQ(supported_architectures("w4a4-int4-ch"), (std::vector<int>{75, 80, 86, 89}));
  EXPECT_NE(reason("w4a4-int4-ch", 90).find("int4"), std::string::npos);
  EXPECT_EQ(supported_architectures("w4a4-nvfp4"), blackwell);
  EXPECT_EQ(supported_architectures("w4a4-mxfp4"), blackwell);
  EXPECT_EQ(reason("w4a4-nvfp4", 90), "fp4 activations need Blackwell (sm_100, sm_103, sm_120 or sm_121)");
  EXPECT_EQ(supported_architectures("w8a8-e5m2-ch"), fp8);        // e5m2 x e4m3 fp8 MMA
  EXPECT_EQ(supported_architectures("w6a8-e2m3-e5m2"), blackwell);  // only the f8f6f4 MMA mixes them
  EXPECT_NE(reason("w6a8-e2m3-e5m2", 89).find("sm_100"), std::string::npos);
  EXPECT_TRUE(supported_architectures("w8a8-int8-fp8").empty());  // int8 is not exact in e4m3
  EXPECT_NE(reason("w8a8-int8-fp8", 90).find("not exactly representable"), std::string::npos);
  EXPECT_TRUE(supported_architectures("w8a4-int8-int4").empty());
  EXPECT_TRUE(supported_architectures("w4a8-fp4-int8").empty());
  EXPECT_EQ(supported_architectures("w4a8-int4-g128-zp-int8"), all);
}

// The one grammar of a format list (`--format` on tune, export and report): ',' or ';' between specs, blanks ignored,
// and a piece with '=' and no ':' continues the spec before it only when that spec has options.
TEST(FormatList, SplitsSpecsButKeepsTheirOwnOptions) {
  EXPECT_EQ(split_format_list("w4a16-int4-ch,w8a16-int8-ch"), (std::vector<std::string>{"w4a16-int4-ch", "w8a16-int8-ch"}));
  EXPECT_EQ(split_format_list(" w4a16-int4-ch ;\tw8a16-int8-ch "), (std::vector<std::string>{"w4a16-int4-ch", "w8a16-int8-ch"}));
  EXPECT_EQ(split_format_list("w4a4-fp4-g16+t:scale=e4m3,act-scale=g16+t,act-scale-type=e4m3;w8a16-int8-ch,f16"),
            (std::vector<std::string>{"w4a4-fp4-g16+t:scale=e4m3,act-scale=g16+t,act-scale-type=e4m3", "w8a16-int8-ch", "f16"}));
  EXPECT_EQ(split_format_list("w8a8-fp8-ch:scale=f16, act-scale=token"), (std::vector<std::string>{"w8a8-fp8-ch:scale=f16,act-scale=token"}));
  // The README's example.
  EXPECT_EQ(parse_format_list("w4a16-int4-ch,w8a8-fp8-ch:scale=f16,act-scale=token;w8a16-int8-ch").size(), 3u);
  // Without options before it, an option is a spec of its own (which FormatSpec::parse then refuses).
  EXPECT_EQ(split_format_list("w4a16-int4-ch,scale=f16"), (std::vector<std::string>{"w4a16-int4-ch", "scale=f16"}));
  for (const char* text : {"", "w4a16-int4-ch,,w8a16-int8-ch", "w4a16-int4-ch;", " , "}) {
    const std::string message = test_support::input_error([&] { split_format_list(text, "--format"); });
    EXPECT_EQ(message.rfind("--format: empty format in '", 0), 0u) << "'" << text << "': " << message;
  }
}

TEST(FormatList, ParsesEachSpecOnceAndNamesABadOne) {
  const std::vector<FormatSpec> formats = parse_format_list("nvfp4;w4a16-int4-ch,w4a16-fp4-g16+t:scale=e4m3,mxfp4");
  ASSERT_EQ(formats.size(), 3u) << "nvfp4 twice is one format";
  EXPECT_EQ(formats[0], FormatSpec::parse("nvfp4"));
  EXPECT_EQ(formats[1], FormatSpec::parse("w4a16-int4-ch"));
  EXPECT_EQ(formats[2], FormatSpec::parse("mxfp4"));
  const std::string message = test_support::input_error([] { parse_format_list("w4a16-int4-ch,not-a-format", "--format"); });
  EXPECT_EQ(message.rfind("--format: 'not-a-format': ", 0), 0u) << message;
}

}  // namespace
}  // namespace qtune
