"""The in-doubt explanation reads evidence, so load changes nothing and defects still show."""

from __future__ import annotations

from tests.chaos.evidence import JournalEvent, explain_in_doubt
from tests.support.smtp_server import Fault

HOLDER = "host:4242:abcd1234"
OTHER = "host:5151:beef0000"
TIMEOUT = "inside DATA: SMTPReadTimeoutError: Timed out waiting for server response"
RECOVERED = "lease expired during send"


def journal(*tail: JournalEvent, token: int = 7) -> list[JournalEvent]:
    return [
        JournalEvent(token, "pending", "claimed", HOLDER, None),
        JournalEvent(token, "claimed", "sending", HOLDER, None),
        *tail,
    ]


def explain(reason: str, events: list[JournalEvent], **kw: object) -> str | None:
    args: dict[str, object] = {
        "reason": reason,
        "token": 7,
        "events": events,
        "data_faults": [],
        "troubled_pids": set(),
        "lease_losers": set(),
    }
    args.update(kw)
    return explain_in_doubt(**args)  # type: ignore[arg-type]


def test_a_client_timeout_inside_data_recorded_by_the_holder_is_explained() -> None:
    events = journal(JournalEvent(7, "sending", "in_doubt", HOLDER, TIMEOUT))
    assert explain(TIMEOUT, events) == "client_timeout_in_data"


def test_server_faults_and_kills_are_explained() -> None:
    events = journal(JournalEvent(7, "sending", "in_doubt", HOLDER, TIMEOUT))
    assert explain(TIMEOUT, events, data_faults=[Fault.DELAY_REPLY]) == "server_fault_in_data"
    events = journal(JournalEvent(7, "sending", "in_doubt", OTHER, RECOVERED))
    assert explain(RECOVERED, events, troubled_pids={4242}) == "worker_killed_or_paused_in_data"
    assert explain(RECOVERED, events, lease_losers={4242}) == "lease_expired_in_data"


def test_what_the_evidence_does_not_back_stays_unexplained() -> None:
    disconnect = "inside DATA: SMTPServerDisconnected: Connection lost"
    recovered = journal(JournalEvent(7, "sending", "in_doubt", OTHER, RECOVERED))
    cases = [
        # a disconnect the server never caused
        (disconnect, journal(JournalEvent(7, "sending", "in_doubt", HOLDER, disconnect))),
        # in doubt without T4 under this lease
        (TIMEOUT, [JournalEvent(7, "claimed", "in_doubt", HOLDER, TIMEOUT)]),
        # T4 under an older lease only
        (TIMEOUT, journal(JournalEvent(7, "sending", "in_doubt", HOLDER, TIMEOUT), token=6)),
        # the job and its journal disagree about why
        (TIMEOUT, journal(JournalEvent(7, "sending", "in_doubt", HOLDER, "something else"))),
        # a timeout claimed by someone other than the holder
        (TIMEOUT, journal(JournalEvent(7, "sending", "in_doubt", OTHER, TIMEOUT))),
        # recovered, but the holder was neither troubled nor admits losing a lease
        (RECOVERED, recovered),
        ("cancelled inside DATA", journal(JournalEvent(7, "sending", "in_doubt", HOLDER, "x"))),
    ]
    for reason, events in cases:
        assert explain(reason, events) is None, (reason, events)
