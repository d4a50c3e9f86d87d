"""Derive a readable text/plain body from an HTML email body.

Every message carries a text part (some clients and spam filters insist on one), so when a step
gives only HTML the text is derived here. The aim is a faithful reading copy, not a layout
engine: paragraphs stay paragraphs, links keep their targets, hidden content stays hidden.
"""

from __future__ import annotations

import re
from html import unescape
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
    builder = _TextBuilder()
    if not _scan(html, builder):
        # Markup the quick scanner does not take on: html.parser's own tolerant rules decide.
        builder = _TextExtractor()
        builder.feed(html)
        builder.close()
    return _tidy("".join(builder.pieces))


def scanner_reads(html: str) -> bool:
    """Whether the quick scanner below reads ``html`` itself, without html.parser. Herald's own
    layouts must stay on this path (a test checks it), or the speed-up is silently lost."""
    return _scan(html, _TextBuilder())


# --- tokenising ------------------------------------------------------------------------------
#
# html.parser is the reference, but walking a message's markup through it costs more than
# everything else Herald does to build that message. _scan reads the markup Herald's layouts and
# ordinary email HTML consist of -- tags with plain attributes, end tags, comments, a doctype,
# text -- with a few regular expressions and reports exactly the events html.parser would
# (tag and attribute names lowercased, attribute values and text unescaped, "<x/>" as start
# plus end tag, text split where markup splits it). It takes only markup whose reading every
# html.parser release agrees on, and gives up (returns False) on anything else: a stray "<",
# a processing instruction, an odd comment, elements whose content html.parser reads as raw
# text in some releases but not others.

_SPACE = "[ \t\n\r\f]"
# Printable ASCII except space and  " ' < = > `  : an unquoted attribute value.
_BARE_VALUE = "[!#-&(-;?-_a-~]+"
_ATTRIBUTE_SYNTAX = rf"""{_SPACE}+[a-zA-Z_:][-a-zA-Z0-9_:.]*
    (?:{_SPACE}*={_SPACE}*(?:"[^"]*"|'[^']*'|{_BARE_VALUE}))?"""
_ATTRIBUTE = re.compile(
    rf"""{_SPACE}+([a-zA-Z_:][-a-zA-Z0-9_:.]*)
    (?:{_SPACE}*={_SPACE}*(?:"([^"]*)"|'([^']*)'|({_BARE_VALUE})))?""",
    re.VERBOSE,
)
# Text, then the markup that ends it (or the end of the document).
_TOKEN = re.compile(
    rf"""([^<]*)                                   # 1: text
    (?:<(?:
        ([a-zA-Z][-a-zA-Z0-9:._]*)                 # 2: start tag name
        ((?:{_ATTRIBUTE_SYNTAX})*)                 # 3: its attributes
        {_SPACE}*(/?)>                             # 4: "/" of a self-closing tag
      | /([a-zA-Z][-a-zA-Z0-9:._]*){_SPACE}*>     # 5: end tag name
      | !--(?!-?>)(?:[^-]|-(?!-))*-->              # comment without "--" inside
      | ![dD][oO][cC][tT][yY][pP][eE][^<>]*>       # doctype
    ) | \Z)""",
    re.VERBOSE,
)
# Elements whose content html.parser passes on as it is (no unescaping), up to the end tag.
_RAW_TEXT = frozenset({"script", "style"})
# Elements taken on only when their content is text up to their own end tag: html.parser
# releases disagree on how markup inside them reads (newer ones treat title as escapable raw
# text).
_TEXT_ONLY = _RAW_TEXT | {"title"}
# Elements left to html.parser whatever they hold, for the same reason.
_UNSETTLED = frozenset(
    {"textarea", "xmp", "iframe", "noembed", "noframes", "noscript", "plaintext"}
)


def _scan(html: str, builder: _TextBuilder) -> bool:
    """Feed ``html``'s events to ``builder``; False (part fed) if the markup is not plain."""
    start_tag = builder.handle_starttag
    end_tag = builder.handle_endtag
    data = builder.handle_data
    next_token = _TOKEN.match
    position = 0
    text_only: str | None = None  # the open element that may hold nothing but text
    while position < len(html):
        token = next_token(html, position)
        if token is None:
            return False  # a "<" that starts none of the markup above
        position = token.end()
        text, name, attributes, self_closing, end_name = token.groups()
        if text:
            data(text if text_only in _RAW_TEXT else unescape(text))
        if end_name is not None:
            tag = end_name.lower()
            if text_only is not None and tag != text_only:
                return False
            text_only = None
            end_tag(tag)
        elif text_only is not None:
            return False  # other markup, or the end, inside script, style or title
        elif name is not None:
            tag = name.lower()
            if tag in _UNSETTLED or (self_closing and tag in _RAW_TEXT):
                return False
            # The builder reads a link's href and looks for hidden and a hiding style: other
            # tags' attributes, and all of them inside a skipped subtree, need not be parsed.
            if attributes and not builder.skipping and (tag == "a" or _may_hide(attributes)):
                start_tag(tag, _attributes(attributes))
            else:
                start_tag(tag, [])
            if self_closing:
                end_tag(tag)
            elif tag in _TEXT_ONLY:
                text_only = tag
    return text_only is None


def _may_hide(attributes: str) -> bool:
    """False when no attribute in ``attributes`` can make its element hidden (_is_hidden)."""
    if not attributes.isascii():
        return True  # leave case-insensitive matching of other scripts to _is_hidden
    lowered = attributes.lower()
    # A character reference could spell any of the words.
    return "&" in lowered or "hidden" in lowered or "display" in lowered or "visibility" in lowered


def _attributes(source: str) -> list[tuple[str, str | None]]:
    attributes: list[tuple[str, str | None]] = []
    for found in _ATTRIBUTE.finditer(source):
        name, double, single, bare = found.groups()
        value = double if double is not None else single if single is not None else bare
        attributes.append((name.lower(), unescape(value) if value else value))
    return attributes


# --- reading -------------------------------------------------------------------------------


class _TextBuilder:
    """Turns start tag, end tag and text events into the pieces of the text copy."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.skipping: list[str] = []  # open tags of a dropped or hidden subtree
        self._pre_depth = 0
        self._links: list[tuple[str, int]] = []  # (href, index of the label's first piece)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.skipping:
            if tag not in _VOID:
                self.skipping.append(tag)
            return
        if tag in _DROPPED or _is_hidden(attrs):
            if tag not in _VOID:
                self.skipping.append(tag)
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
        if self.skipping:
            # Tolerate unclosed inner tags: close back to the matching opener, if any.
            if tag in self.skipping:
                while self.skipping.pop() != tag:
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
        if self.skipping:
            return
        if self._pre_depth:
            self.pieces.append(data)
        elif data.isspace():  # most often the line break between two tags
            if not self._ends_in_whitespace():
                self.pieces.append(" ")
        else:
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


class _TextExtractor(_TextBuilder, HTMLParser):
    """The builder fed by html.parser, for markup _scan does not take on."""

    def __init__(self) -> None:
        _TextBuilder.__init__(self)
        # convert_charrefs unescapes entities before handle_data sees the text.
        HTMLParser.__init__(self, convert_charrefs=True)


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
