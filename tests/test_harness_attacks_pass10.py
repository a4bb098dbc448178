"""Tenth red-team pass on the judge (CPU, Triton interpreter): attacks that passed ``autokernel
bench`` with the static checks on, and what catches them now (each test here failed before its
fix).  tests/attacks_open/README.md has the pass's notes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autokernel.harness import Evaluator, host_reads
from autokernel.problems.registry import KERNELS_DIR

sys.path.insert(0, str(Path(__file__).parent))
from test_harness_attacks import ATTACKS, no_static_checks, rules  # noqa: E402,F401  (a fixture)
from test_harness_integrity import rules as static_rules  # noqa: E402

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")

SOFTMAX_STARTER = KERNELS_DIR / "softmax.py"
SETTINGS = dict(device="cpu", dtypes=["fp32"], timeout_s=120, baselines=False)


def _judge(kind: str, name: str, incumbent: Path | None = None, **kwargs):
    with Evaluator(kind, **SETTINGS, **kwargs) as ev:
        return ev.evaluate(ATTACKS / name, incumbent_file=incumbent)


def _code_rule(*ways: str) -> dict:
    """What the judge's rules, armed as a worker arms them before a kernel file loads, do to
    each way of making code (tests/code_rule_probe.py, in a process of its own)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, str(Path(__file__).parent / "code_rule_probe.py"), *ways],
                          capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- text made into code by another name
SYMPY_ATTACK = "softmax_pass10_sympy_eval_no_kernel.py"


def test_the_sympy_attack_meets_no_static_rule():
    """What the run-time rule has to catch: sympy's ``parse_expr`` is an ``eval`` no list of
    names held, and the text it runs is built from pieces."""
    assert static_rules((ATTACKS / SYMPY_ATTACK).read_text()) == set()


def test_a_file_that_evaluates_text_through_a_library_is_rejected_at_load():
    """Before: pass, all six stages, and 6-22x 'faster beyond the noise' than the starter
    (``bench --against``): ``torch.softmax`` under a switched-off dispatch mode, no Triton compute.
    Now text made into code once the kernel file begins to load is refused unless Triton's code
    generators, the import system or the judge's own load asked for it (the loop's Evaluator,
    stop_at_loss, the starter as the incumbent)."""
    result = _judge("softmax", SYMPY_ATTACK, SOFTMAX_STARTER, stop_at_loss=True)
    assert result.verdict == "rejected" and result.failed_stage == "load", (result.verdict, result.message)
    assert "introspection" in rules(result) and "parse_expr" not in result.message  # the rule names no library
    assert "made into code" in result.message


def test_installed_packages_are_not_trusted_code():
    """In a virtual environment Python's ``platstdlib`` is the environment's lib folder, which holds
    site-packages (and elsewhere site-packages lies inside the standard library's folder): every
    installed package counted as trusted code, sympy's ``parse_expr`` included."""
    import json as json_module

    import torch
    from sympy.parsing.sympy_parser import parse_expr

    trusted = host_reads.TrustedCode()
    assert not trusted(parse_expr.__code__)
    assert trusted(json_module.dumps.__code__) and trusted(torch.nn.functional.softmax.__code__)
    assert trusted(host_reads.TrustedCode.__init__.__code__)
    assert host_reads.TrustedCode(packages=True)(parse_expr.__code__)


def test_the_code_rule_refuses_the_kernels_text_and_lets_triton_and_imports_make_code():
    found = _code_rule("import", "triton", "compile", "exec", "sympy", "dataclass")
    # a module whose own code makes code as it loads, and the interpreter's rewrite of a jit function
    assert found["import"] == {"refused": [], "rules": [], "error": None}, found["import"]
    assert found["triton"] == {"refused": [], "rules": [], "error": None}, found["triton"]
    # text of the kernel's, under any name: the builtins, a library's eval, the standard library's
    # helpers that exec text built from the names they are given
    for way in ("compile", "exec", "sympy", "dataclass"):
        assert found[way]["rules"] == ["introspection"] and found[way]["error"], (way, found[way])


# ---------------------------------------------------------------- the interpreter compiles lines the judge never read
LINECACHE_ATTACK = "softmax_pass10_linecache_jit_body.py"


def test_the_linecache_attack_meets_no_static_rule():
    assert static_rules((ATTACKS / LINECACHE_ATTACK).read_text()) == set()


def test_a_jit_body_the_files_text_does_not_hold_is_refused_at_its_first_launch():
    """Before: pass, all six stages, 7.5-12.7x 'faster beyond the noise' than the starter: the
    interpreter's rewrite compiled the lines the file had put into ``linecache`` for itself.  Now
    the lines Triton's rewrite compiles must be the function's own in the text the judge checked."""
    result = _judge("softmax", LINECACHE_ATTACK, SOFTMAX_STARTER, stop_at_loss=True)
    assert result.verdict == "rejected" and result.failed_stage == "smoke", (result.verdict, result.message)
    assert "introspection" in rules(result) and "not its own" in result.message


