"""How a worker failed, in words: the exceptions the parent raises for a dead or silent
worker, and one-line descriptions of the errors a kernel raised inside it."""
from __future__ import annotations

import os
import signal
import traceback


class WorkerTimeout(Exception):
    pass


class WorkerCrash(Exception):
    def __init__(self, exitcode: int | None, detail: str = ""):
        self.exitcode = exitcode
        super().__init__(describe_exit(exitcode) + (f": {detail}" if detail else ""))


def describe_exit(code: int | None) -> str:
    if code is None:
        return "worker process stopped answering"
    if code < 0:
        try:
            return f"worker process killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"worker process killed by signal {-code}"
    return f"worker process exited with code {code}"


def is_cuda_fault(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}"
    return any(s in text for s in ("AcceleratorError", "CUDA error", "illegal memory access", "device-side assert",
                                   "unspecified launch failure", "misaligned address", "CUDA_ERROR"))


def describe_error(exc: BaseException, paths: list[str]) -> str:
    """One line: the error, then the last traceback frame inside the kernel file."""
    text = " ".join(str(exc).split())
    if len(text) > 400:
        text = text[:400] + "..."
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    wanted = {os.path.abspath(p) for p in paths if p}
    where = None
    if isinstance(exc, SyntaxError) and exc.filename and os.path.abspath(exc.filename) in wanted:
        where = f"{os.path.basename(exc.filename)}:{exc.lineno}"
    for frame in traceback.extract_tb(exc.__traceback__):
        if os.path.abspath(frame.filename) in wanted:
            where = f"{os.path.basename(frame.filename)}:{frame.lineno} in {frame.name}: {(frame.line or '').strip()}"
    return f"{line} (at {where})" if where else line
