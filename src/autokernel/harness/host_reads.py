"""Tensor values reaching Python during a kernel call (worker side).

A kernel file that reads tensor values into Python can compute its result there (``math.exp``
on ``.item()`` scalars, sums of ``tolist()`` rows, bytes read back from its own memory) and
hand it to a Triton kernel of its own that merely stores or rewrites it: the output then passed
through the file's kernel and every op the watch saw was allowed.  The cause is the read, so
the read is the finding: nothing a call does may carry tensor values into Python.

Three layers, all noting into the launch record's current call (``LaunchRecord.note_host_read``)
and all silent outside judged calls and inside the real Triton interpreter's own frames (the
interpreter reads its arguments on the kernel's behalf):

- the watch (watch.py) notes ``aten._local_scalar_dense``: ``.item()``, ``float(t)``,
  ``int(t)``, ``bool(t)``, formatting a scalar, iterating down to scalars, ``storage[i]``;
- ``install`` wraps the reads that never reach the dispatcher: ``Tensor.tolist``, ``numpy``,
  ``__array__``, ``__dlpack__``, ``__repr__`` (printing), ``__reduce_ex__`` (pickling),
  ``torch.save``, and the storage methods that write or share raw bytes;
- an audit hook (``sys.addaudithook``; it cannot be removed) notes opening the process's memory
  or shared-memory files (``/proc/<pid>/mem``, ``/dev/shm``...), ``mmap`` and the ctypes calls
  that read raw memory; it refuses every audit hook added after it (a kernel's hook would run
  on the judge's events, and receive the frames of the watch's ``sys._getframe`` calls).

The wrapped methods are installed before the worker's fingerprint is taken, so replacing them
is ``monkey-patch``.
"""
from __future__ import annotations

import os
import sys
from types import MappingProxyType
from typing import Any

# Paths whose contents are this process's memory or the shared memory inputs live in: /proc
# entries by their name (a file ``mem`` or ``pagemap``, anything under ``map_files`` or ``fd``),
# and /dev/shm, /dev/mem, /dev/fd.  File descriptor numbers do not count: Triton's compiler
# opens its subprocess pipes by number inside the first launch of a shape.
PROC_MEMORY_NAMES = ("mem", "pagemap")
PROC_MEMORY_DIRS = ("map_files", "fd")
DEV_MEMORY_PREFIXES = ("/dev/shm/", "/dev/mem", "/dev/fd/")
MEMORY_AUDIT_EVENTS = ("mmap.__new__", "ctypes.string_at", "ctypes.wstring_at", "ctypes.cdata",
                       "ctypes.cdata/buffer", "ctypes.PyObj_FromPtr")

_INSTALLED = False
REFUSED_AUDIT_HOOKS: list[str] = []  # sys.addaudithook calls after ``install`` (refused; the worker reports them)
# The reader of the audit hook's record of every function whose ``__code__`` was set after ``install``
# (CPython audits each such set, however it is made), with the code it had before that set:
# integrity.FingerprintWatch compares the code of these only, never reading the code of every function
# (each read of ``__code__`` is an audit event too, and ran this hook: 1.0-1.4 ms a check).  The record
# itself lives in the hook's closure, reachable through no module name: as a list of this module's
# (``CODE_SETS``) a kernel replaced its own entry with a decoy's after swapping the judge's draw helper,
# the record kept the length the check expected and named no function of the judge's.  The reader
# hands out copies; the watch takes it before any kernel file loads.
_CODE_SETS_READER: list = []

