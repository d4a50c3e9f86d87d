"""Compatibility names: campaign versions live in ``dispatch.outbox.versions`` now."""

from __future__ import annotations

from dispatch.outbox.versions import (
    CHUNK,
    SUPERSEDED,
    ExistingJob,
    VersionReport,
    VersionStore,
    superseded_keys,
)

__all__ = [
    "CHUNK",
    "SUPERSEDED",
    "ExistingJob",
    "VersionReport",
    "VersionStore",
    "superseded_keys",
]
