"""What every adapter has: its peer's name, the operands it runs, what to install, and the steps qtune calls.

An adapter packs qtune's operands with its peer's own helpers and launches the peer's kernel; it never quantizes
(qtune's quantizer made the operands, so that qtune's CPU reference checks the very same values), never times and
never verifies (qtune does both)."""
import importlib
import importlib.metadata

from qtune_peers.errors import InputError, PeerUnavailable


class Output:
    """Where a launch writes C[M][N] (f16 or bf16 patterns, rows ``row_stride`` elements apart)."""

    def __init__(self, address=0, nbytes=0, row_stride=0, host=None):
        self.address = address
        self.nbytes = nbytes
        self.row_stride = row_stride
        self.host = host  # a bytearray for host-side providers

    @property
    def on_device(self):
        return self.host is None

    def poison(self):
        self.host[:] = b"\xff" * len(self.host)


class Prepared:
    """One configuration ready to launch: ``launch(stream)`` enqueues the GEMM on ``stream`` (a CUstream as an int,
    or None for the current stream) and does not synchronise."""

    def __init__(self, config, output, launch):
        self.config = config
        self.output = output
        self._launch = launch

    def launch(self, stream):
        self._launch(stream)


class Adapter:
    peer = ""
    module = ""           # the peer's module that probe() imports
    install = ""          # one line: what to install, and where qtune looks
    uses_gpu = True

    def __init__(self):
        self._probed = None  # (version, None) or (None, PeerUnavailable)

    # ---- what a subclass provides
    def check(self, module):
        """Checks that the imported peer has the API the adapter calls; returns its version, or raises
        self.unavailable(...) saying what is wrong."""
        raise NotImplementedError

    def operands(self):
        """The operands it runs: canonical qtune format texts, or "f16" / "bf16"."""
        raise NotImplementedError

    def configurations(self, operands, m, n, k):
        """The peer's own choices for a problem, its default first."""
        return [{}]

    def heuristic_configs(self, operands, m, n, k, device):
        """The peer's own rules for the layer of (operands, N, K) over every M: [[m_lo, m_hi, config], ...] (a GEMM with
        m_lo < M <= m_hi runs config), so that their kernels can be built ahead; [] for a peer without such rules."""
        return []

    def compile(self, operands, n, k, config, device):
        """Builds the kernel `config` runs for the layer (operands, N, K) into the peer's own cache, without launching
        it, so that a later run finds it built; raises UnsupportedError with the compiler's first error line when the
        peer's compiler refuses it. Returns False for a peer that builds nothing ahead."""
        return False

    def moe_operands(self):
        """The operands it runs MoE GEMMs in (a problem with ``is_moe``); none unless the adapter says so."""
        return []

    def moe_configurations(self, operands, moe):
        """The peer's own choices for a MoE problem (``moe``: MoeProblem JSON), its default first."""
        return [{}]

    def prepare(self, problem, operands, config, device):
        """Packs ``problem``'s operands for ``config`` and returns a Prepared whose output is the problem's [m][n]
        (for a MoE problem, the output peer_abi.h defines: the down projection's top-k weighted sum included)."""
        raise NotImplementedError

    def measure(self, abi, options, prepared):
        """qtune's measure() of the prepared launch (CUPTI, cold L2, statistics, NVML); only the tests' host-side
        fake peer times itself otherwise."""
        return abi.measure(options, prepared.launch)

    # ---- shared
    def probe(self):
        """Imports the peer and checks it; returns its version, or raises PeerUnavailable saying what is missing."""
        version = self.check(self.import_peer(self.module))
        if self.uses_gpu:
            from qtune_peers.adapters.tensors import require_cuda
            require_cuda(self)
        return version

    def unavailable(self, problem):
        return PeerUnavailable(self.peer, problem, self.install)

    def import_peer(self, module):
        try:
            return importlib.import_module(module)
        except ImportError as error:
            raise self.unavailable(f"{self.peer} is not importable ({type(error).__name__}: {error})") from error
        except Exception as error:  # noqa: BLE001  (a broken install is unavailable too)
            raise self.unavailable(f"importing {module} failed ({type(error).__name__}: {error})") from error

    def version(self):
        if self._probed is None:
            try:
                self._probed = (self.probe(), None)
            except PeerUnavailable as error:
                self._probed = (None, error)
        return self._probed[0] or ""

    def require(self):
        self.version()
        if self._probed[1] is not None:
            raise self._probed[1]

    def describe(self):
        self.version()
        error = self._probed[1]
        return {"peer": self.peer, "available": error is None, "version": self._probed[0] or "",
                "problem": error.problem if error else "", "install": self.install,
                "providers": [f"{self.peer}-{operands}" for operands in self.operands()],
                "moe_providers": [f"{self.peer}-{operands}" for operands in self.moe_operands()]}

    def refuse_config(self, config, known):
        unknown = sorted(set(config) - set(known))
        if unknown:
            raise InputError(f"config: {self.peer} has no setting {unknown[0]!r} (it has: {', '.join(sorted(known))})")


def distribution_version(*names):
    """The installed version of the first distribution found, or ""."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""
