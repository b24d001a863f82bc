#pragma once
// Precompiled kernels for the production runtime: `qtune export --cubins DIR --arch ...` compiles a table's
// configurations with NVRTC (no GPU needed) into DIR and lists them in DIR/manifest.json, which Runtime reads:
//   {"schema": "qtune-cubins/1", "weight_layout": 2, "kernels": [{"format", "family", "config", "arch", "kernel_name",
//    "file", "sha256", "origin"}, ...]}
// "file" is relative to DIR ("sm_90a/<sha256>.cubin": a cubin's name is its own hash, so equal cubins share a file),
// "origin" says why it is there ("table" or "heuristic"). Entries are sorted and keys too: equal inputs, equal bytes.
// The kernels of the table's token-indexed MoE winners are listed beside them, with the same fields and files, under
//   "moe_kernels": [{"kernel": "gemm", "format", "projection", "family", "config", ...}, {"kernel": "align", "bm",
//    "threads", ...}, {"kernel": "gather", "projection", ...}, {"kernel": "reduce", "output", ...}]
// (written only when there are some: a reader that predates them ignores the key, and so never mistakes a MoE GEMM for
// a dense one of the same config).
#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/family.hpp"
#include "reports/selection_table.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/production/kernel_sources.hpp"

namespace qtune::production {

inline constexpr std::string_view kManifestName = "manifest.json";
inline constexpr std::string_view kManifestSchema = "qtune-cubins/1";
// The prepacked weight layout the kernels of a manifest read ("weight_layout"; absent: 1). 2: raw 8-bit weights (W8A8
// int8 and fp8) are core matrices (kernels/device/gemm/format_traits.cuh); the runtime packs them so, so a cubin of
// such a format exported for layout 1 would read them wrong and is refused. Other formats kept their layout.
inline constexpr int kWeightLayout = 2;

// An NVRTC target: "sm_90a" is {sm 90, suffix "a"}. Throws InputError naming `field` for anything else.
struct ArchTarget {
  int sm = 0;
  std::string suffix;  // "", "a" (this exact architecture only) or "f" (the family: same major, equal or newer minor)

  static ArchTarget parse(std::string_view text, std::string_view field = "arch");
  std::string name() const { return "sm_" + std::to_string(sm) + suffix; }
  // Whether a cubin built for this target runs on a GPU of compute capability `device_sm` (SASS runs within one major
  // version on an equal or newer minor; "a" targets only on their own architecture).
  bool runs_on(int device_sm) const;
};

struct CubinEntry {
  std::string format;  // canonical spec text
  KernelConfig config;
  std::string arch;         // "sm_90a"
  std::string kernel_name;  // the symbol to look up in the cubin
  std::string file;         // relative to the directory
  std::string sha256;       // of the file's bytes
  std::string origin;       // "table" or "heuristic"

  nlohmann::json to_json() const;
};

// A MoE kernel's cubin: which kernel (its kind's fields, and kernel.arch), then the dense entries' fields.
struct MoeCubinEntry {
  MoeKernelSpec kernel;
  std::string kernel_name;
  std::string file;
  std::string sha256;
  std::string origin;  // "table"

  nlohmann::json to_json() const;
};

struct CubinManifest {
  std::vector<CubinEntry> kernels;         // sorted by (format, config, arch)
  std::vector<MoeCubinEntry> moe_kernels;  // sorted by (instance, arch)

  nlohmann::json to_json() const;
  // Throws InputError "<source>: field 'kernels[2].sha256': ..." for a malformed manifest.
  static CubinManifest from_json(const nlohmann::json& json, std::string_view source = "manifest");
  // DIR/manifest.json. Throws InputError naming "cubins" when it is missing or not JSON.
  static CubinManifest read(const std::filesystem::path& directory);

  // The entry to run (format, config) on a GPU of `device_sm`, preferring the exact target `preferred_arch`, then the
  // newest compatible one; nullptr when none fits.
  const CubinEntry* find(std::string_view format, const KernelConfig& config, int device_sm,
                         std::string_view preferred_arch) const;
  // The same for a MoE kernel: the entry of kernel.instance(), preferring the target kernel.arch.
  const MoeCubinEntry* find_moe(const MoeKernelSpec& kernel, int device_sm) const;
};

// Reads the cubin of `entry` from `directory` and checks its sha256 (InputError naming the entry's field if it differs).
std::vector<char> read_cubin(const std::filesystem::path& directory, const CubinEntry& entry, std::size_t index);
std::vector<char> read_cubin(const std::filesystem::path& directory, const MoeCubinEntry& entry, std::size_t index);

// One kernel to precompile, or one left out with the reason.
struct CubinRequest {
  std::string format;
  KernelConfig config;
  std::string arch;
  std::string origin;  // "table" or "heuristic"
};
struct CubinSkip {
  CubinRequest request;
  std::string reason;
};

// One MoE kernel to precompile (kernel.arch is its target), or a MoE entry's config left out on an architecture, or a
// kernel that failed to compile: `what` names it ("<format> <projection> E=.. top_k=.. n=.. k=.. <family>:<config>",
// or the kernel's instance()).
struct MoeCubinRequest {
  MoeKernelSpec kernel;
  std::string origin;  // "table"
};
struct MoeCubinSkip {
  std::string what;
  std::string arch;
  std::string origin;
  std::string reason;
};

struct CubinPlan {
  std::vector<CubinRequest> requests;  // one per (format, config, arch), sorted
  std::vector<CubinSkip> skipped;      // configs that fail the family's rules on an architecture (with its datasheet limits)
  std::vector<MoeCubinRequest> moe_requests;  // one per (instance, arch), sorted
  std::vector<MoeCubinSkip> moe_skipped;      // MoE configs the runtime would not launch on an architecture
};

// Every configuration of `table` for each architecture, and with `with_heuristic` the family heuristic's configs for the
// table's shapes at every tuned M bucket and range start; wgmma and tma configs for sm_90a whichever spelling of sm_90
// is given (kernel_arch). Every token-indexed MoE entry's configs that the runtime launches on the architecture
// (runtime_moe_family, and mma_moe::check at the range's largest tuned token count, as select_moe checks them) with
// the kernels beside their GEMM (moe_call_kernels). Throws InputError naming "--arch" for an unknown architecture.
CubinPlan plan_cubins(const reports::SelectionTable& table, const std::vector<std::string>& archs, bool with_heuristic);

struct CubinExport {
  CubinManifest manifest;
  std::vector<CubinSkip> failed;  // NVRTC failures, with its message
  std::vector<MoeCubinSkip> moe_failed;
  std::vector<std::filesystem::path> removed;  // cubins of an earlier export that the new manifest no longer lists
};

// Compiles the plan's requests (in parallel, through `compiler` and its cache), writes the cubins and the manifest
// into `directory` (created if needed). Failed compiles are left out of the manifest and returned. Cubins an earlier
// export left there (files named <arch>/<64 hex digits>.cubin) that the new manifest does not list are removed;
// nothing else in the directory is touched.
CubinExport write_cubins(const CubinPlan& plan, const std::filesystem::path& directory, const jit::Compiler& compiler);

}  // namespace qtune::production
