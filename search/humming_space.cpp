#include "search/humming_space.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include "kernels/error.hpp"

namespace qtune::search {

namespace {

// The parameters in canonical order; Point holds them as plain ints so that the full space is walked without maps.
constexpr std::array<std::string_view, 15> kParameterNames = {
    "bm", "bn", "bk", "warps_m", "wn", "wk", "stages", "stream_k", "warp_spec", "tma",
    "multicast_a", "multicast_b", "ctas_per_sm", "write_splits", "sms"};

struct Point {
  std::array<int, kParameterNames.size()> values{};
  int bm() const { return values[0]; }
  int bn() const { return values[1]; }
  int bk() const { return values[2]; }
  int warps_m() const { return values[3]; }
  int wn() const { return values[4]; }
  int wk() const { return values[5]; }
  int stages() const { return values[6]; }
  int stream_k() const { return values[7]; }
  int warp_spec() const { return values[8]; }
  int tma() const { return values[9]; }
  int multicast_a() const { return values[10]; }
  int multicast_b() const { return values[11]; }
  int ctas_per_sm() const { return values[12]; }
  int write_splits() const { return values[13]; }
  int sms() const { return values[14]; }
  int wm() const { return warps_m() > 0 ? bm() / warps_m() : 0; }
};

bool is_power_of_two(int64_t value) { return value > 0 && (value & (value - 1)) == 0; }
int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }
int64_t ceil_div(int64_t value, int64_t divisor) { return (value + divisor - 1) / divisor; }

std::string to_text(int value) { return std::to_string(value); }

// Humming issues wgmma on sm_90 only (LayerConfig: mma_type WGMMA when the major version is 9), mma.sync elsewhere.
bool uses_wgmma(int sm) { return sm / 10 == 9; }

// The M granule of one MMA along the tokens: wgmma's N (multiples of 8), mma.sync's M (16, or 8 with m8 shapes).
int m_granule(int sm) { return uses_wgmma(sm) ? 8 : 16; }

// Warp shapes Humming's docs allow per activation width (docs/config.md, "Block and Warp Shapes").
const std::vector<int>& allowed_warp_n(int a_bits) {
  static const std::vector<int> wide = {32, 64};
  static const std::vector<int> narrow = {16, 32, 64};
  return a_bits == 16 ? wide : narrow;
}
std::vector<int> allowed_warp_k(int a_bits) {
  if (a_bits == 16) return {32, 64};
  if (a_bits == 8) return {64, 128};
  return {128, 256};
}

bool contains(const std::vector<int>& values, int value) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

int bits_of_humming_type(const std::string& name) {
  if (name == "float32") return 32;
  if (name == "float16" || name == "bfloat16") return 16;
  return 8;  // float8e4m3, float8e5m2, float8e8m0
}

std::string humming_float_name(const ElementType& type) {
  return "float" + std::to_string(type.bits) + "e" + std::to_string(type.exponent_bits) + "m" +
         std::to_string(type.mantissa_bits);
}

int64_t shared_memory_of(const Point& point, const HummingLayer& layer) {
  const int64_t bm = point.bm(), bn = point.bn(), bk = point.bk();
  const int64_t a_stage = layer.a_bits * bm * bk / 8;
  const int64_t b_stage = layer.b_bits * bn * bk / 8;
  const int64_t zp_bits = layer.is_fp_zero_point ? 16 : ceil_div(layer.b_bits, 4) * 4;
  const int64_t bs_bits = bits_of_humming_type(layer.bs_dtype);
  int64_t bs_stage = 0, bzp_stage = 0, as_stage = 0, bs_channel = 0, bzp_channel = 0, as_channel = 0;
  if (layer.weight_scale_group_size > 0) {
    const int64_t groups = ceil_div(bk, layer.weight_scale_group_size);
    bs_stage = bn * groups * bs_bits / 8;
    bzp_stage = bn * groups * zp_bits / 8;
  } else {
    bs_channel = bn * bs_bits / 8;
    bzp_channel = bn * zp_bits / 8;
  }
  if (!layer.has_zero_point) bzp_stage = bzp_channel = 0;
  if (layer.a_bits < 16) {
    if (layer.input_scale_group_size > 0) {
      as_stage = bm * ceil_div(bk, layer.input_scale_group_size) * 4;
    } else {
      as_channel = bm * 4;
    }
  }
  const int64_t stage = a_stage + b_stage + as_stage + bs_stage + bzp_stage;
  return stage * point.stages() + as_channel + bs_channel + bzp_channel;
}

RuleVerdict fail(std::string rule, std::string detail) { return RuleVerdict::fail(std::move(rule), std::move(detail)); }

// Every rule but the format's, on a point of a layer Humming runs on this architecture.
RuleVerdict check_point(const Point& p, const HummingLayer& layer, int64_t m, const ArchLimits& limits) {
  const bool wgmma = uses_wgmma(limits.sm);
  if (p.bm() < 8 || p.bm() % 8 != 0 || p.bm() > 256) {
    return fail("block-shape", "bm=" + to_text(p.bm()) + " must be a multiple of 8 in [8, 256]");
  }
  if (p.warps_m() != 1 && p.warps_m() != 2) return fail("block-shape", "warps_m must be 1 or 2");
  if (p.bm() % p.warps_m() != 0) return fail("block-shape", "bm must split into warps_m warps");
  if (p.bn() < 64 || !is_power_of_two(p.bn())) return fail("block-shape", "bn must be a power of two >= 64");
  if (!is_power_of_two(p.bk())) return fail("block-shape", "bk must be a power of two");
  if ((p.warp_spec() | p.tma() | p.stream_k()) & ~1) return fail("block-shape", "stream_k, warp_spec and tma are 0 or 1");
  if (!is_power_of_two(p.wn()) || !is_power_of_two(p.wk()) || p.wn() % 16 != 0 || p.wn() > 64) {
    return fail("warp-shape", "wn and wk must be powers of two, wn a multiple of 16 and at most 64");
  }
  if (p.bn() % p.wn() != 0 || p.bk() % p.wk() != 0) {
    return fail("warp-shape", "the block shape must be a power-of-two multiple of the warp shape");
  }
  const int64_t granule = m_granule(limits.sm);
  if (p.bm() > std::max<int64_t>(round_up(m, granule), granule)) {
    return fail("bm-exceeds-m", "bm=" + to_text(p.bm()) + " computes only padding beyond M=" + std::to_string(m));
  }
  // No bn-divides-N rule: a last, partial N tile is Humming's own practice (its sm90 rules run bn = 128 on DeepSeek-V3's
  // N = 576; N itself is aligned by the format's shape rules), and each candidate is verified like any other.
  if (layer.k % p.bk() != 0) return fail("bk-divides-k", "bk=" + to_text(p.bk()) + " does not divide K");
  if (!contains(allowed_warp_n(layer.a_bits), p.wn()) || !contains(allowed_warp_k(layer.a_bits), p.wk())) {
    return fail("warp-shape-for-activation", "wn=" + to_text(p.wn()) + ", wk=" + to_text(p.wk()) +
                                                 " are not warp shapes Humming has for " + layer.a_dtype);
  }
  // The warp's M is wgmma's N (a multiple of 8, at most 256) or mma.sync's M (16, or 8 with the m8 shapes).
  if (p.wm() % 8 != 0) return fail("mma-shape", "warp M = bm / warps_m = " + to_text(p.wm()) + " is no multiple of 8");
  if (wgmma && p.bn() < 4 * p.wn()) {
    return fail("wgmma-bn-4x-wn", "with wgmma bn must be at least 4 x wn (a warpgroup spans 4 warps along N)");
  }
  const int64_t math_threads = int64_t{p.warps_m()} * (p.bn() / p.wn()) * (p.bk() / p.wk()) * 32;
  const int64_t threads = math_threads + (p.warp_spec() != 0 ? 128 : 0);
  if (threads > limits.max_threads_per_block) {
    return fail("threads-per-block", std::to_string(threads) + " threads per CTA > " +
                                         std::to_string(limits.max_threads_per_block));
  }
  // Humming (a6455de) copies a block's activation-scale rows one per load thread with no loop over the rest
  // (memory/g2s_loader/loader_as.cuh), so rows past the load threads read shared memory nothing wrote: NaN rows from
  // row 128 of each block at M = 1024 on the H200 (Humming's own sm90 pick, bm = 176, warp specialization).
  const int64_t load_threads = p.warp_spec() != 0 ? 128 : math_threads;
  if (layer.a_bits < 16 && p.bm() > load_threads) {
    return fail("activation-scale-rows", "bm=" + to_text(p.bm()) + " has more rows than Humming's " +
                                             std::to_string(load_threads) + " load threads, which copy one activation "
                                             "scale each: rows past them come out wrong");
  }
  if (p.stages() < 2 || p.stages() > 8) return fail("stages", "stages must be in [2, 8]");
  if ((p.warp_spec() != 0 || p.tma() != 0) && limits.sm < 90) {
    return fail("sm90-feature", "warp specialization and TMA need sm_90 or later");
  }
  if (wgmma && p.warp_spec() != 0 && p.stages() < 3) {
    return fail("warp-spec-stages", "warp specialization with wgmma needs at least 3 stages");
  }
  if (p.multicast_a() < 1 || p.multicast_b() < 1 || p.multicast_a() > 2 || p.multicast_b() > 2) {
    return fail("multicast", "multicast sizes are 1 or 2");
  }
  const int cluster = p.multicast_a() * p.multicast_b();
  if (cluster > 1) {
    if (p.multicast_a() > 1 && p.multicast_b() > 1) return fail("multicast", "only one of A and B may be multicast");
    if (p.tma() == 0) return fail("multicast", "multicast needs TMA");
  }
  if (p.multicast_a() > 1 && layer.n % (int64_t{p.bn()} * p.multicast_a()) != 0) {  // the cluster's CTAs pair whole tiles
    return fail("multicast-divides-n", "N must be a multiple of bn x multicast_a");
  }
  if (p.ctas_per_sm() < 1 || p.ctas_per_sm() > 4) return fail("ctas-per-sm", "ctas_per_sm must be in [1, 4]");
  if (threads * p.ctas_per_sm() > limits.max_threads_per_sm) {
    return fail("ctas-per-sm", std::to_string(p.ctas_per_sm()) + " CTAs of " + std::to_string(threads) +
                                   " threads do not fit on one SM");
  }
  if (p.sms() < 0 || (limits.sm_count > 0 && p.sms() > limits.sm_count)) {
    return fail("sms", "sms must be 0 (all) or at most the GPU's " + std::to_string(limits.sm_count) + " SMs");
  }
  const int64_t sms = p.sms() > 0 ? p.sms() : limits.sm_count;
  if (cluster > 1 && sms > 0 && (sms * p.ctas_per_sm()) % cluster != 0) {
    return fail("multicast-cluster", "the grid of ctas_per_sm x SMs CTAs must split into clusters of " +
                                         std::to_string(cluster));
  }
  if (p.write_splits() != 1 && p.write_splits() != 2) return fail("write-splits", "write_splits is 1 or 2");
  if (p.write_splits() == 2 && (p.warps_m() != 1 || p.bm() % 32 != 0 || p.tma() != 0)) {
    return fail("write-splits", "two write splits need bm = warp M, bm a multiple of 32 and no TMA store");
  }
  const int64_t shared = shared_memory_of(p, layer);
  if (shared > limits.max_shared_per_block) {
    return fail("smem-per-block", std::to_string(shared) + " bytes of shared memory > " +
                                      std::to_string(limits.max_shared_per_block) + " per block");
  }
  if (shared * p.ctas_per_sm() > limits.shared_per_sm) {
    return fail("smem-per-sm", std::to_string(p.ctas_per_sm()) + " CTAs of " + std::to_string(shared) +
                                   " bytes of shared memory > " + std::to_string(limits.shared_per_sm) + " per SM");
  }
  return RuleVerdict::ok();
}

// The layer of a problem, or the verdict that refuses it.
struct LayerOrVerdict {
  HummingLayer layer;
  RuleVerdict verdict;
};
LayerOrVerdict layer_of(const Problem& problem, int sm) {
  LayerOrVerdict result;
  try {
    result.layer = humming_layer_for(problem.format, problem.n, problem.k);
  } catch (const UnsupportedError& error) {
    result.verdict = fail("format-unsupported", error.what());
    return result;
  }
  if (problem.has_bias) {
    result.verdict = fail("format-unsupported", "the Humming space covers GEMMs without bias");
    return result;
  }
  std::string why;
  if (!humming_runs_on(result.layer, sm, &why)) result.verdict = fail("format-unsupported-on-arch", why);
  return result;
}

Point point_of(const KernelConfig& config, RuleVerdict& verdict) {
  Point point;
  for (size_t i = 0; i < kParameterNames.size(); ++i) {
    const auto found = config.params.find(std::string(kParameterNames[i]));
    if (found == config.params.end()) {
      verdict = fail("missing-parameter", "config: missing parameter '" + std::string(kParameterNames[i]) + "'");
      return point;
    }
    point.values[i] = found->second;
  }
  return point;
}

KernelConfig config_of(const Point& point) {
  KernelConfig config{std::string(kHummingFamily), {}};
  for (size_t i = 0; i < kParameterNames.size(); ++i) config.params[std::string(kParameterNames[i])] = point.values[i];
  return config;
}

int required(const KernelConfig& config, std::string_view name) {
  const auto found = config.params.find(std::string(name));
  if (found == config.params.end()) QTUNE_INPUT_ERROR("config: missing parameter '" + std::string(name) + "'");
  return found->second;
}

}  // namespace

