"""HTTP request headers written by campaign authors, and the ``${ENV}`` references in them.

A header value may name environment variables, e.g. ``Authorization: "Bearer ${HERALD_SECRET_X}"``.
The reference is what gets stored (in the campaign spec and in a webhook job's payload); the
value is looked up only by the process that sends the request, at the moment it sends it, so a
secret never reaches the database or a log line.

Only variables the operator exposes to campaigns can be named, so a campaign cannot send, say,
``${HERALD_SMTP_URL}`` (with its password) to a receiver of its choosing: a name starting with
``HERALD_SECRET_``, or one listed in ``HERALD_SECRET_VARS=NAME1,NAME2`` (Herald's own other
``HERALD_*`` settings can never be listed). Anything else is refused where the campaign is
checked, and again by the process that would resolve it.

Syntax: ``${NAME}`` with NAME made of letters, digits and ``_``, not starting with a digit;
``$$`` is a literal ``$``; any other ``$`` is itself. A ``${`` that does not form a reference is
an error, so a typo such as ``${CRM TOKEN}`` is caught where the campaign is checked instead of
being sent literally.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Final

# RFC 9110 §5.6.2: a header name is a token.
_TOKEN: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_REFERENCE: Final = re.compile(r"\$\$|\$\{(?P<name>[^}]*)\}|\$\{")
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Set by the transport itself, or meaningless to set per request: refusing them keeps the
# request framing and the Idempotency-Key out of the campaign author's hands.
RESERVED_HEADERS: Final = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "expect",
        "idempotency-key",
        "proxy-authorization",
        "proxy-connection",
    }
)


class HeaderError(ValueError):
    """A header that cannot be sent as written."""


# RFC 9110 §5.5: a field value is visible ASCII, space and tab. obs-text (bytes 0x80-0xFF) is
# obsolete and the HTTP client encodes header text as ASCII, so anything else is refused here,
# where it gets a clear message, instead of failing inside the client.
_FIELD_VALUE: Final = re.compile(r"[\t\x20-\x7e]*")


def _unsendable(value: str) -> str | None:
    """Why ``value`` cannot be a header value (without quoting it), or None."""
    if _FIELD_VALUE.fullmatch(value):
        return None
    if any(char in value for char in "\r\n\x00"):
        return "a line break or NUL"
    if value.isascii():
        return "a control character"
    return "a non-ASCII character (percent-encode it, or use ASCII)"


SECRET_PREFIX: Final = "HERALD_SECRET_"
SECRET_LIST_VARIABLE: Final = "HERALD_SECRET_VARS"
EXPOSE_HINT: Final = (
    f"only variables named {SECRET_PREFIX}* or listed in {SECRET_LIST_VARIABLE}=NAME1,NAME2"
    " can be used in headers"
)


class MissingVariable(LookupError):
    """A ``${NAME}`` reference whose variable is not set in this process's environment."""

    def __init__(self, name: str, message: str | None = None) -> None:
        super().__init__(message or f"environment variable {name} is not set")
        self.name = name


class UnexposedVariable(MissingVariable):
    """A ``${NAME}`` reference to a variable the operator has not exposed to campaigns."""

    def __init__(self, name: str) -> None:
        super().__init__(
            name, f"environment variable {name} is not exposed to campaigns ({EXPOSE_HINT})"
        )


def is_exposed(name: str, environ: Mapping[str, str]) -> bool:
    """May a campaign's header name this variable? See the module docstring."""
    if name.startswith(SECRET_PREFIX) and len(name) > len(SECRET_PREFIX):
        return True
    if name.startswith("HERALD_"):
        return False  # Herald's own settings (database and SMTP URLs) are never exposed
    listed = environ.get(SECRET_LIST_VARIABLE, "")
    return name in {item.strip() for item in listed.split(",")}


def unexposed_variables(
    headers: Mapping[str, str], environ: Mapping[str, str]
) -> list[tuple[str, str]]:
    """(header, variable) for each reference to a variable that is not exposed, in order
    (raises HeaderError on bad syntax)."""
    return [
        (name, variable)
        for name, value in headers.items()
        for variable in variables_in(value)
        if not is_exposed(variable, environ)
    ]


def _tokens(value: str) -> Iterator[tuple[str, str]]:
    """('text', literal) and ('ref', NAME) pieces of a header value; raises HeaderError."""
    position = 0
    for match in _REFERENCE.finditer(value):
        yield "text", value[position : match.start()]
        position = match.end()
        if match.group(0) == "$$":
            yield "text", "$"
            continue
        name = match.group("name")
        if name is None:
            raise HeaderError("unclosed ${ in header value; write $$ for a literal $")
        if not _NAME.fullmatch(name):
            raise HeaderError(
                f"invalid environment variable reference ${{{name}}}: use letters, digits and _,"
                " not starting with a digit"
            )
        yield "ref", name
    yield "text", value[position:]


def variables_in(value: str) -> list[str]:
    """The environment variables a header value refers to (raises HeaderError on bad syntax)."""
    return [piece for kind, piece in _tokens(value) if kind == "ref"]


def check_header(name: str, value: str) -> None:
    """Raise HeaderError unless ``name: value`` can be sent as written."""
    if not _TOKEN.fullmatch(name):
        raise HeaderError(f"invalid header name {name!r}")
    if name.lower() in RESERVED_HEADERS:
        raise HeaderError(f"header {name!r} is set by Herald and cannot be given")
    problem = _unsendable(value)
    if problem is not None:
        raise HeaderError(f"the value of header {name!r} contains {problem}")
    variables_in(value)


def check_headers(headers: Mapping[str, str]) -> None:
    """check_header for each, and no name given twice in different case."""
    seen: dict[str, str] = {}
    for name, value in headers.items():
        check_header(name, value)
        first = seen.setdefault(name.lower(), name)
        if first != name:
            raise HeaderError(f"header {name!r} is given twice (also as {first!r})")


def resolve_headers(headers: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """The headers with every reference replaced by its variable's value.

    Raises UnexposedVariable (a MissingVariable) for a variable not exposed to campaigns,
    MissingVariable for an unset one, HeaderError for bad syntax or a value that
    would break the header (a line break in the variable's value).
    """
    resolved: dict[str, str] = {}
    for name, value in headers.items():
        parts: list[str] = []
        for kind, piece in _tokens(value):
            if kind == "text":
                parts.append(piece)
                continue
            if not is_exposed(piece, environ):
                raise UnexposedVariable(piece)
            if piece not in environ:
                raise MissingVariable(piece)
            parts.append(environ[piece])
        text = "".join(parts)
        problem = _unsendable(text)
        if problem is not None:
            # Named without the value: the value is a secret.
            raise HeaderError(f"the value of header {name!r} contains {problem}")
        resolved[name] = text
    return resolved


def secret_header_names(headers: Mapping[str, str]) -> frozenset[str]:
    """Headers whose value comes from the environment: treated like Authorization on redirects."""
    return frozenset(name.lower() for name, value in headers.items() if variables_in(value))
