"""Use cases of ``herald suppress``: add, remove, import and list suppressions.

Each runs in one transaction: an import of ten thousand rows is all or nothing, and ``add`` of
several addresses checks them all before writing any. Entries are stored by mailbox identity
(campaigns.suppression); the worker re-checks them at T4, so a suppression added while a
campaign is sending stops every message of that mailbox not yet in DATA.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import Engine

from campaigns.suppression import (
    Suppression,
    check_reason,
    entries,
    identity_of,
    parse_scope,
    unsent_jobs,
)
from campaigns.suppression import unsuppress as _unsuppress
from campaigns.suppression_file import read_suppression_file
from dispatch.store import OutboxStore
from herald.db import reading

MANUAL = "manual"  # suppression.source of `suppress add`
IMPORTED = "import"  # suppression.source of `suppress import`


@dataclass
class Added:
    """What ``add``/``import`` did."""

    scope: str
    added: list[str] = field(default_factory=list)  # mailbox identities newly suppressed
    already: list[str] = field(default_factory=list)  # suppressed in this scope before
    duplicates: int = 0  # rows of an import naming a mailbox an earlier row named
    stopped_jobs: int = 0  # unsent jobs of these mailboxes the suppression will stop at T4

    def as_dict(self) -> dict[str, object]:
        return {
            "scope": self.scope,
            "added": len(self.added),
            "already": len(self.already),
            "duplicates": self.duplicates,
            "unsent_jobs_stopped": self.stopped_jobs,
            "addresses": self.added,
        }


def add(
    engine: Engine,
    addresses: Sequence[str],
    *,
    scope: str,
    reason: str,
    source: str = MANUAL,
) -> Added:
    """Suppress every address's mailbox in ``scope``; nothing is written if any is invalid."""
    chosen, text = parse_scope(scope), check_reason(reason)
    mailboxes = list(dict.fromkeys(identity_of(address) for address in addresses))
    result = Added(chosen, duplicates=len(addresses) - len(mailboxes))
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        for mailbox in mailboxes:
            new = store.suppress(conn, mailbox, text, scope=chosen, source=source)
            (result.added if new else result.already).append(mailbox)
        result.stopped_jobs = unsent_jobs(conn, mailboxes, chosen)
    return result


def import_file(engine: Engine, path: Path, *, scope: str, reason: str) -> Added:
    """Suppress every address of ``path`` (campaigns.suppression_file): all, or none.

    Rows may carry their own scope; ``Added.scope`` is then the default one.
    """
    found = read_suppression_file(path, scope=scope, reason=reason)
    result = Added(parse_scope(scope), duplicates=found.duplicates)
    store = OutboxStore(engine.dialect.name)
    rows = [(e.mailbox, e.scope, e.reason) for e in found.entries]
    with engine.begin() as conn:
        present = entries(conn, mailboxes=[mailbox for mailbox, _, _ in rows])
        before = {(entry.address, entry.scope) for entry in present}
        store.suppress_many(conn, rows, source=IMPORTED)
        for mailbox, scope_of_row, _ in rows:
            listed = result.already if (mailbox, scope_of_row) in before else result.added
            listed.append(mailbox)
        by_scope: dict[str, list[str]] = {}
        for mailbox, scope_of_row, _ in rows:
            by_scope.setdefault(scope_of_row, []).append(mailbox)
        result.stopped_jobs = sum(unsent_jobs(conn, boxes, s) for s, boxes in by_scope.items())
    return result


@dataclass(frozen=True)
class Removed:
    mailbox: str
    scope: str
    removed: bool
    other_scopes: list[str]  # where the mailbox is still suppressed


def remove(engine: Engine, address: str, *, scope: str) -> Removed:
    """Lift ``address``'s suppression in ``scope``; says where else it is still suppressed."""
    mailbox, chosen = identity_of(address), parse_scope(scope)
    with engine.begin() as conn:
        removed = _unsuppress(conn, mailbox, scope=chosen)
        others = [e.scope for e in entries(conn, address=mailbox)]
    return Removed(mailbox, chosen, removed, others)


def list_entries(
    engine: Engine, *, scope: str | None = None, address: str | None = None
) -> list[Suppression]:
    """The suppression list (only ``scope`` and/or ``address``'s mailbox when given)."""
    with reading(engine) as conn:
        return entries(conn, scope=scope, address=address)
