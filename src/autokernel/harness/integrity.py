"""Integrity rules: what a kernel may not do even when its numbers come out right.

Every finding names one of ``RULES``:

``modified-input``     the kernel wrote into an input tensor (the parent keeps pristine clones
                       and compares bits after every call);
``partial-write``      an output element was never written: fresh allocations are poisoned
                       (NaN, then a second value) and an element that follows the poison was
                       left as it was allocated;
``cached-output``      the output did not follow new values written into the same input
                       tensors (all of them, or one floating-point input alone), reused the
                       storage of an earlier output, or was wrong on the timing inputs when
                       re-checked after timing;
``torch-op``           the kernel called a PyTorch compute op (recorded under a dispatch mode:
                       allow-list mode for built-in problems, block-list mode when the problem
                       gives ``forbidden_ops``), or reached for the tools that hide ops from it;
``fallback``           a ``try``/``except`` whose handler calls PyTorch (the classic "if my
                       kernel fails, quietly use torch" trick);
``threads-or-streams`` threads, processes, asyncio or extra CUDA streams (work that escapes the
                       timing or the checks; a Triton launch made while a stream other than
                       the judge's was current);
``monkey-patch``       assigning to attributes of torch, triton, autokernel or builtins, found
                       statically in the file or at run time (ids of critical functions
                       snapshotted in the worker before the candidate is imported);
``below-floor``        a GPU time below 0.95x the physical floor (bytes / bandwidth,
                       flops / peak): a measurement error or a trick, never a win;
``no-kernel``          a call launched no Triton kernel defined in the kernel file (the
                       worker hooks Triton's launch path before the file loads);
``foreign-compute``    an output no Triton kernel of the file's own was handed (computed by
                       PyTorch with the watch bypassed, numpy, ctypes...), a call that read
                       tensor values into Python (``.item()``, ``tolist``, printing, pickling,
                       its own memory file...: host_reads.py), or the file reaches for numpy,
                       ctypes, ``torch.ops``, ``Tensor.numpy`` and the like;
``introspection``      the file reads the harness's frames or namespaces, builds names or code
                       at run time (``__import__``, ``import_module``, ``exec``, ``getattr``
                       with a computed name, ``sys._getframe``, ``gc``, ``inspect``,
                       ``__globals__``, ``__subclasses__``...), or defines pickling/dispatch
                       hooks (``__reduce__``, ``__torch_dispatch__``...);
``timing-mismatch``    the worker's reported times do not fit the judge's own wall clock
                       around the request that made them;
``deferred-write``     an output changed after its call returned (a digest of its bits taken
                       right after the call differs when the parent collects it): the work of
                       one call was done by a later one, where the timing would not charge it.

This module is pure analysis (AST, op names, id snapshots); the worker and the stages call it.
"""
from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from typing import Any, Iterable

RULES = ("modified-input", "partial-write", "cached-output", "torch-op", "fallback",
         "threads-or-streams", "monkey-patch", "below-floor", "no-kernel", "foreign-compute",
         "introspection", "timing-mismatch", "deferred-write")

# How far below the physical floor a measured time may fall before it is rejected.  The floor
# comes from the calibrated copy bandwidth and matmul peak when `autokernel calibrate` has run
# (the vendor's numbers otherwise, which no kernel reaches).  Honest kernels come close to the
# measured copy but not past it by much: on the H200 the best starter runs at 99% of it
# (swiglu, 4212 GB/s against a 4226-4245 GB/s copy), and a read-mostly kernel may beat a copy
# (which reads and writes) by a few percent.  0.95 leaves that margin; a kernel that returns a
# cached result at once and pads with a spin can then claim at most 1/0.95 = 105% of the
# roofline, where the old 0.8 let it claim 125%.
BELOW_FLOOR_FACTOR = 0.95


def below_floor(latency_us: float, floor_us: float | None, factor: float = BELOW_FLOOR_FACTOR) -> bool:
    """A time under ``factor`` x the physical floor cannot be real: a measurement error or a
    trick, never a win.  No floor (CPU, unknown GPU): never."""
    return bool(floor_us) and latency_us < factor * floor_us


# Ops every kernel may call: allocation, views and metadata, copies and casts.
ALLOWED_OPS = frozenset({
    # allocation
    "aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty", "aten.new_empty_strided",
    "aten.zeros", "aten.zeros_like", "aten.new_zeros", "aten.ones", "aten.ones_like", "aten.new_ones",
    "aten.full", "aten.full_like", "aten.new_full", "aten.fill_", "aten.fill", "aten.zero_", "aten.resize_",
    "aten.scalar_tensor",
    # views and metadata
    "aten.view", "aten._unsafe_view", "aten.reshape", "aten._reshape_alias", "aten.as_strided",
    "aten.expand", "aten.expand_as", "aten.permute", "aten.transpose", "aten.t", "aten.slice",
    "aten.select", "aten.unsqueeze", "aten.squeeze", "aten.detach", "aten.alias", "aten.split",
    "aten.split_with_sizes", "aten.chunk", "aten.unbind", "aten.narrow", "aten.view_as",
    "aten.unflatten", "aten.flatten", "aten.movedim", "aten.diagonal", "aten.unfold",
    "aten.sym_size", "aten.sym_stride", "aten.sym_numel", "aten.sym_storage_offset",
    "aten.is_contiguous", "aten._local_scalar_dense",
    # copies and casts
    "aten.copy_", "aten.clone", "aten.contiguous", "aten._to_copy", "aten.to", "aten.set_",
    "aten.lift_fresh", "aten.lift_fresh_copy", "aten._copy_from", "aten._copy_from_and_resize",
})

# Allocation ops whose fresh floating-point results the worker poisons.
POISONED_ALLOCATIONS = frozenset({"aten.empty", "aten.empty_like", "aten.empty_strided",
                                  "aten.new_empty", "aten.new_empty_strided"})


@dataclass
class StaticFinding:
    rule: str
    message: str


def disallowed_ops(ops: Iterable[str], allowed: frozenset[str], forbidden: frozenset[str] | None) -> list[str]:
    """The recorded ops that break the rules: anything outside the allow-list (plus the
    problem's ``allowed``) when ``forbidden`` is None, else exactly the forbidden ones."""
    ops = sorted(set(ops))
    if forbidden is not None:
        return [op for op in ops if op in forbidden]
    return [op for op in ops if op not in ALLOWED_OPS and op not in allowed]


# ------------------------------------------------------------------ static
_TORCH_ROOTS = ("torch", "triton", "autokernel", "builtins", "time", "threading", "os", "sys", "math")
_THREAD_MODULES = ("threading", "_thread", "multiprocessing", "concurrent", "asyncio", "subprocess", "pty", "pexpect")
_STREAM_NAMES = ("Stream", "stream", "ExternalStream", "set_stream")
_DISPATCH_ESCAPES = ("_disable_current_modes", "_DisableTorchDispatch", "DisableTorchFunction",
                     "DisableTorchFunctionSubclass", "_pop_mode", "_pop_mode_temporarily",
                     "_unset_infra_mode", "_set_dispatch_mode", "_ExcludeDispatchKeyGuard",
                     "_RestorePythonTLSSnapshot", "_python_dispatch", "no_dispatch",
                     "_DisablePythonDispatcher", "_push_on_torch_dispatch_stack",
                     # the mode stacks themselves: the judge's watch is on one (popped and pushed back
                     # around a torch.sum, it saw nothing)
                     "_pop_torch_dispatch_stack", "_get_dispatch_stack_at", "_len_torch_dispatch_stack",
                     "_push_mode", "_get_current_dispatch_mode", "_get_current_dispatch_mode_stack",
                     "_pop_torch_function_stack", "_push_on_torch_function_stack", "_get_function_stack_at",
                     "_len_torch_function_stack")
