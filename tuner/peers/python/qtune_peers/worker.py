"""The peer worker's jobs:

    describe        {} -> {"peers": [{"peer", "available", "version", "problem", "install", "providers",
                                          "moe_providers"}], "python"}
    configurations  {"provider", "problem"} -> {"configurations": [config, ...]}   (the peer's defaults first)
    run             {"provider", "problem": {"operands", "m", "n", "k", "seed", "device"}, "config", "measure",
                     "measure_time"} -> {"provider", "peer_version", "config", "verification", "measurement"?}
    heuristic       {"provider", "problem"} -> {"configs": [[m_lo, m_hi, config], ...]}   (the peer's own rules over
                     every M of the problem's layer, as its heuristic builds them; [] for a peer without such rules)
    compile         {"provider", "problem", "config"} -> {"compiled": bool, "seconds"}   (builds the kernel `config`
                     runs into the peer's own cache without launching it; false: the peer builds nothing ahead; a
                     kernel its compiler refuses is an UnsupportedError with the compiler's first error line)

A MoE problem is {"moe": MoeProblem JSON, "seed", "device"} in place of operands, M, N and K; the provider's operands
must be the problem's format, and the peer must offer it for MoE ("moe_providers").

``run`` is qtune's measuring sequence with the adapter's pack and launch in the middle: qtune's operands (cached per
problem), the adapter's prepare (packed weights cached per weight matrix), poison, one launch, verification against
qtune's CPU reference, and qtune's measure() when the output was right. A wrong answer is a result (passed: false),
not an error, and is never measured.
"""
import argparse
import json
import sys
import time

from qtune_peers import adapters as adapter_registry
from qtune_peers.abi import Abi
from qtune_peers.errors import InputError
from qtune_peers.protocol import serve


def split_provider(provider):
    peer, dash, operands = provider.partition("-")
    if not dash or not peer or not operands:
        raise InputError(f"provider: {provider!r} is no provider; write <peer>-<operands>")
    return peer, operands


class PeerWorker:
    def __init__(self, library, test_peers=False):
        self._library = library
        self._abi = None
        self._abi_error = None
        self.adapters = adapter_registry.adapters(test_peers)
        self._problem_key = None
        self._problem = None

    @property
    def abi(self):
        if self._abi is None:
            if self._abi_error is not None:
                raise self._abi_error
            try:
                self._abi = Abi(self._library)
            except InputError as error:
                self._abi_error = error
                raise
        return self._abi

    def sticky_error(self):
        return self._abi.sticky_error() if self._abi is not None else None

    def adapter(self, peer):
        adapter = self.adapters.get(peer)
        if adapter is None:
            raise InputError(f"provider: no peer {peer!r} (known: {', '.join(sorted(self.adapters))})")
        return adapter

    def describe(self, _params):
        peers = []
        for name in sorted(self.adapters):
            peers.append(self.adapters[name].describe())
        return {"peers": peers, "python": sys.version.split()[0], "executable": sys.executable}

    def _available_adapter(self, provider, moe=False):
        peer, operands = split_provider(provider)
        adapter = self.adapter(peer)
        adapter.require()
        offered_operands = adapter.moe_operands() if moe else adapter.operands()
        if operands not in offered_operands:
            if moe and not offered_operands:
                raise InputError(f"provider {provider!r}: {peer} runs no MoE GEMMs")
            offered = ", ".join(f"{peer}-{name}" for name in offered_operands)
            raise InputError(f"provider {provider!r}: {peer} offers {offered}" + (" for MoE GEMMs" if moe else ""))
        return adapter, operands

    def configurations(self, params):
        problem = params.get("problem", {})
        adapter, operands = self._available_adapter(params["provider"], "moe" in problem)
        if "moe" in problem:
            return {"configurations": adapter.moe_configurations(operands, problem["moe"])}
        return {"configurations": adapter.configurations(operands, problem.get("m", 1), problem.get("n", 0),
                                                         problem.get("k", 0))}

    def heuristic(self, params):
        adapter, operands = self._available_adapter(params["provider"])
        problem = params.get("problem", {})
        return {"configs": adapter.heuristic_configs(operands, problem.get("m", 1), problem.get("n", 0),
                                                     problem.get("k", 0), problem.get("device", 0))}

    def compile(self, params):
        adapter, operands = self._available_adapter(params["provider"])
        problem = params.get("problem", {})
        started = time.monotonic()
        compiled = adapter.compile(operands, problem.get("n", 0), problem.get("k", 0), params.get("config") or {},
                                   problem.get("device", 0))
        return {"compiled": bool(compiled), "seconds": time.monotonic() - started}

    def _problem_for(self, operands, spec):
        if "moe" in spec:
            key = ("moe", json.dumps(spec["moe"], sort_keys=True), spec.get("seed", 1))
        else:
            key = (operands, spec["m"], spec["n"], spec["k"], spec.get("seed", 1))
        if self._problem_key != key:
            if self._problem is not None:
                self._problem.close()
                self._problem = None
            self._problem_key = None
            if "moe" in spec:
                self._problem = self.abi.moe_problem(spec["moe"], spec.get("seed", 1))
            else:
                self._problem = self.abi.problem(operands, spec["m"], spec["n"], spec["k"], spec.get("seed", 1))
            self._problem_key = key
        if self._problem.operands != operands:
            raise InputError(f"problem.moe.format: {self._problem.operands!r} is not the provider's operands {operands!r}")
        return self._problem

    def run(self, params):
        spec = params["problem"]
        adapter, operands = self._available_adapter(params["provider"], "moe" in spec)
        device = spec.get("device", 0)
        if adapter.uses_gpu:
            self.abi.device_info(device)  # opens the device first, so that a fault in the peer is seen as one
        problem = self._problem_for(operands, spec)
        prepared = adapter.prepare(problem, operands, params.get("config") or {}, device)
        output = prepared.output
        if output.on_device:
            self.abi.poison_device(output.address, output.nbytes, device)
        else:
            output.poison()
        prepared.launch(None)
        if output.on_device:
            verification = problem.verify_device(output.address, output.row_stride, device)
        else:
            verification = problem.verify_host(output.host, output.row_stride)
        result = {"provider": params["provider"], "peer_version": adapter.version(), "config": prepared.config,
                  "verification": verification}
        if verification.get("passed") and params.get("measure_time", True):
            result["measurement"] = adapter.measure(self.abi, params.get("measure") or {}, prepared)
        return result


def main(argv):
    parser = argparse.ArgumentParser(prog="qtune_peer_worker.py", description=__doc__.splitlines()[0])
    parser.add_argument("--library", required=True, help="libqtune_peer_abi.so")
    parser.add_argument("--peer-path", action="append", default=[], help="a folder to import peers from")
    parser.add_argument("--test-peers", action="store_true", help="also offer the tests' fake peers")
    parser.add_argument("--fd", type=int, required=True, help="the socket to qtune (started by qtune, not by hand)")
    options = parser.parse_args(argv)
    for path in reversed(options.peer_path):
        sys.path.insert(0, path)
    worker = PeerWorker(options.library, options.test_peers)
    handlers = {"describe": worker.describe, "configurations": worker.configurations, "run": worker.run,
                "heuristic": worker.heuristic, "compile": worker.compile}
    return serve(options.fd, handlers, worker.sticky_error)
