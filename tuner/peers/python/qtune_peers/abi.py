"""qtune's measuring library through its C ABI (tuner/peers/peer_abi.h), loaded with ctypes: no build against any
Python. What an adapter gets from it: the problem's operands as qtune's quantizer made them, the output poison,
verification against qtune's CPU reference, and measure() (CUPTI, cold L2, warm-up, statistics, NVML)."""
import ctypes
import json

from qtune_peers.errors import AbiError, InputError

ABI_VERSION = 2

_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64)

# Element sizes of the buffers' dtypes, and their struct/array codes.
DTYPE_BYTES = {"uint8": 1, "uint16": 2, "int32": 4, "uint32": 4, "float32": 4}
_ARRAY_CODES = {"uint8": "B", "uint16": "H", "int32": "i", "uint32": "I", "float32": "f"}


class Problem:
    """Random operands of one GEMM made by qtune; ``description`` is qtune_peer_problem_describe's JSON.

    A MoE problem (``is_moe``) has ``tokens``, ``top_k``, ``experts``, ``projection``, ``input_rows`` and the touched
    experts' ids (``experts_touched``); ``m`` is its output's rows (gate-up: tokens * top_k pair rows; down: tokens,
    after the router-weighted top-k sum; peer_abi.h)."""

    def __init__(self, abi, handle):
        self._abi = abi
        self._handle = handle
        self.description = json.loads(abi._call_text(abi._lib.qtune_peer_problem_describe, handle))
        self.operands = self.description["operands"]
        self.m = self.description["m"]
        self.n = self.description["n"]
        self.k = self.description["k"]
        self.format = self.description["format"]  # FormatSpec JSON, None for dense f16/bf16 problems
        self.output_type = self.description["output_type"]
        self.is_moe = self.description.get("kind") == "moe"
        if self.is_moe:
            self.moe = self.description["moe"]
            self.tokens = self.description["tokens"]
            self.top_k = self.description["top_k"]
            self.experts = self.description["experts"]
            self.projection = self.description["projection"]
            self.input_rows = self.description["input_rows"]
            self.experts_touched = list(self.description["experts_touched"])

    @property
    def handle(self):
        if self._handle is None:
            raise InputError("problem: already closed")
        return self._handle

    def has(self, name):
        lazy = name in ("activation_values", "weight_values") or name.endswith(".weight_values")
        return name in self.description["buffers"] or lazy

    @staticmethod
    def expert_buffer(expert, name):
        """The name of a MoE problem's buffer of one touched expert: expert_buffer(17, "weight_codes")."""
        return f"expert{expert}.{name}"

    def buffer(self, name):
        """(memoryview of the bytes, dtype, (rows, cols)); the memory stays valid while the problem is open."""
        data = ctypes.c_void_p()
        size = ctypes.c_size_t()
        self._abi._check(self._abi._lib.qtune_peer_problem_buffer(self.handle, name.encode(), ctypes.byref(data),
                                                                  ctypes.byref(size)))
        info = self.description["buffers"].get(name)
        if info is None:  # the dequantized values are described once made
            self.description = json.loads(self._abi._call_text(self._abi._lib.qtune_peer_problem_describe,
                                                               self.handle))
            info = self.description["buffers"][name]
        array = (ctypes.c_char * size.value).from_address(data.value) if size.value else bytearray()
        return memoryview(array).cast("B"), info["dtype"], tuple(info["shape"])

    def values(self, name):
        """A buffer as a flat Python list (for host-side test providers on small problems)."""
        view, dtype, _ = self.buffer(name)
        return list(view.cast(_ARRAY_CODES[dtype]))

    def verify_device(self, address, row_stride, device=0):
        return json.loads(self._abi._call_text(self._abi._lib.qtune_peer_verify_device, self.handle,
                                               ctypes.c_uint64(address), ctypes.c_int64(row_stride), device))

    def verify_host(self, output, row_stride):
        """Checks an [M][N] output of 16-bit patterns in a writable bytes-like object (bytearray, array); M is ``m``
        (a MoE problem's output rows)."""
        buffer = (ctypes.c_char * len(output)).from_buffer(output)
        return json.loads(self._abi._call_text(self._abi._lib.qtune_peer_verify_host, self.handle, buffer,
                                               ctypes.c_int64(row_stride)))

    def close(self):
        if self._handle is not None:
            self._abi._lib.qtune_peer_problem_destroy(self._handle)
            self._handle = None

    def __del__(self):
        self.close()