# What a kernel's code may not do to anything outside its own process, from the moment the
# worker arms the rule (``arm_outside``) before the kernel file loads:
# - start processes or signal other ones (``threads-or-streams``): a child outlives the call, the
#   request and the worker itself, unwatched, and a signal reaches the incumbent's worker (a
#   child made with pty.fork at import stopped it with SIGSTOP half of every 20 ms: the incumbent
#   ran at half speed and a candidate no faster than it won keep/revert, the wall clock agreeing);
# - write to the file system or change the environment (``monkey-patch``): a candidate rewrote the
#   incumbent's kernel file next to it before the judge read it (and left it rewritten for
#   ``apply``); on a GPU the caches the judge reads (Triton's, the baselines') are files too.
# Triton's own compiler is exempt (ptxas, the launcher's C build and the kernel cache on a GPU): a
# frame of ``triton.compiler.compiler`` up the stack, reached only through frames of trusted code
# (Triton's, the standard library's, torch's, the judge's own; see ``TrustedCode``), with
# Triton's tool settings as they were when the rule was armed.  A compiler frame anywhere up the
# stack used to be enough: Triton calls code its caller chooses from inside ``compile`` (the
# cache manager class of ``triton.knobs``), and a candidate's manager rewrote the incumbent's
# kernel file there.  Where the problem lets files build native code (KernelBench
# --allow-torch: load_inline runs compilers and writes) only signals are refused.
# What the rule calls is taken when it is armed (the pid, realpath): a kernel that rebinds
# os.getpid through a local alias would otherwise pass a signal to the incumbent as one to itself.
PROCESS_EVENTS = ("os.fork", "os.forkpty", "os.system", "os.exec", "os.spawn", "os.posix_spawn",
                  "subprocess.Popen", "os.kill", "os.killpg")
FILE_EVENTS = ("os.rename", "os.remove", "os.rmdir", "os.mkdir", "os.symlink", "os.link", "os.truncate",
               "os.chmod", "os.chown", "os.utime", "os.putenv", "os.unsetenv", "shutil.rmtree", "shutil.move")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
REFUSED_OUTSIDE: list[tuple[str, str]] = []  # (rule, what) refused since ``arm_outside`` (the worker reports them)
_OUTSIDE_RULE: dict[str, Any] = {"armed": False, "compiler": frozenset(), "writable": (), "signals_only": False}


def arm_outside(writable: tuple[str, ...] = (), signals_only: bool = False) -> None:
    """Refuse, from now on, what a kernel may not do outside its process (above); files may be
    written under the folders ``writable`` only (the parent names them: a test's spy log).
    ``signals_only``: where files may build native code (their builds run compilers and write
    files), only signals to other processes are refused."""
    from . import launches

    rule = dict(signals_only=signals_only, pid=os.getpid(), realpath=os.path.realpath,
                fsdecode=os.fsdecode, compiler=launches.module_code_objects("triton.compiler.compiler"),
                writable=tuple(os.path.join(os.path.realpath(d), "") for d in writable),
                trusted=TrustedCode(), installed=TrustedCode(packages=True), knobs=_triton_tool_knobs(), armed=True,
                generators=code_generators(), judge=_judge_load_code())
    _OUTSIDE_RULE.update(rule)  # what this module's name shows (tests, reports); the checks never read it
    if _ARM_RULE:
        _ARM_RULE[0](MappingProxyType(rule))


# The armed rule lives in the audit hook's closure, handed over once (``arm_outside``), read-only:
# the checks never look it up by a name.  It was this module's dict ``_OUTSIDE_RULE``, and a kernel
# set its "armed" key to False for the length of its import (``unittest.mock.patch.dict`` given
# the dict's dotted name as a string), rewrote the incumbent's kernel file and put the key back
# (tests/attacks/reduce_pass9_mock_rule_off.py).
_ARM_RULE: list = []


# The settings of Triton's that name programs and folders: a kernel that points "ptxas" at
# another program, or the cache at another folder, has Triton's own (trusted) code run or write
# what it chose.  Their overrides (set attributes) are taken when the rule is armed.
TOOL_KNOB_SPACES = ("nvidia", "amd", "build", "cache")


def _triton_tool_knobs() -> dict[str, tuple[Any, dict]]:
    knobs = getattr(sys.modules.get("triton"), "knobs", None)
    spaces = {name: getattr(knobs, name, None) for name in TOOL_KNOB_SPACES}
    return {name: (space, dict(vars(space))) for name, space in spaces.items() if hasattr(space, "__dict__")}


def _knobs_changed(armed: dict[str, tuple]) -> str:
    """The tool settings set, changed or removed since the rule was armed ('' when none)."""
    changed = []
    for name, (space, before) in armed.items():
        now = vars(space)
        changed += [f"{name}.{key}" for key in sorted(set(now) | set(before))
                    if key not in now or key not in before or now[key] is not before[key]]
    return ", ".join(changed)


