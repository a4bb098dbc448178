"""The worker's interpreter (``harness.interpreter_as_gpu``) on what is not a GPU rule: its cost."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np


def run_interpreted(script: str) -> str:
    """``script``'s output, run from a file in a process of its own under the interpreter
    (install's wrappers stay for the life of a process; a jit function needs a file its source
    can be read from: the judge refuses one whose source it cannot read)."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(Path(__file__).parent.parent / "src"))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "script.py"
        path.write_text(script)
        done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_language_builtins_are_looked_up_once_not_at_every_launch():
    """Triton's interpreter listed the language's builtins (``inspect.getmembers`` of five modules
    and classes) at every launch and every nested jitted call: a fifth of a small launch's time,
    and the interpreter is most of what CI and a CPU run spend.  After install they are looked up
    at the first launch only, and launches with nested calls still compute the same thing.  In a
    process of its own: install's wrappers stay for the life of the process."""
    script = textwrap.dedent('''
        import inspect

        import torch
        import triton
        import triton.language as tl
        from autokernel.harness import interpreter_as_gpu

        interpreter_as_gpu.install()


        @triton.jit
        def _scaled(x, s):
            return tl.exp(x * s) + tl.sqrt(tl.abs(x))


        @triton.jit
        def _kernel(x_ptr, out_ptr, N: tl.constexpr):
            offs = tl.arange(0, N)
            x = tl.load(x_ptr + offs)
            tl.store(out_ptr + offs, tl.sum(_scaled(x, 0.5), axis=0) + _scaled(x, 2.0))


        calls = [0]
        real = inspect.getmembers

        def counted(*args, **kwargs):
            calls[0] += 1
            return real(*args, **kwargs)

        inspect.getmembers = counted
        x = torch.randn(16)
        want = (torch.exp(x * 0.5) + x.abs().sqrt()).sum() + torch.exp(x * 2.0) + x.abs().sqrt()
        for launch in range(3):
            out = torch.empty(16)
            _kernel[(1,)](x, out, N=16)
            assert torch.allclose(out, want, rtol=1e-5, atol=1e-5), (launch, out, want)
            if launch == 0:
                first = calls[0]
        print(first, calls[0] - first)
    ''')
    out = run_interpreted(script)
    first, later = map(int, out.split())
    assert first > 0 and later == 0, (first, later)


def test_a_launch_swaps_the_language_once_not_at_every_nested_call():
    """Triton's interpreter swapped the language's functions for its own at every call of a
    jitted helper inside a launch (never undone; the launch's own swap already in place): a tenth
    of an attention launch.  Nested calls keep the launch's swap, the launch's end undoes it, and
    a helper called in a loop computes what it did."""
    script = textwrap.dedent('''
        import torch
        import triton
        import triton.language as tl
        from triton.runtime import interpreter
        from autokernel.harness import interpreter_as_gpu

        interpreter_as_gpu.install()
        real = tl.exp


        @triton.jit
        def _step(acc, x, i):
            return acc + tl.exp(x * i)


        @triton.jit
        def _kernel(x_ptr, out_ptr, N: tl.constexpr, STEPS: tl.constexpr):
            offs = tl.arange(0, N)
            x = tl.load(x_ptr + offs)
            acc = tl.zeros((N,), tl.float32)
            for i in range(STEPS):
                acc = _step(acc, x, i * 0.1)
            tl.store(out_ptr + offs, acc)


        calls = {"set": 0}
        set_attr = interpreter._LangPatchScope.set_attr

        def counted(self, obj, name, value):
            calls["set"] += 1
            return set_attr(self, obj, name, value)

        interpreter._LangPatchScope.set_attr = counted
        x = torch.randn(16)
        swapped = []
        for steps in (6, 2, 6):  # the first launch warms up (the language's own helpers, like tl.zeros)
            out = torch.empty(16)
            before = calls["set"]
            _kernel[(1,)](x, out, N=16, STEPS=steps)
            want = sum(torch.exp(x * (i * 0.1)) for i in range(steps))
            assert torch.allclose(out, want, rtol=1e-5), (out, want)
            assert tl.exp is real, "the launch's swap outlived it"
            swapped.append(calls["set"] - before)
        print(" ".join(map(str, swapped)))
    ''')
    out = run_interpreted(script)
    _, two, six = map(int, out.split())
    assert two > 0 and six == two, (two, six)  # four more helper calls, no more swapping


def test_a_first_launch_is_replayed_on_what_it_was_given():
    """A source's first launch runs twice (``interpreter_interleave``: once to learn, once judged),
    the launch's tensors put back in between: red-team pass 25 found the replay put back only
    top-level tensors (a work queue's counter passed in a tuple was at its end for the judged run)
    and failed on an expanded argument (``copy_`` into a stride-0 tensor).  Storages are put back,
    those of tensors in tuples and lists too."""
    out = run_interpreted(textwrap.dedent('''
        import torch
        import triton
        import triton.language as tl
        from autokernel.harness import interpreter_as_gpu

        interpreter_as_gpu.install()


        @triton.jit
        def _take(x_ptr, scale_ptr, out_ptr, queue, M, N: tl.constexpr):
            ctr = queue[0]
            cols = tl.arange(0, N)
            for _ in range(M):
                r = tl.atomic_add(ctr, 1)
                if r < M:
                    row = tl.load(x_ptr + r * N + cols) * tl.load(scale_ptr + r * 0 + cols)
                    tl.store(out_ptr + r, tl.sum(row, axis=0))


        x = torch.randn(6, 16)
        scale = torch.full((1, 16), 2.0).expand(6, 16)  # stride 0 over the rows
        out = torch.empty(6)
        ctr = torch.zeros(1, dtype=torch.int32)
        _take[(3,)](x, scale, out, (ctr,), 6, N=16)
        print(torch.allclose(out, (x * 2).sum(1), atol=1e-5), int(ctr))  # atol: a row summing near 0
    '''))
    assert out.split() == ["True", "18"], out  # the judged run's 3 programs, 6 bumps each (not 36)


