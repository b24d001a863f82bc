"""IST-DASLab Marlin (f16 x int4, per channel or per 128 along K) as a provider, through its public Python API:
marlin.Layer packs a fake-quantized weight with its own permutations, marlin.mul runs the kernel on torch's current
stream. Marlin is a torch CUDA extension: build it once with `pip install --no-build-isolation --no-deps PATH`."""
import inspect
import types

from qtune_peers.adapters.base import Adapter, Prepared, distribution_version
from qtune_peers.errors import UnsupportedError

# thread_k x thread_n tiles Marlin's kernel has; -1 lets Marlin choose (its default).
TILES = [(-1, -1), (128, 128), (64, 256)]
MUL_PARAMETERS = ["A", "B", "C", "s", "workspace", "thread_k", "thread_n", "sms", "max_par"]


class MarlinAdapter(Adapter):
    peer = "marlin"
    module = "marlin"
    install = ("build IST-DASLab marlin for this Python (pip install --no-build-isolation --no-deps <marlin source>), "
               "or put the folder holding the built package on --peer-path / QTUNE_PEER_PATH")

    def check(self, marlin):
        mul = getattr(marlin, "mul", None)
        if mul is None or not hasattr(marlin, "Layer"):
            raise self.unavailable("this marlin has no marlin.mul / marlin.Layer (not IST-DASLab's Marlin API)")
        if list(inspect.signature(mul).parameters) != MUL_PARAMETERS:
            raise self.unavailable(f"marlin.mul{inspect.signature(mul)} is not the signature this adapter knows")
        return distribution_version("marlin") or "source"

    def operands(self):
        return ["w4a16-int4-ch", "w4a16-int4-g128"]

    def configurations(self, operands, m, n, k):
        # Marlin's own rule: thread_k 128 only for small batches.
        return [{"thread_k": tk, "thread_n": tn} for tk, tn in TILES if not (m > 16 and tk == 128)]

    def prepare(self, problem, operands, config, device):
        import torch

        import marlin
        from qtune_peers.adapters import tensors

        self.refuse_config(config, ["thread_k", "thread_n", "sms", "max_par"])
        n, k = problem.n, problem.k
        group = 128 if operands.endswith("g128") else -1
        if group != -1 and torch.cuda.get_device_capability(device)[0] >= 9:
            # Seen on an H200 (2026-12-02): Marlin's own g128 use, without qtune, stops with "an illegal instruction
            # was encountered", which would take the worker down; per channel runs right.
            raise UnsupportedError("marlin-w4a16-int4-g128: IST-DASLab Marlin's g128 kernel executes an illegal "
                                   "instruction on sm_90 and later; use gptq_marlin-w4a16-int4-g128 (vLLM) there")
        layer = self._packed_layer(problem, group, device)
        a = tensors.device_tensor(problem, "activation_bits16", device, torch.float16)
        c = torch.empty((problem.m, n), dtype=torch.float16, device=a.device)
        max_par = int(config.get("max_par", 16))
        workspace = torch.zeros(n // 128 * max_par, dtype=torch.int32, device=a.device)
        thread_k = int(config.get("thread_k", -1))
        thread_n = int(config.get("thread_n", -1))
        sms = int(config.get("sms", -1))

        def launch(stream):
            with tensors.on_stream(stream):
                marlin.mul(a, layer.B, c, layer.s, workspace, thread_k, thread_n, sms, max_par)

        used = {"thread_k": thread_k, "thread_n": thread_n, "sms": sms, "max_par": max_par}
        return Prepared(used, tensors.output_of(c), launch)

    def _packed_layer(self, problem, group, device):
        """Marlin's packed weights of qtune's codes and scales (cached per weight matrix: the same codes for every M).
        Layer.pack takes a fake-quantized weight; code x scale in f16 divides back to the exact code."""
        import torch

        import marlin
        from qtune_peers.adapters import tensors

        key = (problem.operands, problem.n, problem.k, problem.description.get("seed"), group, device)
        if getattr(self, "_cache_key", None) == key:
            return self._cache_layer
        n, k = problem.n, problem.k
        codes = tensors.signed_codes(problem, 4, device).to(torch.float16)  # [N][K]
        scales = tensors.device_tensor(problem, "weight_scale_bits", device).to(torch.int16).view(torch.float16)
        scales = scales.view(n, -1)  # [N][groups]
        weight = codes * scales.repeat_interleave(k // scales.shape[1], dim=1)
        layer = marlin.Layer(k, n, groupsize=group).to(f"cuda:{device}")
        layer.pack(types.SimpleNamespace(weight=weight), scales)
        self._cache_key, self._cache_layer = key, layer
        return layer