class TrustedCode:
    """Is a code object the installed code of Triton, the standard library, torch or the judge?
    Its file must lie under one of their folders (resolved when the rule is armed, before the
    kernel loads; the kernel cannot write there) and the code must be one that file's source
    compiles to: compared by structure with the file compiled afresh (code objects compare
    their bytecode, constants and names), so a kernel's code compiled under a trusted file name
    (``compile(src, ".../subprocess.py", "exec")``) or a rebuilt one (``code.replace``) is not.
    Frozen standard modules compare with their frozen code.  Built on first need per file (the
    rule's events are rare) and cached."""

    def __init__(self, packages: bool = False) -> None:
        """``packages``: the installed packages' code counts too (site-packages: sympy, jinja2...),
        for the code rule's walk, which tells the kernel's own code from code that is on disk."""
        import _imp
        import builtins
        import io
        import sysconfig

        import torch
        import triton

        from .launches import nested_code_objects

        self._nested = nested_code_objects
        folder = lambda path: os.path.join(os.path.realpath(path), "")  # noqa: E731
        paths = sysconfig.get_paths()
        # the judge: the harness, and the problems whose draws and references it runs (KernelBench's
        # size scaling parses a file's text)
        harness = os.path.dirname(__file__)
        own = [os.path.dirname(triton.__file__), os.path.dirname(torch.__file__), harness,
               os.path.join(os.path.dirname(harness), "problems")]
        self._roots = tuple(folder(r) for r in own + [paths["stdlib"], paths["platstdlib"]])
        self._own_roots = tuple(folder(r) for r in own)
        # the installed packages are no standard library: in a virtual environment ``platstdlib`` is
        # the environment's lib folder, which holds site-packages (sympy, whose parse_expr is an eval,
        # counted as trusted code)
        self._packages = tuple(folder(paths[k]) for k in ("purelib", "platlib") if paths.get(k))
        if packages:
            self._roots, self._packages = self._roots + self._packages, ()
        self._realpath, self._compile, self._open_code = os.path.realpath, builtins.compile, io.open_code
        self._frozen = _imp.get_frozen_object
        self._codes_by_file: dict[str, frozenset] = {}
        self._verdicts: dict[int, tuple[Any, bool]] = {}

    def __call__(self, code: Any) -> bool:
        seen = self._verdicts.get(id(code))
        if seen is not None and seen[0] is code:
            return seen[1]
        known = self._codes_of(code.co_filename)
        verdict = code in known
        self._verdicts[id(code)] = (code, verdict)  # the code is held: its id is never reused
        return verdict

    def _codes_of(self, filename: str) -> frozenset:
        known = self._codes_by_file.get(filename)
        if known is None:
            known = self._codes_by_file[filename] = frozenset(self._nested(self._compiled(filename)))
        return known

    def _compiled(self, filename: str) -> Any:
        try:
            if filename.startswith("<frozen ") and filename.endswith(">"):
                name = filename[len("<frozen "):-1]
                try:
                    return self._frozen(name)
                except ImportError:  # importlib's own are frozen as _frozen_importlib(_external)
                    return self._frozen("_frozen_" + name.replace("importlib._bootstrap", "importlib"))
            path = self._realpath(filename)
            if not path.startswith(self._roots) or not path.endswith(".py") or \
                    (path.startswith(self._packages) and not path.startswith(self._own_roots)):
                return None
            with self._open_code(path) as f:
                return self._compile(f.read(), filename, "exec", dont_inherit=True)
        except Exception:  # no source, not Python: nothing of it is trusted
            return None


def _in_writable(event: str, args: tuple, rule: Any) -> bool:
    """Are the paths the event names (two for a rename or link, else one) all inside a
    writable folder of the armed ``rule``?"""
    named = 2 if event in ("os.rename", "os.link", "os.symlink", "shutil.move") else 1
    paths = [a for a in tuple(args)[:named] if isinstance(a, (str, bytes, os.PathLike))]
    writable, realpath, fsdecode = rule["writable"], rule["realpath"], rule["fsdecode"]
    return bool(paths and writable) and all(realpath(fsdecode(a)).startswith(writable) for a in paths)


