"""Ninth red-team pass on the judge (CPU, Triton interpreter): attacks that passed ``autokernel
bench`` with the static checks on, and what catches them now (each test here failed before its
fix).  tests/attacks_open/README.md has the pass's notes."""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

from autokernel.harness import Evaluator
from autokernel.problems.registry import get_problem, list_kinds

sys.path.insert(0, str(Path(__file__).parent))
from test_harness_attacks import ATTACKS, REDUCE_STARTER, no_static_checks, rules  # noqa: E402,F401  (a fixture)
from test_harness_integrity import rules as static_rules  # noqa: E402
from test_harness_attacks_pass8 import row_sums_off_the_callers_thread  # noqa: E402

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")

SCALE_ATTACK = "attention_pass9_scale_given_no_max.py"


def _form(args: tuple) -> list[str]:
    """What a kernel can tell about a call without reading a value: how many arguments, and
    which are tensors (of which dtype), numbers, flags or None."""
    return [str(a.dtype) if isinstance(a, torch.Tensor) else type(a).__name__ for a in args]


@pytest.mark.parametrize("kind", list_kinds())
def test_numerics_cases_pass_their_arguments_in_a_form_regular_draws_take(kind):
    """The attention kinds' numerics cases (large and tiny logits, layouts...) left ``scale`` out,
    which no regular draw does and the model's op never does: a kernel counting its arguments
    knew which calls judge its numerics, and dropped the running max whenever ``scale`` was
    given (SCALE_ATTACK passed).  Every case must take, at every position, a form some regular
    draw takes there (None and a float both, where the regular draws pass both)."""
    problem = get_problem(kind)
    if problem.adversarial_inputs is None:
        pytest.skip("no numerics cases")
    # every shape: the forms can hang on its flags (attention_masked's fp32-mask case, at additive
    # shapes only, passed the one fp32 mask with bf16 q until regular draws passed them too)
    for shape in problem.shapes_for("cpu"):
        for dtype in problem.dtypes:
            regular = [_form(problem.make_inputs(dict(shape), dtype, "cpu", seed)) for seed in range(12)]
            per_position = [set(column) for column in zip(*regular)]
            assert all(len(f) == len(regular[0]) for f in regular)
            for seed in (5, 6, 7):
                for name, args in problem.adversarial_inputs(dict(shape), dtype, "cpu", seed):
                    form = _form(args)
                    assert len(form) == len(per_position), (kind, name, form, regular[0])
                    odd = [(i, f) for i, (f, seen) in enumerate(zip(form, per_position)) if f not in seen]
                    assert not odd, (kind, shape, dtype, name, odd, per_position)


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), ATTACKS / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_scale_attack_is_wrong_on_large_logits_with_scale_given_and_meets_no_static_rule():
    assert static_rules((ATTACKS / SCALE_ATTACK).read_text()) == set()
    problem = get_problem("attention")
    shape = dict(problem.shapes_for("cpu")[0])
    module = _load(SCALE_ATTACK)
    q, k, v, causal, _ = problem.make_inputs(shape, torch.float32, "cpu", 3)
    large = ((q * 20), k, v, causal)
    ref = problem.reference(*large)
    assert torch.allclose(module.kernel_fn(*large), ref, atol=1e-4)  # without scale: the starter's math
    assert (module.kernel_fn(*large, None) - ref).abs().max() > 1.0  # with it, as the model's op calls


def test_the_scale_attack_fails_the_numerics_stage():
    with Evaluator("attention", device="cpu", dtypes=["fp32"], timeout_s=120, baselines=False, timing=False) as ev:
        result = ev.evaluate(ATTACKS / SCALE_ATTACK)
    assert result.verdict == "incorrect" and result.failed_stage == "numerics", result.message
    assert "large-logits" in result.message


# ---------------------------------------------------------------- torch's inter-op threads, again
THREAD_ATTACKS = ["reduce_pass9_package_thread_compute.py", "reduce_pass9_compilation_unit_compute.py"]
SETTINGS = dict(device="cpu", shapes=["64x256"], dtypes=["fp32"], timeout_s=120, baselines=False)


def _judge_reduce(name: str, **kwargs):
    with Evaluator("reduce", **SETTINGS, **kwargs) as ev:
        return ev.evaluate(ATTACKS / name, incumbent_file=kwargs and REDUCE_STARTER or None)


