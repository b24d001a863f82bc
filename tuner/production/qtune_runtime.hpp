#pragma once
// libqtune_runtime: tuned quantized GEMMs for production code. This header is the whole interface; it needs only the
// C++ standard library and kernels/error.hpp (the qtune exception types), no CUDA, SQLite, CLI11, CUPTI or NVML header.
//
//   qtune::runtime_api::Runtime runtime({.table = "h200.json", .cubin_directory = "cubins"});
//   PackedWeights packed = runtime.prepack("w4a16-int4-ch", n, k, {.codes = codes, .scale_bits = scales});  // once
//   ... upload packed.weights, packed.scales, packed.global_scale to the GPU ...
//   runtime.gemm("w4a16-int4-ch", m, n, k, {.a = a, .weights = w, .scales = s, .global_scale = g, .c = c}, stream);
//
// Mixture-of-experts layers (token-indexed, vLLM's fused-MoE contract; see MoeShape and moe_gemm below):
//   PackedExperts experts = runtime.prepack_moe("w4a16-int4-g128", n, k, per_expert_weights);  // once, every expert
//   ... upload experts.weights, .scales, .zeros, .global_scale ...
//   runtime.moe_gemm("w4a16-int4-g128", {.experts = 256, .top_k = 8, .n = 4096, .k = 7168, .tokens = t},
//                    {.a = x, .topk_ids = ids, .weights = w, .scales = s, .global_scale = g, .c = y}, stream);
//
// Which configuration runs (select): the table's M range for the exact (N, K); else the table's nearest tuned shape of
// the format in (ln N, ln K) (the same rule as the exported header's select()); else the kernel family's hand-written
// heuristic for the device. A table config that fails the family's rules for the problem's N and K on this device
// (another GPU, an odd fallback shape) gives way to the heuristic too; it is checked at the largest M it was tuned for
// in its range, since M only sizes the grid.
// Where the kernel comes from: a cubin of `qtune export --cubins DIR` built for this architecture (MoE kernels too: the
// GEMM of a table's MoE winner and the kernels its call launches beside it), else NVRTC (JIT), through the on-disk
// kernel cache. wgmma and tma kernels are compiled for sm_90a whichever spelling of sm_90 the Runtime targets (their
// instructions exist only there); other families for the Runtime's architecture. Loaded kernels stay in memory, keyed
// by (format, config, architecture).
//
// Errors are qtune exceptions: InputError (bad arguments, malformed table or manifest: one line naming the field),
// UnsupportedError (the format cannot run on this GPU), NoGpuError, LibraryError (CUDA driver, NVRTC, files).
// A Runtime may be used from several threads; calls are serialised by an internal lock.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/error.hpp"

struct CUstream_st;  // CUstream and cudaStream_t are both CUstream_st*