_NATIVE_BUILDS = frozenset({"cpp_extension", "load_inline",
                            # Triton's own helper for its launchers builds and imports any C source
                            "compile_module_from_src", "compile_so_from_src", "compile_module_from_file",
                            "compile_so_from_file"})
# modules that build or load native code (Triton's build helper and its backends' drivers among them)
_NATIVE_MODULES = ("triton.runtime.build", "triton.backends", "setuptools", "distutils", "Cython", "pyximport",
                   "cppimport")
_REGISTRY_MODULES = ("torch.library",)
_REGISTRY_WHY = ("operator registrations change what PyTorch runs for the whole worker, the judge's own "
                 "copies, digests and draws included")
# os functions that start processes (prefixes: forkpty, spawnlp, execvpe...); signals to other
# processes are refused at run time (host_reads.arm_outside: a kernel may signal itself)
_PROCESS_CALLS = ("fork", "system", "popen", "spawn", "exec", "posix_spawn", "register_at_fork")
# what acts on other processes without starting one (their priority, CPU set, limits; refused at
# run time too, host_reads.OTHER_PROCESS_CALLS), by any name: a local alias of os reaches them
_OTHER_PROCESS_NAMES = ("setpriority", "sched_setaffinity", "sched_setparam", "sched_setscheduler", "prlimit",
                        "pidfd_open", "pidfd_send_signal")


def static_findings(source: str, filename: str = "kernel.py", native_code: bool = False) -> list[StaticFinding]:
    """AST checks of a kernel file.  Raises SyntaxError when the file does not parse.
    ``native_code``: the problem lets files build C++/CUDA (KernelBench with ``--allow-torch``);
    elsewhere ``torch.utils.cpp_extension`` is a finding, as native code computes outside
    Triton and outside every run-time check (no op for the watch, no read for the audit hook)."""
    tree = ast.parse(source, filename=filename)
    aliases = _module_aliases(tree)
    torch_names = {name for name, mod in aliases.items() if mod.split(".")[0] == "torch"}
    guarded = {name for name, mod in aliases.items() if mod.split(".")[0] in _TORCH_ROOTS}
    # any module the file imports: the judge's code looks names up in the same modules (the
    # timed draws call random.Random, hashlib.sha256, math.sqrt...)
    guarded |= {(a.asname or a.name).split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for a in node.names}
    # and whatever it imports from a module (a class of torch.nn, a KernelBench file's Model): the
    # judge builds and calls the same objects
    guarded |= {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
                and node.module.split(".")[0] not in ("__future__", "typing", "dataclasses") for a in node.names}
    findings: list[StaticFinding] = []

    def add(rule: str, node: ast.AST, text: str) -> None:
        findings.append(StaticFinding(rule, f"{text} ({filename}:{getattr(node, 'lineno', '?')})"))

    for node in ast.walk(tree):
        # fallback: an except handler that calls torch
        if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            for handler in node.handlers:
                call = _first_call_into(handler, torch_names)
                if call is not None:
                    add("fallback", call, "except handler calls PyTorch "
                        f"({_dotted(call.func) or 'torch'}): a kernel may not fall back to PyTorch")
        # threads, processes, streams
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                if name.split(".")[0] in _THREAD_MODULES:
                    add("threads-or-streams", node, f"imports {name}")
            imported = names + [a.name for a in node.names]
            for name in imported:
                hidden = [part for part in name.split(".") if part in _DISPATCH_ESCAPES]
                if hidden:
                    add("torch-op", node, f"imports {hidden[0]}: a kernel may not hide its ops from the harness")
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "os":
                for a in node.names:
                    if a.name.startswith(_PROCESS_CALLS):
                        add("threads-or-streams", node, f"imports os.{a.name}")
        for name in _imported(node) + ([node.attr] if isinstance(node, ast.Attribute) else []):
            if name.split(".")[-1] in _OTHER_PROCESS_NAMES or name.split(".")[0] == "resource":
                add("threads-or-streams", node, f"uses {name}: other processes (the incumbent's worker) are the judge's")
        if isinstance(node, ast.Attribute):
            dotted = _dotted(node) or ""
            root = dotted.split(".")[0]
            if root in torch_names and node.attr in _STREAM_NAMES:
                add("threads-or-streams", node, f"uses {dotted}: extra streams escape the timing")
            if node.attr in _DISPATCH_ESCAPES:
                add("torch-op", node, f"uses {dotted}: a kernel may not hide its ops from the harness")
            if root in aliases and aliases[root] == "os" and node.attr.startswith(_PROCESS_CALLS):
                add("threads-or-streams", node, f"calls {dotted}")
            if root in aliases and aliases[root] == "sys" and node.attr in ("modules", "settrace", "setprofile"):
                if _is_store_context(node, tree):
                    add("monkey-patch", node, f"changes {dotted}")
        # operator registration: replaces what PyTorch runs for the whole worker, the judge included
        for name in _imported(node):
            if name.startswith(_REGISTRY_MODULES):
                add("monkey-patch", node, f"imports {name}: {_REGISTRY_WHY}")
        # native code computes outside Triton and outside every run-time check
        used = _imported(node) or ([node.attr] if isinstance(node, ast.Attribute) else
                                   [node.id] if isinstance(node, ast.Name) else [])
        dotted_use = [_dotted(node) or ""] if isinstance(node, ast.Attribute) else []
        if not native_code and (any(part in _NATIVE_BUILDS for name in used for part in name.split("."))
                                or any(name.startswith(_NATIVE_MODULES) for name in _imported(node) + dotted_use)):
            add("foreign-compute", node, "builds native code (torch.utils.cpp_extension, Triton's build helper...): "
                "the computation must run in Triton kernels (native code is for KernelBench files with --allow-torch)")
        # torch.nn's global module hooks run in every module's build and forward, the judge's too
        for hook_name in (getattr(node, "attr", None), getattr(node, "id", None),
                          *[a.name.split(".")[-1] for a in getattr(node, "names", ()) if isinstance(node, ast.ImportFrom)]):
            if isinstance(hook_name, str) and hook_name.startswith("register_module_"):
                add("monkey-patch", node, f"uses {hook_name}: a global hook of torch.nn runs in the judge's own "
                    "work (the reference Model built for each draw)")
        if isinstance(node, ast.Attribute) and node.attr == "library" and \
                (_dotted(node) or "").split(".")[0] in torch_names:
            add("monkey-patch", node, f"uses {_dotted(node)}: {_REGISTRY_WHY}")
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            for alias in node.names:
                if alias.name in _STREAM_NAMES or alias.name.endswith(("Stream", "StreamContext")):
                    add("threads-or-streams", node, f"imports {node.module}.{alias.name}: extra streams escape the timing")
        if isinstance(node, ast.Name) and node.id in _DISPATCH_ESCAPES:
            add("torch-op", node, f"uses {node.id}: a kernel may not hide its ops from the harness")
        # monkey-patching: assignment to attributes of guarded modules
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        for target in targets:
            for leaf in _flatten_targets(target):
                if isinstance(leaf, ast.Attribute) and leaf.attr.startswith("__") and leaf.attr.endswith("__"):
                    add("introspection", leaf, f"assigns {leaf.attr} on an object: a class's protocol methods "
                        "(an op's __call__, swapped for the length of a call, ran in the judge's watch)")
                if isinstance(leaf, (ast.Attribute, ast.Subscript)):
                    dotted = _dotted(leaf.value if isinstance(leaf, ast.Subscript) else leaf) or ""
                    root = dotted.split(".")[0]
                    if root in guarded or root in ("__builtins__",):
                        add("monkey-patch", leaf, f"assigns to {dotted}")
                    elif root in aliases and aliases[root] == "sys" and ".modules" in dotted + ".":
                        add("monkey-patch", leaf, f"assigns to {dotted}")
        if isinstance(node, ast.Call):
            fname = _dotted(node.func) or ""
            if fname in ("setattr", "delattr", "builtins.setattr", "object.__setattr__") and node.args:
                target = _dotted(node.args[0]) or ""
                root = target.split(".")[0]
                if root in guarded or root == "__builtins__" or target.startswith("sys.modules"):
                    add("monkey-patch", node, f"{fname}() on {target}")
            if fname.split(".")[-1] in ("Thread", "Process", "ThreadPoolExecutor", "ProcessPoolExecutor"):
                add("threads-or-streams", node, f"creates {fname}")
    _reach_findings(tree, aliases, add)
    _jit_body_findings(tree, aliases, add)
    return _dedupe(findings)


