#pragma once
// Kernel families: everything search/ and tuner/ need to enumerate, validate, compile, feed and launch one family
// of GEMM kernels, without any CUDA on the host side (device addresses are plain uint64_t).
//
// A family declares its tunable parameters (parameter_space), refuses formats it cannot run on an architecture
// (supports), and holds ALL static validity rules in one place (check): divisibility, shared memory, threads,
// registers, format constraints. Each failed rule has a short stable name so the search can count what it removed.
#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/format.hpp"
#include "kernels/quantize.hpp"

namespace qtune {

// One GEMM to run: C[m][n] = A[m][k] * dequant(W[n][k])^T (+ bias[n]).
struct Problem {
  FormatSpec format;
  int64_t m = 1;
  int64_t n = 0;
  int64_t k = 0;
  bool has_bias = false;

  std::string to_string() const;  // "w4a16-int4-ch m=1 n=8192 k=8192" (+ " bias")
};

// A point of a family's parameter space. Its text form lists the parameters in the family's declared order:
// "bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=4,raster=0".
struct KernelConfig {
  std::string family;
  std::map<std::string, int> params;

  // The value of a parameter; throws InputError "config: missing parameter 'bk'".
  int get(std::string_view name) const;
  std::string to_string() const;  // parameters only, family order (alphabetical for an unknown family)
  // Parses "name=value,..." (an optional "family:" prefix overrides `family`). Throws InputError naming the field.
  static KernelConfig parse(std::string_view text, std::string_view family = "mma");
  nlohmann::json to_json() const;  // {"family": "mma", "params": {"bm": 16, ...}}
  static KernelConfig from_json(const nlohmann::json& json);  // throws InputError naming the field
  friend bool operator==(const KernelConfig&, const KernelConfig&) = default;
  friend auto operator<=>(const KernelConfig&, const KernelConfig&) = default;
};

// Values per parameter name: a slice of a family's parameter space (curated ranges, `--param`, `--bm 64,128`).
using ParameterRanges = std::map<std::string, std::vector<int>>;

// One tunable parameter: the values the search may try and what it means.
struct ParameterDomain {
  std::string name;
  std::vector<int> values;
  std::string meaning;
  // A parameter added after configs were stored: a config without it means this value.
  std::optional<int> absent_means = std::nullopt;

  // The config's value of this parameter, or absent_means for a config stored before it existed (InputError naming
  // the parameter when it is missing and has no such value).
  int value_in(const KernelConfig& config) const;
};

// The limits of one GPU that static rules check against (search/ fills them from a GPU profile, tuner/ from the device).
struct ArchLimits {
  int sm = 0;                        // compute capability x10: 80, 86, 89, 90, 100, 120
  int sm_count = 0;
  int max_shared_per_block = 0;      // bytes one block may use with the opt-in attribute
  int shared_per_sm = 0;             // bytes
  int registers_per_sm = 65536;
  int max_registers_per_thread = 255;
  int max_threads_per_sm = 2048;
  int max_threads_per_block = 1024;
  int max_blocks_per_sm = 32;

  // Datasheet values of a representative part of that architecture (A100, RTX 3090, L40S/4090, H100/H200,
  // B200, RTX 5090). Throws InputError for an architecture qtune does not know.
  static ArchLimits for_sm(int sm);

  // Blocks of `threads` threads, `registers` each and `shared_bytes` of shared memory (dynamic + static) that one SM
  // holds at once; registers are allocated per warp in units of 256. 0 when not even one fits.
  int resident_blocks_per_sm(std::uint64_t threads, int registers, std::uint64_t shared_bytes) const;
};

// The outcome of a static rule check. `rule` is empty when valid, else a short stable name such as
// "smem-per-block", "bk-divides-group", "format-unsupported-on-arch" or "split-exceeds-k".
struct RuleVerdict {
  bool valid = true;
  std::string rule;
  std::string detail;  // one line a person can act on

