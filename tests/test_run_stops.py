"""A run stopped by SIGTERM or killed outright: SIGTERM (``timeout``, a scheduler's time limit,
``docker stop``) stops it as Ctrl-C does, and the time spent is on disk while the loop runs, so
that a resumed run gets what was left of its budget (a new user's SIGTERM and ``kill -9`` runs
resumed with the whole budget again)."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest

from autokernel.loop import interrupts
from autokernel.pipeline import SpentRecorder


def test_sigterm_raises_keyboard_interrupt_inside_the_block_and_counts_as_a_press():
    with pytest.raises(KeyboardInterrupt):
        with interrupts.terminate_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
    before = interrupts.pressed()
    with pytest.raises(KeyboardInterrupt):
        with interrupts.watching():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
    assert interrupts.pressed() == before + 1
    # a row being written is not cut: the SIGTERM is held until it is, then raised
    with pytest.raises(KeyboardInterrupt):
        with interrupts.holding():
            os.kill(os.getpid(), signal.SIGTERM)
            written = True
    assert written
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # each block put the handler back


def test_the_time_spent_is_written_while_the_loop_runs(tmp_path):
    run_path = tmp_path / "run.json"
    record = {"model": "llama", "spent_s": 30.0}
    t0 = time.monotonic()
    with SpentRecorder(run_path, record, 30.0, t0, every_s=0.05):
        deadline = time.monotonic() + 5
        while not run_path.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        first = json.loads(run_path.read_text())["spent_s"]  # on disk before the block ends
        time.sleep(0.3)
        later = json.loads(run_path.read_text())["spent_s"]
    assert 30.0 < first < later
    final = json.loads(run_path.read_text())
    assert final["model"] == "llama" and final["spent_s"] >= later


def test_a_resource_sharer_thread_losing_its_dead_worker_prints_nothing(capsys):
    """multiprocessing's resource sharer served a worker killed by the same SIGTERM: its
    ConnectionResetError traceback reached the terminal before "interrupted; run the same command
    again".  Other errors still print."""
    import sys
    import threading
    from multiprocessing import resource_sharer

    from autokernel.quiet import silence_dead_peer_threads

    class Closing:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def recv(self):
            return None  # the sharer's stop message

    class DeadPeerOnce:
        calls = 0

        def accept(self):
            self.calls += 1
            if self.calls == 1:
                raise ConnectionResetError(104, "Connection reset by peer")
            return Closing()

    saved = sys.excepthook
    try:
        silence_dead_peer_threads()
        server = resource_sharer._ResourceSharer.__new__(resource_sharer._ResourceSharer)
        server._listener, server._cache, server._lock = DeadPeerOnce(), {}, threading.Lock()
        t = threading.Thread(target=server._serve, daemon=True)
        t.start()
        t.join(10)
        assert not t.is_alive() and server._listener.calls == 2
        assert "ConnectionResetError" not in capsys.readouterr().err
        try:
            raise ValueError("a real error")
        except ValueError:
            sys.excepthook(*sys.exc_info())
        assert "a real error" in capsys.readouterr().err
    finally:
        sys.excepthook = saved
