"""Errors with the worker protocol's error types (tuner/measure/worker.hpp): qtune maps InputError to exit status 2,
NoGpuError to 3, anything else to 1."""


class QtuneError(Exception):
    error_type = "Error"
    library = ""


class InputError(QtuneError):
    error_type = "InputError"


class UnsupportedError(QtuneError):
    error_type = "UnsupportedError"


class PeerUnavailable(InputError):
    """A peer that is not importable, or of a version its adapter does not understand: one line naming the peer and
    what to install."""

    def __init__(self, peer, problem, install):
        super().__init__(f"{problem}; {install}")
        self.peer = peer
        self.problem = problem
        self.install = install


class AbiError(QtuneError):
    """A failure qtune's C ABI reported: its message, error type and library as the C++ side threw them."""

    def __init__(self, info):
        super().__init__(info.get("error", "qtune's C ABI failed without saying why"))
        self.error_type = info.get("error_type", "Error")
        self.library = info.get("library", "")
