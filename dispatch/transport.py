"""What a transport (SMTP, webhook) tells the worker, and the interface it implements.

A transport splits a send in two around the T4 commit: ``prepare`` does everything that cannot
deliver anything (connect, MAIL, RCPT), ``deliver`` is the window in which the receiver may take
responsibility for the message (SMTP DATA's content, an HTTP request body). ``ready`` is the
step between them that still delivers nothing (SMTP's DATA command, to its 354): it may run
while T4 commits.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, fields
from datetime import datetime
from enum import StrEnum
from typing import Protocol


class Verdict(StrEnum):
    SENT = "sent"  # the receiver accepted it
    RETRY = "retry"  # definitively not accepted, temporary: try again later
    FAILED = "failed"  # definitively not accepted, permanent
    IN_DOUBT = "in_doubt"  # may or may not have been accepted


class TransportConfigError(Exception):
    """The transport cannot be used as configured (it would send a password in clear text, a
    required STARTTLS is missing, a certificate does not verify).

    Raised by ``prepare`` before anything of the job went out (no MAIL): the job is not at
    fault, so the worker gives it back untouched, stops, and reports this error.
    """

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class RelayUnavailable(Exception):
    """The relay could not be reached or would not let us in: connection refused, DNS failure,
    connect timeout, TLS failure, a refused greeting or EHLO, authentication refused.

    Raised by ``prepare`` before anything of the job went out (no MAIL). It says nothing about
    the recipient or the message, so the job must not pay for it: the worker hands the claim
    back uncounted (W4) and backs off (``dispatch.relay_circuit``). ``cause`` is a short
    human phrase ("connection refused"), ``relay`` the redacted relay ("smtp://host:25"),
    ``detail`` the library's words, scrubbed of credentials.
    """

    def __init__(self, cause: str, *, relay: str, detail: str = "") -> None:
        super().__init__(f"{cause} ({relay})")
        self.cause = cause
        self.relay = relay
        self.detail = detail

    @property
    def line(self) -> str:
        """The one line an operator reads: the cause and the relay."""
        return f"relay unreachable: {self.cause} ({self.relay})"


@dataclass(frozen=True)
class Outcome:
    verdict: Verdict
    code: int | None
    text: str
    retry_after: float | None = None  # seconds the receiver asked us to wait, if it did


@dataclass(frozen=True)
class Envelope:
    """Everything a transport needs, copied from the claimed send_job row."""

    job_id: int
    key: str
    channel: str
    sender: str
    recipient: str
    message_id: str
    payload: bytes


_ENVELOPE_FIELDS = ("job_id", "key", "channel", "sender", "recipient", "message_id", "payload")
assert tuple(f.name for f in fields(Envelope)) == _ENVELOPE_FIELDS  # new_envelope fills them


def new_envelope(
    job_id: int,
    key: str,
    channel: str,
    sender: str,
    recipient: str,
    message_id: str,
    payload: bytes,
) -> Envelope:
    """``Envelope(...)`` (the same arguments), one per send, filled without the frozen
    dataclass's ``__init__`` (an ``object.__setattr__`` per field: 3.5 µs against about 1).
    The result is the same frozen, equal, hashable instance."""
    envelope: Envelope = object.__new__(Envelope)
    values = envelope.__dict__
    values["job_id"] = job_id
    values["key"] = key
    values["channel"] = channel
    values["sender"] = sender
    values["recipient"] = recipient
    values["message_id"] = message_id
    values["payload"] = payload
    return envelope


class PreparedSend(Protocol):
    def ready(self) -> asyncio.Future[Outcome | None] | None:
        """Start the step that comes before the message itself and delivers nothing (SMTP:
        DATA, answered 354), and return its future; None for a channel without one.

        The worker starts it beside T4's commit, so the round trip hides behind it. The
        future never raises: None when the receiver waits for the message, else the Outcome
        (refused, or the connection lost: nothing of the message went out). No byte of the
        message is sent before ``deliver``.
        """

    async def deliver(self, started_at: datetime) -> Outcome:
        """Cross the point of no return. Must not raise: map every failure to an Outcome.
        Called only after T4 has committed; it starts ``ready`` if nobody did, waits for it,
        and returns its Outcome, if it gave one, without sending anything.

        ``started_at`` is when the job crossed T4 (the outbox's clock): an email's ``Date``
        (``dispatch.message_date``); channels without such a header ignore it.
        """

    async def abandon(self) -> None:
        """T4 was refused: undo the preparation without delivering anything (SMTP: RSET, or,
        once the receiver waits for the message, closing the connection)."""


class Transport(Protocol):
    async def prepare(
        self, envelope: Envelope, *, with_ready: bool = False
    ) -> PreparedSend | Outcome:
        """Everything before the point of no return. An Outcome means it stopped there (T6).

        ``with_ready``: the caller will start ``ready`` beside T4 whatever happens, so the
        transport may take that step now, with the rest (SMTP: DATA in the same write as MAIL
        and RCPT, to a relay that offers PIPELINING); ``ready`` then returns its settled future,
        and a refusal there is this method's Outcome (T6: nothing of the message went out).
        """

    async def aclose(self) -> None: ...
