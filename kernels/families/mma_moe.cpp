#include "kernels/families/mma_moe.hpp"

#include <algorithm>
#include <cstring>

#include "kernels/device/gemm/abi.cuh"
#include "kernels/error.hpp"
#include "kernels/families/mma_family.hpp"
#include "kernels/families/mma_layout.hpp"
#include "kernels/families/tma_family.hpp"
#include "kernels/families/wgmma_family.hpp"

namespace qtune::mma_moe {

namespace dv = qtune::device;
using mma::DeviceFormat;
using mma::TileShape;

namespace {

constexpr const char* kKernelName = "qtune_mma_moe_gemm";
constexpr const char* kWgmmaKernelName = "qtune_wgmma_moe_gemm";
constexpr const char* kTmaKernelName = "qtune_tma_moe_gemm";
constexpr const char* kGatherKernelName = "qtune_moe_gather_rows";
constexpr int kGatherThreads = 128;
constexpr int kMulticastWeights = 2;  // device::kMulticastWeights
constexpr const char* kReduceKernelName = "qtune_moe_reduce_top_k";
constexpr int kTableBytesPerRow = 12;  // MmaGemm::MOE_TABLE_BYTES / BLOCK_M
constexpr int kReduceThreads = 256;
constexpr uint32_t kPersistentMaxCtasPerSm = 8;  // an upper bound: the launch caps it by the kernel's occupancy
constexpr const char* kAlignKernelName = "qtune_moe_align";
constexpr int kAlignDefaultSharedBytes = 48 * 1024;  // more needs an opt-in per kernel

// gemm/moe_align.cuh's moe_align_shared_ints: a count per warp and expert, per expert its pairs and first row, the
// padded end, and one scan total per warp.
int64_t align_shared_bytes(int experts, int threads) {
  const int64_t warps = threads / 32;
  return (warps * experts + 2 * int64_t{experts} + 1 + warps) * 4;
}

int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

const char* layout_code(MoeLayout layout) {
  switch (layout) {
    case MoeLayout::TokenIndexed: return "qd::kMoeTokenIndexed";
    case MoeLayout::GroupedContiguous: return "qd::kMoeContiguous";
    case MoeLayout::GroupedMasked: return "qd::kMoeMasked";
  }
  return "?";
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// The dense problem whose rules a MoE launch obeys: an expert's N x K over the launch rows.
Problem dense_problem(const MoeProblem& problem, int64_t launch_rows) {
  Problem dense;
  dense.format = problem.format;
  dense.m = std::max<int64_t>(launch_rows, 1);
  dense.n = problem.n;
  dense.k = problem.k;
  return dense;
}

// What differs between the families' MoE kernels: tiles, threads, shared memory and the instantiated kernel. Layout
// tables, buffers and arguments are the same (the wgmma and tma families run the mma family's prepacked layout).
enum class MoeKernel { Mma, Wgmma, Tma };

struct MoeTiles {
  bool wgmma = false;
  int bm = 0, bn = 0, split = 1, threads = 0;
  int pipeline_bytes = 0;  // dynamic shared memory of the dense tiles, without the row tables
  int static_bytes = 0;
  int table_bytes_per_row = kTableBytesPerRow;  // 0 for the tma kernel: its warps read the row tables from global memory
  int table_fixed_bytes = 0;
  bool persistent = false;  // the wgmma kernel's persistent schedule (gemm/wgmma_moe.cuh)
  int dynamic_bytes() const { return pipeline_bytes + table_bytes_per_row * bm + table_fixed_bytes; }
};

MoeKernel kernel_of(const KernelConfig& config) {
  if (config.family.empty() || config.family == mma_family().name()) return MoeKernel::Mma;
  if (config.family == wgmma_family().name()) return MoeKernel::Wgmma;
  if (config.family == tma_family().name()) return MoeKernel::Tma;
  QTUNE_INPUT_ERROR("config: family '" + config.family + "' has no MoE kernel (the mma, wgmma and tma families have)");
}

bool is_wgmma(const KernelConfig& config) { return kernel_of(config) == MoeKernel::Wgmma; }
bool is_tma(const KernelConfig& config) { return kernel_of(config) == MoeKernel::Tma; }

const MmaFamily& family_of(const KernelConfig& config) {
  switch (kernel_of(config)) {
    case MoeKernel::Wgmma: return wgmma_family();
    case MoeKernel::Tma: return tma_family();
    case MoeKernel::Mma: break;
  }
  return mma_family();
}

MoeTiles moe_tiles(const KernelConfig& config, const FormatSpec& format) {
  MoeTiles tiles;
  if (is_tma(config)) {
    tiles.bm = config.get("bm");
    tiles.bn = config.get("bn");
    tiles.split = config.get("split");
    tiles.threads = TmaFamily::threads(config);
    tiles.pipeline_bytes = TmaFamily::shared_bytes(config, format);
    tiles.static_bytes = TmaFamily::static_shared_memory(config);
    tiles.table_bytes_per_row = 0;
    return tiles;
  }
  if (is_wgmma(config)) {
    tiles.wgmma = true;
    tiles.bm = config.get("bm");
    tiles.bn = config.get("bn");
    tiles.split = config.get("split");
    tiles.threads = WgmmaFamily::threads(config);
    tiles.pipeline_bytes = WgmmaFamily::shared_bytes(config, format);
    tiles.static_bytes = WgmmaFamily::kStaticSharedBytes;
    if (WgmmaFamily::persistent(config) == 1) {
      // Two row-table slots (device::PersistentMoeSlots): per row a pair id, a source row and a router weight; per
      // slot an expert and its global scale, padded to 16 bytes.
      tiles.persistent = true;
      tiles.table_bytes_per_row = 2 * kTableBytesPerRow;
      tiles.table_fixed_bytes = 2 * 16;
    }
    return tiles;
  }
  const TileShape t = TileShape::from(config);
  const mma::SharedLayout shared = mma::shared_layout(mma::device_format(format), t);
  tiles.bm = t.bm;
  tiles.bn = t.bn;
  tiles.split = t.split;
  tiles.threads = t.threads();
  tiles.pipeline_bytes = shared.dynamic_bytes;
  tiles.static_bytes = shared.static_bytes;
  return tiles;
}

}  // namespace

std::string kernel_name(const KernelConfig& config) {
  switch (kernel_of(config)) {
    case MoeKernel::Wgmma: return kWgmmaKernelName;
    case MoeKernel::Tma: return kTmaKernelName;
    case MoeKernel::Mma: break;
  }
  return kKernelName;
}
std::string reduce_kernel_name() { return kReduceKernelName; }

int64_t launch_rows(const MoeProblem& problem, int bm, const MoeRowMap& map) {
  if (problem.layout == MoeLayout::TokenIndexed) {
    const int64_t pairs = problem.tokens * problem.top_k;
    return round_up(pairs + std::min<int64_t>(problem.experts, pairs) * (bm - 1), bm);
  }
  return map.rows();
}

RuleVerdict check(const KernelConfig& config, const MoeProblem& problem, const ArchLimits& limits) {
  try {
    problem.validate();
  } catch (const InputError& error) {
    return RuleVerdict::fail("moe-problem", error.what());
  }
  const int bm = config.params.count("bm") ? config.params.at("bm") : 16;
  const int64_t pairs = problem.tokens * problem.top_k;
  const RuleVerdict dense = family_of(config).check(config, dense_problem(problem, pairs + problem.experts * int64_t{bm}), limits);
  // A block's tile is as tall as bm whatever the rows per expert: bm-over-m does not apply to a MoE block. The wgmma
  // family's persistent schedule exists for MoE units only.
  if (!dense.valid && dense.rule != "bm-over-m" && dense.rule != "raster-single-m-tile" &&
      dense.rule != WgmmaFamily::kPersistentMoeOnlyRule) {
    return dense;
  }
  if (is_tma(config)) {
    if (config.get("multicast") == kMulticastWeights) {
      return RuleVerdict::fail("moe-multicast-weights", "multicast=2 pairs two row blocks along M, which may belong to two experts "
                                                        "with different weights: MoE tiles multicast activations (1) or nothing (0)");
    }
    const int64_t row_bytes = problem.k * mma::device_format(problem.format).act_bits() / 8;
    if (row_bytes % 16 != 0) {
      return RuleVerdict::fail("moe-row-bytes", "an activation row of K=" + std::to_string(problem.k) + " is " +
                                                    std::to_string(row_bytes) + " bytes, not whole 16-byte vectors (TMA rows)");
    }
  }
  const MoeTiles tiles = moe_tiles(config, problem.format);
  if (tiles.persistent) {
    if (problem.layout != MoeLayout::TokenIndexed) {
      return RuleVerdict::fail("persistent-token-indexed", "persistent=1 walks the blocks of the token-indexed layout (every block "
                                                           "below the padded row count has a live row); grouped layouts run one CTA per block");
    }
    if (tiles.split != 1) return RuleVerdict::fail("persistent-split", "persistent=1 walks whole units: split must be 1");
    if (config.params.count("overlap") != 0 && config.get("overlap") != 0) {
      return RuleVerdict::fail("persistent-overlap", "persistent=1 runs one wgmma group at a time across units: overlap must be 0");
    }
    // A unit's table fills through the pipeline one unit ahead (gemm/wgmma_moe.cuh): 2 (stages - 1) + 1 K tiles.
    const int64_t k_tiles = problem.k / config.get("bk");
    const int64_t needed = 2 * (config.get("stages") - 1) + 1;
    if (k_tiles < needed) {
      return RuleVerdict::fail("persistent-k-tiles", "persistent=1 with stages=" + std::to_string(config.get("stages")) + " needs " +
                                                         std::to_string(needed) + " K tiles per unit, K=" + std::to_string(problem.k) +
                                                         " has " + std::to_string(k_tiles) + " of bk=" + std::to_string(config.get("bk")));
    }
  }
  if (!is_tma(config) && tiles.threads < tiles.bm) {
    return RuleVerdict::fail("moe-threads-rows", std::to_string(tiles.threads) + " threads cannot fill the row table of bm=" +
                                                     std::to_string(tiles.bm) + " rows (one thread per row)");
  }
  const int bytes = tiles.dynamic_bytes() + tiles.static_bytes;
  if (bytes > limits.max_shared_per_block) {
    return RuleVerdict::fail("smem-per-block", std::to_string(bytes) + " bytes of shared memory (row tables included) exceed the " +
                                                   std::to_string(limits.max_shared_per_block) + " a block may use");
  }
  return RuleVerdict::ok();
}

namespace {
std::string tma_instantiation_source(const KernelConfig& config, const MoeProblem& problem, const std::string& arch);
}  // namespace

std::string instantiation_source(const KernelConfig& config, const MoeProblem& problem, const std::string& arch) {
  const int sm = sm_of_arch(arch);
  const MmaFamily& family = family_of(config);
  const ArchSupport support = family.supports(problem.format, sm);
  if (!support.supported) QTUNE_THROW(UnsupportedError, support.reason);
  const bool wgmma = is_wgmma(config);
  if (wgmma && arch != "sm_90a") {
    QTUNE_THROW(UnsupportedError, "the wgmma MoE GEMM compiles for sm_90a only (wgmma is architecture-specific), not " + arch);
  }
  if (is_tma(config)) return tma_instantiation_source(config, problem, arch);
  const DeviceFormat device = mma::device_format(problem.format);
  const MoeTiles tiles = moe_tiles(config, problem.format);
  const char* projection = problem.projection == MoeProjection::GateUp ? "qd::kMoeGateUp" : "qd::kMoeDown";
  const std::string layout = layout_code(problem.layout);
  std::string source = mma::instantiation_preamble(
      family.name() + " MoE GEMM: " + problem.format.to_string() + " " + std::string(moe_layout_name(problem.layout)) + " " +
          std::string(moe_projection_name(problem.projection)) + " " + config.to_string() + " for " + arch,
      wgmma ? "wgmma_moe.cuh" : "mma_moe.cuh", device, "Tiles",
      wgmma ? WgmmaFamily::tiles_template_arguments(config) : TileShape::from(config).template_arguments());
  const std::string gemm = wgmma ? "qd::WgmmaGemm<QtuneFormat, QtuneTiles, " + WgmmaFamily::gemm_options(config) + ">"
                                 : "qd::MmaGemm<QtuneFormat, QtuneTiles" + TileShape::from(config).scale_after_argument() + ">";
  const std::string tables = tiles.persistent ? "qd::PersistentMoeSlots<QtuneTiles::BLOCK_M>::BYTES" : gemm + "::MOE_TABLE_BYTES";
  source += "static_assert(" + gemm + "::SHARED_BYTES + " + tables + " == " + std::to_string(tiles.dynamic_bytes()) +
            ", \"host and device disagree on the shared memory size\");\n";
  source += "extern \"C\" __global__ void __launch_bounds__(QtuneTiles::THREADS, 1) " + kernel_name(config) +
            "(const qd::GemmParams params, const qd::MoeParams moe) {\n";
  if (tiles.persistent) {
    source += "  qd::wgmma_moe_persistent_gemm<QtuneFormat, QtuneTiles, " + WgmmaFamily::gemm_options(config) + ", " + projection +
              ">(params, moe);\n";
  } else if (wgmma) {
    source += "  qd::wgmma_moe_gemm<QtuneFormat, QtuneTiles, " + WgmmaFamily::gemm_options(config) + ", " + layout +
              ", " + projection + ">(params, moe);\n";
  } else {
    source += "  qd::mma_moe_gemm<QtuneFormat, QtuneTiles, " + layout + ", " + projection + TileShape::from(config).scale_after_argument() +
              ">(params, moe);\n";
  }
  source += "}\n";
  return source;
}

namespace {

// The tma family's MoE GEMM (qtune_tma_moe_gemm): its tiles with MoeRows, the cluster dims compiled in.
std::string tma_instantiation_source(const KernelConfig& config, const MoeProblem& problem, const std::string& arch) {
  if (arch != "sm_90a") {
    QTUNE_THROW(UnsupportedError, "the tma MoE GEMM compiles for sm_90a only (wgmma and setmaxnreg are architecture-specific), not " + arch);
  }
  const DeviceFormat device = mma::device_format(problem.format);
  const MoeTiles tiles = moe_tiles(config, problem.format);
  const char* projection = problem.projection == MoeProjection::GateUp ? "qd::kMoeGateUp" : "qd::kMoeDown";
  std::string source = mma::instantiation_preamble(
      "tma MoE GEMM: " + problem.format.to_string() + " " + std::string(moe_layout_name(problem.layout)) + " " +
          std::string(moe_projection_name(problem.projection)) + " " + config.to_string() + " for " + arch,
      "tma_moe.cuh", device, "TmaTiles", TmaFamily::tiles_template_arguments(config));
  source += "static_assert(qd::TmaGemm<QtuneFormat, QtuneTiles>::SHARED_BYTES == " + std::to_string(tiles.dynamic_bytes()) +
            ", \"host and device disagree on the shared memory size\");\n";
  source += "static_assert(QtuneTiles::THREADS == " + std::to_string(tiles.threads) + ", \"host and device disagree on the block size\");\n";
  const int cluster = config.get("cluster");
  const std::string cluster_dims = cluster > 1 ? "__cluster_dims__(" + std::to_string(cluster) + ", 1, 1) " : "";
  source += "extern \"C\" __global__ void __launch_bounds__(QtuneTiles::THREADS, 1) " + cluster_dims + kTmaKernelName +
            "(const qd::GemmParams params, const qd::MoeParams moe, const __grid_constant__ qd::TensorMap activation_map) {\n";
  source += "  qd::tma_moe_gemm<QtuneFormat, QtuneTiles, " + std::string(layout_code(problem.layout)) + ", " + projection +
            ">(params, activation_map, moe);\n";
  source += "}\n";
  return source;
}

}  // namespace

std::string reduce_instantiation_source(const FormatSpec& format, const std::string& arch) {
  sm_of_arch(arch);  // a bad target is an InputError here, as for the GEMM
  const char* output = format.output == OutputType::F16 ? "qd::kElementF16" : "qd::kElementBF16";
  std::string source;
  source += "// qtune MoE top-k reduction: " + to_string(format.output) + " for " + arch + "\n";
  source += "#include \"gemm/mma_moe.cuh\"\n";
  source += "namespace qd = qtune::device;\n";
  source += "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kReduceThreads) + ") " + kReduceKernelName +
            "(const unsigned short* rows, unsigned short* out, int tokens, int top_k, int n) {\n";
  source += "  qd::moe_reduce_top_k<" + std::string(output) + ">(rows, out, tokens, top_k, n);\n";
  source += "}\n";
  return source;
}

LaunchGeometry launch_geometry(const KernelConfig& config, const MoeProblem& problem, int64_t launch_rows) {
  const MoeTiles t = moe_tiles(config, problem.format);
  if (launch_rows % t.bm != 0) {
    QTUNE_INPUT_ERROR("launch rows: " + std::to_string(launch_rows) + " is not a multiple of bm=" + std::to_string(t.bm) +
                      " (build the layout with blocks of bm rows, or a multiple of it)");
  }
  if (is_tma(config)) {
    // The dense tma launch over the layout's rows: persistence, clusters and split-K as there.
    LaunchGeometry geometry = tma_family().launch_geometry(config, dense_problem(problem, launch_rows));
    geometry.dynamic_shared_bytes = static_cast<uint32_t>(t.dynamic_bytes());
    return geometry;
  }
  const int64_t tiles = (problem.n / t.bn) * (launch_rows / t.bm);
  LaunchGeometry geometry;
  geometry.grid = {static_cast<uint32_t>(tiles * t.split), 1, 1};
  geometry.block = {static_cast<uint32_t>(t.threads), 1, 1};
  geometry.dynamic_shared_bytes = static_cast<uint32_t>(t.dynamic_bytes());
  // Persistent: as many CTAs per SM as the kernel's registers and shared memory allow (the launch asks the driver).
  if (t.persistent) geometry.persistent_ctas_per_sm = kPersistentMaxCtasPerSm;
  if (t.split > 1) {
    geometry.workspace_bytes = static_cast<uint64_t>(t.split) * tiles * t.bm * t.bn * 4 + static_cast<uint64_t>(tiles) * 4;
    geometry.workspace_starts_zeroed = true;
  }
  return geometry;
}

LaunchGeometry reduce_launch_geometry(const MoeProblem& problem) {
  const int64_t threads = problem.tokens * (problem.n / 2);
  LaunchGeometry geometry;
  geometry.grid = {static_cast<uint32_t>((threads + kReduceThreads - 1) / kReduceThreads), 1, 1};
  geometry.block = {kReduceThreads, 1, 1};
  return geometry;
}

std::vector<BufferSpec> buffers(const KernelConfig& config, const MoeProblem& problem, int64_t launch_rows) {
  const DeviceFormat device = mma::device_format(problem.format);
  const bool token_indexed = problem.layout == MoeLayout::TokenIndexed;
  const int64_t a_rows = token_indexed ? problem.input_rows() : launch_rows;
  const int64_t c_rows = token_indexed ? problem.tokens * problem.top_k : launch_rows;
  const uint64_t experts = static_cast<uint64_t>(problem.experts);
  const ExpertStrides strides = expert_strides(problem.format, problem.n, problem.k);
  std::vector<BufferSpec> list;
  list.push_back({"a", mma::packed_activation_bytes(device, a_rows, problem.k), BufferRole::Activations,
                  token_indexed ? "activations [input rows][k]" : "activations gathered into the layout's rows [rows][k]"});
  if (const uint64_t bytes = mma::packed_activation_scale_bytes(device, a_rows, problem.k); bytes > 0) {
    list.push_back({"a_scales", bytes, BufferRole::Activations, "f32 activation scales of those rows"});
  }
  list.push_back({"weights", experts * strides.weights, BufferRole::Weights, "every expert's prepacked weights, back to back"});
  list.push_back({"scales", experts * strides.scales, BufferRole::Weights, "every expert's prepacked scales"});
  if (device.has_zero()) list.push_back({"zeros", experts * strides.zeros, BufferRole::Weights, "every expert's zero points"});
  list.push_back({"global_scale", experts * 4, BufferRole::Weights, "one f32 per expert"});
  list.push_back({"rows", static_cast<uint64_t>(launch_rows) * 4, BufferRole::Activations,
                  token_indexed ? "int32 sorted pair ids, padding = pairs" : "int32 expert of each row, -1 on padding"});
  if (token_indexed) {
    const MoeTiles t = moe_tiles(config, problem.format);
    list.push_back({"block_experts", static_cast<uint64_t>(launch_rows / t.bm) * 4, BufferRole::Activations, "int32 expert per block"});
    list.push_back({"padded_rows", 4, BufferRole::Activations, "int32 num_tokens_post_padded"});
    if (problem.projection == MoeProjection::Down) {
      list.push_back({"router_weights", static_cast<uint64_t>(c_rows) * 4, BufferRole::Activations, "f32 router weight per pair"});
    }
  }
  if (problem.layout == MoeLayout::GroupedMasked) list.push_back({"counts", experts * 4, BufferRole::Activations, "int32 rows per expert"});
  if (gathers(config, problem)) {
    list.push_back({"gathered", mma::packed_activation_bytes(device, launch_rows, problem.k), BufferRole::Workspace,
                    "the pairs' activation rows in layout order [launch rows][k] (moe_gather_rows)"});
    if (const uint64_t bytes = mma::packed_activation_scale_bytes(device, launch_rows, problem.k); bytes > 0) {
      list.push_back({"gathered_scales", bytes, BufferRole::Workspace, "their f32 activation scales"});
    }
  }
  list.push_back({"c", static_cast<uint64_t>(c_rows * problem.n) * 2, BufferRole::Output,
                  token_indexed ? "output [pairs][n]" : "output [rows][n] in layout order"});
  if (token_indexed && problem.projection == MoeProjection::Down) {
    list.push_back({"reduced", static_cast<uint64_t>(problem.tokens * problem.n) * 2, BufferRole::Output, "output [tokens][n]"});
  }
  const LaunchGeometry geometry = launch_geometry(config, problem, launch_rows);
  if (geometry.workspace_bytes > 0) {
    list.push_back({"workspace", geometry.workspace_bytes, BufferRole::Workspace, "split-K partial tiles and counters; zeroed"});
  }
  return list;
}

KernelArguments pack_arguments(const KernelConfig& config, const MoeProblem& problem, int64_t launch_rows,
                               const std::map<std::string, uint64_t>& device_addresses) {
  auto address = [&](const std::string& buffer_name, bool required) -> unsigned long long {
    return mma::buffer_address(device_addresses, buffer_name, required);
  };
  const DeviceFormat device = mma::device_format(problem.format);
  const LaunchGeometry geometry = launch_geometry(config, problem, launch_rows);
  const bool token_indexed = problem.layout == MoeLayout::TokenIndexed;
  dv::GemmParams params{};
  const bool gathered = gathers(config, problem);
  params.a = address(gathered ? "gathered" : "a", true);
  params.a_scales = address(gathered ? "gathered_scales" : "a_scales", device.activation_scales != dv::kActivationScaleNone);
  params.weights = address("weights", true);
  params.scales = address("scales", true);
  params.zeros = address("zeros", device.has_zero());
  params.global_scale = address("global_scale", true);
  params.c = address("c", true);
  params.workspace = address("workspace", geometry.workspace_bytes > 0);
  params.m = static_cast<int>(launch_rows);
  params.n = static_cast<int>(problem.n);
  params.k = static_cast<int>(problem.k);
  const ExpertStrides strides = expert_strides(problem.format, problem.n, problem.k);
  dv::MoeParams moe{};
  moe.rows = address("rows", problem.layout != MoeLayout::GroupedMasked);
  moe.block_experts = address("block_experts", token_indexed);
  moe.counts = address("counts", problem.layout == MoeLayout::GroupedMasked);
  moe.padded_rows = address("padded_rows", false);
  moe.router_weights = address("router_weights", token_indexed && problem.projection == MoeProjection::Down);
  moe.expert_weight_bytes = static_cast<long long>(strides.weights);
  moe.expert_scale_bytes = static_cast<long long>(strides.scales);
  moe.expert_zero_bytes = static_cast<long long>(strides.zeros);
  moe.input_rows = static_cast<int>(token_indexed ? problem.input_rows() : launch_rows);
  moe.top_k = problem.top_k;
  moe.pairs = static_cast<int>(problem.tokens * problem.top_k);
  moe.max_rows = problem.layout == MoeLayout::GroupedMasked ? static_cast<int>(launch_rows / problem.experts) : 0;
  KernelArguments arguments;
  arguments.storage.resize(sizeof(params) + sizeof(moe));
  std::memcpy(arguments.storage.data(), &params, sizeof(params));
  std::memcpy(arguments.storage.data() + sizeof(params), &moe, sizeof(moe));
  arguments.offsets = {0, sizeof(params)};
  if (is_tma(config)) {
    // The activation tensor map over the rows in layout order (device::TmaFamily's map, launch rows tall).
    TensorMapRequest map;
    map.offset = (arguments.storage.size() + 63) / 64 * 64;
    map.address = params.a;
    map.element_bytes = static_cast<uint32_t>(device.act_bits() / 8);
    map.rows = static_cast<uint64_t>(launch_rows);
    map.columns = static_cast<uint64_t>(problem.k);
    map.box_rows = static_cast<uint32_t>(config.get("bm"));
    map.box_columns = 128 / map.element_bytes;
    arguments.storage.resize(map.offset + 128, 0);
    arguments.offsets.push_back(map.offset);
    arguments.tensor_maps.push_back(map);
  }
  return arguments;
}

bool gathers(const KernelConfig& config, const MoeProblem& problem) {
  return is_tma(config) && problem.layout == MoeLayout::TokenIndexed;
}

std::string gather_kernel_name() { return kGatherKernelName; }

std::string gather_instantiation_source(const MoeProblem& problem, const std::string& arch) {
  sm_of_arch(arch);  // a bad target is an InputError here, as for the GEMM
  const char* projection = problem.projection == MoeProjection::GateUp ? "qd::kMoeGateUp" : "qd::kMoeDown";
  std::string source;
  source += "// qtune MoE gather of the token-indexed rows into layout order: " + std::string(moe_projection_name(problem.projection)) +
            " for " + arch + "\n";
  source += "#include \"gemm/tma_moe.cuh\"\n";
  source += "namespace qd = qtune::device;\n";
  source += "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kGatherThreads) + ") " + kGatherKernelName +
            "(const qd::MoeGatherParams gather, const qd::MoeParams moe) {\n";
  source += "  qd::moe_gather_rows<" + std::string(projection) + ", " + std::to_string(kGatherThreads) + ">(gather, moe);\n";
  source += "}\n";
  return source;
}

