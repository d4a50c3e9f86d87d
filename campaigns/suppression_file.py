"""Reading a suppression list to import: every row checked, every problem named by line.

Two shapes (docs/deliverability/suppress.md):

- a CSV file whose header names an ``email`` (or ``address``) column, with optional ``scope``
  and ``reason`` columns (empty cells take the command's ``--scope``/``--reason``); other
  columns, as exports from other tools carry them, are ignored;
- a plain list: one address per line, ``#`` comments and blank lines ignored.

The whole file is read and checked before anything is written: one bad row refuses the import
(all-or-nothing), and every bad row is reported, each with ``FILE:LINE``, so one pass fixes
them all. The same mailbox listed twice in one scope (any spelling) is a duplicate, not an
error: the first row's reason is kept.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from campaigns.errors import CampaignError
from campaigns.suppression import SuppressionError, check_reason, identity_of, parse_scope

ADDRESS_COLUMNS: Final = ("email", "address")
MAX_LISTED: Final = 1000  # problems kept for the report; more are only counted


class SuppressionFileError(SuppressionError):
    """The file cannot be imported; ``problems`` has one error per bad row (file and line)."""

    def __init__(self, message: str, *, file: str, problems: Sequence[CampaignError] = ()) -> None:
        super().__init__(message, file=file)
        self.problems = list(problems)


@dataclass(frozen=True)
class Entry:
    line: int
    mailbox: str
    scope: str
    reason: str


@dataclass
class SuppressionFile:
    """What a file holds once every row passed."""

    name: str
    entries: list[Entry] = field(default_factory=list)
    duplicates: int = 0  # rows naming a mailbox (and scope) an earlier row named


def read_suppression_file(path: Path, *, scope: str, reason: str) -> SuppressionFile:
    """Read and check ``path``; SuppressionFileError listing every bad row, if any.

    ``scope`` and ``reason`` are the defaults for rows that do not give their own; they are
    checked first (a bad default is one error, not one per row).
    """
    default_scope, default_reason = parse_scope(scope), check_reason(reason)
    name = str(path)
    result = SuppressionFile(name)
    problems: list[CampaignError] = []
    failed = listed = 0  # bad rows; of them, listed in ``problems`` (which _rows adds to)
    seen: set[tuple[str, str]] = set()
    for line, cells in _rows(_read_text(path), name, problems):
        try:
            entry = _entry(cells, default_scope, default_reason)
        except SuppressionError as error:
            failed += 1
            if len(problems) < MAX_LISTED:
                listed += 1
                problems.append(CampaignError(error.message, file=name, line=line, hint=error.hint))
            continue
        if (entry.mailbox, entry.scope) in seen:
            result.duplicates += 1
            continue
        seen.add((entry.mailbox, entry.scope))
        result.entries.append(Entry(line, entry.mailbox, entry.scope, entry.reason))
    total = failed + len(problems) - listed
    if problems:
        raise SuppressionFileError(
            f"{total} problem(s); nothing was imported", file=name, problems=problems
        )
    if not result.entries:
        raise SuppressionFileError("no addresses in the file; nothing was imported", file=name)
    return result


def _read_text(path: Path) -> str:
    name = str(path)
    try:
        if not path.exists():
            raise SuppressionError("no such file", file=name)
        if not path.is_file():  # a directory, a FIFO, a device: nothing to import
            raise SuppressionError("not a regular file", file=name)
        data = path.read_bytes()
    except OSError as error:
        raise SuppressionError(f"cannot read the file: {error.strerror}", file=name) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        problem = CampaignError("not UTF-8 text", file=name, line=line, hint="save it as UTF-8")
        raise SuppressionFileError(
            "the file is not UTF-8; nothing was imported", file=name, problems=[problem]
        ) from None


# A row of the file: its first line, and the cells it gives ("email", "scope", "reason").
Row = tuple[int, dict[str, str]]


def _rows(text: str, name: str, problems: list[CampaignError]) -> Iterator[Row]:
    """The rows with their first line.

    The first line that is neither blank nor a comment decides the shape: a CSV header
    naming the address column, or else a plain list. A plain list is read line by line, never
    as CSV, so a quoted local part (``"a,b"@example.com``) keeps its quotes.
    """
    # Lines end at LF (CRLF too), as editors and the CSV reader count them; str.splitlines
    # would also break at U+2028, a form feed…, and the line numbers would disagree.
    lines = [raw.removesuffix("\r") for raw in text.split("\n")]
    first = next(
        (i for i, raw in enumerate(lines) if raw.strip() and not raw.lstrip().startswith("#")),
        None,
    )
    if first is None:
        return
    columns = _header(next(csv.reader([lines[first]]), []))
    if columns is None:
        for number, raw in enumerate(lines, start=1):
            if raw.strip() and not raw.lstrip().startswith("#"):
                yield number, {"email": raw}
        return
    yield from _csv_rows(text, columns, first + 1, name, problems)


def _csv_rows(
    text: str, columns: dict[str, int], header_line: int, name: str, problems: list[CampaignError]
) -> Iterator[Row]:
    """The data rows after the header line; a row the CSV reader cannot read ends the file (its
    quoting is lost from there on) with a problem at that line."""
    reader = csv.reader(io.StringIO(text, newline=""))
    start = 1
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            problems.append(CampaignError(f"unreadable CSV: {error}", file=name, line=start))
            return
        line, start = start, reader.line_num + 1
        if line <= header_line or not any(cell.strip() for cell in cells):
            continue  # the header (and anything before it), or a blank line
        yield (
            line,
            {
                column: cells[index] if index < len(cells) else ""
                for column, index in columns.items()
            },
        )


def _header(cells: list[str]) -> dict[str, int] | None:
    """Column positions if ``cells`` is a header row naming the address column, else None."""
    names = [cell.strip().lower() for cell in cells]
    address = next((names.index(n) for n in ADDRESS_COLUMNS if n in names), None)
    if address is None:
        return None
    columns = {"email": address}
    for column in ("scope", "reason"):
        if column in names:
            columns[column] = names.index(column)
    return columns


def _entry(cells: dict[str, str], scope: str, reason: str) -> Entry:
    address = cells["email"]
    if not address.strip():
        raise SuppressionError("the address is empty")
    mailbox = identity_of(address)
    if cells.get("scope", "").strip():
        scope = parse_scope(cells["scope"])
    if cells.get("reason", "").strip():
        reason = check_reason(cells["reason"])
    return Entry(0, mailbox, scope, reason)
