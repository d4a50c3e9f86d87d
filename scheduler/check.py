"""``herald validate``: render every step for every recipient and list every failure.

A misspelt variable is caught before anything is sent, not at recipient 40,000. Nothing is
written anywhere.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from campaigns.audience import RowProblem, iter_audience
from campaigns.spec import LoadedCampaign
from scheduler.compose import CompileFailures, compile_steps, compose_job
from templates.errors import TemplateError

MAX_LISTED_PROBLEMS = 1000  # beyond this we count, so a broken 1M-row file stays readable


@dataclass(frozen=True)
class Problem:
    where: str  # "line 12 (bob@example.com)" or "step welcome"
    step: str | None
    error: str


@dataclass
class CheckReport:
    recipients: int = 0
    messages: int = 0
    duplicates: int = 0
    problems: list[Problem] = field(default_factory=list)
    problem_count: int = 0

    @property
    def ok(self) -> bool:
        return self.problem_count == 0

    def add(self, problem: Problem) -> None:
        self.problem_count += 1
        if len(self.problems) < MAX_LISTED_PROBLEMS:
            self.problems.append(problem)


def check_campaign(
    loaded: LoadedCampaign,
    occurrence_at: datetime,
    *,
    progress: Callable[[int], None] | None = None,
) -> CheckReport:
    report = CheckReport()
    try:
        steps = compile_steps(loaded)
    except CompileFailures as exc:
        for failure in exc.failures:
            report.add(Problem(f"step {failure.step}", failure.step, str(failure.error)))
        return report
    # 16-byte digests: memory per recipient stays small for the duplicate check.
    seen: set[bytes] = set()
    for item in iter_audience(loaded):
        if isinstance(item, RowProblem):
            report.add(Problem(f"line {item.line}", None, item.reason))
            continue
        report.recipients += 1
        digest = hashlib.blake2b(item.email.encode(), digest_size=16).digest()
        if digest in seen:
            report.duplicates += 1
            continue
        seen.add(digest)
        for step in steps:
            try:
                compose_job(loaded, step, item, occurrence_at)
            except TemplateError as exc:
                report.add(Problem(f"line {item.line} ({item.email})", step.spec.id, str(exc)))
                continue
            report.messages += 1
        if progress is not None:
            progress(1)
    if report.recipients == 0 and report.problem_count == 0:
        report.add(Problem("audience", None, "the audience is empty: nobody would be sent to"))
    return report
