"""The values that cross the outbox contract: new jobs, claimed jobs, leases, outcomes.

They are plain frozen dataclasses so every implementation (SQL, memory) and every caller
(scheduler, worker, committer, CLI) shares them without knowing how jobs are stored.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, NamedTuple

from dispatch.states import State, T, Transition

Lease = tuple[int, int]  # (job id, fencing token)

#: The outcome of a job whose recipient was suppressed when it reached T4 (its T4c reason).
SUPPRESSED = "suppressed"


@dataclass(frozen=True)
class NewJob:
    key: str
    key_tuple: str
    campaign: str
    step: str
    occurrence_at: datetime
    channel: str
    sender: str
    recipient: str
    message_id: str
    payload: bytes
    not_before: datetime
    max_send_attempts: int = 5
    max_claims: int = 10
    in_doubt_policy: str = "hold"
    # The canonical identity of the recipient's mailbox (campaigns.addresses.mailbox_identity),
    # computed by the caller since dispatch cannot import campaigns. None stands for the
    # recipient as written (tests and benchmarks that build jobs by hand).
    mailbox: str | None = None
    # When the message may go out (dispatch.wallclock.SendWindow.to_json), or None: any time.
    # The worker re-checks it at claim and hands a job outside it back until it opens (W2).
    send_window: str | None = None
    # The suppression scope of the campaign's list (``list:<name>``), checked at T4 together
    # with ``global``; None for transactional mail, which only global suppression stops.
    list_scope: str | None = None

    @property
    def mailbox_identity(self) -> str:
        return self.recipient if self.mailbox is None else self.mailbox


def new_job(
    *,
    key: str,
    key_tuple: str,
    campaign: str,
    step: str,
    occurrence_at: datetime,
    channel: str,
    sender: str,
    recipient: str,
    message_id: str,
    payload: bytes,
    not_before: datetime,
    max_send_attempts: int = 5,
    max_claims: int = 10,
    in_doubt_policy: str = "hold",
    mailbox: str | None = None,
    send_window: str | None = None,
    list_scope: str | None = None,
) -> NewJob:
    """``NewJob(...)`` (the same arguments), filled without the frozen dataclass's
    ``__init__`` (an ``object.__setattr__`` per field: 2.5 µs against 1, at every message a
    launch composes). The result is the same frozen, equal, hashable instance
    (tests/unit/test_fast_values.py)."""
    job: NewJob = object.__new__(NewJob)
    job.__dict__.update(
        key=key,
        key_tuple=key_tuple,
        campaign=campaign,
        step=step,
        occurrence_at=occurrence_at,
        channel=channel,
        sender=sender,
        recipient=recipient,
        message_id=message_id,
        payload=payload,
        not_before=not_before,
        max_send_attempts=max_send_attempts,
        max_claims=max_claims,
        in_doubt_policy=in_doubt_policy,
        mailbox=mailbox,
        send_window=send_window,
        list_scope=list_scope,
    )
    return job


@dataclass(frozen=True)
class ClaimedJob:
    id: int
    token: int
    key: str
    campaign: str
    step: str
    channel: str
    sender: str
    recipient: str
    message_id: str
    payload: bytes
    claims: int
    send_attempts: int
    max_send_attempts: int
    send_window: str | None = None  # NewJob.send_window, as stored
    # (id, token), made once: a send reads it a dozen times (its lease, its slot, its rates).
    lease: Lease = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "lease", (self.id, self.token))


CLAIMED_FIELDS = tuple(f.name for f in fields(ClaimedJob) if f.init)
_new = object.__new__


def claimed_job(values: tuple[Any, ...]) -> ClaimedJob:
    """``ClaimedJob(*values)`` (values in field order, all given), without the frozen
    dataclass's ``__init__``: it sets each of the 14 fields through ``object.__setattr__``, five
    times the cost of filling the instance's dict at once, for every job a claim returns. The
    result is the same frozen, equal, hashable instance.
    """
    job: ClaimedJob = _new(ClaimedJob)
    filled = job.__dict__
    filled.update(zip(CLAIMED_FIELDS, values, strict=True))
    filled["lease"] = (filled["id"], filled["token"])
    return job


@dataclass(frozen=True)
class LeaseRow:
    """A job as its lease holder re-reads it, while the row still carries the lease's token
    (a T4 commit whose outcome is unknown, a completion that may have committed)."""

    state: str
    # Set by this lease's T4 once the job is ``sending`` (or ``in_doubt``, or finished): the
    # message's Date, identical on every re-read. A claimed row may hold an earlier lease's.
    send_started_at: datetime | None


@dataclass(frozen=True)
class Deferral:
    """A claim handed back untried because its send window is closed (W2): due again when the
    window next opens."""

    lease: Lease
    not_before: datetime


@dataclass(frozen=True)
class SlotAsk:
    """A claimed job that may start only with a slot of each of ``keys`` (its campaign's and
    its recipient domain's rate limits, those that apply: ``dispatch.rates``)."""

    lease: Lease
    keys: tuple[str, ...]


class Refusal(NamedTuple):
    """Why a job asking for slots got none (``acquire_slots``): ``key``, the first of its keys
    (in sorted order) with no slot free, and ``due``, the moment its slot is estimated.
    The job's keys sorted before ``key`` each gave it a slot, spent unused; ``at`` is that
    moment on the database's clock (the refusal's transaction), which is what a worker's own
    estimate of those keys must count from (``dispatch.rate_gate``)."""

    due: datetime
    key: str
    at: datetime


@dataclass(frozen=True)
class Completion:
    """The result of a worker-side transition request for one lease."""

    lease: Lease
    target: State  # sent, pending (retry), failed, in_doubt
    code: int | None = None
    text: str = ""
    retry_in: float = 0.0  # seconds, for target=pending
    in_doubt_reason: str | None = None
    before_data: bool = False  # T6: the job never reached sending (error before DATA)

    @property
    def transition(self) -> Transition:
        """The one transition this outcome performs; anything else is a caller's bug."""
        found = _COMPLETIONS.get((self.target, self.before_data and self.target is not State.SENT))
        if found is None:
            raise ValueError(
                f"no transition for a {'pre-DATA ' if self.before_data else ''}"
                f"outcome ending {self.target}"
            )
        return found

    @property
    def detail(self) -> str:
        """The journal's text for this outcome."""
        code = f"{self.code} " if self.code is not None else ""
        return f"{code}{self.text}".strip()[:2000]


_COMPLETIONS: dict[tuple[State, bool], Transition] = {
    (State.SENT, False): T.SENT,
    (State.PENDING, True): T.RETRY_BEFORE_DATA,
    (State.FAILED, True): T.FAILED_BEFORE_DATA,
    (State.PENDING, False): T.RETRY_DATA_REFUSED,
    (State.FAILED, False): T.FAILED_DATA_REFUSED,
    (State.IN_DOUBT, False): T.DATA_UNKNOWN,
}

_COMPLETION_FIELDS = (
    "lease",
    "target",
    "code",
    "text",
    "retry_in",
    "in_doubt_reason",
    "before_data",
)
assert tuple(f.name for f in fields(Completion)) == _COMPLETION_FIELDS  # sent_completion fills them


def sent_completion(lease: Lease, code: int | None, text: str) -> Completion:
    """``Completion(lease, State.SENT, code, text)``, one per sent job, filled without the
    frozen dataclass's ``__init__`` (seven ``object.__setattr__`` calls: 3.6 µs against 1.5).
    The result is the same frozen, equal, hashable instance."""
    done: Completion = _new(Completion)
    values = done.__dict__
    values["lease"] = lease
    values["target"] = State.SENT
    values["code"] = code
    values["text"] = text
    values["retry_in"] = 0.0
    values["in_doubt_reason"] = None
    values["before_data"] = False
    return done


#: Every transition a completion can perform.
COMPLETION_TRANSITIONS: tuple[Transition, ...] = tuple(dict.fromkeys(_COMPLETIONS.values()))


@dataclass(frozen=True)
class HeldLeases:
    """Seconds (database clock) until the earliest lease still held in each leased state
    expires (≤ 0: it already has), None when no job in that state is leased."""

    claimed_in: float | None = None
    sending_in: float | None = None


@dataclass
class RecoveryReport:
    released: int = 0  # category 1: claimed, never started -> pending
    in_doubt: int = 0  # category 2: started, outcome unknown -> in_doubt
    dead: int = 0  # category 3: exhausted -> failed
    resent: int = 0  # in_doubt jobs whose channel policy allows an automatic resend
    details: list[tuple[int, str, str]] = field(default_factory=list)  # (job id, to, why)
    # The leases this pass left held: the worker times its next pass to the moment the first
    # of them becomes recoverable (WorkerConfig.next_recovery_in).
    held: HeldLeases = field(default_factory=HeldLeases)


def payload_hash(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()
