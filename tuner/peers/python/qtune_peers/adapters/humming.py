"""Humming (dense W4A16, W4A8, W8A8 in its formats, and its MoE GEMM) as a provider, through its public Python API:
HummingLayer loads qtune's codes and scales in Humming's own weight schema (codes packed by humming.ops.pack_weight,
symmetric ints stored with an offset of 2^(b-1)), transform() repacks them for the GPU, and forward(...,
tuning_config=...) runs one kernel on torch's current stream. A config is {"tuning_config": TuningConfig dict, or a
[[m_lo, m_hi, dict], ...] list}; an empty config runs Humming's own heuristic. Quantized activations are passed with
their scales, so Humming quantizes nothing inside a timed call.

MoE problems run in the same adapter, under the same provider ids (one peer, one probe, one weight packing; a
"humming-moe-..." id would not parse as <peer>-<format>): a HummingLayer with num_experts = E holds the touched
experts' weights (the others are never read), and forward(..., gemm_type "indexed") takes Humming's sorted_ids,
expert_ids and num_tokens_padded, which prepare() builds from qtune's routing with torch ops on the GPU (vLLM's
moe_align_block_size layout, for the block M of the config that runs). Gate-up gathers token rows (top_k = top_k);
down reads one row per pair (top_k = 1, as Humming's benchmark runs it) and its pair rows are reduced by Humming's
moe_fused_mul_sum with the router weights, inside the timed launch: the reduction is part of the output qtune checks
(peer_abi.h).

`compile` builds a configuration's kernel ahead without launching it (`tune --family humming` builds its
planned candidates in parallel workers before measuring)."""
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
        self._moe_cache = None  # (shape, experts loaded, layer)

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

    def moe_operands(self):
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
        if problem.is_moe:
            return self._prepare_moe(problem, operands, tuning, device)
        layer = self._layer(problem, operands, device)
        m, n, k = problem.m, problem.n, problem.k
        a, input_scale = _activations(problem, operands, device, m)
        c = torch.empty((m, n), dtype=torch.float16, device=a.device)
        used = {"tuning_config": tuning} if tuning is not None else {"heuristic": self._heuristic(layer, m)}

        def launch(stream):
            with tensors.on_stream(stream):
                with self._compile_errors(operands, f"M={m}"):
                    layer(a, outputs=c, input_scale=input_scale, tuning_config=tuning)

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

    def _compile_errors(self, operands, where):
        """Humming compiles the kernel on its first call: a kernel that its compiler refuses (its own rules' pick) is
        the peer's limit for this problem, said with the compiler's first error (UnsupportedError)."""
        import contextlib

        adapter = self

        @contextlib.contextmanager
        def guard():
            try:
                yield
            except RuntimeError as error:
                if "Compiler" not in str(error):
                    raise
                raise UnsupportedError(f"{adapter.peer}-{operands} {where}: Humming could not compile its kernel: "
                                       f"{_last_compile_error()}") from error

        return guard()

    def _prepare_moe(self, problem, operands, tuning, device):
        """Humming's indexed MoE GEMM on qtune's routing: the layout tensors are built here, once; a launch is the
        GEMM (and for down the router-weighted top-k sum) only."""
        import torch
        from humming import ops

        from qtune_peers.adapters import tensors

        if problem.moe["layout"] != "token-indexed":
            raise UnsupportedError(f"{self.peer}-{operands}: the MoE adapter runs Humming's indexed GEMM (layout "
                                   f"token-indexed), not {problem.moe['layout']}")
        layer = self._moe_layer(problem, operands, device)
        tokens, top_k, n = problem.tokens, problem.top_k, problem.n
        pairs = tokens * top_k
        a, input_scale = _activations(problem, operands, device, problem.input_rows)
        # Humming's heuristic (or the given config) at the routed rows: its block M decides the layout's padding.
        chosen = _moe_tuning_config(layer, tuning, pairs)
        block_m = int(chosen["block_shape"][0])
        topk_ids = tensors.device_tensor(problem, "topk_ids", device)
        sorted_ids, expert_ids, num_tokens_padded = align_block_size(topk_ids, problem.experts, block_m)
        gate_up = problem.projection == "gate-up"
        compute_config = {"gemm_type": "indexed"}
        pair_rows = torch.empty((pairs, n), dtype=torch.float16, device=a.device)
        if gate_up:
            c = pair_rows
        else:
            router = tensors.device_tensor(problem, "router_weights", device).contiguous()
            c = torch.empty((tokens, n), dtype=torch.float16, device=a.device)
        used = {"tuning_config": tuning} if tuning is not None else {"heuristic": _plain(chosen)}
        used["block_m"] = block_m
        if not gate_up:
            used["reduce"] = "humming.ops.moe_fused_mul_sum"

        def launch(stream):
            with tensors.on_stream(stream):
                with self._compile_errors(operands, f"MoE {problem.projection} T={tokens}"):
                    layer(a, outputs=pair_rows, input_scale=input_scale, sorted_ids=sorted_ids, expert_ids=expert_ids,
                          num_tokens_padded=num_tokens_padded, top_k=top_k if gate_up else 1,
                          compute_config=compute_config, tuning_config=chosen)
                if not gate_up:
                    ops.moe_fused_mul_sum(pair_rows.view(tokens, top_k, n), router, outputs=c)

        return Prepared(used, tensors.output_of(c), launch)

    def _moe_layer(self, problem, operands, device):
        """A transformed HummingLayer of E experts holding the touched experts' weights; cached while a problem
        touches no expert it lacks (the token counts of one shape share it: at large T every expert is touched)."""
        import torch
        from humming import ops
        from humming.layer import HummingLayer

        from qtune_peers.adapters import tensors

        shape = (operands, problem.experts, problem.n, problem.k, problem.description.get("seed"), device)
        touched = set(problem.experts_touched)
        cached = self._moe_cache
        if cached is not None and cached[0] == shape and touched <= cached[1]:
            return cached[2]
        self._moe_cache = None
        self._cache_key, self._cache_layer = None, None  # one layer on the GPU at a time
        torch.cuda.empty_cache()
        b_dtype, bits, a_dtype, _ = OPERANDS[operands]
        experts, n, k = problem.experts, problem.n, problem.k
        layout = problem.description["weight_scales"]
        group = 0 if layout["cols"] == 1 else layout["cols_per_scale"]
        packed = torch.zeros((experts, n, k * bits // 32), dtype=torch.int32, device=f"cuda:{device}")
        scales = torch.empty((experts, n, layout["cols"]), dtype=torch.float16, device=f"cuda:{device}")
        first = None
        for expert in sorted(touched):
            codes = tensors.device_tensor(problem, problem.expert_buffer(expert, "weight_codes"), device).to(torch.int32)
            if b_dtype.startswith("int"):
                codes = codes ^ (1 << (bits - 1))  # two's complement q -> Humming's stored q + 2^(b-1)
            packed[expert] = ops.pack_weight(codes.contiguous(), bits)
            bits16 = tensors.device_tensor(problem, problem.expert_buffer(expert, "weight_scale_bits"), device)
            scales[expert] = bits16.to(torch.int16).view(torch.float16).view(n, layout["cols"])
            first = expert if first is None else first
            del codes
        # Experts nobody routes to are never read, but their scales must be plausible: Humming derives one factor
        # from every expert's scales for integer activations (may_process_int_weight_scale).
        for expert in range(experts):
            if expert not in touched:
                scales[expert] = scales[first]
        weight_config = {"dtype": b_dtype, "group_size": group, "scale_dtype": "float16"}
        input_config = {"dtype": a_dtype} if a_dtype is not None else None
        torch.cuda.set_device(device)
        layer = HummingLayer(shape_n=n, shape_k=k, weight_config=weight_config, input_config=input_config,
                             num_experts=experts, torch_dtype=torch.float16).cuda(device)
        layer.load_from_tensors({"weight": packed, "weight_scale": scales})
        del packed, scales
        layer.transform()
        self._moe_cache = (shape, touched, layer)
        return layer

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
        self._moe_cache = None  # one layer on the GPU at a time
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
    """The compiler log's first line that says what went wrong: an error line other than ptxas's closing "aborted due
    to errors" (which names nothing), else that one, else the log's first line."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    specific = [line for line in errors if "aborted due to errors" not in line]
    for found in (specific, errors, lines):
        if found:
            return found[0][:300]
    return "(the compiler said nothing)"


def _activations(problem, operands, device, rows):
    """qtune's activations of the problem on the GPU as Humming takes them: f16, or the quantized codes (fp8 e4m3 or
    int8) with their scales as [rows][groups]; (tensor, input_scale or None)."""
    import torch

    from qtune_peers.adapters import tensors

    a_dtype = OPERANDS[operands][2]
    if a_dtype is None:
        return tensors.device_tensor(problem, "activation_bits16", device, torch.float16), None
    view = torch.float8_e4m3fn if a_dtype == "float8e4m3" else torch.int8
    a = tensors.device_tensor(problem, "activation_codes", device, view)
    return a, tensors.device_tensor(problem, "activation_scale_values", device).view(rows, -1)


def align_block_size(topk_ids, experts, block_m):
    """vLLM's moe_align_block_size with torch ops on the GPU (docs/moe.md's token-indexed layout): the (token, slot)
    pairs p in expert order, ascending p within an expert, each expert's list padded to a multiple of block_m with
    the sentinel T * top_k; the expert of every block; the padded length as a 1-element tensor. Experts with no
    pairs take no blocks."""
    import torch

    ids = topk_ids.reshape(-1).long()
    pairs = ids.numel()
    order = torch.argsort(ids, stable=True)
    counts = torch.bincount(ids, minlength=experts)
    padded = (counts + block_m - 1) // block_m * block_m
    first_padded = torch.cumsum(padded, 0) - padded
    first = torch.cumsum(counts, 0) - counts
    total = int(padded.sum().item())  # one host synchronisation, here and not in a timed launch
    sorted_ids = torch.full((total,), pairs, dtype=torch.int32, device=ids.device)
    expert_of = ids[order]
    position = first_padded[expert_of] + torch.arange(pairs, device=ids.device) - first[expert_of]
    sorted_ids[position] = order.to(torch.int32)
    expert_ids = torch.repeat_interleave(torch.arange(experts, device=ids.device), padded // block_m).to(torch.int32)
    num_tokens_padded = torch.tensor([total], dtype=torch.int32, device=ids.device)
    return sorted_ids, expert_ids, num_tokens_padded


def _moe_tuning_config(layer, tuning, routed_rows):
    """The TuningConfig dict that runs at `routed_rows` (T * top_k, the M Humming's launcher picks by): the given
    dict, the entry of a given [[m_lo, m_hi, dict], ...] list, or Humming's own MoE heuristic (its indexed rules,
    as its benchmark picks them). Passed on as one dict, so that Humming compiles that kernel only."""
    if isinstance(tuning, dict):
        return tuning
    if tuning is None:
        from humming.tune import get_heuristics_config

        tuning = get_heuristics_config(layer.humming_metas[""], gemm_type="indexed")
    for m_lo, m_hi, config in tuning:
        if m_lo < routed_rows and (m_hi <= 0 or routed_rows <= m_hi):
            return config
    raise InputError(f"config.tuning_config: no range holds the {routed_rows} routed rows")


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
                log = stream.read()
            if "error" in log.lower():
                return _first_error_line(log)
    except Exception as error:  # noqa: BLE001  (the message is a courtesy; the refusal stands without it)
        return f"(no compiler log: {type(error).__name__})"
    return "(no error line in the compiler log)"
