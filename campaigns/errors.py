"""Errors about a campaign definition: what is wrong, and where in which file.

Every error carries its location as separate attributes (file, line, field) so the CLI can print
it however it likes, and renders itself compiler-style, e.g.

    welcome.yaml:12: steps[1].after: invalid duration '3x' (use e.g. 0, 90m, 3d)

The CLI maps any CampaignError to exit code 2 ("invalid input") and prints it without a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

# Enough to recognise a value, too little to carry a file's content (an environment, a key)
# into a terminal or a log.
EXCERPT_CHARS: Final = 80


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """A value from data, quoted for an error message: repr-escaped (so control characters,
    quotes and line breaks show as escapes) and cut to ``limit`` characters of the original.

    Every error message that quotes data from a file, a server or a campaign quotes it through
    here, so no message can echo more than a short, inert excerpt of what it read.
    """
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text)} characters)"


class CampaignError(Exception):
    """Base of errors about a campaign definition. Exit code 2 at the CLI."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        field: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line
        self.field = field
        self.hint = hint

    def location(self) -> str:
        """'file:line', 'file', 'line N' or '' — whatever is known."""
        if self.file is not None and self.line is not None:
            return f"{self.file}:{self.line}"
        if self.file is not None:
            return self.file
        if self.line is not None:
            return f"line {self.line}"
        return ""

    def __str__(self) -> str:
        parts = [part for part in (self.location(), self.field) if part]
        text = ": ".join([*parts, self.message])
        if self.hint:
            text = f"{text} ({self.hint})"
        return text


class SpecError(CampaignError):
    """The campaign YAML file itself is wrong.

    When validation finds several problems at once they are all kept in `problems` (each a
    complete CampaignError with its own line and field), so the CLI can print one per line; the
    message then lists them too, so `str()` alone is still a full report. `problems` is empty for
    a single error: the error is then its own report.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        field: str | None = None,
        hint: str | None = None,
        problems: Sequence[CampaignError] = (),
    ) -> None:
        super().__init__(message, file=file, line=line, field=field, hint=hint)
        self.problems: list[CampaignError] = list(problems)

    @classmethod
    def from_problems(cls, problems: Sequence[CampaignError], *, file: str) -> SpecError:
        """One error for all problems found in `file`; a lone problem is raised as it is."""
        if not problems:
            raise ValueError("from_problems needs at least one problem")
        if len(problems) == 1 and isinstance(problems[0], SpecError):
            return problems[0]
        listing = "\n".join(f"  {problem}" for problem in problems)
        return cls(f"{len(problems)} problems:\n{listing}", file=file, problems=problems)


class AudienceError(CampaignError):
    """The audience source cannot be read at all (missing CSV file, no email column, ...).

    Problems with single rows are not errors: they are reported as RowProblem values while the
    other rows are still delivered.
    """
