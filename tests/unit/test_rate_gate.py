"""dispatch.rate_gate without a database: which jobs ask for slots, how many of a limited key's
claims may wait for their T4 (the slot itself is taken at T4), what a refusal teaches, and what
happens when handing claims back fails (they are not sent all the same)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch.held_leases import HeldLeases
from dispatch.rate_gate import UNKNOWN_LIMIT_WAIT, RateGate, recipient_domain
from dispatch.rate_requests import RateLimited, Slotted, SlotThenStart
from dispatch.rates import domain_of
from dispatch.store import ClaimedJob, Deferral, Refusal
from dispatch.worker_report import WorkerReport


def job(job_id: int, recipient: str, campaign: str = "c", channel: str = "email") -> ClaimedJob:
    return ClaimedJob(
        id=job_id, token=1, key=f"k{job_id}", campaign=campaign, step="s", channel=channel,
        sender="news@herald.test", recipient=recipient, message_id=f"<{job_id}@h>",
        payload=b"", claims=1, send_attempts=0, max_send_attempts=5,
    )  # fmt: skip


class Unreachable:
    def begin(self) -> Any:
        raise ConnectionError("database unreachable")


class Committer:
    """Answers the gate's requests: hands back every claim asked (or fails), refuses every
    slot at T4 with the given due moment."""

    def __init__(
        self,
        *,
        fail: bool = False,
        due_in: float = 3.0,
        grant: bool = False,
        refused_by: str | None = None,
    ) -> None:
        self.grant = grant
        self.refused_by = refused_by  # the key a refusal names (None: it names none)
        self.engine = Unreachable()  # reading the limits fails (gate() skips it: fresh)
        self.store = None
        self.fail = fail
        self.due_in = due_in
        self.handed_back: list[Deferral] = []
        self.asked: list[SlotThenStart] = []

    async def submit(self, request: Any) -> Any:
        if self.fail:
            raise RuntimeError("connection lost")
        if isinstance(request, SlotThenStart):
            self.asked.append(request)
            if self.grant:
                return Slotted(datetime.now(UTC), None)
            due = datetime.now(UTC) + timedelta(seconds=self.due_in)
            if self.refused_by is None:
                return Slotted(None, due)
            return Slotted(None, due, Refusal(due, self.refused_by, datetime.now(UTC)))
        assert isinstance(request, RateLimited)
        self.handed_back.extend(request.deferrals)
        return {d.lease[0] for d in request.deferrals}


def gate(committer: Any, campaigns: set[str]) -> RateGate:
    g = RateGate(cast(Any, committer), HeldLeases(30), WorkerReport(), {"slow.test": 2.0})
    g._campaigns = campaigns  # as if read from the table
    g._campaign_rates = dict.fromkeys(campaigns, 100.0)
    g._seen = {"c", "d"}
    g._read_at = float("inf")  # fresh: no read in this test
    return g


def admit(g: RateGate, jobs: list[ClaimedJob]) -> list[int]:
    g.leases.hold(jobs, time.monotonic())
    return [j.id for j in asyncio.run(g.admit(jobs))]


def test_keys_a_job_asks_for() -> None:
    g = gate(Committer(), {"d"})
    assert g.keys_of(job(1, "a@Slow.Test")) == ("domain:slow.test",)
    assert g.keys_of(job(2, "a@other.test")) == ()
    assert g.keys_of(job(3, "a@slow.test", campaign="d")) == ("campaign:d", "domain:slow.test")
    # A webhook has no mail domain; its campaign's rate still applies.
    assert g.keys_of(job(4, "https://x.test/h", campaign="d", channel="webhook")) == ("campaign:d",)


def test_a_bursts_worth_per_key_waits_for_t4_and_the_rest_go_back_one_interval_apart() -> None:
    committer = Committer()
    g = gate(committer, set())
    before = datetime.now(UTC)
    jobs = [job(i, f"{i}@slow.test") for i in range(1, 6)] + [job(9, "f@free.test")]
    assert admit(g, jobs) == [1, 2, 9]  # slow.test at 2/s: a burst of 2
    assert g.admitted_keys((1, 1)) == ("domain:slow.test",)
    assert g.admitted_keys((9, 1)) == ()  # under no limit: the plain T4
    dues = [(d.lease[0], (d.not_before - before).total_seconds()) for d in committer.handed_back]
    assert [i for i, _ in dues] == [3, 4, 5]
    for (_, due), expected in zip(dues, [0.5, 1.0, 1.5], strict=True):
        assert expected <= due < expected + 0.5
    assert g.report.rate_limited == 3
    assert set(g.leases.jobs) == {1, 2, 9}  # those handed back are not ours to send
    # One of the two reached its T4 (or its send ended): one more may wait.
    g.forget((1, 1))
    assert admit(g, [job(6, "6@slow.test"), job(7, "7@slow.test")]) == [6]
    # A claim that ended without reaching T4 (its lease dropped) stops counting too.
    g.leases.drop((2, 1))
    assert admit(g, [job(8, "8@slow.test")]) == [8]


def test_a_slot_refused_at_t4_hands_the_job_back_and_keeps_the_key_dry_until_its_slot() -> None:
    committer = Committer(due_in=3.0)
    g = gate(committer, set())
    first = job(1, "a@slow.test")
    assert admit(g, [first]) == [1]
    slotted = asyncio.run(g.start(first, g.admitted_keys((1, 1))))
    assert slotted.started is None
    assert slotted.due is not None
    assert committer.asked[0].keys == ("domain:slow.test",)
    assert 1 not in g.leases.jobs  # handed back (W3) by that same transaction
    assert g.report.rate_limited == 1
    # The next claims of that key go back at once, without an SMTP transaction each: the
    # refused job has the slot at 3 s, so they are due one interval (0.5 s) after it, and
    # after each other. Other domains are not held.
    assert admit(g, [job(2, "b@slow.test"), job(3, "c@slow.test"), job(4, "d@free.test")]) == [4]
    later = [(d.not_before - datetime.now(UTC)).total_seconds() for d in committer.handed_back]
    assert 3.0 < later[0] <= 3.5
    assert 3.5 < later[1] <= 4.0


def test_under_two_limits_the_refusing_key_stays_dry_and_the_other_counts_its_spent_slot() -> None:
    """A job under its campaign's limit and its domain's is refused by the domain (the
    cells say which): the domain's next claims go back until the refused job's slot, and
    the campaign's slot the job took before the refusal counts against the campaign."""
    committer = Committer(due_in=3.0, refused_by="domain:slow.test")
    g = gate(committer, {"d"})
    g._campaign_rates["d"] = 2.0  # a burst of two
    first = job(1, "a@slow.test", campaign="d")
    assert admit(g, [first]) == [1]
    keys = g.admitted_keys((1, 1))
    assert keys == ("campaign:d", "domain:slow.test")
    assert asyncio.run(g.start(first, keys)).due is not None
    assert committer.handed_back == []  # refused at T4 (W3 there), none handed back yet
    # The domain: dry until the refused job's slot (3 s), whichever campaign the claim is of.
    assert admit(g, [job(2, "b@slow.test", campaign="c")]) == []
    assert 3.0 < (committer.handed_back[0].not_before - datetime.now(UTC)).total_seconds() <= 3.5
    # The campaign: one slot of its burst of two is spent, so one more claim may go on.
    assert admit(g, [job(3, "c@free.test", campaign="d"), job(4, "d@free.test", campaign="d")]) == [
        3
    ]