def _writes(event: str, args: tuple, rule: Any) -> bool:
    """Does this ``open`` event (path, mode, flags) open for writing (a path other than /dev/null)?"""
    path, mode, flags = (tuple(args) + (None, None, None))[:3]
    if isinstance(path, (str, bytes)) and rule["fsdecode"](path) == "/dev/null":
        return False
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return True
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


# Calls that act on another process without a signal, a new process or a file, and raise no
# audit event (``resource.prlimit`` raises one: ``_outside_refused``): the target's scheduling
# priority, CPU set and policy, a pid file descriptor (a signal through it).  A candidate
# reniced the incumbent's worker to 19 at each call (sixth red-team pass: passed, and on a
# loaded host the incumbent is the slower in keep/revert, the wall clock agreeing).  Wrapped in
# ``os`` and in ``posix`` (the same C functions) before any kernel loads; the first argument is
# the target pid (``setpriority``: the second, after ``which``).
OTHER_PROCESS_CALLS = ("setpriority", "sched_setaffinity", "sched_setparam", "sched_setscheduler", "pidfd_open")


def _guard_other_processes(armed: list) -> None:
    """Wrap the calls; they refuse other processes once ``armed`` (the audit hook's list of the
    armed rule) holds the rule."""
    import posix
    import signal

    # a signal through a pid file descriptor (``os.open("/proc/<pid>")`` is one) raises no audit
    # event either: refused whatever its target
    calls = [(os, name) for name in OTHER_PROCESS_CALLS] + [(signal, "pidfd_send_signal")]
    for home, name in calls:
        original = getattr(home, name, None)
        if original is None:
            continue
        guarded = _refusing_other_processes(original, name, armed)
        for module in (home, posix, sys.modules.get("_signal")):
            if module is not None and getattr(module, name, None) is original:
                setattr(module, name, guarded)


def _refusing_other_processes(original, name: str, armed: list):
    """``original`` refusing other processes as targets.  The original is held in the closure,
    never as a default argument: a function's ``__kwdefaults__`` is a public attribute, and
    ``getattr(os, "setpriority").__kwdefaults__["_original"]`` handed out the unguarded C
    function (it reniced the incumbent's worker)."""
    def guarded(*args, **kwargs):
        if armed:  # the armed rule (the audit hook's closure list)
            which_who = args[:2] if name == "setpriority" else (None,) + tuple(args[:1])
            which, who = (tuple(which_who) + (None, None))[:2]
            own = name != "pidfd_send_signal" and who in (0, armed[0]["pid"]) and \
                (which is None or which == os.PRIO_PROCESS)
            if not own:
                what = f"{name}{tuple(args)!r:.80}: another process's scheduling or signals"
                REFUSED_OUTSIDE.append(("threads-or-streams", what))
                raise PermissionError(f"refused by the judge: {what}")
        return original(*args, **kwargs)

    guarded.__name__, guarded.__qualname__, guarded.__doc__ = name, f"guarded {name}", original.__doc__
    return guarded


def shortened(text: str, width: int = 80) -> str:
    """``text`` in at most ``width`` characters, its head and its tail kept (a path's file name
    is at its end)."""
    if len(text) <= width:
        return text
    head = (width - 3) // 3
    return f"{text[:head]}...{text[len(text) - (width - 3 - head):]}"


def _outside_refused(event: str, args: tuple, frame, rule: Any) -> tuple[str, str] | None:
    """(rule, what) refused about ``event``, or None when it is allowed (``rule``: the armed
    rule, as ``arm_outside`` made it)."""
    if event == "resource.prlimit":  # (pid, resource, limits): another process's limits (CPU time kills it)
        target = (tuple(args) + (None,))[0]
        if target in (0, rule["pid"]):
            return None
        return "threads-or-streams", f"resource.prlimit({target}, ...): another process's limits"
    if event in ("os.kill", "os.killpg"):
        target, sig = (tuple(args) + (None, None))[:2]
        if sig == 0 or (event == "os.kill" and target == rule["pid"]):
            return None
        return "threads-or-streams", f"{event}({target}, {sig}): a signal to another process"
    if rule["signals_only"] or (event == "open" and not _writes(event, args, rule)):
        return None
    if event != "os.putenv" and event != "os.unsetenv" and event not in PROCESS_EVENTS and \
            _in_writable(event, args, rule):
        return None
    compiler, trusted = rule["compiler"], rule["trusted"]
    knobs_changed = ""
    while frame is not None:
        if frame.f_code in compiler:
            knobs_changed = _knobs_changed(rule["knobs"])
            if not knobs_changed:
                return None
            break
        if not trusted(frame.f_code):
            break
        frame = frame.f_back
    what = shortened(repr(args[0])) if args else ""
    if knobs_changed:
        what += f" under Triton's compiler after the kernel changed its settings ({knobs_changed})"
    if event in PROCESS_EVENTS:
        return "threads-or-streams", f"{event} ({what}): a new process"
    return "monkey-patch", f"{event} ({what}): a write outside the process"