LaunchGeometry gather_launch_geometry(int64_t launch_rows) {
  LaunchGeometry geometry;
  geometry.grid = {static_cast<uint32_t>(launch_rows), 1, 1};
  geometry.block = {kGatherThreads, 1, 1};
  return geometry;
}

KernelArguments pack_gather_arguments(const KernelConfig& config, const MoeProblem& problem, int64_t launch_rows,
                                      const std::map<std::string, uint64_t>& device_addresses) {
  if (!gathers(config, problem)) QTUNE_INPUT_ERROR("layout: only the tma family's token-indexed MoE GEMM gathers its rows");
  const DeviceFormat device = mma::device_format(problem.format);
  const bool scaled = device.activation_scales != dv::kActivationScaleNone;
  dv::MoeGatherParams gather{};
  gather.a = mma::buffer_address(device_addresses, "a", true);
  gather.a_scales = mma::buffer_address(device_addresses, "a_scales", scaled);
  gather.gathered = mma::buffer_address(device_addresses, "gathered", true);
  gather.gathered_scales = mma::buffer_address(device_addresses, "gathered_scales", scaled);
  gather.row_bytes = problem.k * device.act_bits() / 8;
  gather.rows = static_cast<int>(launch_rows);
  // Scale rows: per group [k / G][rows], per token one [rows] (mma::packed_activation_scale_bytes).
  gather.scale_groups = scaled ? static_cast<int>(mma::packed_activation_scale_bytes(device, 1, problem.k) / 4) : 0;
  // The MoE GEMM's own MoeParams (rows, padded_rows, pairs, top_k, input_rows), from its packed arguments.
  const KernelArguments gemm = pack_arguments(config, problem, launch_rows, device_addresses);
  KernelArguments arguments;
  arguments.storage.resize(sizeof(gather) + sizeof(dv::MoeParams));
  std::memcpy(arguments.storage.data(), &gather, sizeof(gather));
  std::memcpy(arguments.storage.data() + sizeof(gather), gemm.storage.data() + gemm.offsets[1], sizeof(dv::MoeParams));
  arguments.offsets = {0, sizeof(gather)};
  return arguments;
}

