"""The dispatch mode every kernel call runs under, in the worker (``make_watch_class``)."""
from __future__ import annotations

import collections
import operator
import os
import sys


# What the Triton interpreter's argument copies do (host copies of a launch's tensors, views of
# them, the copy back): the only ops exempt in its frames.  Any other op there was not made by
# the copy: a storage class whose ``cpu`` the kernel swapped during its call for
# ``functools.partial(torch.softmax, x, -1)`` (put back before it returned) had the copy
# compute the softmax.
INTERPRETER_COPY_OPS = frozenset({"aten.new_empty", "aten.empty", "aten.empty_strided", "aten.set_", "aten.copy_",
                                  "aten._to_copy", "aten.alias", "aten.detach"})


# (watch class, its records' reader) for each class made whose reader was not yet taken
_READERS: list = []


def records_reader(watch_cls):
    """The function that gives a watch of ``watch_cls`` its records (``WatchRecords``: what the
    judge reads of it), handed over once: the worker takes it as it makes the class, before any
    kernel file loads, and a kernel asking later gets None (on the class, ``type(watch)`` handed
    it to any kernel holding the watch)."""
    for i, (cls, reader) in enumerate(_READERS):
        if cls is watch_cls:
            del _READERS[i]
            return reader
    return None


def make_watch_class(launch_record):
    """The dispatch mode the kernel runs under (built lazily: it needs torch)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

    from . import launches
    from .integrity import ALLOWED_OPS, POISONED_ALLOCATIONS
    from .output_checks import numel, planted, span

    # C functions taken before any kernel loads: the poison fill runs inside __torch_dispatch__,
    # where torch has taken this mode off its stack, and ``out.fill_`` looked up through the
    # class ran a ``fill_`` the kernel had set on it for the length of its call (a softmax
    # computed there, never recorded; the name was gone before the checks after the call)
    fill, zero, is_floating_point = torch._C.TensorBase.fill_, torch._C.TensorBase.zero_, \
        torch._C.TensorBase.is_floating_point
    # the same for the GPU's timed fills: the event class's methods, taken now (as the worker takes them)
    if torch.cuda.is_available():
        event_cls, event_base = torch.cuda.Event, torch._C._CudaEventBase
        new_event = event_cls.__new__
        record_event = getattr(event_base, "record", None) or event_cls.record
        elapsed = event_base.elapsed_time
        current_stream = torch.cuda.current_stream

    # how the watch calls an op, taken now: ``func(*args)`` looked ``__call__`` up through the op's
    # class, and a kernel that found the class (a key of torch.utils.flop_counter's registry is an
    # op packet, its ``.default`` an OpOverload) swapped ``__call__`` for the length of its call:
    # the watch's own call of ``aten.view`` then ran the kernel's function with the watch off
    # torch's stack, and it wrote torch.softmax into the output.  The op's C handle (``_op``, a
    # builtin) is called directly; anything else is the original ``__call__``, and a finding.
    op_class = type(torch.ops.aten.view.default)
    op_call = vars(op_class).get("__call__")
    builtin = type(len)

    # torch's own op classes (OpOverload and its subclasses), by identity: another object posing as
    # an op is never called here
    op_classes = frozenset(c for c in vars(sys.modules[op_class.__module__]).values()
                           if isinstance(c, type) and issubclass(c, op_class))

    def run_op(records, func, args, kwargs):
        if type(func) not in op_classes:
            records.tampered.append(f"an op of class {type(func).__name__}")
            raise RuntimeError("refused by the judge: an op that is not one of torch's")
        handle = vars(func).get("_op")
        if type(handle) is not builtin:  # the kernel's own code in its place: never run here
            records.tampered.append("an op's C handle")
            raise RuntimeError("refused by the judge: an op whose C handle was replaced")
        if vars(op_class).get("__call__") is not op_call:
            records.tampered.append("the op class's __call__")
        return handle(*args, **kwargs)

    # and how it names an op: ``str(func.overloadpacket)`` read the packet's ``_qualified_op_name``,
    # which a kernel set to "aten::view" on aten.mm's packet (a key of the same registry) for the
    # length of its call: torch.mm was recorded as an allowed op.  The name comes from the op's
    # schema through the schema class's C getter, taken now (the class's own attributes can be
    # replaced).
    schema_class = type(vars(torch.ops.aten.view.default)["_schema"])
    schema_name = vars(schema_class)["name"].fget

    # the allowed ops themselves, taken now: a schema is a plain attribute of its op, and aten.mm
    # given aten.view's schema (both reachable through the flop counter's ``aten``) would be named
    # aten.view; an op named as an allowed one must be one of these objects
    allowed_objects = []
    for full in ALLOWED_OPS:
        namespace, _, short = full.partition(".")
        try:
            packet = getattr(getattr(torch.ops, namespace), short)
            allowed_objects += [getattr(packet, overload) for overload in packet.overloads()]
        except (AttributeError, RuntimeError):
            continue
    allowed_ids = frozenset(id(op) for op in allowed_objects)

    def op_name(records, func) -> str:
        schema = vars(func).get("_schema")
        if type(schema) is not schema_class:
            records.tampered.append("an op's schema")
            return "aten.<unknown>"
        name = schema_name(schema).replace("::", ".")
        if name in ALLOWED_OPS and id(func) not in allowed_ids:
            records.tampered.append(f"an op named {name} that is not {name}")
        return name

    torch_dir = os.path.dirname(torch.__file__)
    # only the interpreter's argument copies: its other frames call the kernel's own callables
    called_by_interpreter = launches.interpreter_frame_test(launch_record, (torch_dir, __file__),
                                                            launches.interpreter_copy_code_objects())
    tensor_type = torch.Tensor

    getframe = sys._getframe  # taken now, as the watch's other functions
    key_excluded, python_key = torch._C._dispatch_tls_is_dispatch_key_excluded, torch._C.DispatchKey.Python

    def called_by_triton_interpreter() -> bool:
        return called_by_interpreter(getframe(2))

    # Everything the judge reads of a watch (the ops it saw, what it allocated, what it found
    # tampered with, its poison, its fills, how often it was entered, the flags torch's base class
    # saved on entry) is kept here, in ``WatchRecords`` objects out of the watch's own attributes:
    # torch's dispatch stack hands the mode to the kernel (``torch._C._get_dispatch_stack_at``),
    # and a kernel that edited the watch's sets in place (``watch.ops.discard("aten.sum")``)
    # passed all six stages with ``torch.sum``; the check after the call compared the attributes'
    # names only.  Each watch's records are found by identity in ``live`` (never by hashing the
    # watch: a ``__hash__`` set on its class would run the kernel's code in the judge's lookups).
    # The judge takes a watch's records once, right after making it, through ``records_of``, which
    # it takes from ``records_reader`` as it makes the class.
    live: list = []
    LIVE_WATCHES = 15
    deque_type = type(collections.deque())
    is_, all_, map_, len_, reversed_ = operator.is_, all, map, len, reversed

    def records_of(watch):
        for known, records in reversed_(live):  # the judge's watch is the latest it made
            if known is watch:
                return records
        return None

    class WatchRecords:
        """What the judge reads of one watch (see above)."""

        __slots__ = ("poison", "timed_fills", "flush", "stream", "ops", "allocated", "planted", "tampered",
                     "fills", "entered", "attributes", "flags", "exited")

        def __init__(self, poison, timed_fills, flush):
            self.poison, self.timed_fills, self.flush = poison, timed_fills, flush
            self.stream = None  # the stream the judge times (GPU; the worker sets it before the call)
            self.ops: set[str] = set()
            self.allocated: set[int] = set()
            self.planted: list[str] = []  # ops that returned a tensor with attributes of the kernel's on it
            self.tampered: list[str] = []  # what the watch calls, found changed during the call
            self.fills: list = []
            self.entered = 0
            self.attributes = None  # the watch's attribute names as the judge's own entry left them
            self.flags = ()  # (name, torch's deque, its contents) as the judge's own entry left them
            self.exited = False

        def fill_us(self) -> float:
            return sum(elapsed(s, e) for s, e in self.fills) * 1000.0

        def flags_changed(self, watch) -> bool:
            get = vars(watch).get
            for name, flags, saved in self.flags:
                if get(name) is not flags or len_(flags) != len_(saved) or not all_(map_(is_, flags, saved)):
                    return True
            return False

        def restore_flags(self, watch) -> None:
            """Put torch's saved flags back as the judge's entry left them, so that the base class's
            ``__exit__`` never pops an object of the kernel's into torch's module globals (its truth
            value was asked at the next entry of any mode: the kernel's code ran there, unwatched)."""
            if type(vars(watch)) is not dict:
                object.__setattr__(watch, "__dict__", {})
            space = vars(watch)
            for name, flags, saved in self.flags:
                deque_clear(flags)
                deque_extend(flags, saved)
                space[name] = flags

    deque_clear, deque_extend = deque_type.clear, deque_type.extend
    # the flags torch's base class keeps on a mode (deques it pushes to on entry, pops on exit)
    flag_names = tuple(name for name, value in vars(TorchDispatchMode()).items() if type(value) is deque_type)

    class KernelWatch(TorchDispatchMode):
        """Records every aten op the kernel calls and the storage of every tensor those ops
        make; fills fresh floating allocations with ``poison`` so that elements the kernel
        never writes show up.  Ops the real Triton interpreter makes on the kernel's behalf
        (copying arguments in and out) are neither recorded nor poisoned.  What it records is
        kept out of its own attributes (``records_reader``)."""

        def __init__(self, poison: float | None, timed_fills: bool = False, flush=None):
            super().__init__()
            # the judge holds the records it reads: the exited watches' are dropped here, and so are all
            # but the latest few never exited (watches a kernel made: a judge's watch pushed out is
            # found nowhere, which ``still_in_charge`` reports)
            if len_(live) >= LIVE_WATCHES:
                live[:] = [entry for entry in live if not entry[1].exited][-LIVE_WATCHES // 2:]
            live.append((self, WatchRecords(poison, timed_fills, flush)))

        def _lazy_init_old_dispatch_mode_flags(self):
            # every ``__enter__`` of a mode, its class's or the base's, calls this on it: a watch
            # popped off torch's stack and pushed back during the call (passed all six stages) is
            # entered twice
            records = records_of(self)
            if records is not None:
                records.entered += 1
            super()._lazy_init_old_dispatch_mode_flags()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            records = records_of(self)
            if records is None:  # a watch the judge is done with, entered again by the kernel
                raise RuntimeError("refused by the judge: a watch entered again after the judge's use")
            out = run_op(records, func, args, kwargs or {})
            name = op_name(records, func)
            if type(out) is tensor_type:
                # C functions, never out's own methods: an in-place op returns its argument, and an
                # attribute planted on it (.untyped_storage) would run here, where torch has taken
                # this mode off its stack (a sum computed there was never recorded)
                if planted((out,)):
                    records.planted.append(name)
                records.allocated.add(span(out)[0])
            if name in INTERPRETER_COPY_OPS and called_by_triton_interpreter():
                return out

            if name == "aten._local_scalar_dense":
                launch_record.note_host_read(".item(), float(t), int(t), bool(t) or iteration (aten._local_scalar_dense)")
            records.ops.add(name)
            poison = records.poison
            if (poison is not None and name in POISONED_ALLOCATIONS and type(out) is tensor_type
                    and is_floating_point(out) and numel(out) > 0):
                if records.timed_fills:
                    stream = records.stream if records.stream is not None else current_stream()
                    start = new_event(event_cls, enable_timing=True)
                    end = new_event(event_cls, enable_timing=True)
                    record_event(start, stream)
                    fill(out, poison)
                    if records.flush is not None:  # the fill left the output in L2: cold again, as the call began
                        zero(records.flush)
                    record_event(end, stream)
                    records.fills.append((start, end))
                else:
                    fill(out, poison)
            return out

        def still_in_charge(self) -> str | None:
            """After the kernel returned, still inside ``with``: this mode must be the top of
            the dispatch-mode stack, entered once (by the judge), its attributes, the flags torch
            saved on it and its class as the judge left them, and Python dispatch must not be
            excluded.  (The worker calls this through the function it took when the class was made.)"""
            stack = _get_current_dispatch_mode_stack()
            if not stack or stack[-1] is not self:
                return "the harness's dispatch mode was removed or covered during the call"
            records = records_of(self)
            if records is None:
                return ("the harness's dispatch mode was exited during the call, or its records pushed out by "
                        "watches the kernel made")
            if records.entered != 1:
                return ("the harness's dispatch mode was taken off torch's dispatch stack and put back during "
                        "the call: ops ran unwatched in between")
            space = vars(KernelWatch)  # compared by identity: no method of a value the kernel set runs here
            if len(space) != len(class_space) or not all(space.get(name) is value for name, value in class_space.items()) \
                    or type(vars(self)) is not dict or set(vars(self)) != records.attributes \
                    or records.flags_changed(self):
                return "the kernel changed the harness's dispatch mode (its attributes or its class) during the call"
            if key_excluded(python_key):
                return "Python dispatch was excluded during the call (the harness's watch switched off)"
            return None

        def __enter__(self):
            out = super().__enter__()
            records = records_of(self)
            if records is not None and records.attributes is None:  # what the judge's own entry left
                space = vars(self)
                records.attributes = set(space)
                records.flags = tuple([(name, space[name], tuple(space[name])) for name in flag_names if name in space])
            return out

        def __exit__(self, *exc):
            records = records_of(self)
            if records is not None:
                records.exited = True
                if type(vars(self)) is not dict or records.flags_changed(self):
                    records.tampered.append("the dispatch-mode flags torch saved on the watch")
                    records.restore_flags(self)
            return super().__exit__(*exc)

    _READERS.append((KernelWatch, records_of))  # handed over once (``records_reader``), never put on the class
    class_space = dict(vars(KernelWatch))
    return KernelWatch
