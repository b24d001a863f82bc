"""The tests' peers, pure Python and host-side (no torch, no GPU): "fake" multiplies qtune's dequantized operands
in Python (a dense GEMM, or a MoE GEMM from the routing and the touched experts' weights) and writes f16 patterns, or
misbehaves as its config says, and times itself on the host (CUPTI has no GPU
kernel of it to time), so that the commands can be tested end to end without a GPU; "absent" is a peer that is never
installed. Offered only to a worker started with --test-peers.

The fake's build ahead (the ``compile`` job), for the tests of the parallel precompile, is steered by the tests'
environment: QTUNE_FAKE_COMPILE_SECONDS (how long a build takes, default 0), QTUNE_FAKE_COMPILE_FAIL (the compact
sorted JSON of a TuningConfig whose build fails like a ptxas error) and QTUNE_FAKE_PEER_LOG (a file each build and each
run appends a JSON line to: event, pid, start, end, config)."""
import json
import os
import signal
import statistics
import struct
import time

from qtune_peers.adapters.base import Adapter, Output, Prepared
from qtune_peers.errors import UnsupportedError

BEHAVIOURS = ("correct", "wrong", "raise", "crash", "hang", "exit")


class FakeAdapter(Adapter):
    peer = "fake"
    install = "nothing: the fake peer is part of qtune's tests"
    module = "struct"  # the fake peer is this module; anything importable stands in for it
    uses_gpu = False

    def check(self, module):
        return "1.0"

    def operands(self):
        return ["w4a16-int4-ch", "f16"]

    def moe_operands(self):
        return ["w4a16-int4-ch", "w4a16-int4-g128"]

    def configurations(self, operands, m, n, k):
        return [{"behaviour": "correct"}, {"behaviour": "wrong"}]

    def compile(self, operands, n, k, config, device):
        """Sleeps QTUNE_FAKE_COMPILE_SECONDS as a build would, and fails the TuningConfig QTUNE_FAKE_COMPILE_FAIL
        names (its compact sorted JSON) as a ptxas error would."""
        self.refuse_config(config, ["behaviour", "seconds", "tuning_config"])
        text = _config_text(config)
        start = time.time()
        time.sleep(float(os.environ.get("QTUNE_FAKE_COMPILE_SECONDS", "0")))
        failed = text == os.environ.get("QTUNE_FAKE_COMPILE_FAIL")
        _log({"event": "compile", "start": start, "end": time.time(), "config": text, "failed": failed})
        if failed:
            raise UnsupportedError(f"fake-{operands} N={n} K={k}: the fake compiler refuses this configuration: "
                                   "ptxas error   : Entry function uses too much shared data")
        return True

    def moe_configurations(self, operands, moe):
        return [{"behaviour": "correct"}, {"behaviour": "wrong"}]

    def prepare(self, problem, operands, config, device):
        # A Humming TuningConfig is taken and ignored, so that `tune --family humming`'s loop runs on the CPU.
        self.refuse_config(config, ["behaviour", "seconds", "tuning_config"])
        _log({"event": "run", "start": time.time(), "end": time.time(), "config": _config_text(config)})
        behaviour = config.get("behaviour", "correct")
        if behaviour not in BEHAVIOURS:
            raise ValueError(f"behaviour must be one of {', '.join(BEHAVIOURS)}")
        m, n = problem.m, problem.n
        output = Output(row_stride=n, host=bytearray(2 * m * n))
        compute = _moe_product(problem) if problem.is_moe else _dense_product(problem)

        def launch(_stream):
            if behaviour == "crash":
                os.kill(os.getpid(), signal.SIGSEGV)
            if behaviour == "exit":
                os._exit(7)
            if behaviour == "hang":
                time.sleep(float(config.get("seconds", 3600)))
            if behaviour == "raise":
                raise RuntimeError("the fake peer's kernel failed")
            values = compute()
            if behaviour == "wrong":
                values[len(values) // 2] += 1.0 + abs(values[len(values) // 2]) * 10
            output.host[:] = struct.pack(f"<{len(values)}e", *values)

        return Prepared({"behaviour": behaviour}, output, launch)

    def measure(self, abi, options, prepared):
        """The host time of a few launches, in the fields of qtune's Measurement (no NVML, no L2 to flush)."""
        samples = []
        start = time.perf_counter()
        for _ in range(3):
            began = time.perf_counter()
            prepared.launch(None)
            samples.append((time.perf_counter() - began) * 1e6)
        samples.sort()
        median = statistics.median(samples)
        nvml = {"valid": False, "sm_mhz": -1, "mem_mhz": -1, "temp_c": -1, "power_w": -1.0, "throttle_reasons": 0,
                "throttled": False}
        return {"median_us": median, "p10_us": samples[0], "p90_us": samples[-1], "min_us": samples[0],
                "max_us": samples[-1], "mean_us": statistics.fmean(samples), "stddev_us": statistics.pstdev(samples),
                "ci_low_us": samples[0], "ci_high_us": samples[-1], "ci_coverage": 0.0, "samples_us": samples,
                "repetitions": len(samples), "warmup_repetitions": 0, "converged": True,
                "stop_reason": "host timing of the fake peer (no GPU kernel)", "warmup_settled": True,
                "warmup_seconds": 0.0, "total_seconds": time.perf_counter() - start,
                "warm_l2": bool(options.get("warm_l2", False)), "l2_flush": "", "flush_bytes": 0,
                "nvml_start": nvml, "nvml_end": nvml, "throttled": False, "kernels_per_repetition": 0,
                "kernel_names": [], "unattributed_kernels": 0, "device_name": "host (fake peer)", "device_uuid": ""}


def _config_text(config):
    """A run's TuningConfig as the tests name it: compact sorted JSON ("" for none)."""
    tuning = config.get("tuning_config")
    return "" if tuning is None else json.dumps(tuning, sort_keys=True, separators=(",", ":"))


def _log(entry):
    path = os.environ.get("QTUNE_FAKE_PEER_LOG")
    if not path:
        return
    entry["pid"] = os.getpid()
    # One write of one line with O_APPEND: the workers building in parallel never interleave within a line.
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, (json.dumps(entry) + "\n").encode())
    finally:
        os.close(descriptor)

