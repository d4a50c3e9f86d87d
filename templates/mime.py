"""Build the exact bytes of one email, ready for SMTP DATA.

The bytes are stored in the outbox when a send job is materialised and sent unchanged on every
attempt, so identical inputs must give identical bytes: the MIME boundary is derived from the
Message-ID instead of being random. They carry no ``Date``: a message rendered today may go out
next week, so the worker adds ``Date`` when the message is sent (``dispatch.message_date``).

Bodies are kept 7-bit clean (quoted-printable when they are not plain short-lined ASCII) and
headers RFC 2047-encoded, so the message is valid whether or not the receiving server offers
8BITMIME or SMTPUTF8.

The message is assembled as text rather than through ``email.message.EmailMessage``, whose
header registry and folder cost milliseconds per message (Herald builds every message twice:
to validate, then to enqueue). The shapes written here are few and fixed.

Every header value that can come from data (subject, display names) is encoded here and never
handed to the email package: the package *parses* a string it is given, so text that reads as an
RFC 2047 encoded word was decoded, and a decoded LF became a header or body of the attacker's
choice (issue 7). Text that merely looks like an encoded word is itself encoded, so it arrives
literally. Control characters are refused outright, and the finished bytes are checked
(_check_wire) so that no bug in this module can ever put a line on the wire that is not a header,
a fold, or body. tests/unit/test_templates_mime.py checks the output against the EmailMessage-based
builder this replaced.
"""

from __future__ import annotations

import binascii
import hashlib
import re
from collections.abc import Mapping
from email.errors import MessageError
from email.headerregistry import Address, HeaderRegistry
from functools import lru_cache
from typing import Literal

from templates.errors import TemplateError
from templates.render import RenderedContent, header_value_problem

KEY_HEADER = "X-Herald-Key"

# The headers build_message writes itself, and Date, which the worker adds when it sends the
# message; an extra header may not duplicate or override them.
_OWN_HEADERS = frozenset(
    name.lower()
    for name in (
        "From", "To", "Reply-To", "Subject", "Date", "Message-ID", "MIME-Version", KEY_HEADER,
        "Content-Type", "Content-Transfer-Encoding", "Content-Disposition",
    )
)  # fmt: skip
# RFC 5322 field name: printable ASCII except colon.
_FIELD_NAME = re.compile(r"[!-9;-~]+")
# RFC 5322 caps a line at 998 characters; SMTP servers may reject longer ones.
_MAX_LINE = 998
# ... and asks for at most 78 where the text allows folding.
_FOLD_AT = 78

TransferEncoding = Literal["7bit", "quoted-printable"]

# Extra header names the email package parses as structured fields (addresses, dates, MIME
# parameters): their text must follow that field's grammar, which only ASCII written as given
# does here (Herald sets no such header from data).
_STRUCTURED = frozenset(HeaderRegistry().registry) - {"subject"}

_CRLF = "\r\n"

# An addr-spec that is a dot-atom on both sides: valid as given and already in canonical form.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
PLAIN_ADDR_SPEC = re.compile(rf"{_ATEXT}+(?:\.{_ATEXT}+)*@{_ATEXT}+(?:\.{_ATEXT}+)*")
# RFC 5322 msg-id: a dot-atom, "@", a dot-atom or a domain literal.
_MESSAGE_ID = re.compile(
    rf"<{_ATEXT}+(?:\.{_ATEXT}+)*@(?:{_ATEXT}+(?:\.{_ATEXT}+)*|\[[!-Z^-~]*\])>"
)
# RFC 5322 specials (as email._header_value_parser.SPECIALS): a display name holding one is
# written as a quoted-string.
RFC5322_SPECIALS = frozenset('()<>@,:;."[]\\')
# Words of printable ASCII with single spaces between them.
_ATOMS = re.compile(r"[!-~]+(?: [!-~]+)*")
# Header text that can be written and folded as it is: printable ASCII, space and tab.
_PLAIN_TEXT = re.compile(r"[\t\x20-\x7e]*")
# Pieces a folded header may be broken before: a run of whitespace and the word after it.
_FOLD_PIECES = re.compile(r"[ \t]*[^ \t]+|[ \t]+")