  static RuleVerdict ok() { return {}; }
  static RuleVerdict fail(std::string rule, std::string detail) { return {false, std::move(rule), std::move(detail)}; }
  explicit operator bool() const { return valid; }
};

// How to launch one kernel of a family for one problem.
struct LaunchGeometry {
  std::array<uint32_t, 3> grid{1, 1, 1};
  std::array<uint32_t, 3> block{1, 1, 1};
  uint32_t dynamic_shared_bytes = 0;  // above 48 KiB the launcher must raise the function's opt-in limit
  uint64_t workspace_bytes = 0;       // the "workspace" buffer; 0: none
  // The workspace must be zero before the first launch; the kernel leaves it zero again (split-K tile counters).
  bool workspace_starts_zeroed = false;
  // > 0: a persistent kernel that walks its work units with the grid's stride; the launcher caps grid[0] at this many
  // CTAs per SM of the device (a multiple of cluster_ctas, at least one cluster).
  uint32_t persistent_ctas_per_sm = 0;
  uint32_t cluster_ctas = 1;  // CTAs per thread-block cluster (compiled into the kernel); grid[0] is a multiple of it
};

enum class BufferRole {
  Activations,  // inputs that change per call ("a", "a_scales")
  Weights,      // prepacked once per weight matrix ("weights", "scales", "zeros", "global_scale")
  Bias,         // [n] in the output type
  Output,       // "c": [m][n] in the output type, row-major
  Workspace,    // scratch the kernel owns during the launch
};

// A device buffer a launch needs. Sizes are exact; a launcher may allocate more.
struct BufferSpec {
  std::string name;
  uint64_t bytes = 0;
  BufferRole role = BufferRole::Activations;
  std::string description;
};

// Named host byte buffers (prepacked weights or activations) to copy to the device as they are.
using PackedBuffers = std::map<std::string, std::vector<uint8_t>>;

// A TMA tensor map (CUtensorMap, 128 bytes) that the launcher encodes with the driver (cuTensorMapEncodeTiled) into a
// kernel parameter: a row-major 2-D tensor of `rows` x `columns` elements of `element_bytes` bytes at device address
// `address`, copied in boxes of box_rows x box_columns elements, 128-byte swizzled, elements out of bounds read as zero.
struct TensorMapRequest {
  size_t offset = 0;  // of the parameter in KernelArguments::storage
  uint64_t address = 0;
  uint32_t element_bytes = 1;  // 1, 2 or 4
  uint64_t rows = 0;
  uint64_t columns = 0;
  uint32_t box_rows = 0;
  uint32_t box_columns = 0;  // box_columns * element_bytes = 128: one swizzled row
};

// The launch arguments: each kernel parameter's bytes at its offset in `storage`. cuLaunchKernel's kernelParams
// is pointers(): one pointer per parameter, into `storage` (valid while this object lives and is not copied).
// Parameters listed in `tensor_maps` are filled by the launcher.
struct KernelArguments {
  std::vector<uint8_t> storage;
  std::vector<size_t> offsets;
  std::vector<TensorMapRequest> tensor_maps;
  std::vector<void*> pointers();

  // The arguments of a kernel whose one parameter is `block` (a plain struct the device code declares too).
  template <typename Block>
  static KernelArguments single(const Block& block) {
    KernelArguments arguments;
    arguments.storage.resize(sizeof(block));
    std::memcpy(arguments.storage.data(), &block, sizeof(block));
    arguments.offsets = {0};
    return arguments;
  }
};

class KernelFamily {
 public:
  virtual ~KernelFamily() = default;

  virtual std::string name() const = 0;
  virtual std::string description() const = 0;
  // The tunable parameters, in canonical text order.
  virtual std::vector<ParameterDomain> parameter_space() const = 0;

  // Whether the family can run `format` on compute capability `sm`; the reason says why not, e.g.
  // "w4a4 int4 is unsupported on sm_90: int4 tensor-core MMA was removed in sm_90 and later".
  virtual ArchSupport supports(const FormatSpec& format, int sm) const = 0;
  // Every static rule in one place (format support first, then parameters, divisibility, resources).
  virtual RuleVerdict check(const KernelConfig& config, const Problem& problem, const ArchLimits& limits) const = 0;

  // The extern "C" __global__ function the instantiation defines.
  virtual std::string kernel_name(const KernelConfig& config, const FormatSpec& format) const = 0;
  // The translation unit NVRTC compiles: includes the embedded device headers and instantiates one kernel.
  // `arch` is an NVRTC target such as "sm_90a". Throws InputError when the config or format is not valid for it.
  virtual std::string instantiation_source(const KernelConfig& config, const FormatSpec& format,
                                           const std::string& arch) const = 0;