def _dense_product(problem):
    """C = A W^T of the dequantized operands, [M][N] row-major, as a function of no arguments."""
    m, n, k = problem.m, problem.n, problem.k
    a = problem.values("activation_values")
    w = problem.values("weight_values")

    def compute():
        return [sum(a[row * k + i] * w[col * k + i] for i in range(k)) for row in range(m) for col in range(n)]

    return compute


def _moe_product(problem):
    """The MoE output peer_abi.h defines, from the dequantized operands: per (token, slot) pair p the product of its
    input row (the token for gate-up, the pair for down) with its expert's weights; gate-up returns the pair rows,
    down each token's router-weighted sum of its slots' rows, in slot order."""
    n, k, top_k = problem.n, problem.k, problem.top_k
    a = problem.values("activation_values")
    ids = problem.values("topk_ids")
    router = problem.values("router_weights")
    weights = {e: problem.values(problem.expert_buffer(e, "weight_values")) for e in problem.experts_touched}
    gate_up = problem.projection == "gate-up"

    def pair_row(pair):
        row = pair // top_k if gate_up else pair
        w = weights[ids[pair]]
        return [sum(a[row * k + i] * w[col * k + i] for i in range(k)) for col in range(n)]

    def compute():
        if gate_up:
            return [value for pair in range(problem.tokens * top_k) for value in pair_row(pair)]
        values = []
        for token in range(problem.tokens):
            summed = [0.0] * n
            for slot in range(top_k):
                pair = token * top_k + slot
                summed = [total + router[pair] * value for total, value in zip(summed, pair_row(pair))]
            values += summed
        return values

    return compute


class AbsentAdapter(Adapter):
    peer = "absent"
    module = "qtune_absent_peer_for_tests"
    install = "pip install absent-peer (it does not exist: this peer is missing on purpose)"

    def check(self, module):
        return "never"

    def operands(self):
        return ["w4a16-int4-ch"]
