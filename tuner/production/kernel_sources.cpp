#include "tuner/production/kernel_sources.hpp"

#include "kernels/error.hpp"
#include "kernels/families/mma_moe.hpp"
#include "kernels/families/tma_family.hpp"
#include "kernels/families/wgmma_family.hpp"

namespace qtune::production {

std::string kernel_arch(std::string_view family, std::string_view arch) {
  const bool hopper_only = family == wgmma_family().name() || family == tma_family().name();
  if (hopper_only && sm_of_arch(arch) == 90) return "sm_90a";
  return std::string(arch);
}

jit::CompileRequest gemm_compile_request(const KernelConfig& config, const FormatSpec& format, const std::string& arch) {
  const KernelFamily& family = find_family(config.family);
  jit::CompileRequest request;
  request.source = family.instantiation_source(config, format, arch);
  request.kernel_name = family.kernel_name(config, format);
  request.arch = arch;
  return request;
}

std::string_view to_string(MoeKernelKind kind) {
  switch (kind) {
    case MoeKernelKind::Gemm: return "gemm";
    case MoeKernelKind::Align: return "align";
    case MoeKernelKind::Gather: return "gather";
    case MoeKernelKind::Reduce: return "reduce";
  }
  return "unknown";
}

MoeKernelKind parse_moe_kernel_kind(std::string_view text, std::string_view field) {
  for (const MoeKernelKind kind : {MoeKernelKind::Gemm, MoeKernelKind::Align, MoeKernelKind::Gather, MoeKernelKind::Reduce}) {
    if (text == to_string(kind)) return kind;
  }
  QTUNE_INPUT_ERROR(std::string(field) + ": unknown MoE kernel '" + std::string(text) + "' (known: gemm, align, gather, reduce)");
}

std::string MoeKernelSpec::instance() const {
  switch (kind) {
    case MoeKernelKind::Gemm: return "moe|" + format + "|" + projection + "|" + config.family + ":" + config.to_string();
    case MoeKernelKind::Align: return "moe-align|bm=" + std::to_string(bm) + ",threads=" + std::to_string(threads);
    case MoeKernelKind::Gather: return "moe-gather|" + projection;
    case MoeKernelKind::Reduce: return "moe-reduce|" + output;
  }
  return "moe-unknown";
}

std::string MoeKernelSpec::kernel_name() const {
  switch (kind) {
    case MoeKernelKind::Gemm: return mma_moe::kernel_name(config);
    case MoeKernelKind::Align: return mma_moe::align_kernel_name();
    case MoeKernelKind::Gather: return mma_moe::gather_kernel_name();
    case MoeKernelKind::Reduce: return mma_moe::reduce_kernel_name();
  }
  return "";
}

jit::CompileRequest MoeKernelSpec::compile_request() const {
  // The sources read the problem's format, layout and projection only: the sizes are launch arguments.
  auto problem = [&] {
    MoeProblem moe;
    moe.format = FormatSpec::parse(format.empty() ? "w4a16-int4-ch" : format);
    moe.projection = parse_moe_projection(projection.empty() ? "gate-up" : projection);
    moe.layout = MoeLayout::TokenIndexed;
    return moe;
  };
  jit::CompileRequest request;
  switch (kind) {
    case MoeKernelKind::Gemm: request.source = mma_moe::instantiation_source(config, problem(), arch); break;
    case MoeKernelKind::Align: request.source = mma_moe::align_instantiation_source(bm, threads, arch); break;
    case MoeKernelKind::Gather: request.source = mma_moe::gather_instantiation_source(problem(), arch); break;
    case MoeKernelKind::Reduce: {
      FormatSpec spec = FormatSpec::parse("w4a16-int4-ch");
      spec.output = parse_output_type(output, "output");
      request.source = mma_moe::reduce_instantiation_source(spec, arch);
      break;
    }
  }
  request.kernel_name = kernel_name();
  request.arch = arch;
  return request;
}

std::vector<MoeKernelSpec> moe_call_kernels(const KernelConfig& config, const MoeProblem& problem, const ArchLimits& limits,
                                            std::string_view arch) {
  const std::string projection(moe_projection_name(problem.projection));
  std::vector<MoeKernelSpec> kernels;
  MoeKernelSpec gemm;
  gemm.kind = MoeKernelKind::Gemm;
  gemm.format = problem.format.to_string();
  gemm.projection = projection;
  gemm.config = config;
  gemm.arch = kernel_arch(config.family, arch);
  kernels.push_back(gemm);
  MoeKernelSpec align;
  align.kind = MoeKernelKind::Align;
  align.bm = config.get("bm");
  align.threads = mma_moe::align_threads(problem.experts, limits);
  align.arch = std::string(arch);
  kernels.push_back(align);
  if (mma_moe::gathers(config, problem)) {
    MoeKernelSpec gather;
    gather.kind = MoeKernelKind::Gather;
    gather.projection = projection;
    gather.arch = gemm.arch;
    kernels.push_back(gather);
  }
  if (problem.projection == MoeProjection::Down) {
    MoeKernelSpec reduce;
    reduce.kind = MoeKernelKind::Reduce;
    reduce.output = qtune::to_string(problem.format.output);
    reduce.arch = std::string(arch);
    kernels.push_back(reduce);
  }
  return kernels;
}

}  // namespace qtune::production