nlohmann::json HummingLayer::to_json() const {
  return nlohmann::json{{"a_dtype", a_dtype},
                        {"b_dtype", b_dtype},
                        {"c_dtype", c_dtype},
                        {"bs_dtype", bs_dtype},
                        {"shape_n", n},
                        {"shape_k", k},
                        {"input_scale_group_size", input_scale_group_size},
                        {"weight_scale_group_size", weight_scale_group_size},
                        {"weight_scale_group_size_n", weight_scale_group_size_n},
                        {"weight_scale_type", weight_scale_type},
                        {"has_zero_point", has_zero_point},
                        {"is_fp_zero_point", is_fp_zero_point},
                        {"num_experts", 0}};
}

HummingLayer humming_layer_for(const FormatSpec& format, int64_t n, int64_t k) {
  format.validate_shape(n, k);
  HummingLayer layer;
  layer.n = n;
  layer.k = k;
  switch (format.activation) {
    case ActivationType::F16: layer.a_dtype = "float16", layer.a_bits = 16, layer.a_mantissa_bits = 10; break;
    case ActivationType::BF16: layer.a_dtype = "bfloat16", layer.a_bits = 16, layer.a_mantissa_bits = 7; break;
    case ActivationType::E4M3: layer.a_dtype = "float8e4m3", layer.a_bits = 8, layer.a_mantissa_bits = 3; break;
    case ActivationType::E5M2: layer.a_dtype = "float8e5m2", layer.a_bits = 8, layer.a_mantissa_bits = 2; break;
    case ActivationType::Int8: layer.a_dtype = "int8", layer.a_bits = 8, layer.a_mantissa_bits = 0; break;
    case ActivationType::Int4: layer.a_dtype = "int4", layer.a_bits = 4, layer.a_mantissa_bits = 0; break;
    case ActivationType::E2M1: layer.a_dtype = "float4e2m1", layer.a_bits = 4, layer.a_mantissa_bits = 1; break;
  }
  const bool integer_activations = format.activation == ActivationType::Int8 || format.activation == ActivationType::Int4;
  layer.c_dtype = format.output == OutputType::F16 ? "float16" : "bfloat16";
  const ElementType& weight = format.weight;
  layer.b_bits = weight.bits;
  if (weight.bits > layer.a_bits) {
    QTUNE_THROW(UnsupportedError, "Humming needs weights no wider than the activations (" + weight.name() + " x " +
                                      layer.a_dtype + ")");
  }
  layer.has_zero_point = format.zero_point != ZeroPoint::None;
  layer.is_fp_zero_point = format.zero_point == ZeroPoint::Float;
  if (weight.is_integer()) {
    if (integer_activations && weight.bits == layer.a_bits) {
      if (layer.has_zero_point) {
        QTUNE_THROW(UnsupportedError, "Humming takes no zero point on " + weight.name() + " x " + layer.a_dtype);
      }
      layer.b_dtype = "int" + std::to_string(weight.bits);
    } else {
      // Symmetric ints are stored unsigned with an offset of 2^(b-1); zero-point ints are unsigned already.
      layer.b_dtype = "uint" + std::to_string(weight.bits);
      const int limit = layer.a_mantissa_bits + (layer.has_zero_point ? 1 : 2);
      if (!integer_activations && weight.bits > limit) {
        QTUNE_THROW(UnsupportedError, "Humming converts " + weight.name() + " to " + layer.a_dtype +
                                          " exactly only up to " + std::to_string(limit) + " bits");
      }
    }
    if (layer.is_fp_zero_point && layer.a_bits != 16) {
      QTUNE_THROW(UnsupportedError, "Humming takes float zero points only with f16/bf16 activations");
    }
  } else {
    if (integer_activations) {
      QTUNE_THROW(UnsupportedError, "Humming runs no float weights (" + weight.name() + ") with integer activations");
    }
    const int a_exponent = layer.a_bits - 1 - layer.a_mantissa_bits;
    if (weight.exponent_bits > a_exponent || weight.mantissa_bits > layer.a_mantissa_bits) {
      QTUNE_THROW(UnsupportedError, "Humming needs float weights (" + weight.name() + ") that " + layer.a_dtype +
                                        " holds exactly");
    }
    layer.b_dtype = humming_float_name(weight);
  }

  const WeightScaling& scaling = format.weight_scale;
  switch (scaling.granularity) {
    case WeightScaleGranularity::PerChannel: layer.weight_scale_type = "channel"; break;
    case WeightScaleGranularity::PerTensor: layer.weight_scale_type = "tensor"; break;
    case WeightScaleGranularity::PerGroup:
      layer.weight_scale_type = scaling.global_scale ? "group_tensor" : "group";
      layer.weight_scale_group_size = scaling.group_k;
      break;
    case WeightScaleGranularity::PerBlock:
      layer.weight_scale_type = "block";
      layer.weight_scale_group_size = scaling.group_k;
      layer.weight_scale_group_size_n = scaling.group_n;
      break;
  }
  if (scaling.granularity == WeightScaleGranularity::PerBlock) {
    if (scaling.type != ScaleType::F32) QTUNE_THROW(UnsupportedError, "Humming takes f32 block scales; use scale=f32");
    if (layer.a_bits == 16) QTUNE_THROW(UnsupportedError, "Humming takes block scales only with quantized activations");
    if (scaling.group_n < 64) QTUNE_THROW(UnsupportedError, "Humming needs weight blocks of at least 64 rows");
    layer.bs_dtype = "float32";
  } else {
    switch (scaling.type) {
      case ScaleType::F16: layer.bs_dtype = "float16"; break;
      case ScaleType::BF16: layer.bs_dtype = "bfloat16"; break;
      case ScaleType::E4M3: layer.bs_dtype = "float8e4m3"; break;
      case ScaleType::UE8M0: layer.bs_dtype = "float8e8m0"; break;
      case ScaleType::F32:
        QTUNE_THROW(UnsupportedError, "Humming takes f16, bf16, e4m3 or ue8m0 weight scales; use scale=f16");
    }
  }
  const int minimum_group = 256 / layer.a_bits;
  if (layer.weight_scale_group_size > 0 && layer.weight_scale_group_size < minimum_group) {
    QTUNE_THROW(UnsupportedError, "Humming needs weight scale groups of at least " + std::to_string(minimum_group) +
                                      " with " + layer.a_dtype + " activations");
  }

  const ActivationScaling& activation_scale = format.activation_scale;
  if (activation_scale.granularity == ActivationScaleGranularity::PerTensor || activation_scale.global_scale) {
    QTUNE_THROW(UnsupportedError, "Humming quantizes activations per token or per group, not per tensor");
  }
  if (activation_scale.granularity != ActivationScaleGranularity::None && activation_scale.type != ScaleType::F32) {
    QTUNE_THROW(UnsupportedError, "Humming takes f32 activation scales");
  }
  if (activation_scale.granularity == ActivationScaleGranularity::PerGroup) {
    layer.input_scale_group_size = activation_scale.group_k;
    if (layer.input_scale_group_size < minimum_group || !is_power_of_two(layer.input_scale_group_size)) {
      QTUNE_THROW(UnsupportedError, "Humming needs activation groups that are powers of two of at least " +
                                        std::to_string(minimum_group));
    }
  }
  if (layer.n % 64 != 0) QTUNE_THROW(UnsupportedError, "Humming needs N to be a multiple of 64 (pad the layer)");
  if (layer.k % (2 * minimum_group) != 0) {
    QTUNE_THROW(UnsupportedError, "Humming needs K to be a multiple of " + std::to_string(2 * minimum_group));
  }
  return layer;
}

