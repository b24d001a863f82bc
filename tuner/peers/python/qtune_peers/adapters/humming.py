"""Humming (dense W4A16, W4A8, W8A8 in its formats) as a provider, through its public Python API: HummingLayer loads
qtune's codes and scales in Humming's own weight schema (codes packed by humming.ops.pack_weight, symmetric ints
stored with an offset of 2^(b-1)), transform() repacks them for the GPU, and forward(..., tuning_config=...) runs one
kernel on torch's current stream. A config is {"tuning_config": TuningConfig dict, or a [[m_lo, m_hi, dict], ...]
list}; an empty config runs Humming's own heuristic. Quantized activations are passed with their scales, so Humming
quantizes nothing inside a timed call."""
import importlib.util
import inspect
import os
import sys

from qtune_peers.adapters.base import Adapter, Prepared, distribution_version
from qtune_peers.errors import InputError

# operands -> (weight dtype, weight bits, activation dtype or None for f16)
OPERANDS = {
    "w4a16-int4-ch": ("int4", 4, None),
    "w4a16-int4-g128": ("int4", 4, None),
    "w4a8-int4-fp8:scale=f16": ("int4", 4, "float8e4m3"),
    "w4a8-int4-int8:scale=f16": ("int4", 4, "int8"),
    "w8a8-fp8-ch:scale=f16": ("float8e4m3", 8, "float8e4m3"),
    "w8a8-int8-ch:scale=f16": ("int8", 8, "int8"),
}

COMPAT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "compat")


