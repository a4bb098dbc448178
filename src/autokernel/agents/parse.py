"""Turn a model's reply into a whole kernel file.

A reply carries either one whole file in a fenced ```python block, or SEARCH/REPLACE edit
blocks applied to the current kernel (format in ``EDIT_FORMAT``).  Either way the result must
parse and define the same entry points as the current file (``kernel_fn``, or ``ModelNew``
for KernelBench problems).  A reply that yields no valid file gives an error message that the
loop records (status ``rejected``) and shows to the agent next time.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

SEARCH_MARK = "<<<<<<< SEARCH"
DIVIDER_MARK = "======="
REPLACE_MARK = ">>>>>>> REPLACE"

EDIT_FORMAT = f"""{SEARCH_MARK}
exact lines copied from the current kernel file
{DIVIDER_MARK}
the lines that replace them
{REPLACE_MARK}"""

ENTRY_POINTS = ("kernel_fn", "ModelNew")
MAX_DESCRIPTION = 160

_SEARCH_RE = re.compile(r"^\s*<{5,9}\s*SEARCH\s*$")
_DIVIDER_RE = re.compile(r"^\s*={5,9}\s*$")
_REPLACE_RE = re.compile(r"^\s*>{5,9}\s*REPLACE\s*$")
_FENCE_RE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)\s*$")
_DESCRIPTION_RE = re.compile(r"^\W*description\W*:\s*(.+)$", re.IGNORECASE)


@dataclass
class ParsedReply:
    source: str | None  # the whole new file, or None
    description: str
    error: str | None = None  # why no file came out (None when source is set)
    mode: str = ""  # "file" | "edits" | ""


@dataclass
class EditBlock:
    search: str
    replace: str


# ------------------------------------------------------------------ public
def parse_reply(reply: str, current_source: str) -> ParsedReply:
    description = extract_description(reply)
    if _has_edit_markers(reply):
        blocks, error = parse_edit_blocks(reply)
        if error:
            return ParsedReply(None, description, error, "edits")
        source, error = apply_edits(current_source, blocks)
        mode = "edits"
    else:
        source, error = extract_file(reply)
        mode = "file"
    if error is None:
        error = validate_source(source, current_source)
    if error is not None:
        return ParsedReply(None, description, error, mode)
    if not source.endswith("\n"):
        source += "\n"
    return ParsedReply(source, description, None, mode)


def extract_description(reply: str) -> str:
    """The ``DESCRIPTION: ...`` line, else the first line of prose outside code blocks."""
    prose: list[str] = []
    in_fence = False
    for line in reply.splitlines():
        if _FENCE_RE.match(line):
            in_fence = not in_fence
            continue
        if in_fence or _SEARCH_RE.match(line):
            continue
        m = _DESCRIPTION_RE.match(line.strip())
        if m:
            return _clip(m.group(1).replace("**", "").replace("`", ""))
        text = line.replace("**", "").replace("`", "").strip().strip("#*_>- ").strip()
        if text:
            prose.append(text)
    return _clip(prose[0]) if prose else "llm edit"


def extract_file(reply: str) -> tuple[str | None, str | None]:
    """The largest fenced block that defines an entry point."""
    blocks, unclosed = _fenced_blocks(reply)
    defining = [b for b in blocks if _defines_entry_point_text(b)]
    if defining:
        return max(defining, key=len), None
    if unclosed is not None and _defines_entry_point_text(unclosed):
        return None, "the reply was cut off inside the code block (the closing ``` is missing); send a shorter complete file or SEARCH/REPLACE edits"
    if blocks:
        return None, "no code block in the reply defines kernel_fn; send the whole file in one ```python block or SEARCH/REPLACE edits"
    return None, "the reply contained no ```python block and no SEARCH/REPLACE edits"


def parse_edit_blocks(reply: str) -> tuple[list[EditBlock], str | None]:
    blocks: list[EditBlock] = []
    state = "out"
    search: list[str] = []
    replace: list[str] = []
    for line in reply.splitlines():
        if state == "out":
            if _SEARCH_RE.match(line):
                state, search, replace = "search", [], []
        elif state == "search":
            if _DIVIDER_RE.match(line):
                state = "replace"
            elif _SEARCH_RE.match(line) or _REPLACE_RE.match(line):
                return blocks, f"edit block {len(blocks) + 1} is malformed: expected {DIVIDER_MARK!r} after the SEARCH lines"
            else:
                search.append(line)
        else:  # replace
            if _REPLACE_RE.match(line):
                blocks.append(EditBlock("\n".join(search), "\n".join(replace)))
                state = "out"
            elif _SEARCH_RE.match(line):
                return blocks, f"edit block {len(blocks) + 1} is malformed: expected {REPLACE_MARK!r} before the next SEARCH"
            else:
                replace.append(line)
    if state != "out":
        return blocks, f"edit block {len(blocks) + 1} is not closed with {REPLACE_MARK!r} (was the reply cut off?)"
    if not blocks:
        return blocks, "the reply has SEARCH/REPLACE markers but no complete edit block"
    return blocks, None


def apply_edits(source: str, blocks: list[EditBlock]) -> tuple[str | None, str | None]:
    """Apply the blocks in order.  Each SEARCH text must occur exactly once in the file as it
    is at that point (exactly, or else ignoring trailing whitespace on each line)."""
    for i, block in enumerate(blocks, 1):
        if not block.search.strip():
            return None, f"edit block {i} has an empty SEARCH part; copy the lines to replace from the current file"
        count = source.count(block.search)
        if count == 1:
            source = source.replace(block.search, block.replace, 1)
            continue
        if count > 1:
            return None, f"edit block {i}: the SEARCH text occurs {count} times in the file; include more lines so it is unique"
        relaxed = _replace_ignoring_trailing_space(source, block)
        if relaxed is None:
            first = next((ln for ln in block.search.splitlines() if ln.strip()), "")
            return None, f"edit block {i}: the SEARCH text does not match the current file (first line: {first.strip()[:80]!r}); copy the lines exactly"
        source = relaxed
    return source, None


def validate_source(source: str | None, current_source: str) -> str | None:
    """None when ``source`` is a plausible kernel file, else the reason it is not."""
    if source is None or not source.strip():
        return "the proposed file is empty"
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return f"the proposed file does not parse: line {exc.lineno}: {exc.msg}"
    required = [n for n in ENTRY_POINTS if n in _top_level_names_safe(current_source)] or ["kernel_fn"]
    defined = _top_level_names(tree)
    missing = [n for n in required if n not in defined]
    if missing:
        return f"the proposed file does not define {', '.join(missing)} at top level"
    if source.strip() == current_source.strip():
        return "the proposed file is identical to the current kernel"
    return None


# ------------------------------------------------------------------ helpers
def _has_edit_markers(reply: str) -> bool:
    return any(_SEARCH_RE.match(line) for line in reply.splitlines())


def _fenced_blocks(reply: str) -> tuple[list[str], str | None]:
    """Closed fenced blocks (any language tag except clearly non-Python ones), and the
    contents of a final block left unclosed, if any."""
    blocks: list[str] = []
    lines: list[str] | None = None
    fence = ""
    lang = ""
    for line in reply.splitlines():
        m = _FENCE_RE.match(line)
        if lines is None:
            if m and m.group(2).lower() in ("", "python", "py", "python3"):
                lines, fence, lang = [], m.group(1), m.group(2)
            elif m:  # another language: skip it as a block of its own
                lines, fence, lang = [], m.group(1), "other:" + m.group(2)
        elif m and not m.group(2) and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
            if not lang.startswith("other:"):
                blocks.append("\n".join(lines) + "\n")
            lines = None
        else:
            lines.append(line)
    unclosed = "\n".join(lines) + "\n" if lines is not None and not lang.startswith("other:") else None
    return blocks, unclosed


def _defines_entry_point_text(text: str) -> bool:
    return any(re.search(rf"^(def|class)\s+{name}\b|^{name}\s*=", text, re.MULTILINE) for name in ENTRY_POINTS)


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.AnnAssign,)) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _top_level_names_safe(source: str) -> set[str]:
    try:
        return _top_level_names(ast.parse(source))
    except SyntaxError:
        return set()


def _replace_ignoring_trailing_space(source: str, block: EditBlock) -> str | None:
    src_lines = source.splitlines(keepends=True)
    want = [ln.rstrip() for ln in block.search.splitlines()]
    n = len(want)
    hits = [i for i in range(len(src_lines) - n + 1)
            if [ln.rstrip() for ln in src_lines[i:i + n]] == want]
    if len(hits) != 1:
        return None
    i = hits[0]
    tail = "\n" if src_lines[i + n - 1].endswith("\n") else ""
    return "".join(src_lines[:i]) + block.replace + tail + "".join(src_lines[i + n:])


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_DESCRIPTION else text[: MAX_DESCRIPTION - 1] + "…"
