"""The Problem record: what a kernel must compute, on which shapes, judged how.

A problem is plain data plus a few pure functions.  Everything the harness needs to judge a
kernel file lives here; nothing here runs candidate code.

Conventions shared by every problem kind:

* A *shape* is a dict of named integer dimensions, ordered as ``problem.dims``
  (``{"M": 4096, "N": 4096}``).  On the command line it is written ``4096x4096`` (values in
  ``dims`` order) or ``M=4096,N=4096``.  Non-size settings that change the computation (the
  attention ``causal`` flag) are dimensions too, with values 0/1.
* ``make_inputs(shape, dtype, device, seed)`` returns the positional arguments of
  ``kernel_fn`` — tensors drawn at random (never zeros) from a seeded generator, plus any
  scalars (``eps``...).  The same seed gives the same inputs.
* ``reference(*args)`` is the PyTorch definition.  The harness calls it on *upcast* copies of
  the inputs (float64 on CPU, float32 with TF32 off on GPU) to get the ground truth, and on
  the inputs as given to learn the expected output dtype and shape.
* ``bytes(shape, dtype)`` is the fewest bytes: each input read once, each output written once.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

Shape = dict[str, int]

DTYPE_NAMES: dict[str, torch.dtype] = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "half": torch.float16,
    "fp32": torch.float32,
    "float32": torch.float32,
    "float": torch.float32,
}


def dtype_name(dtype: torch.dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32",
            torch.float64: "fp64"}.get(dtype, str(dtype).replace("torch.", ""))


def parse_dtype(text: str) -> torch.dtype:
    try:
        return DTYPE_NAMES[text.strip().lower()]
    except KeyError:
        raise ValueError(f"unknown dtype {text!r} (use one of bf16, fp16, fp32)") from None


def element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


@dataclass(frozen=True)
class Tolerance:
    """Allowed error of a kernel output against the high-precision reference.

    Element-wise: ``|out - ref| <= atol + rtol * |ref|``.  Whole tensor:
    ``||out - ref|| / ||ref|| <= max_rel_norm``.  Both must hold.
    """

    atol: float
    rtol: float
    max_rel_norm: float


# Calibrated so that the eager PyTorch op computed in the dtype passes with margin
# (tests/test_tolerances.py checks this for every problem and dtype).
DEFAULT_TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(atol=1e-4, rtol=1e-4, max_rel_norm=1e-4),
    torch.float16: Tolerance(atol=2e-3, rtol=4e-3, max_rel_norm=2e-3),
    torch.bfloat16: Tolerance(atol=1.6e-2, rtol=2e-2, max_rel_norm=1e-2),
}


# Dimensions that are 0/1 settings, not sizes, wherever a kind has them (attention's ``causal``,
# GELU's ``tanh``, attention_masked's ``additive`` and ``per_query``, relative_position_bias's
# ``bidirectional``, shifted_windows' ``reverse``, causal_conv1d's ``silu``)
FLAG_DIMS = frozenset({"causal", "tanh", "additive", "per_query", "bidirectional", "masked", "reverse", "silu"})


def format_shape(shape: Shape) -> str:
    return "x".join(str(v) for v in shape.values())


def parse_shape(text: str, dims: Sequence[str], flags: Sequence[str] = (), zero: Sequence[str] = (),
                optional: Sequence[str] = ()) -> Shape:
    """Parse ``4096x4096`` (values in ``dims`` order) or ``M=4096,N=4096``.  Sizes are at least 1;
    the dimensions in ``flags`` (attention's ``causal``...) are 0 or 1, those in ``zero``
    (shifted_windows' ``shift``) at least 0.  The ``optional`` ones (attention's ``Dv``) may be
    given after ``dims``, in their order."""
    text = text.strip()
    known = tuple(dims) + tuple(optional)
    if "=" in text:
        shape: Shape = {}
        for part in re.split(r"[,\s]+", text):
            if not part:
                continue
            name, _, value = part.partition("=")
            if name not in known:
                raise ValueError(f"unknown dimension {name!r} in shape {text!r}; dimensions are {', '.join(known)}")
            shape[name] = check_dim(_parse_int(value, text), text, name, name in flags, name in zero)
        missing = [d for d in dims if d not in shape]
        if missing:
            raise ValueError(f"shape {text!r} lacks dimension(s) {', '.join(missing)}")
        return {d: shape[d] for d in known if d in shape}
    values = [_parse_int(v, text) for v in re.split(r"[x×,]", text.lower())]
    if not len(dims) <= len(values) <= len(known):
        expected = f"{len(dims)}" + (f" to {len(known)}" if optional else "")
        raise ValueError(f"shape {text!r} has {len(values)} value(s); expected {expected} ({'x'.join(known)})")
    return {d: check_dim(n, text, d, d in flags, d in zero) for d, n in zip(known, values)}


def has_dims(shape: Shape, dims: Sequence[str], optional: Sequence[str] = ()) -> bool:
    """Are ``shape``'s dimensions ``dims`` followed by some of ``optional``, in order?"""
    names = list(shape)
    return names[:len(dims)] == list(dims) and names[len(dims):] == [d for d in optional if d in shape]


def _parse_int(value: str, whole: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"malformed shape {whole!r}: {value!r} is not an integer") from None


def check_dim(n: int, whole: str, name: str, flag: bool, zero: bool = False) -> int:
    if flag and n not in (0, 1):
        raise ValueError(f"malformed shape {whole!r}: {name} is 0 or 1 (a flag), got {n}")
    if zero and n < 0:
        raise ValueError(f"malformed shape {whole!r}: {name} is at least 0, got {n}")
    if zero:
        return n
    if not flag and n < 1:
        raise ValueError(f"malformed shape {whole!r}: every size must be at least 1, got {name}={n}")
    return n


def default_heldout(shape: Shape, rng: random.Random, fixed: Sequence[str] = ()) -> Shape:
    """A shape near ``shape`` the agent never saw: each free dimension moved by up to ±20%,
    made odd where it was even so that power-of-two assumptions break."""
    out = {}
    for name, value in shape.items():
        if name in fixed or value <= 1:
            out[name] = value
            continue
        moved = max(2, int(round(value * rng.uniform(0.8, 1.2))))
        if moved % 2 == 0:
            moved += 1
        out[name] = moved
    return out


@dataclass(frozen=True)
class Rows:
    """What a row is, for the judge's large shapes: ``dim`` counts them, and each adds
    ``width(shape)`` elements to the widest buffer a kernel indexes."""

    dim: str
    width: Callable[[Shape], int]


@dataclass
class Problem:
    """One optimization problem.  See the module docstring for the conventions."""

    kind: str
    description: str
    signature: str
    dims: tuple[str, ...]
    reference: Callable[..., Any]
    make_inputs: Callable[[Shape, torch.dtype, str, int], tuple]
    flops: Callable[[Shape], float]
    bytes: Callable[[Shape, torch.dtype], float]
    gpu_shapes: tuple[Shape, ...]
    cpu_shapes: tuple[Shape, ...]
    dtypes: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16, torch.float32)
    tolerances: dict[torch.dtype, Tolerance] = field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    # Shapes for the `edges` stage (non powers of two, size-1 dims, odd rows), per device.
    gpu_edge_shapes: tuple[Shape, ...] = ()
    cpu_edge_shapes: tuple[Shape, ...] = ()
    # Dimensions that held-out and edge shapes must keep (e.g. attention head_dim).
    fixed_dims: tuple[str, ...] = ()
    # Dimensions a shape may have after ``dims`` (attention's value head dim ``Dv``, where it is
    # not D); a shape without one has the problem's default for it.
    optional_dims: tuple[str, ...] = ()
    # More edge shapes, made from the target shapes (attention's at a Dv of their own): judged
    # only where the targets call for them.  None: the edge shapes alone.
    target_edges: Callable[[Sequence[Shape], str], tuple[Shape, ...]] | None = None
    # Numerics stage: returns [(case name, args)], adversarial but valid inputs.
    adversarial_inputs: Callable[[Shape, torch.dtype, str, int], list[tuple[str, tuple]]] | None = None
    # How to get the callable under test from an imported kernel module.
    # Default: ``module.kernel_fn`` (``entry_point``).  KernelBench problems build ``ModelNew``.
    make_kernel: Callable[[Any, Shape, torch.dtype, str], Callable[..., Any]] | None = None
    # Which PyTorch ops a kernel may call (checked under a torch dispatch mode).  With
    # ``forbidden_ops`` None (built-in kinds): allow-list mode — only allocation, views,
    # metadata and copies are allowed, plus ``allowed_ops``.  With a set (KernelBench
    # problems, whose ModelNew may keep some PyTorch ops): block-list mode — only those
    # ops are rejected.  Names are overload packets like "aten.mm".
    allowed_ops: frozenset[str] = frozenset()
    forbidden_ops: frozenset[str] | None = None
    # Path of the starter kernel file, when autokernel ships one.
    starter: Path | None = None
    # Where the problem came from: "builtin", a problem file, or a KernelBench file.
    source: str = "builtin"
    heldout: Callable[[Shape, random.Random], Shape] | None = None
    # The op a PyTorch user would call in eager mode, timed as the "eager" and torch.compile
    # baselines.  None: the reference itself.  It differs where the reference is written for
    # accuracy rather than speed (attention: fp32 math vs scaled_dot_product_attention).
    eager: Callable[..., Any] | None = None
    # A non-contiguous layout of the first input that the harness judges kernels on too (one of
    # ``adversarial_inputs`` has it), so the model integration may pass such an input as it is
    # and give the output its layout.  None: inputs are made contiguous.
    passthrough_layout: Callable[[torch.Tensor], bool] | None = None
    # Dimensions that are settings with values 0/1, not sizes.
    flag_dims: frozenset[str] = FLAG_DIMS
    # Dimensions that are settings which may be 0 (shifted_windows' ``shift``), not sizes.
    zero_dims: frozenset[str] = frozenset()
    # What contradicts itself in a shape given as text (``--shape``): K experts a token out of
    # fewer than K, query heads Hkv does not divide; None when nothing does.
    check_shape: Callable[[Shape], str | None] | None = None
    # The judge's large shapes (harness/large_shapes.py) for a problem whose rows are not the
    # ``M`` of an ``M`` x row-width problem: which dimension counts rows, and how many elements a
    # row adds to the widest buffer a kernel indexes.  None: ``M`` rows when the only other free
    # dimension is the row's width, else no large shapes.
    rows: "Rows | None" = None
    # What a kernel file must define: a callable ``kernel_fn``, or (``"ModelNew"``, KernelBench
    # problems) a class ``ModelNew``.  Checked when the file is loaded (``missing_entry_point``).
    entry_point: str = "kernel_fn"

    # ----------------------------------------------------------------- helpers
    def shapes_for(self, device: str) -> tuple[Shape, ...]:
        return self.gpu_shapes if device.startswith("cuda") else self.cpu_shapes

    def edge_shapes_for(self, device: str, targets: Sequence[Shape] = ()) -> tuple[Shape, ...]:
        gpu = device.startswith("cuda")
        edges = self.gpu_edge_shapes if gpu else self.cpu_edge_shapes
        if self.target_edges is not None and targets:
            edges = edges + self.target_edges(targets, "cuda" if gpu else "cpu")
        return edges

    def shape_of(self, given: dict[str, Any]) -> Shape:
        """A shape given as a mapping, in this problem's order: its ``dims``, then the optional
        ones it has."""
        return {d: int(given[d]) for d in self.dims + tuple(d for d in self.optional_dims if d in given)}

    def heldout_shape(self, shape: Shape, rng: random.Random) -> Shape:
        if self.heldout is not None:
            return self.heldout(shape, rng)
        return default_heldout(shape, rng, self.fixed_dims)

    def smallest_shape(self, device: str) -> Shape:
        return min(self.shapes_for(device), key=lambda s: math.prod(max(v, 1) for v in s.values()))

    def tolerance(self, dtype: torch.dtype) -> Tolerance:
        return self.tolerances.get(dtype, DEFAULT_TOLERANCES.get(dtype, DEFAULT_TOLERANCES[torch.float32]))

    def missing_entry_point(self, module: Any) -> str | None:
        """Why an imported kernel file cannot be judged for this problem (no ``kernel_fn``, or
        no class ``ModelNew`` for a KernelBench problem); None when its entry point is there."""
        value = getattr(module, self.entry_point, None)
        if self.entry_point == "ModelNew":
            return None if isinstance(value, type) else \
                "kernel file defines no class ModelNew (KernelBench problems need ModelNew)"
        return None if callable(value) else f"kernel file defines no callable {self.entry_point}"

    def kernel_callable(self, module: Any, shape: Shape, dtype: torch.dtype, device: str) -> Callable[..., Any]:
        missing = self.missing_entry_point(module)
        if missing:
            raise AttributeError(missing)
        if self.make_kernel is not None:
            return self.make_kernel(module, shape, dtype, device)
        return getattr(module, self.entry_point)

    def parse_shape(self, text: str) -> Shape:
        shape = parse_shape(text, self.dims, self.flag_dims, self.zero_dims, self.optional_dims)
        wrong = self.check_shape(shape) if self.check_shape is not None else None
        if wrong:
            raise ValueError(f"shape {text!r} does not fit {self.kind} ({'x'.join(self.dims)}): {wrong}")
        return shape

    def summary(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "description": self.description,
            "signature": self.signature,
            "dims": list(self.dims),
            "dtypes": [dtype_name(d) for d in self.dtypes],
            "gpu_shapes": [format_shape(s) for s in self.gpu_shapes],
            "cpu_shapes": [format_shape(s) for s in self.cpu_shapes],
            "source": self.source,
        }


