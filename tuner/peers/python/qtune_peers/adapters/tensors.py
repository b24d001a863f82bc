"""qtune's operands as torch tensors, and the stream qtune gives a launch. Imported only by adapters that use torch."""
import contextlib

import torch

_VIEW_AS = {"uint8": torch.uint8, "uint16": torch.int16, "int32": torch.int32, "uint32": torch.int32,
            "float32": torch.float32}


def host_tensor(problem, name):
    """A buffer of the problem as a CPU tensor sharing its memory ([rows, cols]; 16- and 32-bit patterns as int16 and
    int32, which .view() turns into float16/bfloat16)."""
    view, dtype, shape = problem.buffer(name)
    return torch.frombuffer(view, dtype=_VIEW_AS[dtype]).view(shape)


def device_tensor(problem, name, device, as_dtype=None):
    tensor = host_tensor(problem, name).to(f"cuda:{device}")
    return tensor.view(as_dtype) if as_dtype is not None else tensor


def signed_codes(problem, bits, device):
    """The weight codes (two's complement in the low bits) as int32 values on the device, [N][K]."""
    codes = device_tensor(problem, "weight_codes", device).to(torch.int32)
    sign = 1 << (bits - 1)
    return (codes ^ sign) - sign


def float16_type(problem):
    return torch.float16 if problem.output_type == "f16" else torch.bfloat16


def on_stream(stream):
    """The context a launch runs in: qtune's stream (a CUstream as an int) as torch's current stream."""
    if stream is None:
        return contextlib.nullcontext()
    return torch.cuda.stream(torch.cuda.ExternalStream(stream))


def output_of(tensor):
    from qtune_peers.adapters.base import Output
    return Output(address=tensor.data_ptr(), nbytes=tensor.numel() * tensor.element_size(), row_stride=tensor.stride(0))


def require_cuda(adapter):
    if not torch.cuda.is_available():
        raise adapter.unavailable(f"torch {torch.__version__} sees no CUDA device (is it a CUDA build?)")
