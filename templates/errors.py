"""The one exception the templates package raises.

Callers (campaign validation, the scheduler's fan-out) catch a single type and show its
message to an operator, so nothing from Jinja or the email package may escape past it.
"""

from __future__ import annotations


class TemplateError(Exception):
    """A template cannot be loaded, compiled or rendered."""

    def __init__(
        self, message: str, *, template: str | None = None, line: int | None = None
    ) -> None:
        # Collapsed to one line: the message ends up in logs, CLI tables and send_event rows,
        # and Jinja's own messages sometimes span several lines.
        self.message = " ".join(message.split())
        self.template = template
        self.line = line
        super().__init__(self.message)

    def __str__(self) -> str:
        if self.template is not None and self.line is not None:
            return f"{self.message} ({self.template}, line {self.line})"
        if self.template is not None:
            return f"{self.message} ({self.template})"
        if self.line is not None:
            return f"{self.message} (line {self.line})"
        return self.message

    def __reduce__(self) -> tuple[object, ...]:
        # The default reduce passes only args, losing the keyword-only template and line
        # when the error crosses a process boundary.
        return (_rebuild, (self.message, self.template, self.line))


def _rebuild(message: str, template: str | None, line: int | None) -> TemplateError:
    return TemplateError(message, template=template, line=line)
