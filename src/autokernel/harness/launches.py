"""What Triton launched during a kernel call, as the judge sees it (worker side); and the
threads and CUDA streams the kernel started.

``install()`` wraps ``run`` of Triton's ``JITFunction`` (GPU launches, autotuned or not) and of
the interpreter's ``InterpretedFunction`` (``TRITON_INTERPRET=1``) once, in the worker, before
any kernel file is loaded (the wrapped methods are part of the tamper fingerprint).  During a
judged call every launch is recorded: whether the launched function was defined in the kernel
file being judged (its globals are that module's namespace) and the storages of the tensors it
was given.  The worker then requires every output to be one of those storages: an output no
Triton kernel of the file's own was handed was computed by something else (PyTorch with the
watch bypassed, numpy, ctypes, a cache), whatever the file's text looks like.  Being handed an
output is no proof that a kernel computed it (it may only store values the host computed): the
record also collects the call's reads of tensor values into Python (host_reads.py), each a
finding.

``interpreter_code_objects()`` are the code objects of the real interpreter module, the only
frames whose torch ops the watch exempts (a frame compiled with the interpreter's file name is
a different code object).
"""
from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from typing import Any

from .output_checks import planted, span


@dataclass
class CallLaunches:
    own_globals: dict | None
    own: int = 0  # launches of Triton functions defined in the kernel file
    foreign: int = 0
    own_storages: set[int] = field(default_factory=set)
    odd_argument: str | None = None  # a launch argument that is no tensor, number or Triton object
    host_reads: list[str] = field(default_factory=list)  # ways the call read tensor values into Python
    timed_stream: int | None = None  # the CUDA stream the judge times (GPU)
    off_stream: int = 0  # launches made while another stream was current: their work escapes the timing


class LaunchRecord:
    def __init__(self) -> None:
        self.current: CallLaunches | None = None
        self.depth = 0

    def begin(self, own_globals: dict | None, timed_stream: int | None = None) -> CallLaunches:
        self.current = CallLaunches(own_globals, timed_stream=timed_stream)
        self.depth = 0
        return self.current

    def end(self) -> None:
        self.current = None
        self.depth = 0

    def inside_launch(self) -> bool:
        return self.depth > 0

    def note_host_read(self, what: str) -> None:
        call = self.current
        if call is not None and what not in call.host_reads:
            call.host_reads.append(what)

    def note(self, jit_fn: Any, args: tuple, kwargs: dict) -> None:
        call = self.current
        if call is None:
            return
        if call.odd_argument is None:
            call.odd_argument = odd_argument(args, kwargs)
        if call.timed_stream is not None and current_stream_handle() != call.timed_stream:
            call.off_stream += 1
        fn = getattr(jit_fn, "fn", None)
        if isinstance(fn, types.FunctionType) and call.own_globals is not None and fn.__globals__ is call.own_globals:
            call.own += 1
            for value in list(args) + list(kwargs.values()):
                for t in _tensors(value):
                    call.own_storages.add(span(t)[0])  # the C function: never a method planted on t
        else:
            call.foreign += 1


def current_stream_handle() -> int:
    import torch

    return int(torch.cuda.current_stream().cuda_stream)


def odd_argument(args: tuple, kwargs: dict) -> str | None:
    """A description of the first launch argument that is not a plain tensor, a number, a
    string, a dtype or a Triton object (a descriptor, a constexpr), else None.  The interpreter
    copies tensor arguments itself, in frames the watch exempts: a duck-typed argument whose
    methods run PyTorch would compute there unseen."""
    for key, value in [(str(i), v) for i, v in enumerate(args)] + list(kwargs.items()):
        if key == "grid" and (isinstance(value, types.FunctionType) or _plain(value)):
            continue
        if not _plain(value):
            extra = " with attributes set on it" if type(value).__name__ in ("Tensor", "Parameter") else ""
            return f"argument {key} of type {type(value).__name__}{extra}"
    return None


def _plain(value: Any, depth: int = 0) -> bool:
    import torch

    if value is None or type(value) in (bool, int, float, str) or isinstance(value, torch.dtype):
        return True
    if type(value) in (torch.Tensor, torch.nn.Parameter):
        # a method planted on it (.untyped_storage) is what the interpreter calls, in frames
        # the watch exempts: a storage whose .cpu was a partial of torch.softmax computed there
        return planted((value,)) is None
    if type(value) in (tuple, list) and depth < 4:
        return all(_plain(v, depth + 1) for v in value)
    if not is_triton_class(type(value)):
        return False
    base = getattr(value, "base", None)  # a TensorDescriptor's tensor: the interpreter copies it as an argument
    return base is None or not isinstance(base, torch.Tensor) or _plain(base, depth + 1)


