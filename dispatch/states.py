"""The send-job state machine, as data (DESIGN §4).

The store's guarded UPDATEs implement these transitions; this table is what tests check journals
against and what documentation is generated from. Keep the two in step.
"""

from __future__ import annotations

from enum import StrEnum


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

#: Transition name -> (allowed source states, allowed target states).
TRANSITIONS: dict[str, tuple[frozenset[State], frozenset[State]]] = {
    "T1 enqueue": (frozenset(), frozenset({State.PENDING})),
    "T2 claim": (frozenset({State.PENDING}), frozenset({State.CLAIMED})),
    "T4 start send": (frozenset({State.CLAIMED}), frozenset({State.SENDING})),
    "T5 sent": (frozenset({State.SENDING, State.IN_DOUBT}), frozenset({State.SENT})),
    "T6 pre-data outcome": (
        frozenset({State.CLAIMED}),
        frozenset({State.PENDING, State.FAILED}),
    ),
    "T7 data refused": (frozenset({State.SENDING}), frozenset({State.PENDING, State.FAILED})),
    "T8 data unknown": (frozenset({State.SENDING}), frozenset({State.IN_DOUBT})),
    "R1 release claim": (frozenset({State.CLAIMED}), frozenset({State.PENDING, State.FAILED})),
    "R2 lease lost in send": (frozenset({State.SENDING}), frozenset({State.IN_DOUBT})),
    "R3 exhausted": (frozenset({State.PENDING, State.CLAIMED}), frozenset({State.FAILED})),
    "T9 operator resolution": (
        frozenset({State.IN_DOUBT}),
        frozenset({State.SENT, State.PENDING, State.FAILED}),
    ),
    "T10 cancel": (frozenset({State.PENDING, State.CLAIMED}), frozenset({State.CANCELLED})),
    "dead retry": (frozenset({State.FAILED}), frozenset({State.PENDING})),
    # A new campaign version, in the transaction that stores it (scheduler.new_version):
    # jobs whose key it removed are cancelled (a claim is fenced: its T4 then matches nothing);
    "T11 superseded": (frozenset({State.PENDING, State.CLAIMED}), frozenset({State.CANCELLED})),
    # a claim on content it changed is released, so the job goes out with the new content;
    "T12 new content": (frozenset({State.CLAIMED}), frozenset({State.PENDING})),
    # a key an earlier version removed, and this one has again, is armed with the new content.
    "T13 restored": (frozenset({State.CANCELLED}), frozenset({State.PENDING})),
}


def allowed_edges() -> frozenset[tuple[State | None, State]]:
    """Every (from, to) pair some transition allows; ``None`` is "no row yet"."""
    edges: set[tuple[State | None, State]] = set()
    for sources, targets in TRANSITIONS.values():
        for target in targets:
            if not sources:
                edges.add((None, target))
            for source in sources:
                edges.add((source, target))
    return frozenset(edges)


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