bool humming_runs_on(const HummingLayer& layer, int sm, std::string* why) {
  const auto refuse = [&](const std::string& reason) {
    if (why != nullptr) *why = reason;
    return false;
  };
  int minimum = 75;
  if (layer.a_dtype == "int4" || layer.a_dtype == "bfloat16") minimum = 80;
  if (layer.a_dtype == "float8e4m3" || layer.a_dtype == "float8e5m2") minimum = 89;
  if (layer.a_dtype == "float4e2m1") minimum = 120;
  if (sm < minimum) return refuse(layer.a_dtype + " activations need sm_" + std::to_string(minimum) + " or later");
  if (layer.a_dtype == "int4" && sm >= 90) {
    return refuse("int4 activations: tensor cores from sm_90 on have no int4 MMA");
  }
  if (layer.a_dtype == "float4e2m1" && sm != 120) return refuse("float4e2m1 activations run on sm_120 only");
  return true;
}

std::vector<ParameterDomain> HummingSpace::parameter_space() {
  return {
      {"bm", {8, 16, 24, 32, 48, 64, 80, 96, 128, 160, 176, 192, 256}, "block shape M (tokens per CTA)"},
      {"bn", {64, 128, 256}, "block shape N"},
      {"bk", {32, 64, 128, 256, 512}, "block shape K"},
      {"warps_m", {1, 2}, "warps along M (warp M = bm / warps_m)"},
      {"wn", {16, 32, 64}, "warp shape N"},
      {"wk", {32, 64, 128, 256}, "warp shape K"},
      {"stages", {2, 3, 4, 5}, "pipeline stages"},
      {"stream_k", {0, 1}, "stream-K scheduling"},
      {"warp_spec", {0, 1}, "warp specialization (sm_90)"},
      {"tma", {0, 1}, "TMA loads and stores (sm_90)"},
      {"multicast_a", {1, 2}, "TMA multicast of A over a cluster"},
      {"multicast_b", {1, 2}, "TMA multicast of B over a cluster"},
      {"ctas_per_sm", {1, 2}, "CTAs per SM"},
      {"write_splits", {1, 2}, "output written in this many halves"},
      {"sms", {0}, "SMs of the stream-K grid (0: all)"},
  };
}