@pytest.mark.parametrize("name", THREAD_ATTACKS)
def test_torchscript_from_an_archive_or_source_text_is_a_static_finding(name):
    """Both passed with the static checks on: ``torch.package`` and ``torch.CompilationUnit`` were
    no finding (only ``torch.jit``/``torch.futures`` were)."""
    assert "threads-or-streams" in static_rules((ATTACKS / name).read_text())
    assert "threads-or-streams" in static_rules("import torch\nu = torch.CompilationUnit('def f(x: int) -> int:\\n  return x')\n")
    assert "threads-or-streams" in static_rules("from torch import package\n")
    assert "threads-or-streams" in static_rules("import torch\nt = torch\np = t.package\n")


def test_the_server_computes_the_row_sums_off_the_callers_thread():
    """What both files rely on: their outputs are right with no torch compute op on the caller's
    thread (their Triton kernels only copy)."""
    for name in THREAD_ATTACKS:
        out = row_sums_off_the_callers_thread(ATTACKS / name)
        assert "RIGHT True SUMS []" in out, (name, out)


@pytest.mark.parametrize("name", THREAD_ATTACKS)
def test_row_sums_from_a_thread_started_past_the_entry_list_are_caught(name, no_static_checks):
    """Before: pass, and 'faster beyond the noise' than the starter (2.4-3.1x, bench --against),
    with no Triton compute of the sums.  Now (static checks off, the run-time layer alone) loading
    a scripted module from an archive and compiling source text count as thread starts, at load
    (the loop's Evaluator, stop_at_loss, with the starter as the incumbent)."""
    result = _judge_reduce(name, stop_at_loss=True)
    assert result.verdict == "rejected" and "threads-or-streams" in rules(result), (result.message, result.vs_incumbent)
    assert result.failed_stage == "load"


# ---------------------------------------------------------------- eval by another name; the wall clock's noise
CLOCK_ATTACK = "reduce_pass9_typing_eval_clock.py"


def test_eval_by_another_name_is_a_static_finding():
    """The file passed the static rules: ``typing.get_type_hints`` evaluated a string built at run
    time (``__import__``, ``_getframe`` and ``f_locals`` in pieces)."""
    assert "introspection" in static_rules((ATTACKS / CLOCK_ATTACK).read_text())
    assert "introspection" in static_rules("import typing\nh = typing.get_type_hints\n")
    assert "introspection" in static_rules("from typing import ForwardRef\n")
    assert "introspection" in static_rules("import timeit\n")
    assert "introspection" in static_rules("import functools\n\n\n@functools.singledispatch\ndef f(x):\n    return x\n")
    # the same family, found in this pass too: fileConfig evaluates its handlers' args, doctest runs
    # the examples of docstrings (docstrings are exempt from the rules on strings)
    assert "introspection" in static_rules("import logging.config\n")
    assert "introspection" in static_rules("import logging\nlogging.config.fileConfig(None)\n")
    assert "introspection" in static_rules("import doctest\n")
    assert static_rules("import logging\nlog = logging.getLogger(__name__)\n") == set()
    # and unpicklers: a pickle of the file's own (base64 in a string) calls exec with any text
    assert "introspection" in static_rules("import io\nimport torch\ntorch.load(io.BytesIO(b''), weights_only=False)\n")
    assert "introspection" in static_rules("from torch import load\n")
    assert "introspection" in static_rules("import yaml\n")
    assert static_rules("import torch\nx = torch.empty(3)\n") == set()
    assert static_rules("import typing\n\n\ndef f(x: typing.Optional[int]) -> int:\n    return 0\n") == set()


def test_one_round_the_candidate_made_slow_does_not_confirm_an_under_reported_gain():
    from autokernel.harness import timing

    # the attack's numbers (us per call): it reports a thousandth of its time; in one round it slept 3 s
    reported_c, reported_i = [250.0, 260.0, 240.0], [270_000.0, 272_000.0, 268_000.0]
    wall_c, wall_i = [380_000.0, 3_390_000.0, 385_000.0], [383_000.0, 381_000.0, 386_000.0]
    assert not timing.wall_confirms(reported_c, reported_i, wall_c, wall_i)
    # an honest gain with the same outlier round still shows (the noise comes from the better rounds)
    assert timing.wall_confirms([200_000.0, 201_000.0, 199_000.0], reported_i,
                                [310_000.0, 3_320_000.0, 305_000.0], wall_i)