namespace qtune::runtime_api {

struct RuntimeOptions {
  std::filesystem::path table{};            // JSON written by `qtune export -o table.json`; empty: the heuristic only
  std::filesystem::path cubin_directory{};  // written by `qtune export --cubins DIR`; empty: every kernel by JIT
  std::filesystem::path cache_directory{};  // the JIT's disk cache; empty: $QTUNE_CACHE_DIR, $XDG_CACHE_HOME/qtune or
                                          // ~/.cache/qtune (no disk cache when none is set)
  int device = 0;                         // CUDA device ordinal
  // An NVRTC target such as "sm_90a": select and plan for that architecture's datasheet limits without opening a GPU
  // (planning offline, tests). Empty: the device's own limits and architecture (the constructor opens the device).
  std::string arch{};
};

enum class ConfigSource {
  Tuned,      // the table has this (format, N, K); the config of the M range holding M
  Fallback,   // the table's nearest tuned shape of the format, its M range for M
  Heuristic,  // the kernel family's hand-written choice for the device
};
std::string_view to_string(ConfigSource source);  // "tuned", "fallback", "heuristic"

// The configuration chosen for one GEMM.
struct Choice {
  std::string family;                 // kernel family: "mma", "wgmma", "tma", "bsmma"
  std::map<std::string, int> params;  // {"bm": 16, "bn": 128, ...}
  std::string config;                 // canonical text, "bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=4,raster=0"
  ConfigSource source = ConfigSource::Heuristic;
  std::string detail;                 // why, e.g. "tuned shape n=4096 k=4096, M range [17, 64]" or "no table"
};

enum class KernelOrigin {
  Precompiled,  // a cubin listed in the cubin directory's manifest
  Jit,          // compiled by NVRTC (or taken from the disk cache) on first use
};
std::string_view to_string(KernelOrigin origin);  // "precompiled", "jit"

// What gemm() would run for one GEMM, found without compiling, loading or launching anything.
struct KernelPlan {
  Choice choice;
  std::string arch;             // the architecture of the kernel: the cubin's, or the JIT target (sm_90a for wgmma and
                                // tma on any sm_90 spelling)
  KernelOrigin origin = KernelOrigin::Jit;
  std::filesystem::path cubin;  // Precompiled: the cubin file
  bool loaded = false;          // already loaded by this Runtime
};

// Quantized weights on the host in qtune's plain layout (kernels/quantize.hpp): codes [n][k], one per byte in its low
// bits (two's complement for signed ints, the unsigned code with zero points, sign|exponent|mantissa for floats); the
// bit patterns of the scales in the format's scale type, one per scale cell (per channel: [n]; per group g: [n][k/g];
// per block gn x gk: [n/gn][k/gk]; per tensor: [1]); zero points in the same grid (unsigned codes, or the scale type for
// float zero points); the global scale where the format has one.
struct HostQuantizedWeights {
  std::span<const std::uint8_t> codes{};
  std::span<const std::uint32_t> scale_bits{};
  std::span<const std::uint32_t> zero_point_bits{};  // formats with zero points only
  float global_scale = 1.0f;
};

// Weights in the device layout of the kernels (every configuration of the family reads the same layout). Copy each
// buffer to the GPU as it is and pass its address to gemm(); `zeros` is empty for formats without zero points.
struct PackedWeights {
  std::string format;  // canonical spec text
  std::string family;  // the kernel family whose layout this is
  std::int64_t n = 0;
  std::int64_t k = 0;
  std::vector<std::uint8_t> weights;
  std::vector<std::uint8_t> scales;
  std::vector<std::uint8_t> zeros;
  std::vector<std::uint8_t> global_scale;
};

// Activations in the layout gemm() reads (host bytes; copy each to the GPU): `a` is f16/bf16 for weight-only formats,
// else the quantized codes; `a_scales` the activation scales of formats that have them (empty otherwise).
struct PackedActivations {
  std::vector<std::uint8_t> a;
  std::vector<std::uint8_t> a_scales;
};

// Device addresses of one GEMM C[M,N] = A[M,K] * dequant(W[N,K])^T (+ bias[N]).
struct GemmArguments {
  const void* a = nullptr;             // [m][k] activations, row-major, in the format's activation type (f16 or bf16)
  const void* a_scales = nullptr;      // activation scales, for formats with quantized activations only
  const void* weights = nullptr;       // PackedWeights::weights
  const void* scales = nullptr;        // PackedWeights::scales
  const void* zeros = nullptr;         // PackedWeights::zeros (formats with zero points)
  const void* global_scale = nullptr;  // PackedWeights::global_scale
  const void* bias = nullptr;          // [n] in the output type; nullptr: no bias
  void* c = nullptr;                   // [m][n] output, row-major, in the output type
};

// One token-indexed MoE GEMM: E experts of N x K weights each, T tokens each routed to top_k distinct experts. A
// (token, slot) pair is p = token · top_k + slot (vLLM's topk_ids.flatten() order).
//   "gate-up": out[p][N] = A[token(p)][K] · W_{ids[p]}ᵀ           A: [T][K],          out: [T · top_k][N]
//   "down":    out[t][N] = Σ_slot weights[t][slot] · (A[t · top_k + slot][K] · W_{ids[t][slot]}ᵀ)
//                                                                 A: [T · top_k][K],  out: [T][N]
// (gate-up's out is vLLM's fused-MoE intermediate before the activation; down's A is that, activated.)
struct MoeShape {
  int experts = 0;
  int top_k = 0;
  std::int64_t n = 0;  // per expert
  std::int64_t k = 0;
  std::int64_t tokens = 0;
  std::string_view projection = "gate-up";  // "gate-up" (or "gate_up") or "down"
};

// The configuration of a MoE GEMM (the mma family's MoE kernel; on sm_90 also the wgmma family's for weight-only
// formats and the tma family's, which W4A8 and W8A8 tables pick there: choice.family says which) and the launch it
// sizes.
struct MoeChoice {
  Choice choice;                     // source: the table's exact MoE entry, its nearest one, or the heuristic
  std::int64_t block_rows = 0;       // rows per block of the layout (bm): each expert's pairs are padded to a multiple
  std::int64_t launch_rows = 0;      // routing-free bound: round_up(T·top_k + min(E, T·top_k)·(bm − 1), bm)
  std::uint64_t scratch_bytes = 0;   // what moe_gemm needs of the stream's scratch (row tables, down's unreduced rows,
                                     // split-K workspace, tma's activation rows gathered into layout order)
  std::string arch;                  // the target of the GEMM: its cubin's, else the JIT's (the Runtime's, or
                                     // "sm_90a" for wgmma and tma)
  KernelOrigin origin = KernelOrigin::Jit;  // Precompiled: every kernel of the call (the GEMM, the alignment, tma's
                                            // gather, down's reduction) is a cubin of the manifest; Jit: one at least
                                            // is compiled (or taken from the disk cache) on first use
  std::filesystem::path cubin;              // the GEMM's cubin file, when the manifest has it
};

// Every expert's weights in the MoE kernel's layout, back to back: expert e's are at e · *_stride bytes. Copy each
// buffer to the GPU as it is and pass its address to moe_gemm(); `zeros` is empty for formats without zero points.
struct PackedExperts {
  std::string format;  // canonical spec text
  std::string family;  // "mma": the layout every MoE kernel reads (the wgmma and tma ones too)
  int experts = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
  std::vector<std::uint8_t> weights;
  std::vector<std::uint8_t> scales;
  std::vector<std::uint8_t> zeros;
  std::vector<std::uint8_t> global_scale;  // one f32 per expert
  std::uint64_t weight_stride = 0, scale_stride = 0, zero_stride = 0;
};

// Device addresses of one MoE GEMM. Nothing here is read on the host: the routing stays on the device.
struct MoeGemmArguments {
  const void* a = nullptr;             // activations, row-major, [T][K] for gate-up, [T · top_k][K] (pair order) for
                                       // down: f16/bf16, or for quantized activations their codes (one byte each for
                                       // 8-bit, two per byte, low nibble first, for 4-bit)
  const void* a_scales = nullptr;      // quantized activations only: f32 per row ([rows]) for per-token scales (a
                                       // per-tensor scale repeated on every row), or [K / group][rows] for per-group
                                       // ones, the activations' global scale folded in
  const void* topk_ids = nullptr;      // int32 [T][top_k]: each in [0, E), distinct within a token (an id outside
                                       // [0, E) is skipped: no expert is read for it and its output is not defined)
  const void* topk_weights = nullptr;  // f32 [T][top_k] router weights; "down" only (gate-up ignores it)
  const void* weights = nullptr;       // PackedExperts::weights
  const void* scales = nullptr;        // PackedExperts::scales
  const void* zeros = nullptr;         // PackedExperts::zeros (formats with zero points)
  const void* global_scale = nullptr;  // PackedExperts::global_scale
  void* c = nullptr;                   // output in the format's output type: gate-up [T · top_k][N] in pair order,
                                       // down [T][N]
};

class Runtime {
 public:
  // Reads the table and the cubin manifest (InputError naming the field when malformed). Opens the device unless
  // options.arch is set (NoGpuError without one).
  explicit Runtime(RuntimeOptions options = {});
  // Waits for the device before freeing the split-K workspaces; destroy it after the last gemm() you care about.
  ~Runtime();
  Runtime(Runtime&&) noexcept;
  Runtime& operator=(Runtime&&) noexcept;
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // The configuration for a GEMM of `format` (any spec text `qtune formats` accepts) with M rows. Throws InputError for a
  // bad spec or shape, UnsupportedError when no configuration of any family runs it here.
  Choice select(std::string_view format, std::int64_t m, std::int64_t n, std::int64_t k, bool has_bias = false) const;
  // The configuration and where its kernel would come from.
  KernelPlan plan(std::string_view format, std::int64_t m, std::int64_t n, std::int64_t k, bool has_bias = false) const;

