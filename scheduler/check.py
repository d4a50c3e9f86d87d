"""``herald validate``: render every step for every recipient and list every failure.

A misspelt variable is caught before anything is sent, not at recipient 40,000. Webhook URLs
are checked against the operator's egress policy without a DNS lookup (the worker resolves,
under the guard, when it sends).

Without an engine nothing is written anywhere, and a URL audience is fetched live. ``launch``
passes its engine: a URL audience is then snapshotted for the occurrence (fetched once, see
scheduler.snapshot) and checked from the snapshot, which fan-out then reuses. Rows a URL
audience rejects are problems under ``strict: true`` (the default); under ``strict: false``
they are counted and listed as ``rejects`` and do not fail the check. A failed check forgets
the snapshot it made (unless something was already fanned out from it), so the next launch
fetches the fixed source instead of re-reading the refused list.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime

from sqlalchemy.engine import Engine

from campaigns.audience import (
    MailboxDeduper,
    Recipient,
    RowProblem,
    iter_audience,
    iter_audience_share,
)
from campaigns.spec import LoadedCampaign
from dispatch.egress import EgressDenied, EgressPolicy, check_url
from dispatch.store import NewJob
from scheduler.check_places import SpecPlaces
from scheduler.check_places import check_header_variables as _check_header_variables
from scheduler.check_pool import CheckPool, Row, Shares, check_in_processes
from scheduler.check_report import MAX_LISTED_PROBLEMS, CheckReport, Problem
from scheduler.compose import (
    CompiledStep,
    CompiledWebhook,
    CompileFailures,
    compile_steps,
    compose_broadcast,
)
from scheduler.planning import Planner
from scheduler.snapshot import (
    discard_unused_snapshot,
    ensure_snapshot,
    iter_snapshot,
    url_audience,
)
from scheduler.spool import JobSpool
from scheduler.unsubscribe_links import UnsubscribeLinks
from templates.errors import TemplateError

# Re-exported: the report types live in scheduler.check_report, which check_places uses too.
__all__ = ["MAX_LISTED_PROBLEMS", "CheckReport", "Problem", "check_campaign"]


def check_campaign(
    loaded: LoadedCampaign,
    occurrence_at: datetime,
    *,
    progress: Callable[[int], None] | None = None,
    engine: Engine | None = None,
    environ: Mapping[str, str] | None = None,
    count_duplicates: bool = True,
    spool: JobSpool | None = None,
    require_recipients: bool = True,
    links: UnsubscribeLinks | None = None,
    only: Callable[[Recipient], bool] | None = None,
    on_job: Callable[[NewJob], None] | None = None,
    pool: CheckPool | None = None,
) -> CheckReport:
    """Render everything; ``count_duplicates=False`` (launch) keeps memory flat in audience
    size — the outbox's unique key makes a duplicate address a no-op anyway.

    With a ``spool`` (launch), every composed job is kept in it for fan-out, which then does
    not compose it again; the spool is marked complete when the check passes.
    ``require_recipients=False`` (a scheduled or enrollment campaign: the list of a later
    occurrence, or later enrollments, may fill it) accepts an empty audience.
    ``links``: the unsubscribe links of marketing messages (scheduler.unsubscribe_links).
    """
    if spool is not None and count_duplicates:
        raise ValueError("a spool needs every row composed: pass count_duplicates=False")
    report = CheckReport()
    env = os.environ if environ is None else environ
    places = SpecPlaces(loaded)
    _check_header_variables(places, report, env)
    if not report.ok:
        return report  # before any request is made with those headers
    try:
        steps = compile_steps(loaded, links)
    except CompileFailures as exc:
        for failure in exc.failures:
            report.add(places.step_problem(failure.step, failure.error))
        return report
    _check_webhook_urls(steps, places, report, env)
    source = url_audience(loaded)
    data_file = places.data_file()
    strict = source is None or source.strict

    def row_check(steps: list[CompiledStep]) -> _RowCheck:
        return _RowCheck(
            loaded,
            steps,
            places,
            occurrence_at,
            strict=strict,
            data_file=data_file,
            count_duplicates=count_duplicates,
            only=only,
            on_job=on_job,
        )

    checked = None
    # A file audience read afresh by each process; ``only`` and ``on_job`` need the caller's
    # own process, so they stay sequential.
    shared = only is None and on_job is None and report.ok
    if pool is not None and spool is not None and shared and pool.takes(loaded):
        try:
            # Steps of its own: a render limit reached in the parent's share is remembered by
            # its environment (templates.guarded_render), and must not fail the rows before it
            # when one process checks again.
            pooled = row_check(compile_steps(loaded, links))
        except CompileFailures:
            pooled = None  # a template file changed meanwhile: one process, steps as compiled
        if pooled is not None:
            checked = check_in_processes(
                pool,
                spool,
                Shares[Row](lambda wanted: iter_audience_share(loaded, wanted), pooled.check),
                progress,
            )
    rows = row_check(steps)
    if checked is None:
        for position, item in enumerate(_audience(loaded, occurrence_at, engine), start=1):
            if rows.check(spool, report, position, item) and progress is not None:
                progress(1)
    else:
        report = checked  # ``report`` held nothing yet: no problem, no row
    if report.recipients == 0 and report.problem_count == 0 and require_recipients:
        report.add(
            Problem(
                "audience",
                None,
                "the audience is empty: nobody would be sent to",
                file=data_file,
                field="audience",
                spec_at=places.at(("audience",)),
            )
        )
    if spool is not None:
        spool.complete = report.ok
    if engine is not None and source is not None and not report.ok:
        # Refused: a fixed source must be fetched afresh, not read back from this snapshot.
        discard_unused_snapshot(engine, loaded.spec.name, occurrence_at)
    return report


class _RowCheck:
    """The check of one audience row: every step composed for its recipient, each failure a
    problem in ``report``, each job kept in ``spool`` while the report is clean. One instance
    serves the whole audience, in one process or in several (scheduler.check_pool)."""

    def __init__(
        self,
        loaded: LoadedCampaign,
        steps: list[CompiledStep],
        places: SpecPlaces,
        occurrence_at: datetime,
        *,
        strict: bool,
        data_file: str,
        count_duplicates: bool,
        only: Callable[[Recipient], bool] | None,
        on_job: Callable[[NewJob], None] | None,
    ) -> None:
        self.loaded = loaded
        self.steps = steps
        self.places = places
        self.occurrence_at = occurrence_at
        self.strict = strict
        self.data_file = data_file
        self.only = only
        self.on_job = on_job
        self.seen = MailboxDeduper() if count_duplicates else None
        self.planner = Planner(loaded.spec)

    def check(
        self,
        spool: JobSpool | None,
        report: CheckReport,
        position: int,
        item: Recipient | RowProblem,
    ) -> bool:
        """Whether the row was a recipient to compose for (what the check's progress counts)."""
        if isinstance(item, RowProblem):
            if spool is not None:
                spool.add_problem(position)
            problem = Problem(item.where, None, item.reason, file=self.data_file)
            if self.strict:
                report.add(problem)
            else:
                report.reject(problem)
            return False
        if self.only is not None and not self.only(item):
            return False
        report.recipients += 1
        if report.first_recipient is None:
            report.first_recipient = item
        if self.seen is not None:
            first = self.seen.first_row_of(item)
            if first is not None:
                report.duplicates += 1
                if len(report.duplicate_rows) < MAX_LISTED_PROBLEMS:
                    where = f"{item.where} ({item.email})"
                    report.duplicate_rows.append((where, first))
                return False
        for index, step in enumerate(self.steps):
            try:
                job = compose_broadcast(
                    self.loaded, self.planner, index, step, item, self.occurrence_at
                )
            except TemplateError as exc:
                where = f"{item.where} ({item.email})"
                report.add(
                    self.places.step_problem(step.spec.id, exc, where=where, file=self.data_file)
                )
                continue
            report.messages += 1
            if self.on_job is not None:
                self.on_job(job)
            if spool is not None and report.ok:  # a failed check's jobs are never sent
                spool.add_job(position, job)
        return True


def _audience(
    loaded: LoadedCampaign, occurrence_at: datetime, engine: Engine | None
) -> Iterator[Recipient | RowProblem]:
    if loaded.spec.audience is None:
        return iter(())  # enrollment: manual: recipients come one at a time (`herald enroll`)
    if engine is None or url_audience(loaded) is None:
        return iter_audience(loaded)
    return iter_snapshot(engine, ensure_snapshot(engine, loaded, occurrence_at))


def _check_webhook_urls(
    steps: list[CompiledStep], places: SpecPlaces, report: CheckReport, environ: Mapping[str, str]
) -> None:
    webhooks = [step for step in steps if isinstance(step, CompiledWebhook)]
    if not webhooks:
        return
    try:
        policy = EgressPolicy.from_env(environ)
    except ValueError as exc:
        report.add(Problem("environment", None, f"invalid egress setting: {exc}", file=places.file))
        return
    for step in webhooks:
        try:
            check_url(step.spec.url, policy)
        except EgressDenied as exc:
            report.add(places.problem(step.spec.id, "url", str(exc)))
