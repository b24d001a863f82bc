#include "kernels/families/tma_family.hpp"

#include <algorithm>
#include <cstring>

#include "kernels/device/gemm/abi.cuh"
#include "kernels/error.hpp"
#include "kernels/families/mma_layout.hpp"

namespace qtune {

namespace dv = qtune::device;
using mma::DeviceFormat;

namespace {

constexpr const char* kKernelName = "qtune_tma_gemm";

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Static shared memory of the kernel: full and empty barriers (8 bytes per slot each) and the split-K flag, after the
// 1024 bytes ptxas reserves for the 1024-byte alignment of the dynamic window.
int static_shared_bytes(int stages) { return 1024 + 16 * stages + 16; }

// device::MulticastMode
constexpr int kMulticastNone = 0;
constexpr int kMulticastActivations = 1;
constexpr int kMulticastWeights = 2;

// Configs recorded before "overlap" existed ran without a wgmma group in flight.
constexpr int kOverlapWhenAbsent = 0;
// Configs recorded before "promote" existed promoted fp8 partial sums every 128 K (the fp8 weight atom).
constexpr int kPromoteWhenAbsent = 128;
// Configs recorded before "pingpong" existed let the consumer warpgroups issue independently.
constexpr int kPingpongWhenAbsent = 0;
// Configs recorded before "kgroups" existed had one consumer warpgroup per 64 columns.
constexpr int kKgroupsWhenAbsent = 1;
// Configs recorded before "ss" existed fed wgmma the weights from registers.
constexpr int kSsWhenAbsent = 0;
// What the hand rules choose for fp8 without K-group scales: never promote (H200, 2026-12-02: W8A8 fp8 M = 1024
// 103.6 us with 256-token tiles and a group in flight against 124.2 promoting every 128 K; the CPU-reference check
// at K = 8192 and 13824 passes).
constexpr int kDefaultPromote = 0;

struct TmaTiles {
  int bm, bn, bk, stages, split, raster, cluster, multicast, persistent, overlap, promote, pingpong, kgroups, ss;

