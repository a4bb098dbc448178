"""transformers' xIELU notice kept off the terminal (hf:apertus runs printed it at every build)."""
from __future__ import annotations

import logging

from autokernel.quiet import silence_xielu_notice


def test_xielu_notice_is_dropped_and_other_messages_kept():
    logger = logging.getLogger("transformers.activations")
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logger.addHandler(handler)
    try:
        silence_xielu_notice()
        silence_xielu_notice()  # once is enough: no second filter
        logger.warning("CUDA-fused xIELU not available (No module named 'xielu') – falling back to a Python version.")
        logger.warning("something else")
    finally:
        logger.removeHandler(handler)
    assert seen == ["something else"]
    assert len(logger.filters) == 1
