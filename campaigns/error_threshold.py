"""A campaign that keeps failing pauses itself (``pause_on_errors:``, ``campaigns.spec_pause``).

A blacklisted sender or a relay that rejects the content fails every recipient the same way;
without a brake the workers burn the whole audience in minutes. ``ErrorThreshold`` is the
worker's ``dispatch.failure_watch.FailureWatch``: after a completion batch that recorded
permanent failures, in the same transaction, it looks at each affected campaign's recent sends
with one aggregate query and pauses the campaign when too many failed. Its jobs not yet started
stay ``pending`` (the T4 guard lets only active campaigns' jobs start; claimed ones go back), so
after ``herald resume`` they are sent as if nothing happened.

The window is the campaign's last ``over`` finished sends (``sent`` or ``failed``), counting
only outcomes recorded after the campaign row last changed (``campaign.updated_at``: a resume,
a pause, a new version). So a resume starts a fresh window: the failures that caused the pause
do not pause it again at once.

Several workers: the campaign row is locked (PostgreSQL) while it is judged, so a resume or
another worker's pause cannot slip in between the count and the pause; the pause itself is
conditional on the campaign still being active, so it happens once. A worker's count sees what
other workers have committed: two batches committing at the same moment may each miss the
other's failures, and then the next failing batch pauses the campaign.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from campaigns.models import CampaignStatus, campaign_table

# Imported with the worker, not at a campaign's first failure: there the import (pydantic,
# PyYAML: about 0.3 s cold) ran inside the failing batch's transaction, holding the campaign's
# row lock and the commit lane while the other workers went on failing sends, so the brake
# came late (28 failures against a bound of 25 in a clean-clone run).
from campaigns.spec_pause import DEFAULT_PAUSE_ON_ERRORS, PauseOnErrors, pause_setting
from campaigns.yaml_loader import load_yaml
from dbtypes import db_now
from dispatch.models import send_job
from dispatch.states import State

C = campaign_table.c
J = send_job.c

log = logging.getLogger("herald.campaigns")

_REASON_TEXT = 120  # characters of the most common failure quoted in the reason


@dataclass(frozen=True)
class Window:
    """A campaign's recent finished sends, as counted."""

    finished: int
    failed: int

    def exceeds(self, setting: PauseOnErrors) -> bool:
        return self.failed >= setting.min and self.failed > setting.ratio * self.finished


class ErrorThreshold:
    """Pauses campaigns whose recent permanent failures exceed their ``pause_on_errors``.

    One instance per worker; it runs only on the worker's database thread. It remembers each
    spec's setting by spec hash, so the stored YAML is parsed once per campaign version.
    """

    def __init__(self) -> None:
        self._settings: dict[str, PauseOnErrors | None] = {}

    def after_failures(self, conn: sa.Connection, job_ids: Sequence[int]) -> None:
        campaigns = sa.select(J.campaign).where(J.id.in_(list(job_ids))).distinct()
        stmt = (
            sa.select(C.name, C.spec_hash, C.updated_at)
            .where(C.name.in_(campaigns), C.status == CampaignStatus.ACTIVE.value)
            .order_by(C.name)  # one lock order for every worker
            .with_for_update()  # PostgreSQL: no resume between the count and the pause
        )
        for name, spec_hash, since in conn.execute(stmt).all():
            setting = self._setting(conn, name, spec_hash)
            if setting is None:
                continue
            window = recent_window(conn, name, since, setting.over)
            if window.exceeds(setting):
                reason = pause_reason(window, most_common_failure(conn, name, since, setting))
                pause_for_errors(conn, name, reason)
                log.warning(
                    "campaign %s %s",
                    name,
                    reason,
                    extra={"event": "campaign_paused", "campaign": name, "reason": reason},
                )

    def _setting(self, conn: sa.Connection, name: str, spec_hash: str) -> PauseOnErrors | None:
        if spec_hash not in self._settings:
            spec = conn.execute(sa.select(C.spec).where(C.name == name)).scalar_one()
            self._settings[spec_hash] = stored_setting(spec)
        return self._settings[spec_hash]


def stored_setting(spec_text: str) -> PauseOnErrors | None:
    """The ``pause_on_errors`` of a stored (already validated) spec; the default if the text
    cannot be read back, since a brake that fails open is the one that matters."""
    try:
        data = load_yaml(spec_text, file="stored spec").data
        if not isinstance(data, dict):
            return DEFAULT_PAUSE_ON_ERRORS
        value = data.get("pause_on_errors", DEFAULT_PAUSE_ON_ERRORS)
        setting = pause_setting(value)
        return setting if setting is None else PauseOnErrors.model_validate(setting)
    except Exception:  # validated at launch; a stored spec that no longer parses keeps the brake
        return DEFAULT_PAUSE_ON_ERRORS


def _finished_since(name: str, since: object) -> list[sa.ColumnElement[bool]]:
    return [
        J.campaign == name,
        J.state.in_([State.SENT.value, State.FAILED.value]),
        J.outcome_at > since,
    ]


def recent_window(conn: sa.Connection, name: str, since: object, over: int) -> Window:
    """One aggregate query: of the last ``over`` sends finished after ``since``, how many."""
    last = (
        sa.select(J.state)
        .where(*_finished_since(name, since))
        .order_by(J.outcome_at.desc(), J.id.desc())
        .limit(over)
        .subquery()
    )
    failed = sa.func.coalesce(
        sa.func.sum(sa.case((last.c.state == State.FAILED.value, 1), else_=0)), 0
    )
    finished, failures = conn.execute(sa.select(sa.func.count(), failed)).one()
    return Window(int(finished), int(failures))


def most_common_failure(
    conn: sa.Connection, name: str, since: object, setting: PauseOnErrors
) -> str | None:
    """The commonest failure among the window's failures (read only when pausing)."""
    rows = conn.execute(
        sa.select(J.outcome_code, J.outcome_text)
        .where(*_finished_since(name, since), J.state == State.FAILED.value)
        .order_by(J.outcome_at.desc(), J.id.desc())
        .limit(setting.over)
    ).all()
    counted = Counter(_describe(code, text) for code, text in rows)
    return counted.most_common(1)[0][0] if counted else None


def _describe(code: int | None, text: str | None) -> str:
    words = " ".join((text or "").split())  # one line, whatever the server sent
    if code is not None and not words.startswith(str(code)):
        words = f"{code} {words}".strip()
    if len(words) > _REASON_TEXT:
        words = words[: _REASON_TEXT - 1].rstrip() + "…"
    return words or "no reply text"


def pause_reason(window: Window, common: str | None) -> str:
    text = (
        f"paused automatically: {window.failed} of the last {window.finished} sends failed "
        "permanently"
    )
    return f"{text} (most common: {common})" if common else text


def pause_for_errors(conn: sa.Connection, name: str, reason: str) -> bool:
    """Pause an active campaign, saying why; False if it is no longer active."""
    result = conn.execute(
        sa.update(campaign_table)
        .where(C.name == name, C.status == CampaignStatus.ACTIVE.value)
        .values(status=CampaignStatus.PAUSED.value, pause_reason=reason, updated_at=db_now())
    )
    return result.rowcount == 1
