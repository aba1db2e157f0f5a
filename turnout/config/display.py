"""User text inside one-line error messages: control characters escaped, length bounded.

Keys and messages can carry text from the experiment file (a YAML key with an escaped newline, a
10 MB ``--set`` key); shown raw, it would break the one-line contract or flood the terminal.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def one_line(text: object, limit: int = 200) -> str:
    """``text`` with control characters written as escapes, cut to ``limit`` characters."""
    s = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))
    return s if len(s) <= limit else s[:limit - 3] + "..."
