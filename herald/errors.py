"""Herald's application-level errors, and the one place library errors are mapped to ours.

Each package keeps its own error base (``dispatch`` and ``templates`` may not import anything of
ours), so this module is where they meet: the CLI catches ``HeraldError`` plus the package bases
listed in ``USER_ERRORS``/``OPERATIONAL_ERRORS`` and prints them without a traceback.
"""

from __future__ import annotations


class HeraldError(Exception):
    """Base of the application shell's errors. ``exit_code`` is what the CLI exits with."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(HeraldError):
    """The user asked for something invalid (bad option, bad file)."""

    exit_code = 2


class DatabaseError(HeraldError):
    """The database could not be reached or refused an operation."""

    exit_code = 1


class ConfigError(HeraldError):
    """A setting (URL, environment variable) is invalid."""

    exit_code = 2
