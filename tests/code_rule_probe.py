"""Run as a script (a process of its own: the judge's audit hook cannot be removed): arm the
judge's rules as a worker does before a kernel file loads, then, as a kernel file would, make
code in the ways asked for (``sys.argv[1:]``).  Prints one JSON line: each way, and whether it
was refused."""
import json
import os
import sys


def _way(name):
    if name == "compile":
        compile("1 + 1", "text", "eval")
    elif name == "exec":
        exec("x = 1", {})
    elif name == "sympy":
        from sympy.parsing.sympy_parser import parse_expr

        parse_expr("1 + 2", transformations=())
    elif name == "dataclass":
        import dataclasses

        dataclasses.make_dataclass("Point", ["x", "y"])
    elif name == "import":  # a module whose own code makes code as it loads (mpmath, under sympy)
        import sympy  # noqa: F401
    elif name == "triton":  # a jit function launched in the interpreter: Triton rewrites and compiles its source
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def _copy(src, dst, n, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)

        x = torch.arange(10, dtype=torch.float32)
        y = torch.empty_like(x)
        _copy[(1,)](x, y, 10, BLOCK=16)
        assert torch.equal(x, y)
    elif name in ("linecache", "wrapped"):  # the interpreter's rewrite handed lines other than the function's own
        import functools
        import linecache

        import torch
        import triton

        def plain(n):
            return n + 1

        def _body(n):
            pass

        if name == "wrapped":  # inspect.getsourcelines unwraps: the plain function's lines
            functools.update_wrapper(_body, plain)
        else:
            lines = list(linecache.getlines(__file__))
            at = _body.__code__.co_firstlineno
            lines[at:at + 1] = ["            x = n + 1\n"]
            linecache.cache.update({__file__: (1, None, lines, __file__)})
        triton.jit(_body)[(1,)](1)
    elif name == "getframe":  # the way to the worker's state
        sys._getframe(0)
    elif name == "tb_frame":
        try:
            raise ValueError("x")
        except ValueError as exc:
            exc.__traceback__.tb_frame  # noqa: B018
    elif name == "pickle":  # an unpickler calls what its bytes name (torch.load, shelve... are built on it)
        import pickle

        pickle.loads(pickle.dumps(len))
    elif name == "logging":  # a library taking a frame for the kernel (logging.currentframe)
        import logging

        logging.getLogger("probe").findCaller()
    else:
        raise ValueError(name)


def main() -> None:
    os.environ["TRITON_INTERPRET"] = "1"
    import torch  # noqa: F401
    import triton  # noqa: F401

    from autokernel.harness import host_reads, launches

    host_reads.install(launches.LaunchRecord(), ())
    with open(__file__) as f:  # this file is the kernel file: its text as the judge would have checked it
        host_reads.kernel_text_pinner()(__file__, f.read())
    host_reads.arm_outside()
    found = {}
    for name in sys.argv[1:]:
        before = len(host_reads.REFUSED_OUTSIDE)
        try:
            _way(name)
            error = None
        except Exception as exc:  # noqa: BLE001
            error = f"{type(exc).__name__}: {exc}"[:200]
        found[name] = {"refused": [what for _, what in host_reads.REFUSED_OUTSIDE[before:]],
                       "rules": sorted({rule for rule, _ in host_reads.REFUSED_OUTSIDE[before:]}), "error": error}
    print(json.dumps(found))


if __name__ == "__main__":
    main()
