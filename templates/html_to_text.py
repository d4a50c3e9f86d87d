"""Derive a readable text/plain body from an HTML email body.

Every message carries a text part (some clients and spam filters insist on one), so when a step
gives only HTML the text is derived here. The aim is a faithful reading copy, not a layout
engine: paragraphs stay paragraphs, links keep their targets, hidden content stays hidden.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

# Content a reader never sees in a mail client, so the text copy must not show it either.
_DROPPED = frozenset({"head", "title", "script", "style", "template", "noscript"})
# Elements that separate paragraphs: a blank line around them.
_PARAGRAPHS = frozenset(
    {
        "p", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "dl", "table", "blockquote",
        "pre", "hr", "address", "figure", "form", "fieldset", "section", "article", "header",
        "footer", "nav", "aside", "main",
    }
)  # fmt: skip
# Elements that only start a new line.
_LINES = frozenset({"div", "li", "tr", "dt", "dd", "center", "caption", "figcaption"})
_CELLS = frozenset({"td", "th"})
# Elements without an end tag: they never open a nesting level to skip over.
_VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
     "track", "wbr"}
)  # fmt: skip
_WHITESPACE = re.compile(r"\s+")
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
# Links that lead nowhere a reader of plain text could follow.
_UNFOLLOWABLE_PREFIXES = ("#", "javascript:")


def html_to_text(html: str) -> str:
    """Return the text a reader would see in ``html``, with link targets spelled out."""
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    return _tidy("".join(parser.pieces))


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        # convert_charrefs unescapes entities before handle_data sees the text.
        super().__init__(convert_charrefs=True)
        self.pieces: list[str] = []
        self._skipping: list[str] = []  # open tags of a dropped or hidden subtree
        self._pre_depth = 0
        self._links: list[tuple[str, int]] = []  # (href, index of the label's first piece)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._skipping:
            if tag not in _VOID:
                self._skipping.append(tag)
            return
        if tag in _DROPPED or _is_hidden(attrs):
            if tag not in _VOID:
                self._skipping.append(tag)
            return
        if tag == "br":
            self.pieces.append("\n")
        elif tag in _PARAGRAPHS:
            self._break(2)
            if tag == "pre":
                self._pre_depth += 1
        elif tag in _LINES:
            self._break(1)
            if tag == "li":
                self.pieces.append("- ")
        elif tag in _CELLS:
            self._append_inline(" ")
        elif tag == "a":
            self._links.append((dict(attrs).get("href") or "", len(self.pieces)))

    def handle_endtag(self, tag: str) -> None:
        if self._skipping:
            # Tolerate unclosed inner tags: close back to the matching opener, if any.
            if tag in self._skipping:
                while self._skipping.pop() != tag:
                    pass
            return
        if tag in _PARAGRAPHS:
            self._break(2)
            if tag == "pre" and self._pre_depth:
                self._pre_depth -= 1
        elif tag in _LINES:
            self._break(1)
        elif tag == "a" and self._links:
            self._close_link(*self._links.pop())

    def handle_data(self, data: str) -> None:
        if self._skipping:
            return
        if self._pre_depth:
            self.pieces.append(data)
            return
        self._append_inline(_WHITESPACE.sub(" ", data))

    def _break(self, newlines: int) -> None:
        """End the current line, leaving ``newlines - 1`` blank lines (not more) after it."""
        missing = newlines - self._trailing_newlines()
        if missing > 0:
            self.pieces.append("\n" * missing)

    def _trailing_newlines(self) -> int:
        count = 0
        for piece in reversed(self.pieces):
            for char in reversed(piece):
                if char == "\n":
                    count += 1
                elif not char.isspace():
                    return count
        return count

    def _append_inline(self, text: str) -> None:
        # Whitespace already ends the output (or a line/list marker does): another space
        # would only double it or indent the line.
        if self._ends_in_whitespace():
            text = text.lstrip(" ")
        if text:
            self.pieces.append(text)

    def _ends_in_whitespace(self) -> bool:
        for piece in reversed(self.pieces):
            if piece:
                return piece[-1].isspace()
        return True

    def _close_link(self, href: str, start: int) -> None:
        href = href.strip()
        if not href or href.lower().startswith(_UNFOLLOWABLE_PREFIXES):
            return
        label = " ".join("".join(self.pieces[start:]).split())
        target = href[len("mailto:") :] if href.lower().startswith("mailto:") else href
        if not label:
            self._append_inline(href)
        elif label not in (href, target):
            self._append_inline(f" ({href})")


def _is_hidden(attrs: list[tuple[str, str | None]]) -> bool:
    for name, value in attrs:
        if name == "hidden":
            return True
        if name == "style" and value and _HIDDEN_STYLE.search(value):
            return True
    return False


def _tidy(text: str) -> str:
    """Trim line ends and allow at most one blank line in a row."""
    lines: list[str] = []
    for line in text.split("\n"):
        line = line.rstrip()
        if line or (lines and lines[-1]):
            lines.append(line)
    return "\n".join(lines).strip()
