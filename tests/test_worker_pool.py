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
