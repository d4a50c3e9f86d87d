"""Keeping credentials out of everything Herald prints or stores.

Two tools, applied wherever text leaves our control (an error message, a stored outcome):

- ``redact_url`` shows a URL without its credentials: the password of the userinfo, a bare
  userinfo of an http(s) URL (``https://TOKEN@host``, a common way to pass a token) and the
  values of query or fragment parameters whose name looks secret (``?token=``, ``api_key=``,
  ``password=``, ``X-Amz-Signature=`` ...) become ``***``. It never raises, and a URL that does
  not parse cleanly is redacted *more*, not less: when an ``@`` follows an authority that is not
  a valid ``host[:port]`` (a password with an unencoded ``/``, ``?`` or ``#``), everything up to
  the last ``@`` is taken as userinfo.
- ``Redactor`` knows secret *values* (a resolved header value, a URL password) and replaces each
  with ``***`` in any text, in every form it is likely to come back in: as written,
  percent-encoded (upper or lower-case hex, ``+`` for spaces or not), JSON- or repr-escaped.
  Values shorter than ``MIN_SECRET_LENGTH`` are not scrubbed by value: replacing every ``ab`` in
  a message would garble it and protect nothing (a URL's password is still redacted by form).

It lives in the egress guard because the guard needs it (its errors show URLs) and the guard
imports nothing outside itself; SMTP, webhooks, settings and the CLI use it from here too.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import quote, quote_plus, unquote, unquote_plus, urlsplit

MASK: Final = "***"
MIN_SECRET_LENGTH: Final = 4

# Parameter names (lower-cased, without - _ .) that carry credentials by convention.
_SECRET_PARAM: Final = re.compile(
    r"token|secret|passw|passwd|pwd|^pass$|key|auth|sig|credential|session|jwt|bearer|^code$|cookie"
)
_HARMLESS_VALUES: Final = frozenset({"", "0", "1", "true", "false", "yes", "no", "on", "off"})
_HOST_PORT: Final = re.compile(r"(\[[0-9A-Za-z:.%]*\]|[^:\[\]@/?#]*)(:[0-9]*)?")
_TOKEN_USER_SCHEMES: Final = frozenset({"http", "https", "ws", "wss"})
_PERCENT: Final = re.compile(r"%[0-9A-F]{2}")


def _authority_split(rest: str, scheme: str) -> tuple[str | None, str, str]:
    """(userinfo or None, host[:port], remainder) of what follows ``scheme://``."""
    end = len(rest)
    for char in "/?#":
        position = rest.find(char)
        if position != -1:
            end = min(end, position)
    netloc, remainder = rest[:end], rest[end:]
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        return userinfo, hostport, remainder
    # An '@' after the authority: either data in a path or query, or a password with an
    # unencoded '/', '?' or '#' that cut the authority short. Only a well-formed host of a
    # scheme whose paths may hold '@' (http) gets the benefit of the doubt.
    suspicious = scheme not in _TOKEN_USER_SCHEMES or not _HOST_PORT.fullmatch(netloc)
    if "@" in remainder and netloc and suspicious:
        userinfo, _, after = rest.rpartition("@")
        cut = len(after)
        for char in "/?#":
            position = after.find(char)
            if position != -1:
                cut = min(cut, position)
        return userinfo, after[:cut], after[cut:]
    return None, netloc, remainder


def _redact_params(text: str) -> str:
    pieces = []
    for piece in text.split("&"):
        name, equals, value = piece.partition("=")
        normalised = re.sub(r"[-_.\s]", "", unquote_plus(name).lower())
        if equals and _SECRET_PARAM.search(normalised) and value.lower() not in _HARMLESS_VALUES:
            piece = f"{name}={MASK}"
        pieces.append(piece)
    return "&".join(pieces)


def _redact_tail(remainder: str) -> str:
    path, hash_mark, fragment = remainder.partition("#")
    path, question, query = path.partition("?")
    text = path
    if question:
        text += "?" + _redact_params(query)
    if hash_mark:
        text += "#" + _redact_params(fragment)
    return text


def redact_url(url: str) -> str:
    """``url`` as it may be shown to anyone: credentials replaced by ``***``. Never raises."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        # Not an authority URL (sqlite:relative.db, a bare host): only an '@' can hide a secret.
        if "@" in url:
            return f"{MASK}@{url.rpartition('@')[2]}"
        return _redact_tail(url) if "?" in url or "#" in url else url
    userinfo, hostport, remainder = _authority_split(rest, scheme.lower())
    shown = ""
    if userinfo is not None:
        user, colon, _ = userinfo.partition(":")
        if colon:
            shown = f"{user}:{MASK}@"
        elif scheme.lower() in _TOKEN_USER_SCHEMES:
            shown = f"{MASK}@"
        else:
            shown = f"{userinfo}@"
    return f"{scheme}://{shown}{hostport}{_redact_tail(remainder)}"


def redact_setting(url: str) -> str:
    """A URL *setting* as an error may show it: ``redact_url``, or nothing at all when it has no
    ``scheme://`` (then nothing in it can be told apart from a password pasted by mistake)."""
    if "://" not in url:
        return "(a value without scheme://, not shown)"
    return redact_url(url)


