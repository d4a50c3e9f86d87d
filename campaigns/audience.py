"""Who a campaign goes to: the recipients of its audience source, one at a time.

iter_audience streams: a CSV file is read row by row and never held in memory, so an audience of
millions costs the same memory as one of ten. A bad row does not stop the stream: it comes out as
a RowProblem (with its line) between the good recipients, and the caller decides what to do
(`herald validate` lists them; fan-out skips them). Only a source that cannot be read at all
raises AudienceError.

Duplicate addresses are deliberately not detected here: that needs memory proportional to the
audience, the outbox already dedupes by idempotency key, and `herald validate` reports them.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, assert_never

from campaigns.addresses import AddressError, normalise_address
from campaigns.errors import AudienceError
from campaigns.spec import CsvAudience, InlineAudience, LoadedCampaign

if TYPE_CHECKING:
    from _csv import Reader as CsvReader

EMAIL_COLUMN = "email"
NAME_COLUMN = "name"


@dataclass(frozen=True)
class Recipient:
    email: str  # normalised
    name: str | None
    variables: dict[str, str]  # every column/key as text, the address as written under 'email'
    line: int  # CSV line (1-based, header is line 1) or YAML line of the inline item


@dataclass(frozen=True)
class RowProblem:
    line: int
    reason: str  # e.g. "invalid address 'bob@': domain is empty"


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
        path = audience.resolve(loaded.base_dir)
        if not path.is_file():
            # Checked now, not at the first row, so the caller hears of it where it asked.
            reason = "it is not a file" if path.exists() else "no such file"
            raise AudienceError(f"cannot read audience CSV file: {reason}", file=str(path))
        return _iter_csv(path)
    assert_never(audience)


def _iter_inline(loaded: LoadedCampaign, audience: InlineAudience) -> Iterator[Recipient]:
    for index, entry in enumerate(audience.entries):
        yield Recipient(
            email=entry.email,
            name=entry.name,
            variables=dict(entry.variables),
            line=loaded.lines.line_of(("audience", index)) or 0,
        )


@dataclass(frozen=True)
class _Columns:
    """The header row: column names (email/name columns under their canonical names)."""

    names: tuple[str, ...]  # '' for a column without a name: its values are dropped
    email_index: int
    name_index: int | None

    @classmethod
    def from_header(cls, cells: list[str], *, file: str, line: int) -> _Columns:
        names = [cell.strip() for cell in cells]

        def indexes_of(wanted: str) -> list[int]:
            return [index for index, name in enumerate(names) if name.lower() == wanted]

        emails, name_columns = indexes_of(EMAIL_COLUMN), indexes_of(NAME_COLUMN)
        if not emails:
            found = ", ".join(repr(name) for name in names if name) or "none"
            raise AudienceError(
                f"no 'email' column (found columns: {found})",
                file=file,
                line=line,
                hint="the first non-empty row must be a header naming the columns",
            )
        for wanted, indexes in ((EMAIL_COLUMN, emails), (NAME_COLUMN, name_columns)):
            if len(indexes) > 1:
                raise AudienceError(f"more than one {wanted!r} column", file=file, line=line)
        for index in (*emails, *name_columns):
            names[index] = names[index].lower()
        repeated = sorted({name for name in names if name and names.count(name) > 1})
        if repeated:
            listed = ", ".join(map(repr, repeated))
            raise AudienceError(f"repeated column names: {listed}", file=file, line=line)
        return cls(
            names=tuple(names),
            email_index=emails[0],
            name_index=name_columns[0] if name_columns else None,
        )

    def recipient(self, cells: list[str], line: int) -> Recipient | RowProblem:
        if len(cells) != len(self.names):
            return RowProblem(
                line, f"row has {len(cells)} fields but the header has {len(self.names)}"
            )
        raw_email = cells[self.email_index]
        if not raw_email.strip():
            return RowProblem(line, "email is empty")
        try:
            email = normalise_address(raw_email)
        except AddressError as error:
            return RowProblem(line, f"invalid address {raw_email!r}: {error}")
        name: str | None = None
        if self.name_index is not None:
            raw_name = cells[self.name_index]
            if "\r" in raw_name or "\n" in raw_name:
                return RowProblem(line, "header injection: line break in name")
            name = raw_name.strip() or None
        variables = {column: cell for column, cell in zip(self.names, cells, strict=True) if column}
        return Recipient(email=email, name=name, variables=variables, line=line)


def _iter_csv(path: Path) -> Iterator[Recipient | RowProblem]:
    file = str(path)
    try:
        # utf-8-sig: spreadsheet programs often start CSV exports with a byte order mark.
        stream = path.open(encoding="utf-8-sig", newline="")
    except OSError as error:
        reason = error.strerror or str(error)
        raise AudienceError(f"cannot read audience CSV file: {reason}", file=file) from None
    with stream:
        reader = csv.reader(stream)
        try:
            yield from _rows(reader, file)
        except UnicodeDecodeError:
            raise AudienceError(
                "the file is not valid UTF-8", file=file, line=reader.line_num + 1
            ) from None
        except csv.Error as error:
            message = f"malformed CSV: {error}"
            raise AudienceError(message, file=file, line=reader.line_num) from None


def _rows(reader: CsvReader, file: str) -> Iterator[Recipient | RowProblem]:
    columns: _Columns | None = None
    last_line = 0
    for cells in reader:
        # A quoted field may span lines: a row starts right after the previous one ended.
        first_line, last_line = last_line + 1, reader.line_num
        if not any(cell.strip() for cell in cells):
            continue  # blank line, or a row of empty cells as spreadsheets export
        if columns is None:
            columns = _Columns.from_header(cells, file=file, line=first_line)
            continue
        yield columns.recipient(cells, first_line)
    if columns is None:
        raise AudienceError(
            "the CSV file is empty: expected a header with an 'email' column", file=file
        )