def test_an_fp32_division_is_a_gpus_not_the_correctly_rounded_one():
    """Triton's fp32 ``/`` is ``div.full.f32`` on a GPU (a product with a reciprocal, within 2 ulp);
    the interpreter divided exactly, so relative_position_bias's starter with ``/`` for
    ``tl.math.div_rn`` passed every CPU stage (tests/test_attacks_coverage.py).  The judge's quotient
    is the numerator times the rounded reciprocal: exact for powers of two and 1 / x, off by an ulp
    somewhere in a sweep, the same on every call; div_rn stays correctly rounded."""
    from autokernel.harness.interpreter_as_gpu import approximate_quotients

    rng = np.random.default_rng(0)
    a = rng.uniform(-100, 100, 4096).astype(np.float32)
    b = rng.uniform(0.5, 50, 4096).astype(np.float32)
    exact = (a.astype(np.float64) / b).astype(np.float32)
    got = approximate_quotients(a, b, exact)
    off = np.abs(got.view(np.int32).astype(np.int64) - exact.view(np.int32).astype(np.int64))
    assert 0 < (off > 0).sum() < 4096 // 2 and off.max() <= 2
    assert np.array_equal(approximate_quotients(a, b, exact), got)
    powers = np.float32(2.0) ** rng.integers(-20, 20, 4096).astype(np.float32)
    assert np.array_equal(approximate_quotients(a, powers, a / powers), a / powers)
    ones = np.ones_like(b)
    assert np.array_equal(approximate_quotients(ones, b, ones / b), ones / b)
    tiny = np.full(4, np.float32(2.0 ** -130))  # a reciprocal past fp32's range: the exact quotient kept
    assert np.array_equal(approximate_quotients(a[:4], tiny, a[:4] / tiny), a[:4] / tiny)
    out = run_interpreted(textwrap.dedent('''
        import torch
        import triton
        import triton.language as tl
        from autokernel.harness import interpreter_as_gpu

        interpreter_as_gpu.install()


        @triton.jit
        def _divide(a_ptr, b_ptr, q_ptr, r_ptr, N: tl.constexpr):
            offs = tl.arange(0, N)
            a, b = tl.load(a_ptr + offs), tl.load(b_ptr + offs)
            tl.store(q_ptr + offs, a / b)
            tl.store(r_ptr + offs, tl.math.div_rn(a, b))


        g = torch.Generator().manual_seed(0)
        a, b = torch.rand(1024, generator=g) * 200 - 100, torch.rand(1024, generator=g) * 50 + 0.5
        q, r = torch.empty(1024), torch.empty(1024)
        _divide[(1,)](a, b, q, r, N=1024)
        print(int((q != a / b).sum()), int((r != a / b).sum()))
    '''))
    approximate, rounded = (int(v) for v in out.split())
    assert approximate > 0 and rounded == 0, out


def test_fp32_dots_round_each_element_once_wherever_it_sits():
    """A GPU computes each element of a dot from its row and column alone.  numpy's matmul rounded an
    element by where it fell in OpenBLAS's blocking on an AVX2 CPU: the honest matmul whose edge
    tiles overlap stored one element twice, one bit apart (judged a race).  An fp32 dot under the
    judge's interpreter is the float64 sum of its exact products, rounded once: the same bits for
    a row and column at any place in any tile."""
    script = textwrap.dedent('''
        import numpy as np
        import torch
        import triton
        import triton.language as tl
        from autokernel.harness import interpreter_as_gpu

        interpreter_as_gpu.install()


        @triton.jit
        def _dot(a_ptr, b_ptr, c_ptr, M: tl.constexpr, K: tl.constexpr, N: tl.constexpr):
            rm, rk, rn = tl.arange(0, M), tl.arange(0, K), tl.arange(0, N)
            a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
            b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
            tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b, input_precision="ieee"))


        gen = torch.Generator().manual_seed(0)
        a, b = torch.randn(64, 128, generator=gen), torch.randn(128, 32, generator=gen)
        whole = torch.empty(64, 32)
        _dot[(1,)](a, b, whole, M=64, K=128, N=32)
        rows = torch.empty(16, 32)
        _dot[(1,)](a[37:53].contiguous(), b, rows, M=16, K=128, N=32)
        exact = (a.double() @ b.double()).float()
        print(torch.equal(whole, exact), torch.equal(rows, whole[37:53]))
    ''')
    assert run_interpreted(script).split() == ["True", "True"]