std::map<std::string, std::vector<int>> HummingSpace::curated_values(const Problem& problem, int sm) {
  const bool wgmma = uses_wgmma(sm);
  const int granule = m_granule(sm);
  const int a_bits = problem.format.activation_bits();
  // bm: the M rounded up to the MMA granule (one block covers the tokens) and the large tiles of Humming's own rules.
  std::set<int> bm = {static_cast<int>(std::min<int64_t>(round_up(problem.m, granule), 256))};
  std::vector<int> large = {64, 128, 192, 256};
  if (wgmma) large.insert(large.end(), {96, 160, 176});
  for (int value : large) {
    if (value <= round_up(problem.m, granule)) bm.insert(value);
  }
  std::vector<int> bk;
  std::vector<int> wn;
  if (a_bits == 16) {
    bk = {64, 128, 256}, wn = {32, 64};
  } else if (a_bits == 8) {
    bk = {128, 256}, wn = {16, 32};
  } else {
    bk = {256, 512}, wn = {16, 32};
  }
  std::vector<int> bn = {128, 256};
  if (problem.n <= 4096) bn.insert(bn.begin(), 64);
  return {
      {"bm", {bm.begin(), bm.end()}},
      {"bn", bn},
      {"bk", bk},
      {"warps_m", {1, 2}},
      {"wn", wn},
      {"wk", allowed_warp_k(a_bits)},
      {"stages", wgmma ? std::vector<int>{3, 4, 5} : std::vector<int>{2, 3, 4}},
      {"stream_k", {1}},
      {"warp_spec", {wgmma ? 1 : 0}},
      {"tma", {wgmma ? 1 : 0}},
      {"multicast_a", wgmma ? std::vector<int>{1, 2} : std::vector<int>{1}},
      {"multicast_b", {1}},
      {"ctas_per_sm", wgmma ? std::vector<int>{1} : std::vector<int>{1, 2}},
      {"write_splits", {1}},
      {"sms", {0}},
  };
}

