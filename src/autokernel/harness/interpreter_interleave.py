"""A launch's programs run interleaved at their atomics under the Triton interpreter (worker side,
CPU only; installed by ``interpreter_as_gpu.install``).

The interpreter runs a grid's programs one after another, each to its end.  A GPU runs them at
once, so a kernel whose programs hand work to one another through atomics can be right under the
interpreter only because of that order (red-team passes 13, 14 and 16): a persistent kernel taking
(row, chunk) tickets from a counter and carrying a row's sum in registers (the first program
takes every ticket), or a "last program to arrive reads the partials" counter whose writers
release after their stores by a second counter or a toggle the reader never checks (every
writer had finished when the reader arrived).  And a program waiting on a later one hung.

Here the programs of a launch take turns, each running from one atomic to the next (its first
turn from its start): on half the launches each turn goes to the awake program of highest random
priority, which drops to the last rank at a few random turns, on the others it is drawn evenly
(``_Turns``).  The interpreter's rewrite of every jitted function also makes a generator of it:
each call in its body goes through ``suspending_call``, which suspends the program (a ``yield``)
once an atomic has run, polls again at the next turn where a ``tl.atomic_poll`` is unmet, and
calls jitted callees as generators (``yield from``).  Generators keep the program's
code on the launching thread's stack, under the grid loop, so the judge's watch and its frame
walks see what they saw when the programs ran one after another.  A jit function that holds a
lambda, a comprehension or a nested function (none of which Triton compiles) is refused.
"""
from __future__ import annotations

import ast
import copy
import inspect

import numpy as np

CALL = "__autokernel_call__"  # the generator variant's name for ``suspending_call`` (a closure cell)
FACTORY = "__autokernel_programs__"  # makes the generator variant, given ``suspending_call``
_NOT_COMPILED = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
                 ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Yield, ast.YieldFrom,
                 ast.Await)


class NotCompiledError(SyntaxError):
    """A jit function's body holds what Triton does not compile (and the interleaving cannot
    suspend inside)."""


class _Suspending(ast.NodeTransformer):
    """Each call ``f(a, k=v)`` of a function's body becomes ``(yield from CALL(f, a, k=v))``."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)
        call = ast.Call(func=ast.Name(id=CALL, ctx=ast.Load()), args=[node.func, *node.args],
                        keywords=node.keywords)
        return ast.copy_location(ast.YieldFrom(value=ast.copy_location(call, node)), node)


def generator_variant(fn: ast.FunctionDef) -> ast.FunctionDef:
    """``FACTORY(CALL)``, which returns ``fn`` as a generator whose calls go through ``CALL``."""
    for node in ast.walk(fn):
        if node is not fn and isinstance(node, _NOT_COMPILED):
            raise NotCompiledError(f"the jit function {fn.name} holds a {type(node).__name__.lower()} "
                                   f"(line {getattr(node, 'lineno', '?')}), which Triton does not compile")
        if isinstance(node, ast.Name) and node.id in (CALL, FACTORY) or \
                isinstance(node, ast.arg) and node.arg in (CALL, FACTORY):
            raise NotCompiledError(f"the jit function {fn.name} uses the name {CALL} or {FACTORY}, "
                                   "which the judge's interpreter keeps for itself")
    variant = copy.deepcopy(fn)
    variant.decorator_list = []
    variant.body = [_Suspending().visit(stmt) for stmt in variant.body]
    start = ast.Expr(value=ast.YieldFrom(value=ast.Tuple(elts=[], ctx=ast.Load())))  # a generator even with no call
    variant.body.insert(0, ast.copy_location(start, fn))
    factory = ast.parse(f"def {FACTORY}({CALL}):\n    pass\n").body[0]
    factory.body = [variant, ast.Return(value=ast.Name(id=fn.name, ctx=ast.Load()))]
    return ast.fix_missing_locations(ast.copy_location(factory, fn))


def install(interpreter, memory, rng, raw_set_grid_idx) -> bool:
    """Make ``interpreter``'s launches interleave their programs at atomics.  ``memory`` (a
    ``LaunchMemory``) says which program runs and whether an atomic ran since it was last asked;
    ``rng`` draws the turns; ``raw_set_grid_idx`` is the builder's own ``set_grid_idx`` (no
    shuffle).  False, changing nothing, where this Triton's interpreter is built otherwise."""
    rewriter = getattr(interpreter, "FunctionRewriter", None)
    executor = getattr(interpreter, "GridExecutor", None)
    function = getattr(interpreter, "InterpretedFunction", None)
    builder = getattr(interpreter, "interpreter_builder", None)
    error = getattr(interpreter, "InterpreterError", RuntimeError)
    transformer = getattr(rewriter, "ast_transformer", None)
    if None in (rewriter, executor, function, builder, transformer) or \
            not hasattr(rewriter, "_compile_and_exec") or not hasattr(function, "rewrite") or \
            list(inspect.signature(executor.__init__).parameters)[:2] != ["self", "fn"]:
        return False
    programs: dict = {}  # a rewritten jit function -> its generator variant
    patch_lang = interpreter._patch_lang

    def suspending_call(f, *args, **kwargs):
        if memory.take_atomic():
            yield  # an atomic ran outside a call this program suspends at (a builtin called by Triton)
        variant = None
        if type(f) is function:
            patch_lang(f.fn)
            variant = programs.get(f.rewrite())
        if variant is None:
            result = f(*args, **kwargs)
            while memory.poll_unmet:  # a tl.atomic_poll not met: poll again at the next turn
                memory.poll_unmet = False
                memory.take_atomic()
                yield
                result = f(*args, **kwargs)
        else:
            try:
                result = yield from variant(*args, **kwargs)
            except Exception as e:
                raise error(repr(e)) from e
        if memory.take_atomic():
            yield
        return result

    base = type(transformer)

    class SuspendingTransformer(base):
        def visit(self, node):
            if not isinstance(node, ast.Module):
                return super().visit(node)
            fn = next((s for s in node.body if isinstance(s, ast.FunctionDef)), None)
            factory = generator_variant(fn) if fn is not None else None
            node = super().visit(node)
            if factory is not None:
                node.body.append(super().visit(factory))
                attach = ast.parse(f"{fn.name}.{FACTORY} = {FACTORY}\n").body[0]
                node.body.append(ast.copy_location(attach, fn))
            return node

    compile_and_exec = rewriter._compile_and_exec

    def _compile_and_exec(self, transformed_ast):
        plain = compile_and_exec(self, transformed_ast)
        factory = getattr(plain, "__dict__", {}).pop(FACTORY, None)
        if factory is not None:
            programs[plain] = factory(suspending_call)
        return plain

    init = executor.__init__

    def __init__(self, fn, *args, **kwargs):
        init(self, fn, *args, **kwargs)
        variant = programs.get(fn)
        if variant is not None:
            self.fn = _interleaved(fn, variant, builder, memory, rng, raw_set_grid_idx)

    SuspendingTransformer.__qualname__ = SuspendingTransformer.__name__ = base.__name__
    _compile_and_exec.__qualname__ = f"{rewriter.__qualname__}._compile_and_exec"
    __init__.__qualname__ = f"{executor.__qualname__}.__init__"
    rewriter.ast_transformer = SuspendingTransformer()
    rewriter._compile_and_exec = _compile_and_exec
    executor.__init__ = __init__
    return True