# Text made into code (``compile``, and ``exec``/``eval`` of a string, raise "compile"; a code
# object built from parts raises "code.__new__"; code from bytes "marshal.loads") once the kernel
# file begins to load.  Python evaluates text in more places than a list of names can hold: the
# tenth pass's file had sympy's ``parse_expr`` (an ``eval``) hand it ``exec``, and the text it
# ran switched the watch off around ``torch.softmax`` (no Triton compute at all, 22x the starter,
# kept).  The rule goes by who asked, whatever the name: walking up from the event through
# trusted code (``TrustedCode``: Triton's, torch's, the standard library's, the judge's), the
# event is allowed where it reaches one of Triton's own code generators (``code_generators``: the
# interpreter's rewrite of a jit function, the launch binder), the import system (a module file
# from disk, outside the writable folders), or the judge's own load of the kernel file; any other
# frame on the way (the kernel file's, a library outside the trusted folders: sympy, jinja2...)
# is the kernel's asking, and refused, stdlib helpers that exec text built from the kernel's
# names (dataclasses, namedtuple) included.
CODE_EVENTS = frozenset({"compile", "code.__new__", "marshal.loads", "marshal.load"})
# Triton's functions that compile text of their own making (what each compiles is built from a jit
# function: its source, rewritten; its signature's names)
# (the interpreter's rewrite parses and compiles a jit function's source; on a GPU a jit function
# parses its source for its cache key and the code generator, its launch binder is exec'd text, and
# the compiler makes namedtuples as it lowers a kernel)
TRITON_CODE_GENERATORS = {"triton.runtime.interpreter": ("rewrite_ast",),
                          "triton.runtime.jit": ("create_function_from_signature", "parse"),
                          "triton.compiler.compiler": ("compile",)}
_IMPORT_SYSTEM = "<frozen importlib._bootstrap"


def code_generators() -> frozenset:
    """The code objects of Triton's own code generators (``TRITON_CODE_GENERATORS``)."""
    from .launches import module_code_objects

    return frozenset(code for module, names in TRITON_CODE_GENERATORS.items()
                     for code in module_code_objects(module) if code.co_name in names)


def _judge_load_code() -> frozenset:
    """The judge's own compiles after the rule is armed: the worker's load of a kernel file (it
    compiles the text the parent checked), its request loop (``main``: reached through trusted
    code only, the judge's own work, e.g. a KernelBench draw compiling the problem's file at new
    sizes) and ``TrustedCode`` compiling a trusted file to compare (inside this very hook)."""
    from .launches import module_code_objects, nested_code_objects

    return frozenset([code for code in module_code_objects(__package__ + ".worker_main")
                      if code.co_name in ("load", "main")] + nested_code_objects(TrustedCode._compiled.__code__))


def _code_refused(event: str, args: tuple, frame, rule: Any, kernel_texts: dict) -> tuple[str, str] | None:
    """(rule, what) refused about a code event (``CODE_EVENTS``), or None when it is allowed:
    see ``CODE_EVENTS``.  ``frame``: the frame that made the call; ``kernel_texts``: the text of
    each kernel file as the judge checked it, by the file name its code was compiled under."""
    generators, judge, trusted, installed = rule["generators"], rule["judge"], rule["trusted"], rule["installed"]
    while frame is not None:
        code = frame.f_code
        if code in generators and code.co_name == "rewrite_ast":
            return _rewritten_elsewhere(frame, kernel_texts, installed)
        if code in generators or code in judge:
            return None
        if code.co_filename.startswith(_IMPORT_SYSTEM) and trusted(code):
            # an import: the text is a module's file, or what the module's own code makes as it
            # loads (the kernel writes no file outside the writable folders)
            if event == "compile" and _in_writable("compile", tuple(args)[1:2], rule):
                break
            return None
        if not installed(code):  # the kernel file's code, or code made from text
            break
        frame = frame.f_back
    else:
        return None  # the judge's own work, with nothing of the kernel's on the stack
    where = tuple(args)[1] if event == "compile" and len(tuple(args)) > 1 else ""
    return "introspection", (f"{event} ({where!r:.60}) asked by {frame.f_code.co_filename!r:.80}: text or bytes "
                             "made into code after the kernel file began to load")


