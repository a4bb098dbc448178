"""integrity.py: static checks of kernel files and the op allow-list."""
from __future__ import annotations

import sys

import pytest

from autokernel.harness import integrity
from autokernel.problems.registry import KERNELS_DIR, list_kinds


def rules(source: str) -> set[str]:
    return {f.rule for f in integrity.static_findings(source)}


def test_rules_are_named():
    assert set(integrity.RULES) >= {"modified-input", "partial-write", "cached-output", "torch-op", "fallback",
                                    "threads-or-streams", "monkey-patch", "below-floor"}


def test_fallback_to_torch_in_except_handler():
    src = "import torch.nn.functional as F\ndef kernel_fn(x):\n    try:\n        return launch(x)\n" \
          "    except Exception:\n        return F.softmax(x, -1)\n"
    assert rules(src) == {"fallback"}
    # a handler that only re-raises is fine
    ok = "import torch\ndef kernel_fn(x):\n    try:\n        return launch(x)\n    except KeyError as e:\n" \
         "        raise ValueError('bad') from e\n"
    assert rules(ok) == set()


@pytest.mark.parametrize("src", [
    "import threading\n",
    "from concurrent.futures import ThreadPoolExecutor\n",
    "import torch\ns = torch.cuda.Stream()\n",
    "import torch\ndef f():\n    with torch.cuda.stream(s):\n        pass\n",
    "import os\nos.fork()\n",
])
def test_threads_and_streams(src):
    assert "threads-or-streams" in rules(src)


@pytest.mark.parametrize("src", [
    "import torch\ntorch.allclose = lambda *a, **k: True\n",
    "import torch as T\nT.Tensor.__eq__ = None\n",
    "import triton\nsetattr(triton, 'jit', None)\n",
    "import builtins\nbuiltins.len = None\n",
    "import autokernel.harness.compare as c\nc.compare_outputs = None\n",
    "from torch import testing\ntesting.assert_close = None\n",
    "import sys\nsys.modules['torch'] = None\n",
])
def test_monkey_patching(src):
    assert "monkey-patch" in rules(src)


def test_hiding_ops_from_the_dispatch_mode():
    src = "from torch.utils._python_dispatch import _disable_current_modes\n"
    assert "torch-op" in rules(src)


def test_knob_dict_and_locals_are_not_patching():
    src = "import torch\nKNOBS = {'B': 1}\nKNOBS['B'] = 2\nclass C:\n    pass\nc = C()\nc.x = torch.empty(1)\n"
    assert rules(src) == set()


def test_syntax_error_raises():
    with pytest.raises(SyntaxError):
        integrity.static_findings("def f(:\n")


@pytest.mark.parametrize("kind", list_kinds())
def test_starters_have_no_static_findings(kind):
    path = KERNELS_DIR / f"{kind}.py"
    if not path.exists():
        pytest.skip(f"starter {kind} not written yet")
    assert integrity.static_findings(path.read_text(), path.name) == []


def test_allow_list_and_block_list():
    ops = ["aten.empty", "aten.view", "aten._to_copy", "aten._softmax", "aten.mm"]
    assert integrity.disallowed_ops(ops, frozenset(), None) == ["aten._softmax", "aten.mm"]
    assert integrity.disallowed_ops(ops, frozenset({"aten.mm"}), None) == ["aten._softmax"]
    assert integrity.disallowed_ops(ops, frozenset(), frozenset({"aten.mm"})) == ["aten.mm"]


def test_fingerprint_sees_replaced_function(monkeypatch):
    import torch

    before = integrity.fingerprint()
    assert integrity.fingerprint() == before
    monkeypatch.setattr(torch, "allclose", lambda *a, **k: True)
    assert integrity.fingerprint()["torch.allclose"] != before["torch.allclose"]


def test_a_time_below_the_physical_floor_is_flagged():
    from autokernel.harness import roofline
    from autokernel.harness.integrity import below_floor

    # softmax 4096x4096 bf16 moves 64 MiB: at 4226 GB/s no kernel beats ~15.9 us
    floor = roofline.floor_us(2 * 4096 * 4096 * 2, 0.0, 4226.0, None)
    assert 15.8 < floor < 16.0
    assert below_floor(10.0, floor)          # a cached or skipped computation
    assert not below_floor(21.7, floor)      # the measured starter
    # swiglu 8192x14336, the closest honest kernel measured on the H200: 4212 GB/s, 99% of copy
    assert not below_floor(1.0 / 0.99 * floor, floor)
    assert not below_floor(0.96 * floor, floor)  # a read-mostly kernel a little past the copy
    # a cached result padded with a spin to 0.81x the floor passed the old 0.8 factor, claiming
    # 123% of the roofline; nothing can claim more than 1/0.95 = 105% now
    assert below_floor(0.81 * floor, floor)
    assert below_floor(0.94 * floor, floor)
    assert not below_floor(5.0, None)        # no roofline known (CPU): never flagged