def test_a_refusal_that_names_no_key_teaches_nothing_about_a_job_under_two_limits() -> None:
    """Without the key's name (the cells always give it; a refusal could not, before),
    neither limit is guessed at: a wrong guess would hold back claims that are due."""
    committer = Committer(due_in=3.0)
    g = gate(committer, {"d"})
    first = job(1, "a@slow.test", campaign="d")
    assert admit(g, [first]) == [1]
    asyncio.run(g.start(first, g.admitted_keys((1, 1))))
    assert admit(g, [job(2, "b@slow.test", campaign="c"), job(3, "c@free.test", campaign="d")]) == [
        2,
        3,
    ]


def test_after_its_own_burst_a_worker_lets_no_claim_meet_a_refusal_at_t4() -> None:
    """Its grants move its estimate of the key: once the burst is taken, the next claims go
    back one interval apart, from one claim to the next, before any SMTP transaction."""
    committer = Committer(grant=True)
    g = gate(committer, set())
    burst = [job(1, "a@slow.test"), job(2, "b@slow.test")]  # slow.test: 2/s, a burst of 2
    assert admit(g, burst) == [1, 2]
    before = datetime.now(UTC)
    for claimed in burst:
        assert asyncio.run(g.start(claimed, g.admitted_keys(claimed.lease))).started is not None
    assert admit(g, [job(3, "c@slow.test"), job(4, "d@slow.test")]) == []
    assert admit(g, [job(5, "e@slow.test")]) == []  # a later claim: after those, not with them
    after = datetime.now(UTC)
    # Due 0.5, 1.0 and 1.5 s after the burst's grants (made between ``before`` and ``after``).
    for deferral, expected in zip(committer.handed_back, [0.5, 1.0, 1.5], strict=True):
        assert (deferral.not_before - before).total_seconds() >= expected - 0.01
        assert (deferral.not_before - after).total_seconds() <= expected + 0.01
    assert g.report.rate_limited == 3


