"""Checks an installed qtune Humming table on this GPU: same outputs as Humming's heuristic, and the speed.

    python -m qtune_peers.check_table TABLE.json [--m 1,16,64] [--peer-path DIR]... [--json OUT.json]
                                                 [--output table|json] [--repetitions 50] [--seed 1]

(tuner/peers/python on PYTHONPATH or the current folder.) For each layer of the table (``qtune export --humming``) and
each M (the Ms the table was tuned at, or --m), it builds Humming's layer of that format and shape with random weights
(quantized by Humming's own ``load_from_unquantized``) and random f16 activations, runs it with Humming's heuristic and
then with the table installed (``humming_table.install``), on the same inputs, and:

- compares the two outputs. "Same" means bitwise equal (f16 bit patterns, NaN included) where the table picks the
  configuration Humming's heuristic picks for that M (the same kernel on the same inputs); where the configurations
  differ (tiling, stream-K and split reductions change only the order in which f32 partial sums are added), every
  output within 1% of the largest |output| of the heuristic's, and no NaN or infinity in either;
- times both: the Humming kernels' device time from torch.profiler (CUPTI), L2 made cold before each launch by reading
  a buffer of twice the L2, the median over --repetitions launches; where the profiler shows no Humming kernel, CUDA
  events around each launch (which include the launch's overhead), and the method column says so.

It prints one row per (layer, M) and a summary (the geometric mean of heuristic/table times and the slowest cell, as
issue 15's target reads them), or the same as JSON; --json also writes the JSON to a file. Exit status: 0 when every
cell is the same, 1 when one differs, 2 for bad input (a file that is no table, a table measured on another GPU).
Only this module's pure parts (parsing, comparison, reporting) run without torch; they are what its tests check.
"""
import argparse
import json
import math
import os
import sys

from qtune_peers import humming_table

RELATIVE_TOLERANCE = 0.01  # of the largest |output| of the heuristic's, where the two configurations differ


class CheckInputError(ValueError):
    """Bad input, naming the field (exit status 2)."""


# ---- pure parts (standard library only)

def parse_m_list(text):
    """"1,16,64" -> [1, 16, 64] (sorted, each once); CheckInputError naming --m otherwise."""
    values = set()
    for piece in text.split(","):
        piece = piece.strip()
        if not piece:
            continue
        if not piece.isdigit() or int(piece) < 1 or int(piece) > 1 << 20:
            raise CheckInputError(f"--m: {piece!r} is no M in [1, {1 << 20}]")
        values.add(int(piece))
    if not values:
        raise CheckInputError("--m: no M given (e.g. --m 1,16,64)")
    return sorted(values)


def read_table(path):
    """The table's layers as written ([{"format", "layer", "tuning_config", "measured"}, ...]) and humming_table's
    loaded form; CheckInputError naming the file's field for anything else."""
    try:
        loaded = humming_table.load(path)
        with open(path, encoding="utf-8") as stream:
            raw = json.load(stream)
    except humming_table.TableError as error:
        raise CheckInputError(str(error)) from None
    except (OSError, ValueError) as error:
        raise CheckInputError(f"{path}: {error}") from None
    layers = raw.get("layers") or []
    for index, entry in enumerate(layers):
        if not isinstance(entry.get("format"), str):
            raise CheckInputError(f"{path}: layers[{index}].format: missing (the qtune format of the layer)")
    if not layers:
        raise CheckInputError(f"{path}: layers: the table has none")
    return layers, loaded


def cells(layers, m_values=None):
    """(layer entry, M) pairs to check: every layer at `m_values`, else at the Ms the table measured for it."""
    chosen = []
    for entry in layers:
        ms = m_values or sorted({int(item["m"]) for item in entry.get("measured", []) if "m" in item})
        chosen.extend((entry, m) for m in ms)
    return chosen


