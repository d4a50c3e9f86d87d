"""A URL audience: fetched through the egress guard and parsed while it downloads.

The request goes through ``dispatch.egress`` with the operator's policy from the environment
(``HERALD_EGRESS_ALLOW`` etc.; see ``EgressPolicy.from_env``), so a campaign cannot aim Herald
at an internal address, redirects included. Header values may name environment variables
(``Authorization: "Bearer ${HERALD_SECRET_CRM_TOKEN}"``; only exposed ones, see
dispatch.request_headers): they are resolved here, at fetch time, never stored, and treated
like ``Authorization`` on a cross-origin redirect (dropped).

The body is streamed (``open_blocking``): rows are parsed as bytes arrive, in constant memory.
Audience exports can be large and slow, so the guard's byte cap and total deadline are raised
for this one use (AUDIENCE_MAX_BYTES, AUDIENCE_TIMEOUT); the deadline covers the whole read,
including the time the caller spends storing rows.

Errors: a denial, a 4xx answer or unusable data is the campaign's problem (AudienceError, exit
code 2); a network failure, a timeout or a 408/429/5xx answer is an operational one
(AudienceUnavailable, a subclass the CLI may map to exit code 1).
"""

from __future__ import annotations

import dataclasses
import io
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import PurePosixPath
from typing import Final
from urllib.parse import urlsplit

from campaigns.audience_formats import (
    Format,
    Recipient,
    RowProblem,
    newline_mode,
    parse_stream,
)
from campaigns.errors import AudienceError, excerpt
from campaigns.spec import UrlAudience
from dispatch.egress import (
    BlockingResponse,
    EgressDenied,
    EgressError,
    EgressPolicy,
    Resolver,
    open_blocking,
)
from dispatch.egress.redact import redact_url
from dispatch.request_headers import MissingVariable, resolve_headers, secret_header_names

AUDIENCE_MAX_BYTES: Final = 1024 * 1024 * 1024
AUDIENCE_TIMEOUT: Final = 30 * 60.0  # seconds for the whole download

_BY_EXTENSION: Final[dict[str, Format]] = {
    ".csv": "csv",
    ".json": "json",
    ".ndjson": "ndjson",
    ".jsonl": "ndjson",
}
_BY_MEDIA_TYPE: Final[dict[str, Format]] = {
    "text/csv": "csv",
    "application/csv": "csv",
    "application/json": "json",
    "application/x-ndjson": "ndjson",
    "application/ndjson": "ndjson",
    "application/jsonl": "ndjson",
    "application/x-jsonlines": "ndjson",
    "application/jsonlines": "ndjson",
}
_ACCEPT: Final[dict[Format | None, str]] = {
    "csv": "text/csv, */*;q=0.1",
    "json": "application/json, */*;q=0.1",
    "ndjson": "application/x-ndjson, application/jsonl, */*;q=0.1",
    None: "text/csv, application/json, application/x-ndjson, */*;q=0.1",
}
_TEMPORARY_STATUSES: Final = frozenset({408, 429})  # plus every 5xx
FORMAT_HINT: Final = "say which with format: csv, json or ndjson"


class AudienceUnavailable(AudienceError):
    """The audience could not be fetched for a reason that may pass (network, timeout, 5xx)."""


@dataclass(frozen=True)
class FetchedAudience:
    format: Format
    url: str  # the final URL, after redirects
    items: Iterator[Recipient | RowProblem]


def format_from_path(path: str) -> Format | None:
    """csv/json/ndjson from a path's (or URL path's) extension."""
    return _BY_EXTENSION.get(PurePosixPath(path).suffix.lower())


def infer_format(url: str, content_type: str | None) -> Format | None:
    """The format from the URL's extension, else from the response's Content-Type."""
    by_path = format_from_path(urlsplit(url).path)
    if by_path is not None:
        return by_path
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    return _BY_MEDIA_TYPE.get(media_type)


