"""The header fields of a message: addresses, unstructured text, and ASCII written verbatim.

Each function returns one complete field, folded and ending in CRLF, or raises TemplateError.
Every value that can come from data is encoded here and never handed to the email package to
write (templates/mime.py says why).
"""

from __future__ import annotations

import re
from email.errors import MessageError
from email.headerregistry import Address
from functools import lru_cache

from templates.encoded_words import EW_MAX, EW_OVERHEAD, MAX_CHAR_COST, encoded_words
from templates.errors import TemplateError
from templates.wire_lines import CRLF, FOLD_AT, MAX_LINE

# An addr-spec that is a dot-atom on both sides: valid as given and already in canonical form.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
PLAIN_ADDR_SPEC = re.compile(rf"{_ATEXT}+(?:\.{_ATEXT}+)*@{_ATEXT}+(?:\.{_ATEXT}+)*")
# RFC 5322 msg-id: a dot-atom, "@", a dot-atom or a domain literal.
MESSAGE_ID = re.compile(rf"<{_ATEXT}+(?:\.{_ATEXT}+)*@(?:{_ATEXT}+(?:\.{_ATEXT}+)*|\[[!-Z^-~]*\])>")
# RFC 5322 specials (as email._header_value_parser.SPECIALS): a display name holding one is
# written as a quoted-string.
RFC5322_SPECIALS = frozenset('()<>@,:;."[]\\')
# Words of printable ASCII with single spaces between them.
_ATOMS = re.compile(r"[!-~]+(?: [!-~]+)*")
# Header text that can be written and folded as it is: printable ASCII, space and tab.
_PLAIN_TEXT = re.compile(r"[\t\x20-\x7e]*")
# Pieces a folded header may be broken before: a run of whitespace and the word after it.
_FOLD_PIECES = re.compile(r"[ \t]*[^ \t]+|[ \t]+")


def verbatim_field(name: str, value: str) -> str:
    """An ASCII header exactly as given, never folded or RFC 2047-encoded.

    Encoding a long word (as the email package does when it cannot fold) would turn a long
    List-Unsubscribe URL or the idempotency key into an encoded word that receivers and
    bounce processors do not decode.
    """
    if len(name) + len(": ") + len(value) > MAX_LINE:
        raise TemplateError(f"header {name} is longer than {MAX_LINE} characters")
    return f"{name}: {value}{CRLF}"


@lru_cache(maxsize=256)  # From and Reply-To are the same for every message of a campaign
def address_field(name: str, addr_spec: str, display_name: str | None) -> str:
    addr_spec = _canonical_addr_spec(addr_spec)
    if display_name is None:
        return _checked(f"{name}: {addr_spec}{CRLF}", name)
    lead = f"{name}: "
    phrase = _display_phrase(display_name, room=FOLD_AT - len(lead))
    folded, _ = _fold(lead, f"{phrase} <{addr_spec}>")
    return _checked(folded, name)


def _canonical_addr_spec(addr_spec: str) -> str:
    # Non-ASCII local parts need SMTPUTF8, which this message format does not use; domains
    # arrive IDNA-encoded, so any non-ASCII here is a caller's mistake worth stopping on.
    if not addr_spec.isascii():
        raise TemplateError(f"address must be ASCII (SMTPUTF8 is not supported): {addr_spec!r}")
    _refuse_encoded_word(addr_spec)
    if PLAIN_ADDR_SPEC.fullmatch(addr_spec):
        return addr_spec
    # Quoted local parts, domain literals, comments: let the email package parse and
    # normalise them.
    try:
        address = Address(addr_spec=addr_spec)
    except (ValueError, MessageError) as exc:
        raise TemplateError(f"invalid email address {addr_spec!r}: {exc}") from exc
    if not address.username or not address.domain:
        raise TemplateError(f"invalid email address {addr_spec!r}: needs local part and domain")
    return address.addr_spec


def _refuse_encoded_word(addr_spec: str) -> None:
    # Readers (the email package among them) decode an encoded word even inside an address
    # or a quoted local part, so such an address would read as another one, or as text with
    # line breaks. No real mailbox is spelled like this.
    if "=?" in addr_spec:
        raise TemplateError(
            f"invalid email address {addr_spec!r}: it reads as an RFC 2047 encoded word"
        )


def _display_phrase(display_name: str, *, room: int) -> str:
    """The display name as an RFC 5322 phrase; the first word at most ``room`` characters.

    ASCII names are written as they are when they are words with single spaces between them,
    else as a quoted-string, which keeps every character (a phrase would lose the extra
    whitespace). Other names, and any name that reads as an encoded word, become encoded words
    of all their characters, spaces included: RFC 2047 readers ignore the whitespace between
    adjacent encoded words, so the name reads back exactly and can never be decoded into
    something else. The caller has refused control characters.
    """
    # A word longer than a line's room could not be folded, and the header would pass 998
    # octets: such a name is encoded too, since encoded words can be split anywhere.
    foldable = max((len(word) for word in display_name.split()), default=0) <= room
    if display_name.isascii() and "=?" not in display_name and foldable:
        if RFC5322_SPECIALS.isdisjoint(display_name) and _ATOMS.fullmatch(display_name):
            return display_name
        return '"' + display_name.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return " ".join(encoded_words(display_name, first=min(room, EW_MAX)))


def text_field(name: str, value: str) -> str:
    """An unstructured header: folded at whitespace when plain ASCII, else RFC 2047-encoded.

    Text holding "=?" is encoded even when ASCII: written as it is, a reader would decode
    whatever in it reads as an encoded word.
    """
    lead = f"{name}: "
    if "=?" not in value and _PLAIN_TEXT.fullmatch(value):
        folded, fits = _fold(lead, value)
        if fits:
            return folded
    # Readers drop the whitespace that starts a header value, so it is not encoded. The first
    # word stays on the name's line (readers would keep the space of a continuation line),
    # even past 78 characters after a very long name: it has room for one character at least.
    text = value.lstrip(" \t")
    first = min(max(FOLD_AT - len(lead), EW_OVERHEAD + MAX_CHAR_COST), EW_MAX)
    words = encoded_words(text, first=first)
    return _checked(lead + f"{CRLF} ".join(words) + CRLF, name)


def _fold(lead: str, value: str) -> tuple[str, bool]:
    """``lead + value`` broken before whitespace into lines of at most 78 characters, and
    whether that worked: a word too long for a line of its own is left on a longer line.

    Whitespace is kept as it is (inside a quoted-string too, where folding is allowed); a line
    is never only whitespace.
    """
    if len(lead) + len(value) <= FOLD_AT:
        return lead + value + CRLF, True
    lines: list[str] = []
    line = lead
    for piece in _FOLD_PIECES.findall(value):
        if len(line) + len(piece) <= FOLD_AT or line == lead or piece.isspace():
            line += piece
        else:
            lines.append(line)
            line = piece
    lines.append(line)
    return CRLF.join(lines) + CRLF, all(len(line) <= FOLD_AT for line in lines)


def _checked(field: str, name: str) -> str:
    """``field`` if every line fits in 998 characters and every line after the first is a
    continuation (starts with whitespace), which would otherwise end the header early."""
    lines = field.removesuffix(CRLF).split(CRLF)
    if any(len(line) > MAX_LINE for line in lines):
        raise TemplateError(f"header {name} is longer than {MAX_LINE} characters")
    if not all(line[:1] in (" ", "\t") for line in lines[1:]):
        raise TemplateError(f"header {name} cannot be encoded: folding would break the message")
    return field
