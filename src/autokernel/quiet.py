"""Keep native libraries' noise off the terminal.

The PyTorch profiler's C++ side writes ``USDT: ... profiler_start`` / ``profiler_stop`` lines
straight to file descriptor 2, past Python.  ``filtered_stderr`` points fd 2 at a temporary file
for the duration of a block and then writes back every line except those noise lines, so real
errors still reach the terminal.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
from typing import Iterator

NOISE = re.compile(r"^USDT:.*\b(profiler_start|profiler_stop)\b")
# NumPy's warnings from the Triton interpreter: overflow (a kernel computing in fp16/bf16 casts),
# invalid values and division by zero (inf - inf, 0 / 0 on a masked lane: the kernel's own
# masking decides what is stored, and the judge checks the result)
INTERPRETER_MESSAGES = ("overflow encountered", "invalid value encountered", "divide by zero encountered")
INTERPRETER_WARNING = ",".join(f"ignore:{m}:RuntimeWarning" for m in INTERPRETER_MESSAGES)


def keep_line(line: str) -> bool:
    return not NOISE.match(line)


@contextlib.contextmanager
def filtered_stderr() -> Iterator[None]:
    fd = 2  # the native code writes to the descriptor, whatever sys.stderr is
    try:
        sys.stderr.flush()
    except (AttributeError, ValueError, OSError):
        pass
    saved = os.dup(fd)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), fd)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            except (AttributeError, ValueError, OSError):
                pass
            os.dup2(saved, fd)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode("utf-8", "replace")
            kept = "".join(line for line in text.splitlines(keepends=True) if keep_line(line))
            if kept:
                os.write(fd, kept.encode())


def silence_interpreter_warnings() -> None:
    """In this process and the worker processes it starts."""
    import warnings

    for message in INTERPRETER_MESSAGES:
        warnings.filterwarnings("ignore", message=message, category=RuntimeWarning)
    current = os.environ.get("PYTHONWARNINGS", "")
    if INTERPRETER_WARNING not in current:
        os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [current, INTERPRETER_WARNING]))


# transformers' notice when its XIELUActivation finds no CUDA extension (two lines and an install
# command, at every hf:apertus build): autokernel puts its own xielu kernel in the module's place
XIELU_NOTICE = "CUDA-fused xIELU not available"


def _not_xielu_notice(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(XIELU_NOTICE)


def silence_xielu_notice() -> None:
    """Drop that notice from transformers' activations logger (every other message kept)."""
    logger = logging.getLogger("transformers.activations")
    if _not_xielu_notice not in logger.filters:
        logger.addFilter(_not_xielu_notice)


@contextlib.contextmanager
def quiet_config_warnings() -> Iterator[None]:
    """transformers' config warnings while autokernel reads an architecture's default config,
    which the user never asked for: Starcoder2's own default puts bos and eos (50256) outside its
    49152-token vocabulary, and its validation warned twice at every hf:starcoder2 build, naming
    that vocabulary whatever --config vocab_size said.  Errors still show."""
    logger = logging.getLogger("transformers.configuration_utils")
    previous = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(previous)


# What multiprocessing's resource-sharer thread (which hands tensors' file descriptors to a worker)
# raises when the worker it was serving died mid-handshake: a worker stopped by the same Ctrl-C or
# SIGTERM as the run.  Nothing is lost; the loop has its own account of the stop.
_PEER_GONE = (ConnectionError, EOFError, KeyError, OSError)


def is_dead_peer_noise(exc_type: type | None, tb) -> bool:
    """Is this a resource-sharer thread's error for a peer that went away?"""
    if exc_type is None or not issubclass(exc_type, _PEER_GONE):
        return False
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.replace("\\", "/").endswith("multiprocessing/resource_sharer.py"):
            return True
        tb = tb.tb_next
    return False


def silence_dead_peer_threads() -> None:
    """Keep the resource-sharer's tracebacks for dead workers off the terminal (its thread
    reports its errors through ``sys.excepthook``); every other error is printed as before."""
    previous = sys.excepthook
    if getattr(previous, "_autokernel", False):
        return

    def hook(exc_type, value, tb) -> None:
        if is_dead_peer_noise(exc_type, tb):
            return
        previous(exc_type, value, tb)

    hook._autokernel = True
    sys.excepthook = hook
