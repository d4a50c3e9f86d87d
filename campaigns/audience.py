"""Who a campaign goes to: the recipients of its audience source, one at a time.

iter_audience streams: a CSV file is read row by row and never held in memory, and a URL
audience is parsed while it downloads, so an audience of millions costs the same memory as one
of ten. A bad row does not stop the stream: it comes out as a RowProblem (with its line) between
the good recipients, and the caller decides what to do (`herald validate` lists them; fan-out
skips them, or refuses a strict URL audience). Only a source that cannot be read at all raises
AudienceError.

A URL audience is fetched live here, for checking. Launching never fans out from a live fetch:
the scheduler snapshots the fetched rows with the occurrence (scheduler.snapshot) and reads
them back from there, so a re-run after a crash sends to the same list.

Duplicates are one mailbox under one or several spellings (``dup@y.example``, ``"dup"@y.example``,
``DUP@Y.example``: campaigns.addresses.mailbox_identity). The first row of a mailbox is the one
sent to; later rows are duplicates. iter_audience still yields them, since remembering every
mailbox costs memory proportional to the audience: fan-out needs no memory for it, because the
idempotency key and the outbox's one-job-per-mailbox index are both on the identity, so a later
row of a mailbox creates nothing. `herald validate` and `herald audience check` name each
duplicate row and the row it repeats (MailboxDeduper).
Row rules and the file formats live in audience_formats; fetching in audience_url.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar, assert_never

from campaigns.addresses import mailbox_identity
from campaigns.audience_formats import (
    Format,
    Recipient,
    RowProblem,
    iter_csv_share,
    newline_mode,
    parse_stream,
)
from campaigns.audience_url import iter_url_audience
from campaigns.errors import AudienceError
from campaigns.spec import CsvAudience, InlineAudience, LoadedCampaign, UrlAudience
from templates.files import FileRefused, open_inside

__all__ = [
    "MailboxDeduper",
    "Recipient",
    "RowProblem",
    "audience_source_files",
    "iter_audience",
    "iter_audience_share",
    "iter_data_file",
]


def audience_source_files(loaded: LoadedCampaign) -> list[Path]:
    """The local files the audience is read from (part of the campaign's spec_hash)."""
    audience = loaded.spec.audience
    if isinstance(audience, CsvAudience):
        return [audience.resolve(loaded.base_dir)]
    return []


def iter_audience(loaded: LoadedCampaign) -> Iterator[Recipient | RowProblem]:
    """Every recipient of the campaign, or a RowProblem for each row that cannot be used."""
    audience = loaded.spec.audience
    if isinstance(audience, InlineAudience):
        return _iter_inline(loaded, audience)
    if isinstance(audience, CsvAudience):
        # Opened now, not at the first row, so the caller hears of a refusal where it asked.
        return _iter_campaign_csv(loaded, audience)
    if isinstance(audience, UrlAudience):
        return iter_url_audience(audience)
    if audience is None:  # enrollment: manual without an audience: recipients come one by one
        return iter(())
    assert_never(audience)


def _iter_campaign_csv(
    loaded: LoadedCampaign, audience: CsvAudience
) -> Iterator[Recipient | RowProblem]:
    """The campaign's CSV through the shared resolver (confined to the campaign's folder)."""
    shown, stream = _open_campaign_csv(loaded, audience)
    return _closing(stream, parse_stream("csv", stream, source=shown))


def _open_campaign_csv(
    loaded: LoadedCampaign, audience: CsvAudience
) -> tuple[str, io.TextIOWrapper]:
    shown = loaded.shown(audience.csv)
    try:
        binary = open_inside(loaded.base_dir, audience.csv)
    except FileRefused as error:
        raise AudienceError(
            f"cannot read audience CSV file {shown!r}: {error.reason}", file=loaded.file
        ) from None
    # utf-8-sig: spreadsheet programs often start CSV exports with a byte order mark.
    return shown, io.TextIOWrapper(binary, encoding="utf-8-sig", newline=newline_mode("csv"))


def iter_audience_share(
    loaded: LoadedCampaign, wanted: Callable[[int], bool]
) -> Iterator[Recipient | RowProblem | None]:
    """A CSV audience as ``iter_audience`` reads it, except that a row at a position ``wanted``
    refuses comes out as None, unchecked (campaigns.audience_formats.iter_csv_share)."""
    audience = loaded.spec.audience
    if not isinstance(audience, CsvAudience):
        raise ValueError("only a CSV audience is read in shares")
    shown, stream = _open_campaign_csv(loaded, audience)
    return _closing(stream, iter_csv_share(stream, shown, wanted))


_Row = TypeVar("_Row")


def _closing(stream: io.TextIOWrapper, rows: Iterator[_Row]) -> Iterator[_Row]:
    with stream:
        yield from rows


def _iter_inline(loaded: LoadedCampaign, audience: InlineAudience) -> Iterator[Recipient]:
    for index, entry in enumerate(audience.entries):
        yield Recipient(
            email=entry.email,
            name=entry.name,
            variables=dict(entry.variables),
            line=loaded.lines.line_of(("audience", index)) or 0,
        )


def iter_data_file(path: Path, format: Format) -> Iterator[Recipient | RowProblem]:
    """The rows of an audience file the operator named on the command line, in ``format``
    (CSV, JSON array or NDJSON). A file a *campaign* names is read via iter_audience, confined
    to the campaign's folder."""
    file = str(path)
    try:
        # utf-8-sig: spreadsheet programs often start CSV exports with a byte order mark.
        stream = path.open(encoding="utf-8-sig", newline=newline_mode(format))
    except OSError as error:
        reason = error.strerror or str(error)
        what = "CSV file" if format == "csv" else "file"
        raise AudienceError(f"cannot read audience {what}: {reason}", file=file) from None
    with stream:
        yield from parse_stream(format, stream, source=file)


class MailboxDeduper:
    """Tells the first row of each mailbox from its duplicates, in audience order.

    Remembers a 16-byte digest of each identity and the position of its first row, so memory
    stays small for large audiences.
    """

    def __init__(self) -> None:
        self._first: dict[bytes, str] = {}

    def first_row_of(self, recipient: Recipient) -> str | None:
        """None for the first row of its mailbox (now remembered); for a later row, where the
        first one is (e.g. 'line 2')."""
        identity = mailbox_identity(recipient.email).encode()
        digest = hashlib.blake2b(identity, digest_size=16).digest()
        first = self._first.get(digest)
        if first is None:
            self._first[digest] = recipient.where
        return first