RuleVerdict HummingSpace::check(const KernelConfig& config, const Problem& problem, const ArchLimits& limits) {
  if (config.family != kHummingFamily) {
    return fail("format-unsupported", "config of family '" + config.family + "' is no Humming config");
  }
  LayerOrVerdict layer = layer_of(problem, limits.sm);
  if (!layer.verdict.valid) return layer.verdict;
  RuleVerdict verdict;
  const Point point = point_of(config, verdict);
  if (!verdict.valid) return verdict;
  return check_point(point, layer.layer, problem.m, limits);
}

SpaceEnumeration HummingSpace::enumerate(const Problem& problem, const ArchLimits& limits, HummingSpaceKind kind) {
  std::vector<std::vector<int>> values;
  if (kind == HummingSpaceKind::Full) {
    for (const ParameterDomain& domain : parameter_space()) values.push_back(domain.values);
  } else {
    const auto curated = curated_values(problem, limits.sm);
    for (std::string_view name : kParameterNames) values.push_back(curated.at(std::string(name)));
  }
  SpaceEnumeration space;
  const LayerOrVerdict layer = layer_of(problem, limits.sm);
  for_each_combination(values, [&](const std::vector<int>& combination) {
    ++space.total;
    if (!layer.verdict.valid) {
      ++space.removed_by_rule[layer.verdict.rule];
      return;
    }
    Point point;
    std::copy(combination.begin(), combination.end(), point.values.begin());
    const RuleVerdict verdict = check_point(point, layer.layer, problem.m, limits);
    if (verdict.valid) {
      space.candidates.push_back(config_of(point));
    } else {
      ++space.removed_by_rule[verdict.rule];
    }
  });
  return space;
}