  // Grid, block, shared memory and workspace for `problem` (the config must pass check()).
  virtual LaunchGeometry launch_geometry(const KernelConfig& config, const Problem& problem) const = 0;
  // Every device buffer a launch reads or writes, with its exact size.
  virtual std::vector<BufferSpec> buffers(const KernelConfig& config, const Problem& problem) const = 0;
  // Packs the kernel parameters from device addresses by buffer name (see buffers()). Optional buffers that are
  // absent pass 0. Throws InputError naming a missing required buffer.
  virtual KernelArguments pack_arguments(const KernelConfig& config, const Problem& problem,
                                         const std::map<std::string, uint64_t>& device_addresses) const = 0;

  // The device layout of quantized weights: "weights", "scales", "zeros" (formats with zero points) and
  // "global_scale". Throws UnsupportedError for formats this family cannot run, InputError for shapes it cannot.
  virtual PackedBuffers prepack_weights(const QuantizedWeights& weights, const KernelConfig& config) const = 0;
  // Inverse of prepack_weights (tests): codes exactly; scales and zero points as the kernel will see them.
  virtual QuantizedWeights unpack_weights(const PackedBuffers& packed, const FormatSpec& format, int64_t n, int64_t k,
                                          const KernelConfig& config) const = 0;
  // The device layout of activations: "a" (and "a_scales" for quantized activations).
  virtual PackedBuffers prepack_activations(const QuantizedActivations& activations, const KernelConfig& config) const = 0;
  // The bias in the output type, as the "bias" buffer.
  virtual std::vector<uint8_t> pack_bias(std::span<const float> bias, const FormatSpec& format) const = 0;

  // A hand-written heuristic choice (the tuned tables must beat it); always passes check() for supported problems.
  virtual KernelConfig default_config(const Problem& problem, const ArchLimits& limits) const = 0;

  // The name of the prepacked weight layout: families with the same one run on each other's packed weights.
  virtual std::string weight_layout() const { return name(); }
  // Whether the hand-written rules prefer this family for `problem` on `sm` over the families listed before it
  // (heuristic_family). False by default: the first family that runs the format is the heuristic's choice.
  virtual bool preferred_for(const Problem&, int) const { return false; }

  // The slice of parameter_space() worth searching for a problem of M = m rows: per parameter, the values among which
  // this family's winners at such an M lie (measured, e.g. docs/perf.md), so that a tune of a whole model searches a
  // few hundred candidates per problem instead of the full space. It is what `qtune tune --space curated` (the
  // default), `qtune compile` and `qtune kernel-sweep` search unless the user names values. Every value must be one
  // of the parameter's domain; a parameter left out keeps its whole domain. The default is the whole space: a new
  // family narrows it once measurements show where it wins, per M (the search key changes with these ranges, so
  // stored winners of another slice are searched again).
  virtual ParameterRanges curated_ranges(int64_t m) const;
};

// Every family qtune has, and one by name (throws InputError "family: unknown kernel family 'x' (known: mma)").
const std::vector<const KernelFamily*>& kernel_families();
const KernelFamily& find_family(std::string_view name);
// The family of that name, or nullptr when this build has none.
const KernelFamily* family_named(std::string_view name);
// Whether `name` is one of the family's parameters.
bool has_parameter(const KernelFamily& family, std::string_view name);

// The family that packs `format`'s weights on `sm`: the first of kernel_families() that supports it (UnsupportedError
// with every family's reason when none does).
const KernelFamily& packing_family(const FormatSpec& format, int sm);
// The family whose default_config() is the heuristic for `problem` on `sm`: a supported family with the packing
// family's weight layout that prefers the problem (preferred_for), else the packing family.
const KernelFamily& heuristic_family(const Problem& problem, int sm);
// `qtune tune --family auto`: whether `family` tunes `problem` on `sm` when `families` are tuned together. Each tunes
// where it can win: mma up to M = 32 where wgmma runs the format (to M = 64 where tma runs its quantized activations),
// wgmma from M = 16 (to M = 512 where tma runs its weight-only format), tma where it prefers the problem
// (preferred_for). A family tuned alone tunes every problem.
bool auto_tune_covers(const KernelFamily& family, const std::vector<const KernelFamily*>& families, const Problem& problem,
                      int sm);

// "sm_90a" -> 90, "sm_120a" -> 120, and the PTX target "compute_75" -> 75. Throws InputError naming `field`.
int sm_of_arch(std::string_view arch, std::string_view field = "arch");

}  // namespace qtune