def _rewritten_elsewhere(frame, kernel_texts: dict, installed: Any) -> tuple[str, str] | None:
    """The interpreter's rewrite of a jit function (``FunctionRewriter.rewrite_ast``, the ``frame``)
    compiles the lines ``inspect.getsourcelines`` hands it, which come from ``linecache`` (and
    through a function's ``__wrapped__``), not from the text the judge checked: a kernel that put
    other lines for its own file into ``linecache.cache`` had the interpreter compile and run them
    as a jit body (torch.softmax with the watch off; 12.7x the starter, kept).  Those lines must be
    the function's own, at its own line numbers: in the kernel file's checked text, or in the
    installed file of Triton's (tl.sum...) read from disk.  Refused otherwise, and where the frame
    does not say (another Triton version)."""
    import io
    import types

    try:
        found = frame.f_locals
        fn, lines = found["self"].fn, found["lines"]
    except (KeyError, AttributeError):
        fn, lines = None, None
    if type(fn) is not types.FunctionType or type(lines) is not list:
        return "introspection", "the interpreter's rewrite of a jit function, where the judge cannot see its source"
    code = fn.__code__
    name = code.co_filename
    text = kernel_texts.get(name)
    if text is None and installed(code):
        with io.open_code(name) as f:
            text = f.read().decode("utf-8").splitlines(keepends=True)
    first = code.co_firstlineno - 1
    if text is not None and text[first:first + len(lines)] == lines:
        return None
    return "introspection", (f"the interpreter's rewrite of {code.co_name} compiled lines that are not its own in "
                             f"{name!r:.80} as the judge checked it (linecache, __wrapped__)")


# Frames asked for by the kernel's code once its file begins to load: a frame is the way to the
# worker's state (its clock, its records, its counters: the fourth and ninth passes swapped the
# clock through ``f_locals``), and every string-named attribute engine the static rules miss
# (``torch.fx``, ``string.Formatter``: this pass) starts from one as easily as from a module.
# ``sys._getframe`` and the attributes that hand a frame out raise audit events (``f_back`` and
# ``f_locals`` do not: a frame is refused where it is first handed out).  Asked by the kernel when
# the first frame up the stack that is a kernel file's (its text pinned by the worker's load) or
# the judge's own is the kernel's; the judge's watch and hooks take frames all the time.
FRAME_EVENTS = frozenset({"sys._getframe", "sys._current_frames", "sys._getframemodulename"})
FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
# Refused the same way: an unpickler looking up a global by the names its bytes hold (pickle's, and
# every unpickler built on it: torch.load, shelve, cloudpickle...), which then calls it with any
# arguments (the ninth pass made the unpicklers static findings by name; this is their one event)
KERNEL_MAY_NOT_ASK = FRAME_EVENTS | {"pickle.find_class"}
_JUDGE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "")


def _frame_asked_by_kernel(frame, kernel_texts: dict) -> bool:
    """Is the first frame up from ``frame`` that decides a kernel file's?  The judge's own frames
    decide for the judge, and so does the import system: a module's top-level code takes frames
    for itself as it loads (``typing.TypeVar`` and ``namedtuple`` read their caller's module name)."""
    while frame is not None:
        name = frame.f_code.co_filename
        if name in kernel_texts:
            return True
        if name.startswith(_JUDGE_DIR) or name.startswith(_IMPORT_SYSTEM):
            return False
        frame = frame.f_back
    return False