std::vector<double> HummingSpace::cost_features(const KernelConfig& config, const Problem& problem,
                                                const ArchLimits& limits) {
  RuleVerdict verdict;
  const Point point = point_of(config, verdict);
  if (!verdict.valid) QTUNE_INPUT_ERROR(verdict.detail);
  const double m_tiles = std::ceil(double(problem.m) / std::max(point.bm(), 1));
  const double tiles = m_tiles * std::ceil(double(problem.n) / std::max(point.bn(), 1));
  const double slots = double(std::max(point.sms() > 0 ? point.sms() : limits.sm_count, 1)) * std::max(point.ctas_per_sm(), 1);
  std::vector<double> features =
      tiling_features(problem, tiles, slots, double(problem.m) / (m_tiles * std::max(point.bm(), 1)));
  for (const int value : point.values) features.push_back(std::log2(double(std::max(value, 0)) + 1.0));
  return features;
}

std::vector<std::string> HummingSpace::cost_feature_names() {
  std::vector<std::string> names = {"log2_m", "log2_n", "log2_k", "log2_tiles", "waves", "wave_efficiency",
                                    "m_tile_efficiency", "log2_bytes_per_flop"};
  for (std::string_view name : kParameterNames) names.push_back("log2_" + std::string(name));
  return names;
}

