"""Humming (dense W4A16, W4A8, W8A8 in its formats) as a provider, through its public Python API: HummingLayer loads
qtune's codes and scales in Humming's own weight schema (codes packed by humming.ops.pack_weight, symmetric ints
stored with an offset of 2^(b-1)), transform() repacks them for the GPU, and forward(..., tuning_config=...) runs one
kernel on torch's current stream. A config is {"tuning_config": TuningConfig dict, or a [[m_lo, m_hi, dict], ...]
list}; an empty config runs Humming's own heuristic. Quantized activations are passed with their scales, so Humming
quantizes nothing inside a timed call."""
import contextlib
import importlib.util
import inspect
import io
import json
import os
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor

from qtune_peers.adapters.base import Adapter, Prepared, distribution_version
from qtune_peers.errors import InputError, UnsupportedError

# operands -> (weight dtype, weight bits, activation dtype or None for f16, weight scale group size or 0 per channel)
OPERANDS = {
    "w4a16-int4-ch": ("int4", 4, None, 0),
    "w4a16-int4-g128": ("int4", 4, None, 128),
    "w4a8-int4-fp8:scale=f16": ("int4", 4, "float8e4m3", 0),
    "w4a8-int4-int8:scale=f16": ("int4", 4, "int8", 0),
    "w8a8-fp8-ch:scale=f16": ("float8e4m3", 8, "float8e4m3", 0),
    "w8a8-int8-ch:scale=f16": ("int8", 8, "int8", 0),
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
        self._metas = {}  # (operands, n, k, device) -> HummingLayerMeta

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
        a_dtype = OPERANDS[operands][2]
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
                try:
                    layer(a, outputs=c, input_scale=input_scale, tuning_config=tuning)
                except RuntimeError as error:
                    # Humming compiles the kernel on its first call: a kernel its own rules chose that its compiler
                    # refuses is the peer's limit for this problem, said with the compiler's first error.
                    if "Compiler" not in str(error):
                        raise
                    raise UnsupportedError(f"{self.peer}-{operands} M={m}: Humming could not compile its kernel: "
                                           f"{_last_compile_error()}") from error

        return Prepared(used, tensors.output_of(c), launch)

    def heuristic_configs(self, operands, m, n, k, device):
        """Humming's own rules for the layer over every M, as its heuristic builds them (all of them, whatever M)."""
        from humming.tune import get_heuristics_config

        chosen = get_heuristics_config(self._layer_meta(operands, n, k, device))
        return [[low, high, _plain(config)] for low, high, config in chosen]

    def compile(self, operands, n, k, config, device):
        """Builds the kernel of (the layer's meta, TuningConfig) into Humming's cache (HUMMING_CACHE_DIR) the way its
        forward_layer would (HummingKernel of the layer config merged with the TuningConfig, num_sms left out), in a
        thread other than the main one, where Humming builds the cubin and does not load it (as its own parallel
        build does). A later run of the same configuration finds the cubin by the hash of its code."""
        from humming.kernel import HummingKernel

        self.refuse_config(config, ["tuning_config"])
        tuning = config.get("tuning_config")
        if not isinstance(tuning, dict):
            raise InputError("config.tuning_config: compile builds one kernel: a TuningConfig dict")
        kernel_config = json.loads(self._layer_meta(operands, n, k, device).to_str())
        kernel_config.pop("sublayer_name", None)
        kernel_config.update(tuning)
        kernel_config.pop("num_sms", None)
        compiler_output = io.StringIO()  # Humming prints the compiler's log on a failure: qtune's stdout is not for it

        def build():
            with contextlib.redirect_stdout(compiler_output):
                HummingKernel(**kernel_config)

        with ThreadPoolExecutor(max_workers=1) as pool:
            try:
                pool.submit(build).result()
            except AssertionError as error:
                frames = traceback.extract_tb(error.__traceback__)
                where = f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else "?"
                raise UnsupportedError(f"{self.peer}-{operands} N={n} K={k}: Humming refuses the configuration "
                                       f"(its check at {where}: {frames[-1].line if frames else error})") from error
            except RuntimeError as error:
                if "run failed" not in str(error) and "Compiler" not in str(error):
                    raise
                raise UnsupportedError(f"{self.peer}-{operands} N={n} K={k}: Humming could not compile its kernel: "
                                       f"{_first_error_line(compiler_output.getvalue())}") from error
        return True

    def _layer_meta(self, operands, n, k, device):
        """The HummingLayerMeta a transformed layer of (operands, N, K) has, made without weights (the layer's own
        schemas through HummingLayerMethod.prepare_layer_meta, as transform() makes it)."""
        key = (operands, n, k, device)
        cached = self._metas.get(key)
        if cached is not None:
            return cached
        from humming.layer import HummingLayerMethod

        layer = self._new_layer(operands, n, k, device)
        meta = HummingLayerMethod.prepare_layer_meta(
            layer=layer, shape_n=layer.shape_n, shape_k=layer.shape_k, weight_schema=layer.weight_schema,
            input_schema=layer.input_schema, num_experts=layer.num_experts, pad_n_to_multiple=layer.pad_n_to_multiple,
            pad_k_to_multiple=layer.pad_k_to_multiple, torch_dtype=layer.torch_dtype, has_bias=layer.has_bias)
        self._metas[key] = meta
        return meta

    def _new_layer(self, operands, n, k, device):
        """An untransformed HummingLayer of (operands, N, K) in Humming's own schema (f16 scales, f16 output)."""
        import torch
        from humming.layer import HummingLayer

        b_dtype, _, a_dtype, group = OPERANDS[operands]
        weight_config = {"dtype": b_dtype, "group_size": group, "scale_dtype": "float16"}
        input_config = {"dtype": a_dtype} if a_dtype is not None else None
        torch.cuda.set_device(device)
        return HummingLayer(shape_n=n, shape_k=k, weight_config=weight_config, input_config=input_config,
                            torch_dtype=torch.float16)

    def _heuristic(self, layer, m):
        """What Humming's own rules pick for this M (recorded with the result)."""
        try:
            from humming.tune import get_heuristics_config
            return _plain(get_heuristics_config(layer.humming_metas[""], shape_m=m))
        except Exception as error:  # noqa: BLE001  (the record is best effort; the launch decides)
            return {"unknown": f"{type(error).__name__}: {error}"}

    def _layer(self, problem, operands, device):
        """A transformed HummingLayer holding qtune's weights (cached per weight matrix: the same codes for every M)."""
        import torch
        from humming import ops

        from qtune_peers.adapters import tensors

        key = (operands, problem.n, problem.k, problem.description.get("seed"), device)
        if self._cache_key == key:
            return self._cache_layer
        _, bits, _, group = OPERANDS[operands]
        n, k = problem.n, problem.k
        layout = problem.description["weight_scales"]
        if group != (0 if layout["cols"] == 1 else layout["cols_per_scale"]):
            raise InputError(f"{self.peer}-{operands}: qtune's operands have another scale group than the provider's")
        codes = tensors.device_tensor(problem, "weight_codes", device).to(torch.int32)
        if OPERANDS[operands][0].startswith("int"):
            codes = codes ^ (1 << (bits - 1))  # two's complement q -> Humming's stored q + 2^(b-1)
        packed = ops.pack_weight(codes.contiguous(), bits)
        scales = tensors.device_tensor(problem, "weight_scale_bits", device).to(torch.int16).view(torch.float16)
        scales = scales.view(n, layout["cols"]).contiguous()
        layer = self._new_layer(operands, n, k, device).cuda(device)
        layer.load_from_tensors({"weight": packed, "weight_scale": scales})
        layer.transform()
        self._cache_key, self._cache_layer = key, layer
        return layer


def _plain(config):
    """A TuningConfig dict with JSON's types (tuples as lists)."""
    return {key: list(value) if isinstance(value, tuple) else value for key, value in config.items()}


def _first_error_line(log):
    """The first line of a compiler log that says error (else its first line)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in lines:
        if "error" in line:
            return line[:300]
    return lines[0][:300] if lines else "(the compiler said nothing)"


def _last_compile_error():
    """The first error line of the newest compiler log in Humming's cache (where its JIT writes stderr.log)."""
    try:
        from humming.jit import utils as jit_utils

        logs = []
        for root, _, files in os.walk(jit_utils.get_humming_cache_dir()):
            if "stderr.log" in files:
                path = os.path.join(root, "stderr.log")
                logs.append((os.path.getmtime(path), path))
        for _, path in sorted(logs, reverse=True)[:1]:
            with open(path, encoding="utf-8", errors="replace") as stream:
                for line in stream:
                    if "error" in line:
                        return line.strip()[:300]
    except Exception as error:  # noqa: BLE001  (the message is a courtesy; the refusal stands without it)
        return f"(no compiler log: {type(error).__name__})"
    return "(no error line in the compiler log)"