def url_secrets(url: str) -> list[str]:
    """The credential values a URL carries (as written and decoded), for a ``Redactor``."""
    found: list[str] = []
    scheme, separator, rest = url.partition("://")
    if separator:
        userinfo, _, remainder = _authority_split(rest, scheme.lower())
    else:
        userinfo, remainder = (url.rpartition("@")[0] or None), url
    if userinfo is not None:
        user, colon, password = userinfo.partition(":")
        if colon:
            found += [password, unquote(password)]
        elif scheme.lower() in _TOKEN_USER_SCHEMES or not separator:
            found += [user, unquote(user)]
    query = remainder.split("?", 1)[1] if "?" in remainder else ""
    for part in re.split(r"[&#]", query):
        name, equals, value = part.partition("=")
        normalised = re.sub(r"[-_.\s]", "", unquote_plus(name).lower())
        if equals and _SECRET_PARAM.search(normalised) and value.lower() not in _HARMLESS_VALUES:
            found += [value, unquote_plus(value)]
    # The standard parser may split differently from ours on a malformed URL: take its view too.
    try:
        parts = urlsplit(url)
        found += [p for p in (parts.password,) if p]
        found += [unquote(p) for p in (parts.password,) if p]
    except ValueError:
        pass
    return [value for value in found if value]


def _forms(secret: str) -> set[str]:
    """The spellings in which a secret may come back: echoed, encoded, escaped."""
    encoded = {quote(secret, safe=""), quote(secret), quote_plus(secret), quote_plus(secret, "/")}
    encoded |= {_PERCENT.sub(lambda m: m.group(0).lower(), form) for form in encoded}
    escaped = {
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret)[1:-1],
        secret.encode("unicode_escape").decode("ascii"),
    }
    return {secret} | encoded | escaped


class Redactor:
    """Replaces every known secret value, in any of its usual spellings, with ``***``.

    Immutable: ``with_secrets`` returns a new one, so a redactor built for one request cannot
    leak into another's.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets = frozenset(s for s in secrets if len(s) >= MIN_SECRET_LENGTH)
        needles: set[str] = set()
        for secret in self._secrets:
            needles |= {form for form in _forms(secret) if len(form) >= MIN_SECRET_LENGTH}
        # Longest first, so a secret that contains another is replaced whole.
        ordered = sorted(needles, key=lambda n: (-len(n), n))
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None
        self._longest = len(ordered[0]) if ordered else 0

    @classmethod
    def for_urls(cls, *urls: str) -> Redactor:
        return cls(secret for url in urls for secret in url_secrets(url))

    def with_secrets(self, secrets: Iterable[str]) -> Redactor:
        return Redactor([*self._secrets, *secrets])

    def __bool__(self) -> bool:
        return self._pattern is not None

    @property
    def longest(self) -> int:
        """Length of the longest spelling scrubbed, in characters (0 if none)."""
        return self._longest

    def __call__(self, text: str) -> str:
        if self._pattern is None:
            return text
        # Twice: removing one secret can join the pieces around it into another.
        return self._pattern.sub(MASK, self._pattern.sub(MASK, text))

    def head(self, text: str, limit: int) -> str:
        """The scrubbed start of ``text``, about ``limit`` characters long.

        Cutting first and scrubbing after would leave the start of a secret that crosses the
        cut: here a secret that starts before ``limit`` is masked whole. ``text`` must extend
        ``longest`` characters past ``limit`` (when there is more) for that to be seen.
        """
        if self._pattern is None:
            return text[:limit]
        pieces: list[str] = []
        position = 0
        for match in self._pattern.finditer(text):
            if match.start() >= limit:
                break
            pieces += [text[position : match.start()], MASK]
            position = match.end()
        if position < limit:
            pieces.append(text[position:limit])
        return self("".join(pieces))


def smtp_auth_forms(username: str, password: str) -> list[str]:
    """What SMTP AUTH puts on the wire for these credentials (a server may echo it back)."""
    plain = base64.b64encode(f"\0{username}\0{password}".encode()).decode("ascii")
    login = base64.b64encode(password.encode()).decode("ascii")
    return [password, plain, login]
