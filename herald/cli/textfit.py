"""Fitting text into terminal cells: what ``herald status`` lays out with, measured the way rich
measures (``rich.cells.cell_len``: a CJK character or an emoji takes two cells, a combining mark
none).

Nothing here ever drops text without a mark: ``middle`` shows ``…`` where it took characters
out, ``pack`` and ``fold`` move what does not fit to the next line. ``width`` None means
unbounded (piped output): everything stays on its line, whole.

Every function takes text that is already ``visible`` (control characters shown as escapes):
an escape sequence measured as zero cells would let a line overflow.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from rich.cells import cell_len, chop_cells
from rich.text import Text

ELLIPSIS: Final = "…"
#: Below this, a line is not worth laying out: callers' widths are raised to it.
NARROWEST: Final = 20


def middle(text: str, width: int) -> str:
    """``text`` if it fits in ``width`` cells, else its start and end around ``…``: two names
    that differ only at the end (``spring-sale-eu``, ``spring-sale-us``) stay told apart."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    keep = width - 1
    tail_cells = keep // 2
    head = chop_cells(text, keep - tail_cells)[0]
    tail = ""
    for start in range(len(text) - 1, len(head) - 1, -1):
        candidate = text[start:]
        if cell_len(candidate) > tail_cells:
            break
        tail = candidate
    return f"{head}{ELLIPSIS}{tail}"


def pad(text: Text, width: int, *, right: bool = False) -> Text:
    """``text`` (already no wider than ``width``) padded with spaces to exactly ``width``."""
    gap = max(width - text.cell_len, 0)
    return Text.assemble(" " * gap, text) if right else Text.assemble(text, " " * gap)


def fold(text: Text, width: int | None) -> list[Text]:
    """``text`` as lines of at most ``width`` cells: broken at spaces, a word longer than a
    line broken inside; nothing lost."""
    if width is None or text.cell_len <= width:
        return [text]
    lines: list[Text] = []
    for word_line in _word_lines(text, width):
        lines.extend(_chopped(word_line, width))
    return lines


def pack(
    items: Sequence[Text], width: int | None, *, indent: int = 0, hang: int = 2, sep: str = " · "
) -> list[Text]:
    """``items`` joined by ``sep`` into lines of at most ``width`` cells, starting with
    ``indent`` spaces, continuation lines ``hang`` more; a line breaks between items, and only
    an item wider than a whole line is broken inside."""
    first, rest = " " * indent, " " * (indent + hang)
    if width is None:
        return [Text.assemble(first, Text(sep).join(items))] if items else []
    width = max(width, NARROWEST)
    lines: list[Text] = []
    current: Text | None = None
    for item in items:
        prefix = first if not lines and current is None else rest
        if current is not None and current.cell_len + len(sep) + item.cell_len <= width:
            current = Text.assemble(current, sep, item)
            continue
        if current is not None:
            lines.append(current)
        # Folded to the continuation lines' width, so that every piece fits after either prefix.
        pieces = [Text.assemble(rest, piece) for piece in fold(item, width - len(rest))]
        pieces[0] = Text.assemble(prefix, pieces[0][len(rest) :])
        lines.extend(pieces[:-1])
        current = pieces[-1]
    if current is not None:
        lines.append(current)
    return lines


def _word_lines(text: Text, width: int) -> list[Text]:
    """Greedy word wrap at spaces; words stay whole (maybe wider than ``width``)."""
    plain = text.plain
    lines: list[Text] = []
    start = 0
    line_end = 0  # where the current line's last word ends
    position = 0
    while position < len(plain):
        space = plain.find(" ", position)
        word_end = len(plain) if space < 0 else space
        # A word wider than any line starts where it is and is broken inside (``_chopped``).
        fits_a_line = cell_len(plain[position:word_end]) <= width
        if line_end > start and fits_a_line and cell_len(plain[start:word_end]) > width:
            lines.append(text[start:line_end])
            start = position
        line_end = word_end
        position = word_end + 1
    lines.append(text[start:])
    return [_stripped(line) for line in lines]


def _stripped(line: Text) -> Text:
    copy = line.copy()
    copy.rstrip()
    return copy


def _chopped(line: Text, width: int) -> list[Text]:
    """``line`` cut into pieces of at most ``width`` cells, on character (grapheme) bounds."""
    if line.cell_len <= width:
        return [line]
    offsets: list[int] = []
    position = 0
    for piece in chop_cells(line.plain, width)[:-1]:
        position += len(piece)
        offsets.append(position)
    return list(line.divide(offsets))
