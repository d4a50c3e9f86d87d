"""The line rules of an Internet message, shared by the parts that write one.

CRLF ends every line; RFC 5322 caps a line at 998 characters and asks for at most 78 where the
text allows folding. Text is UTF-8 wherever it is encoded.
"""

from __future__ import annotations

from templates.errors import TemplateError

CRLF = "\r\n"
# RFC 5322 caps a line at 998 characters; SMTP servers may reject longer ones.
MAX_LINE = 998
# ... and asks for at most 78 where the text allows folding.
FOLD_AT = 78


def utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise TemplateError(f"text cannot be encoded as UTF-8: {exc}") from exc
