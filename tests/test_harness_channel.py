"""The worker's answers carry a secret the parent drew for the request (CPU, Triton interpreter).
The kernel runs in the worker and can write framed answers on the worker's socket:
tests/attacks/reduce_forged_reply.py, with the fingerprint digest read off the worker's objects,
had its forged answer taken for the worker's (every later answer then stood one request behind);
it ended "incorrect" by luck of the request order, not by a rule."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_harness_attacks import judge_attack, no_static_checks, rules  # noqa: E402,F401  (a fixture among them)

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")


@pytest.mark.parametrize("digest_from_memory", [False, True])
def test_an_answer_the_kernel_wrote_on_the_workers_socket_is_refused(no_static_checks, tmp_path, digest_from_memory):
    result = judge_attack(tmp_path, "reduce_forged_reply.py",
                          ("DIGEST_FROM_MEMORY = False", f"DIGEST_FROM_MEMORY = {digest_from_memory}"))
    assert result.verdict == "rejected" and "monkey-patch" in rules(result), result.message
    assert "answer channel" in result.message and result.failed_stage == "smoke", result.message