def _is_jit_decorated(node: ast.AST) -> bool:
    """A function decorated as Triton code (``@triton.jit``, ``@jit``, ``@triton.jit(...)``,
    ``@triton.constexpr_function``...)."""
    for decorator in getattr(node, "decorator_list", ()):
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if (_dotted(target) or "").split(".")[-1] in ("jit", "constexpr_function"):
            return True
    return False


def _jit_body_findings(tree: ast.AST, aliases: dict[str, str], add) -> None:
    """A ``@triton.jit`` body that calls Python of the file's (a plain function, a class, a
    lambda) or of a module other than Triton's.  Compiled Triton refuses such a body, but the
    interpreter runs the body as Python: a body handed each loaded value's bits (``int()``,
    through the interpreter's own ``__index__``) to a plain function that summed them with
    ``math.fsum`` passed every stage on the CPU."""
    module_level = getattr(tree, "body", [])
    jit_names = {n.name for n in module_level if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and _is_jit_decorated(n)}
    # a module-level name bound to a jit function by a call (``f = triton.jit(g)``) is Triton code too
    for n in module_level:
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and \
                (_dotted(n.value.func) or "").split(".")[-1] in ("jit", "autotune", "heuristics"):
            jit_names |= {t.id for t in n.targets if isinstance(t, ast.Name)}
    def triton_value(value: ast.AST) -> bool:  # tl.float32, tl.exp, triton.jit(g)...
        root = (_dotted(value.func if isinstance(value, ast.Call) else value) or "").split(".")[0]
        return aliases.get(root, "").split(".")[0] == "triton"

    python_names = set()
    for n in module_level:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name not in jit_names:
            python_names.add(n.name)
        elif isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None and \
                not isinstance(n.value, ast.Constant) and not triton_value(n.value):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                if isinstance(t, ast.Name) and t.id not in jit_names:
                    python_names.add(t.id)
    foreign_modules = {name for name, mod in aliases.items() if mod.split(".")[0] != "triton"
                       and name not in ("builtins",)}
    for fn in ast.walk(tree):
        if not (isinstance(fn, ast.FunctionDef) and _is_jit_decorated(fn)):
            continue
        local = {a.arg for a in fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs}
        constexprs = {a.arg for a in fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs
                      if a.annotation is not None and (_dotted(a.annotation) or "").endswith("constexpr")}
        local |= {t.id for t in ast.walk(fn) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}
        for node in ast.walk(fn):
            if isinstance(node, (ast.Global, ast.Nonlocal)):
                add("foreign-compute", node, f"the Triton kernel {fn.name} declares {', '.join(node.names)} "
                    "global: a Triton body hands nothing to Python (the interpreter would)")
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                for leaf in _flatten_targets(target):
                    if isinstance(leaf, (ast.Attribute, ast.Subscript)):
                        root = (_dotted(leaf) or "").split(".")[0].split("[")[0]
                        if root and root not in local:
                            add("foreign-compute", leaf, f"the Triton kernel {fn.name} writes into {root}, a "
                                "name outside it: a Triton body hands nothing to Python (the interpreter would)")
            if not isinstance(node, ast.Call):
                continue
            root = (_dotted(node.func) or "").split(".")[0]
            if isinstance(node.func, ast.Name) and root in ("int", "float", "bool", "complex") and root not in \
                    python_names and not all(isinstance(a, ast.Constant) or (isinstance(a, ast.Name) and a.id in constexprs)
                                             for a in node.args):
                add("foreign-compute", node, f"the Triton kernel {fn.name} converts a value with {root}(): a Triton "
                    "value read into Python (the interpreter would read it; Triton would not compile it)")
            elif isinstance(node.func, ast.Name) and root in python_names:
                add("foreign-compute", node, f"the Triton kernel {fn.name} calls {root}, Python of the file's: "
                    "the interpreter would run it as Python, Triton would not compile it")
            elif root in foreign_modules or (isinstance(node.func, ast.Attribute) and root in python_names):
                add("foreign-compute", node, f"the Triton kernel {fn.name} calls {_dotted(node.func)}: a Triton "
                    "body calls Triton, not Python modules (the interpreter would run it as Python)")


