"""The entry point: ``apply(model, workdir)`` and what it did (``summary``)."""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.nn as nn

from .calls import CALL_KINDS, _apply_calls
from .compile_policy import UNDER_COMPILE, kernel_digests, leave_uncompiled, recorded_choice, set_policies
from .alignment import align_linears
from .cudagraphs import CudaGraphed, cuda_graphs_refusal
from .embeddings import _apply_embedding
from .epilogues import _apply_linear_epilogue
from .experts import _apply_experts
from .fused import _apply_add_norm, _apply_residual_outputs, _apply_geglu, _apply_gelu_modules, _apply_packed_glu
from .in_model import IN_MODEL, InModelChoice, recorded_in_model
from .module_paths import rebase, rebased_problem
from .linears import _apply_matmul, _apply_mlp
from .norms import _apply_cross_entropy, _apply_layernorm, _apply_rmsnorm, _apply_softmax
from .patching import _model_device
from .position_bias import _apply_relative_position_bias
from .residuals import _apply_residual_adds
from .scores_attention import _apply_scores_attention
from .runfiles import IntegrateError, load_workdir_plan
from .scans import _apply_mixer_function
from .selection import NO_PLACE, KernelOp, select_kernels
from .softcaps import _apply_softcap
from .tables import _apply_rotary_table
from .windows import _apply_shifted_windows, _apply_window_bias
from .xielus import _apply_xielu


# ------------------------------------------------------------------ entry point
_MODULE_APPLIERS = {
    "rmsnorm": _apply_rmsnorm,
    "layernorm": _apply_layernorm,
    "softmax": _apply_softmax,
    "cross_entropy": _apply_cross_entropy,
    "fused_mlp": _apply_mlp,
    "swiglu": _apply_mlp,
    "matmul": _apply_matmul,
    "add_rmsnorm": _apply_add_norm,
    "add_layernorm": _apply_add_norm,
    "add_layernorm:outputs": _apply_residual_outputs,
    "add_rmsnorm:outputs": _apply_residual_outputs,
    "gelu": _apply_gelu_modules,
    "geglu": _apply_geglu,
    "swiglu_packed": _apply_packed_glu,
    "geglu_packed": _apply_packed_glu,
    "embedding": _apply_embedding,
    "rotary_table": _apply_rotary_table,
    "add_rmsnorm:adds": _apply_residual_adds,
    "add_layernorm:adds": _apply_residual_adds,
    "linear_gelu": _apply_linear_epilogue,
    "linear_relu": _apply_linear_epilogue,
    "linear_relu2": _apply_linear_epilogue,
    "moe_experts": _apply_experts,
    "softcap": _apply_softcap,
    "xielu": _apply_xielu,
    "moe_experts_gptoss": _apply_experts,
    "attention_masked:scores": _apply_scores_attention,
    "relative_position_bias": _apply_relative_position_bias,
    "shifted_windows": _apply_shifted_windows,
    "window_bias": _apply_window_bias,
    "selective_scan": _apply_mixer_function,
    "causal_conv1d": _apply_mixer_function,
}
# Post-norm output blocks (``<kind>:outputs``) first: they take the add and their norm child.
# fused_mlp before swiglu (it covers more of the MLP); matmul last so that the linears of a
# fused MLP are left alone.  add_* after the plain norms: a norm module may take both (its
# calls without a residual go to the plain norm op), so they do not mark modules done; nor do
# ``<kind>:adds`` (a residual add written just before a plain norm, fused by rewriting the
# forward that holds both: ``residuals``).  linear_gelu and linear_relu first: their probes run
# the module's children as they were (no op of ours yet), and they take the activation module and
# the linear before the gelu and matmul appliers see them; linear_relu2 before linear_relu (in
# ``torch.square(torch.relu(self.key(x)))`` the inner call alone is linear_relu's pattern).
# shifted_windows after the residual adds: it rewrites the Swin layer's forward as they left it.
# relative_position_bias before embedding: it probes the attention module's compute_bias with its
# nn.Embedding table as it was.
_ORDER = ("linear_gelu", "linear_relu2", "linear_relu", "add_rmsnorm:outputs", "add_layernorm:outputs", "rmsnorm",
          "layernorm", "add_rmsnorm", "add_layernorm",
          "add_rmsnorm:adds", "add_layernorm:adds", "shifted_windows", "window_bias",
          "gelu", "xielu", "softmax", "cross_entropy", "fused_mlp", "swiglu", "geglu", "swiglu_packed", "geglu_packed",
          "relative_position_bias",
          "embedding", "rotary_table", "moe_experts", "moe_experts_gptoss", "softcap", "attention_masked:scores",
          "selective_scan", "causal_conv1d", "matmul")
_SHARES_MODULES = {"add_rmsnorm", "add_layernorm", "add_rmsnorm:adds", "add_layernorm:adds", "attention_masked:scores"}