def test_the_interpreters_rewrite_compiles_only_a_functions_own_lines():
    """The same through ``__wrapped__`` (``inspect.getsourcelines`` unwraps: the lines of another
    function, never read as a jit body), and an honest jit function still compiles."""
    found = _code_rule("triton", "linecache", "wrapped")
    assert found["triton"] == {"refused": [], "rules": [], "error": None}, found["triton"]
    for way in ("linecache", "wrapped"):
        assert found[way]["rules"] == ["introspection"] and "not its own" in found[way]["refused"][0], found[way]


# ---------------------------------------------------------------- the watch switched off, the guard reached by strings
FX_ATTACK = "softmax_pass10_fx_string_escape.py"


def test_torch_fx_is_a_static_finding():
    """The file passed the static rules: ``torch.fx.Interpreter``'s ``fetch_attr`` and
    ``call_method`` read attributes and call methods named in strings."""
    assert "introspection" in static_rules((ATTACKS / FX_ATTACK).read_text())
    assert "introspection" in static_rules("import torch.fx\n")
    assert "introspection" in static_rules("from torch import fx\n")
    assert "introspection" in static_rules("import torch\ng = torch.fx.Graph()\n")
    assert static_rules("import torch\nx = torch.empty(3)\n") == set()


def test_a_way_around_the_watch_reached_by_strings_is_caught_at_run_time(no_static_checks):
    """Before: pass, all six stages, 4.8x 'faster beyond the noise' than the starter, no Triton
    compute.  Now the dispatch escapes are wrapped where torch keeps them, and a use the kernel's
    code asked for is ``torch-op`` (the static checks off: the run-time layer alone)."""
    result = _judge("softmax", FX_ATTACK, SOFTMAX_STARTER, stop_at_loss=True)
    assert result.verdict == "rejected" and result.failed_stage == "smoke", (result.verdict, result.message)
    assert "torch-op" in rules(result) and "_DisableTorchDispatch" in result.message


def test_the_escapes_hide_ops_from_a_dispatch_mode():
    """Why each wrapped name counts: under it a mode on torch's stack sees no op."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from autokernel.harness import escapes

    class Seen(TorchDispatchMode):
        ops: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(func)
            return func(*args, **(kwargs or {}))

    c = vars(torch._C)
    python = torch._C.DispatchKeySet(torch._C.DispatchKey.Python)
    guards = {"_DisableTorchDispatch": lambda: c["_DisableTorchDispatch"](),
              "_ExcludeDispatchKeyGuard": lambda: c["_ExcludeDispatchKeyGuard"](python),
              "_SetExcludeDispatchKeyGuard": lambda: c["_SetExcludeDispatchKeyGuard"](torch._C.DispatchKey.Python, True)}
    x = torch.randn(4)
    for name, guard in guards.items():
        assert name in escapes.ESCAPES
        with Seen() as mode:
            with guard():
                x.sum()
        assert mode.ops == [], name


# ---------------------------------------------------------------- getattr by string, into the judge's closures
FORMATTER_ATTACK = "softmax_pass10_formatter_closure.py"


def test_string_formatter_is_a_static_finding():
    """The file passed the static rules: a ``string.Formatter`` subclass whose ``format_field``
    keeps the object a field's dotted name resolved to (it took the escape's original class out of
    the judge's wrapper's closure; with the static checks off it still passes: open)."""
    assert "introspection" in static_rules((ATTACKS / FORMATTER_ATTACK).read_text())
    assert "introspection" in static_rules("from string import Formatter\n")
    assert "introspection" in static_rules("import string\n\n\nclass F(string.Formatter):\n    pass\n")
    assert static_rules("import string\nx = string.ascii_letters\n") == set()


def test_frames_asked_for_by_the_kernels_code_are_refused():
    """A frame is the way to the worker's state (its clock, its counters), for any getattr-by-string
    engine the static rules miss; ``sys._getframe`` and ``tb_frame`` raise audit events, refused
    when the kernel file's code asks (directly or through a library: logging), never the judge's
    own (the watch takes frames at every op) nor Triton's launches."""
    found = _code_rule("triton", "getframe", "tb_frame", "logging", "pickle")
    assert found["triton"] == {"refused": [], "rules": [], "error": None}, found["triton"]
    # (and an unpickler's lookup of the globals its bytes name, which it then calls)
    for way in ("getframe", "tb_frame", "logging", "pickle"):
        assert found[way]["rules"] == ["introspection"] and found[way]["error"], (way, found[way])