def test_the_worker_learns_when_the_claims_it_handed_back_are_due() -> None:
    g = gate(Committer(), set())
    assert g.next_due() is None
    before = time.monotonic()
    assert admit(g, [job(i, f"{i}@slow.test") for i in range(1, 5)]) == [1, 2]  # 2/s: burst 2
    soonest = g.next_due()
    assert soonest is not None
    assert before + 0.5 <= soonest <= time.monotonic() + 0.5  # job 3, one interval on
    g.claimed_at(soonest)  # a claim made then took job 3 back; job 4 is due 0.5 s later
    assert g.next_due() == pytest.approx(soonest + 0.5)
    g.claimed_at(soonest + 0.5)
    assert g.next_due() is None


def test_an_earlier_claims_end_leaves_the_keys_of_the_jobs_new_claim() -> None:
    g = gate(Committer(), set())
    first = job(1, "a@slow.test")
    assert admit(g, [first]) == [1]
    again = replace(first, token=2)  # refused at T4, then claimed again before its send ended
    assert admit(g, [again]) == [1]
    g.forget(first.lease)  # the first send's clean-up
    g.leases.drop(first.lease)
    assert g.admitted_keys(again.lease) == ("domain:slow.test",)
    assert admit(g, [job(2, "b@slow.test")]) == [2]  # still counted: one of a burst of two
    assert admit(g, [job(3, "c@slow.test")]) == []


def test_a_claim_whose_campaign_limit_cannot_be_read_goes_back_for_a_while() -> None:
    committer = Committer()
    g = gate(committer, set())
    g._read_at, g._seen = None, set()  # a read is due, and none ever succeeded: it fails
    before = datetime.now(UTC)
    assert admit(g, [job(1, "a@free.test"), job(2, "b@slow.test", campaign="d")]) == []
    for deferral in committer.handed_back:
        wait = (deferral.not_before - before).total_seconds()
        assert UNKNOWN_LIMIT_WAIT <= wait < UNKNOWN_LIMIT_WAIT + 0.5
    assert g.report.rate_limited == 2
    assert not g.leases.jobs
    # What a read found before stays in force when a later one fails: "c" has no limit.
    g._seen = {"c"}
    assert admit(g, [job(3, "c@free.test"), job(4, "d@free.test", campaign="new")]) == [3]


@given(
    st.lists(st.sampled_from(["c", "d", "e", "f"]), min_size=1, max_size=8),
    st.sets(st.sampled_from(["c", "d", "e", "f"])),
    st.sets(st.sampled_from(["c", "d", "e", "f"])),
)
def test_no_claim_goes_on_under_a_limit_never_read(
    campaigns: list[str], seen: set[str], limited: set[str]
) -> None:
    g = gate(Committer(), limited & seen)
    g._read_at, g._seen = None, seen  # the read that would tell about the others fails
    jobs = [job(i, f"{i}@free.test", campaign=c) for i, c in enumerate(campaigns, 1)]
    admitted = admit(g, jobs)
    assert all(jobs[i - 1].campaign in seen for i in admitted)
    assert all(j.id in admitted for j in jobs if j.campaign in seen - limited)


def test_claims_whose_hand_back_fails_are_not_sent() -> None:
    g = gate(Committer(fail=True), set())
    jobs = [job(i, f"{i}@slow.test") for i in range(1, 5)] + [job(9, "f@free.test")]
    # The hand-back's outcome is unknown: this worker sends none of them (R1 returns them).
    assert admit(g, jobs) == [1, 2, 9]
    assert set(g.leases.jobs) == {1, 2, 9}
    assert g.report.rate_limited == 0


_ATOM = st.text(alphabet="aZ09_+-", min_size=1, max_size=5)
_LABEL = st.text(alphabet="aZ09-", min_size=1, max_size=5)


@given(
    st.one_of(
        st.builds(
            lambda local, labels: ".".join(local) + "@" + ".".join(labels),
            st.lists(_ATOM, min_size=1, max_size=3),
            st.lists(_LABEL, min_size=1, max_size=3),
        ),
        st.text(alphabet='aZ09_+-.@ <>"(),;:\\é\t', max_size=14),
    )
)
def test_the_fast_domain_of_a_recipient_is_what_the_address_parser_says(recipient: str) -> None:
    assert recipient_domain(recipient) == domain_of(recipient)


def test_display_names_and_trailing_dots_still_go_through_the_parser() -> None:
    assert recipient_domain("Ann <ann@Slow.Test.>") == "slow.test"
    assert recipient_domain("ann@SLOW.test") == "slow.test"