KernelArguments pack_reduce_arguments(const MoeProblem& problem, const std::map<std::string, uint64_t>& device_addresses) {
  const uint64_t rows = mma::buffer_address(device_addresses, "c", true);
  const uint64_t out = mma::buffer_address(device_addresses, "reduced", true);
  const int tokens = static_cast<int>(problem.tokens), top_k = problem.top_k, n = static_cast<int>(problem.n);
  KernelArguments arguments;
  arguments.offsets = {0, 8, 16, 20, 24};
  arguments.storage.resize(28);
  std::memcpy(arguments.storage.data(), &rows, 8);
  std::memcpy(arguments.storage.data() + 8, &out, 8);
  std::memcpy(arguments.storage.data() + 16, &tokens, 4);
  std::memcpy(arguments.storage.data() + 20, &top_k, 4);
  std::memcpy(arguments.storage.data() + 24, &n, 4);
  return arguments;
}

std::vector<int> swap_ab_token_tiles(int64_t rows_per_expert) {
  return rows_per_expert <= 8    ? std::vector<int>{16}
         : rows_per_expert <= 16 ? std::vector<int>{16, 32}
         : rows_per_expert <= 32 ? std::vector<int>{16, 32, 64}
         : rows_per_expert <= 64 ? std::vector<int>{32, 64, 128}
                                 : std::vector<int>{64, 128};
}

