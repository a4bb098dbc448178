"""Problem kinds: see base.Problem for the contract and registry.get_problem to load one."""
from .base import Problem, Shape, Tolerance, format_shape, parse_dtype, parse_shape, dtype_name
from .registry import ProblemError, get_problem, list_kinds, starter_source

__all__ = ["Problem", "Shape", "Tolerance", "format_shape", "parse_dtype", "parse_shape", "dtype_name",
           "ProblemError", "get_problem", "list_kinds", "starter_source"]
