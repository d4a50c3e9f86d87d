"""Default settings, importable without importing anything else (``herald --help`` shows them)."""

from __future__ import annotations

from typing import Final

DEFAULT_DATABASE_URL: Final = "sqlite:///herald.db"
DEFAULT_SMTP_URL: Final = "smtp://127.0.0.1:1025"