def _interleaved(fn, variant, builder, memory, rng, raw_set_grid_idx):
    """What the grid loop calls once per program, in place of ``fn`` (it reads ``fn``'s globals and
    signature from it too): each call starts the program's generator and runs it to its first
    atomic; the last program's call then gives the suspended ones turns (``_Turns``)."""
    pending: list = []  # [program, grid index, generator]
    started = [0]

    def run_program(**args):
        if started[0] == 0:
            pending.clear()
        started[0] += 1
        # started when its first turn comes, as any other turn: run to its first atomic here, in
        # the loop's order, every program stored and released before any program's second atomic
        # (red-team pass 17: a reader's first atomic was a free barrier over every writer's store)
        pending.append([memory.program, tuple(builder.grid_idx), variant(**args)])
        try:
            if started[0] == _programs(builder):
                started[0] = 0
                _Turns(pending, builder, memory, rng, raw_set_grid_idx).run()
        except BaseException:
            started[0] = 0
            for _, _, generator in pending:
                generator.close()  # under the launch, where the judge watches (any finally runs here)
            pending.clear()
            raise

    return _Program(fn, run_program)


# a sleeper woken with no write, on a quarter of the turns: a spin that gives up after a few polls
# of nothing must not wait for every other program to finish (red-team pass 17: two polls of a
# word nobody writes put the reader to sleep until all had stored their partials)
SPURIOUS_WAKE = 0.25
RANKED = 0.5  # the launches whose turns go by priority; the others draw each turn evenly
CHANGE_POINTS = 3  # turns, drawn among the first 3 a program, after which the runner drops to the last rank
DEMOTE = 0.01  # and after any turn, so that no spin holds the first rank for ever
DEADLOCK_WAKES = 1000  # a loop of 2000 atomics that change nothing, and nothing else, would be taken for one


class DeadlockError(RuntimeError):
    """Every program of a launch waits on a value no program changes: on a GPU the launch hangs."""


