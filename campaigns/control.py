"""Campaign control: register a launch, pause, resume, cancel.

A campaign name is bound to one spec. Launching the same spec again is a no-op that reports zero
new jobs; launching a *changed* spec under the same name is refused unless the operator asks for
a new version explicitly, which keeps every already-sent key sent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from campaigns.errors import CampaignError
from campaigns.store import CampaignRow, CampaignStore
from dispatch.rates import campaign_key
from dispatch.store import OutboxStore

if TYPE_CHECKING:
    from campaigns.spec import LoadedCampaign


class CampaignConflict(CampaignError):
    """A different spec is already stored under this campaign name."""


class CampaignNotFound(CampaignError):
    """No campaign has this name."""


class CampaignStateError(CampaignError):
    """The campaign's status does not allow this operation."""


@dataclass(frozen=True)
class Registration:
    campaign: CampaignRow
    created: bool
    new_version: bool


#: Called inside the transaction that stores a new version, with the new row: whatever it
#: writes (the new version's jobs, the old ones superseded) commits or rolls back with it.
OnNewVersion = Callable[[sa.Connection, CampaignRow], None]


def register(
    engine: Engine,
    loaded: LoadedCampaign,
    *,
    now: datetime,
    force_new_version: bool = False,
    on_new_version: OnNewVersion | None = None,
) -> Registration:
    """Store the campaign (idempotent): its definition, the file it came from (a scheduler
    re-reads audience and templates there for each occurrence) and its trigger's kind.

    ``now`` becomes ``launched_at``: the launch occurrence, or for a scheduled trigger the
    registration time (a cron schedule never fires at or before it).
    """
    store = CampaignStore(engine.dialect.name)
    name = loaded.spec.name
    spec_text = loaded.source.decode("utf-8", errors="replace")
    source_path = str(loaded.path)
    trigger = loaded.spec.trigger
    with engine.begin() as conn:
        row, created = store.insert_if_new(
            conn,
            name=name,
            spec=spec_text,
            spec_hash=loaded.spec_hash,
            launched_at=now,
            source_path=source_path,
            trigger=trigger,
        )
        # The definition that ends up stored (this one, or a conflict rolls it all back) sets
        # the limit every worker shares.
        rate = None if loaded.spec.rate is None else loaded.spec.rate.per_second
        OutboxStore(engine.dialect.name).set_rates(conn, {campaign_key(name): rate})
        if row.spec_hash == loaded.spec_hash:
            if not created and row.source_path != source_path:
                # The same definition from another place (its folder moved): read it there.
                store.set_source(conn, name, source_path=source_path, spec_hash=row.spec_hash)
                row = store.get(conn, name) or row
            return Registration(row, created=created, new_version=False)
        if row.status == "cancelled":
            raise CampaignStateError(
                f"campaign {name!r} was cancelled",
                file=str(loaded.path),
                hint="launch it under a new name",
            )
        if not force_new_version:
            raise CampaignConflict(
                f"campaign {name!r} was already launched with a different definition "
                f"(version {row.version})",
                file=str(loaded.path),
                field="name",
                hint="give the changed campaign a new name, or pass --force-new-version to "
                "update it: messages already sent stay sent, unsent ones get the new content",
            )
        if not store.new_version(
            conn,
            name=name,
            spec=spec_text,
            spec_hash=loaded.spec_hash,
            expected_hash=row.spec_hash,
            source_path=source_path,
            trigger=trigger,
        ):
            raise CampaignConflict(
                f"campaign {name!r} changed while launching", hint="run the command again"
            )
        updated = store.get(conn, name)
        assert updated is not None
        if on_new_version is not None:
            on_new_version(conn, updated)
        return Registration(updated, created=False, new_version=True)


_TRANSITIONS = {
    "pause": ("paused", ("active",)),
    "resume": ("active", ("paused",)),
    "cancel": ("cancelled", ("active", "paused")),
}


@dataclass(frozen=True)
class ControlResult:
    name: str
    previous: str
    status: str
    cancelled_jobs: int = 0
    # Why the campaign had paused itself, when this change ended an automatic pause.
    cleared_reason: str | None = None


def change_status(engine: Engine, name: str, action: str, *, actor: str) -> ControlResult:
    """pause / resume / cancel. Cancelling also cancels every job not yet past T4 (T10)."""
    status, allowed = _TRANSITIONS[action]
    store = CampaignStore(engine.dialect.name)
    outbox = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        current = store.get(conn, name)
        if current is None:
            raise CampaignNotFound(
                f"no campaign named {name!r}", hint="`herald status` lists campaigns"
            )
        previous = store.set_status(conn, name, status, allowed_from=allowed)
        if previous is None:
            raise CampaignStateError(f"cannot {action} campaign {name!r}: it is {current.status}")
        cancelled = outbox.cancel_campaign(conn, name, actor=actor) if action == "cancel" else 0
    return ControlResult(name, previous, status, cancelled, current.pause_reason)