def audience_policy(environ: Mapping[str, str], headers: Mapping[str, str]) -> EgressPolicy:
    """The operator's egress policy, with the caps of a bulk download.

    Raises AudienceError for a malformed HERALD_EGRESS_* variable.
    """
    try:
        policy = EgressPolicy.from_env(
            environ, max_bytes=AUDIENCE_MAX_BYTES, total_timeout=AUDIENCE_TIMEOUT
        )
    except ValueError as error:
        raise AudienceError(f"invalid egress setting: {error}") from None
    secrets = policy.secret_headers | secret_header_names(headers)
    return dataclasses.replace(policy, secret_headers=secrets)


@contextmanager
def open_url_audience(
    source: UrlAudience,
    *,
    environ: Mapping[str, str] | None = None,
    policy: EgressPolicy | None = None,
    resolver: Resolver | None = None,
) -> Iterator[FetchedAudience]:
    """Fetch ``source`` and yield its rows as they arrive; the download stops with the block.

    ``policy`` defaults to ``audience_policy(environ)``; ``environ`` to ``os.environ``.
    """
    env = os.environ if environ is None else environ
    url = source.url
    shown = redact_url(url)  # errors and row locations name the URL without its credentials
    try:
        headers = resolve_headers(source.headers, env)
    except MissingVariable as error:
        raise AudienceError(
            f"cannot fetch the audience: {error}",
            file=shown,
            hint="set it in the environment of the command that fetches the audience",
        ) from None
    headers.setdefault("Accept", _ACCEPT[source.format])
    guard = audience_policy(env, source.headers) if policy is None else policy
    try:
        with open_blocking("GET", url, policy=guard, headers=headers, resolver=resolver) as body:
            _check_status(body, shown)
            format = source.format or infer_format(body.url, body.headers.get("content-type"))
            if format is None:
                found = excerpt(body.headers.get("content-type", "none"))
                raise AudienceError(
                    f"cannot tell the audience's format (Content-Type: {found})",
                    file=shown,
                    hint=FORMAT_HINT,
                )
            yield FetchedAudience(
                format, body.url, parse_stream(format, _text(body, format), source=shown)
            )
    except EgressDenied as error:
        raise AudienceError(
            f"audience URL refused by the egress policy: {error}",
            file=shown,
            hint="an operator can allow a private address or host with HERALD_EGRESS_ALLOW",
        ) from None
    except EgressError as error:
        raise AudienceUnavailable(
            f"cannot fetch the audience: {error.reason}", file=shown
        ) from None


def iter_url_audience(
    source: UrlAudience, *, environ: Mapping[str, str] | None = None
) -> Iterator[Recipient | RowProblem]:
    """The rows of a live fetch (for checking; launching reads the occurrence's snapshot)."""
    with open_url_audience(source, environ=environ) as fetched:
        yield from fetched.items


def _check_status(body: BlockingResponse, url: str) -> None:
    status = body.status_code
    if 200 <= status < 300:
        return
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    message = f"the audience server answered {status} {phrase}".rstrip()
    if status in _TEMPORARY_STATUSES or status >= 500:
        raise AudienceUnavailable(message, file=url, hint="try again later")
    hint = None
    if status in (401, 403):
        hint = 'check the audience\'s headers, e.g. Authorization: "Bearer ${HERALD_SECRET_TOKEN}"'
    elif 300 <= status < 400:
        hint = "the redirect has no usable Location"
    raise AudienceError(message, file=url, hint=hint)


def _text(body: BlockingResponse, format: Format) -> io.TextIOWrapper:
    # utf-8-sig: exports often start with a byte order mark; it is not part of the data.
    encoding = "utf-8-sig" if body.encoding == "utf-8" else body.encoding
    buffered = io.BufferedReader(body, buffer_size=64 * 1024)
    return io.TextIOWrapper(buffered, encoding=encoding, newline=newline_mode(format))
