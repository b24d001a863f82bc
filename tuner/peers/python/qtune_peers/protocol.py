"""qtune's worker protocol (tuner/measure/worker.hpp), the worker's side, in Python:

    worker -> parent, once:  {"ready": true, "pid": 123, "jobs": ["describe", ...]}
    parent -> worker:        {"id": 7, "job": "run", "params": {...}}
    worker -> parent:        {"id": 7, "status": "ok", "result": {...}}
                          or {"id": 7, "status": "error" | "fault", "error": "...", "error_type": "InputError", ...}

After a sticky CUDA error the worker answers "fault" and exits with status 3; malformed input ends it with status 4.
"""
import json
import math
import os
import select
import socket
import threading
import time
import traceback

EXIT_AFTER_FAULT = 3
EXIT_PROTOCOL_ERROR = 4


def json_safe(value):
    """The value with every NaN and infinity as null: JSON has neither, and qtune's parser refuses Python's
    NaN/Infinity words."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def encode(message):
    return (json.dumps(json_safe(message), allow_nan=False, separators=(",", ":")) + "\n").encode()


def error_fields(error):
    """The protocol's error fields for an exception: qtune's own errors keep their type, anything else is
    'exception' with its class name and the line that raised it."""
    error_type = getattr(error, "error_type", None)
    if error_type is None:
        frames = traceback.extract_tb(error.__traceback__)
        where = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
        return {"error": f"{type(error).__name__}: {error}{where}", "error_type": "exception"}
    fields = {"error": str(error), "error_type": error_type}
    if getattr(error, "library", ""):
        fields["library"] = error.library
    return fields


def watch_parent(sock):
    """Ends the process when the parent goes away (its end of the socket hangs up, or this process is
    re-parented), even in the middle of a job, as qtune's C++ worker does."""
    parent = os.getppid()

    def watch():
        poller = select.poll()
        poller.register(sock.fileno(), getattr(select, "POLLRDHUP", 0x2000))
        while True:
            for _, events in poller.poll(500):
                if events & (getattr(select, "POLLRDHUP", 0x2000) | select.POLLHUP | select.POLLERR):
                    os._exit(0)
            if os.getppid() != parent:
                os._exit(EXIT_PROTOCOL_ERROR)

    threading.Thread(target=watch, daemon=True).start()


def serve(fd, handlers, sticky_error=lambda: None):
    """Answers requests on socket ``fd`` with ``handlers`` (job name -> function(params) -> result) until the parent
    closes it; returns the exit status. ``sticky_error()`` says whether the CUDA context broke (the process exits)."""
    sock = socket.socket(fileno=fd)
    watch_parent(sock)
    sock.sendall(encode({"ready": True, "pid": os.getpid(), "jobs": sorted(handlers)}))
    reader = sock.makefile("rb")
    for line in reader:
        try:
            request = json.loads(line)
            request_id = request.get("id", 0)
            job = request.get("job", "")
            params = request.get("params") or {}
        except (ValueError, AttributeError) as error:
            sock.sendall(encode({"status": "error", "error": f"malformed request: {error}", "error_type": "Error"}))
            return EXIT_PROTOCOL_ERROR
        response = {"id": request_id}
        started = time.monotonic()
        try:
            handler = handlers.get(job)
            if handler is None:
                response.update(status="error", error_type="InputError",
                                error=f"job: unknown job {job!r}; this worker knows: {', '.join(sorted(handlers))}")
            else:
                response.update(status="ok", result=handler(params))
        except Exception as error:  # noqa: BLE001  (every failure is an answer)
            response.update(status="error", **error_fields(error))
        sticky = sticky_error()
        if sticky:
            response.pop("result", None)
            response["status"] = "fault"
            if "error" not in response:
                response.update(error=sticky, error_type="DriverError", library="CUDA driver")
        response["seconds"] = time.monotonic() - started
        sock.sendall(encode(response))
        if sticky:
            return EXIT_AFTER_FAULT
    return 0
