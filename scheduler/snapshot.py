"""Audiences are snapshotted with the occurrence: read once, fanned out from the database.

A remote list changes between two requests, so fanning out straight from the URL would make a
re-run after a crash (or a relaunch) send to a different list than the first run. Instead the
first launch of an occurrence fetches the audience once, through the egress guard, and writes
every row - rejected ones too, with their reason - to ``audience_snapshot`` in batches, one
transaction each, while it downloads (constant memory). Only when the last batch is in is the
snapshot marked complete; fan-out reads only complete snapshots, by position, and a relaunch
reuses one instead of fetching again.

The same holds for the CSV file of a scheduled campaign (``per_occurrence``): its spec hash
leaves the CSV out, since each occurrence reads the list of its day, so the file may change
between a crash and the resumed fan-out; the occurrence's snapshot is what it resumes from. A
launch campaign's CSV is part of its hash (a changed file is refused), so it is read directly.

A snapshot left unfinished by a crash is taken over by the next launch (rows deleted, fetched
again): nothing can have been fanned out from it. A scheduler takes over only a snapshot
nobody has written for ``takeover_after`` seconds: a fresh one is another scheduler's work in
progress (SnapshotBusy), to be reused once complete. The campaign's spec hash covers the YAML
and templates, not the remote content, so a changed remote list never blocks a relaunch.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from campaigns.audience import Recipient, RowProblem, iter_audience
from campaigns.audience_formats import Unit
from campaigns.audience_url import AudienceUnavailable, open_url_audience
from campaigns.errors import AudienceError
from campaigns.spec import CsvAudience, LoadedCampaign, UrlAudience
from scheduler.store import SnapshotStore

SNAPSHOT_BATCH: Final = 1000  # rows per transaction while fetching, and per page when reading


@dataclass(frozen=True)
class Snapshot:
    campaign: str
    occurrence_at: datetime
    format: str
    rows: int  # every row, rejected ones included
    rejects: int

    @property
    def unit(self) -> Unit:
        return "element" if self.format == "json" else "line"


class SnapshotBusy(Exception):
    """Another process is writing this occurrence's snapshot right now: try again later."""


def url_audience(loaded: LoadedCampaign) -> UrlAudience | None:
    audience = loaded.spec.audience
    return audience if isinstance(audience, UrlAudience) else None


def snapshotted(loaded: LoadedCampaign, *, per_occurrence: bool = False) -> bool:
    """Whether an occurrence fans out from a snapshot: a URL audience always; a CSV audience
    when each occurrence reads its own list (``per_occurrence``: a scheduled trigger)."""
    audience = loaded.spec.audience
    return isinstance(audience, UrlAudience) or (
        per_occurrence and isinstance(audience, CsvAudience)
    )


@dataclass(frozen=True)
class _Read:
    format: str
    items: Iterator[Recipient | RowProblem]


def _open_source(loaded: LoadedCampaign) -> AbstractContextManager[_Read]:
    source = url_audience(loaded)
    if source is not None:
        return _fetched(source)
    # A CSV file (iter_audience opens it now: a missing file is reported before any write).
    return contextlib.nullcontext(_Read("csv", iter_audience(loaded)))


@contextlib.contextmanager
def _fetched(source: UrlAudience) -> Iterator[_Read]:
    with open_url_audience(source) as fetched:
        yield _Read(fetched.format, fetched.items)


def _written(loaded: LoadedCampaign) -> str:
    """The source as the campaign wrote it (a URL's credentials live in headers, not here)."""
    audience = loaded.spec.audience
    if isinstance(audience, UrlAudience):
        return audience.url
    if isinstance(audience, CsvAudience):
        return audience.csv
    raise ValueError(f"campaign {loaded.spec.name!r} has no URL or CSV audience")


def ensure_snapshot(
    engine: Engine,
    loaded: LoadedCampaign,
    occurrence_at: datetime,
    *,
    batch: int = SNAPSHOT_BATCH,
    takeover_after: float | None = None,
    written: Callable[[list[dict[str, Any]]], None] | None = None,
) -> Snapshot:
    """The occurrence's complete snapshot, reading the audience now if there is none yet.

    ``takeover_after``: take over an unfinished snapshot only if nobody wrote to it for that
    many seconds (raises SnapshotBusy otherwise); None takes it over at once (a launch).
    ``written``: told each batch of rows once it is in the snapshot, in order, if the snapshot
    is read now (scheduler.occurrence_pool keeps a copy; never told when one is reused).
    """
    source = _written(loaded)
    name = loaded.spec.name
    store = SnapshotStore(engine.dialect.name)
    token = uuid.uuid4().hex
    with engine.begin() as conn:
        found = store.begin(
            conn, name, occurrence_at, token=token, url=source, stale_after=takeover_after
        )
    if found.complete:
        return Snapshot(
            name, occurrence_at, found.format or "", found.row_count, found.reject_count
        )
    if found.token != token:
        raise SnapshotBusy(f"the audience of {name!r} at {occurrence_at.isoformat()} is being read")
    try:
        snapshot = _fetch_into(engine, store, loaded, name, occurrence_at, token, batch, written)
    except BaseException:
        # Leave nothing half-written behind (a hard crash can; the next launch takes it over).
        with contextlib.suppress(Exception), engine.begin() as conn:
            store.discard(conn, name, occurrence_at, token=token)
        raise
    return snapshot


