"""Audience data formats: CSV, a JSON array of objects, NDJSON; one rule set for files and URLs.

Each parser reads a text stream incrementally and yields, in order, a Recipient for each good
row and a RowProblem (position and reason) for each bad one: a bad row never stops the stream
and is never dropped silently. Only data that cannot be read at all (no header, broken JSON
syntax, a line beyond the length cap) raises AudienceError, because nothing after it can be
trusted.

Positions: CSV and NDJSON rows are numbered by the line they start on (1-based, a CSV header
is line 1); elements of a JSON array by their 1-based index in the array, which is what an
operator can find in a file that may be a single line (``unit`` says which).

Row rules are the same whatever the format: a case-insensitive 'email' key (exactly one) with
a valid address, an optional 'name' without line breaks, and every key/column becoming a text
template variable. In JSON, numbers, booleans and null become text as JSON spells them
(null is ''); a nested object or list is a row problem, not a variable.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, TextIO, cast

from campaigns.addresses import AddressError, normalise_address
from campaigns.errors import AudienceError, excerpt
from templates.header_values import header_value_problem

if TYPE_CHECKING:
    from _csv import Reader as CsvReader

Format = Literal["csv", "json", "ndjson"]
FORMATS: Final[tuple[Format, ...]] = ("csv", "json", "ndjson")
Unit = Literal["line", "element"]

EMAIL_COLUMN = "email"
NAME_COLUMN = "name"
MAX_RECORD_CHARS: Final = 1024 * 1024  # one NDJSON line or one JSON array element
_READ_CHARS: Final = 64 * 1024


@dataclass(frozen=True)
class Recipient:
    email: str  # normalised
    name: str | None
    variables: dict[str, str]  # every column/key as text, the address as written under 'email'
    line: int  # CSV/NDJSON line (1-based), YAML line of an inline item, or JSON array index
    unit: Unit = "line"

    @property
    def where(self) -> str:
        return f"{self.unit} {self.line}"


@dataclass(frozen=True)
class RowProblem:
    line: int
    reason: str  # e.g. "invalid address 'bob@': domain is empty"
    unit: Unit = "line"

    @property
    def where(self) -> str:
        return f"{self.unit} {self.line}"


def parse_stream(
    format: Format, stream: TextIO, *, source: str
) -> Iterator[Recipient | RowProblem]:
    """The rows of ``stream`` in ``format``; ``source`` names it in errors (path or URL)."""
    if format == "csv":
        return iter_csv(stream, source)
    if format == "json":
        return iter_json_array(stream, source)
    return iter_ndjson(stream, source)


def newline_mode(format: Format) -> str | None:
    """How to open a text stream for ``format``: CSV needs the line ends it was given."""
    return "" if format == "csv" else None


# --- CSV -------------------------------------------------------------------------------------


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
            found = _listing([name for name in names if name]) or "none"
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
            listed = _listing(repeated)
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
        checked = _address_and_name(
            cells[self.email_index],
            None if self.name_index is None else cells[self.name_index],
        )
        if isinstance(checked, str):
            return RowProblem(line, checked)
        email, name = checked
        variables = {column: cell for column, cell in zip(self.names, cells, strict=True) if column}
        return Recipient(email=email, name=name, variables=variables, line=line)


def _listing(names: list[str], most: int = 5) -> str:
    """A few column names for a message: a header row may be anything (even a secret file)."""
    shown = ", ".join(excerpt(name, 30) for name in names[:most])
    return shown + (f", … ({len(names)} in all)" if len(names) > most else "")


def iter_csv(stream: TextIO, source: str) -> Iterator[Recipient | RowProblem]:
    """CSV rows; ``stream`` must be opened with ``newline=''`` (quoted fields may hold them)."""
    return cast(Iterator[Recipient | RowProblem], iter_csv_share(stream, source, None))


def iter_csv_share(
    stream: TextIO, source: str, wanted: Callable[[int], bool] | None
) -> Iterator[Recipient | RowProblem | None]:
    """``iter_csv``, but a row whose position (1-based, as the check counts) ``wanted`` refuses
    comes out as None, unchecked: another process checks it (scheduler.check_pool). A row is
    still parsed, since a quoted field may hold line breaks: where it ends is known only then.
    """
    reader = csv.reader(stream)
    try:
        yield from _csv_rows(reader, source, wanted)
    except UnicodeDecodeError as error:
        raise AudienceError(
            f"the data is not valid {error.encoding.upper().replace('-SIG', '')}",
            file=source,
            line=reader.line_num + 1,
        ) from None
    except csv.Error as error:
        raise AudienceError(f"malformed CSV: {error}", file=source, line=reader.line_num) from None


def _csv_rows(
    reader: CsvReader, file: str, wanted: Callable[[int], bool] | None
) -> Iterator[Recipient | RowProblem | None]:
    columns: _Columns | None = None
    last_line = position = 0
    for cells in reader:
        # A quoted field may span lines: a row starts right after the previous one ended.
        first_line, last_line = last_line + 1, reader.line_num
        if not any(cell.strip() for cell in cells):
            continue  # blank line, or a row of empty cells as spreadsheets export
        if columns is None:
            columns = _Columns.from_header(cells, file=file, line=first_line)
            continue
        position += 1
        if wanted is not None and not wanted(position):
            yield None
            continue
        yield columns.recipient(cells, first_line)
    if columns is None:
        raise AudienceError(
            "the CSV file is empty: expected a header with an 'email' column", file=file
        )


# --- JSON records ----------------------------------------------------------------------------


def _address_and_name(raw_email: str, raw_name: str | None) -> tuple[str, str | None] | str:
    """(normalised address, name) or the reason the row cannot be used."""
    if not raw_email.strip():
        return "email is empty"
    try:
        email = normalise_address(raw_email)
    except AddressError as error:
        return f"invalid address {excerpt(raw_email)}: {error}"
    if raw_name is None:
        return email, None
    if "\r" in raw_name or "\n" in raw_name:
        return "header injection: line break in name"
    # A name is shown in the To header, where no control character may go (the message could
    # never be built), and stored as text, where PostgreSQL takes no NUL: refused here, with
    # its line, rather than at every send or as a database error in a scheduler's pass.
    problem = header_value_problem(raw_name)
    if problem is not None:
        return f"the name holds {problem}, which no To header may"
    return email, raw_name.strip() or None


def _json_text(value: object) -> str | None:
    """A JSON scalar as template text (as JSON spells it); None for an object or a list."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    return None


