#pragma once
// A kernel family whose parameter domains are narrowed to chosen values (`qtune tune --param bm=16,32`), e.g. for a
// quick tune, CI, or to study one parameter. Everything else is the wrapped family's.
#include <map>
#include <string>
#include <vector>

#include "kernels/family.hpp"

namespace qtune::tune {

class RestrictedFamily final : public KernelFamily {
 public:
  // Throws InputError naming "--param" for a parameter the family lacks or a value outside its domain.
  RestrictedFamily(const KernelFamily& family, std::map<std::string, std::vector<int>> values);

  const KernelFamily& base() const { return base_; }
  const std::map<std::string, std::vector<int>>& restrictions() const { return values_; }

  std::string name() const override { return base_.name(); }
  std::string description() const override { return base_.description(); }
  std::vector<ParameterDomain> parameter_space() const override;
  ArchSupport supports(const FormatSpec& format, int sm) const override { return base_.supports(format, sm); }
  RuleVerdict check(const KernelConfig& config, const Problem& problem, const ArchLimits& limits) const override {
    return base_.check(config, problem, limits);
  }
  std::string kernel_name(const KernelConfig& config, const FormatSpec& format) const override {
    return base_.kernel_name(config, format);
  }
  std::string instantiation_source(const KernelConfig& config, const FormatSpec& format,
                                   const std::string& arch) const override {
    return base_.instantiation_source(config, format, arch);
  }
  LaunchGeometry launch_geometry(const KernelConfig& config, const Problem& problem) const override {
    return base_.launch_geometry(config, problem);
  }
  std::vector<BufferSpec> buffers(const KernelConfig& config, const Problem& problem) const override {
    return base_.buffers(config, problem);
  }
  KernelArguments pack_arguments(const KernelConfig& config, const Problem& problem,
                                 const std::map<std::string, uint64_t>& device_addresses) const override {
    return base_.pack_arguments(config, problem, device_addresses);
  }
  PackedBuffers prepack_weights(const QuantizedWeights& weights, const KernelConfig& config) const override {
    return base_.prepack_weights(weights, config);
  }
  QuantizedWeights unpack_weights(const PackedBuffers& packed, const FormatSpec& format, int64_t n, int64_t k,
                                  const KernelConfig& config) const override {
    return base_.unpack_weights(packed, format, n, k, config);
  }
  PackedBuffers prepack_activations(const QuantizedActivations& activations, const KernelConfig& config) const override {
    return base_.prepack_activations(activations, config);
  }
  std::vector<uint8_t> pack_bias(std::span<const float> bias, const FormatSpec& format) const override {
    return base_.pack_bias(bias, format);
  }
  KernelConfig default_config(const Problem& problem, const ArchLimits& limits) const override {
    return base_.default_config(problem, limits);
  }

 private:
  const KernelFamily& base_;
  std::map<std::string, std::vector<int>> values_;
};

// Parses "bm=16,32" (one --param value) into (name, values). Throws InputError naming "--param".
std::pair<std::string, std::vector<int>> parse_parameter_values(const std::string& text);

}  // namespace qtune::tune
