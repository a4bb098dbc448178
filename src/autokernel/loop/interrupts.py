"""Ctrl-C (or SIGTERM: ``timeout``, a batch scheduler's time limit, ``docker stop``) while the
loop runs: counted, and held back while a row is being written.

The loop reads ``pressed()`` before an experiment and passes it to ``holding`` around the
write of its row: a Ctrl-C that came in between means the experiment is not recorded (its
evaluation worker may have died from the same signal, which is no crash of the kernel)."""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

_PRESSES = [0]  # Ctrl-C presses seen while a loop is running


def pressed() -> int:
    return _PRESSES[0]


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _on_sigint(signum, frame):
    _PRESSES[0] += 1
    raise KeyboardInterrupt


@contextmanager
def watching():
    """Count Ctrl-C presses (and raise KeyboardInterrupt as usual) inside the block."""
    if not _in_main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _on_sigint)
    previous_term = signal.signal(signal.SIGTERM, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, previous_term)


@contextmanager
def terminate_as_interrupt():
    """SIGTERM raises KeyboardInterrupt inside the block, as Ctrl-C does (main thread only)."""
    if not _in_main_thread():
        yield
        return

    def on_term(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def holding(presses_before: int | None = None):
    """Hold Ctrl-C until the block is done, then raise it.  When Ctrl-C was pressed since
    ``presses_before`` was read, raise KeyboardInterrupt before the block runs."""
    if not _in_main_thread():
        if presses_before is not None and _PRESSES[0] != presses_before:
            raise KeyboardInterrupt
        yield
        return
    pending: list[bool] = []

    def hold(signum, frame):
        _PRESSES[0] += 1
        pending.append(True)

    previous = signal.signal(signal.SIGINT, hold)
    previous_term = signal.signal(signal.SIGTERM, hold)
    try:
        if presses_before is not None and _PRESSES[0] != presses_before:
            raise KeyboardInterrupt
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, previous_term)
        if pending:
            raise KeyboardInterrupt