def _fetch_into(
    engine: Engine,
    store: SnapshotStore,
    loaded: LoadedCampaign,
    name: str,
    occurrence_at: datetime,
    token: str,
    batch: int,
    written: Callable[[list[dict[str, Any]]], None] | None,
) -> Snapshot:
    rows: list[dict[str, Any]] = []
    total = rejects = batch_rejects = 0
    source = _written(loaded)
    with _open_source(loaded) as fetched:

        def flush() -> None:
            nonlocal batch_rejects
            with engine.begin() as conn:
                owned = store.append(
                    conn,
                    name,
                    occurrence_at,
                    token=token,
                    format=fetched.format,
                    rows=rows,
                    rejects=batch_rejects,
                )
            if not owned:
                raise _taken_over(source)
            if written is not None and rows:
                written(rows)
            rows.clear()
            batch_rejects = 0

        for item in fetched.items:
            total += 1
            rows.append(_row(total, item))
            if isinstance(item, RowProblem):
                rejects += 1
                batch_rejects += 1
            if len(rows) >= batch:
                flush()
        flush()  # also records the format of an empty audience
        with engine.begin() as conn:
            if not store.complete(conn, name, occurrence_at, token=token):
                raise _taken_over(source)
        return Snapshot(name, occurrence_at, fetched.format, total, rejects)


def _taken_over(source: str) -> AudienceUnavailable:
    return AudienceUnavailable(
        "another launch or scheduler took over this occurrence's audience snapshot",
        file=source,
        hint="run the command again: it reuses the other one's snapshot once complete",
    )


def _row(position: int, item: Recipient | RowProblem) -> dict[str, Any]:
    # Every row has every key: a batch is one executemany.
    if isinstance(item, RowProblem):
        return {
            "position": position,
            "line": item.line,
            "email": None,
            "name": None,
            "variables": None,
            "problem": item.reason,
        }
    return {
        "position": position,
        "line": item.line,
        "email": item.email,
        "name": item.name,
        "variables": json.dumps(item.variables, ensure_ascii=False, separators=(",", ":")),
        "problem": None,
    }


def iter_snapshot(
    engine: Engine,
    snapshot: Snapshot,
    *,
    page: int = SNAPSHOT_BATCH,
    conn: sa.Connection | None = None,
) -> Iterator[Recipient | RowProblem]:
    """The snapshot's rows in source order, one short read per page (no long transaction).

    ``conn``: read through the caller's open transaction instead (a new version's fan-out, which
    on SQLite holds the write lock that a second connection would wait for).
    """
    store = SnapshotStore(engine.dialect.name)
    unit = snapshot.unit
    after = 0
    while True:
        with contextlib.nullcontext(conn) if conn is not None else engine.connect() as reader:
            rows = store.page(
                reader, snapshot.campaign, snapshot.occurrence_at, after=after, limit=page
            )
        for row in rows:
            if row.problem is not None:
                yield RowProblem(row.line, row.problem, unit)
            else:
                variables = json.loads(row.variables)
                yield Recipient(row.email, row.name, variables, row.line, unit)
        if len(rows) < page:
            return
        after = rows[-1].position


def audience_for_occurrence(
    engine: Engine, loaded: LoadedCampaign, occurrence_at: datetime, *, per_occurrence: bool = False
) -> Iterator[Recipient | RowProblem]:
    """What an occurrence fans out to: its snapshot if it has one (see ``snapshotted``), else
    the source."""
    if not snapshotted(loaded, per_occurrence=per_occurrence):
        return iter_audience(loaded)
    return iter_snapshot(engine, ensure_snapshot(engine, loaded, occurrence_at))


def refuse_strict_rejects(loaded: LoadedCampaign, snapshot: Snapshot) -> None:
    """``strict: true`` (the default): a snapshot with rejected rows is not launched."""
    source = url_audience(loaded)
    if source is None or not source.strict or snapshot.rejects == 0:
        return
    raise AudienceError(
        f"{snapshot.rejects} invalid row(s) in the audience; nothing was launched",
        file=source.url,
        field="audience.strict",
        hint="fix the rows, or set strict: false to launch the valid ones and record the rest",
    )


def discard_unused_snapshot(engine: Engine, campaign: str, occurrence_at: datetime) -> None:
    """Forget a snapshot a refused launch made, so the next launch fetches a fixed list.

    Kept once anything has been fanned out from it: then it is the record of who was sent to.
    """
    with engine.begin() as conn:
        SnapshotStore(engine.dialect.name).discard_unused(conn, campaign, occurrence_at)