std::vector<int> swap_ab_splits(int64_t rows_per_expert) {
  return rows_per_expert <= 64 ? std::vector<int>{1, 2, 4} : std::vector<int>{1, 2};
}

ExpertStrides expert_strides(const FormatSpec& format, int64_t n, int64_t k) {
  const DeviceFormat device = mma::device_format(format);
  ExpertStrides strides;
  strides.weights = mma::packed_weight_bytes(device, n, k);
  strides.scales = mma::packed_vector_bytes(device, n, k);
  strides.zeros = device.has_zero() ? mma::packed_zero_bytes(device, n, k) : 0;
  return strides;
}

namespace {

std::map<std::string, uint64_t> expert_buffer_strides(const FormatSpec& format, int64_t n, int64_t k) {
  const ExpertStrides strides = expert_strides(format, n, k);
  std::map<std::string, uint64_t> stride_of = {{"weights", strides.weights}, {"scales", strides.scales}, {"global_scale", 4}};
  if (mma::device_format(format).has_zero()) stride_of["zeros"] = strides.zeros;
  return stride_of;
}

}  // namespace

PackedBuffers prepack_expert(const QuantizedWeights& weights, const FormatSpec& format, int64_t n, int64_t k, size_t index) {
  if (weights.n != n || weights.k != k || weights.format != format) {
    QTUNE_INPUT_ERROR("experts[" + std::to_string(index) + "]: weights " + std::to_string(weights.n) + " x " +
                      std::to_string(weights.k) + " in " + weights.format.to_string() + ", expected " + std::to_string(n) +
                      " x " + std::to_string(k) + " in " + format.to_string());
  }
  PackedBuffers one = mma::prepack_weights(weights, mma::device_format(format));
  for (const auto& [name, stride] : expert_buffer_strides(format, n, k)) {
    const auto found = one.find(name);
    if (found == one.end() || found->second.size() != stride) {
      QTUNE_THROW(Error, "prepack_expert: expert buffer '" + name + "' is not " + std::to_string(stride) + " bytes");
    }
  }
  return one;
}

