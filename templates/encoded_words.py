"""RFC 2047 encoded words: header text that is not plain ASCII, written as UTF-8 in Q or base64.

Used for subjects, other unstructured headers and display names (templates/mime_headers.py).
"""

from __future__ import annotations

import binascii

from templates.wire_lines import utf8

# RFC 2047 encoded words, always in UTF-8. Q-encoding keeps only the characters allowed in every
# context (RFC 2047 section 5 (3), the strictest: a display name), so one encoder serves all.
_EW_PREFIX = {"q": "=?utf-8?q?", "b": "=?utf-8?b?"}
EW_OVERHEAD = len("=?utf-8?q?") + len("?=")
EW_MAX = 75  # RFC 2047: an encoded word is at most 75 characters
_Q_LITERAL = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!*+-/"
_Q_BYTE = [chr(byte) if byte in _Q_LITERAL else f"={byte:02X}" for byte in range(256)]
_Q_BYTE[ord(" ")] = "_"
_Q_ONE_CHAR = _Q_LITERAL + b" "  # bytes that stay one character in Q-encoding
_Q_ONE_CHAR_TEXT = frozenset(_Q_ONE_CHAR.decode())
MAX_CHAR_COST = 12  # the longest encoding of one character: four bytes in Q, "=F0=9F=98=80"


def encoded_words(text: str, *, first: int) -> list[str]:
    """``text`` as UTF-8 encoded words: the first at most ``first`` characters, the rest 75.

    Each word holds whole characters. Q-encoding unless base64 is clearly shorter.
    """
    data = utf8(text)
    q_length = 3 * len(data) - 2 * (len(data) - len(data.translate(None, _Q_ONE_CHAR)))
    base64_length = (len(data) + 2) // 3 * 4
    # Q keeps Latin text legible; the email package prefers it by the same margin.
    encoding = "q" if q_length - base64_length < 5 else "b"

    limit = first - EW_OVERHEAD
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
            limit = EW_MAX - EW_OVERHEAD
            grown = grown - size if encoding == "q" else (length + 2) // 3 * 4
        size = grown
        count += length
    if count or not chunks:
        chunks.append(data[start : start + count])
    return chunks