def recipient_from_record(record: object, position: int, unit: Unit) -> Recipient | RowProblem:
    """One JSON object as a recipient, by the same rules as a CSV row."""
    if not isinstance(record, dict):
        kind = "a list" if isinstance(record, list) else f"{type(record).__name__} value"
        return RowProblem(position, f"expected an object with an 'email' key, got {kind}", unit)
    canonical: dict[str, str] = {}
    variables: dict[str, str] = {}
    for key, value in record.items():
        lowered = key.lower()
        if lowered in (EMAIL_COLUMN, NAME_COLUMN):
            if lowered in canonical:
                reason = f"{excerpt(canonical[lowered])} and {excerpt(key)} both mean {lowered!r}"
                return RowProblem(position, reason, unit)
            canonical[lowered] = key
        text = _json_text(value)
        if text is None:
            reason = f"field {excerpt(key)} must be a plain value, not an object or a list"
            return RowProblem(position, reason, unit)
        variables[lowered if lowered in (EMAIL_COLUMN, NAME_COLUMN) else key] = text
    if EMAIL_COLUMN not in canonical:
        return RowProblem(position, "no 'email' key", unit)
    if not isinstance(record[canonical[EMAIL_COLUMN]], str):
        return RowProblem(position, "email must be text", unit)
    checked = _address_and_name(variables[EMAIL_COLUMN], variables.get(NAME_COLUMN))
    if isinstance(checked, str):
        return RowProblem(position, checked, unit)
    email, name = checked
    return Recipient(email=email, name=name, variables=variables, line=position, unit=unit)


# --- NDJSON ----------------------------------------------------------------------------------


def iter_ndjson(stream: TextIO, source: str) -> Iterator[Recipient | RowProblem]:
    """One JSON object per line; blank lines are skipped, a line that is not JSON is a row
    problem (the next line is still a clean start)."""
    number = 0
    while True:
        line = _read_line(stream, source, number + 1)
        if not line:
            return
        number += 1
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            yield RowProblem(number, f"invalid JSON: {error.msg} (column {error.colno})")
            continue
        yield recipient_from_record(record, number, "line")


