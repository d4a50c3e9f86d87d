"""dispatch.held_leases under any interleaving of claims, drops and heartbeats (hypothesis).

A job can be claimed again by the same worker while its earlier claim's send is finishing, so
whatever is done with an earlier claim's lease (its send's clean-up dropping it, a heartbeat
that found it gone) must leave the job's newest claim exactly as it was. The model below
states that rule on its own: per job, the newest claim, its deadline, and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from dispatch.held_leases import HeldLeases
from dispatch.store import ClaimedJob, Lease

LEASE_SECONDS = 30.0
JOBS = (1, 2, 3)


def claimed(job_id: int, token: int) -> ClaimedJob:
    return ClaimedJob(
        id=job_id, token=token, key=f"k{job_id}", campaign="c", step="s", channel="email",
        sender="news@herald.test", recipient="r@example.com", message_id=f"<{job_id}@h>",
        payload=b"x", claims=token, send_attempts=0, max_send_attempts=5,
    )  # fmt: skip


@dataclass
class Model:
    """Per job: its newest claim's token and deadline, while that claim is held."""

    held: dict[int, tuple[int, float]] = field(default_factory=dict)
    issued: list[Lease] = field(default_factory=list)
    tokens: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Claim:
    job_id: int
    now: float


@dataclass(frozen=True)
class Drop:
    pick: int  # which lease ever issued (modulo their number)


@dataclass(frozen=True)
class Renew:
    picks: list[int]
    alive: frozenset[int]
    sent_at: float


OPS = st.one_of(
    st.builds(Claim, st.sampled_from(JOBS), st.floats(0, 100)),
    st.builds(Drop, st.integers(0, 50)),
    st.builds(
        Renew,
        st.lists(st.integers(0, 50), max_size=6),
        st.frozensets(st.sampled_from(JOBS)),
        st.floats(0, 100),
    ),
)


def newest_token(model: Model, job_id: int) -> int | None:
    held = model.held.get(job_id)
    return None if held is None else held[0]


@given(st.lists(OPS, max_size=40))
def test_what_is_done_with_an_earlier_claim_never_touches_the_newest(
    ops: list[Claim | Drop | Renew],
) -> None:
    leases = HeldLeases(LEASE_SECONDS)
    model = Model()
    for op in ops:
        if isinstance(op, Claim):
            token = model.tokens[op.job_id] = model.tokens.get(op.job_id, 0) + 1
            leases.hold([claimed(op.job_id, token)], op.now)
            model.issued.append((op.job_id, token))
            model.held[op.job_id] = (token, op.now + LEASE_SECONDS)
        elif isinstance(op, Drop) and model.issued:
            lease = model.issued[op.pick % len(model.issued)]
            leases.drop(lease)
            if newest_token(model, lease[0]) == lease[1]:
                del model.held[lease[0]]
        elif isinstance(op, Renew) and model.issued:
            beat = list({model.issued[i % len(model.issued)] for i in op.picks})
            leases.renew(beat, set(op.alive), op.sent_at)
            for job_id, token in beat:
                if newest_token(model, job_id) == token:
                    deadline = op.sent_at + LEASE_SECONDS if job_id in op.alive else 0.0
                    model.held[job_id] = (token, deadline)
        assert sorted(leases.leases()) == sorted((j, t) for j, (t, _) in model.held.items())
        for lease in model.issued:
            is_held = newest_token(model, lease[0]) == lease[1]
            assert leases.holds(lease) is is_held
            assert leases.deadline(lease) == (model.held[lease[0]][1] if is_held else 0.0)


def test_an_earlier_claims_drop_keeps_the_new_claim_and_its_deadline() -> None:
    leases = HeldLeases(LEASE_SECONDS)
    leases.hold([claimed(7, 1)], 0.0)
    leases.hold([claimed(7, 2)], 5.0)  # handed back, then claimed again
    leases.drop((7, 1))  # the first send's clean-up
    leases.renew([(7, 1)], set(), 6.0)  # a heartbeat that found the first claim gone
    assert leases.holds((7, 2))
    assert not leases.holds((7, 1))
    assert leases.deadline((7, 2)) == 5.0 + LEASE_SECONDS
    assert leases.deadline((7, 1)) == 0.0
