"""Which text may be a header value at all: no line breaks, no control characters.

Checked on the rendered subject (templates/render.py) and on every header value a message is
built from (templates/mime.py), before any encoding.
"""

from __future__ import annotations

import re

# Everything str.splitlines() breaks on: the email package treats each as a line end, so any of
# them in a header value would start a new header.
_LINE_BREAKS = frozenset("\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029")
# What no header value may hold: every control character but TAB (C0, DEL, C1) and the Unicode
# line and paragraph separators. Some readers and servers cut a header at a NUL or treat other
# controls as line ends; a recipient's name or subject never needs one.
_FORBIDDEN_IN_HEADER = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")


def contains_line_break(value: str) -> bool:
    """True when ``value`` would span more than one line in a message header."""
    return not _LINE_BREAKS.isdisjoint(value)


def header_value_problem(value: str) -> str | None:
    """Why ``value`` cannot be a header value ("a line break", "control character U+0000"),
    or None when it can."""
    found = _FORBIDDEN_IN_HEADER.search(value)
    if found is None:
        return None
    if found.group() in _LINE_BREAKS:
        return "a line break"
    return f"control character U+{ord(found.group()):04X}"
