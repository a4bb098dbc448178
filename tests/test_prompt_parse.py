"""The prompt builder, the playbook and the reply parser (no model, no network)."""
from __future__ import annotations

import pytest

from agent_stubs import KERNEL, SIGNATURE, evaluation, make_context, row
from autokernel.agents import parse, prompt


# ------------------------------------------------------------------ parse: whole files
def test_whole_file_takes_largest_block_that_defines_kernel_fn():
    new = KERNEL.replace('"BLOCK_N": 256', '"BLOCK_N": 512')
    reply = ("DESCRIPTION: bigger blocks\nSome thoughts first:\n```python\nx = tl.arange(0, 16)\n```\n"
             f"Here is the file:\n```python\n{new}```\nand a usage note:\n```python\nkernel_fn(x)\n```\n")
    parsed = parse.parse_reply(reply, KERNEL)
    assert parsed.error is None and parsed.mode == "file"
    assert parsed.source == new
    assert parsed.description == "bigger blocks"


def test_description_falls_back_to_first_prose_line():
    new = KERNEL.replace("num_warps\": 4", "num_warps\": 8")
    parsed = parse.parse_reply(f"**Use eight warps** for more bandwidth.\n\n```py\n{new}```", KERNEL)
    assert parsed.source == new
    assert parsed.description == "Use eight warps for more bandwidth."
    assert parse.parse_reply(f"```python\n{new}```", KERNEL).description == "llm edit"


@pytest.mark.parametrize("reply, fragment", [
    ("I think the kernel is already optimal.", "no ```python block"),
    ("```python\nprint('hello')\n```", "defines kernel_fn"),
    ("```python\n" + KERNEL[:300] + "\ndef kernel_fn(x):\n    return x", "cut off"),
    ("```python\ndef kernel_fn(x):\n    return (x\n```", "does not parse: line 2"),
    ("```python\n" + KERNEL + "```", "identical"),
])
def test_replies_without_a_valid_file_say_why(reply, fragment):
    parsed = parse.parse_reply(reply, KERNEL)
    assert parsed.source is None
    assert fragment in parsed.error


def test_entry_point_must_survive():
    broken = "def kernel_fn_renamed(x):\n    return x\n\ndef kernel_fn_helper():\n    pass\n"
    assert "defines kernel_fn" in parse.parse_reply(f"```python\n{broken}```", KERNEL).error
    # A KernelBench-style file must keep ModelNew, not kernel_fn.
    current = "import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n"
    parsed = parse.parse_reply("```python\nimport torch\n\ndef kernel_fn(x):\n    return x\n```", current)
    assert "does not define ModelNew" in parsed.error


# ------------------------------------------------------------------ parse: edits
def _edit(search: str, replace: str) -> str:
    return f"{parse.SEARCH_MARK}\n{search}\n{parse.DIVIDER_MARK}\n{replace}\n{parse.REPLACE_MARK}\n"


def test_edits_are_applied_in_order():
    reply = ("DESCRIPTION: retune\n```\n"
             + _edit('KNOBS = {"BLOCK_N": 256, "num_warps": 4}', 'KNOBS = {"BLOCK_N": 512, "num_warps": 8}')
             + "```\n"
             + _edit("    x = x.contiguous()", "    x = x.contiguous()  # rows must be dense"))
    parsed = parse.parse_reply(reply, KERNEL)
    assert parsed.error is None and parsed.mode == "edits"
    expected = (KERNEL.replace('KNOBS = {"BLOCK_N": 256, "num_warps": 4}', 'KNOBS = {"BLOCK_N": 512, "num_warps": 8}')
                .replace("    x = x.contiguous()", "    x = x.contiguous()  # rows must be dense"))
    assert parsed.source == expected
    assert parsed.description == "retune"


def test_edit_that_does_not_match_names_its_block():
    reply = _edit("    x = x.contiguous()", "    x = x.contiguous()\n") + _edit("    y = 1", "    y = 2")
    parsed = parse.parse_reply(reply, KERNEL)
    assert parsed.source is None
    assert parsed.error.startswith("edit block 2") and "does not match" in parsed.error


def test_ambiguous_and_malformed_edits_are_rejected():
    assert "occurs 2 times" in parse.parse_reply(_edit("BLOCK_N", "BLOCK"), 'a = "BLOCK_N"\nb = "BLOCK_N"\n').error
    unclosed = f"{parse.SEARCH_MARK}\nKNOBS\n{parse.DIVIDER_MARK}\nKNOBS2\n"
    assert "not closed" in parse.parse_reply(unclosed, KERNEL).error
    assert "empty SEARCH" in parse.parse_reply(_edit("", "x = 1"), KERNEL).error


