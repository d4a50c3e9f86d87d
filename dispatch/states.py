"""The send-job state machine, as data: the one definition the store executes.

Every store operation declares the transitions it performs (``@performs``), takes its SQL guard
(``state = source`` / ``state IN sources``) from them and writes its journal rows' from/to from
them, so a move the table does not have cannot be written without changing this file. Tests
check both directions: every edge here is performed by some operation, and no operation writes a
journal row outside the edges it declares (tests/test_state_machine.py).

Each ``Transition`` is one edge kind: a name, the states it may start from (empty: "no row
yet"), ONE target, and the kind of actor that decides it. An operation that can end in several
states (recovery's expired claim: pending, or failed when poison) performs several transitions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar


class State(StrEnum):
    PENDING = "pending"
    CLAIMED = "claimed"
    SENDING = "sending"
    SENT = "sent"
    FAILED = "failed"
    CANCELLED = "cancelled"
    IN_DOUBT = "in_doubt"


#: States a job can rest in at quiescence. ``in_doubt`` is terminal until an operator acts.
TERMINAL = frozenset({State.SENT, State.FAILED, State.CANCELLED, State.IN_DOUBT})

#: States in which a worker holds a lease.
LEASED = frozenset({State.CLAIMED, State.SENDING})


class ActorKind(StrEnum):
    """Who decides a transition (the journal's ``actor`` column names the individual one)."""

    SCHEDULER = "scheduler"  # materialising a campaign, storing a new version
    WORKER = "worker"  # the lease holder, about its own lease
    RECOVERY = "recovery"  # automatic, on the database clock, about expired leases
    OPERATOR = "operator"  # an explicit human decision


class TransitionError(RuntimeError):
    """A store operation tried to journal a move its transition does not allow (a bug)."""


@dataclass(frozen=True)
class Transition:
    code: str  # short id used in docs and comments: "T4", "R2"…
    name: str
    sources: frozenset[State]  # empty: the job does not exist yet
    target: State
    actor: ActorKind

    @property
    def label(self) -> str:
        return f"{self.code} {self.name}"

    @property
    def source(self) -> State:
        """The single source state (for the transitions that have exactly one)."""
        if len(self.sources) != 1:
            raise TransitionError(f"{self.label} has {len(self.sources)} source states")
        (only,) = self.sources
        return only

    def edges(self) -> frozenset[tuple[State | None, State]]:
        if not self.sources:
            return frozenset({(None, self.target)})
        return frozenset((source, self.target) for source in self.sources)

    def check(self, source: State | None) -> None:
        """Raise unless ``source → target`` is an edge of this transition."""
        if (source, self.target) not in self.edges():
            raise TransitionError(f"{self.label}: {source} → {self.target} is not an edge")


def _t(
    code: str, name: str, sources: Iterable[State], target: State, actor: ActorKind
) -> Transition:
    return Transition(code, name, frozenset(sources), target, actor)


S, A = State, ActorKind


class T:
    """The transitions, by name. ``MACHINE`` lists them all."""

    ENQUEUE = _t("T1", "enqueue", (), S.PENDING, A.SCHEDULER)
    CLAIM = _t("T2", "claim", [S.PENDING], S.CLAIMED, A.WORKER)
    START_SEND = _t("T4", "start send", [S.CLAIMED], S.SENDING, A.WORKER)
    # A claim whose T4 guard failed, settled by its worker, most final reason first.
    UNSTARTABLE_CANCELLED = _t("T4c", "unstartable: cancelled", [S.CLAIMED], S.CANCELLED, A.WORKER)
    UNSTARTABLE_FAILED = _t("T4f", "unstartable: failed", [S.CLAIMED], S.FAILED, A.WORKER)
    UNSTARTABLE_RELEASED = _t("T4r", "unstartable: released", [S.CLAIMED], S.PENDING, A.WORKER)
    # A 250 that arrives after recovery marked the job in doubt still proves delivery.
    SENT = _t("T5", "sent", [S.SENDING, S.IN_DOUBT], S.SENT, A.WORKER)
    RETRY_BEFORE_DATA = _t("T6", "retry before data", [S.CLAIMED], S.PENDING, A.WORKER)
    FAILED_BEFORE_DATA = _t("T6f", "failed before data", [S.CLAIMED], S.FAILED, A.WORKER)
    RETRY_DATA_REFUSED = _t("T7", "data refused, retry", [S.SENDING], S.PENDING, A.WORKER)
    FAILED_DATA_REFUSED = _t("T7f", "data refused, failed", [S.SENDING], S.FAILED, A.WORKER)
    DATA_UNKNOWN = _t("T8", "data unknown", [S.SENDING], S.IN_DOUBT, A.WORKER)
    # Shutdown, or a transport that cannot be used as configured: unstarted claims go back.
    RELEASE = _t("W1", "release claim", [S.CLAIMED], S.PENDING, A.WORKER)
    # A claim whose send window is closed goes back until the window opens (not counted).
    OUTSIDE_WINDOW = _t("W2", "outside send window", [S.CLAIMED], S.PENDING, A.WORKER)
    # A claim that got no slot of its campaign's or domain's rate limit goes back until its
    # slot (not counted).
    RATE_LIMITED = _t("W3", "rate limited", [S.CLAIMED], S.PENDING, A.WORKER)
    # The relay is unreachable (refused, DNS, TLS, auth, timeout): not the job's fault, so the
    # claim goes back uncounted, due when the worker's circuit breaker next tries the relay.
    RELAY_UNAVAILABLE = _t("W4", "relay unavailable", [S.CLAIMED], S.PENDING, A.WORKER)
    EXPIRED_CLAIM = _t("R1", "lease expired before sending", [S.CLAIMED], S.PENDING, A.RECOVERY)
    POISON = _t("R1p", "poison", [S.CLAIMED], S.FAILED, A.RECOVERY)
    LOST_IN_SEND = _t("R2", "lease lost in send", [S.SENDING], S.IN_DOUBT, A.RECOVERY)
    EXHAUSTED = _t("R3", "exhausted", [S.PENDING], S.FAILED, A.RECOVERY)
    # Channels whose receivers dedupe on Idempotency-Key (webhooks, ``in_doubt: resend``).
    POLICY_RESEND = _t("R4", "policy resend", [S.IN_DOUBT], S.PENDING, A.RECOVERY)
    RESOLVE_SENT = _t("T9s", "operator: was sent", [S.IN_DOUBT], S.SENT, A.OPERATOR)
    RESOLVE_RESEND = _t("T9r", "operator: resend", [S.IN_DOUBT], S.PENDING, A.OPERATOR)
    RESOLVE_FAILED = _t("T9f", "operator: was not sent", [S.IN_DOUBT], S.FAILED, A.OPERATOR)
    CANCEL = _t("T10", "cancel", [S.PENDING, S.CLAIMED], S.CANCELLED, A.OPERATOR)
    DEAD_RETRY = _t("D1", "dead retry", [S.FAILED], S.PENDING, A.OPERATOR)
    # A new campaign version, in the transaction that stores it (dispatch.outbox.versions):
    # jobs whose key it removed are cancelled (a claim is fenced: its T4 then matches nothing);
    SUPERSEDED = _t("T11", "superseded", [S.PENDING, S.CLAIMED], S.CANCELLED, A.SCHEDULER)
    # a claim on content it changed is released, so the job goes out with the new content;
    NEW_CONTENT = _t("T12", "new content", [S.CLAIMED], S.PENDING, A.SCHEDULER)
    # a key an earlier version removed, and this one has again, is armed with the new content.
    RESTORED = _t("T13", "restored", [S.CANCELLED], S.PENDING, A.SCHEDULER)
    # A drip recipient left the audience: the step not yet past T4 is withdrawn (a claim is
    # fenced, as by T11).
    WITHDRAWN = _t("T14", "withdrawn", [S.PENDING, S.CLAIMED], S.CANCELLED, A.SCHEDULER)


del S, A

#: Every transition, in the order the docs list them.
MACHINE: tuple[Transition, ...] = tuple(v for v in vars(T).values() if isinstance(v, Transition))

#: Compatibility view (label -> (sources, targets)), the shape this module had before issue 8.
TRANSITIONS: dict[str, tuple[frozenset[State], frozenset[State]]] = {
    t.label: (t.sources, frozenset({t.target})) for t in MACHINE
}

F = TypeVar("F", bound=Callable[..., Any])

_DECLARED = "__herald_transitions__"


def performs(*transitions: Transition) -> Callable[[F], F]:
    """Declare the transitions a store operation may perform (read by tests; no runtime cost)."""

    def mark(fn: F) -> F:
        setattr(fn, _DECLARED, tuple(transitions))
        return fn

    return mark


def declared(operation: Callable[..., Any]) -> tuple[Transition, ...]:
    """The transitions ``operation`` declared with ``@performs`` (empty for reads)."""
    fn = getattr(operation, "__func__", operation)
    found: tuple[Transition, ...] = getattr(fn, _DECLARED, ())
    return found


def allowed_edges() -> frozenset[tuple[State | None, State]]:
    """Every (from, to) pair some transition allows; ``None`` is "no row yet"."""
    return frozenset(edge for t in MACHINE for edge in t.edges())


def is_valid_path(states: list[tuple[str | None, str]]) -> bool:
    """True when a journal's (from, to) pairs chain and each is an allowed edge."""
    edges = allowed_edges()
    previous: str | None = None
    for index, (source, target) in enumerate(states):
        if index > 0 and source != previous:
            return False
        src = State(source) if source is not None else None
        if (src, State(target)) not in edges:
            return False
        previous = target
    return True