@dataclass
class Placement:
    """What the appliers did with a list of ops: ``replaced`` (module, kind), ``skipped``
    (problem or module, why), the ops that took at least one place, and the modules done."""

    replaced: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    used_ops: set[str] = field(default_factory=set)
    done: set[int] = field(default_factory=set)


def place_ops(model: nn.Module, ops: list[KernelOp]) -> Placement:
    """Switch the places of ``model`` that each op's kind computes (in place), in ``_ORDER``."""
    placed = Placement()
    probed: dict = {}
    for kind in _ORDER:
        for k in [k for k in ops if k.kind == kind.partition(":")[0]]:
            before = len(placed.replaced)
            _MODULE_APPLIERS[kind](model, k, set() if kind in _SHARES_MODULES else placed.done, placed.replaced,
                                   placed.skipped, probed)
            if len(placed.replaced) > before:
                placed.used_ops.add(k.opname)
    calls_before = len(placed.replaced)
    _apply_calls(model, ops, set(), placed.replaced, placed.skipped)
    for k in ops:
        if k.kind in CALL_KINDS and any(kind == k.kind for _, kind in placed.replaced[calls_before:]):
            placed.used_ops.add(k.opname)
    return placed


def apply(model: nn.Module, workdir: str | Path, *, inplace: bool = False,
          allow_slower: bool = False, cuda_graphs: bool = False, under_compile: str = "auto",
          only: set[str] | None = None, in_model: str | InModelChoice = "auto",
          copy_graph_outputs: bool = False) -> nn.Module:
    """Return ``model`` (a deep copy unless ``inplace``) running the run's best kernels.

    ``allow_slower``: on GPU runs, kernels whose best measured time is slower than PyTorch
    eager are left out unless this is set.  ``cuda_graphs``: return the patched model wrapped
    in ``CudaGraphed`` (capture once per input signature, then replay; GPU only, inference
    only; see ``integrate.cudagraphs``: a call's outputs live until the next call with the same
    input shapes, as torch.compile's CUDA graphs' do, unless ``copy_graph_outputs``).  ``under_compile``: what each op runs while
    ``torch.compile`` traces the patched model, our kernel or the problem's eager op for inductor
    to compile, or the patched model left out of the compile (``auto``, ``ours``, ``eager``,
    ``uncompiled``; see ``integrate.compile_policy``).  ``only``: the kernels of these plan problems
    alone (``verify`` finds which kernel a failing model owes its error to).  ``in_model``: ``auto``
    leaves out the kernels the last ``verify`` on this kind of GPU timed the model faster without
    (``integrate.in_model``), ``all`` applies every selected kernel, an ``InModelChoice`` leaves out
    its ``left_out``.  See the module docstring."""
    if not isinstance(model, nn.Module):
        raise IntegrateError(f"apply() needs a torch.nn.Module, got {type(model).__name__}")
    if under_compile not in UNDER_COMPILE:
        raise IntegrateError(f"under_compile must be one of {', '.join(UNDER_COMPILE)}; got {under_compile!r}")
    if not isinstance(in_model, InModelChoice) and in_model not in IN_MODEL:
        raise IntegrateError(f"in_model must be one of {', '.join(IN_MODEL)} or an InModelChoice; got {in_model!r}")
    workdir = Path(workdir)
    plan = load_workdir_plan(workdir)
    if cuda_graphs:
        refusal = cuda_graphs_refusal(_model_device(model))
        if refusal:
            raise IntegrateError(refusal)
    patched = model if inplace else copy.deepcopy(model)
    device = _model_device(patched)
    sel = select_kernels(workdir, plan, device=device, allow_slower=allow_slower)
    if only is not None:
        sel.ops = [k for k in sel.ops if k.problem.name in only]
    missing_paths = _in_model_namespace(patched, sel.ops)
    digests = kernel_digests(sel.ops)
    choice = in_model if isinstance(in_model, InModelChoice) else (
        recorded_in_model(workdir, _device_name(device), digests, cuda_graphs) if in_model == "auto" else None)
    if choice is not None and choice.left_out:
        sel.skipped += [(k.problem.name, choice.why(k.problem.name)) for k in sel.ops
                        if k.problem.name in choice.left_out]
        sel.ops = [k for k in sel.ops if k.problem.name not in choice.left_out]
    placed = place_ops(patched, sel.ops)
    replaced, used_ops = placed.replaced, placed.used_ops
    skipped = list(sel.skipped) + placed.skipped
    align_linears(patched, placed.done, replaced, on_gpu=device is not None and device.type == "cuda")
    for k in sel.ops:
        if k.opname not in used_ops:
            skipped.append((k.problem.name, f"{k.kind}: {NO_PLACE}"))
    patched._autokernel_replaced = replaced
    patched._autokernel_skipped = skipped
    patched._autokernel_ops = {k.problem.name: k.opname for k in sel.ops if k.opname in used_ops}
    patched._autokernel_kernel_ops = [k for k in sel.ops if k.opname in used_ops]
    # what verify's in-model choice is made of: every kernel the selection gave apply, left out or not
    patched._autokernel_selected = digests
    patched._autokernel_in_model = choice  # the in-model choice followed (verify records it again)
    patched._autokernel_under_compile, uncompiled = _set_compile_policy(patched._autokernel_kernel_ops, under_compile,
                                                                        device, workdir, cuda_graphs)
    _warn_apply(workdir, patched, device)
    _warn_mismatch(plan, patched, missing_paths)
    result = patched
    if cuda_graphs:
        result = CudaGraphed(patched, static_outputs=not copy_graph_outputs)
        for attr in ("_autokernel_replaced", "_autokernel_skipped", "_autokernel_ops", "_autokernel_under_compile",
                     "_autokernel_kernel_ops", "_autokernel_selected", "_autokernel_in_model"):
            setattr(result, attr, getattr(patched, attr))
    if uncompiled:  # the wrapper where there is one: torch.compile of it then replays our graphs
        leave_uncompiled(result)
    return result