int64_t HummingSpace::shared_memory_bytes(const KernelConfig& config, const HummingLayer& layer) {
  RuleVerdict verdict;
  const Point point = point_of(config, verdict);
  if (!verdict.valid) QTUNE_INPUT_ERROR(verdict.detail);
  return shared_memory_of(point, layer);
}

nlohmann::json HummingSpace::tuning_config(const KernelConfig& config) {
  const int bm = required(config, "bm");
  const int warps_m = required(config, "warps_m");
  if (warps_m <= 0 || bm % warps_m != 0) QTUNE_INPUT_ERROR("config: warps_m must divide bm");
  const bool warp_spec = required(config, "warp_spec") != 0;
  const bool tma = required(config, "tma") != 0;
  nlohmann::json json{
      {"block_shape", {bm, required(config, "bn"), required(config, "bk")}},
      {"warp_shape", {bm / warps_m, required(config, "wn"), required(config, "wk")}},
      {"use_stream_k", required(config, "stream_k") != 0},
      {"num_stages", required(config, "stages")},
      {"num_ctas_per_sm", required(config, "ctas_per_sm")},
      {"use_warp_spec", warp_spec},
      {"use_tma", tma},
      {"use_mbarrier", warp_spec || tma},
      {"num_write_splits", required(config, "write_splits")},
      {"multi_cast_size_a", required(config, "multicast_a")},
      {"multi_cast_size_b", required(config, "multicast_b")},
  };
  if (const int sms = required(config, "sms"); sms > 0) json["num_sms"] = sms;
  return json;
}