PackedBuffers place_experts(const std::vector<const PackedBuffers*>& experts, const FormatSpec& format, int64_t n, int64_t k) {
  const std::map<std::string, uint64_t> stride_of = expert_buffer_strides(format, n, k);
  PackedBuffers packed;
  for (const auto& [name, stride] : stride_of) packed[name].assign(stride * experts.size(), 0xFF);
  for (size_t e = 0; e < experts.size(); ++e) {
    if (experts[e] == nullptr) continue;  // no pair routes to it: left as 0xFF
    for (auto& [name, bytes] : packed) {
      const auto found = experts[e]->find(name);
      const uint64_t stride = stride_of.at(name);
      if (found == experts[e]->end() || found->second.size() != stride) {
        QTUNE_THROW(Error, "place_experts: expert " + std::to_string(e) + "'s buffer '" + name + "' is not " +
                               std::to_string(stride) + " bytes");
      }
      std::copy(found->second.begin(), found->second.end(), bytes.begin() + static_cast<int64_t>(e * stride));
    }
  }
  return packed;
}

PackedBuffers prepack_experts(const std::vector<QuantizedWeights>& experts, const FormatSpec& format, int64_t n, int64_t k) {
  std::vector<PackedBuffers> each(experts.size());
  std::vector<const PackedBuffers*> placed(experts.size(), nullptr);
  for (size_t e = 0; e < experts.size(); ++e) {
    if (experts[e].n == 0) continue;
    each[e] = prepack_expert(experts[e], format, n, k, e);
    placed[e] = &each[e];
  }
  return place_experts(placed, format, n, k);
}

