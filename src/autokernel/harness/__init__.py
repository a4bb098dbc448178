"""The evaluation harness: the judge every experiment goes through (DESIGN §5).

Public API (used by the CLI and the loop):

    evaluate(problem_spec, kernel_file, *, device="auto", shapes=None, dtypes=None,
             timeout_s=60.0, timing=True, baselines=True, weights=None) -> Evaluation

    Evaluator(problem_spec, *, device, shapes=None, dtypes=None, timeout_s=60.0,
              timing=True, baselines=True, weights=None)
        .evaluate(kernel_file, incumbent_file=None) -> Evaluation
        .close()

``Evaluator`` keeps one worker process alive across evaluations and restarts it after a
crash or a timeout.  With ``incumbent_file`` the candidate and the incumbent are timed in
the same worker, interleaved, and ``Evaluation.vs_incumbent`` says whether the candidate is
faster by more than the measured noise.
"""
from .records import Comparison, Evaluation, Finding, ShapeTiming, StageResult

__all__ = ["Comparison", "Evaluation", "Finding", "ShapeTiming", "StageResult", "evaluate", "Evaluator"]


def __getattr__(name):  # lazy: importing records must not start torch workers
    if name in ("evaluate", "Evaluator"):
        from . import evaluate as _ev

        return getattr(_ev, name)
    raise AttributeError(name)