  // Packs quantized weights into the device layout (CPU only; once per weight matrix).
  PackedWeights prepack(std::string_view format, std::int64_t n, std::int64_t k, const HostQuantizedWeights& weights) const;
  // Quantizes f32 weights [n][k] with qtune's round-to-nearest quantizer, then packs them.
  PackedWeights quantize_and_prepack(std::string_view format, std::int64_t n, std::int64_t k,
                                     std::span<const float> weights) const;

  // Quantizes f32 activations [m][k] with qtune's quantizer (per-token scales, fp8/int8 codes: what the format says)
  // into the layout gemm() of this shape reads. CPU only: a production model quantizes on the GPU; this is for
  // examples, tests and offline checks.
  PackedActivations quantize_activations(std::string_view format, std::int64_t m, std::int64_t n, std::int64_t k,
                                         std::span<const float> activations) const;

  // Compiles or loads the kernel of this GEMM now, so that the first gemm() does not wait for it.
  void load(std::string_view format, std::int64_t m, std::int64_t n, std::int64_t k, bool has_bias = false);
  // Enqueues the GEMM on `stream` (nullptr: the legacy default stream) and returns without waiting. The split-K
  // workspace is the Runtime's own, one per stream. Kernel faults surface at the caller's next synchronisation.
  void gemm(std::string_view format, std::int64_t m, std::int64_t n, std::int64_t k, const GemmArguments& arguments,
            CUstream_st* stream);

