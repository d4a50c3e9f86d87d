"""The only way the CLI prints: consoles on which no string is ever interpreted.

Much of what Herald shows comes from data or from servers: addresses and names from an
audience, SMTP replies, webhook answers, file names. Rich would read ``[/]`` in such text as
markup (a MarkupError traceback) and ``[conceal]`` as an instruction (text hidden from the
operator), ``:smile:`` as an emoji code, and would pass an ESC sequence straight to the
terminal. So, at the root:

- ``out``/``err`` are LiteralConsoles: markup, emoji codes and highlighting are off, and every
  string they render (printed, or a table cell) first goes through ``visible``, which shows
  control characters (and the invisible ones that reorder or break lines) as escapes;
- colour is added only to text Herald itself wrote, as ``rich.text.Text`` built by ``styled``.

JSON output (``print_json``) is unaffected: ``json.dumps`` escapes what needs escaping, and the
values stay exact for scripts.
"""

from __future__ import annotations

import sys
from typing import Any, Final

from rich.console import Console
from rich.style import Style
from rich.text import Text

# C0, DEL and C1 controls; the Unicode line/paragraph separators; and the bidirectional
# controls, which can make a terminal show text in an order other than its own.
_INVISIBLE: Final = frozenset(
    [
        *range(0x00, 0x20),
        *range(0x7F, 0xA0),
        *(0x2028, 0x2029, 0x061C, 0x200E, 0x200F),
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
    ]
)
_ESCAPES: Final = {code: repr(chr(code))[1:-1] for code in _INVISIBLE}


def visible(text: str) -> str:
    """``text`` with every control or invisible-ordering character shown as its escape
    (``\\x1b``, ``\\n``, ``\\u202e``); everything else, brackets included, unchanged."""
    return text.translate(_ESCAPES)


def styled(text: str, style: str | Style) -> Text:
    """Herald's own words in a style; ``text`` is shown literally (and ``visible``)."""
    return Text(visible(text), style=style)


class LiteralConsole(Console):
    """A rich Console that never interprets a string: see the module docstring."""

    def __init__(self, **options: Any) -> None:
        super().__init__(markup=False, emoji=False, highlight=False, **options)

    def render_str(self, text: str, **options: Any) -> Text:
        # Whatever a caller passes (print(..., markup=True) included), a string is literal.
        options.update(markup=False, emoji=False, highlight=False)
        return super().render_str(visible(text), **options)


# Piped output is as wide as it needs to be: a table row (an address, a server's reply) is
# never wrapped or cut, so `grep` finds it whole; a terminal gets its own width.
PIPED_WIDTH: Final = 100_000
out = LiteralConsole(soft_wrap=True, width=None if sys.stdout.isatty() else PIPED_WIDTH)
err = LiteralConsole(stderr=True, soft_wrap=True)