@pytest.mark.parametrize("src,rule", [
    ("from importlib import import_module\nt = import_module('thread' + 'ing')\n", "introspection"),
    ("m = __import__('thre' + 'ading')\n", "introspection"),
    ("import torch\nf = getattr(torch, 'sof' + 'tmax')\n", "introspection"),
    ("import torch\nsetattr(torch, name, None)\n", "introspection"),
    ("import sys\nf = sys._getframe(1).f_locals['self']\n", "introspection"),
    ("import gc\n", "introspection"),
    ("import inspect\n", "introspection"),
    ("import traceback\nfor f, _ in traceback.walk_stack(None):\n    f.f_locals\n", "introspection"),
    ("code = compile('x', '/triton/runtime/interpreter.py', 'exec')\n", "introspection"),
    ("E = type('E', (), {})\nE.__reduce__\n", "introspection"),
    ("class Out:\n    def __reduce__(self):\n        return (eval, ('1',))\n", "introspection"),
    ("import torch\nclass T(torch.Tensor):\n    pass\n", "introspection"),
    ("import numpy\n", "foreign-compute"),
    ("import ctypes\n", "foreign-compute"),
    ("from torch import _C\n", "foreign-compute"),
    ("import torch\ny = torch.ops.aten.softmax\n", "foreign-compute"),
    ("def kernel_fn(x):\n    return x.cpu().numpy()\n", "foreign-compute"),
    ("import torch\nn = torch._C._len_torch_dispatch_stack()\n", "torch-op"),
    ("import torch\nm = getattr(torch, '_C')\n", "torch-op"),
    # spellings found by the fourth red-team pass: attributes read by name without an
    # attribute expression, and frames reached without sys._getframe
    ("match tb:\n    case object(tb_frame=f):\n        pass\n", "introspection"),
    ("match x:\n    case object(numpy=n):\n        pass\n", "foreign-compute"),
    ("g = getattr\nloc = g(frame, 'f_' + 'locals')\n", "introspection"),
    ("from functools import reduce\nv = reduce(getattr, names, frame)\n", "introspection"),
    ("import string\nv = string.Formatter().get_field('0.f_' + 'back', (f,), {})\n", "introspection"),
    ("loc = next(iter(map(getattr, [frame], ['f_locals'])))\n", "introspection"),
    ("try:\n    raise KeyError\nexcept KeyError as e:\n    tb = e.__traceback__\n", "introspection"),
    ("import sys\ntb = sys.exc_info()[2]\n", "introspection"),
    ("import logging\nf = logging.currentframe()\n", "introspection"),
    ("import sys\nsys.addaudithook(lambda event, args: None)\n", "introspection"),
    ("class C:\n    __torch_function__ = classmethod(lambda *a: None)\n", "introspection"),
    ("import torch\nM = type('M', (torch.overrides.TorchFunctionMode,), dict(__torch_function__=f))\n", "introspection"),
    ("from torch.overrides import TorchFunctionMode\n", "introspection"),
    ("import torch\nlib = torch.library.Library('aten', 'IMPL')\n", "monkey-patch"),
    ("from torch.library import impl\n", "monkey-patch"),
    # names the worker's draws look up: any module the file imports, anything it imports from one
    ("import random\nrandom.Random = object\n", "monkey-patch"),
    ("import hashlib\nsetattr(hashlib, 'sha256', None)\n", "monkey-patch"),
    ("from torch.nn import Linear\nLinear.reset_parameters = print\n", "monkey-patch"),
    ("import torch.nn as nn\ntype.__setattr__(nn.Linear, 'forward', print)\n", "introspection"),
    ("from _autokernel_kernelbench_12_Gemm_0123456789 import Model\n", "introspection"),
    ("from torch.nn.modules.module import register_module_forward_hook\n", "monkey-patch"),
    ("import torch\nr = torch.utils.weak.WeakIdRef(t, callback)\n", "introspection"),
    ("from torch.utils.weak import WeakIdRef\n", "introspection"),
    ("import _signal\n_signal.signal(14, handler)\n", "introspection"),
    ("import sys\nsys.meta_path.insert(0, finder)\n", "introspection"),
    ("import sys\nsys._setprofileallthreads(f)\n", "introspection"),  # Python 3.12
])
def test_reaching_past_the_rules_at_run_time(src, rule):
    assert rule in rules(src)


def test_native_code_only_where_the_problem_allows_other_backends():
    src = "from torch.utils.cpp_extension import load_inline\nm = load_inline(name='k', cpp_sources='')\n"
    assert "foreign-compute" in rules(src)
    assert integrity.static_findings(src, native_code=True) == []  # KernelBench with --allow-torch


def test_literal_getattr_of_a_public_name_is_fine():
    assert rules("import triton\nf = getattr(triton, 'cdiv')\n") == set()


def test_fingerprint_sees_a_swapped_code_object(monkeypatch):
    before = integrity.fingerprint()
    target = integrity.static_findings
    original = target.__code__
    monkeypatch.setattr(target, "__code__", (lambda source, filename="k": []).__code__)
    after = integrity.fingerprint()
    assert before["autokernel.harness.integrity.static_findings"] != after["autokernel.harness.integrity.static_findings"]
    assert id(target.__code__) != id(original)  # same function object, new code: only the code id shows it