def same_config(first, second, defaults=None):
    """Whether two TuningConfig dicts name the same kernel (lists and tuples alike, key order ignored). With `defaults`
    (Humming's TuningConfig fields and their defaults, None for a field without one), a missing field takes its default
    and keys that are no field (the heuristic's use_f16_accum belongs to the compute config) are left out: Humming's
    heuristic returns a few fields, qtune's table spells every one."""
    def plain(config):
        if defaults is not None:
            config = {key: config.get(key, default) for key, default in defaults.items()}
        return json.dumps({key: list(value) if isinstance(value, tuple) else value for key, value in config.items()},
                          sort_keys=True)
    return first is not None and second is not None and plain(first) == plain(second)


def tuning_config_defaults(tuning_config_class):
    """field -> default (None where the field has none) of Humming's TuningConfig dataclass."""
    import dataclasses
    return {field.name: (None if field.default is dataclasses.MISSING else field.default)
            for field in dataclasses.fields(tuning_config_class) if not field.name.startswith("_")}


def verdict(configs_equal, bitwise_equal, max_abs_diff, max_abs_reference, non_finite, tolerance=RELATIVE_TOLERANCE,
            reproducible=True):
    """Whether the table's output is the same as the heuristic's (module docstring), and what was compared.
    `reproducible`: the heuristic's kernel gave the same bits when run twice on the same inputs; where it did not
    (a stream-K reduction that adds partial tiles in the order they finish), bitwise equality cannot be asked of the
    same configuration either, and the tolerance decides."""
    if configs_equal:
        if bitwise_equal:
            return True, "bitwise equal (same configuration)"
        if reproducible:
            return False, f"same configuration but not bitwise equal (max |diff| {max_abs_diff:.3g})"
    prefix = "" if reproducible else "not bitwise reproducible run to run; "
    if non_finite:
        return False, f"{prefix}{non_finite} NaN or infinite outputs"
    limit = tolerance * max_abs_reference
    if max_abs_diff <= limit:
        return True, f"{prefix}within tolerance (max |diff| {max_abs_diff:.3g} <= {tolerance:g} x {max_abs_reference:.3g})"
    return False, f"{prefix}differs (max |diff| {max_abs_diff:.3g} > {tolerance:g} x {max_abs_reference:.3g})"


def summarize(rows):
    """Geometric mean of heuristic_us / table_us over the timed cells, the slowest cell, and the count of differing."""
    speedups = [row["heuristic_us"] / row["table_us"] for row in rows
                if row.get("heuristic_us") and row.get("table_us")]
    slowest = min(rows, key=lambda row: row["speedup"] if row.get("speedup") else math.inf, default=None)
    return {
        "cells": len(rows),
        "differing": sum(1 for row in rows if not row["same"]),
        "geomean_speedup": math.exp(sum(math.log(value) for value in speedups) / len(speedups)) if speedups else None,
        "slowest_cell": None if slowest is None or not slowest.get("speedup") else
        {"layer": slowest["layer"], "m": slowest["m"], "speedup": slowest["speedup"]},
    }


def row(format_text, layer, m, configs_equal, same, compared, heuristic_us, table_us, method):
    return {"format": format_text, "layer": f"N={layer['shape_n']} K={layer['shape_k']}", "m": m,
            "same_config": configs_equal, "same": same, "compared": compared, "heuristic_us": heuristic_us,
            "table_us": table_us, "speedup": heuristic_us / table_us if heuristic_us and table_us else None,
            "timing": method}