def is_triton_class(cls: type) -> bool:
    """Is ``cls`` a class of Triton's own (a descriptor, a constexpr, a Triton dtype)?  Not by
    the ``__module__`` it claims (a class of the kernel file's that set ``__module__ =
    "triton.language"`` passed as one, and its duck-typed storage ran torch.softmax in the
    interpreter's exempt frames), but by being the very object its module, a module loaded
    from Triton's own directory, holds under its name."""
    import os

    import triton

    module_name, qualname = getattr(cls, "__module__", None), getattr(cls, "__qualname__", None)
    if not (isinstance(module_name, str) and isinstance(qualname, str)) or module_name.split(".")[0] != "triton":
        return False
    module = sys.modules.get(module_name)
    if module is None:
        return False
    triton_dir = os.path.dirname(os.path.abspath(triton.__file__)) + os.sep
    if not os.path.abspath(getattr(module, "__file__", None) or "").startswith(triton_dir):
        return False
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part, None)  # what the module itself holds under that name
    return found is cls


def _tensors(value: Any, depth: int = 0) -> list:
    import torch

    if depth > 4:
        return []
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v, depth + 1)]
    base = getattr(value, "base", None)  # TensorDescriptor
    if isinstance(base, torch.Tensor):
        return [base]
    return []


_RECORD: LaunchRecord | None = None


def install() -> LaunchRecord:
    """Wrap Triton's launch entry points (once per process)."""
    global _RECORD
    if _RECORD is not None:
        return _RECORD
    record = LaunchRecord()
    classes = []
    from triton.runtime.jit import JITFunction

    classes.append(JITFunction)
    try:
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    except ImportError:  # pragma: no cover - every supported triton has it
        pass
    for cls in classes:
        run = _recording_run(record, cls.run)
        run.__qualname__ = f"{cls.__qualname__}.run"
        cls.run = run
    _RECORD = record
    return record


def _recording_run(record: LaunchRecord, original):
    """Triton's ``run`` noting each launch in ``record``.  The original is held in the closure,
    never as a default argument (``__kwdefaults__`` is a public attribute: it would hand out the
    unrecorded launch path)."""
    def run(self, *args, **kwargs):
        if not kwargs.get("warmup", False):
            record.note(self, args, kwargs)
        record.depth += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            record.depth -= 1

    return run


def interpreter_code_objects() -> frozenset:
    """Code objects of every function and method defined in triton's interpreter module
    (nested functions included)."""
    return module_code_objects("triton.runtime.interpreter")


def nested_code_objects(code: types.CodeType | None) -> list:
    """``code`` and every code object nested in its constants (functions, lambdas, classes and
    comprehensions defined inside it), at any depth; none for None."""
    out, stack = [], [code] if code is not None else []
    while stack:
        c = stack.pop()
        out.append(c)
        stack += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    return out


def module_code_objects(name: str) -> frozenset:
    """Code objects of every function and method defined in the module ``name`` (nested
    functions included); empty when it cannot be imported."""
    module = sys.modules.get(name)
    if module is None:
        try:
            import importlib

            module = importlib.import_module(name)
        except ImportError:
            return frozenset()
    codes: set = set()

    def add_code(code: types.CodeType) -> None:
        codes.update(nested_code_objects(code))

    def visit(obj: Any, seen: set) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        if isinstance(obj, property):
            for f in (obj.fget, obj.fset, obj.fdel):
                if f is not None:
                    visit(f, seen)
            return
        if isinstance(obj, types.FunctionType):
            if obj.__module__ == module.__name__:
                add_code(obj.__code__)
            return
        if isinstance(obj, type) and obj.__module__ == module.__name__:
            for value in vars(obj).values():
                visit(value, seen)

    seen: set = set()
    for value in list(vars(module).values()):
        visit(value, seen)
    return frozenset(codes)


# The interpreter's functions that copy a launch's tensor arguments to the host and back: the
# only torch ops it makes on a kernel's behalf.
_ARGUMENT_COPIES = frozenset({"_init_args_hst", "_to_cpu", "_restore_args_dev", "_from_cpu"})


def interpreter_copy_code_objects() -> frozenset:
    """Code objects of the interpreter's argument copies (``_ARGUMENT_COPIES``).  The rest of
    the interpreter calls the kernel's own callables from its frames (``GridExecutor.__call__``
    runs a kernel's pre-run hooks: ``torch.sum`` added as one, a C function, computed the row
    sums with no frame of the file's on the stack), so its frames exempt no torch op.  All of
    it where a Triton version names its copies otherwise."""
    codes = interpreter_code_objects()
    copies = frozenset(code for code in codes if code.co_name in _ARGUMENT_COPIES)
    return copies or codes