# RFC 2047 encoded words, always in UTF-8. Q-encoding keeps only the characters allowed in every
# context (RFC 2047 section 5 (3), the strictest: a display name), so one encoder serves all.
_EW_PREFIX = {"q": "=?utf-8?q?", "b": "=?utf-8?b?"}
_EW_OVERHEAD = len("=?utf-8?q?") + len("?=")
_EW_MAX = 75  # RFC 2047: an encoded word is at most 75 characters
_Q_LITERAL = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!*+-/"
_Q_BYTE = [chr(byte) if byte in _Q_LITERAL else f"={byte:02X}" for byte in range(256)]
_Q_BYTE[ord(" ")] = "_"
_Q_ONE_CHAR = _Q_LITERAL + b" "  # bytes that stay one character in Q-encoding
_Q_ONE_CHAR_TEXT = frozenset(_Q_ONE_CHAR.decode())
_MAX_CHAR_COST = 12  # the longest encoding of one character: four bytes in Q, "=F0=9F=98=80"

_CHARSET_PARAM = 'charset="utf-8"'


def build_message(
    *,
    sender: str,
    sender_name: str | None,
    recipient: str,
    recipient_name: str | None,
    reply_to: str | None,
    content: RenderedContent,
    message_id: str,
    key: str,
    extra_headers: Mapping[str, str] | None = None,
) -> bytes:
    """Return the complete RFC 5322 message but its ``Date``, _CRLF line endings, for one
    recipient. The worker adds ``Date`` when it sends it (``dispatch.message_date``)."""
    extra = dict(extra_headers or {})
    _check_header_values(
        {
            "sender": sender,
            "sender name": sender_name,
            "recipient": recipient,
            "recipient name": recipient_name,
            "reply-to": reply_to,
            "subject": content.subject,
            "message-id": message_id,
            "key": key,
            **{f"header {name}": value for name, value in extra.items()},
        }
    )
    _check_extra_header_names(extra)
    if not _MESSAGE_ID.fullmatch(message_id):
        raise TemplateError(f"message-id must look like <id@domain>: {message_id!r}")
    if not key.isascii():
        raise TemplateError(f"{KEY_HEADER} must be ASCII: {key!r}")

    lines = [
        _address_field("From", sender, sender_name or None),
        _address_field("To", recipient, recipient_name or None),
    ]
    if reply_to is not None:
        lines.append(_address_field("Reply-To", reply_to, None))
    lines.append(_text_field("Subject", content.subject))
    lines.append(_verbatim_field("Message-ID", message_id))
    lines.append(f"MIME-Version: 1.0{_CRLF}")
    lines.append(_verbatim_field(KEY_HEADER, key))
    for name, value in extra.items():
        if value.isascii():
            lines.append(_verbatim_field(name, value))
        elif name.lower() in _STRUCTURED:
            raise TemplateError(f"header {name} cannot be encoded: a structured header is ASCII")
        else:
            lines.append(_text_field(name, value))
    head = "".join(lines).encode("ascii")
    message = head + _body(content, boundary=_boundary(message_id))
    _check_wire(message)
    return message


def _check_header_values(values: Mapping[str, str | None]) -> None:
    for field, value in values.items():
        problem = None if value is None else header_value_problem(value)
        if problem is not None:
            raise TemplateError(f"{field} contains {problem} (header injection)")


def _check_extra_header_names(extra: Mapping[str, str]) -> None:
    for name in extra:
        if not _FIELD_NAME.fullmatch(name):
            raise TemplateError(f"invalid header name {name!r} (header injection)")
        if name.lower() in _OWN_HEADERS:
            raise TemplateError(f"extra header {name} would override a header Herald sets")


# --- headers -------------------------------------------------------------------------------


def _verbatim_field(name: str, value: str) -> str:
    """An ASCII header exactly as given, never folded or RFC 2047-encoded.

    Encoding a long word (as the email package does when it cannot fold) would turn a long
    List-Unsubscribe URL or the idempotency key into an encoded word that receivers and
    bounce processors do not decode.
    """
    if len(name) + len(": ") + len(value) > _MAX_LINE:
        raise TemplateError(f"header {name} is longer than {_MAX_LINE} characters")
    return f"{name}: {value}{_CRLF}"