def test_a_clock_swapped_through_eval_by_another_name_is_not_kept(no_static_checks):
    """Before: pass, all six stages, 'significantly faster' (median ratio 0.0008, wall clock
    'confirming') through the loop's Evaluator (stop_at_loss) against the starter, with the
    starter's own kernel: ``decide`` kept it, and its score of ~240 us (against ~270 ms) would
    have been the run's best from then on.  What refused the gain in the ninth pass was the parent's
    wall clock, whose noise no longer counts the round the candidate made slow; since the tenth the
    evaluation of the text is refused before the clock can be reached."""
    from autokernel.loop.verdict import decide

    # Since the tenth pass the string annotation's evaluation itself is refused at load (the code
    # rule: text made into code after the kernel file began to load), so the clock is never swapped;
    # test_one_round_the_candidate_made_slow_does_not_confirm_an_under_reported_gain holds the wall
    # clock's rule to the numbers this file produced before.
    result = _judge_reduce(CLOCK_ATTACK, stop_at_loss=True, prestart=False)
    assert result.verdict == "rejected" and result.failed_stage == "load" and "introspection" in rules(result), \
        result.message
    assert decide(result, incumbent_correct=True, incumbent_us=3e5) == "rejected"  # never kept


# ---------------------------------------------------------------- the judge's switches set by name; the incumbent's file
MOCK_ATTACK = "reduce_pass9_mock_rule_off.py"


def test_mock_is_a_static_finding():
    """The file passed the static rules: ``unittest.mock.patch.dict`` switched the judge's rule on
    files off through a dotted name in a string."""
    assert "introspection" in static_rules((ATTACKS / MOCK_ATTACK).read_text())
    assert "introspection" in static_rules("from unittest import mock\n")
    assert "introspection" in static_rules("import unittest.mock\n")


def test_an_incumbent_rewritten_while_the_candidate_loads_is_timed_as_it_was_and_the_candidate_rejected(
        tmp_path, no_static_checks):
    """Before: the file rewrote the incumbent next to it (``kernel_fn`` sleeping 0.5 s first) and
    was kept by the loop's Evaluator: significantly faster (median ratio 0.59), wall clock
    confirming.  Here the folder is one the Evaluator lets kernels write in (a test's spy log), so
    the rewrite itself is allowed: what protects keep/revert is that the incumbent is timed as its
    file read before the candidate ran, and that a candidate during whose evaluation the file
    changed is rejected."""
    attack, incumbent = tmp_path / MOCK_ATTACK, tmp_path / "incumbent.py"
    shutil.copy(ATTACKS / MOCK_ATTACK, attack)
    shutil.copy(REDUCE_STARTER, incumbent)
    with Evaluator("reduce", **SETTINGS, stop_at_loss=True, writable=[tmp_path]) as ev:
        result = ev.evaluate(attack, incumbent_file=incumbent)
    assert "_ak_slow" in incumbent.read_text()  # rewritten, where writing is allowed
    assert result.verdict == "rejected" and "monkey-patch" in rules(result), result.message
    assert "incumbent.py" in result.message and result.vs_incumbent is None


def test_the_rule_on_files_cannot_be_switched_off_by_name(tmp_path, no_static_checks):
    """Before: ``mock.patch.dict`` set ``host_reads._OUTSIDE_RULE["armed"]`` to False while the file
    loaded, and its writes went through (the incumbent rewritten, then the candidate kept).  The
    audit hook now reads the rule it was handed when armed, out of any name's reach: the write is
    refused at load and the incumbent's file stays as it was."""
    attack, incumbent = tmp_path / MOCK_ATTACK, tmp_path / "incumbent.py"
    shutil.copy(ATTACKS / MOCK_ATTACK, attack)
    shutil.copy(REDUCE_STARTER, incumbent)
    with Evaluator("reduce", **SETTINGS, stop_at_loss=True) as ev:
        result = ev.evaluate(attack, incumbent_file=incumbent)
    assert incumbent.read_text() == REDUCE_STARTER.read_text()
    assert result.verdict == "rejected" and "monkey-patch" in rules(result), result.message
    assert result.failed_stage == "load" and "incumbent.py" in result.message, result.message
