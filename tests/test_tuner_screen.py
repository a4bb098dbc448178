"""The tuner's screen on the CPU interpreter: a real process per batch; wrong, raising,
crashing and hanging kernels are told apart, and the screen carries on after each."""
from __future__ import annotations

from autokernel.agents.screen import ScreenJob, run_screen
from autokernel.agents.tuner import apply_knobs, parse_knobs
from tuner_landscape import LANDSCAPES

LAUNCH = "    out = torch.empty_like(x)\n"


def test_screen_ranks_and_survives_wrong_raising_crashing_and_hanging_kernels(tmp_path):
    land = LANDSCAPES["tuned"]
    problem, kernel = land.write(tmp_path)
    start = kernel.read_text()
    decl = parse_knobs(start)

    def at(a, b, c, source=start):
        return apply_knobs(source, decl, {"A": a, "B": b, "C": c})

    candidates = [
        ("slower", at(3, 1, 0)),
        ("wrong", at(1, 2, 0).replace("* 2, mask=mask)", "* 3, mask=mask)")),
        ("raises", at(1, 2, 0).replace(LAUNCH, "    raise ValueError('no')\n" + LAUNCH)),
        ("crashes", at(1, 2, 0).replace(LAUNCH, "    import os\n    os._exit(3)\n" + LAUNCH)),
        ("hangs", at(1, 2, 0).replace(LAUNCH, "    time.sleep(600)\n" + LAUNCH)),
        ("local", at(*land.local)),
        ("best", at(*land.best)),
    ]
    report = run_screen(ScreenJob(problem_spec=str(problem), device="cpu", incumbent_source=start,
                                  candidates=candidates, time_limit_s=150, config_timeout_s=5))
    assert not report.error
    status = {k: r.status for k, r in report.results.items()}
    assert status == {"slower": "ok", "wrong": "incorrect", "raises": "error", "crashes": "crash",
                      "hangs": "timeout", "local": "ok", "best": "ok"}
    assert "ValueError" in report.results["raises"].message
    assert report.incumbent.status == "ok" and report.incumbent.ratio == 1.0
    # best first, only correct ones, timed relative to the incumbent
    assert report.finalists == ["best", "local", "slower"]
    ratio = {k: report.results[k].ratio for k in ("best", "local", "slower")}
    assert ratio["best"] < 0.75 and ratio["best"] < ratio["local"] < ratio["slower"]  # sleeps of 8, 40, 70 ms
    assert report.per_config_s and report.startup_s > 0


def test_a_problem_that_does_not_load_is_an_error_not_a_ranking(tmp_path):
    report = run_screen(ScreenJob(problem_spec=str(tmp_path / "missing.py"), device="cpu",
                                  incumbent_source="def kernel_fn(x):\n    return x\n",
                                  candidates=[("a", "def kernel_fn(x):\n    return x\n")], time_limit_s=60))
    assert report.error.startswith("screen setup failed") and not report.results and not report.finalists



def test_screen_loads_configurations_where_triton_compiles_for_real():
    """On a GPU, @triton.jit reads a kernel's source from its file: configurations compiled
    from a string under a made-up file name failed every screen there (all 375 rotary
    configurations on the H200).  Without TRITON_INTERPRET the decorator does the same on a
    CPU, so loading a configuration shows it."""
    import os
    import subprocess
    import sys

    program = (
        "from autokernel.agents.screen import _Bench, INCUMBENT\n"
        "from autokernel.problems import get_problem\n"
        "src = open(get_problem('rotary').starter).read()\n"
        "bench = _Bench({'device': 'cpu', 'spec': 'rotary', 'dtype': 'fp32', 'shapes': None, 'weights': None,\n"
        "                'todo': [], 'rep_ms': 1.0, 'incumbent': src, 'seed': 1})\n"
        "print(len(bench._callables(INCUMBENT)), 'callables')\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-800:]
    assert "callables" in out.stdout