def interpreter_frame_test(record: LaunchRecord, skipped: tuple[str, ...], codes: frozenset | None = None):
    """A test of a frame: is it (after frames whose file name starts with one of ``skipped``:
    torch's, the harness's own hooks) the real Triton interpreter's code (``codes``, all of its
    code objects by default), inside a launch the hook saw?  Only the interpreter's own code
    objects count: a frame compiled under the interpreter's file name is not the interpreter."""
    codes = interpreter_code_objects() if codes is None else codes

    def called_by_interpreter(frame) -> bool:
        if not record.inside_launch():
            return False
        while frame is not None:
            code = frame.f_code
            if code in codes:
                return True
            if code.co_filename.startswith(skipped):
                frame = frame.f_back
                continue
            return False
        return False

    return called_by_interpreter


class StartCounter:
    """Counts Python threads started (through ``_thread``/``threading``, whatever the import
    path) and CUDA streams created in this process after ``install_start_counters``: a kernel
    file has no business doing either, even when the thread ends before its call returns.
    Work handed to torch's own threads counts as a thread start too (``TORCH_THREAD_ENTRIES``)."""

    def __init__(self) -> None:
        self.threads = 0
        self.streams = 0


_COUNTER: StartCounter | None = None

# torch._C entry points that hand work to threads of torch's own, which no thread count sees and
# no watch covers: ``fork`` runs a function on the inter-op pool (``torch.jit.fork``), and a
# TorchScript function can fork inside itself (``prim::fork``, where no Python wrapper is called),
# so compiling, tracing or loading TorchScript counts as well (tests/attacks/reduce_pass8_interop_*).
# Loading a scripted module from a torch.package archive and the other loaders count too
# (tests/attacks/reduce_pass9_package_thread_compute.py), and so does compiling TorchScript source
# text with ``torch.CompilationUnit`` (``TORCH_THREAD_METHODS``; reduce_pass9_compilation_unit_compute.py).
TORCH_THREAD_ENTRIES = ("fork", "_jit_script_compile", "_jit_script_class_compile", "_jit_script_compile_overload",
                        "_jit_script_interface_compile", "_create_function_from_trace",
                        "_create_function_from_trace_with_dict", "_create_method_from_trace",
                        "_create_method_from_trace_with_dict", "import_ir_module", "import_ir_module_from_buffer",
                        "_import_ir_module_from_package", "_load_jit_module_from_bytes", "_load_jit_module_from_file",
                        "_load_mobile_module_from_bytes", "_load_mobile_module_from_file",
                        "_load_for_lite_interpreter", "_load_for_lite_interpreter_from_buffer")
# methods of torch._C's CompilationUnit (also ``torch.CompilationUnit``, a public name) that compile
# TorchScript: ``define(source)``, ``create_function(name, graph)``, and the constructor given source
TORCH_THREAD_METHODS = ("define", "create_function")


def install_start_counters() -> StartCounter:
    global _COUNTER
    if _COUNTER is not None:
        return _COUNTER
    import _thread
    import threading

    counter = StartCounter()

    def wrap(original):
        def start(*args, **kwargs):
            counter.threads += 1
            return original(*args, **kwargs)

        return start

    for module, name in ((_thread, "start_new_thread"), (_thread, "start_joinable_thread"),
                         (_thread, "start_new"), (threading, "_start_new_thread"),
                         (threading, "_start_joinable_thread")):
        original = getattr(module, name, None)
        if original is not None:
            setattr(module, name, wrap(original))
    torch = sys.modules.get("torch")
    if torch is not None:
        for name in TORCH_THREAD_ENTRIES:
            original = getattr(torch._C, name, None)
            if original is not None:
                setattr(torch._C, name, wrap(original))
        unit = getattr(torch._C, "CompilationUnit", None)
        if unit is not None:
            for name in TORCH_THREAD_METHODS:
                if name in vars(unit):
                    setattr(unit, name, wrap(vars(unit)[name]))
            unit.__init__ = _counting_init(counter, vars(unit)["__init__"])
    if torch is not None and torch.cuda.is_available():
        for cls in (torch.cuda.Stream, torch.cuda.ExternalStream):
            original_new = cls.__dict__.get("__new__")
            if original_new is None:
                continue
            original_new = original_new.__func__ if isinstance(original_new, staticmethod) else original_new
            cls.__new__ = _counting_new(counter, original_new)
    _COUNTER = counter
    return counter


def _counting_init(counter: StartCounter, original):
    """CompilationUnit's constructor, counting the calls that compile source (torch makes empty
    units itself, as it loads TorchScript: those compile nothing)."""
    def init(self, *args, **kwargs):
        if args or kwargs.get("lang"):
            counter.threads += 1
        return original(self, *args, **kwargs)

    return init


def _counting_new(counter: StartCounter, original):
    """A stream class's ``__new__`` counting new streams (the original in the closure, as in
    ``_recording_run``)."""
    def new(klass, *args, **kwargs):
        # Stream(stream_id=...) wraps an existing stream (torch.cuda.current_stream does that):
        # only a new stream, or an external one, counts
        if "stream_id" not in kwargs:
            counter.streams += 1
        return original(klass, *args, **kwargs)

    return new
