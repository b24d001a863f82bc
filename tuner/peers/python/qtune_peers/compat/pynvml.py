"""The few NVML calls Humming's heuristics make (GPU name, memory bus width, highest clocks, compute capability),
through ctypes on the driver's libnvidia-ml.so.1. Used only when nvidia-ml-py (pynvml) is not installed."""
import ctypes

NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
_NVML_ERROR_FUNCTION_NOT_FOUND = 13
_library = None


class NVMLError(Exception):
    def __init__(self, code, function):
        super().__init__(f"{function} failed with NVML error {code}")
        self.value = code


class NVMLError_FunctionNotFound(NVMLError):  # noqa: N801  (pynvml's name)
    pass


def _call(name, *args):
    function = getattr(_library, name, None)
    if function is None:
        raise NVMLError_FunctionNotFound(_NVML_ERROR_FUNCTION_NOT_FOUND, name)
    code = function(*args)
    if code == _NVML_ERROR_FUNCTION_NOT_FOUND:
        raise NVMLError_FunctionNotFound(code, name)
    if code != 0:
        raise NVMLError(code, name)


def nvmlInit():  # noqa: N802
    global _library
    if _library is None:
        _library = ctypes.CDLL("libnvidia-ml.so.1")
    _call("nvmlInit_v2")


def nvmlShutdown():  # noqa: N802
    _call("nvmlShutdown")


def nvmlDeviceGetHandleByIndex(index):  # noqa: N802
    handle = ctypes.c_void_p()
    _call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(handle))
    return handle


def nvmlDeviceGetName(handle):  # noqa: N802
    name = ctypes.create_string_buffer(96)
    _call("nvmlDeviceGetName", handle, name, ctypes.c_uint(len(name)))
    return name.value.decode()


def nvmlDeviceGetMemoryBusWidth(handle):  # noqa: N802
    width = ctypes.c_uint()
    _call("nvmlDeviceGetMemoryBusWidth", handle, ctypes.byref(width))
    return width.value


def nvmlDeviceGetMaxClockInfo(handle, clock_type):  # noqa: N802
    clock = ctypes.c_uint()
    _call("nvmlDeviceGetMaxClockInfo", handle, ctypes.c_int(clock_type), ctypes.byref(clock))
    return clock.value


def nvmlDeviceGetCudaComputeCapability(handle):  # noqa: N802
    major, minor = ctypes.c_int(), ctypes.c_int()
    _call("nvmlDeviceGetCudaComputeCapability", handle, ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value
