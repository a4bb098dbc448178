"""Checks of the loop's inputs that must refuse, before anything is written, what can never work:
a start kernel file without its entry point, a problem with no kernel to start from."""
from __future__ import annotations

import ast


def entry_point(problem) -> str:
    """What a kernel file of ``problem`` must define: ``ModelNew`` for KernelBench problems,
    ``kernel_fn`` for every other kind."""
    return "ModelNew" if str(getattr(problem, "kind", "")).startswith("kernelbench:") else "kernel_fn"


def start_kernel_problem(problem, source: str, path) -> str | None:
    """Why the start kernel file at ``path`` cannot be used for ``problem``; None when it can."""
    name = entry_point(problem)
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return f"kernel file {path} does not parse: line {exc.lineno}: {exc.msg}"
    defined = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
    if name not in defined:
        return f"kernel file {path} defines no {name} (a kernel file for {problem.kind} must define {name})"
    return None


def no_start_kernel(target_name: str, has_source: bool, already_set_up: bool, agent_name: str = "") -> str | None:
    """Why ``target_name`` has nothing to start from, or None.  A problem needs a start kernel
    (``--kernel``, or the kind's shipped starter) unless its workspace already holds one.
    ``agent_name`` is here so that agents able to write a first kernel themselves can be
    allowed in one place."""
    if has_source or already_set_up:
        return None
    return f"problem {target_name} has no starter kernel; pass a start kernel file (--kernel FILE)"
