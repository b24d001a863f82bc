"""PyTorch as a provider: f16/bf16 matmul (cuBLAS) and torch._scaled_mm with fp8 rowwise scales (per-token
activations x per-channel weights, f32 scales, bf16 output)."""
from qtune_peers.adapters.base import Adapter, Prepared

FP8_ROWWISE = "w8a8-fp8-ch:out=bf16"


class TorchAdapter(Adapter):
    peer = "torch"
    module = "torch"
    install = ("install a CUDA build of PyTorch (>= 2.4) into the Python QTUNE_PYTHON names; torch._scaled_mm "
               "needs an sm_89 or later GPU")

    def check(self, torch):
        major, minor = (int(part) for part in torch.__version__.split(".")[:2])
        if (major, minor) < (2, 4) or not hasattr(torch, "_scaled_mm"):
            raise self.unavailable(f"torch {torch.__version__} is older than 2.4 (no rowwise torch._scaled_mm)")
        return torch.__version__

    def operands(self):
        return ["f16", "bf16", FP8_ROWWISE]

    def configurations(self, operands, m, n, k):
        return [{"use_fast_accum": False}, {"use_fast_accum": True}] if operands == FP8_ROWWISE else [{}]

    def prepare(self, problem, operands, config, device):
        import torch

        from qtune_peers.adapters import tensors

        if operands in ("f16", "bf16"):
            self.refuse_config(config, [])
            dtype = tensors.float16_type(problem)
            a = tensors.device_tensor(problem, "activation_bits16", device, dtype)
            w = tensors.device_tensor(problem, "weight_bits16", device, dtype)
            c = torch.empty((problem.m, problem.n), dtype=dtype, device=a.device)

            def launch(stream):
                with tensors.on_stream(stream):
                    torch.matmul(a, w.t(), out=c)

            return Prepared({}, tensors.output_of(c), launch)

        self.refuse_config(config, ["use_fast_accum"])
        fast = bool(config.get("use_fast_accum", False))
        a = tensors.device_tensor(problem, "activation_codes", device, torch.float8_e4m3fn)
        w = tensors.device_tensor(problem, "weight_codes", device, torch.float8_e4m3fn)
        scale_a = tensors.device_tensor(problem, "activation_scale_values", device).view(problem.m, 1)
        scale_w = tensors.device_tensor(problem, "weight_scale_values", device).view(1, problem.n)
        c = torch.empty((problem.m, problem.n), dtype=torch.bfloat16, device=a.device)

        def launch(stream):
            with tensors.on_stream(stream):
                torch._scaled_mm(a, w.t(), scale_a=scale_a, scale_b=scale_w, out_dtype=torch.bfloat16,
                                 use_fast_accum=fast, out=c)

        return Prepared({"use_fast_accum": fast}, tensors.output_of(c), launch)
