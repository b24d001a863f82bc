#pragma once
// What libqtune_runtime compiles, in one place for the runtime's JIT and `qtune export --cubins`, so that an exported
// cubin is the kernel the runtime would otherwise compile: each kernel's NVRTC target, the dense GEMM's compile
// request, and the kernels of one token-indexed MoE call (its GEMM, the routing's alignment, the tma family's gather,
// the down projection's top-k reduction) named by what their sources depend on.
#include <compare>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "kernels/family.hpp"
#include "kernels/moe.hpp"
#include "tuner/jit/compiler.hpp"

namespace qtune::production {

// The NVRTC target of a `family` kernel where the Runtime (or an export) targets `arch`: wgmma and tma kernels use
// sm_90a-only instructions and refuse plain sm_90, so any spelling of sm_90 compiles them for sm_90a (every sm_90 device
// runs its cubins); every other family compiles for `arch` as given.
std::string kernel_arch(std::string_view family, std::string_view arch);

// The dense GEMM of `config` for `format`, compiled for `arch` (the family's instantiation and kernel name).
jit::CompileRequest gemm_compile_request(const KernelConfig& config, const FormatSpec& format, const std::string& arch);

enum class MoeKernelKind { Gemm, Align, Gather, Reduce };
std::string_view to_string(MoeKernelKind kind);  // "gemm", "align", "gather", "reduce"
// InputError naming `field` for anything else.
MoeKernelKind parse_moe_kernel_kind(std::string_view text, std::string_view field = "kernel");

// One kernel of a token-indexed MoE call, by the inputs of its source: only the fields of its kind are set.
struct MoeKernelSpec {
  MoeKernelKind kind = MoeKernelKind::Gemm;
  std::string format;      // Gemm: canonical spec text
  std::string projection;  // Gemm, Gather: "gate-up" or "down"
  KernelConfig config;     // Gemm: of family mma, wgmma or tma
  int bm = 0;              // Align: rows per block
  int threads = 0;         // Align: threads of its one CTA
  std::string output;      // Reduce: "f16" or "bf16"
  std::string arch;        // the NVRTC target

  // Which instantiation, without the target: "moe|<format>|<projection>|<family>:<config>", "moe-align|bm=16,threads=1024",
  // "moe-gather|<projection>", "moe-reduce|<output>".
  std::string instance() const;
  std::string key() const { return instance() + "|" + arch; }  // the runtime's loaded-kernel key
  jit::CompileRequest compile_request() const;
  std::string kernel_name() const;

  auto operator<=>(const MoeKernelSpec& other) const {
    return std::make_tuple(instance(), arch) <=> std::make_tuple(other.instance(), other.arch);
  }
  bool operator==(const MoeKernelSpec& other) const { return instance() == other.instance() && arch == other.arch; }
};

// The kernels a moe_gemm call of `config` launches for `problem` (token-indexed) on a target `arch` with `limits`: the
// GEMM (its family's target, kernel_arch) and the alignment of the routing into its row tables (`arch`); the gather
// of the pairs' rows into layout order for a tma config (the GEMM's target); the top-k reduction for "down" (`arch`).
// InputError from mma_moe::align_threads when the experts' tables exceed the limits.
std::vector<MoeKernelSpec> moe_call_kernels(const KernelConfig& config, const MoeProblem& problem, const ArchLimits& limits,
                                            std::string_view arch);

}  // namespace qtune::production