  static TmaTiles from(const KernelConfig& config) {
    const auto overlap = config.params.find("overlap");
    const auto promote = config.params.find("promote");
    const auto pingpong = config.params.find("pingpong");
    const auto kgroups = config.params.find("kgroups");
    const auto ss = config.params.find("ss");
    return {config.get("bm"),
            config.get("bn"),
            config.get("bk"),
            config.get("stages"),
            config.get("split"),
            config.get("raster"),
            config.get("cluster"),
            config.get("multicast"),
            config.get("persistent"),
            overlap == config.params.end() ? kOverlapWhenAbsent : overlap->second,
            promote == config.params.end() ? kPromoteWhenAbsent : promote->second,
            pingpong == config.params.end() ? kPingpongWhenAbsent : pingpong->second,
            kgroups == config.params.end() ? kKgroupsWhenAbsent : kgroups->second,
            ss == config.params.end() ? kSsWhenAbsent : ss->second};
  }
  int consumers() const { return bn / 64 * kgroups; }
  int threads() const { return 128 * (consumers() + 1); }
  int cluster_m() const { return multicast == kMulticastWeights ? cluster : 1; }
  int cluster_n() const { return multicast == kMulticastWeights ? 1 : cluster; }
  // Tiles including the padding of a cluster along M (its second tile may lie past M).
  int64_t tiles(const Problem& problem) const {
    return (problem.n / (bn * cluster_n())) * ceil_div(problem.m, bm * cluster_m()) * cluster;
  }
  // device::TmaTiles<BM, BN, BK, STAGES, SPLIT, RASTER, CLUSTER, MULTICAST, OVERLAP, PROMOTE, PINGPONG, KGROUPS[, SS]>;
  // SS only where it is 1, so the sources (and cache keys) of register-weight kernels stay those from before it.
  std::string template_arguments() const {
    return std::to_string(bm) + ", " + std::to_string(bn) + ", " + std::to_string(bk) + ", " + std::to_string(stages) + ", " +
           std::to_string(split) + ", " + std::to_string(raster) + ", " + std::to_string(cluster) + ", " + std::to_string(multicast) +
           ", " + std::to_string(overlap) + ", " + std::to_string(promote) + ", " + std::to_string(pingpong) + ", " +
           std::to_string(kgroups) + (ss != 0 ? ", " + std::to_string(ss) : "");
  }
};

// The format flushes its partial sums only to promote fp8 sums (no K-group scales), so `promote` decides how often
// (device::TmaGemm::PROMOTION_ONLY).
bool promotion_only(const DeviceFormat& device) {
  const bool fp8 = device.compute == dv::kElementE4M3 || device.compute == dv::kElementE5M2;
  return fp8 && device.scale_mode != dv::kScaleAccumulator && !device.staged_activation_scales();
}

// K elements between flushes of the partial sums (0: none; device::TmaGemm::FLUSH_K).
int flush_k(const DeviceFormat& device, const TmaTiles& t) { return promotion_only(device) ? t.promote : device.flush_k(); }

// The K per wgmma batch (device::TmaGemm::CHUNK_K).
// More than 128 accumulators per consumer thread: 192-token tiles whose partial sums are flushed (device::TmaGemm::
// WIDE_FLUSHED: 232 consumer registers, the producer 40).
bool wide_flushed(const DeviceFormat& device, const TmaTiles& t) { return flush_k(device, t) > 0 && t.bm > 128; }

int chunk_k(const DeviceFormat& device, const TmaTiles& t) {
  const int flush = flush_k(device, t);
  return flush > 0 && flush < t.bk ? flush : t.bk;
}

std::string number(int64_t value) { return std::to_string(value); }

// Block scales folded into the activation group scales before the flush (device::TmaGemm::SCALE_PRODUCTS): the
// weight blocks span the tile's bn columns.
bool scale_products(const DeviceFormat& device, int bn) {
  return device.staged_activation_scales() && device.scale_mode == dv::kScaleAccumulator && device.scale_group_n % bn == 0;
}

}  // namespace

std::string TmaFamily::description() const {
  return "quantized GEMM on Hopper wgmma (sm_90a) with a TMA-fed, warp-specialized, persistent main loop: W8A8 fp8/int8, "
         "W4A8 and weight-only formats, mbarrier ring, split-K, clusters with TMA multicast";
}

std::vector<ParameterDomain> TmaFamily::parameter_space() const {
  return {
      {"bm", {16, 32, 64, 128, 192, 256}, "BLOCK_M: rows of C (tokens, the wgmma N) per tile"},
      {"bn", {64, 128}, "BLOCK_N: columns of C per tile: one consumer warpgroup per 64"},
      {"bk", {64, 128, 256}, "BLOCK_K: depth of one shared-memory slot (a multiple of the weight atom: 64 K for f16/bf16, "
                             "128 K for 8-bit activations)"},
      {"stages", {2, 3, 4, 5, 6, 7, 8}, "STAGES: slots of the shared-memory ring the producer fills ahead"},
      {"split", {1, 2, 3, 4, 6, 8}, "SPLIT_K: K ranges per tile, reduced deterministically by the last to finish"},
      {"raster", {0, 1, 2, 3}, "RASTER: 0 = N-fastest tile order; r > 0 = M-fastest within bands of 2^r M tiles"},
      {"cluster", {1, 2, 4}, "CLUSTER: CTAs per thread-block cluster; they share one operand by TMA multicast"},
      {"multicast", {0, 1, 2}, "MULTICAST: the operand a cluster loads once for all its CTAs: 0 none, 1 activations (tiles "
                               "side by side along N), 2 weights (along M)"},
      {"persistent", {0, 1}, "PERSISTENT: 1 = one CTA per SM walks the work units (the next tile loads while this one "
                             "is stored); 0 = one CTA per unit"},
      {"overlap", {0, 1}, "OVERLAP: 1 = a slot's wgmmas run while the next slot's weights are converted (two fragment "
                          "register sets, an even K-tile count per split); with flushed partial sums the tile's tokens "
                          "run in two halves, one scaled in while the other multiplies (bk = the flush interval, bm >= 32)",
       kOverlapWhenAbsent},
      {"promote", {128, 256, 512, 0}, "PROMOTE: K elements between promotions of fp8 partial sums into f32 accumulators "
                                      "(fp8 without K-group scales; the tensor cores add fp8 products with less than f32 "
                                      "precision); 0 = never: the wgmma accumulators are the result; other formats: 128",
       kPromoteWhenAbsent},
      {"pingpong", {0, 1}, "PINGPONG: 1 = the two consumer warpgroups (bn=128) take turns on the tensor cores batch by "
                           "batch, each flushing and converting while the other's wgmmas run (not with overlap=1)",
       kPingpongWhenAbsent},
      {"kgroups", {1, 2}, "KGROUPS: consumer warpgroups per 64 columns; 2 = they take the tile's K slots in turn, one "
                          "converting while the other's wgmmas run, and add their sums once per tile (bn=64, not with "
                          "overlap=1 or pingpong=1, a flush interval of at most bk)",
       kKgroupsWhenAbsent},
      {"ss", {0, 1}, "SS: 1 = wgmma reads the weights straight from the shared-memory slot (both operands through "
                     "descriptors: nothing converted or loaded into registers); raw 8-bit weights only (W8A8 int8 and "
                     "fp8); 0 = the consumers load (and convert) them into registers",
       kSsWhenAbsent},
  };
}

ArchSupport TmaFamily::supports(const FormatSpec& format, int sm) const {
  ArchSupport support = MmaFamily::supports(format, sm);
  if (!support.supported) return support;
  const std::string prefix = format.to_string() + " is unsupported on sm_" + std::to_string(sm) + " by the tma family: ";
  if (sm != 90) {
    support.supported = false;
    support.reason = prefix + "wgmma, setmaxnreg and this TMA pipeline exist only on sm_90 (Hopper, compiled for sm_90a)";
  } else if (mma::device_format(format).compute_bits() == 4) {
    support.supported = false;
    support.reason = prefix + "wgmma has no 4-bit operands";
  }
  return support;
}

int TmaFamily::shared_bytes(const KernelConfig& config, const FormatSpec& format) {
  const TmaTiles t = TmaTiles::from(config);
  const DeviceFormat device = mma::device_format(format);
  const int a_stage = t.bm * t.bk * device.act_bits() / 8;
  const int w_stage = (t.bn / 16) * (t.bk / device.atom_k()) * device.atom_bytes();
  const int group = device.stage_group_k();
  const int group_rows = group > 0 ? (group < t.bk ? t.bk / group : 1) : 0;
  const bool products = scale_products(device, t.bn);  // quad-major rows, 16 bytes of padding per quad; no column scales
  const int s_stage = device.staged_scales() && !products ? group_rows * t.bn * device.scale_bytes() : 0;
  const int z_stage = device.staged_zeros() ? group_rows * t.bn * 2 : 0;
  const int sa_stage = device.staged_activation_scales() ? group_rows * (products ? t.bm + 16 : t.bm) * 4 : 0;
  const int stage = (a_stage + w_stage + s_stage + z_stage + sa_stage + 1023) / 1024 * 1024;
  const int exchange = t.kgroups > 1 ? t.bn / 64 * 128 * (t.bm / 2) * 4 : 0;  // the odd K group's sums of a tile
  return t.stages * stage + exchange + 1024;  // + the run-time alignment of the window to 1024 bytes
}

int TmaFamily::estimated_consumer_registers(const KernelConfig& config, const FormatSpec& format) {
  const TmaTiles t = TmaTiles::from(config);
  const DeviceFormat device = mma::device_format(format);
  const bool flushes = flush_k(device, t) > 0;
  const int accumulators = t.bm / 2 * (flushes ? 2 : 1);
  // Register operands of the batch in flight. With ss=1 there are none, but ptxas spends those registers elsewhere:
  // the estimate stays the register-weight one (NVRTC 13.0, sm_90a, ss=1: 256-token tiles with split 2 and no group
  // in flight spilled 568-1780 bytes, 192-token flushed ones with split 2 and a group in flight 68; 2026-12-08).
  const int fragments = chunk_k(device, t) / device.kstep() * 4 * (t.overlap ? 2 : 1);
  // 192-token tiles with flushed partial sums (192 accumulators) are measured rather than summed: ptxas keeps the
  // weight words, fragments and scales in the registers the accumulators leave. Without a group in flight or turns
  // every flushing format (block fp8 and int8 with Gn = 64 and 128, W4A8 g128 on fp8 and int8, fp8 promoting) compiles
  // with no spills under 232 registers, split 1 or 2; with a group in flight 4-276 bytes spill, with turns and split 2
  // 360-516 (NVRTC 13.0, sm_90a, 2026-12-07).
  if (wide_flushed(device, t)) return accumulators + fragments + 24 + (t.pingpong ? 24 : 0);
  // Pointers, indices, barrier state, vectors, temporaries. With flushed halves in flight the loop holds less of them
  // across the wgmmas: 128-token tiles of block-scaled fp8 and int8 and of W4A8 g128 (estimated 232 and 228 with 48)
  // compile with no spills under 224 registers (NVRTC 13.0, sm_90a, 2026-12-07).
  const int addressing = t.overlap && flushes ? 40 : 48;
  // The reduction's addresses and loaded partial tiles (ptxas, sm_90a): 256-token tiles with split 2 or 4 spill about
  // 600 bytes without a group in flight and none with one (2026-12-07, NVRTC 13.0), whose second fragment set the
  // reduction, after the loop, reuses.
  // One consumer warpgroup (bn = 64: 240 registers) holds more of them: its 256-token tiles with split 2 spilled
  // 132-1496 bytes at 240 estimated (NVRTC 13.0, sm_90a, fp8 and int8 channel x token, 2026-12-08).
  const int split_k = t.split > 1 && !t.overlap ? (t.consumers() == 1 ? 48 : 32) : 0;
  // Turns with split-K on tiles of more than 128 tokens: the reduction's barrier between turns (192 tokens, s32 or
  // never-promoted fp8 sums, split 2: 384-396 bytes spilled at 208 estimated; NVRTC 13.0, sm_90a, 2026-12-08).
  const int turns = t.pingpong && t.split > 1 && t.bm > 128 ? 24 : 0;
  // Flushes that scale by staged group vectors hold column and token scales and their addresses.
  const bool scaled_flush = device.scale_mode == dv::kScaleAccumulator || device.staged_activation_scales();
  // The int4 -> fp8 lookup keeps its four table registers live through the conversion.
  const bool fp8 = device.compute == dv::kElementE4M3 || device.compute == dv::kElementE5M2;
  const bool lookup = device.quantized_activations() && fp8 && !device.is_float() && device.weight_bits == 4 && device.offset_codes();
  return accumulators + fragments + device.thread_words() + addressing + split_k + turns + (scaled_flush ? 8 : 0) + (lookup ? 4 : 0);
}

RuleVerdict TmaFamily::check(const KernelConfig& config, const Problem& problem, const ArchLimits& limits) const {
  if (const RuleVerdict shared = check_config_and_shape(config, problem, limits); !shared.valid) return shared;
  const TmaTiles t = TmaTiles::from(config);
  const DeviceFormat device = mma::device_format(problem.format);
  if (t.promote != 0 && t.promote != 128 && t.promote != 256 && t.promote != 512) {
    return RuleVerdict::fail("promote-range", "promote=" + number(t.promote) + ": expected 128, 256, 512 or 0 (none)");
  }
  if (!promotion_only(device) && t.promote != kPromoteWhenAbsent) {
    return RuleVerdict::fail("promote-fixed-flush", "promote=" + number(t.promote) + " has no effect on " + problem.format.to_string() +
                                                        ": only fp8 operands without K-group scales choose their promotion "
                                                        "interval (others flush per group or never): use promote=128");
  }
  const int flush = flush_k(device, t);
  for (const int group : {device.group_k, device.stage_group_k(), flush}) {
    if (group > 0 && group % t.bk != 0 && t.bk % group != 0) {
      return RuleVerdict::fail("bk-divides-group", "bk=" + number(t.bk) + " neither divides nor is a multiple of the scale group " +
                                                       number(group));
    }
  }
  const int slab_k = 128 * 8 / device.act_bits();
  if (t.bk % slab_k != 0) {
    return RuleVerdict::fail("bk-slab", "bk=" + number(t.bk) + " is not a whole number of 128-byte activation rows (" +
                                            number(slab_k) + " K)");
  }
  if (flush > 0 && t.bm > 192) {
    return RuleVerdict::fail("accumulators-per-thread", "bm=" + number(t.bm) + " with flushed partial sums needs " + number(t.bm) +
                                                            " accumulators per thread (at most 192: bm <= 192)");
  }
  if (t.overlap != 0 && t.overlap != 1) {
    return RuleVerdict::fail("overlap-range", "overlap=" + number(t.overlap) + ": expected 0 or 1");
  }
  // With flushed partial sums a group in flight splits the tile's tokens into two halves (wgmma N = bm / 2, at least
  // 16), each scaled into the accumulators while the other's wgmmas run, once per slot.
  if (t.overlap == 1 && flush != 0 && flush != t.bk) {
    return RuleVerdict::fail("overlap-flush-interval", "overlap=1 with partial sums flushed every " + number(flush) +
                                                           " K takes one flush per slot: bk=" + number(t.bk) + " must be " +
                                                           number(flush));
  }
  if (t.overlap == 1 && flush != 0 && t.bm < 32) {
    return RuleVerdict::fail("overlap-flush-halves", "overlap=1 with flushed partial sums runs the tile's tokens in two halves "
                                                         "of at least 16: bm=" + number(t.bm) + " must be at least 32");
  }
  if (t.pingpong == 1 && t.bn != 128) {
    return RuleVerdict::fail("pingpong-two-warpgroups", "pingpong=1 needs two consumer warpgroups to take turns: bn=128, not bn=" +
                                                            number(t.bn));
  }
  if (t.pingpong == 1 && t.overlap == 1) {
    return RuleVerdict::fail("pingpong-overlap", "pingpong=1 and overlap=1 hide the same work two ways: choose one");
  }
  // overlap=1 and kgroups=2 both take each unit's K tiles in pairs: every split's range must be equal and even.
  const int64_t k_tiles = problem.k / t.bk;
  const bool even_equal_ranges = k_tiles % t.split == 0 && (k_tiles / t.split) % 2 == 0;
  if (t.overlap == 1 && !even_equal_ranges) {
    return RuleVerdict::fail("overlap-even-k-tiles", "overlap=1 runs K tiles in pairs: the " + number(k_tiles) +
                                                         " K tiles of bk=" + number(t.bk) + " must split into split=" +
                                                         number(t.split) + " equal even ranges");
  }
  if (t.ss == 1 && !device.core_matrix_atoms()) {
    return RuleVerdict::fail("ss-raw-8bit", "ss=1 feeds wgmma the stored weights as they are: " + problem.format.to_string() +
                                                " has weights that must be converted first (raw 8-bit weights only: W8A8 "
                                                "int8 and fp8)");
  }
  if (t.kgroups != 1 && t.kgroups != 2) {
    return RuleVerdict::fail("kgroups-range", "kgroups=" + number(t.kgroups) + ": expected 1 or 2");
  }
  if (t.kgroups == 2 && (t.bn != 64 || t.overlap == 1 || t.pingpong == 1)) {
    return RuleVerdict::fail("kgroups-alone", "kgroups=2 takes bn=64 (four consumer warpgroups would leave too few registers) "
                                              "and hides the conversion its own way: not with overlap=1 or pingpong=1");
  }
  // Each K group holds a whole tile of sums and the exchange's addresses: 192- and 256-token tiles spilled 124-1932
  // bytes under the register estimate (NVRTC 13.0, sm_90a, fp8, int8 and block scales, 2026-12-08).
  if (t.kgroups == 2 && t.bm > 128) {
    return RuleVerdict::fail("kgroups-tile", "kgroups=2 gives each K group a whole tile of sums: bm=" + number(t.bm) +
                                                 " spills its registers (at most bm=128)");
  }
  if (t.kgroups == 2 && flush > t.bk) {
    return RuleVerdict::fail("kgroups-flush", "kgroups=2 flushes each K group within its own slots: the flush interval " +
                                                  number(flush) + " must be at most bk=" + number(t.bk));
  }
  // Each K group must see every fill of the slots it reads: with an odd ring, or a unit of odd length moving the
  // groups onto each other's slots, a slot's fills alternate between the groups, and a group could take a fill two
  // phases old for the one it waits for (mbarrier parity), then read and release a slot still being written (the
  // unspecified launch failures of kgroups=2 at stages=3 on an H100, 2026-12-06).
  if (t.kgroups == 2 && (t.stages % 2 != 0 || !even_equal_ranges)) {
    return RuleVerdict::fail("kgroups-even-ring", "kgroups=2 gives each K group every other slot: stages=" + number(t.stages) +
                                                      " must be even and the " + number(k_tiles) + " K tiles of bk=" +
                                                      number(t.bk) + " must split into split=" + number(t.split) +
                                                      " equal even ranges");
  }
  if ((t.cluster == 1) != (t.multicast == kMulticastNone)) {
    return RuleVerdict::fail("cluster-multicast", t.cluster == 1 ? "multicast=" + number(t.multicast) + " needs cluster=2 or 4"
                                                                 : "cluster=" + number(t.cluster) +
                                                                       " without multicast shares nothing: same as cluster=1");
  }
  if (t.multicast == kMulticastActivations && problem.n % (t.cluster * t.bn) != 0) {
    return RuleVerdict::fail("cluster-divides-n", "multicast=1 puts a cluster's tiles side by side along N: N=" + number(problem.n) +
                                                      " is not a multiple of cluster * bn=" + number(t.cluster * t.bn));
  }
  if (t.multicast == kMulticastWeights && ceil_div(problem.m, t.bm) < t.cluster) {
    return RuleVerdict::fail("cluster-single-m-tile", "multicast=2 puts a cluster's tiles side by side along M but M=" +
                                                          number(problem.m) + " has " + number(ceil_div(problem.m, t.bm)) +
                                                          " tile(s) of bm=" + number(t.bm) + " for cluster=" + number(t.cluster) +
                                                          ": CTAs would idle");
  }
  // s32 partial sums of |a| <= 128 times |b| <= 128 stay exact up to 2^31 / 2^14 = 131072 products.
  if (device.integer_mma() && device.flush_k() == 0 && problem.k > 131072) {
    return RuleVerdict::fail("int32-accumulator-range", "K=" + number(problem.k) +
                                                            " could overflow the s32 partial sums of the integer MMA (at most 131072)");
  }
  if (t.split > k_tiles) {
    return RuleVerdict::fail("split-exceeds-k", "split=" + number(t.split) + " exceeds the " + number(k_tiles) +
                                                    " K tiles of bk=" + number(t.bk));
  }
  const int64_t units = t.tiles(problem) / t.cluster * t.split;
  if (t.persistent == 1 && units <= limits.sm_count / t.cluster) {
    return RuleVerdict::fail("persistent-one-wave", "persistent=1 with " + number(units) + " work units of " + number(t.cluster) +
                                                        " CTAs: at most one per SM already, same as persistent=0");
  }
  const int shared = shared_bytes(config, problem.format) + static_shared_bytes(t.stages);
  if (shared > limits.max_shared_per_block) {
    return RuleVerdict::fail("smem-per-block", number(shared) + " bytes of shared memory exceed the " +
                                                   number(limits.max_shared_per_block) + " a block may use on sm_" + number(limits.sm));
  }
  const int registers = estimated_consumer_registers(config, problem.format);
  const int available = consumer_registers(t.consumers(), wide_flushed(device, t));
  if (registers > available) {
    return RuleVerdict::fail("registers-per-thread", "about " + number(registers) + " registers per consumer thread needed, " +
                                                         number(available) + " available: it would spill");
  }
  return check_m_tiling(t.bm, t.raster, problem);
}

std::string TmaFamily::kernel_name(const KernelConfig&, const FormatSpec&) const { return kKernelName; }

int TmaFamily::threads(const KernelConfig& config) { return TmaTiles::from(config).threads(); }
std::string TmaFamily::tiles_template_arguments(const KernelConfig& config) { return TmaTiles::from(config).template_arguments(); }
int TmaFamily::static_shared_memory(const KernelConfig& config) { return static_shared_bytes(TmaTiles::from(config).stages); }

std::string TmaFamily::instantiation_source(const KernelConfig& config, const FormatSpec& format, const std::string& arch) const {
  const int sm = sm_of_arch(arch);
  const ArchSupport support = supports(format, sm);
  if (!support.supported) QTUNE_THROW(UnsupportedError, support.reason);
  if (arch != "sm_90a") QTUNE_THROW(UnsupportedError, "the tma family compiles for sm_90a only (wgmma and setmaxnreg are architecture-specific), not " + arch);
  const DeviceFormat device = mma::device_format(format);
  const TmaTiles tiles = TmaTiles::from(config);
  std::string source = mma::instantiation_preamble(
      "tma family: " + format.to_string() + " " + config.to_string() + " for " + arch, "tma_gemm.cuh", device, "TmaTiles",
      tiles.template_arguments());
  source += "static_assert(qd::TmaGemm<QtuneFormat, QtuneTiles>::SHARED_BYTES == " + number(shared_bytes(config, format)) +
            ", \"host and device disagree on the shared memory size\");\n";
  source += "static_assert(QtuneTiles::THREADS == " + number(tiles.threads()) + ", \"host and device disagree on the block size\");\n";
  const std::string cluster = tiles.cluster > 1 ? "__cluster_dims__(" + number(tiles.cluster) + ", 1, 1) " : "";
  source += "extern \"C\" __global__ void __launch_bounds__(QtuneTiles::THREADS, 1) " + cluster + kKernelName +
            "(const qd::GemmParams params, const __grid_constant__ qd::TensorMap activation_map) {\n";
  source += "  qd::tma_gemm<QtuneFormat, QtuneTiles>(params, activation_map);\n";
  source += "}\n";
  return source;
}

LaunchGeometry TmaFamily::launch_geometry(const KernelConfig& config, const Problem& problem) const {
  const TmaTiles t = TmaTiles::from(config);
  const int64_t tiles = t.tiles(problem);
  LaunchGeometry geometry;
  geometry.grid = {static_cast<uint32_t>(tiles * t.split), 1, 1};
  geometry.block = {static_cast<uint32_t>(t.threads()), 1, 1};
  geometry.dynamic_shared_bytes = static_cast<uint32_t>(shared_bytes(config, problem.format));
  if (t.split > 1) {
    geometry.workspace_bytes = static_cast<uint64_t>(t.split) * tiles * t.bm * t.bn * 4 + static_cast<uint64_t>(tiles) * 4;
    geometry.workspace_starts_zeroed = true;
  }
  geometry.persistent_ctas_per_sm = t.persistent ? 1 : 0;
  geometry.cluster_ctas = static_cast<uint32_t>(t.cluster);
  return geometry;
}

KernelArguments TmaFamily::pack_arguments(const KernelConfig& config, const Problem& problem,
                                          const std::map<std::string, uint64_t>& device_addresses) const {
  KernelArguments arguments = MmaFamily::pack_arguments(config, problem, device_addresses);
  const TmaTiles t = TmaTiles::from(config);
  const DeviceFormat device = mma::device_format(problem.format);
  TensorMapRequest map;
  map.offset = (arguments.storage.size() + 63) / 64 * 64;
  map.address = device_addresses.at("a");
  map.element_bytes = static_cast<uint32_t>(device.act_bits() / 8);
  map.rows = static_cast<uint64_t>(problem.m);
  map.columns = static_cast<uint64_t>(problem.k);
  map.box_rows = static_cast<uint32_t>(t.bm);
  map.box_columns = 128 / map.element_bytes;
  arguments.storage.resize(map.offset + 128, 0);
  arguments.offsets.push_back(map.offset);
  arguments.tensor_maps.push_back(map);
  return arguments;
}

ParameterRanges TmaFamily::curated_ranges(int64_t m) const {
  // From the H200 sweeps of 2026-12-02 (docs/perf.md): at M <= 64 the weights stream (deep rings, one or two consumer
  // warpgroups, split-K); from M = 256 on 128- or 256-token tiles, rasterized, persistent, with or without a cluster;
  // bk = 256 won for fp8 (fewer barriers per flush), bk = 64 for f16 (a group in flight). fp8 without K-group scales
  // wins by never promoting (promote = 0: 256-token tiles, a group in flight); taking turns (pingpong = 1) lost
  // everywhere it was timed (3-18% slower; 2026-12-02, docs/perf.md), so the curated search leaves it off. Two K groups
  // of consumers (kgroups = 2, bn = 64) won only while the weights stream, for W4A8 (M = 64: 18.91 us against 19.47;
  // at M = 256 and 1024 the 64-column tiles lost 27-47%; H100, 2026-12-06), so they are searched at M <= 64. Clusters
  // sharing the activations lost at M = 64 and 256 (two CTAs 4-11%, four 1.9-2.1x; H100, 2026-12-07): off there. check()
  // drops what a format's atom, flushes or registers rule out, so the ranges serve every format.
  if (m <= 64) {
    const int bm = m <= 16 ? 16 : m <= 32 ? 32 : 64;
    return {{"bm", {bm}},    {"bn", {64, 128}}, {"bk", {128, 256}}, {"stages", {4, 8}},     {"split", {1, 2}},
            {"raster", {0}}, {"cluster", {1}},  {"multicast", {0}}, {"persistent", {0, 1}}, {"overlap", {0, 1}},
            {"promote", {128, 0}}, {"pingpong", {0}}, {"kgroups", {1, 2}}, {"ss", {0}}};
  }
  if (m <= 256) {
    // One row of 128-token tiles (M <= 128) fills half the SMs of an H100/H200 at N = 8192: split 2 fills them.
    // One row of tiles has no M band to rasterize (raster-single-m-tile).
    const std::vector<int> splits = m <= 128 ? std::vector<int>{1, 2} : std::vector<int>{1};
    const std::vector<int> rasters = m <= 128 ? std::vector<int>{0} : std::vector<int>{2};
    return {{"bm", {128}},      {"bn", {128}},     {"bk", {64, 128, 256}}, {"stages", {4, 5, 6}}, {"split", splits},
            {"raster", rasters}, {"cluster", {1}},  {"multicast", {0}},     {"persistent", {0}}, {"overlap", {0, 1}},
            {"promote", {128, 0}}, {"pingpong", {0}}, {"kgroups", {1}}, {"ss", {0}}};
  }
  // 192-token tiles from M = 2048: flushed block-scaled fp8 and int8 at M = 4096 gained 6-8% over 128 (at M = 1024
  // they lost 3%: their padding; H100, 2026-12-07).
  const std::vector<int> bms = m >= 2048 ? std::vector<int>{128, 192, 256} : std::vector<int>{128, 256};
  return {{"bm", bms},        {"bn", {128}},       {"bk", {64, 128, 256}}, {"stages", {3, 4}},  {"split", {1}},
          {"raster", {2}},    {"cluster", {1, 2}}, {"multicast", {0, 2}},  {"persistent", {1}}, {"overlap", {0, 1}},
          {"promote", {128, 0}}, {"pingpong", {0}}, {"kgroups", {1}}, {"ss", {0}}};
}

KernelConfig TmaFamily::default_config(const Problem& problem, const ArchLimits& limits) const {
  const ArchSupport support = supports(problem.format, limits.sm);
  if (!support.supported) QTUNE_THROW(UnsupportedError, support.reason);
  const DeviceFormat device = mma::device_format(problem.format);
  // Hand rules from the H200 sweeps of 2026-12-02 (docs/perf.md), kept general through the SM count and check():
  //   - M <= 64: the weights stream. One token tile (16..64), 64 weight columns first (twice the CTAs: fp8 M = 64
  //     21.5 us against 24.7 with 128 and split 2), as many slots as fit about 200 KB, split-K while the units fill
  //     less than half the SMs and each split keeps 4 K tiles. 16-bit activations take 256-deep slots with a wgmma
  //     group in flight (W4A16 int4-ch M = 64 18.18 us against 23.02 at bk = 128 without; H100, 2026-12-06).
  //   - 64 < M <= 256: 128x128 tiles, 128 K deep, one wave, split-K as above while the tiles fill less than half the
  //     SMs (M = 128: W4A8 30.18 us with split 2 against 35.60 without, W4A16 int4-ch 32.29; H100, 2026-12-07, 20th
  //     session); 16-bit activations with a group in flight (M = 256: int4-ch 44.24 us against 44.83 without, g128
  //     48.61 against 49.70; H100, 2026-12-07).
  //   - M > 256: persistent and rasterized; 256-token tiles where the partial sums need no flush (int8, f16/bf16,
  //     fp8 without K-group scales promoting never: int8 98.7 us at M = 1024, W4A16 166.5, fp8 103.6, W4A8 108.3),
  //     128 with flushes (block-scaled fp8); slots 256 K deep with flushes (three of them), 128 K for 8-bit
  //     activations without, 64 K for 16-bit activations; a wgmma group in flight where the format allows it. Block
  //     scales folded into the token scales take five slots 128 K deep (block fp8 at N = K = 8192: M = 1024 148.3-148.8
  //     us against 153.3 at 256 K, M = 4096 586.8 against 614.4; six slots 149.5 / 599.0; H100, 2026-12-07). From
  //     M = 2048 they take 192-token tiles, four slots (block fp8 at M = 4096 553.1 us against 589.4-596.1 with 128,
  //     block int8 562.1 against 608.5; at M = 1024 153.1 against 149.0; H100, 2026-12-07, 22nd session).
  //   - fp8 without K-group scales never promotes (kDefaultPromote) and keeps a wgmma group in flight at every M;
  //     int4 weights on fp8 take 256-deep slots first at M <= 256 (W4A8 M = 64 19.8 us against 22.9 with 128,
  //     M = 256 37.2 against 41.7).
  // Shapes are tried best-first; a split or a second fragment set the registers cannot hold falls back.
  const int64_t m = problem.m;
  const int64_t sms = std::max(1, limits.sm_count);
  const int promote = promotion_only(device) ? kDefaultPromote : kPromoteWhenAbsent;
  const bool flushes = promotion_only(device) ? promote > 0 : device.flush_k() > 0;
  const bool wide_activations = !device.quantized_activations();
  const bool fp8_operands = device.compute == dv::kElementE4M3 || device.compute == dv::kElementE5M2;
  const bool narrow_on_8bit = device.quantized_activations() && fp8_operands && !device.is_float() && device.weight_bits == 4;
  struct Shape {
    int bm, bn, bk;
  };
  std::vector<Shape> shapes;
  if (m <= 64) {
    const int bm = m <= 16 ? 16 : m <= 32 ? 32 : 64;
    shapes = {{bm, 64, 128}, {bm, 128, 128}, {bm, 64, 256}, {bm, 64, 64}};
    if (narrow_on_8bit || wide_activations) shapes.insert(shapes.begin(), {bm, 64, 256});
  } else if (m <= 256) {
    shapes = {{128, 128, 128}, {128, 128, 64}, {128, 64, 128}, {64, 64, 128}};
    if (narrow_on_8bit) shapes.insert(shapes.begin(), {128, 128, 256});
  } else {
    const int bk = wide_activations ? 64 : flushes && !scale_products(device, 128) ? 256 : 128;
    if (!flushes) shapes.push_back({256, 128, bk});
    if (flushes && scale_products(device, 128) && m >= 2048) shapes.insert(shapes.begin(), {192, 128, 128});
    shapes.push_back({128, 128, bk});
    shapes.push_back({128, 128, 128});
    shapes.push_back({128, 64, 128});
    shapes.push_back({64, 64, 128});
  }
  std::string last_failure;
  for (const Shape& shape : shapes) {
    if (problem.n % shape.bn != 0 || problem.k % shape.bk != 0) continue;
    KernelConfig config;
    config.family = name();
    config.params = {{"bm", shape.bm}, {"bn", shape.bn}, {"bk", shape.bk}, {"stages", 2},      {"split", 1},       {"raster", 0},
                     {"cluster", 1},    {"multicast", 0}, {"persistent", 0}, {"overlap", 0},     {"promote", promote},
                     {"pingpong", 0},   {"kgroups", 1},     {"ss", 0}};
    const int stage = (shared_bytes(config, problem.format) - 1024) / 2;
    const bool five_slots = m > 256 && flushes && scale_products(device, shape.bn);
    const int stages = std::clamp((200 * 1024) / std::max(stage, 1), 2, five_slots ? 5 : 8);
    const int64_t tiles = (problem.n / shape.bn) * ceil_div(m, shape.bm);
    int split = 1;
    for (int candidate : {2, 4, 8}) {
      if (m > 256 || 2 * tiles * split >= sms || problem.k / shape.bk / candidate < 4) break;
      split = candidate;
    }
    if (ceil_div(m, shape.bm) >= 2) config.params["raster"] = 2;
    for (; split >= 1; split /= 2) {
      config.params["split"] = split;
      config.params["persistent"] = tiles * split > sms ? 1 : 0;
      // Flushed partial sums run without a group in flight first: their token halves lost 1-3% (block fp8, M = 1024
      // and 4096, H100, 2026-12-07).
      const bool overlap_first = (m > 256 && !flushes) || wide_activations || (promotion_only(device) && !flushes);
      for (int overlap : {overlap_first ? 1 : 0, 0}) {
        config.params["overlap"] = overlap;
        for (int depth = stages; depth >= 2; --depth) {
          config.params["stages"] = depth;
          const RuleVerdict verdict = check(config, problem, limits);
          if (verdict.valid) return config;
          last_failure = verdict.rule + ": " + verdict.detail;
        }
      }
    }
  }
  QTUNE_THROW(UnsupportedError, "tma family: no configuration fits " + problem.to_string() + " (" + last_failure + ")");
}

bool TmaFamily::preferred_for(const Problem& problem, int) const {
  // Quantized activations from kPreferredFromM on (the mma family's swap-AB and small tiles below); weight-only formats
  // from kPreferredFromMWeightOnly on (the wgmma family below): W4A16 int4-ch at M = 32 / 64 15.30 / 18.18 us against
  // wgmma's 17.63 / 24.38, int4-g128 19.42 / 21.09 against 20.42 / 28.96 (H100, one call, 2026-12-06).
  return problem.m >= (problem.format.activation_is_quantized() ? kPreferredFromM : kPreferredFromMWeightOnly);
}

const TmaFamily& tma_family() {
  static const TmaFamily family;
  return family;
}

}  // namespace qtune