PackedBuffers pack_layout(MoeLayout layout, const Routing& routing, int bm) {
  PackedBuffers packed;
  switch (layout) {
    case MoeLayout::TokenIndexed: {
      const TokenIndexedLayout built = token_indexed_layout(routing, bm);
      packed["rows"] = bytes_of(built.sorted_token_ids);
      packed["block_experts"] = bytes_of(built.expert_ids);
      packed["padded_rows"] = bytes_of(std::vector<int32_t>{built.num_tokens_post_padded});
      break;
    }
    case MoeLayout::GroupedContiguous:
      packed["rows"] = bytes_of(grouped_contiguous_layout(routing, bm).row_expert);
      break;
    case MoeLayout::GroupedMasked:
      packed["counts"] = bytes_of(grouped_masked_layout(routing, bm).counts);
      break;
  }
  return packed;
}

std::string align_kernel_name() { return kAlignKernelName; }

int align_threads(int experts, const ArchLimits& limits) {
  if (experts < 1) QTUNE_INPUT_ERROR("experts: expected at least 1, got " + std::to_string(experts));
  for (int threads = 1024; threads > 32; threads /= 2) {
    if (align_shared_bytes(experts, threads) <= kAlignDefaultSharedBytes) return threads;
  }
  if (align_shared_bytes(experts, 32) > limits.max_shared_per_block) {
    QTUNE_INPUT_ERROR("experts: " + std::to_string(experts) + " experts need " + std::to_string(align_shared_bytes(experts, 32)) +
                      " bytes of shared memory to align the routing on the device, more than the " +
                      std::to_string(limits.max_shared_per_block) + " a block may use");
  }
  return 32;
}

