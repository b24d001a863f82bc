"""The tests' peers, pure Python and host-side (no torch, no GPU): "fake" multiplies qtune's dequantized operands
in Python and writes f16 patterns, or misbehaves as its config says; "absent" is a peer that is never installed.
Offered only to a worker started with --test-peers."""
import os
import signal
import struct
import time

from qtune_peers.adapters.base import Adapter, Output, Prepared

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

    def configurations(self, operands, m, n, k):
        return [{"behaviour": "correct"}, {"behaviour": "wrong"}]

    def prepare(self, problem, operands, config, device):
        self.refuse_config(config, ["behaviour", "seconds"])
        behaviour = config.get("behaviour", "correct")
        if behaviour not in BEHAVIOURS:
            raise ValueError(f"behaviour must be one of {', '.join(BEHAVIOURS)}")
        m, n, k = problem.m, problem.n, problem.k
        a = problem.values("activation_values")
        w = problem.values("weight_values")
        output = Output(row_stride=n, host=bytearray(2 * m * n))

        def launch(_stream):
            if behaviour == "crash":
                os.kill(os.getpid(), signal.SIGSEGV)
            if behaviour == "exit":
                os._exit(7)
            if behaviour == "hang":
                time.sleep(float(config.get("seconds", 3600)))
            if behaviour == "raise":
                raise RuntimeError("the fake peer's kernel failed")
            values = []
            for row in range(m):
                for col in range(n):
                    values.append(sum(a[row * k + i] * w[col * k + i] for i in range(k)))
            if behaviour == "wrong":
                values[len(values) // 2] += 1.0 + abs(values[len(values) // 2]) * 10
            output.host[:] = struct.pack(f"<{len(values)}e", *values)

        return Prepared({"behaviour": behaviour}, output, launch)


class AbsentAdapter(Adapter):
    peer = "absent"
    module = "qtune_absent_peer_for_tests"
    install = "pip install absent-peer (it does not exist: this peer is missing on purpose)"

    def check(self, module):
        return "never"

    def operands(self):
        return ["w4a16-int4-ch"]