def _read_line(stream: TextIO, source: str, number: int) -> str:
    try:
        line = stream.readline(MAX_RECORD_CHARS + 1)
    except UnicodeDecodeError as error:
        raise AudienceError(
            f"the data is not valid {error.encoding.upper()}", file=source, line=number
        ) from None
    if len(line) > MAX_RECORD_CHARS and not line.endswith("\n"):
        raise AudienceError(
            f"line is longer than {MAX_RECORD_CHARS} characters", file=source, line=number
        )
    return line


# --- JSON array ------------------------------------------------------------------------------


def iter_json_array(stream: TextIO, source: str) -> Iterator[Recipient | RowProblem]:
    """A top-level JSON array, parsed one element at a time: memory is one element, not the
    array. An element that is valid JSON but not a usable object is a row problem; broken
    syntax ends the stream with an AudienceError naming the element, since a JSON array has no
    line structure to resume at."""
    for index, element in _ArrayElements(stream, source):
        yield recipient_from_record(element, index, "element")


class _ArrayElements:
    """Incremental splitter: buffer text, ``raw_decode`` one element, drop it, repeat."""

    def __init__(self, stream: TextIO, source: str) -> None:
        self._stream = stream
        self._source = source
        self._buffer = ""
        self._position = 0
        self._eof = False
        self._decoder = json.JSONDecoder()

    def __iter__(self) -> Iterator[tuple[int, object]]:
        if self._next_char() != "[":
            raise self._error("expected a JSON array of objects at the top level", index=None)
        self._position += 1
        index = 0
        if self._next_char() == "]":
            self._position += 1
            self._expect_end()
            return
        while True:
            index += 1
            yield index, self._element(index)
            separator = self._next_char()
            self._position += 1
            if separator == "]":
                self._expect_end()
                return
            if separator != ",":
                found = "the end of the data" if separator == "" else repr(separator)
                raise self._error(f"expected ',' or ']' after the element, found {found}", index)

    def _element(self, index: int) -> object:
        while True:
            self._next_char()
            try:
                value, end = self._decoder.raw_decode(self._buffer, self._position)
            except json.JSONDecodeError as error:
                if self._eof or not self._maybe_truncated(error):
                    raise self._error(f"invalid JSON: {error.msg}", index) from None
                self._read_more(index)
                continue
            # A number at the very end of the buffer may continue in the next chunk.
            if end == len(self._buffer) and not self._eof:
                self._read_more(index)
                continue
            if end - self._position > MAX_RECORD_CHARS:
                raise self._error(f"element is longer than {MAX_RECORD_CHARS} characters", index)
            self._position = end
            return value

    def _maybe_truncated(self, error: json.JSONDecodeError) -> bool:
        """Could more data fix this error? Only if it is at the end of what we have so far.

        An unterminated string is reported at its start, so it always counts as truncated.
        """
        return error.msg.startswith("Unterminated string") or error.pos >= len(self._buffer) - 8

    def _next_char(self) -> str:
        """The next non-whitespace character, reading as needed; '' at the end of the data."""
        while True:
            while self._position < len(self._buffer) and self._buffer[self._position] in " \t\r\n":
                self._position += 1
            if self._position < len(self._buffer):
                return self._buffer[self._position]
            if self._eof:
                return ""
            self._read_more(None)

    def _read_more(self, index: int | None) -> None:
        if self._eof:
            return
        kept = self._buffer[self._position :]
        if len(kept) > MAX_RECORD_CHARS:
            raise self._error(f"element is longer than {MAX_RECORD_CHARS} characters", index)
        try:
            chunk = self._stream.read(_READ_CHARS)
        except UnicodeDecodeError as error:
            raise self._error(f"the data is not valid {error.encoding.upper()}", index) from None
        self._eof = chunk == ""
        self._buffer, self._position = kept + chunk, 0

    def _expect_end(self) -> None:
        if self._next_char() != "":
            raise self._error("unexpected data after the end of the JSON array", index=None)

    def _error(self, message: str, index: int | None) -> AudienceError:
        where = f"element {index}: " if index is not None else ""
        return AudienceError(f"{where}{message}", file=self._source)
