"""URL audiences are snapshotted with the occurrence: fetched once, fanned out from the database.

A remote list changes between two requests, so fanning out straight from the URL would make a
re-run after a crash (or a relaunch) send to a different list than the first run. Instead the
first launch of an occurrence fetches the audience once, through the egress guard, and writes
every row - rejected ones too, with their reason - to ``audience_snapshot`` in batches, one
transaction each, while it downloads (constant memory). Only when the last batch is in is the
snapshot marked complete; fan-out reads only complete snapshots, by position, and a relaunch
reuses one instead of fetching again.

A snapshot left unfinished by a crash is taken over by the next launch (rows deleted, fetched
again): nothing can have been fanned out from it. The campaign's spec hash covers the YAML and
templates, not the remote content, so a changed remote list never blocks a relaunch.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from campaigns.audience import Recipient, RowProblem, iter_audience
from campaigns.audience_formats import Unit
from campaigns.audience_url import AudienceUnavailable, open_url_audience
from campaigns.errors import AudienceError
from campaigns.spec import LoadedCampaign, UrlAudience
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


def url_audience(loaded: LoadedCampaign) -> UrlAudience | None:
    audience = loaded.spec.audience
    return audience if isinstance(audience, UrlAudience) else None


def ensure_snapshot(
    engine: Engine, loaded: LoadedCampaign, occurrence_at: datetime, *, batch: int = SNAPSHOT_BATCH
) -> Snapshot:
    """The occurrence's complete snapshot, fetching the audience now if there is none yet."""
    source = url_audience(loaded)
    if source is None:
        raise ValueError(f"campaign {loaded.spec.name!r} has no URL audience")
    name = loaded.spec.name
    store = SnapshotStore(engine.dialect.name)
    token = uuid.uuid4().hex
    with engine.begin() as conn:
        found = store.begin(conn, name, occurrence_at, token=token, url=source.url)
    if found.complete:
        return Snapshot(
            name, occurrence_at, found.format or "", found.row_count, found.reject_count
        )
    try:
        snapshot = _fetch_into(engine, store, source, name, occurrence_at, token, batch)
    except BaseException:
        # Leave nothing half-written behind (a hard crash can; the next launch takes it over).
        with contextlib.suppress(Exception), engine.begin() as conn:
            store.discard(conn, name, occurrence_at, token=token)
        raise
    return snapshot


def _fetch_into(
    engine: Engine,
    store: SnapshotStore,
    source: UrlAudience,
    name: str,
    occurrence_at: datetime,
    token: str,
    batch: int,
) -> Snapshot:
    rows: list[dict[str, Any]] = []
    total = rejects = batch_rejects = 0
    with open_url_audience(source) as fetched:

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


def _taken_over(source: UrlAudience) -> AudienceUnavailable:
    return AudienceUnavailable(
        "another launch of this occurrence took over its audience snapshot",
        file=source.url,
        hint="run the command again: it reuses the other launch's snapshot once complete",
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
    engine: Engine, loaded: LoadedCampaign, occurrence_at: datetime
) -> Iterator[Recipient | RowProblem]:
    """What an occurrence fans out to: the snapshot for a URL audience, else the source."""
    if url_audience(loaded) is None:
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