@lru_cache(maxsize=256)  # From and Reply-To are the same for every message of a campaign
def _address_field(name: str, addr_spec: str, display_name: str | None) -> str:
    addr_spec = _canonical_addr_spec(addr_spec)
    if display_name is None:
        return _checked(f"{name}: {addr_spec}{_CRLF}", name)
    lead = f"{name}: "
    phrase = _display_phrase(display_name, room=_FOLD_AT - len(lead))
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
    return " ".join(_encoded_words(display_name, first=min(room, _EW_MAX)))


def _text_field(name: str, value: str) -> str:
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
    first = min(max(_FOLD_AT - len(lead), _EW_OVERHEAD + _MAX_CHAR_COST), _EW_MAX)
    words = _encoded_words(text, first=first)
    return _checked(lead + f"{_CRLF} ".join(words) + _CRLF, name)


def _fold(lead: str, value: str) -> tuple[str, bool]:
    """``lead + value`` broken before whitespace into lines of at most 78 characters, and
    whether that worked: a word too long for a line of its own is left on a longer line.

    Whitespace is kept as it is (inside a quoted-string too, where folding is allowed); a line
    is never only whitespace.
    """
    if len(lead) + len(value) <= _FOLD_AT:
        return lead + value + _CRLF, True
    lines: list[str] = []
    line = lead
    for piece in _FOLD_PIECES.findall(value):
        if len(line) + len(piece) <= _FOLD_AT or line == lead or piece.isspace():
            line += piece
        else:
            lines.append(line)
            line = piece
    lines.append(line)
    return _CRLF.join(lines) + _CRLF, all(len(line) <= _FOLD_AT for line in lines)


def _encoded_words(text: str, *, first: int) -> list[str]:
    """``text`` as UTF-8 encoded words: the first at most ``first`` characters, the rest 75.

    Each word holds whole characters. Q-encoding unless base64 is clearly shorter.
    """
    data = _utf8(text)
    q_length = 3 * len(data) - 2 * (len(data) - len(data.translate(None, _Q_ONE_CHAR)))
    base64_length = (len(data) + 2) // 3 * 4
    # Q keeps Latin text legible; the email package prefers it by the same margin.
    encoding = "q" if q_length - base64_length < 5 else "b"

    limit = first - _EW_OVERHEAD
    if (q_length if encoding == "q" else base64_length) <= limit:
        chunks = [data]  # the usual case: one word
    else:
        chunks = _chunks(text, data, encoding, limit)
    prefix = _EW_PREFIX[encoding]
    if encoding == "q":
        return [prefix + "".join([_Q_BYTE[byte] for byte in chunk]) + "?=" for chunk in chunks]
    return [prefix + binascii.b2a_base64(chunk, newline=False).decode() + "?=" for chunk in chunks]


def _chunks(text: str, data: bytes, encoding: str, limit: int) -> list[bytes]:
    """``data`` (``text`` in UTF-8) cut at character boundaries into pieces whose encoding
    fits in ``limit`` characters for the first piece and an encoded word's room after it."""
    chunks: list[bytes] = []
    start = size = count = 0  # chunk start in data, its encoded size, its raw byte count
    for char in text:
        code = ord(char)
        length = 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4
        if encoding == "q":
            grown = size + (3 * length if length > 1 or char not in _Q_ONE_CHAR_TEXT else 1)
        else:
            grown = (count + length + 2) // 3 * 4
        if grown > limit and count:
            chunks.append(data[start : start + count])
            start += count
            count = 0
            limit = _EW_MAX - _EW_OVERHEAD
            grown = grown - size if encoding == "q" else (length + 2) // 3 * 4
        size = grown
        count += length
    if count or not chunks:
        chunks.append(data[start : start + count])
    return chunks