KernelConfig HummingSpace::from_tuning_config(const nlohmann::json& tuning_config) {
  const std::string prefix = "tuning_config.";
  if (!tuning_config.is_object()) QTUNE_INPUT_ERROR("tuning_config: expected an object");
  const auto triple = [&](const char* name) {
    if (!tuning_config.contains(name)) QTUNE_INPUT_ERROR(prefix + name + ": missing");
    const nlohmann::json& value = tuning_config.at(name);
    if (!value.is_array() || value.size() != 3 || !value[0].is_number_integer() || !value[1].is_number_integer() ||
        !value[2].is_number_integer()) {
      QTUNE_INPUT_ERROR(prefix + name + ": expected three integers");
    }
    return std::array<int, 3>{value[0].get<int>(), value[1].get<int>(), value[2].get<int>()};
  };
  const auto integer = [&](const char* name, int fallback) {
    if (!tuning_config.contains(name) || tuning_config.at(name).is_null()) return fallback;
    if (!tuning_config.at(name).is_number_integer()) QTUNE_INPUT_ERROR(prefix + name + ": expected an integer");
    return tuning_config.at(name).get<int>();
  };
  const auto flag = [&](const char* name, bool fallback) {
    if (!tuning_config.contains(name) || tuning_config.at(name).is_null()) return fallback;
    if (!tuning_config.at(name).is_boolean()) QTUNE_INPUT_ERROR(prefix + name + ": expected true or false");
    return tuning_config.at(name).get<bool>();
  };
  static const std::set<std::string> known = {
      "block_shape", "warp_shape", "use_stream_k", "num_stages", "num_ctas_per_sm", "use_warp_spec", "use_tma",
      "use_mbarrier", "use_cp_async", "num_write_splits", "multi_cast_size_a", "multi_cast_size_b", "num_sms",
      "use_f16_accum", "use_tma_a", "use_tma_b", "use_tma_c", "use_tma_bs", "use_tma_bzp", "use_tma_bias"};
  for (const auto& [key, value] : tuning_config.items()) {
    if (!known.contains(key)) QTUNE_INPUT_ERROR(prefix + key + ": not a field this space tunes");
  }
  const auto block = triple("block_shape");
  const auto warp = triple("warp_shape");
  if (warp[0] <= 0 || block[0] % warp[0] != 0 || (block[0] / warp[0] != 1 && block[0] / warp[0] != 2)) {
    QTUNE_INPUT_ERROR(prefix + "warp_shape: the block holds 1 or 2 warps along M");
  }
  const bool warp_spec = flag("use_warp_spec", false);
  const bool tma = flag("use_tma", false);
  if (flag("use_mbarrier", warp_spec || tma) != (warp_spec || tma)) {
    QTUNE_INPUT_ERROR(prefix + "use_mbarrier: this space uses mbarriers exactly with TMA or warp specialization");
  }
  if (!flag("use_cp_async", true)) QTUNE_INPUT_ERROR(prefix + "use_cp_async: this space always uses cp.async");
  if (flag("use_f16_accum", false)) QTUNE_INPUT_ERROR(prefix + "use_f16_accum: this space accumulates in f32");
  for (const char* name : {"use_tma_a", "use_tma_b", "use_tma_c", "use_tma_bs", "use_tma_bzp", "use_tma_bias"}) {
    if (flag(name, tma) != tma) QTUNE_INPUT_ERROR(prefix + name + ": this space switches TMA for every operand at once");
  }
  Point point;
  point.values = {block[0],
                  block[1],
                  block[2],
                  block[0] / warp[0],
                  warp[1],
                  warp[2],
                  integer("num_stages", 2),
                  flag("use_stream_k", true) ? 1 : 0,
                  warp_spec ? 1 : 0,
                  tma ? 1 : 0,
                  integer("multi_cast_size_a", 1),
                  integer("multi_cast_size_b", 1),
                  integer("num_ctas_per_sm", 1),
                  integer("num_write_splits", 1),
                  integer("num_sms", 0)};
  return config_of(point);
}

}  // namespace qtune::search