class _Turns:
    """A launch's programs, unstarted, run in turns until all have ended: on half the launches each
    turn is drawn evenly among the awake programs, on the others it goes to the one of highest
    random priority, which drops to the last rank at a few random turns.  A program that spins (a
    turn whose one memory access was an atomic that changed nothing and read what the turn before
    read, at the same addresses: a poll of a flag another program sets) sleeps until a write
    reaches a byte it read, so a chain of programs each waiting on the one before costs turns in
    proportion to its length, not to its square.  A loop that does other work between its atomics
    (an atomic_max of each tile's maximum) never sleeps.  When all sleep, all wake; when that
    happens ``DEADLOCK_WAKES`` times in a row with no write between, the launch is deadlocked."""

    def __init__(self, pending: list, builder, memory, rng, raw_set_grid_idx) -> None:
        self.awake, self.asleep = list(pending), []  # asleep: (turn, the bytes it waits on)
        # red-team pass 17: with every turn drawn evenly, a reader that made many atomics of nothing
        # before its acquire came after every writer on nearly every launch (programs with few
        # atomics end first).  Half the launches give the turn to the awake program of highest
        # random priority, which drops to the last rank at a few change points (probabilistic
        # concurrency testing): a writer dropped between its count and its store is caught
        # whatever the reader's delay.  Drawn evenly, the other half catch most other handoffs.
        self.rank = {id(turn): rank for rank, turn in zip(rng.permutation(len(pending)).tolist(), pending)}
        self.last_rank = len(pending)
        self.change_points = set(rng.integers(1, 3 * len(pending) + 1, size=CHANGE_POINTS).tolist())
        self.by_rank = bool(rng.random() < RANKED)
        self.turns = 0
        self.polled: dict[int, tuple] = {}  # id(turn) -> what its last turn's atomic read, changing nothing
        self.waiting: np.ndarray | None = None  # every byte a sleeper waits on (None: to be made again)
        self.sleepers: dict[int, list] = {}  # a byte of ``waiting`` -> the turns that wait on it
        self.builder, self.memory, self.rng, self.set_idx = builder, memory, rng, raw_set_grid_idx

    def run(self) -> None:
        memory = self.memory
        quiet_wakes = 0  # times all slept with no write since all last woke
        wrote = True
        memory.tracking = True
        try:
            while self.awake or self.asleep:
                if not self.awake:
                    quiet_wakes = 0 if wrote else quiet_wakes + 1
                    if quiet_wakes > DEADLOCK_WAKES:
                        raise DeadlockError(
                            f"the {len(self.asleep)} programs of a launch left all wait, spinning on atomics that "
                            f"change nothing, and {quiet_wakes} times in a row none wrote anything before all "
                            "waited again: each waits for a value no program changes, so on a GPU this launch hangs")
                    self.awake, self.asleep, self.waiting, wrote = [turn for turn, _ in self.asleep], [], None, False
                if self.asleep and self.rng.random() < SPURIOUS_WAKE:
                    turn, _ = self.asleep.pop(int(self.rng.integers(len(self.asleep))))
                    self.awake.append(turn)
                    self.waiting = None
                if self.by_rank:
                    turn = min(self.awake, key=lambda t: self.rank[id(t)])
                else:
                    turn = self.awake[int(self.rng.integers(len(self.awake)))]
                self.set_idx(self.builder, *turn[1])
                memory.program, memory.waits_on, memory.accesses = turn[0], None, 0
                memory.written.clear()
                if not _advance(turn):
                    self.awake.remove(turn)
                    self.polled.pop(id(turn), None)
                else:
                    self._sleep_if_spinning(turn, memory.waits_on if memory.accesses == 1 else None)
                    self.turns += 1
                    if self.by_rank and (self.turns in self.change_points or self.rng.random() < DEMOTE):
                        self.rank[id(turn)], self.last_rank = self.last_rank, self.last_rank + 1
                if memory.written:
                    wrote = True
                    if self.asleep:
                        self._wake(np.concatenate(memory.written))
        finally:
            memory.tracking = False
            memory.written.clear()

    def _sleep_if_spinning(self, turn: list, polled: tuple | None) -> None:
        """``polled``: what the turn's one access, an atomic that changed nothing, read (None when
        the turn did more, or changed something)."""
        before = self.polled.pop(id(turn), None)
        if polled is None:
            return
        addresses, values = polled
        if before is not None and before[1] == values and np.array_equal(before[0], addresses):
            self.awake.remove(turn)
            self.asleep.append((turn, addresses))
            self.waiting = None
        else:
            self.polled[id(turn)] = polled

    def _wake(self, written: np.ndarray) -> None:
        if self.waiting is None:
            self.waiting = np.unique(np.concatenate([waits_on for _, waits_on in self.asleep]))
            self.sleepers = {}
            for turn, waits_on in self.asleep:
                for byte in waits_on.tolist():
                    self.sleepers.setdefault(byte, []).append(turn)
        hit = self.waiting[np.isin(self.waiting, written)]
        if not hit.size:
            return
        woken = {id(turn): turn for byte in hit.tolist() for turn in self.sleepers[byte]}
        self.awake.extend(woken.values())
        self.asleep = [(turn, waits_on) for turn, waits_on in self.asleep if id(turn) not in woken]
        self.waiting = None


class _Program:
    """A callable with a jit function's globals, name and signature (what the grid loop reads)."""

    def __init__(self, fn, run) -> None:
        self.__globals__ = fn.__globals__
        self.__signature__ = inspect.signature(fn)
        self.__name__ = fn.__name__
        self._run = run

    def __call__(self, **args):
        return self._run(**args)


def _advance(turn: list) -> bool:
    """Run ``turn``'s program to its next atomic: whether it is still going."""
    try:
        next(turn[2])
    except StopIteration:
        return False
    return True


def _programs(builder) -> int:
    nx, ny, nz = builder.grid_dim
    return max(1, nx * ny * nz)