std::string align_instantiation_source(int bm, int threads, const std::string& arch) {
  sm_of_arch(arch);  // a bad target is an InputError here, as for the GEMM
  if (bm < 1 || bm > 4096) QTUNE_INPUT_ERROR("bm: expected 1 to 4096 rows per block, got " + std::to_string(bm));
  if (threads < 32 || threads > 1024 || threads % 32 != 0) {
    QTUNE_INPUT_ERROR("threads: expected a multiple of 32 from 32 to 1024, got " + std::to_string(threads));
  }
  const std::string warps = std::to_string(threads / 32);
  std::string source;
  source += "// qtune MoE routing alignment (token-indexed tables): bm=" + std::to_string(bm) + " threads=" + std::to_string(threads) +
            " for " + arch + "\n";
  source += "#include \"gemm/moe_align.cuh\"\n";
  source += "namespace qd = qtune::device;\n";
  // The host sizes the shared memory with align_shared_bytes: the same linear function of the experts.
  for (int experts : {1, 256}) {
    source += "static_assert(qd::moe_align_shared_ints(" + std::to_string(experts) + ", " + warps + ") * 4 == " +
              std::to_string(align_shared_bytes(experts, threads)) + ", \"host and device disagree on the shared memory size\");\n";
  }
  source += "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(threads) + ") " + kAlignKernelName +
            "(const int* topk_ids, int pairs, int experts, int launch_rows, int* rows, int* block_experts, int* padded_rows) {\n";
  source += "  extern __shared__ int qtune_align_shared[];\n";
  source += "  qd::moe_align_block_size<" + std::to_string(bm) + ", " + std::to_string(threads) +
            ">(topk_ids, pairs, experts, launch_rows, rows, block_experts, padded_rows, qtune_align_shared);\n";
  source += "}\n";
  return source;
}

