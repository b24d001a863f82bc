"""DeepGEMM's fp8 GEMM with 128 x 128 weight blocks and 1 x 128 activation groups (f32 scales, bf16 output, dense)
as a provider, through its public API deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d). The activation scales are put
in the TMA-aligned layout the kernel reads once, when prepared, so that a timed call runs the GEMM alone."""
from qtune_peers.adapters.base import Adapter, Prepared, distribution_version

BLOCK_FORMAT = "w8a8-fp8-block128x128:out=bf16"


class DeepGemmAdapter(Adapter):
    peer = "deepgemm"
    module = "deep_gemm"
    install = ("build DeepGEMM for this Python (its install script; it needs CUTLASS and {fmt} headers) and put it on "
               "--peer-path / QTUNE_PEER_PATH; its fp8 GEMMs need sm_90 or sm_100")

    def check(self, deep_gemm):
        version = getattr(deep_gemm, "__version__", "") or distribution_version("deep_gemm", "deep-gemm") or "source"
        if getattr(deep_gemm, "fp8_gemm_nt", None) is None:
            raise self.unavailable(f"DeepGEMM {version} has no fp8_gemm_nt (built against a CUDA before 12.1?)")
        return version

    def operands(self):
        return [BLOCK_FORMAT]

    def prepare(self, problem, operands, config, device):
        import torch

        import deep_gemm
        from qtune_peers.adapters import tensors

        self.refuse_config(config, [])
        m, n, k = problem.m, problem.n, problem.k
        a = tensors.device_tensor(problem, "activation_codes", device, torch.float8_e4m3fn)
        b = tensors.device_tensor(problem, "weight_codes", device, torch.float8_e4m3fn)
        sfa = tensors.device_tensor(problem, "activation_scale_values", device).view(m, k // 128)
        sfb = tensors.device_tensor(problem, "weight_scale_values", device).view(n // 128, k // 128)
        align = getattr(deep_gemm, "get_mn_major_tma_aligned_tensor", None)
        if align is not None:
            sfa = align(sfa)
        d = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
        # sm_90 reads f32 scales; DeepGEMM's default casts them to ue8m0, which only its sm_100 kernels take (on an
        # H200 the default call crashed the process).
        options = {"disable_ue8m0_cast": True} if torch.cuda.get_device_capability(device)[0] == 9 else {}

        def launch(stream):
            with tensors.on_stream(stream):
                deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d, **options)

        return Prepared({}, tensors.output_of(d), launch)
