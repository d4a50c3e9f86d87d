"""Settings from the environment (DESIGN §9); every one is also a CLI option."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_DATABASE_URL = "sqlite:///herald.db"
DEFAULT_SMTP_URL = "smtp://127.0.0.1:1025"


@dataclass(frozen=True)
class Settings:
    database_url: str = DEFAULT_DATABASE_URL
    smtp_url: str = DEFAULT_SMTP_URL

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        return cls(
            database_url=env.get("HERALD_DATABASE_URL", DEFAULT_DATABASE_URL),
            smtp_url=env.get("HERALD_SMTP_URL", DEFAULT_SMTP_URL),
        )