LaunchGeometry align_launch_geometry(int experts, int threads) {
  LaunchGeometry geometry;
  geometry.grid = {1, 1, 1};
  geometry.block = {static_cast<uint32_t>(threads), 1, 1};
  geometry.dynamic_shared_bytes = static_cast<uint32_t>(align_shared_bytes(experts, threads));
  return geometry;
}

KernelArguments pack_align_arguments(const MoeProblem& problem, int64_t launch_rows,
                                     const std::map<std::string, uint64_t>& device_addresses) {
  if (problem.layout != MoeLayout::TokenIndexed) QTUNE_INPUT_ERROR("layout: the device alignment builds token-indexed tables only");
  const uint64_t ids = mma::buffer_address(device_addresses, "topk_ids", true);
  const uint64_t rows = mma::buffer_address(device_addresses, "rows", true);
  const uint64_t block_experts = mma::buffer_address(device_addresses, "block_experts", true);
  const uint64_t padded_rows = mma::buffer_address(device_addresses, "padded_rows", true);
  const int pairs = static_cast<int>(problem.tokens * problem.top_k), experts = problem.experts;
  const int rows_count = static_cast<int>(launch_rows);
  KernelArguments arguments;
  arguments.offsets = {0, 8, 12, 16, 24, 32, 40};
  arguments.storage.resize(48);
  std::memcpy(arguments.storage.data(), &ids, 8);
  std::memcpy(arguments.storage.data() + 8, &pairs, 4);
  std::memcpy(arguments.storage.data() + 12, &experts, 4);
  std::memcpy(arguments.storage.data() + 16, &rows_count, 4);
  std::memcpy(arguments.storage.data() + 24, &rows, 8);
  std::memcpy(arguments.storage.data() + 32, &block_experts, 8);
  std::memcpy(arguments.storage.data() + 40, &padded_rows, 8);
  return arguments;
}

}  // namespace qtune::mma_moe