def rowwise_shapes(col: str = "N") -> dict[str, tuple[Shape, ...]]:
    """CPU and edge shapes shared by the row-wise kinds (rows of ``col`` elements): tiny CPU
    shapes with a non-power-of-two row, and edges with size-1 rows and columns, odd counts, a
    row wider than any block and a ragged GPU grid.  The CPU's 1x16407 is 16384 + 23 elements:
    whole blocks of every power-of-two size up to 16384 and then a ragged end of 23 (a kernel
    over the flat tensor that left a short ragged end after whole blocks unwritten passed every
    CPU stage; the GPU's 1001x1023 ends the same way), in a row wider than the row-wise
    starters' single-pass tile (their looped path)."""
    def s(m: int, n: int) -> Shape:
        return {"M": m, col: n}

    return {"cpu_shapes": (s(16, 256), s(9, 300)),
            "gpu_edge_shapes": (s(1, 1), s(7, 1), s(3, 37), s(1, 70001), s(1001, 1023)),
            "cpu_edge_shapes": (s(1, 1), s(7, 1), s(3, 37), s(1, 1100), s(1, 16407))}


# ------------------------------------------------------------- input helpers
def generator(device: str, seed: int) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(int(seed))
    return g


def randn(shape: Sequence[int], dtype: torch.dtype, device: str, gen: torch.Generator,
          scale: float = 1.0, offset: float = 0.0) -> torch.Tensor:
    """Normal random values, drawn in fp32 then cast (so every dtype sees the same values)."""
    x = torch.randn(tuple(shape), generator=gen, device=device, dtype=torch.float32)
    if scale != 1.0:
        x.mul_(scale)
    if offset:
        x.add_(offset)
    return x.to(dtype)