class HummingAdapter(Adapter):
    peer = "humming"
    module = "humming.layer"
    install = ("put Humming's source on --peer-path / QTUNE_PEER_PATH (or pip install it); it imports torch, triton, "
               "numpy, jinja2, filelock, packaging, cuda-python (cuda.bindings) and pyelftools, and compiles with nvcc")

    def __init__(self):
        super().__init__()
        self.notes = []
        self._cache_key = None
        self._cache_layer = None

    def probe(self):
        if importlib.util.find_spec("humming") is None:
            raise self.unavailable("humming is not importable (no module named 'humming')")
        # Humming starts a background build of its launcher when imported unless told not to; qtune's worker builds
        # it in the job that first needs it, inside the watchdog. The variable is cleared again after the imports:
        # Humming's serial build path (taken while it is set) fails on every list of configs, its heuristic's too.
        told = "HUMMING_DISABLE_PARALLEL_BUILD" in os.environ
        os.environ.setdefault("HUMMING_DISABLE_PARALLEL_BUILD", "1")
        try:
            return self._probe_imports()
        finally:
            if not told:
                os.environ.pop("HUMMING_DISABLE_PARALLEL_BUILD", None)

    def _probe_imports(self):
        try:
            import pynvml  # noqa: F401
        except ImportError:
            # Humming's heuristics read the GPU's bandwidth and clocks through pynvml; qtune's small NVML binding
            # stands in where nvidia-ml-py is not installed.
            sys.path.append(COMPAT_DIR)
            self.notes.append("pynvml: qtune's NVML binding")
        for module, what in (("cuda.bindings.driver", "cuda-python"), ("elftools", "pyelftools")):
            try:
                __import__(module)
            except ImportError as error:
                raise self.unavailable(f"Humming needs {what} ({error})") from error
        humming_layer = self.import_peer("humming.layer")
        ops = self.import_peer("humming.ops")
        layer_class = getattr(humming_layer, "HummingLayer", None)
        method = getattr(humming_layer, "HummingLayerMethod", None)
        if layer_class is None or method is None or not hasattr(ops, "pack_weight"):
            raise self.unavailable("this humming has no HummingLayer / humming.ops.pack_weight")
        if "tuning_config" not in inspect.signature(method.forward_layer).parameters:
            raise self.unavailable("this humming's forward_layer takes no tuning_config")
        for name in ("load_from_tensors", "transform"):
            if not hasattr(layer_class, name):
                raise self.unavailable(f"this humming's HummingLayer has no {name}()")
        from qtune_peers.adapters.tensors import require_cuda
        require_cuda(self)
        import humming

        version = distribution_version("humming-kernels", "humming") or f"source at {os.path.dirname(humming.__file__)}"
        return "; ".join([version] + self.notes)

    def operands(self):
        return list(OPERANDS)

    def configurations(self, operands, m, n, k):
        return [{}]  # Humming's heuristic; its tuning space is qtune's search/humming_space.hpp

    def prepare(self, problem, operands, config, device):
        import torch

        from qtune_peers.adapters import tensors

        self.refuse_config(config, ["tuning_config"])
        tuning = config.get("tuning_config")
        if tuning is not None and not isinstance(tuning, (dict, list)):
            raise InputError("config.tuning_config: a TuningConfig dict or a [[m_lo, m_hi, dict], ...] list")
        _, _, a_dtype = OPERANDS[operands]
        layer = self._layer(problem, operands, device)
        m, n, k = problem.m, problem.n, problem.k
        if a_dtype is None:
            a = tensors.device_tensor(problem, "activation_bits16", device, torch.float16)
            input_scale = None
        else:
            view = torch.float8_e4m3fn if a_dtype == "float8e4m3" else torch.int8
            a = tensors.device_tensor(problem, "activation_codes", device, view)
            input_scale = tensors.device_tensor(problem, "activation_scale_values", device).view(m, -1)
        c = torch.empty((m, n), dtype=torch.float16, device=a.device)
        used = {"tuning_config": tuning} if tuning is not None else {"heuristic": self._heuristic(layer, m)}

        def launch(stream):
            with tensors.on_stream(stream):
                layer(a, outputs=c, input_scale=input_scale, tuning_config=tuning)

        return Prepared(used, tensors.output_of(c), launch)

    def _heuristic(self, layer, m):
        """What Humming's own rules pick for this M (recorded with the result)."""
        try:
            from humming.tune import get_heuristics_config
            chosen = get_heuristics_config(layer.humming_metas[""], shape_m=m)
            return {key: list(value) if isinstance(value, tuple) else value for key, value in chosen.items()}
        except Exception as error:  # noqa: BLE001  (the record is best effort; the launch decides)
            return {"unknown": f"{type(error).__name__}: {error}"}

    def _layer(self, problem, operands, device):
        """A transformed HummingLayer holding qtune's weights (cached per weight matrix: the same codes for every M)."""
        import torch
        from humming import ops
        from humming.layer import HummingLayer

        from qtune_peers.adapters import tensors

        key = (operands, problem.n, problem.k, problem.description.get("seed"), device)
        if self._cache_key == key:
            return self._cache_layer
        b_dtype, bits, a_dtype = OPERANDS[operands]
        n, k = problem.n, problem.k
        layout = problem.description["weight_scales"]
        group = 0 if layout["cols"] == 1 else layout["cols_per_scale"]
        codes = tensors.device_tensor(problem, "weight_codes", device).to(torch.int32)
        if b_dtype.startswith("int"):
            codes = codes ^ (1 << (bits - 1))  # two's complement q -> Humming's stored q + 2^(b-1)
        packed = ops.pack_weight(codes.contiguous(), bits)
        scales = tensors.device_tensor(problem, "weight_scale_bits", device).to(torch.int16).view(torch.float16)
        scales = scales.view(n, layout["cols"]).contiguous()
        weight_config = {"dtype": b_dtype, "group_size": group, "scale_dtype": "float16"}
        input_config = {"dtype": a_dtype} if a_dtype is not None else None
        torch.cuda.set_device(device)
        layer = HummingLayer(shape_n=n, shape_k=k, weight_config=weight_config, input_config=input_config,
                             torch_dtype=torch.float16).cuda(device)
        layer.load_from_tensors({"weight": packed, "weight_scale": scales})
        layer.transform()
        self._cache_key, self._cache_layer = key, layer
        return layer