def test_edit_tolerates_trailing_whitespace_only():
    reply = _edit("    x = x.contiguous()   \n    out = torch.empty((M,), dtype=x.dtype, device=x.device)",
                  "    out = torch.empty((M,), dtype=x.dtype, device=x.device)")
    parsed = parse.parse_reply(reply, KERNEL)
    assert parsed.error is None
    assert "x.contiguous()" not in parsed.source
    # different indentation is not tolerated
    assert parse.parse_reply(_edit("x = x.contiguous()\n  out = 1", "pass"), KERNEL).source is None


def test_edit_that_breaks_syntax_is_rejected():
    parsed = parse.parse_reply(_edit("    return out", "    return out)"), KERNEL)
    assert parsed.source is None and "does not parse" in parsed.error


# ------------------------------------------------------------------ playbook
def test_playbook_has_six_tiers_and_the_fixed_sections():
    book = prompt.load_playbook()
    for tag in ("choose", "rules", "tier1", "tier2", "tier3", "tier4", "tier5", "tier6", "correctness", "by-hand"):
        assert tag in book, tag
        assert book[tag].startswith("## [")
    for kind in ("softmax", "layernorm", "rmsnorm", "cross_entropy", "attention", "matmul", "reduce"):
        assert book[kind].startswith(f"### [{kind}]")
    assert "Welford" in book["layernorm"] and "exp2" in book["tier3"] and "wgmma" in book["tier5"]
    # a ## section stops at the next tagged heading
    assert "### [softmax]" not in book["tier6"]


def _chosen(tmp_path, **kw):
    ctx = make_context(tmp_path / "p", **kw)
    return prompt.select_sections(ctx, prompt.load_playbook())[0]


def test_sections_follow_the_roofline_position(tmp_path):
    far = _chosen(tmp_path, kind="softmax", best=evaluation(30.0))
    assert "tier2" in far and "tier4" in far and "tier5" not in far and "softmax" in far
    assert "matmul" not in far and "correctness" not in far
    near = _chosen(tmp_path, kind="softmax", best=evaluation(90.0))
    assert "tier5" in near and "tier2" not in near
    compute = _chosen(tmp_path, kind="matmul", best=evaluation(30.0))
    assert "tier3" in compute and "tier5" in compute and "tier2" not in compute
    unknown = _chosen(tmp_path, kind="softmax", best=evaluation(None))
    assert "tier1" in unknown and "tier2" in unknown


def test_sections_follow_the_history(tmp_path):
    failing = [row(1, "keep"), row(2, "incorrect", stage="edges"), row(3, "crash")]
    assert "correctness" in _chosen(tmp_path, kind="softmax", best=evaluation(60.0), history=failing)
    stuck = [row(1, "keep")] + [row(i, "revert") for i in range(2, 8)]
    chosen = _chosen(tmp_path, kind="softmax", best=evaluation(60.0), history=stuck)
    assert "tier4" in chosen and "tier5" in chosen and "correctness" not in chosen


# ------------------------------------------------------------------ whole prompts
def test_prompt_carries_what_an_expert_looks_at(tmp_path):
    failure = {"status": "incorrect", "stage": "edges", "message": "max error 7.5x the tolerance at shape 1x17",
               "description": "drop the row mask"}
    history = [row(0, "baseline"), row(1, "keep", "BLOCK_N 512"), row(2, "incorrect", "drop the row mask", "edges")]
    ctx = make_context(tmp_path / "p", best=evaluation(42.0, latency_us=250.0), history=history,
                       last_failure=failure, experiment=3)
    system, user = prompt.build_messages(ctx)
    assert SIGNATURE in user
    assert KERNEL.strip() in user
    assert "max error 7.5x the tolerance at shape 1x17" in user and "failed stage: edges" in user
    assert "| 2 | incorrect | edges |" in user and "BLOCK_N 512" in user
    assert "8192x8192" in user and "42.0% of roofline" in user and "2.00x vs eager" in user
    assert parse.SEARCH_MARK in user and "DESCRIPTION:" in user
    assert "fp32" in system and "KNOB_SPACE" in system  # the kernel-file rules
    assert "[tier" not in user  # machine tags are not shown to the model


def test_interpreter_timings_are_labelled(tmp_path):
    ctx = make_context(tmp_path / "p", best=evaluation(None, interpreter=True), device="cpu")
    _, user = prompt.build_messages(ctx)
    assert "interpreter" in user and "say nothing about GPU speed" in user


def test_command_prompt_explains_working_by_hand(tmp_path):
    ctx = make_context(tmp_path / "p", best=evaluation(55.0))
    text = prompt.build_command_prompt(ctx, "rowsum")
    assert "autokernel bench kernel.py --problem rowsum" in text
    assert "Do not commit" in text and KERNEL.strip() in text
    assert parse.SEARCH_MARK not in text  # no reply format: it edits the file itself