def choose(choices: Sequence[Any], seed: int) -> Any:
    """A non-tensor argument (eps, scale...) for the input draw ``seed``: consecutive seeds walk
    through every choice, so any few cases of one evaluation see them all and a kernel that
    fixes the value fails, while the same seed always gives the same inputs."""
    return choices[int(seed) % len(choices)]


def choose_or_draw(choices: Sequence[float], low: float, high: float, seed: int) -> float:
    """A positive scalar for the input draw ``seed``: even seeds walk through ``choices`` (the
    values models use), odd seeds draw log-uniformly from [low, high], so a kernel cannot read
    the argument as a flag of a small set (an rmsnorm that snapped eps to 1e-5 or 1e-6 passed)."""
    if int(seed) % 2 == 0:
        return choose(choices, int(seed) // 2)
    return log_uniform(random.Random(int(seed) * 7919 + 31), low, high)


def log_uniform(rng: random.Random, low: float, high: float) -> float:
    """One draw of ``rng``, log-uniform in [low, high] (positive bounds)."""
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def small_rows(x: torch.Tensor, scale: float, every: int = 4) -> torch.Tensor:
    """``x`` with rows 1, 1 + every, ... scaled by ``scale``: rows whose mean square is near a
    model's eps, so that the eps a kernel uses shows in its output."""
    rows = x.reshape(-1, x.shape[-1]).float().clone()
    rows[1::every] *= scale
    return rows.to(x.dtype).reshape(x.shape)


def with_nonfinite(x: torch.Tensor, gen: torch.Generator, values: tuple[float, ...] = (float("nan"),),
                   rows: torch.Tensor | None = None) -> torch.Tensor:
    """``x`` (last dim = row) with one non-finite value at a random column of every third row
    (or of ``rows``), cycling through ``values``; the other rows stay finite.  For problems
    whose reference carries a NaN or inf of a row into that row's result (sums, norms,
    softmax denominators): a kernel that drops NaNs from its sums, or that poisons every row,
    shows.  Elementwise activations are left out: clamping with min/max legitimately maps
    NaN to a bound on some hardware."""
    flat = x.reshape(-1, x.shape[-1]).clone()
    m, n = flat.shape
    if rows is None:
        rows = torch.arange(0, m, 3, device=x.device)
    if rows.numel() and n:
        cols = torch.randint(0, n, (rows.numel(),), generator=gen, device=x.device)
        fill = torch.tensor([values[i % len(values)] for i in range(rows.numel())], dtype=flat.dtype, device=x.device)
        flat[rows, cols] = fill
    return flat.reshape(x.shape)


# The one case of a problem's numerics list a draw will use (``only_variant``): [index, taken].
# A timed call's numerics draw (harness/problem_spec.draw_set) uses one case of the list; building
# the other variants of a 4096x50257 input took most of its 9.4 ms on the H200 (seventh session).
_ONLY_VARIANT: contextvars.ContextVar[list | None] = contextvars.ContextVar("autokernel_only_variant", default=None)
STANDARD_VARIANTS = 4  # what ``standard_adversarial`` returns: the first cases of every list that calls it


@contextlib.contextmanager
def only_variant(index: int):
    """While it is open, the first ``standard_adversarial`` call computes only its variant
    ``index`` (< ``STANDARD_VARIANTS``: its variants are the first cases of every problem's list)
    and stands ``x`` in for the others; later calls compute everything (swiglu pairs its second
    call's variants with the first's).  Every random number is still drawn, so the variant, and
    every case after the first call's, is the very tensor the whole list holds
    (tests/test_harness_draws.py checks it for every problem)."""
    token = _ONLY_VARIANT.set([int(index), False])
    try:
        yield
    finally:
        _ONLY_VARIANT.reset(token)


def standard_adversarial(x: torch.Tensor, gen: torch.Generator, large: float, tiny: float = 1e-3) -> list[tuple[str, torch.Tensor]]:
    """Adversarial variants of a 2-D-like tensor ``x`` (last dim = row): large and tiny
    magnitudes, rows of mixed scales, and rows with one dominant value.  ``large`` is the
    biggest magnitude that is still valid for the problem and dtype."""
    state, only = _ONLY_VARIANT.get(), None
    if state is not None and not state[1]:
        only, state[1] = state[0], True

    def wanted(index: int) -> bool:
        return only is None or only == index

    rows = x.reshape(-1, x.shape[-1]).float()
    out = [("large", (rows * large).to(x.dtype).reshape(x.shape) if wanted(0) else x),
           ("tiny", (rows * tiny).to(x.dtype).reshape(x.shape) if wanted(1) else x)]
    exps = torch.randint(-3, 4, (rows.shape[0], 1), generator=gen, device=rows.device).float()
    out.append(("mixed-scales", (rows * torch.pow(10.0, exps).clamp(max=large)).to(x.dtype).reshape(x.shape)
                if wanted(2) else x))
    col = torch.randint(0, rows.shape[1], (rows.shape[0],), generator=gen, device=rows.device)
    if wanted(3):
        dom = rows.clone()
        dom[torch.arange(rows.shape[0], device=rows.device), col] = large
        out.append(("dominant", dom.to(x.dtype).reshape(x.shape)))
    else:
        out.append(("dominant", x))
    return out