def _imported(node: ast.AST) -> list[str]:
    """The dotted names an import statement brings in (``import a.b``: a.b; ``from a import
    b``: a.b); none for any other node."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        return [f"{node.module}.{a.name}" for a in node.names]
    return []


# Modules that compute outside Triton, and modules that reach into the interpreter's state.
_FOREIGN_MODULES = ("numpy", "ctypes", "cffi", "numba", "cupy", "jax", "scipy", "pandas", "tensorflow", "mmap")
_INTROSPECTION_MODULES = ("importlib", "inspect", "gc", "marshal", "types", "dis", "builtins", "operator",
                          "pickle", "copyreg", "code", "codeop", "runpy", "pkgutil", "weakref", "atexit", "signal",
                          "_operator", "traceback", "pdb", "bdb", "trace", "pydoc", "cProfile", "profile",
                          "timeit",  # timeit compiles and runs the statements it is given as text
                          # mock.patch and patch.dict set the attributes and dict keys they are named in strings
                          "unittest", "mock",
                          # doctest runs the examples of docstrings (which no rule on strings reads)
                          "doctest",
                          # unpicklers by other names: the bytes name the functions they call
                          "shelve", "yaml", "ray", "cloudpickle", "dill", "joblib", "jsonpickle",
                          # syntax trees: names handed over as data (an ast.alias), for a library to resolve
                          "ast")
# Triton's tooling (its Gluon translator, AOT compiler, linker, disassembler) walks modules and
# objects by the names it is given (``slice_kernel.get_import_from_binding(obj, alias)`` is a
# getattr: tests/attacks/softmax_pass11_triton_tools_binding.py); the kernel helpers under
# ``triton.tools`` stay allowed
_TRITON_KERNEL_TOOLS = frozenset({"tensor_descriptor", "ragged_tma", "mxfp"})
_INTROSPECTION_NAMES = ("__import__", "exec", "eval", "compile", "vars", "globals", "locals", "__builtins__",
                        "__loader__", "__spec__", "breakpoint")
_INTROSPECTION_ATTRS = ("f_locals", "f_globals", "f_back", "f_code", "f_builtins", "gi_frame", "cr_frame", "ag_frame",
                        "tb_frame", "tb_next", "__globals__", "__dict__", "__subclasses__", "__bases__", "__base__",
                        "__mro__", "__builtins__", "__code__", "__closure__", "cell_contents", "__wrapped__",
                        # a function's default arguments: what a wrapper of the judge's was handed
                        "__defaults__", "__kwdefaults__",
                        "__getattribute__", "__self__", "__func__", "__class__", "__loader__", "__spec__",
                        "_getframe", "_current_frames", "settrace", "setprofile", "modules", "import_module",
                        "__import__", "get_referrers", "get_referents", "get_objects", "_getframemodulename",
                        # other ways to a frame: tracebacks, logging's frame helper, audit hooks (they
                        # get the frames of sys._getframe calls), sys.monitoring callbacks
                        "__traceback__", "exc_info", "last_traceback", "last_exc", "currentframe", "walk_stack",
                        "walk_tb", "addaudithook", "monitoring", "_current_exceptions",
                        # attributes read by a name held in a string
                        "attrgetter", "methodcaller", "get_field", "resolve_name", "__setattr__", "__delattr__",
                        # string.Formatter resolves a field's dotted name with getattr and hands the object
                        # to format_field, which a subclass overrides (tests/attacks/softmax_pass10_formatter_closure.py)
                        "Formatter",
                        # import hooks run in the judge's own imports
                        "meta_path", "path_hooks", "path_importer_cache",
                        # eval by another name: a string annotation is evaluated as an expression
                        # (tests/attacks/reduce_pass9_typing_eval_clock.py)
                        # (and so does functools.singledispatch's register of an annotated function)
                        "get_type_hints", "ForwardRef", "_eval_type", "evaluate_forward_ref", "get_annotations",
                        "singledispatch", "singledispatchmethod")
_HOOK_METHODS = ("__reduce__", "__reduce_ex__", "__getstate__", "__setstate__", "__getnewargs__",
                 "__getnewargs_ex__", "__torch_function__", "__torch_dispatch__", "__del__", "__class_getitem__",
                 "__init_subclass__", "__set_name__", "__instancecheck__", "__subclasscheck__", "__match_args__")
# a class body that names another module as its own poses as that module's class
_POSING_NAMES = ("__module__", "__qualname__")
_FOREIGN_ATTRS = ("numpy", "from_numpy", "ops", "np", "ctypes", "tolist", "__array__", "__array_interface__",
                  "__cuda_array_interface__", "__dlpack__", "from_dlpack", "to_dlpack",
                  # raw bytes of a storage; the Triton interpreter's values inside a kernel body
                  "_write_file", "_share_fd_cpu_", "_share_filename_cpu_", "handle")
_ATTR_CALLS = ("getattr", "setattr", "delattr", "hasattr")
# torch.jit (fork, TorchScript) and torch.futures run work on torch's own threads
# torch.load unpickles: a blob of the file's own (base64 in a string) calls exec with any text
_TORCH_UNPICKLING = ("load", "serialization")
_TORCH_THREAD_MODULES = ("jit", "futures", "package")  # package: loads scripted modules from an archive
# torch.fx's Interpreter reads attributes and calls methods named in strings (``fetch_attr``,
# ``call_method``): a getattr with a computed name under a public torch name
# (tests/attacks/softmax_pass10_fx_string_escape.py reached torch._C._DisableTorchDispatch by two strings)
# torch.ao and torch.export are built on fx and carry their own resolvers of dotted names
# (torch.ao.quantization.utils.getattr_from_fqn: tests/attacks/softmax_pass11_ao_getattr_from_fqn.py)
_TORCH_STRING_MODULES = ("fx", "ao", "export")
# getattr-by-string engines by the shape of their names, wherever they live (a module's helper
# such as ``getattr_from_fqn``, ``get_attr``, an fx Interpreter's ``fetch_attr``/``call_method``,
# an entry point's ``module:attr.attr``): the eleventh pass found one in torch.ao that no list held
_STRING_ATTR_ENGINE = re.compile(r"(?i)(?:get|set|del|has|fetch)_?attr|fqn|entry_?points?$|call_method"
                                 r"|resolve_?name|resolve_dotted|import_?string|(?-i:Interpreter)$")
# the builtins that read or write attributes and namespaces, as attributes of a module that holds
# ``builtins`` (``triton.language.core.builtins.getattr``: a getattr no rule on the name saw)
_BUILTIN_ATTRS = frozenset({"getattr", "setattr", "delattr", "hasattr", "vars", "globals", "locals"})
# Modules that the rules guard, reached again as another module's global
# (``torch.nn.functional.torch.fx``, ``tl.core.builtins``): the rules on a module read the
# spelling from the file's own import, so a chain that re-enters one through a module's globals
# passed every rule keyed on the root (tests/attacks/softmax_pass11_builtins_reentered.py,
# softmax_pass11_fx_reentered.py).  A kernel file names the modules it uses by importing them.
# (torch.fx and torch.jit down a chain are the rules on torch's modules: ``triton.runtime.jit`` is Triton's.)
_REENTERED_MODULES = frozenset({
    "torch", "triton", "autokernel", "builtins", "threading", "_thread", "os", "sys", "subprocess",
    "multiprocessing", "asyncio", "concurrent", "np", "ctypes", "cffi", "importlib", "inspect", "gc",
    "marshal", "dis", "operator", "_operator", "pickle", "copyreg", "runpy", "pkgutil", "weakref", "atexit",
    "pydoc", "pdb", "bdb", "cProfile", "timeit", "unittest", "mock", "doctest", "shelve", "yaml", "cloudpickle",
    "dill", "joblib", "functools", "string", "logging", "typing", "linecache", "tokenize", "ast",
    "sympy", "signal", "resource", "mmap", "xmlrpc", "pkg_resources", "setuptools", "pip"})
# compiles TorchScript source text, by torch's top-level name too (torch.CompilationUnit)
_TORCH_THREAD_NAMES = frozenset({"CompilationUnit"})
_TORCH_THREADS_WHY = ("TorchScript and torch's futures run work on torch's own threads, which no watch covers "
                      "and no thread count sees")
_MODE_CLASSES = frozenset({"TorchFunctionMode", "TorchDispatchMode", "BaseTorchFunctionMode"})
# Names of frames' and namespaces' attributes that a kernel file has no reason to write even
# inside a string (a string can be read as an attribute name: getattr, string.Formatter,
# a class's __match_args__).
_NAMED_IN_STRINGS = frozenset(a for a in _INTROSPECTION_ATTRS + _HOOK_METHODS
                              if a.startswith(("f_", "tb_", "gi_", "cr_", "ag_", "__", "_get", "_current"))
                              or a in ("cell_contents", "get_referrers", "get_referents", "get_objects"))


def _attribute_finding(attr: str) -> tuple[str, str] | None:
    """The rule an attribute read by this name breaks, whatever the spelling of the read (an
    attribute expression, a class pattern of ``match``), and why; or None."""
    if attr in _INTROSPECTION_ATTRS or attr in _HOOK_METHODS:
        return "introspection", ""
    if attr in _FOREIGN_ATTRS:
        return "foreign-compute", ": the computation must run in Triton kernels"
    return None


def _string_engine_findings(node: ast.AST, add) -> None:
    """Getattr by string under names no list held: helpers named like resolvers of attribute
    names, the attribute builtins reached as attributes, and guarded modules re-entered through
    another module's globals."""
    names: list[str] = []
    if isinstance(node, ast.Attribute):
        names = [node.attr]
        if node.attr in _BUILTIN_ATTRS:
            add("introspection", node, f"uses {_dotted(node) or node.attr}: the builtin {node.attr} reached as an "
                "attribute (attribute names are not chosen at run time)")
        if node.attr in _REENTERED_MODULES:
            add("introspection", node, f"uses {_dotted(node) or node.attr}: a module reached through another "
                "module's globals (a kernel file imports the modules it uses)")
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        dotted = _imported(node)
        names = [part for name in dotted for part in name.split(".")] + [a.asname or "" for a in node.names]
        for name in dotted:
            reentered = [part for part in name.split(".")[1:] if part in _REENTERED_MODULES]
            if reentered:
                add("introspection", node, f"imports {name}: a module reached through another module's globals")
    elif isinstance(node, ast.Name):
        names = [node.id] if node.id not in _ATTR_CALLS else []
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        names = []  # the file's own names: what they call is read where they call it
    for name in names:
        if name and _STRING_ATTR_ENGINE.search(name):
            add("introspection", node, f"uses {name}: reads or calls attributes named in strings")
            break