class Abi:
    """libqtune_peer_abi.so; raises AbiError (with the C++ error's type) for everything the library refuses."""

    def __init__(self, path):
        try:
            self._lib = ctypes.CDLL(path)
        except OSError as error:
            raise InputError(f"QTUNE_PEERS_DIR: qtune's C ABI library {path!r} could not be loaded: {error}")
        lib = self._lib
        lib.qtune_peer_abi_version.restype = ctypes.c_int
        lib.qtune_peer_last_error.restype = ctypes.c_char_p
        lib.qtune_peer_problem_create.restype = ctypes.c_void_p
        lib.qtune_peer_problem_create.argtypes = [ctypes.c_char_p]
        lib.qtune_peer_problem_destroy.argtypes = [ctypes.c_void_p]
        lib.qtune_peer_problem_describe.restype = ctypes.c_char_p
        lib.qtune_peer_problem_describe.argtypes = [ctypes.c_void_p]
        lib.qtune_peer_problem_buffer.restype = ctypes.c_int
        lib.qtune_peer_problem_buffer.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p),
                                                  ctypes.POINTER(ctypes.c_size_t)]
        lib.qtune_peer_poison_device.restype = ctypes.c_int
        lib.qtune_peer_poison_device.argtypes = [ctypes.c_uint64, ctypes.c_size_t, ctypes.c_int]
        lib.qtune_peer_verify_device.restype = ctypes.c_char_p
        lib.qtune_peer_verify_device.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int64, ctypes.c_int]
        lib.qtune_peer_verify_host.restype = ctypes.c_char_p
        lib.qtune_peer_verify_host.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        lib.qtune_peer_measure.restype = ctypes.c_char_p
        lib.qtune_peer_measure.argtypes = [ctypes.c_char_p, _LAUNCH, ctypes.c_void_p]
        lib.qtune_peer_sticky_error.restype = ctypes.c_char_p
        lib.qtune_peer_device_info.restype = ctypes.c_char_p
        lib.qtune_peer_device_info.argtypes = [ctypes.c_int]
        version = lib.qtune_peer_abi_version()
        if version != ABI_VERSION:
            raise InputError(f"QTUNE_PEERS_DIR: {path!r} speaks ABI version {version}, this package {ABI_VERSION}: "
                             "use the library and the Python package of one qtune build")

    def _error(self):
        return AbiError(json.loads(self._lib.qtune_peer_last_error().decode("utf-8", "replace")))

    def _check(self, status):
        if status != 0:
            raise self._error()

    def _call_text(self, function, *args):
        text = function(*args)
        if text is None:
            raise self._error()
        return text.decode("utf-8", "replace")

    def problem(self, operands, m, n, k, seed=1):
        request = json.dumps({"operands": operands, "m": m, "n": n, "k": k, "seed": seed}).encode()
        handle = self._lib.qtune_peer_problem_create(request)
        if not handle:
            raise self._error()
        return Problem(self, handle)

    def moe_problem(self, moe, seed=1):
        """qtune's operands of a MoE problem (``moe``: MoeProblem JSON, as qtune sends it) for the operands' seed."""
        request = json.dumps({"moe": moe, "seed": seed}).encode()
        handle = self._lib.qtune_peer_problem_create(request)
        if not handle:
            raise self._error()
        return Problem(self, handle)

    def poison_device(self, address, nbytes, device=0):
        self._check(self._lib.qtune_peer_poison_device(ctypes.c_uint64(address), nbytes, device))

    def measure(self, options, launch):
        """qtune's measure() of ``launch(stream)`` (stream: a CUstream as an int). An exception the launch raises
        ends the measurement and is raised here."""
        failures = []

        def launch_once(_user_data, stream):
            try:
                launch(stream)
                return 0
            except BaseException as error:  # noqa: BLE001  (it must not unwind through C)
                failures.append(error)
                return 1

        callback = _LAUNCH(launch_once)
        text = self._lib.qtune_peer_measure(json.dumps(options).encode(), callback, None)
        if failures:
            raise failures[0]
        if text is None:
            raise self._error()
        return json.loads(text.decode("utf-8", "replace"))

    def sticky_error(self):
        text = self._lib.qtune_peer_sticky_error()
        return None if text is None else text.decode("utf-8", "replace")

    def device_info(self, device=0):
        return json.loads(self._call_text(self._lib.qtune_peer_device_info, device))
