"""The worker's per-call checks read no function's ``__code__`` and call no ``id()``: each is an
audit event that ran the judge's audit hook, 1525 and 240 of them a call (the fingerprint after
every call took 1.0-1.4 ms with the hook armed, 0.27 ms without).  Code swaps are seen through
the hook's record of every ``__code__`` set instead (``host_reads.code_sets_reader``; the record
itself is in the hook's closure)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_harness_attacks import judge_attack, no_static_checks, rules  # noqa: E402,F401  (a fixture among them)

SRC = Path(__file__).resolve().parent.parent / "src"


def _in_a_worker_like_process(body: str) -> str:
    """Run ``body`` in a fresh interpreter with the judge's audit hook installed, as the worker
    has it (the hook cannot be removed: not in the test process)."""
    script = textwrap.dedent("""
        import sys, collections
        counts = collections.Counter()
        sys.addaudithook(lambda event, args: counts.__setitem__(event, counts[event] + 1))
        import torch, triton, triton.language
        from autokernel.harness import host_reads, integrity, launches
        from autokernel.harness.hooks import outside_hooks
        from autokernel.harness.worker_main import _import_problem_modules
        host_reads.install(launches.install(), ())
        _import_problem_modules()
        watch = integrity.FingerprintWatch()
    """) + textwrap.dedent(body)
    env = dict(os.environ, PYTHONPATH=str(SRC))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_a_swapped_code_is_seen_through_the_audit_record_and_the_checks_read_no_code():
    out = _in_a_worker_like_process("""
        import types
        from autokernel.problems import base
        original = base.randn.__code__
        assert watch.held() and watch.unchanged()
        counts.clear()
        watch.held(); outside_hooks()
        print("events", counts["object.__getattr__"], counts["builtins.id"])
        base.randn.__code__ = (lambda shape, dtype, device, gen, scale=1.0, offset=0.0: None).__code__
        print("plain", watch.held(), watch.unchanged(), watch.changed_names())
        base.randn.__code__ = original
        print("restored", watch.held(), watch.unchanged())
        types.FunctionType.__code__.__set__(base.randn, (lambda *a, **k: None).__code__)
        print("descriptor", watch.held(), watch.unchanged())
        base.randn.__code__ = original
        base.randn.__code__ = (lambda shape, dtype, device, gen, scale=1.0, offset=0.0: None).__code__
        for value in list(vars(host_reads).values()):  # every list the module holds, the swap taken out
            if type(value) is list:
                value[:] = [e for e in value if not (type(e) is tuple and e and e[0] is base.randn)]
        print("record forged", watch.held())
        base.randn.__code__ = original
    """)
    lines = dict(line.rsplit(" ", 1) if line.startswith("record ") else line.split(" ", 1)
                 for line in out.strip().splitlines())
    getattr_events, id_events = map(int, lines["events"].split())
    assert getattr_events < 10 and id_events < 10, out  # 1149 code reads and ~70 ids before
    assert lines["plain"].startswith("False False") and "autokernel.problems.base.randn.__code__" in lines["plain"]
    assert lines["restored"] == "True True"
    assert lines["descriptor"] == "False False"
    assert lines["record forged"] == "False"  # the record is the audit hook's alone


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")
@pytest.mark.parametrize("assign", ["plain", "descriptor"])
def test_a_kernel_that_swaps_the_code_of_the_judges_draw_helper_is_caught(no_static_checks, tmp_path, assign):
    result = judge_attack(tmp_path, "reduce_draw_code_swap.py", ('ASSIGN = "plain"', f'ASSIGN = "{assign}"'))
    assert result.verdict == "rejected" and "monkey-patch" in rules(result), result.message
    assert "randn" in result.message and result.failed_stage == "smoke", result.message
