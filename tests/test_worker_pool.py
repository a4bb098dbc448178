"""The fresh workers started in the background: topped up to a depth per device, a dead one
replaced, each handed out once."""
from __future__ import annotations

import pytest

from autokernel.harness import worker_client
from autokernel.harness.worker_client import acquire, prestart, release


@pytest.fixture
def pool(monkeypatch):
    monkeypatch.setattr(worker_client, "PRESTART_DEPTH", {"gpu": 2, "cpu": 2})
    monkeypatch.setattr(worker_client, "_fresh", {})
    yield worker_client._fresh
    for worker in worker_client._fresh.get("cpu", []):
        worker.kill()


def test_prestart_keeps_the_depth_and_replaces_a_dead_worker(pool):
    prestart("cpu")
    prestart("cpu")  # already two starting: none more
    assert len(pool["cpu"]) == 2 and all(w.alive for w in pool["cpu"])
    first = pool["cpu"][0]
    got = acquire("cpu")
    assert got is first and got.info.get("ready") and got not in pool["cpu"]
    release(got)
    assert not got.alive
    pool["cpu"][0].kill()  # a worker that died while waiting is dropped, not handed out
    prestart("cpu")
    assert len(pool["cpu"]) == 2 and all(w.alive for w in pool["cpu"])


def test_a_worker_waits_for_no_answer_past_its_deadline():
    """A CPU run's budget was overrun by one experiment longer than the whole budget: every
    request may take ``timeout_s`` (60 s by default), and an evaluation sends dozens.  A worker
    given a deadline (the run's budget's end) waits no longer than it, whatever the request's
    timeout: the worker is killed and the evaluation is a timeout."""
    import time

    from autokernel.harness.worker_client import Worker, WorkerTimeout

    class Silent:  # a worker process that never answers
        def send(self, message):
            pass

        def poll(self, wait):
            time.sleep(wait)
            return False

        def is_alive(self):
            return True

    worker = Worker("cpu")
    worker.proc = worker.conn = Silent()
    killed = []
    worker.kill = lambda: killed.append(True)
    worker.deadline = time.monotonic() + 0.3
    t0 = time.monotonic()
    with pytest.raises(WorkerTimeout):
        worker.request({"op": "call"}, 60.0)
    assert time.monotonic() - t0 < 2.0 and killed


CTRL_C_WHILE_STARTING = """
import os, signal, sys, threading, time
# a terminal's foreground process: Ctrl-C raises KeyboardInterrupt.  Started from a background job
# (`.ci/run &` in a script: a shell without job control starts it with SIGINT ignored, and every
# process under it inherits that), this process would never see the interrupt
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
from autokernel.harness.worker_client import Worker

worker = Worker("cpu")
# Ctrl-C reaches the whole process group, the forkserver too, while it is still importing torch
threading.Timer(0.4, lambda: os.killpg(os.getpgid(0), signal.SIGINT)).start()
try:
    worker.start()
    time.sleep(5)  # the interrupt is due any moment: it never lands in this process otherwise
except KeyboardInterrupt:
    print("interrupted")
    sys.exit(130)
"""


def test_ctrl_c_while_the_first_worker_starts_is_the_parents_alone():
    """New-user trial: Ctrl-C in the first seconds of `bench` or `arena` hit the forkserver while
    it imported torch (it ignores SIGINT only after): its traceback was printed, and the arena
    stored the EOFError the parent then got as the problem's judge error and went on."""
    import os
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", CTRL_C_WHILE_STARTING], capture_output=True, text=True,
                          timeout=60, start_new_session=True, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert proc.returncode == 130 and proc.stdout.strip() == "interrupted", (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