def _checked(field: str, name: str) -> str:
    """``field`` if every line fits in 998 characters and every line after the first is a
    continuation (starts with whitespace), which would otherwise end the header early."""
    lines = field.removesuffix(_CRLF).split(_CRLF)
    if any(len(line) > _MAX_LINE for line in lines):
        raise TemplateError(f"header {name} is longer than {_MAX_LINE} characters")
    if not all(line[:1] in (" ", "\t") for line in lines[1:]):
        raise TemplateError(f"header {name} cannot be encoded: folding would break the message")
    return field


# A header line on the wire: a field (name, colon, printable ASCII) or a continuation holding
# more than whitespace (some readers end the header block at a whitespace-only line).
_WIRE_HEADER_LINE = re.compile(rb"[!-9;-~]+:[\t -~]*|[ \t]+[!-~][\t -~]*")


def _check_wire(message: bytes) -> None:
    """Refuse ``message`` unless its bytes have the shape every part of this module promises.

    A guard against bugs, not a check of the input: every line ends in CRLF (no bare CR or
    LF), no line exceeds 998 octets, and the header block holds only fields and folds, so no
    value can have become a header or the start of the body.
    """
    crlf = message.count(b"\r\n")
    if message.count(b"\n") != crlf or message.count(b"\r") != crlf:
        raise TemplateError("built message is malformed: a bare CR or LF (a bug in Herald)")
    head, separator, _ = message.partition(b"\r\n\r\n")
    if not separator or not message.endswith(b"\r\n"):
        raise TemplateError("built message is malformed: no header block (a bug in Herald)")
    if not all(_WIRE_HEADER_LINE.fullmatch(line) for line in head.split(b"\r\n")):
        raise TemplateError(
            "built message is malformed: a header line that is not a field or a fold"
            " (a bug in Herald)"
        )
    if len(message) > _MAX_LINE and max(map(len, message.split(b"\r\n"))) > _MAX_LINE:
        raise TemplateError(
            f"built message is malformed: a line over {_MAX_LINE} octets (a bug in Herald)"
        )


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise TemplateError(f"text cannot be encoded as UTF-8: {exc}") from exc


# --- body ----------------------------------------------------------------------------------


def _boundary(message_id: str) -> str:
    # Quoted-printable never contains "==" and 7-bit text would need this exact hash, so the
    # boundary cannot collide with a body line.
    return "==herald-" + hashlib.sha256(message_id.encode()).hexdigest()[:24] + "=="


def _body(content: RenderedContent, *, boundary: str) -> bytes:
    """The body, with the Content-Type and Content-Transfer-Encoding headers that lead it."""
    if content.html is None:
        return _text_part(content.text, "plain")
    # Text first: clients show the last alternative they can display.
    delimiter = f"--{boundary}\r\n".encode("ascii")
    return b"".join(
        (
            f'Content-Type: multipart/alternative;\r\n boundary="{boundary}"\r\n\r\n'.encode(
                "ascii"
            ),
            delimiter,
            _text_part(content.text, "plain"),
            b"\r\n",
            delimiter,
            _text_part(content.html, "html"),
            f"\r\n--{boundary}--\r\n".encode("ascii"),
        )
    )


def _text_part(text: str, subtype: str) -> bytes:
    encoding, data = _encode_text(text)
    return (
        f"Content-Type: text/{subtype}; {_CHARSET_PARAM}\r\n"
        f"Content-Transfer-Encoding: {encoding}\r\n\r\n"
    ).encode("ascii") + data


def _encode_text(text: str) -> tuple[TransferEncoding, bytes]:
    """The body as _CRLF lines ending in _CRLF, 7bit if it can be, else quoted-printable."""
    data = _utf8(text)
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    if not data.endswith(b"\n"):
        data += b"\n"
    if (
        data.isascii()
        and b"\0" not in data  # RFC 2045: 7bit data holds no NUL
        and (len(data) <= _MAX_LINE or max(map(len, data.split(b"\n"))) <= _MAX_LINE)
    ):
        return "7bit", data.replace(b"\n", b"\r\n")
    # Soft line breaks keep lines at 76 characters; trailing whitespace and a lone "." are
    # encoded.
    encoded = binascii.b2a_qp(data, quotetabs=False, istext=True, header=False)
    return "quoted-printable", encoded.replace(b"\n", b"\r\n")
