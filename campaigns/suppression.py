"""Suppressing a mailbox: the one way into (and out of) the suppression list, by identity.

``dispatch`` compares suppression entries with ``send_job.mailbox`` but cannot compute an
identity (it imports nothing above it), so every entry goes in through here: any spelling of an
address suppresses its mailbox, and every other spelling of it with it.

A suppression has a scope (docs/deliverability/suppress.md):

- ``global``: nothing is sent to the mailbox, transactional mail included (hard bounces,
  complaints, an operator's decision);
- ``list:<name>``: nothing from the campaigns of that list (``list:`` in the campaign file,
  default the campaign's name). An unsubscribe from the newsletter does not stop receipts.

The worker re-checks both at T4, immediately before DATA: a mailbox suppressed after its jobs
were materialised is never sent to, and those jobs end ``cancelled`` with reason
``suppressed``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import sqlalchemy as sa

from campaigns.addresses import AddressError, mailbox_identity
from campaigns.errors import CampaignError, excerpt
from campaigns.names import CAMPAIGN_NAME_PATTERN
from dispatch.models import GLOBAL_SCOPE, send_job, suppression
from dispatch.states import State
from dispatch.store import OutboxStore

LIST_PREFIX: Final = "list:"
SCOPE_HINT: Final = "a scope is 'global' or 'list:<name>', the list (or campaign) name"
MAX_REASON: Final = 500
# Where a suppression came from (suppression.source, String(32)): who else writes entries
# names its own (unsubscribe, mailto, dsn, arf, ses, sendgrid, …).
MAX_SOURCE: Final = 32
CHUNK: Final = 500  # mailboxes per IN (…) list


class SuppressionError(CampaignError):
    """An address, scope or reason a suppression cannot take. Exit code 2 at the CLI."""


@dataclass(frozen=True)
class Suppression:
    """One entry of the list."""

    address: str  # the mailbox identity
    scope: str
    reason: str
    source: str
    created_at: datetime | None

    def as_dict(self) -> dict[str, object]:
        return {
            "address": self.address,
            "scope": self.scope,
            "reason": self.reason,
            "source": self.source,
            "created_at": None if self.created_at is None else self.created_at.isoformat(),
        }


def parse_scope(text: str) -> str:
    """``global`` or ``list:<name>`` (any letter case, surrounding spaces ignored).

    List names follow the campaign-name rule (lower-case letters, digits, ``_ . -``), so
    ``List:News`` is ``list:news``: the scope every campaign of that list checks.
    """
    scope = text.strip().lower()
    if scope == GLOBAL_SCOPE:
        return scope
    if scope.startswith(LIST_PREFIX) and CAMPAIGN_NAME_PATTERN.fullmatch(scope[len(LIST_PREFIX) :]):
        return scope
    raise SuppressionError(f"invalid scope {excerpt(text)}", hint=SCOPE_HINT)


def identity_of(address: str) -> str:
    """The mailbox identity of ``address`` (any spelling), or SuppressionError."""
    try:
        return mailbox_identity(address)
    except AddressError as error:
        raise SuppressionError(f"invalid address {excerpt(address)}: {error}") from None


def check_reason(reason: str) -> str:
    """A reason is free text, one line, not empty, at most ``MAX_REASON`` characters."""
    text = reason.strip()
    if not text:
        raise SuppressionError("the reason is empty", hint="e.g. --reason 'asked by phone'")
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in text):
        raise SuppressionError(f"control character in reason {excerpt(reason)}")
    if len(text) > MAX_REASON:
        raise SuppressionError(f"the reason is longer than {MAX_REASON} characters")
    return text


def _check_source(source: str) -> str:
    if not source or len(source) > MAX_SOURCE or not source.isascii() or not source.isprintable():
        raise SuppressionError(f"invalid suppression source {excerpt(source)}")
    return source


def suppress(
    conn: sa.Connection,
    address: str,
    reason: str,
    *,
    scope: str = GLOBAL_SCOPE,
    source: str = "manual",
) -> bool:
    """Never send to the mailbox ``address`` names again in ``scope``, whatever the spelling.

    ``address`` may be any spelling or the identity itself. Runs in the caller's transaction
    (webhooks, the inbound listener and the CLI each own theirs). Raises SuppressionError (an
    AddressError's reason included) for an invalid address, scope, reason or source; True if
    the mailbox was not suppressed in that scope before (a second call changes nothing, so the
    first reason and time are kept: the evidence of when it started).
    """
    mailbox = identity_of(address)
    chosen = parse_scope(scope)
    text = check_reason(reason)
    store = OutboxStore(conn.dialect.name)
    return store.suppress(conn, mailbox, text, scope=chosen, source=_check_source(source))


def unsuppress(conn: sa.Connection, address: str, *, scope: str = GLOBAL_SCOPE) -> bool:
    """Lift the suppression of ``address``'s mailbox in ``scope`` (that scope only).

    True if there was one. Jobs it already cancelled stay cancelled; jobs not yet past T4 may
    go out again (unless another scope still suppresses the mailbox).
    """
    mailbox = identity_of(address)
    return OutboxStore(conn.dialect.name).unsuppress(conn, mailbox, scope=parse_scope(scope))


def entries(
    conn: sa.Connection,
    *,
    scope: str | None = None,
    address: str | None = None,
    mailboxes: Sequence[str] | None = None,
) -> list[Suppression]:
    """The list, by address then scope; only ``scope``, ``address``'s mailbox and/or these
    ``mailboxes`` (identities) when given."""
    s = suppression.c
    stmt = sa.select(s.address, s.scope, s.reason, s.source, s.created_at)
    if scope is not None:
        stmt = stmt.where(s.scope == parse_scope(scope))
    if address is not None:
        stmt = stmt.where(s.address == identity_of(address))
    chunks = [stmt]
    if mailboxes is not None:
        wanted = sorted(set(mailboxes))
        chunks = [
            stmt.where(s.address.in_(wanted[start : start + CHUNK]))
            for start in range(0, len(wanted), CHUNK)
        ]
    found: list[Suppression] = []
    for chunk in chunks:
        rows = conn.execute(chunk.order_by(s.address, s.scope))
        found += [Suppression(r.address, r.scope, r.reason, r.source, r.created_at) for r in rows]
    return found


def unsent_jobs(conn: sa.Connection, mailboxes: Sequence[str], scope: str) -> int:
    """How many jobs of these mailboxes a suppression in ``scope`` will stop: not yet past
    T4 (pending or claimed) and, for a list scope, of a campaign of that list."""
    j = send_job.c
    total = 0
    for start in range(0, len(mailboxes), CHUNK):
        stmt = sa.select(sa.func.count()).where(
            j.mailbox.in_(list(mailboxes[start : start + CHUNK])),
            j.state.in_([State.PENDING.value, State.CLAIMED.value]),
        )
        if scope != GLOBAL_SCOPE:
            stmt = stmt.where(j.list_scope == scope)
        total += int(conn.execute(stmt).scalar_one())
    return total
