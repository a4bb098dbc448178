"""Eleventh red-team pass on the judge (CPU, Triton interpreter): attacks that passed ``autokernel
bench`` with the static checks on, kept against the starter with no Triton compute, and the
static rules that catch them now (each test here failed before its fix).  tests/attacks_open/README.md
has the pass's notes."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from autokernel.harness import Evaluator, integrity
from autokernel.problems.registry import KERNELS_DIR

sys.path.insert(0, str(Path(__file__).parent))
from test_harness_attacks import ATTACKS, rules  # noqa: E402
from test_harness_integrity import rules as static_rules  # noqa: E402

SOFTMAX_STARTER = KERNELS_DIR / "softmax.py"
PASS11 = ["softmax_pass11_ao_getattr_from_fqn.py", "softmax_pass11_fx_reentered.py",
          "softmax_pass11_builtins_reentered.py", "softmax_pass11_triton_tools_binding.py"]


@pytest.mark.parametrize("name", PASS11)
def test_the_pass11_attacks_are_static_findings(name):
    assert "introspection" in static_rules((ATTACKS / name).read_text())


def test_getattr_by_string_helpers_are_findings_by_the_shape_of_their_name():
    """``torch.ao.quantization.utils.getattr_from_fqn`` is ``reduce(getattr, fqn.split("."), obj)``;
    other packages spell the same helper ``get_attr``, ``fetch_attr``, ``resolve_name``..."""
    assert "introspection" in static_rules("from torch.ao.quantization.utils import getattr_from_fqn\n")
    assert "introspection" in static_rules("import torch\nf = torch.ao.quantization.utils.getattr_from_fqn\n")
    assert "introspection" in static_rules("from some_package.helpers import get_attr as g\n")
    assert "introspection" in static_rules("import some_package\nx = some_package.tools.fetch_attr\n")
    assert "introspection" in static_rules("import torch.export\n")
    # honest spellings stay clean: getattr with a constant name, hasattr, a Triton kernel's names
    assert static_rules("import torch\nok = hasattr(torch, 'cuda')\nf = getattr(torch, 'float32')\n") == set()


def test_modules_reentered_through_another_modules_globals_are_findings():
    """``torch.nn.functional.torch`` is torch, ``tl.core.builtins`` is builtins: a rule keyed on the
    root of a chain (``torch.fx``, ``getattr`` by name) never saw them."""
    assert "introspection" in static_rules("import torch\nfx = torch.nn.functional.torch.fx\n")
    assert "introspection" in static_rules("import triton.language as tl\ng = tl.core.builtins.getattr\n")
    assert "introspection" in static_rules("import torch\nb = torch.builtins\n")
    assert "introspection" in static_rules("from triton.language.core import builtins\n")
    assert "introspection" in static_rules("import torch\nv = torch.nn.functional.torch.jit\n")
    # inspect.getmembers walks every attribute with no name in the file at all
    assert "introspection" in static_rules("import triton\nf = triton.runtime.jit.inspect.getmembers\n")
    # the honest dotted names of a kernel file stay clean
    assert static_rules("import torch\nimport triton.language as tl\nf = torch.nn.functional.softmax\n"
                        "e = tl.math.exp\ny = torch.cuda.is_available\n") == set()
    assert static_rules("import triton\nj = triton.runtime.jit.JITFunction\n") == set()  # Triton's jit module


def test_triton_tooling_and_syntax_trees_are_findings_and_the_kernel_helpers_are_not():
    """``triton.tools.triton_to_gluon_translator.slice_kernel.get_import_from_binding(obj, alias)`` is
    ``getattr(obj, alias.name)`` under a name that says nothing, the name handed over in an
    ``ast.alias`` the file built.  The kernel helpers under ``triton.tools`` (the starters'
    ``TensorDescriptor``) stay allowed."""
    assert "introspection" in static_rules("import triton\nf = triton.tools.triton_to_gluon_translator\n")
    assert "introspection" in static_rules("import triton.tools as tt\nf = tt.compile\n")
    assert "introspection" in static_rules("from triton.tools.disasm import get_sass\n")
    assert "introspection" in static_rules("import ast\n")
    assert static_rules("from triton.tools.tensor_descriptor import TensorDescriptor\n") == set()
    assert static_rules("import triton\nd = triton.tools.tensor_descriptor.TensorDescriptor\n") == set()


@pytest.mark.parametrize("name,reached", [("reduce_gc_reenabled_undone.py", "triton.testing.gc"),
                                          ("reduce_grad_mode_global.py", "_grad_mode.torch"),
                                          ("softmax_shared_tells_checked.py", "torch.multiprocessing")])
def test_earlier_attacks_that_reentered_a_module_are_static_findings_now(name, reached):
    """Three earlier passes' files met only the run-time rules (their tests now run them with the
    static checks off): each reached a guarded module as another module's global."""
    findings = integrity.static_findings((ATTACKS / name).read_text())
    assert any(reached in f.message and "another module's globals" in f.message for f in findings), findings


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")
@pytest.mark.parametrize("name", PASS11)
def test_the_loop_does_not_keep_a_pass11_attack(name):
    """Before: pass, all six stages, 4.6-22x 'faster beyond the noise' than the starter with no
    Triton compute (the loop's Evaluator, stop_at_loss, the starter as the incumbent)."""
    with Evaluator("softmax", device="cpu", dtypes=["fp32"], timeout_s=120, baselines=False,
                   stop_at_loss=True) as ev:
        result = ev.evaluate(ATTACKS / name, incumbent_file=SOFTMAX_STARTER)
    assert result.verdict == "rejected" and result.failed_stage == "static", (result.verdict, result.message)
    assert "introspection" in rules(result)