def memory_path(path: Any) -> bool:
    """Is opening ``path`` a way to read raw memory (a /proc memory file, shared memory)?"""
    if not isinstance(path, (str, bytes, os.PathLike)):
        return False
    text = os.fsdecode(path)
    try:
        resolved = os.path.realpath(text)  # a symlink to /proc/self/mem is /proc/self/mem
    except (OSError, ValueError):
        resolved = text
    return any(_memory_file(os.path.normpath(p)) for p in (text, resolved))


def _memory_file(text: str) -> bool:
    if text.startswith(DEV_MEMORY_PREFIXES) or text == "/dev/shm":
        return True
    parts = text.split("/")
    return (len(parts) > 2 and parts[1] == "proc"
            and (parts[-1] in PROC_MEMORY_NAMES or any(d in parts[2:-1] for d in PROC_MEMORY_DIRS)))


def install(record, skipped_files: tuple[str, ...]) -> None:
    """Wrap the non-dispatch reads and add the audit hook (once per process)."""
    global _INSTALLED
    if _INSTALLED:
        return
    import torch

    from . import launches

    skipped = (os.path.dirname(torch.__file__), __file__) + tuple(skipped_files)
    by_interpreter = launches.interpreter_frame_test(record, skipped)

    def note(what: str, frame) -> None:
        if record.current is not None and not by_interpreter(frame):
            record.note_host_read(what)

    def guard(owner: Any, name: str, what: str) -> None:
        original = getattr(owner, name, None)
        if original is None:
            return

        def guarded(*args, **kwargs):
            note(what, sys._getframe(1))
            return original(*args, **kwargs)

        # no functools.wraps: its ``__wrapped__`` would hand out the unguarded original
        guarded.__name__, guarded.__qualname__, guarded.__doc__ = name, f"guarded {name}", original.__doc__
        setattr(owner, name, guarded)

    tensor_reads: dict[str, str] = {
        "tolist": "Tensor.tolist()", "numpy": "Tensor.numpy()", "__array__": "numpy conversion (__array__)",
        "__dlpack__": "DLPack export (__dlpack__)", "__repr__": "printing or formatting a tensor (__repr__)",
        "__reduce_ex__": "pickling a tensor (__reduce_ex__)",
    }
    for name, what in tensor_reads.items():
        guard(torch.Tensor, name, what)
    for name in ("__reduce__", "_write_file", "_share_filename_cpu_", "_share_fd_cpu_", "_shared_incref",
                 "_new_shared_fd_cpu", "_new_shared_filename_cpu", "share_memory_", "tolist"):
        guard(torch.UntypedStorage, name, f"storage.{name}")
    import torch.serialization

    guard(torch, "save", "torch.save")
    guard(torch.serialization, "save", "torch.save")
    guard(torch.serialization, "_save", "torch.save")

    armed_rule: list = []  # the rule, once armed (read-only); handed over once, never replaced

    def arm(rule: Any) -> None:
        if armed_rule:
            raise RuntimeError("the outside rule is armed once")
        armed_rule.append(rule)

    outside_refused, code_refused = _outside_refused, _code_refused  # taken now: the hook never looks a name up
    frame_asked_by_kernel, walking = _frame_asked_by_kernel, []
    _guard_other_processes(armed_rule)

    # each kernel file's text as the judge checked it, by the name its code is compiled under: set
    # by the worker's load through ``pin_kernel_text``, handed over once (``kernel_text_pinner``)
    kernel_texts: dict[str, list[str]] = {}

    def pin_kernel_text(filename: str, source: str) -> None:
        kernel_texts[filename] = source.splitlines(keepends=True)

    function_type = type(install)
    # the record, in this closure only (see ``_CODE_SETS_READER``); its append taken now
    code_sets_record: list[tuple[Any, Any]] = []
    record_code_set = code_sets_record.append
    length = len

    def read_code_sets(start: int) -> tuple[int, tuple]:
        """How many sets were recorded, and (copies of) those from ``start`` on."""
        return length(code_sets_record), tuple(code_sets_record[start:])

    def audit(event: str, args: tuple) -> None:
        if event == "object.__setattr__" and len(args) > 1 and type(args[0]) is function_type \
                and type(args[1]) is str and args[1] == "__code__":
            record_code_set((args[0], args[0].__code__))  # the code it had until now (the set comes after)
            return
        if event == "sys.addaudithook":  # a hook of the kernel's would see every frame the watch takes
            REFUSED_AUDIT_HOOKS.append(event)
            raise RuntimeError("no audit hooks after the judge's own")  # Python then does not add it
        if armed_rule and (event in KERNEL_MAY_NOT_ASK or event == "object.__getattr__" and len(args) > 1
                           and args[1] in FRAME_ATTRIBUTES) and not armed_rule[0]["signals_only"]:
            if walking:  # this hook's own sys._getframe below raises the event again
                return
            walking.append(True)
            try:
                asked = frame_asked_by_kernel(sys._getframe(1), kernel_texts)
            finally:
                walking.clear()
            if asked:
                detail = args[1] if event in ("object.__getattr__", "pickle.find_class") and len(args) > 1 else ""
                what = f"{event} ({detail}) asked by the kernel's code"
                REFUSED_OUTSIDE.append(("introspection", what))
                raise RuntimeError(f"refused by the judge: {what}")
            return
        if armed_rule and event in CODE_EVENTS and not armed_rule[0]["signals_only"]:
            refused = code_refused(event, args, sys._getframe(1), armed_rule[0], kernel_texts)
            if refused:
                REFUSED_OUTSIDE.append(refused)
                raise RuntimeError(f"refused by the judge: {refused[1]}")
            return
        if armed_rule and (event in PROCESS_EVENTS or event in FILE_EVENTS or event == "open"
                           or event == "resource.prlimit"):
            refused = outside_refused(event, args, sys._getframe(1), armed_rule[0])
            if refused:
                REFUSED_OUTSIDE.append(refused)
                raise RuntimeError(f"refused by the judge: {refused[1]}")
        if record.current is None:
            return
        if event == "open" and args and memory_path(args[0]):
            note(f"opening {args[0]!r} (raw memory)", sys._getframe(1))
        elif event in MEMORY_AUDIT_EVENTS:
            note(f"{event} (raw memory)", sys._getframe(1))

    sys.addaudithook(audit)
    _CODE_SETS_READER.append(read_code_sets)
    _TEXT_PINNER.append(pin_kernel_text)
    _ARM_RULE.append(arm)
    _INSTALLED = True


