"""Hostile spellings of one mailbox, and mailboxes that only look like it (hypothesis).

A mailbox is drawn as its local part's *content* (the characters it stands for, unquoted) and
its domain labels (lower case, Unicode where the label is an IDN). ``spellings`` writes it
every way RFC 5321/5322 and UTS #46 allow: letter case, quoted local parts with gratuitous
backslash escapes, U-labels or A-labels in any case, fullwidth letters and ideographic full
stops in the domain, surrounding spaces. ``lookalikes`` are *other* mailboxes a careless
canonicalisation would merge with it: a dot or a ``+tag`` added (Herald never folds them), a
character more, ``buecher`` for ``bücher``, a subdomain, another top-level domain.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import idna
from hypothesis import strategies as st

_ATEXT = "abcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+/=?^_`{|}~-"
_DOT_ATOM = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*")
# Characters that force a local part into quotes (all printable ASCII, as Herald requires).
_QUOTED_ONLY = ' ,:;<>()[]@"\\'
_IDN_LABELS = ["bücher", "münchen", "例え", "пример", "straße", "café", "ελληνικά"]
_ASCII_LABELS = ["example", "mail", "news", "b2b", "x-y"]
_TLDS = ["example", "test", "org", "invalid"]
_DOTS = [".", "\u3002", "\uff0e", "\uff61"]  # UTS #46 maps each to "."


@dataclass(frozen=True)
class Mailbox:
    content: str  # the local part's characters, unquoted
    labels: tuple[str, ...]  # domain labels, lower case, U-labels for IDNs

    def canonical(self) -> str:
        """The plainest correct spelling (quoted only if it must be)."""
        local = self.content if _DOT_ATOM.fullmatch(self.content) else quote(self.content)
        return f"{local}@{'.'.join(self.labels)}"


def quote(content: str, escape: frozenset[int] = frozenset()) -> str:
    """``content`` as a quoted string; '"' and '\\' always escaped, positions in ``escape``
    escaped gratuitously (a backslash may precede any printable character)."""
    out = []
    for index, char in enumerate(content):
        out.append("\\" + char if char in '"\\' or index in escape else char)
    return '"' + "".join(out) + '"'


_segment = st.text(alphabet=_ATEXT, min_size=1, max_size=6)
_dot_atom = st.lists(_segment, min_size=1, max_size=3).map(".".join)
_quoted_content = st.tuples(
    st.text(alphabet=_ATEXT + ".", min_size=0, max_size=5),
    st.sampled_from(list(_QUOTED_ONLY)),
    st.text(alphabet=_ATEXT, min_size=1, max_size=5),
).map("".join)

mailboxes = st.builds(
    Mailbox,
    st.one_of(_dot_atom, _quoted_content),
    st.tuples(
        st.sampled_from(_IDN_LABELS + _ASCII_LABELS),
        st.sampled_from(_TLDS),
    )
    | st.tuples(
        st.sampled_from(_ASCII_LABELS),
        st.sampled_from(_IDN_LABELS),
        st.sampled_from(_TLDS),
    ),
)


def _swap_case(draw: st.DrawFn, text: str) -> str:
    # Only characters whose other case maps straight back ('ß'.upper() is 'SS': another label).
    return "".join(
        char.swapcase() if draw(st.booleans()) and char.swapcase().swapcase() == char else char
        for char in text
    )


def _fullwidth(draw: st.DrawFn, label: str) -> str:
    return "".join(
        chr(ord(char) - 0x21 + 0xFF01) if "a" <= char <= "z" and draw(st.booleans()) else char
        for char in label
    )


@st.composite
def spellings(draw: st.DrawFn, mailbox: Mailbox) -> str:
    """One hostile spelling of ``mailbox``."""
    content = mailbox.content
    must_quote = not _DOT_ATOM.fullmatch(content)
    if must_quote or draw(st.booleans()):
        escape = draw(st.frozensets(st.integers(0, max(len(content) - 1, 0))))
        local = quote(content, escape)
    else:
        local = content
    local = _swap_case(draw, local)
    labels = list(mailbox.labels)
    if draw(st.booleans()):  # A-labels (xn--…) for the IDN labels
        labels = [idna.encode(label).decode() if not label.isascii() else label for label in labels]
    elif draw(st.booleans()):  # fullwidth letters: UTS #46 maps them to ASCII
        labels = [_fullwidth(draw, label) for label in labels]
    labels = [_swap_case(draw, label) for label in labels]
    domain = labels[0]
    for label in labels[1:]:
        domain += draw(st.sampled_from(_DOTS)) + label
    pad = draw(st.sampled_from(["", " ", "  "]))
    return f"{pad}{local}@{domain}{pad[::-1]}"


@st.composite
def lookalikes(draw: st.DrawFn, mailbox: Mailbox) -> Mailbox:
    """Another mailbox that resembles ``mailbox``."""
    content, labels = mailbox.content, mailbox.labels
    kind = draw(st.sampled_from(["char", "dot", "tag", "idn", "subdomain", "tld"]))
    if kind == "char":
        return Mailbox(content + draw(st.sampled_from("a1-_")), labels)
    if kind == "dot" and len(content) >= 2 and "." not in content[:2]:
        return Mailbox(content[0] + "." + content[1:], labels)
    if kind == "tag":
        return Mailbox(content + "+news", labels)
    if kind == "idn" and not labels[0].isascii():
        # What a transliteration would make of it (bücher → buecher): another domain.
        ascii_like = labels[0].replace("ü", "ue").replace("ß", "ss").replace("é", "e")
        if ascii_like == labels[0]:
            ascii_like += "x"
        return Mailbox(content, (ascii_like, *labels[1:]))
    if kind == "subdomain":
        return Mailbox(content, ("mail", *labels))
    tld = "example" if labels[-1] != "example" else "test"
    return Mailbox(content, (*labels[:-1], tld))
