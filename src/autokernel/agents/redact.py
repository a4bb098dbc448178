"""Keep secrets out of everything the agents write: logs, prompts on disk, kernel files,
descriptions.  Any environment value that looks like a credential, and any key an agent was
given explicitly, is replaced by ``[redacted]``."""
from __future__ import annotations

import os
import re
from typing import Iterable

REDACTED = "[redacted]"
_SECRET_NAME = re.compile(r"(API_KEY|APIKEY|_TOKEN|SECRET|PASSWORD)", re.IGNORECASE)
_MIN_LEN = 8  # shorter values would garble ordinary text and are not real keys


def secret_values(extra: Iterable[str | None] = ()) -> list[str]:
    """Credential-like values from the environment plus ``extra``, longest first (so a key
    that contains another is replaced whole)."""
    found = {v for k, v in os.environ.items() if _SECRET_NAME.search(k) and v and len(v) >= _MIN_LEN}
    found.update(v for v in extra if v and len(v) >= _MIN_LEN)
    return sorted(found, key=len, reverse=True)


def scrub(text: str, secrets: Iterable[str]) -> str:
    for value in secrets:
        if value in text:
            text = text.replace(value, REDACTED)
    return text
