"""What ``herald validate`` reports: located problems and the totals of one check.

Apart from scheduler.check so that the modules locating problems (scheduler.check_places) and
the one finding them share the types without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from campaigns.audience import Recipient

MAX_LISTED_PROBLEMS = 1000  # beyond this we count, so a broken 1M-row file stays readable


@dataclass(frozen=True)
class Problem:
    """One failure, located: ``file`` is where ``where`` points (the audience's data file or
    URL for a row, the campaign file for a step); ``field`` names the campaign key at fault
    (``steps[0].subject``) and ``spec_at`` its place (``campaign.yaml:12``) when a template
    or setting of the campaign is involved."""

    where: str  # "line 12 (bob@example.com)", "element 3" or "step welcome"
    step: str | None
    error: str
    file: str | None = None
    field: str | None = None
    spec_at: str | None = None

    def __str__(self) -> str:
        """Compiler-style: the campaign's place for a problem of the campaign itself
        (``campaign.yaml:8: steps[0].subject: step welcome: ...``), the data's place for a
        row, with the template's place after it (``people.csv: line 3: step welcome:
        steps[0].subject (campaign.yaml:8): ...``)."""
        of_the_spec = self.step is not None and self.where == f"step {self.step}"
        if (of_the_spec or self.where == "audience") and self.spec_at:
            parts = [self.spec_at, self.field, self.where]
        else:
            parts = [self.file, self.where]
            if self.step:
                parts.append(f"step {self.step}")
            if self.field:
                parts.append(f"{self.field} ({self.spec_at})" if self.spec_at else self.field)
        return ": ".join([part for part in parts if part] + [self.error])


@dataclass
class CheckReport:
    recipients: int = 0
    messages: int = 0
    duplicates: int = 0
    # Later rows of a mailbox already in the audience: not problems, each mailbox is sent once
    # (to its first row): (where the row is, where the first row of its mailbox is).
    duplicate_rows: list[tuple[str, str]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    problem_count: int = 0
    # Rows a `strict: false` URL audience rejected: recorded, skipped, not a failure.
    rejects: list[Problem] = field(default_factory=list)
    rejected: int = 0
    # The first usable row checked: validate's warnings render its parts once more.
    first_recipient: Recipient | None = None

    @property
    def ok(self) -> bool:
        return self.problem_count == 0

    def add(self, problem: Problem) -> None:
        self.problem_count += 1
        if len(self.problems) < MAX_LISTED_PROBLEMS:
            self.problems.append(problem)

    def reject(self, problem: Problem) -> None:
        self.rejected += 1
        if len(self.rejects) < MAX_LISTED_PROBLEMS:
            self.rejects.append(problem)
