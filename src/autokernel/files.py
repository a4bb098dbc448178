"""Writing files so that a crash or a ``kill -9`` never leaves half of one behind."""
from __future__ import annotations

import os
import shutil
from pathlib import Path


def _tmp_for(path: Path) -> Path:
    # one temporary name per process: two processes writing the same file never share one
    return path.with_name(f"{path.name}.{os.getpid()}.tmp")


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, flush it to disk, then rename it over
    ``path``: readers see the old file or the new one, never a part."""
    path = Path(path)
    tmp = _tmp_for(path)
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def replace_file_atomic(src: Path, dst: Path) -> None:
    """Copy ``src`` over ``dst`` with the same guarantee."""
    dst = Path(dst)
    tmp = _tmp_for(dst)
    shutil.copyfile(src, tmp)
    with open(tmp, "rb+") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, dst)