def test_interpreter_values_and_raw_storage_bytes_are_foreign_compute():
    # in the interpreter a kernel body runs as Python: its loaded values are numpy arrays
    body = ("import triton\nimport triton.language as tl\n@triton.jit\ndef k(x_ptr, o_ptr):\n"
            "    v = tl.load(x_ptr)\n    tl.store(o_ptr, v.handle.data.sum())\n")
    assert "foreign-compute" in rules(body)
    raw = "def kernel_fn(x):\n    x.untyped_storage()._write_file(open('f', 'wb'), True, True, 4)\n"
    assert "foreign-compute" in rules(raw)


def test_the_worker_digest_covers_the_baseline_names_only_and_sees_a_replacement(monkeypatch):
    import torch

    watch = integrity.FingerprintWatch()
    assert watch.digest == integrity.fingerprint_digest(watch.baseline)  # what the parent computes
    assert watch.digest_now() == watch.digest
    # a name that appears later (a module imported by load, an attribute torch adds lazily)
    # does not count: the worker need not send its whole fingerprint on every answer
    monkeypatch.setattr(torch, "autokernel_new_name", lambda: None, raising=False)
    assert watch.digest_now() == watch.digest
    monkeypatch.setattr(torch, "allclose", lambda *a, **k: True)
    assert watch.digest_now() != watch.digest
    monkeypatch.undo()
    assert watch.digest_now() == watch.digest
    target = integrity.static_findings  # same function object, new code object
    monkeypatch.setattr(target, "__code__", (lambda source, filename="k": []).__code__)
    assert watch.digest_now() != watch.digest
    monkeypatch.undo()
    assert watch.digest_now() == watch.digest
    import types

    fake = types.ModuleType("torch")  # a module replaced in sys.modules: its names are gone
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert watch.digest_now() != watch.digest
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "autokernel.harness.integrity", types.ModuleType("x"))
    assert watch.digest_now() != watch.digest


def test_tensor_class_guard_names_replaced_added_and_removed_methods():
    """The guard's per-call fast path (one pass over every guarded name) must see each way a
    class can change: a method replaced, a name added over a base's, a name removed."""
    import torch

    from autokernel.harness.integrity import TensorClassGuard

    guard = TensorClassGuard()
    assert guard.changes() == [] and guard.unchanged()
    linear_forward = torch.nn.Linear.forward
    try:
        torch.nn.Linear.forward = lambda self, x: x
        assert guard.changes() == ["Linear.forward"]
    finally:
        torch.nn.Linear.forward = linear_forward
    assert guard.changes() == []
    try:
        torch.nn.ReLU.to = lambda self, *a, **k: self  # shadows nn.Module.to
        assert guard.changes() == ["ReLU.to"]
    finally:
        del torch.nn.ReLU.to
    extra_repr = torch.nn.Linear.extra_repr
    try:
        del torch.nn.Linear.extra_repr
        assert guard.changes() == ["Linear.extra_repr"] and not guard.unchanged()
    finally:
        torch.nn.Linear.extra_repr = extra_repr
    assert guard.changes() == [] and guard.unchanged()


def test_names_held_answers_yes_only_when_every_name_holds_its_object():
    """The one-pass check behind ``FingerprintWatch.held`` and the tensor-class guard: a name
    rebound (in a namespace of many names or of one), removed, or a class attribute replaced is a
    no; put back, a yes again."""
    import types

    from autokernel.harness.integrity import NamesHeld

    many = types.ModuleType("many")
    many.__dict__.update({f"f{i}": object() for i in range(50)})
    one = {"only": object()}

    class Space:
        def method(self):
            return 1

    space = vars(Space)
    runs = [(vars(many), [f"f{i}" for i in range(50)], [getattr(many, f"f{i}") for i in range(50)]),
            (one, ["only"], [one["only"]]), (space, ["method"], [space["method"]]), ({}, [], [])]
    check = NamesHeld(runs)
    assert check.held()
    kept = many.f17
    many.f17 = object()
    assert not check.held()
    many.f17 = kept
    assert check.held()
    del many.f49
    assert not check.held()
    many.f49 = runs[0][2][49]
    kept = one["only"]
    one["only"] = None
    assert not check.held()
    del one["only"]
    assert not check.held()
    one["only"] = kept
    Space.method = lambda self: 2
    assert not check.held()
    Space.method = runs[2][2][0]
    assert check.held()


def test_fingerprint_held_sees_a_rebound_or_removed_name_and_its_return(monkeypatch):
    import torch

    watch = integrity.FingerprintWatch()
    assert watch.held()
    monkeypatch.setattr(torch, "sum", lambda *a, **k: None)
    assert not watch.held()
    assert "torch.sum" in watch.changed_names()
    monkeypatch.undo()
    assert watch.held()
    monkeypatch.delattr(torch, "randn_like")
    assert not watch.held()
    monkeypatch.undo()
    assert watch.held()
    name = next(k for prefix, _space, keys, *_ in watch._held_plan if prefix == "torch.Tensor" for k in keys)
    monkeypatch.setattr(torch.Tensor, name, lambda self: 0)
    assert not watch.held()
    monkeypatch.undo()
    assert watch.held()