def render_text(rows, summary):
    """The rows as an aligned table and the summary's lines."""
    header = ["format", "layer", "m", "same_config", "same", "heuristic_us", "table_us", "speedup", "timing", "compared"]

    def cell(value, column):
        if isinstance(value, bool):
            return "yes" if value else ("NO" if column == "same" else "no")
        if isinstance(value, float):
            return f"{value:.3f}"
        return "" if value is None else str(value)

    table = [header] + [[cell(item[column], column) for column in header] for item in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines = ["  ".join(text.ljust(width) for text, width in zip(line, widths)).rstrip() for line in table]
    geomean = summary["geomean_speedup"]
    slowest = summary["slowest_cell"]
    lines.append("")
    lines.append(f"{summary['cells']} cells, {summary['differing']} differing; table vs heuristic: geomean "
                 f"{'%.3fx' % geomean if geomean else 'n/a'}"
                 + (f", slowest cell {slowest['layer']} M={slowest['m']} at {slowest['speedup']:.3f}x" if slowest else ""))
    return "\n".join(lines) + "\n"


def report_json(table_path, device_name, rows, summary):
    return {"table": table_path, "device_name": device_name, "tolerance": RELATIVE_TOLERANCE, "rows": rows,
            "summary": summary}


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m qtune_peers.check_table", description=__doc__.splitlines()[0])
    parser.add_argument("table", help="a table written by qtune export --humming")
    parser.add_argument("--m", default="", help="Ms to check, e.g. 1,16,64 (default: the Ms the table was tuned at)")
    parser.add_argument("--peer-path", action="append", default=[], help="a folder Humming is imported from")
    parser.add_argument("--json", default="", help="also write the JSON report to this file")
    parser.add_argument("--output", default="table", choices=["table", "json"], help="what to print")
    parser.add_argument("--repetitions", type=int, default=50, help="timed launches per cell (median)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the random weights and activations")
    parser.add_argument("--device", type=int, default=0, help="CUDA device ordinal")
    options = parser.parse_args(argv)
    if options.repetitions < 1 or options.repetitions > 100000:
        raise CheckInputError("--repetitions: expected 1 to 100000")
    options.m_values = parse_m_list(options.m) if options.m else None
    return options


# ---- the GPU part (torch and Humming)

def _flush_buffer(torch, device):
    size = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 64 << 20
    return torch.empty(2 * size // 4, dtype=torch.float32, device=device)


def _time_us(torch, launch, flush, repetitions):
    """Median device time of the Humming kernels of one launch (torch.profiler), else of CUDA events; and the method."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        launch()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        for _ in range(repetitions):
            flush.sum()  # reads 2 x L2: the launch starts with a cold L2
            launch()
        torch.cuda.synchronize()
    kernels = [event.time_range.elapsed_us() for event in profiler.events()
               if "cuda" in str(getattr(event, "device_type", "")).lower() and "humming" in event.name.lower()]
    if kernels and len(kernels) % repetitions == 0:
        per_launch = len(kernels) // repetitions
        sums = sorted(sum(kernels[i:i + per_launch]) for i in range(0, len(kernels), per_launch))
        return sums[len(sums) // 2], "torch.profiler"
    samples = []
    for _ in range(repetitions):
        flush.sum()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000.0)
    samples.sort()
    return samples[len(samples) // 2], "cuda-events"


def _compare(torch, heuristic, table):
    bits_equal = torch.equal(heuristic.view(torch.int16), table.view(torch.int16))
    h, t = heuristic.float(), table.float()
    non_finite = int((~torch.isfinite(h)).sum().item() + (~torch.isfinite(t)).sum().item())
    finite = torch.isfinite(h) & torch.isfinite(t)
    diff = (h - t).abs()[finite]
    max_diff = diff.max().item() if diff.numel() else 0.0
    reference = h.abs()[torch.isfinite(h)]
    return bits_equal, max_diff, reference.max().item() if reference.numel() else 0.0, non_finite


def check(options, layers, loaded):
    for path in reversed(options.peer_path):
        sys.path.insert(0, path)
    import torch

    from qtune_peers.adapters import humming as adapter_module

    try:
        import pynvml  # noqa: F401
    except ImportError:
        sys.path.append(adapter_module.COMPAT_DIR)  # Humming's heuristics read clocks through pynvml
    import humming.tune

    adapter = adapter_module.HummingAdapter()
    device = options.device
    torch.cuda.set_device(device)
    device_name = torch.cuda.get_device_name(device)
    humming_table.uninstall()
    heuristic_rules = humming.tune.get_heuristics_config
    from humming.config.config import TuningConfig
    defaults = tuning_config_defaults(TuningConfig)
    flush = _flush_buffer(torch, device)
    rows = []
    generator = torch.Generator(device=f"cuda:{device}").manual_seed(options.seed)
    by_layer = {}
    for entry, m in cells(layers, options.m_values):
        by_layer.setdefault(id(entry), (entry, []))[1].append(m)
    for entry, ms in by_layer.values():
        operands = entry["format"]
        if operands not in adapter_module.OPERANDS:
            raise CheckInputError(f"{options.table}: format: {operands!r} is no Humming format qtune runs "
                                  f"({', '.join(adapter_module.OPERANDS)})")
        n, k = int(entry["layer"]["shape_n"]), int(entry["layer"]["shape_k"])
        layer = adapter._new_layer(operands, n, k, device).cuda(device)
        weights = torch.randn((n, k), dtype=torch.float16, device=f"cuda:{device}", generator=generator) * 0.05
        layer.load_from_unquantized(weights)
        layer.transform()
        meta = layer.humming_metas[""]
        inputs = {m: torch.randn((m, k), dtype=torch.float16, device=f"cuda:{device}", generator=generator) for m in ms}
        outputs = {"heuristic": {}, "table": {}}
        reproducible = {}
        times = {"heuristic": {}, "table": {}}
        for side in ("heuristic", "table"):
            if side == "table" and not humming_table.install(loaded, device_name, torch.cuda.get_device_capability(device)):
                raise CheckInputError(f"{options.table}: gpu: the table was measured on {loaded['gpu'] or loaded['device_name']}"
                                      f" (sm {loaded['sm']}), this is {device_name}")
            try:
                for m in ms:
                    result = torch.empty((m, n), dtype=torch.float16, device=f"cuda:{device}")
                    result.fill_(float("nan"))  # poisoned: a cell the kernel does not write shows
                    layer(inputs[m], outputs=result)
                    torch.cuda.synchronize()
                    outputs[side][m] = result.clone()
                    if side == "heuristic":  # once more: is the kernel bitwise reproducible on the same inputs?
                        result.fill_(float("nan"))
                        layer(inputs[m], outputs=result)
                        torch.cuda.synchronize()
                        reproducible[m] = torch.equal(result.view(torch.int16), outputs[side][m].view(torch.int16))
                    times[side][m] = _time_us(torch, lambda m=m, result=result: layer(inputs[m], outputs=result),
                                              flush, options.repetitions)
            finally:
                humming_table.uninstall()
        for m in ms:
            heuristic_pick = heuristic_rules(meta, shape_m=m)
            table_pick = humming_table.lookup(loaded, meta, m)
            configs_equal = same_config(dict(heuristic_pick), table_pick, defaults)
            same, compared = verdict(configs_equal, *_compare(torch, outputs["heuristic"][m], outputs["table"][m]),
                                     reproducible=reproducible[m])
            (heuristic_us, method), (table_us, table_method) = times["heuristic"][m], times["table"][m]
            rows.append(row(operands, entry["layer"], m, configs_equal, same, compared, heuristic_us, table_us,
                            method if method == table_method else f"{method} / {table_method}"))
    return device_name, rows


def main(argv=None):
    try:
        options = parse_args(sys.argv[1:] if argv is None else argv)
        layers, loaded = read_table(options.table)
        device_name, rows = check(options, layers, loaded)
    except CheckInputError as error:
        print(f"check_table: {error}", file=sys.stderr)
        return 2
    summary = summarize(rows)
    report = report_json(options.table, device_name, rows, summary)
    if options.json:
        with open(options.json, "w", encoding="utf-8") as stream:
            json.dump(report, stream, indent=2)
            stream.write("\n")
    if options.output == "json":
        print(json.dumps(report, indent=2))
    else:
        sys.stdout.write(render_text(rows, summary))
    return 0 if summary["differing"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
