"""html_to_text's quick scanner against the html.parser-only implementation it replaced.

``_reference_html_to_text`` below is the previous implementation, copied verbatim (renamed):
html_to_text must give the same text for every input, whether its scanner reads the markup or
hands it to html.parser.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from templates.html_to_text import html_to_text, scanner_reads
from templates.render import StepTemplate
from tests.support.examples import examples
from tests.support.paths import EXAMPLES

# --- the previous implementation -----------------------------------------------------------

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


def _reference_html_to_text(html: str) -> str:
    """Return the text a reader would see in ``html``, with link targets spelled out."""
    parser = _ReferenceExtractor()
    parser.feed(html)
    parser.close()
    return _tidy("".join(parser.pieces))


class _ReferenceExtractor(HTMLParser):
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


# --- generated markup ----------------------------------------------------------------------

TAGS = [
    "p", "div", "br", "a", "li", "ul", "ol", "td", "th", "tr", "table", "pre", "span", "b",
    "h1", "head", "title", "script", "style", "template", "noscript", "textarea", "img", "hr",
    "o:p", "body", "html", "center", "iframe", "xmp", "P", "DIV", "A", "Br", "SCRIPT", "Title",
]  # fmt: skip
ATTRIBUTE_VALUES = [
    "https://x.example/p", "#top", "javascript:void(0)", "mailto:hi@x.example", "", " ",
    "display:none", "DISPLAY : NONE", "visibility: hidden", "&#100;isplay:none",
    "color:red", "a&amp;b", "x>y", "diſplay:none", "it's", 'say "hi"', "Grüße",
]  # fmt: skip
TEXT = [
    "Hello", " ", "  ", "\n", "\t", "word", "Fish &amp; chips", "&lt;3", "&eacute;", "&#233;",
    "&nbsp;", "\xa0", "\u3000", "a & b", "&amp", "&copy2", "&#x41;", "Grüße", "你好", "x > y",
    "-", "--", "=", "/", "'", '"', "&", ";", "a\r\nb", "\f", "\x0b",
]  # fmt: skip
MARKUP = [
    "<!DOCTYPE html>", "<!doctype html PUBLIC \"x\">", "<!-- note -->", "<!---->",
    "<!-- a -- b -->", "<!--[if mso]><p>mso</p><![endif]-->", "<!--[if !mso]><!-->",
    "<!--<![endif]-->", "<!-->", "<!--->", "<!-- x --!>", "<!-- x --->", "<?xml x?>",
    "<![CDATA[x]]>", "<!x>", "</>", "</ p>", "< p>", "<", ">", "<1>", "<p", "<a href=x/>",
    "<br/>", "<br />", "<hr>", "<p/>", "<script/>", "<a b = >", "<a b=c d>", "<p\nclass=x>",
    '<div hidden>', '<span HIDDEN="">', "</P >", "</script>", "</style>", "</title>",
    "<script>var a = 1 < 2;</script>", "<style>p > b {}</style>", "<title>T &amp; U</title>",
    "<script><!-- x --></script>", "</SCRIPT>", "<textarea>t</textarea>",
]  # fmt: skip


@st.composite
def start_tags(draw: st.DrawFn) -> str:
    tag = draw(st.sampled_from(TAGS))
    attributes = []
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from(["href", "style", "hidden", "class", "HREF", "Style", "x"]))
        value = draw(st.sampled_from(ATTRIBUTE_VALUES))
        space = draw(st.sampled_from([" ", "\n", "  ", "\t"]))
        quoted = draw(
            st.sampled_from(
                [f'"{value}"', f"'{value}'", value, None]
                if value and not re.search(r"[\s\"'=<>`]", value)
                else [f'"{value}"', None]
            )
        )
        around = draw(st.sampled_from(["=", " = ", "=\n"]))
        attributes.append(f"{space}{name}" if quoted is None else f"{space}{name}{around}{quoted}")
    end = draw(st.sampled_from([">", ">", " >", "/>", " />"]))
    return f"<{tag}{''.join(attributes)}{end}"


end_tags = st.builds(
    lambda tag, space: f"</{tag}{space}>", st.sampled_from(TAGS), st.sampled_from(["", " "])
)
fragments = st.one_of(
    start_tags(),
    end_tags,
    st.sampled_from(TEXT),
    st.sampled_from(MARKUP),
    st.text(max_size=8),
    st.text(alphabet="<>/=\"'&!-?ab \n#;", max_size=8),
)
documents = st.lists(fragments, max_size=40).map("".join)


def layout_html() -> str:
    step = StepTemplate.compile(base_dir=EXAMPLES, subject="s", template="welcome.html")
    content = step.render({"name": "Ada & <Bob>", "plan": "pro"})
    assert content.html is not None
    return content.html


@settings(max_examples=examples(1500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
@example("<p>one</p><p>two</p>")
@example('<a href="https://x.example"><img src="logo.png"></a>')
@example("<pre>  keep\n    indent</pre>")
def test_same_text_as_the_html_parser_implementation(html: str) -> None:
    assert html_to_text(html) == _reference_html_to_text(html)


@settings(max_examples=examples(300), deadline=None)
@given(st.text())
def test_same_text_for_any_string(html: str) -> None:
    assert html_to_text(html) == _reference_html_to_text(html)


def test_the_layout_is_read_by_the_scanner_and_reads_the_same() -> None:
    html = layout_html()

    # The quick path must cover Herald's own layout, or the speed-up is silently lost.
    assert scanner_reads(html)
    assert html_to_text(html) == _reference_html_to_text(html)
    assert html_to_text(html) == (
        "Welcome, Ada & <Bob>!\n\nYour pro plan is ready. Get started (https://herald.example/start)."
    )


@pytest.mark.parametrize(
    "html",
    [
        "<p>a < b</p>",
        "<?xml version='1.0'?><p>x</p>",
        "<![CDATA[x]]>",
        "<script>if (a < b) {}</script><p>x</p>",
        "<script>x",
        "<textarea>t</textarea>",
        "<!-- a -- b -->",
        "<a/href=x>",
    ],
)
def test_markup_the_scanner_leaves_to_html_parser(html: str) -> None:
    assert not scanner_reads(html)
    assert html_to_text(html) == _reference_html_to_text(html)