  // ---- Mixture of experts (token-indexed) ----
  // The configuration for a MoE GEMM by the dense rules: the table's `moe` entry for (format, experts, top_k, n, k,
  // projection, token-indexed), its token range holding T (tuned); else the nearest entry of the format and projection
  // in (ln n, ln k, ln experts, ln top_k), its range for T (fallback); else a hand-written config at the expected
  // rows per expert (heuristic: on sm_90 the wgmma family's for weight-only formats and W4A8, the tma family's for
  // quantized activations above 64 rows per expert and W4A8's gate-up from 32, else the mma family's). A table
  // config that fails the MoE kernel's rules here gives way to the heuristic, as does one of a family the runtime
  // does not launch here (wgmma off sm_90 or for quantized activations; tma off sm_90 or for 4-bit compute).
  // InputError naming "projection", "experts", "top_k" (0 or more than experts), "tokens" (0), "n", "k".
  MoeChoice select_moe(std::string_view format, const MoeShape& shape) const;
  // Packs every expert's quantized weights (one HostQuantizedWeights per expert, each n x k) once (CPU only).
  // InputError naming "experts" (none) or "experts[i]: <field>".
  PackedExperts prepack_moe(std::string_view format, std::int64_t n, std::int64_t k,
                            std::span<const HostQuantizedWeights> experts) const;
  // Compiles or loads the call's kernels and sizes `stream`'s scratch for it, so that moe_gemm() with this shape (or a
  // smaller one) neither compiles nor allocates.
  void load_moe(std::string_view format, const MoeShape& shape, CUstream_st* stream);
  // Enqueues on `stream`, without any host synchronisation: the routing's alignment into the layout's row tables (a
  // one-CTA kernel reading topk_ids), for a tma config the gather of the pairs' activation rows (and scales) into
  // layout order, the MoE GEMM over the routing-free launch bound (blocks past the padded rows and experts without
  // tokens return at once; tma's reads the gathered rows through a TMA tensor map encoded on the host once per shape
  // and stream scratch, then reused by every call that has them), and for
  // "down" the router-weighted top-k sum into c. The row tables, down's unreduced [T · top_k][N] rows, the split-K
  // workspace and tma's gathered rows are the Runtime's scratch, one per stream; it grows
  // when a call needs more than any before on the stream (that once waits for the stream's work in flight: size it
  // ahead with load_moe). InputError for bad sizes or a missing required pointer.
  void moe_gemm(std::string_view format, const MoeShape& shape, const MoeGemmArguments& arguments, CUstream_st* stream);

  // The GPU the table was tuned on ("h200"); empty without a table.
  std::string table_gpu() const;
  // The architecture selections are made for ("sm_90a").
  std::string arch() const;
  // Kernels loaded so far, and cubins the manifest offers for this architecture (MoE kernels included in both).
  std::size_t loaded_kernel_count() const;
  std::size_t precompiled_kernel_count() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qtune::runtime_api