# The function that records a kernel file's checked text for the code rule (``_rewritten_elsewhere``),
# handed over once to the worker (``kernel_text_pinner``) before any kernel file loads: a kernel
# that could call it would pin the lines it put into linecache as its file's text.
_TEXT_PINNER: list = []


def kernel_text_pinner() -> Any:
    """``pin(filename, source)``, once (None after): the worker takes it before any kernel loads."""
    return _TEXT_PINNER.pop() if _TEXT_PINNER else None


def code_sets_reader() -> Any:
    """The reader of the audit hook's record of ``__code__`` sets (``read(start) -> (count, sets
    from start on)``) while the hook records them (after ``install``), else None.  Take it once,
    before any kernel file loads: this module's names are within a kernel's reach."""
    return _CODE_SETS_READER[0] if _CODE_SETS_READER else None


def outside_finding(since: int) -> dict[str, str] | None:
    """The finding for what was refused after the first ``since`` (the rule of the first)."""
    refused = REFUSED_OUTSIDE[since:]
    if not refused:
        return None
    rule = refused[0][0]
    why = ("other processes are the judge's: a child outlives its call and the worker, and the incumbent's worker "
           "is a sibling" if rule == "threads-or-streams"
           else "code is not built at run time in a kernel file: text evaluated under any name runs past every "
           "rule on the file's text" if rule == "introspection"
           else "files and the environment are the judge's (the incumbent's kernel file, the caches it reads)")
    return {"rule": rule, "message": (
        "the kernel reached outside its process (" + "; ".join(what for _, what in refused[:3]) + "; refused): " + why)}


def finding(host_reads: list[str]) -> dict[str, str] | None:
    """The ``foreign-compute`` finding for a call that read tensor values into Python."""
    if not host_reads:
        return None
    return {"rule": "foreign-compute", "message": (
        "the call read tensor values into Python (" + "; ".join(host_reads[:3])
        + "): a kernel's result must be computed by its Triton kernels, never on the host")}
