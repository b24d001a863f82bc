// Each family owns its space: the curated ranges per M (what `qtune tune` searches by default) lie inside the family's
// parameter domains, and a family that does not narrow them searches its whole space.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "kernels/family.hpp"

namespace qtune {
namespace {

TEST(CuratedRanges, EveryValueIsOneOfTheFamilysDomain) {
  for (const KernelFamily* family : kernel_families()) {
    const std::vector<ParameterDomain> space = family->parameter_space();
    for (const std::int64_t m : {1, 8, 16, 17, 32, 64, 65, 128, 256, 257, 512, 8192}) {
      const ParameterRanges ranges = family->curated_ranges(m);
      EXPECT_FALSE(ranges.empty()) << family->name() << " m=" << m;
      for (const auto& [name, values] : ranges) {
        const auto domain = std::find_if(space.begin(), space.end(), [&](const ParameterDomain& d) { return d.name == name; });
        ASSERT_NE(domain, space.end()) << family->name() << " m=" << m << ": no parameter " << name;
        EXPECT_FALSE(values.empty()) << family->name() << " m=" << m << " " << name;
        for (const int value : values) {
          EXPECT_NE(std::find(domain->values.begin(), domain->values.end(), value), domain->values.end())
              << family->name() << " m=" << m << ": " << name << "=" << value << " is outside the domain";
        }
      }
    }
  }
}

TEST(CuratedRanges, NarrowTheSpaceByM) {
  const KernelFamily& mma = find_family("mma");
  EXPECT_EQ(mma.curated_ranges(1).at("bm"), (std::vector<int>{16}));
  EXPECT_EQ(mma.curated_ranges(32).at("bm"), (std::vector<int>{32}));
  EXPECT_EQ(mma.curated_ranges(4096).at("split"), (std::vector<int>{1}));
  for (const std::int64_t m : {1, 16, 32, 64}) {  // decode: the rule keeps gscale=1 for K-group formats only
    EXPECT_EQ(mma.curated_ranges(m).at("gscale"), (std::vector<int>{0, 1})) << m;
  }
  EXPECT_EQ(mma.curated_ranges(65).at("gscale"), (std::vector<int>{0}));
  EXPECT_EQ(mma.curated_ranges(4096).at("gscale"), (std::vector<int>{0}));
  const KernelFamily& wgmma = find_family("wgmma");
  EXPECT_EQ(wgmma.curated_ranges(16).at("overlap"), (std::vector<int>{0}));
  EXPECT_EQ(wgmma.curated_ranges(256).at("overlap"), (std::vector<int>{1}));
  EXPECT_EQ(wgmma.curated_ranges(16).at("gscale"), (std::vector<int>{0, 1}));  // decode: the rule keeps 1 for K-group formats only
  EXPECT_EQ(wgmma.curated_ranges(256).at("gscale"), (std::vector<int>{0}));
  EXPECT_EQ(wgmma.curated_ranges(1024).at("bm"), (std::vector<int>{64, 128}));
}

// Every point of the ranges (a parameter left out keeps its domain), calling visit(config) until it returns true.
bool any_config(const KernelFamily& family, const ParameterRanges& ranges, const std::function<bool(const KernelConfig&)>& visit) {
  std::vector<std::pair<std::string, std::vector<int>>> axes;
  for (const ParameterDomain& domain : family.parameter_space()) {
    const auto narrowed = ranges.find(domain.name);
    axes.emplace_back(domain.name, narrowed == ranges.end() ? domain.values : narrowed->second);
  }
  std::vector<size_t> index(axes.size(), 0);
  while (true) {
    KernelConfig config;
    config.family = family.name();
    for (size_t a = 0; a < axes.size(); ++a) config.params[axes[a].first] = axes[a].second[index[a]];
    if (visit(config)) return true;
    size_t a = 0;
    for (; a < axes.size() && ++index[a] == axes[a].second.size(); ++a) index[a] = 0;
    if (a == axes.size()) return false;
  }
}

// The curated search is what `qtune tune` runs by default: for every preset a family runs on sm_90 it must leave at
// least one valid configuration at every M where `--family auto` (the main job) tunes that family (one row of tma
// 128-token tiles once had none: raster 2 needs two M tiles).
TEST(CuratedRanges, LeaveAValidConfigurationForEveryPresetOnSm90) {
  const ArchLimits limits = ArchLimits::for_sm(90);
  for (const KernelFamily* family : kernel_families()) {
    for (const FormatPreset& preset : format_presets()) {
      const FormatSpec format = FormatSpec::parse(preset.name);
      if (!family->supports(format, 90).supported) continue;
      for (const std::int64_t m : {1, 16, 32, 64, 100, 128, 200, 256, 1024, 4096}) {
        const Problem problem{format, m, 8192, 8192, false};
        if (!auto_tune_covers(*family, kernel_families(), problem, 90)) continue;
        const bool found = any_config(*family, family->curated_ranges(m),
                                      [&](const KernelConfig& config) { return family->check(config, problem, limits).valid; });
        EXPECT_TRUE(found) << family->name() << " " << preset.name << " m=" << m << ": no valid configuration in the curated ranges";
      }
    }
  }
}

// A family that does not narrow its space (the default) searches every value of every parameter.
class WholeSpaceFamily final : public KernelFamily {
 public:
  std::string name() const override { return "whole"; }
  std::string description() const override { return ""; }
  std::vector<ParameterDomain> parameter_space() const override { return {{"a", {1, 2}, ""}, {"b", {3}, ""}}; }
  ArchSupport supports(const FormatSpec&, int sm) const override { return {sm, true, ""}; }
  RuleVerdict check(const KernelConfig&, const Problem&, const ArchLimits&) const override { return RuleVerdict::ok(); }
  std::string kernel_name(const KernelConfig&, const FormatSpec&) const override { return ""; }
  std::string instantiation_source(const KernelConfig&, const FormatSpec&, const std::string&) const override { return ""; }
  LaunchGeometry launch_geometry(const KernelConfig&, const Problem&) const override { return {}; }
  std::vector<BufferSpec> buffers(const KernelConfig&, const Problem&) const override { return {}; }
  KernelArguments pack_arguments(const KernelConfig&, const Problem&, const std::map<std::string, uint64_t>&) const override {
    return {};
  }
  PackedBuffers prepack_weights(const QuantizedWeights&, const KernelConfig&) const override { return {}; }
  QuantizedWeights unpack_weights(const PackedBuffers&, const FormatSpec&, int64_t, int64_t, const KernelConfig&) const override {
    return {};
  }
  PackedBuffers prepack_activations(const QuantizedActivations&, const KernelConfig&) const override { return {}; }
  std::vector<uint8_t> pack_bias(std::span<const float>, const FormatSpec&) const override { return {}; }
  KernelConfig default_config(const Problem&, const ArchLimits&) const override { return {}; }
};

TEST(CuratedRanges, ByDefaultTheWholeSpace) {
  const WholeSpaceFamily family;
  EXPECT_EQ(family.curated_ranges(1), (ParameterRanges{{"a", {1, 2}}, {"b", {3}}}));
  EXPECT_EQ(family.curated_ranges(8192), family.curated_ranges(1));
}

}  // namespace
}  // namespace qtune
