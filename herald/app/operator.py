"""Operator use cases: pause/resume/cancel, recovery, in-doubt resolution, dead letters.

Every change is a guarded transition recorded in ``send_event`` with who did it (``actor``) and
why. Job keys given by the operator are resolved all at once, before anything changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy.engine import Connection, Engine

from campaigns.control import ControlResult
from campaigns.control import change_status as _change_status
from dispatch.key_lookup import KeyPrefixError, match_prefix, normalise_prefix
from dispatch.states import State
from dispatch.store import OutboxStore, RecoveryReport
from dispatch.supersede import superseded_keys
from herald.db import reading
from herald.errors import HeraldError, UsageError

GRACE_SECONDS = 2.0
KEYS_HINT = "`herald in-doubt list` and `herald dead list` show job keys"

Action = Literal["pause", "resume", "cancel"]


@dataclass(frozen=True)
class Changed:
    """What an operator action did to the jobs it was given."""

    changed: list[tuple[int, str]]  # (job id, key)
    # Keys named explicitly that changed nothing: a mistyped key or a stale list.
    missed: list[str] = field(default_factory=list)
    # Of ``missed``: keys left alone because a new campaign version replaced their payload,
    # with the campaign's name.
    superseded: dict[str, str] = field(default_factory=dict)
    # Of ``missed``: keys left alone because `herald prune` dropped their message.
    pruned: list[str] = field(default_factory=list)

    @property
    def keys(self) -> list[str]:
        return [key for _, key in self.changed]


def change_status(engine: Engine, name: str, action: Action, *, actor: str) -> ControlResult:
    """pause / resume / cancel a campaign (cancel also cancels its unsent jobs)."""
    return _change_status(engine, name, action, actor=actor)


def recover(engine: Engine, *, actor: str, grace: float = GRACE_SECONDS) -> RecoveryReport:
    """Recover jobs whose lease expired (database clock): unstarted claims at once, started
    sends only more than ``grace`` seconds ago."""
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        return store.recover(conn, grace_seconds=grace, actor=actor)


def list_jobs(engine: Engine, state: State, campaign: str | None = None) -> list[Any]:
    """The jobs in ``state`` (rows with key, campaign, step, recipient, attempts, reasons)."""
    store = OutboxStore(engine.dialect.name)
    with reading(engine) as conn:
        return store.jobs_in_state(conn, state, campaign=campaign)


def selection(keys: Sequence[str], all_: bool) -> list[str] | None:
    """Keys, or None for every job: exactly one of the two must be given."""
    if keys and all_:
        raise UsageError("give keys or --all, not both")
    if not keys and not all_:
        raise UsageError("name the jobs: one or more KEYs, or --all (optionally with --campaign)")
    return list(keys) or None


def resolve_keys(engine: Engine, keys: Sequence[str] | None) -> list[str] | None:
    """Full keys for the prefixes given (None stays None: every job).

    Each must be 8-64 hex characters naming exactly one job (dispatch.key_lookup): malformed
    or ambiguous is invalid input (UsageError), no such job is a HeraldError (exit 1).
    """
    if keys is None:
        return None
    try:
        prefixes = [normalise_prefix(key) for key in keys]
        with reading(engine) as conn:
            resolved = [match_prefix(conn, prefix) for prefix in prefixes]
    except KeyPrefixError as exc:
        if exc.invalid_input:
            raise UsageError(str(exc), hint=KEYS_HINT) from exc
        raise HeraldError(str(exc), hint=KEYS_HINT) from exc
    return list(dict.fromkeys(resolved))  # the same job named twice is acted on once


def resolve_in_doubt(
    engine: Engine,
    keys: Sequence[str] | None,
    *,
    target: State,
    actor: str,
    why: str = "operator decision",
    campaign: str | None = None,
) -> Changed:
    """Decide in-doubt jobs: ``target`` SENT or FAILED (what is known), or PENDING (resend).

    ``keys`` None: every in-doubt job (of ``campaign``).
    """
    if target not in (State.SENT, State.FAILED, State.PENDING):
        raise UsageError(f"an in-doubt job can become sent, failed or pending, not {target}")
    selected = resolve_keys(engine, keys)
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        changed = store.resolve_in_doubt(
            conn, keys=selected, campaign=campaign, target=target, actor=actor, why=why
        )
        return _changed(conn, selected, changed, rearming=target is State.PENDING)


def retry_dead(
    engine: Engine, keys: Sequence[str] | None, *, actor: str, campaign: str | None = None
) -> Changed:
    """Re-arm failed jobs with fresh attempts. ``keys`` None: every one (of ``campaign``)."""
    selected = resolve_keys(engine, keys)
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        changed = store.retry_dead(conn, keys=selected, campaign=campaign, actor=actor)
        return _changed(conn, selected, changed, rearming=True)


def _changed(
    conn: Connection,
    selected: list[str] | None,
    changed: list[tuple[int, str]],
    *,
    rearming: bool,
) -> Changed:
    if selected is None:
        return Changed(changed)
    done = {key for _, key in changed}
    missed = [key for key in selected if key not in done]
    if not (rearming and missed):
        return Changed(changed, missed)
    refused = superseded_keys(conn, missed)
    pruned = OutboxStore(conn.dialect.name).pruned_keys(conn, missed)
    return Changed(changed, missed, refused, pruned)