def _in_model_namespace(model: nn.Module, ops: list) -> tuple[list[str], int]:
    """The ops' plan paths as ``model`` names its modules (``module_paths``: a run profiled inside
    its loader's wrapper, applied to the bare model); the plan's paths ``model`` does not have
    (after the map), and how many paths there are."""
    paths = sorted({m for k in ops for m in (*k.problem.modules, *k.problem.add_from.values())})
    names = {name for name, _ in model.named_modules()}
    to_model = rebase(paths, names)
    for k in ops:
        k.problem = rebased_problem(k.problem, to_model)
    return [p for p in paths if to_model(p) not in names], len(paths)


def _warn_mismatch(plan, model: nn.Module, missing_paths: tuple[list[str], int]) -> None:
    """Say when the model does not look like the one the run was made for: most of the plan's
    module paths missing (another model's run), or parameters of another dtype than the run's
    (its kernels then take no call: PyTorch's ops run wherever the dtype differs)."""
    import warnings

    from ..problems.base import dtype_name

    missing, total = missing_paths
    if total and len(missing) * 2 > total:
        warnings.warn(f"{len(missing)} of the {total} modules the run's plan names are not in this model "
                      f"(e.g. {', '.join(missing[:2])}): the run was made for {plan.model}; was it made for another "
                      f"model? Kernels go only where a module of their form is found", stacklevel=3)
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    if len(dtypes) == 1:
        have = dtype_name(next(iter(dtypes)))
        if have != plan.dtype:
            warnings.warn(f"the run was made for {plan.dtype} and this model is {have}: its kernels take only "
                          f"{plan.dtype} calls, PyTorch's ops run the rest (convert the model, or make a run in "
                          f"{have})", stacklevel=3)


def _set_compile_policy(ops: list, mode: str, device, workdir: Path, cuda_graphs: bool) -> tuple[dict[str, str], bool]:
    """Decide, per applied op, what it runs under torch.compile (compile_policy.py): problem ->
    the decision and why; and whether torch.compile leaves the whole patched model out."""
    device_name = _device_name(device)
    measured = recorded_choice(workdir, device_name, ops, cuda_graphs) if mode == "auto" else None
    uncompiled = mode == "uncompiled" or (measured is not None and measured.policy == "uncompiled" and bool(ops))
    return set_policies(ops, mode, device_name, measured), uncompiled


def _device_name(device) -> str:
    from ..hardware import current_device_name

    return current_device_name(str(device)) if device is not None and device.type == "cuda" else "cpu"


def _warn_apply(workdir: Path, patched: nn.Module, device) -> None:
    """Say when nothing was replaced, and when interpreter-tuned kernels go onto a GPU."""
    import warnings

    from ..provenance import gpu_use_warning, nothing_replaced_warning

    if not patched._autokernel_replaced:
        warnings.warn(nothing_replaced_warning(patched._autokernel_skipped), stacklevel=3)
    elif device.type == "cuda":
        message = gpu_use_warning(workdir, sorted(patched._autokernel_ops))
        if message:
            warnings.warn(message, stacklevel=3)


def summary(model: nn.Module) -> dict[str, Any]:
    """What ``apply`` did, as plain data."""
    return {
        "replaced": [list(r) for r in getattr(model, "_autokernel_replaced", [])],
        "skipped": [list(s) for s in getattr(model, "_autokernel_skipped", [])],
        "ops": dict(getattr(model, "_autokernel_ops", {})),
    }


def dumps_summary(model: nn.Module) -> str:
    return json.dumps(summary(model), indent=2)
