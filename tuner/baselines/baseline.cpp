#include "tuner/baselines/baseline.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/error.hpp"

namespace qtune::baselines {

void validate_problem(const GemmProblem& problem, std::string_view field) {
  const auto check = [&](int64_t value, const char* name) {
    if (value <= 0) {
      QTUNE_INPUT_ERROR(std::string(field) + ": " + name + " must be positive, got " + std::to_string(value));
    }
  };
  check(problem.m, "M");
  check(problem.n, "N");
  check(problem.k, "K");
}

const std::vector<BaselineInfo>& baseline_catalog() {
  static const std::vector<BaselineInfo> catalog = {
      {BaselineKind::F16, "cublaslt-f16", "cuBLASLt f16 x f16 GEMM, f32 accumulate, f16 out", 16, 16, 16, "f16", "f16"},
      {BaselineKind::BF16, "cublaslt-bf16", "cuBLASLt bf16 x bf16 GEMM, f32 accumulate, bf16 out", 16, 16, 16, "bf16",
       "bf16"},
      {BaselineKind::Fp8Tensor, "cublaslt-fp8-tensor",
       "cuBLASLt e4m3 x e4m3 with one f32 scale per tensor (A_SCALE/B_SCALE_POINTER), bf16 out", 8, 8, 16, "e4m3",
       "bf16"},
      {BaselineKind::Fp8Outer, "cublaslt-fp8-outer",
       "cuBLASLt e4m3 x e4m3 with per-channel weight and per-token activation f32 scales (OUTER_VEC_32F), bf16 out", 8,
       8, 16, "e4m3", "bf16"},
      {BaselineKind::Fp8Block128, "cublaslt-fp8-block128",
       "cuBLASLt e4m3 x e4m3 with 128x128 weight-block and 1x128 activation-group f32 scales "
       "(BLK128x128_32F/VEC128_32F), "
       "bf16 out",
       8, 8, 16, "e4m3", "bf16"},
      {BaselineKind::Int8, "cublaslt-int8", "cuBLASLt int8 x int8 IMMA, int32 accumulate, int32 out (no scaling)", 8, 8,
       32, "int8", "int32"},
  };
  return catalog;
}

const BaselineInfo& baseline_info(BaselineKind kind) {
  for (const auto& info : baseline_catalog()) {
    if (info.kind == kind) return info;
  }
  QTUNE_THROW(Error, "unknown BaselineKind " + std::to_string(static_cast<int>(kind)));
}

const std::string& baseline_id(BaselineKind kind) { return baseline_info(kind).id; }

namespace {

std::string valid_ids() {
  std::string ids;
  for (const auto& info : baseline_catalog()) {
    if (!ids.empty()) ids += ", ";
    ids += info.id;
  }
  return ids;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

}  // namespace

BaselineKind parse_baseline_id(std::string_view id, std::string_view field) {
  const std::string_view wanted = trim(id);
  for (const auto& info : baseline_catalog()) {
    if (info.id == wanted) return info.kind;
  }
  QTUNE_INPUT_ERROR(std::string(field) + ": unknown baseline '" + std::string(wanted) + "' (valid: " + valid_ids() +
                    ", or all)");
}

std::vector<BaselineKind> parse_baseline_list(std::string_view comma_separated, std::string_view field) {
  std::vector<BaselineKind> kinds;
  const auto add = [&](BaselineKind kind) {
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) kinds.push_back(kind);
  };
  std::string_view rest = comma_separated;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = trim(rest.substr(0, comma));
    if (item.empty())
      QTUNE_INPUT_ERROR(std::string(field) + ": empty baseline name in '" + std::string(comma_separated) + "'");
    if (item == "all") {
      for (const auto& info : baseline_catalog()) add(info.kind);
    } else {
      add(parse_baseline_id(item, field));
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return kinds;
}

std::optional<BaselineKind> natural_baseline(const FormatSpec& format) {
  if (!format.activation_is_quantized()) {
    // Weight-only formats compete with the dense 16-bit GEMM of their activation type.
    return format.activation == ActivationType::BF16 ? BaselineKind::BF16 : BaselineKind::F16;
  }
  const auto& w = format.weight_scale;
  const auto& a = format.activation_scale;
  if (format.activation == ActivationType::E4M3 && format.weight == ElementType::floating(4, 3) &&
      format.zero_point == ZeroPoint::None && !w.global_scale && !a.global_scale) {
    if (w.granularity == WeightScaleGranularity::PerTensor && a.granularity == ActivationScaleGranularity::PerTensor) {
      return BaselineKind::Fp8Tensor;
    }
    if (w.granularity == WeightScaleGranularity::PerChannel && a.granularity == ActivationScaleGranularity::PerToken) {
      return BaselineKind::Fp8Outer;
    }
    if (w.granularity == WeightScaleGranularity::PerBlock && w.group_n == 128 && w.group_k == 128 &&
        a.granularity == ActivationScaleGranularity::PerGroup && a.group_k == 128) {
      return BaselineKind::Fp8Block128;
    }
    return std::nullopt;
  }
  if (format.activation == ActivationType::Int8 && format.weight == ElementType::signed_int(8) &&
      format.zero_point == ZeroPoint::None) {
    return BaselineKind::Int8;
  }
  return std::nullopt;
}

std::optional<FormatSpec> baseline_format(BaselineKind kind) {
  FormatSpec format;
  format.zero_point = ZeroPoint::None;
  format.output = OutputType::BF16;
  format.weight_scale.type = ScaleType::F32;
  format.weight_scale.global_scale = false;
  format.activation_scale.type = ScaleType::F32;
  format.activation_scale.global_scale = false;
  switch (kind) {
    case BaselineKind::F16:
    case BaselineKind::BF16:
      return std::nullopt;
    case BaselineKind::Fp8Tensor:
      format.weight = ElementType::floating(4, 3);
      format.activation = ActivationType::E4M3;
      format.weight_scale.granularity = WeightScaleGranularity::PerTensor;
      format.activation_scale.granularity = ActivationScaleGranularity::PerTensor;
      return format;
    case BaselineKind::Fp8Outer:
      format.weight = ElementType::floating(4, 3);
      format.activation = ActivationType::E4M3;
      format.weight_scale.granularity = WeightScaleGranularity::PerChannel;
      format.activation_scale.granularity = ActivationScaleGranularity::PerToken;
      return format;
    case BaselineKind::Fp8Block128:
      format.weight = ElementType::floating(4, 3);
      format.activation = ActivationType::E4M3;
      format.weight_scale.granularity = WeightScaleGranularity::PerBlock;
      format.weight_scale.group_n = 128;
      format.weight_scale.group_k = 128;
      format.activation_scale.granularity = ActivationScaleGranularity::PerGroup;
      format.activation_scale.group_k = 128;
      return format;
    case BaselineKind::Int8:
      format.weight = ElementType::signed_int(8);
      format.activation = ActivationType::Int8;
      format.weight_scale.granularity = WeightScaleGranularity::PerChannel;
      format.activation_scale.granularity = ActivationScaleGranularity::PerToken;
      return format;
  }
  return std::nullopt;
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

TrafficModel traffic(BaselineKind kind, const GemmProblem& problem) {
  const auto& info = baseline_info(kind);
  const double m = static_cast<double>(problem.m);
  const double n = static_cast<double>(problem.n);
  const double k = static_cast<double>(problem.k);
  TrafficModel model;
  model.activation_bytes = m * k * info.activation_bits / 8.0;
  model.weight_bytes = n * k * info.weight_bits / 8.0;
  model.output_bytes = m * n * info.output_bits / 8.0;
  constexpr double kF32 = 4.0;
  switch (kind) {
    case BaselineKind::Fp8Tensor:
      model.activation_bytes += kF32;
      model.weight_bytes += kF32;
      break;
    case BaselineKind::Fp8Outer:
      model.activation_bytes += m * kF32;
      model.weight_bytes += n * kF32;
      break;
    case BaselineKind::Fp8Block128: {
      const double k_blocks = static_cast<double>(ceil_div(problem.k, 128));
      model.activation_bytes += m * k_blocks * kF32;
      model.weight_bytes += static_cast<double>(ceil_div(problem.n, 128)) * k_blocks * kF32;
      break;
    }
    case BaselineKind::F16:
    case BaselineKind::BF16:
    case BaselineKind::Int8:
      break;
  }
  return model;
}

double gemm_flops(const GemmProblem& problem) {
  return 2.0 * static_cast<double>(problem.m) * static_cast<double>(problem.n) * static_cast<double>(problem.k);
}

std::vector<int64_t> verification_rows(int64_t m, int64_t max_rows) {
  std::vector<int64_t> rows;
  if (m <= 0) return rows;
  max_rows = std::max<int64_t>(max_rows, 2);
  if (m <= max_rows) {
    rows.reserve(static_cast<size_t>(m));
    for (int64_t row = 0; row < m; ++row) rows.push_back(row);
    return rows;
  }
  rows.reserve(static_cast<size_t>(max_rows));
  for (int64_t i = 0; i < max_rows; ++i) {
    // Evenly spaced from 0 to m-1 inclusive; rounding keeps both ends.
    const double position = static_cast<double>(i) * static_cast<double>(m - 1) / static_cast<double>(max_rows - 1);
    rows.push_back(static_cast<int64_t>(std::llround(position)));
  }
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

}  // namespace qtune::baselines
