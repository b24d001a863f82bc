"""vLLM's gptq_marlin kernel (f16 x uint4b8, per channel or per 128 along K) as a provider, through vLLM's public ops:
GPTQ-packed codes repacked by gptq_marlin_repack, scales permuted by marlin_permute_scales, and gptq_marlin_gemm
writing into qtune's output. vLLM changed these signatures over time: a signature this adapter does not know is
refused, naming the version."""
import inspect

from qtune_peers.adapters.base import Adapter, Prepared, distribution_version

GEMM_REQUIRED = {"a", "c", "b_q_weight", "b_scales", "workspace", "b_q_type", "size_m", "size_n", "size_k"}
GEMM_OPTIONAL = {"b_bias", "a_scales", "global_scale", "b_zeros", "g_idx", "perm", "is_k_full", "use_atomic_add",
                 "use_fp32_reduce", "is_zp_float"}


class GptqMarlinAdapter(Adapter):
    peer = "gptq_marlin"
    module = "vllm._custom_ops"
    install = "install vLLM (its gptq_marlin kernels come with it) into the Python QTUNE_PYTHON names"

    def check(self, ops):
        self.import_peer("vllm.model_executor.layers.quantization.utils.marlin_utils")
        version = distribution_version("vllm") or "source"
        for name in ("gptq_marlin_gemm", "gptq_marlin_repack"):
            if not hasattr(ops, name):
                raise self.unavailable(f"vLLM {version} has no _custom_ops.{name}")
        parameters = set(inspect.signature(ops.gptq_marlin_gemm).parameters)
        if not GEMM_REQUIRED <= parameters or parameters - GEMM_REQUIRED - GEMM_OPTIONAL:
            raise self.unavailable(f"vLLM {version}: gptq_marlin_gemm{inspect.signature(ops.gptq_marlin_gemm)} "
                                   "is not a signature this adapter knows")
        return version

    def operands(self):
        return ["w4a16-int4-ch", "w4a16-int4-g128"]

    def configurations(self, operands, m, n, k):
        return [{"use_fp32_reduce": True}, {"use_fp32_reduce": False}]

    def prepare(self, problem, operands, config, device):
        import torch
        from vllm import _custom_ops as ops
        from vllm.model_executor.layers.quantization.utils import marlin_utils
        from vllm.scalar_type import scalar_types

        from qtune_peers.adapters import tensors

        self.refuse_config(config, ["use_fp32_reduce", "use_atomic_add"])
        n, k, m = problem.n, problem.k, problem.m
        group = 128 if operands.endswith("g128") else -1
        codes = tensors.signed_codes(problem, 4, device) + 8  # uint4b8: the code plus 8
        # GPTQ packing: eight 4-bit codes along K in one int32, [K / 8][N].
        codes_kn = codes.t().contiguous().view(k // 8, 8, n)
        packed = torch.zeros((k // 8, n), dtype=torch.int32, device=codes.device)
        for i in range(8):
            packed |= codes_kn[:, i, :] << (4 * i)
        perm = torch.empty(0, dtype=torch.int32, device=codes.device)
        weight = ops.gptq_marlin_repack(packed, perm, k, n, 4)
        scales = tensors.device_tensor(problem, "weight_scale_bits", device).to(torch.int16).view(torch.float16)
        scales = marlin_utils.marlin_permute_scales(scales.view(n, -1).t().contiguous(), k, n, group)
        make_workspace = getattr(marlin_utils, "marlin_make_workspace_new", None)
        workspace = make_workspace(codes.device) if make_workspace else marlin_utils.marlin_make_workspace(n, codes.device)
        a = tensors.device_tensor(problem, "activation_bits16", device, torch.float16)
        c = torch.empty((m, n), dtype=torch.float16, device=a.device)
        arguments = dict(a=a, c=c, b_q_weight=weight, b_scales=scales, workspace=workspace,
                         b_q_type=scalar_types.uint4b8, size_m=m, size_n=n, size_k=k)
        parameters = set(inspect.signature(ops.gptq_marlin_gemm).parameters)
        for optional in ("b_bias", "a_scales", "global_scale", "b_zeros", "g_idx", "perm"):
            if optional in parameters:
                arguments[optional] = None
        used = {"use_fp32_reduce": bool(config.get("use_fp32_reduce", True)),
                "use_atomic_add": bool(config.get("use_atomic_add", False))}
        arguments.update({name: value for name, value in used.items() if name in parameters})

        def launch(stream):
            with tensors.on_stream(stream):
                ops.gptq_marlin_gemm(**arguments)

        return Prepared(used, tensors.output_of(c), launch)