def _triton_tooling(dotted: str) -> bool:
    """Is this dotted name (its root resolved to a module) a part of Triton's tooling?"""
    parts = dotted.split(".")
    return parts[:2] == ["triton", "tools"] and len(parts) > 2 and parts[2] not in _TRITON_KERNEL_TOOLS


def _reach_findings(tree: ast.AST, aliases: dict[str, str], add) -> None:
    """Ways to reach what a kernel has no business reaching: the harness's frames and
    namespaces, names and code built at run time, and compute outside Triton."""
    torch_names = {name for name, mod in aliases.items() if mod.split(".")[0] == "torch"}
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        _string_engine_findings(node, add)
        tooling = [name for name in _imported(node) if _triton_tooling(name)]
        if isinstance(node, ast.Attribute):
            dotted = (_dotted(node) or "").split(".")
            tooling += [".".join([aliases[dotted[0]]] + dotted[1:])] if dotted[0] in aliases and \
                _triton_tooling(".".join([aliases[dotted[0]]] + dotted[1:])) else []
        if tooling:
            add("introspection", node, f"uses {tooling[0]}: Triton's tooling resolves the names it is given "
                "(a kernel file uses Triton's language and its kernel helpers)")
        if isinstance(node, (ast.Attribute, ast.Name, ast.alias)) and _MODE_CLASSES.intersection(
                {getattr(node, "attr", None), getattr(node, "id", None), getattr(node, "name", "").split(".")[-1]}):
            add("introspection", node, f"uses {_dotted(node) or node.name}: kernel files run under the judge's "
                "modes, never their own")
        if isinstance(node, (ast.Attribute, ast.Name, ast.alias)) and _TORCH_THREAD_NAMES.intersection(
                {getattr(node, "attr", None), getattr(node, "id", None), getattr(node, "name", "").split(".")[-1]}):
            add("threads-or-streams", node, f"uses {_dotted(node) or node.name}: {_TORCH_THREADS_WHY}")
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                if a.name in _INTROSPECTION_ATTRS or a.name in _ATTR_CALLS:
                    add("introspection", node, f"imports {a.name}")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if isinstance(node, ast.ImportFrom):
                names += [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] in _FOREIGN_MODULES or (parts[0] == "torch" and len(parts) > 1 and parts[1] in ("ops", "_C")):
                    add("foreign-compute", node, f"imports {name}: the computation must run in Triton kernels")
                elif parts[0] == "torch" and len(parts) > 1 and parts[1] in _TORCH_UNPICKLING:
                    add("introspection", node, f"imports {name}: torch.load unpickles, and a pickle calls "
                        "whatever it names (exec of text included)")
                elif parts[0] == "torch" and len(parts) > 1 and parts[1] in _TORCH_THREAD_MODULES:
                    add("threads-or-streams", node, f"imports {name}: {_TORCH_THREADS_WHY}")
                elif parts[0] == "torch" and len(parts) > 1 and parts[1] in _TORCH_STRING_MODULES:
                    add("introspection", node, f"imports {name}: it reads attributes and calls methods named in "
                        "strings (fx's Interpreter, torch.ao's getattr_from_fqn)")
                elif parts[0].startswith("_") and parts[0] != "__future__" and parts[0] not in _THREAD_MODULES:
                    add("introspection", node, f"imports {name}: a private module (the C side of signal, "
                        "weakref, operator...) reaches what its public module would")
                elif parts[:2] == ["logging", "config"]:
                    add("introspection", node, f"imports {name}: logging.config evaluates text (fileConfig's "
                        "handler args) and resolves dotted names given as strings")
                elif parts[0] == "autokernel":
                    add("introspection", node, f"imports {name}: a kernel file has no business with the judge")
                elif parts[0] in _INTROSPECTION_MODULES or (parts[0] == "sys" and len(parts) > 1) \
                        or name.startswith("torch.utils.weak"):  # weakref's callbacks, under torch's name
                    add("introspection", node, f"imports {name}")
                elif parts[0] == "torch" and any(p.startswith("_") and not p.startswith("__") for p in parts[1:]):
                    add("torch-op", node, f"imports private torch API {name}")
            if isinstance(node, ast.ImportFrom) and (node.module or "") == "sys":
                for a in node.names:
                    if a.name in _INTROSPECTION_ATTRS or a.name.startswith("_"):
                        add("introspection", node, f"imports sys.{a.name}")
        elif isinstance(node, ast.Name) and node.id in _INTROSPECTION_NAMES:
            add("introspection", node, f"uses {node.id}: names and code are not built at run time in a kernel file")
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node) or node.attr
            root = dotted.split(".")[0]
            if node.attr in _INTROSPECTION_ATTRS or node.attr in _HOOK_METHODS:
                add("introspection", node, f"uses {dotted}")
            elif node.attr in _FOREIGN_ATTRS:
                add("foreign-compute", node, f"uses {dotted}: the computation must run in Triton kernels")
            elif root in torch_names and node.attr in _TORCH_UNPICKLING and isinstance(node.value, ast.Name):
                add("introspection", node, f"uses {dotted}: torch.load unpickles, and a pickle calls whatever it "
                    "names (exec of text included)")
            elif root in torch_names and node.attr in _TORCH_THREAD_MODULES and isinstance(node.value, ast.Name):
                add("threads-or-streams", node, f"uses {dotted}: {_TORCH_THREADS_WHY}")
            elif root in torch_names and node.attr in _TORCH_STRING_MODULES:
                add("introspection", node, f"uses {dotted}: it reads attributes and calls methods named in strings "
                    "(fx's Interpreter, torch.ao's getattr_from_fqn)")
            elif root in torch_names and node.attr.startswith("_") and not node.attr.startswith("__"):
                add("torch-op", node, f"uses private torch API {dotted}")
            elif aliases.get(root) == "logging" and node.attr == "config":
                add("introspection", node, f"uses {dotted}: logging.config evaluates text and resolves dotted names")
            elif aliases.get(root) == "sys" and node.attr.startswith("_") and not node.attr.startswith("__"):
                add("introspection", node, f"uses {dotted}: sys's private functions set hooks and read frames")
            elif root in torch_names and node.attr == "weak":
                add("introspection", node, f"uses {dotted}: weak references' callbacks run in the judge's work")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                node.value in _HOOK_METHODS or node.value in _INTROSPECTION_ATTRS and node.value.startswith("__")):
            add("introspection", node, f"names {node.value}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings and \
                _NAMED_IN_STRINGS.intersection(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", node.value)):
            named = sorted(_NAMED_IN_STRINGS.intersection(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", node.value)))
            add("introspection", node, f"names {named[0]} in a string")
        elif type(node).__name__ == "MatchClass":  # case C(attr=...) reads subject.attr
            for attr in node.kwd_attrs:
                found = _attribute_finding(attr)
                if found:
                    add(found[0], node, f"reads .{attr} through a class pattern{found[1]}")
        elif isinstance(node, ast.keyword) and node.arg in _HOOK_METHODS:  # type(name, bases, dict(hook=f))
            add("introspection", node, f"defines {node.arg}: kernel files return plain tensors")
        elif (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) or isinstance(node, ast.keyword)) \
                and getattr(node, "id", getattr(node, "arg", None)) in _POSING_NAMES:
            add("introspection", node, f"sets {getattr(node, 'id', None) or node.arg}: a class of the kernel file's "
                "posing as another module's (the judge tells Triton's launch arguments by their classes)")
        elif isinstance(node, ast.Name) and node.id in _HOOK_METHODS:  # bound in a class body: a hook too
            add("introspection", node, f"defines {node.id}: kernel files return plain tensors")
        elif isinstance(node, ast.Name) and node.id in _ATTR_CALLS and id(node) not in called:
            add("introspection", node, f"uses {node.id} as a value: attribute names are not chosen at run time")
        elif isinstance(node, ast.FunctionDef) and node.name in _HOOK_METHODS:
            add("introspection", node, f"defines {node.name}: kernel files return plain tensors")
        elif isinstance(node, ast.ClassDef):
            for base in node.bases:
                if (_dotted(base) or "").split(".")[-1] in ("Tensor", "TorchDispatchMode", "TorchFunctionMode"):
                    add("introspection", node, f"subclasses {_dotted(base)}: kernel files return plain tensors")
        if isinstance(node, ast.Call):
            fname = _dotted(node.func) or ""
            if fname.split(".")[-1] in _ATTR_CALLS and len(node.args) >= 2:
                name = node.args[1]
                if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                    add("introspection", node, f"{fname}() with a computed attribute name")
                else:
                    attr = name.value
                    target = (_dotted(node.args[0]) or "").split(".")[0]
                    if attr in _INTROSPECTION_ATTRS or attr in _INTROSPECTION_NAMES:
                        add("introspection", node, f"{fname}(..., {attr!r})")
                    elif attr in _FOREIGN_ATTRS:
                        add("foreign-compute", node, f"{fname}(..., {attr!r})")
                    elif attr in _OTHER_PROCESS_NAMES:  # getattr(os, "setpriority"): the name, as a string
                        add("threads-or-streams", node, f"{fname}(..., {attr!r}): other processes (the "
                            "incumbent's worker) are the judge's")
                    elif attr in _DISPATCH_ESCAPES or (target in torch_names and attr.startswith("_")
                                                       and not attr.startswith("__")):
                        add("torch-op", node, f"{fname}({target}, {attr!r}): private torch API")


def _module_aliases(tree: ast.AST) -> dict[str, str]:
    """Local names bound to modules (or names from modules) of interest: name -> module path."""
    aliases: dict[str, str] = {"torch": "torch", "triton": "triton", "builtins": "builtins"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    aliases[a.asname] = a.name
                else:
                    aliases[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    # and names bound to them by plain assignment (``_torch = torch``; ``c = _torch._C``): the
    # rules on private torch APIs, stream names and assignments into guarded modules go by these
    # names, and a local alias of torch reached ``torch._C._get_dispatch_stack_at`` (the judge's
    # own watch) unseen
    assigned = [(node.targets[0].id, node.value) for node in ast.walk(tree)
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, (ast.Name, ast.Attribute))]
    for _ in range(4):  # chains of aliases, a few deep
        for name, value in assigned:
            dotted = _dotted(value) or ""
            root, _, rest = dotted.partition(".")
            if root in aliases and name not in aliases:
                aliases[name] = aliases[root] + ("." + rest if rest else "")
    return aliases


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Call):
        inner = _dotted(node.func)
        if inner is None:
            return None
        parts.append(inner + "()")
        return ".".join(reversed(parts))
    if isinstance(node, ast.Subscript):
        inner = _dotted(node.value)
        return None if inner is None else ".".join([inner] + list(reversed(parts)))
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _first_call_into(handler: ast.AST, roots: set[str]) -> ast.Call | None:
    for node in ast.walk(handler):
        if isinstance(node, ast.Call):
            name = _dotted(node.func) or ""
            if name.split(".")[0] in roots:
                return node
            # x.softmax(...) style method calls on tensors look like any method call; only
            # calls rooted at a torch alias count.
    return None


def _flatten_targets(target: ast.AST) -> list[ast.AST]:
    if isinstance(target, (ast.Tuple, ast.List)):
        out: list[ast.AST] = []
        for elt in target.elts:
            out.extend(_flatten_targets(elt))
        return out
    return [target]


def _is_store_context(attr: ast.Attribute, tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and node.value is attr and isinstance(node.ctx, (ast.Store, ast.Del)):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.value is attr \
                and node.func.attr in ("update", "pop", "__setitem__", "setdefault"):
            return True
    return False


def _dedupe(findings: list[StaticFinding]) -> list[StaticFinding]:
    seen, out = set(), []
    for f in findings:
        if (f.rule, f.message) not in seen:
            seen.add((f.rule, f.message))
            out.append(f)
    return out


# ------------------------------------------------------------- run time
OWN_MODULES = ("autokernel.harness", "autokernel.problems")


def _critical_namespaces(ordered: bool = True, own: bool = True) -> list[tuple[str, Any]]:
    """(name, object) whose callable attributes a candidate must leave alone (resolved afresh
    from ``sys.modules`` each time: a replaced module shows; ``ordered``: the harness's own
    modules sorted by name, for a stable baseline)."""
    import builtins
    import time

    spaces: list[tuple[str, Any]] = [("builtins", builtins), ("time", time)]
    torch = sys.modules.get("torch")
    if torch is not None:
        # torch._C too: the judge's checks call its functions, and torch's Python looks them up there
        # (``_dispatch_tls_is_dispatch_key_excluded``, rebound for the length of a call, ran the kernel's
        # work in the watch's own check after it)
        spaces += [("torch", torch), ("torch._C", torch._C), ("torch.Tensor", torch.Tensor),
                   ("torch.nn.functional", torch.nn.functional),
                   ("torch.cuda", torch.cuda), ("torch.cuda.Event", torch.cuda.Event),
                   ("torch.testing", torch.testing), ("torch.multiprocessing", torch.multiprocessing),
                   ("torch.UntypedStorage", torch.UntypedStorage)]
        serialization = sys.modules.get("torch.serialization")
        if serialization is not None:
            spaces.append(("torch.serialization", serialization))
        dispatch = sys.modules.get("torch.utils._python_dispatch")
        if dispatch is not None:
            spaces.append(("torch.utils._python_dispatch", dispatch))
        # its registering methods are wrapped to count (registrations.py): putting one back shows
        spaces.append(("torch._C._DispatchModule", torch._C._DispatchModule))
    triton = sys.modules.get("triton")
    if triton is not None:
        spaces.append(("triton", triton))
        testing = sys.modules.get("triton.testing")
        if testing is not None:
            spaces.append(("triton.testing", testing))
        jit = sys.modules.get("triton.runtime.jit")
        if jit is not None:
            spaces.append(("triton.runtime.jit.JITFunction", jit.JITFunction))
        interpreter = sys.modules.get("triton.runtime.interpreter")
        if interpreter is not None:
            spaces += [("triton.runtime.interpreter", interpreter),
                       ("triton.runtime.interpreter.InterpretedFunction", interpreter.InterpretedFunction),
                       ("triton.runtime.interpreter.GridExecutor", interpreter.GridExecutor),
                       # its dots, bf16 casts and program order are a GPU's (interpreter_as_gpu.py)
                       ("triton.runtime.interpreter.InterpreterBuilder", interpreter.InterpreterBuilder)]
    dispatch = sys.modules.get("torch.utils._python_dispatch")
    if dispatch is not None:
        spaces.append(("TorchDispatchMode", dispatch.TorchDispatchMode))
    # the modules the problems' code looks names up in when the worker draws a call's inputs
    for name in ("math", "random", "hashlib", "contextlib", "types", "sys", "gc", "warnings",
                 "torch.random", "torch.nn.modules.module", "torch.func"):
        module = sys.modules.get(name)
        if module is not None:
            spaces.append((name, module))
    for name in ("threading", "_thread", "pickle", "multiprocessing.reduction"):
        module = sys.modules.get(name)
        if module is not None:
            spaces.append((name, module))
    connection = sys.modules.get("multiprocessing.connection")
    if connection is not None:
        spaces.append(("multiprocessing.connection.Connection", connection.Connection))
    if not own:  # the caller looks the harness's own modules up in sys.modules by name
        return spaces
    mine = [(name, module) for name, module in list(sys.modules.items())
            if name.startswith(OWN_MODULES) and module is not None]
    return spaces + (sorted(mine, key=lambda item: item[0]) if ordered else mine)


def fingerprint() -> dict[str, str]:
    """What the critical callables are right now: the id of each and, for Python functions,
    the id of its code object (swapping ``__code__`` keeps the function's id).  The worker
    sends this with every answer; the baseline taken before any kernel was loaded lives in
    the parent (worker.Worker.baseline), out of the candidate's reach."""
    return _fingerprint_and_places()[0]


def _fingerprint_and_places() -> tuple[dict[str, str], dict[str, tuple[str, str, Any]]]:
    """The fingerprint, and where each of its names was found: (namespace, attribute, value)."""
    import types

    out: dict[str, str] = {}
    places: dict[str, tuple[str, str, Any]] = {}
    for prefix, space in _critical_namespaces():
        try:
            items = list(vars(space).items())
        except TypeError:
            continue
        for key, value in items:
            if callable(value) or isinstance(value, type(sys)):
                code = value.__code__ if type(value) is types.FunctionType else None
                out[f"{prefix}.{key}"] = f"{id(value)}:{id(code) if code is not None else 0}"
                places[f"{prefix}.{key}"] = (prefix, key, value)
    return out, places


def fingerprint_digest(fingerprint: dict[str, str]) -> str:
    """A digest of the fingerprint's values in the dict's order (the baseline's order): the id
    of every value, then the id of every code object (Python functions only).  The worker's
    ``FingerprintWatch`` computes the same digest from the ids themselves."""
    ids, codes = [], []
    for value in fingerprint.values():
        first, _, second = str(value).partition(":")
        ids.append(int(first or 0))
        if second not in ("", "0"):
            codes.append(int(second))
    return _ids_digest(ids + codes)


def _ids_digest(ids: list[int]) -> str:
    import array
    import hashlib

    return hashlib.blake2b(array.array("Q", ids).tobytes(), digest_size=20).hexdigest()


class NamesHeld:
    """Do these namespaces (live dicts or mappingproxies) still hold these objects under these
    names?  One pass in C over every name of every namespace: each namespace's names fetched by
    one ``itemgetter`` (a name that is gone raises), the objects compared by identity, chained.
    No method of an object found there runs (identity, never ``==``); the builtins it calls are
    taken at construction (a kernel that rebinds ``all`` or ``map`` does not reach it).  Only a
    yes is final: on a no the caller's own per-name comparison decides (and names what changed)."""

    def __init__(self, runs: Iterable[tuple[Any, list[str], list[Any]]]) -> None:
        import itertools
        import operator

        self._spaces, getters, values = [], [], []
        for space, keys, objects in runs:
            if not keys:
                continue
            twice = len(keys) == 1  # one name: asked twice, so that every getter returns a tuple
            self._spaces.append(space)
            getters.append(operator.itemgetter(*(list(keys) * 2 if twice else keys)))
            values += list(objects) * 2 if twice else list(objects)
        self._getters, self._values = getters, tuple(values)
        self._call = getattr(operator, "call", None) or (lambda f, arg: f(arg))
        self._is, self._all, self._map, self._chain = operator.is_, all, map, itertools.chain.from_iterable
        self._missing = LookupError

    def held(self) -> bool:
        map_ = self._map
        try:
            return self._all(map_(self._is, self._chain(map_(self._call, self._getters, self._spaces)),
                                  self._values))
        except self._missing:  # a name gone: the caller's comparison says what
            return False


class TensorClassGuard:
    """The own namespaces of the classes whose methods the judge's work looks up through the
    objects it handles, as they were before any kernel ran: ``torch.Tensor``, the storage classes
    (``untyped_storage()`` of an output), ``torch.nn.Module`` and ``torch.nn.Parameter`` (a
    KernelBench draw builds the reference ``Model``).  Their C methods (``copy_``, ``sum``,
    ``data_ptr``...) live on C bases, which cannot be changed; but a name added to the Python
    class shadows them for every object, and the fingerprint compares only the names it
    started with (``type(out.untyped_storage()).data_ptr = f`` added one).  ``changes`` names what
    was replaced, removed, or added over a base class's attribute; the worker asks after every
    call, before its own tensor work."""

    def __init__(self) -> None:
        import torch

        classes = [torch.Tensor, torch.UntypedStorage, torch.TypedStorage, torch.nn.Module, torch.nn.Parameter]
        storage_base = getattr(sys.modules.get("torch.storage"), "_StorageBase", None)
        if isinstance(storage_base, type):
            classes.append(storage_base)
        # every module class of torch.nn: a KernelBench draw builds the reference Model from them,
        # and a method rebound on one (nn.LeakyReLU.__init__, through a local alias) ran there,
        # recovered the input seed from the weights' and computed the next call's output
        classes += [c for c in vars(torch.nn).values() if isinstance(c, type) and issubclass(c, torch.nn.Module)
                    and c is not torch.nn.Module]
        self._guarded = [(cls, cls.__mro__[1:], dict(vars(cls))) for cls in classes]
        # what the per-call comparison walks, in C (map/operator.is_ over lists taken now, with
        # the builtins it calls): a generator per class cost 0.64 ms a call over 168 classes.
        # A class's namespace is a mappingproxy: its unbound get, with each name's class beside it
        import operator
        import types

        self._spaces = [vars(cls) for cls, _bases, _baseline in self._guarded]
        self._counts = [len(baseline) for _cls, _bases, baseline in self._guarded]
        self._space_of_key = [space for space, (_c, _b, baseline) in zip(self._spaces, self._guarded)
                              for _ in baseline]
        self._keys = [k for _c, _b, baseline in self._guarded for k in baseline]
        self._values = [v for _c, _b, baseline in self._guarded for v in baseline.values()]
        self._is, self._get, self._all, self._map, self._len, self._list = (
            operator.is_, types.MappingProxyType.get, all, map, len, list)
        self._names_held = NamesHeld((space, list(baseline), list(baseline.values()))
                                     for space, (_c, _b, baseline) in zip(self._spaces, self._guarded))

    def unchanged(self) -> bool:
        """Does every guarded class hold exactly its baseline names and objects?  One pass in C
        over every name of every class."""
        map_ = self._map
        return (self._list(map_(self._len, self._spaces)) == self._counts
                and (self._names_held.held()
                     or self._all(map_(self._is, map_(self._get, self._space_of_key, self._keys), self._values))))

    def changes(self) -> list[str]:
        if self.unchanged():
            return []
        found: list[str] = []
        for cls, bases, baseline in self._guarded:
            now = vars(cls)
            changed = [k for k, v in baseline.items() if now.get(k) is not v]
            added = [k for k in now if k not in baseline and any(k in vars(b) for b in bases)]
            prefix = "" if cls is self._guarded[0][0] else f"{cls.__name__}."
            found += [prefix + k for k in sorted(changed + added)]
        return found


class FingerprintWatch:
    """Worker side: the baseline fingerprint, and on every answer whether the baseline's names
    still hold the very same objects (and the same code, for Python functions).  Only the
    baseline's names count (the parent compares only those): names that appear later (a problem
    module imported by ``load``, attributes torch adds lazily) change nothing, and the whole
    fingerprint goes to the parent only when a name changed.  The namespaces are resolved
    afresh each time (a module replaced in ``sys.modules`` shows) and every name is looked up
    again.  The baseline objects are held, so a replaced one can never be freed and its id
    reused by the replacement; the comparison is by identity, not ``id()`` (each ``id()`` call
    runs the worker's audit hook: building the dict of ids took 8-11 ms an answer)."""

    def __init__(self) -> None:
        import types

        self.baseline, places = _fingerprint_and_places()
        self.digest = fingerprint_digest(self.baseline)
        # the baseline's names in its order, runs of one namespace grouped:
        # [(namespace, [attributes], [their objects], [attributes that were functions], [their code])]
        self._plan: list[tuple[str, list[str], list[Any], list[str], list[Any]]] = []
        for name in self.baseline:
            prefix, key, value = places[name]
            if not self._plan or self._plan[-1][0] != prefix:
                self._plan.append((prefix, [], [], [], []))
            run = self._plan[-1]
            run[1].append(key)
            run[2].append(value)
            code = value.__code__ if type(value) is types.FunctionType else None
            if code is not None:
                run[3].append(key)
                run[4].append(code)
        self._hold()

    def _hold(self) -> None:
        """What ``held`` compares, taken with the baseline: each namespace's live dict (a
        module's, a class's mappingproxy) with its names and objects, the modules as
        ``sys.modules`` holds them, and the builtins the comparison calls (a kernel that rebinds
        ``all`` or ``map`` does not reach it)."""
        import operator
        import types

        from . import host_reads

        spaces = dict(_critical_namespaces())
        self._held_plan = [(prefix, vars(spaces[prefix]), keys, values, functions, codes)
                           for prefix, keys, values, functions, codes in self._plan if prefix in spaces]
        # the baseline's functions with their code: with the worker's audit hook in place, only the
        # functions whose ``__code__`` was set since are compared (``_codes_held``)
        self._baseline_code = {value: value.__code__ for _prefix, keys, values, functions, _codes in self._plan
                               for key, value in zip(keys, values) if type(value) is types.FunctionType}
        self._code_sets = host_reads.code_sets_reader()  # taken now, before any kernel file loads
        self._code_sets_seen = self._code_sets(0)[0] if self._code_sets is not None else 0
        # (function, the code it must hold): baseline functions whose code was set since the baseline, and
        # the judge's own functions that no name of the baseline holds (a method of the worker's
        # ``_State._draw`` given stashing code was not compared), with the code they had before their first set
        self._code_touched: list[tuple[Any, Any]] = []
        import os

        self._own_code_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")
        self._held_modules = [(space.__name__, space) for space in spaces.values()
                              if type(space) is types.ModuleType and sys.modules.get(space.__name__) is space]
        self._modules_now = sys.modules
        self._is, self._all, self._map, self._len = operator.is_, all, map, len
        self._code_of = operator.attrgetter("__code__")
        # every baseline name in one pass in C (a third of the per-name ``get`` comparison's time);
        # where it does not say yes, the per-name comparison decides, as before
        self._names_held = NamesHeld((space, keys, values) for _prefix, space, keys, values, _f, _c in self._held_plan)
        # the builtins each module's code could be given in its own globals: a name added to a module
        # is no baseline name, yet one named like a builtin shadows it for every function of that
        # module (``all`` added to this module's globals answered the check of the recorded code
        # sets).  Live key views of the module dicts, with the builtin names each lacked then.
        import builtins

        builtin_names = frozenset(vars(builtins))
        shadowable = [(prefix, vars(space)) for prefix, space in spaces.items()
                      if type(space) is types.ModuleType and space is not builtins]
        self._shadow_prefixes = [prefix for prefix, _ in shadowable]
        self._shadow_views = [names.keys() for _, names in shadowable]
        self._shadow_absent = [builtin_names.difference(names) for _, names in shadowable]
        self._isdisjoint = type({}.keys()).isdisjoint

    def held(self) -> bool:
        """Cheaper than ``unchanged`` and run after every call (the worker asks before its own
        work runs anything the kernel could have rebound): does every baseline name of every
        namespace still hold its object (and code), and does ``sys.modules`` still hold the same
        modules?  A kernel that rebinds a name the judge's next draw or digest looks up (torch.randn,
        torch.sum) and has it put itself back before the request ends passed the check at the end
        of the request."""
        is_, all_, map_, code_of = self._is, self._all, self._map, self._code_of
        modules = self._modules_now
        for name, module in self._held_modules:
            if modules.get(name) is not module:
                return False
        by_audit = self._code_sets is not None
        names_held = self._names_held.held()
        if not (names_held and by_audit):  # (with the audit hook, the code is ``_codes_held``'s)
            for _prefix, space, keys, values, functions, codes in self._held_plan:
                get = space.get
                if not names_held and not all_(map_(is_, map_(get, keys), values)):
                    return False
                if not by_audit and functions and not all_(map_(is_, map_(code_of, map_(get, functions)), codes)):
                    return False
        return self._held_beyond_names()

    def _held_beyond_names(self) -> bool:
        """What ``held`` and ``unchanged`` check beyond the baseline's names: no builtin newly
        shadowed, and (with the audit hook's record) the recorded code sets undone."""
        return self._builtins_unshadowed() and (self._code_sets is None or self._codes_held())

    def _builtins_unshadowed(self) -> bool:
        """Does no critical module hold a name of a builtin it did not hold at the baseline?"""
        return self._all(self._map(self._isdisjoint, self._shadow_views, self._shadow_absent))

    def _codes_held(self) -> bool:
        """Do the functions whose ``__code__`` was set since the baseline (the audit hook's record)
        hold their code again: the baseline's functions their baseline code, the judge's own other
        functions the code they had before their first recorded set?"""
        count, sets = self._code_sets(self._code_sets_seen)  # copies: the record is the audit hook's alone
        if count < self._code_sets_seen:  # the record never shrinks: nothing it says could be trusted
            return False
        if count > self._code_sets_seen:
            baseline, own = self._baseline_code, self._own_code_dir
            for f, before in sets:
                if f in baseline:
                    self._code_touched.append((f, baseline[f]))
                elif type(before).__name__ == "code" and type(before.co_filename) is str \
                        and before.co_filename.startswith(own):
                    self._code_touched.append((f, before))
            self._code_sets_seen = count
        return self._all(f.__code__ is code for f, code in self._code_touched)

    def changed_names(self) -> list[str]:
        """The baseline names whose object (or code) differs now, for a message."""
        out = []
        for prefix, space, keys, values, functions, codes in self._held_plan:
            out += [f"{prefix}.{k}" for k, v in zip(keys, values) if space.get(k) is not v]
            out += [f"{prefix}.{k}.__code__" for k, c in zip(functions, codes)
                    if getattr(space.get(k), "__code__", None) is not c]
        for prefix, names, absent in zip(self._shadow_prefixes, self._shadow_views, self._shadow_absent):
            out += [f"{prefix}.{k} (shadowing the builtin)" for k in sorted(names & absent)]
        baseline = self._baseline_code
        out += [f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', '?')}.__code__"
                for f, code in self._code_touched if f not in baseline and f.__code__ is not code]
        return out

    def unchanged(self) -> bool:
        """Does every baseline name hold its baseline object (and code) now?"""
        import operator

        code_of = operator.attrgetter("__code__")
        spaces = dict(_critical_namespaces(ordered=False, own=False))
        modules = sys.modules
        by_audit = self._code_sets is not None
        for prefix, keys, values, functions, codes in self._plan:
            try:
                space = modules[prefix] if prefix.startswith(OWN_MODULES) else spaces[prefix]
                get = vars(space).get
            except (KeyError, TypeError):
                return False
            if not all(map(operator.is_, map(get, keys), values)):
                return False
            if by_audit:  # the names hold the baseline functions: their code is _codes_held's
                continue
            try:
                if not all(map(operator.is_, map(code_of, map(get, functions)), codes)):
                    return False
            except AttributeError:
                return False
        return self._held_beyond_names()

    def digest_now(self) -> str:
        """The baseline's digest while nothing changed, else the digest of the names now."""
        try:
            if self.unchanged():
                return self.digest
            now = fingerprint()
        except Exception:  # a namespace replaced by something that is not one: changed
            return "unreadable"
        return fingerprint_digest({name: now.get(name, "0:0") for name in self.baseline})
