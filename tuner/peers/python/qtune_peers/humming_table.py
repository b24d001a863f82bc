"""Install a qtune-tuned table in place of Humming's heuristic.

``qtune export --humming h200-humming.json`` writes, per layer shape and dtypes, the list Humming's
``forward_layer(..., tuning_config=...)`` accepts, measured on one GPU. On that GPU::

    from qtune_peers import humming_table
    humming_table.install("h200-humming.json")   # before the first forward; False (and why) on another GPU
    output = layer(inputs)                        # layers the table covers run its configs, the rest Humming's rules

The table replaces ``humming.tune.get_heuristics_config`` (where ``humming.kernel.humming`` and ``humming.layer``
imported it too) for the layers it lists, when the compute config is Humming's default (f32 accumulation, no batch
invariance, dense GEMM); every other call goes to Humming's own heuristic. ``uninstall()`` restores it. A layer is
matched on Humming's layer meta: shape_n, shape_k, the a/b/c dtypes, the scale group sizes, zero points and experts.
Only the standard library is used here; Humming and torch are imported when installing.
"""
import copy
import json

FILE_FORMAT = "qtune-humming-table"
FILE_VERSION = 1
UNBOUNDED_M = 1 << 30
MATCHED_FIELDS = ("shape_n", "shape_k", "a_dtype", "b_dtype", "c_dtype", "input_scale_group_size",
                  "weight_scale_group_size", "weight_scale_group_size_n", "has_zero_point", "is_fp_zero_point",
                  "num_experts")
_PATCHED_MODULES = ("humming.tune", "humming.kernel.humming", "humming.layer")

_installed = None  # (original function, {module: original attribute})


class TableError(ValueError):
    """A file that is no qtune Humming table, naming the field."""


def load(path):
    """Reads and checks a table file; returns {"gpu", "device_name", "sm", "layers": {key: tuning list}}."""
    with open(path, encoding="utf-8") as stream:
        data = json.load(stream)
    if not isinstance(data, dict) or data.get("format") != FILE_FORMAT:
        raise TableError(f"{path}: format: not a {FILE_FORMAT} file")
    if data.get("version") != FILE_VERSION:
        raise TableError(f"{path}: version: this loader reads version {FILE_VERSION}")
    layers = {}
    for index, entry in enumerate(data.get("layers", [])):
        where = f"{path}: layers[{index}]"
        try:
            key = layer_key(entry["layer"])
            tuning = entry["tuning_config"]
        except (KeyError, TypeError) as error:
            raise TableError(f"{where}: missing {error}") from None
        previous = 0
        for position, item in enumerate(tuning):
            if not (isinstance(item, list) and len(item) == 3 and item[0] == previous and item[1] > item[0]
                    and isinstance(item[2], dict)):
                raise TableError(f"{where}.tuning_config[{position}]: expected [m_lo, m_hi, config] following on")
            previous = item[1]
        if previous != UNBOUNDED_M:
            raise TableError(f"{where}.tuning_config: the last range must end at {UNBOUNDED_M}")
        layers[key] = tuning
    return {"gpu": data.get("gpu", ""), "device_name": data.get("device_name", ""), "sm": data.get("sm", 0),
            "layers": layers}


def _text(value):
    """A Humming dtype or enum as its name ("float16", "channel"); numbers and flags as they are."""
    if isinstance(value, (bool, int)) or value is None:
        return value
    return str(getattr(value, "value", value)).lower()


def layer_key(meta):
    """The fields a layer is matched on, from a table's "layer" object, a dict, or Humming's layer meta."""
    key = []
    for name in MATCHED_FIELDS:
        value = meta.get(name) if isinstance(meta, dict) else getattr(meta, name, None)
        if name == "num_experts":
            value = value or 0
        key.append((name, _text(value)))
    return tuple(key)


def lookup(table, meta, shape_m=None):
    """The table's list for a layer (a copy), or its config for one M; None when the table lacks the layer."""
    tuning = table["layers"].get(layer_key(meta))
    if tuning is None:
        return None
    if shape_m is None:
        return copy.deepcopy(tuning)
    for low, high, config in tuning:
        if low < shape_m <= high:
            return copy.deepcopy(config)
    return None


def matches_device(table, device_name, capability):
    """Whether the table was measured on this GPU: the same compute capability, and the table's device name (or GPU
    key) equal to or contained in the device's name."""
    sm = capability[0] * 10 + capability[1]
    if table["sm"] and table["sm"] != sm:
        return False
    names = [name.lower() for name in (table["device_name"], table["gpu"]) if name]
    return not names or any(name == device_name.lower() or name in device_name.lower() for name in names)


def install(path_or_table, device_name=None, capability=None):
    """Installs the table for this process's GPU (torch.cuda's current device unless given). Returns True when
    installed, False when the table belongs to another GPU (Humming's heuristic stays)."""
    global _installed
    import importlib

    table = load(path_or_table) if isinstance(path_or_table, str) else path_or_table
    if device_name is None or capability is None:
        import torch
        device_name = device_name or torch.cuda.get_device_name()
        capability = capability or torch.cuda.get_device_capability()
    if not matches_device(table, device_name, capability):
        return False
    uninstall()
    # Every module first: one imported after the patch would copy the patched function and keep it.
    modules = {name: importlib.import_module(name) for name in _PATCHED_MODULES}
    original = modules["humming.tune"].get_heuristics_config

    def get_heuristics_config(meta, shape_m=None, use_f16_accum=False, use_batch_invariant=False, gemm_type="dense"):
        if not use_f16_accum and not use_batch_invariant and _text(gemm_type) == "dense":
            found = lookup(table, meta, shape_m)
            if found is not None:
                return found
        return original(meta, shape_m, use_f16_accum=use_f16_accum, use_batch_invariant=use_batch_invariant,
                        gemm_type=gemm_type)

    get_heuristics_config.qtune_table = table
    replaced = {}
    for name, module in modules.items():
        if getattr(module, "get_heuristics_config", None) is original:
            replaced[name] = original
            module.get_heuristics_config = get_heuristics_config
    _installed = (original, replaced)
    _forget_prepared_kernels()
    return True


def uninstall():
    """Restores Humming's heuristic."""
    global _installed
    if _installed is None:
        return
    import importlib

    _, replaced = _installed
    for name, original in replaced.items():
        importlib.import_module(name).get_heuristics_config = original
    _installed = None
    _forget_prepared_kernels()


def installed():
    """The installed table, or None."""
    if _installed is None:
        return None
    import importlib
    return getattr(importlib.import_module("humming.tune").get_heuristics_config, "qtune_table", None)


def _forget_prepared_kernels():
    # Humming caches the kernel list per (layer, compute, tuning) string; a layer that ran before must choose again.
    import importlib
    try:
        kernel_module = importlib.import_module("humming.kernel.humming")
    except ImportError:
        return
    cache = getattr(getattr(kernel_module, "HummingKernel", None), "_str2kernel_cache", None)
    if isinstance(cache, dict):
        cache.clear()
