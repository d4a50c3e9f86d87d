"""``new_envelope`` and ``sent_completion`` build the same frozen instances as the dataclasses'
own ``__init__`` (they skip it only because it costs a microsecond per field, per job), and
``frozen_heap`` freezes the heap and collects its young generation seldom while any worker
runs, and hands both back after the last."""

from __future__ import annotations

import dataclasses
import gc
import inspect
from dataclasses import MISSING
from datetime import UTC, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch.heap import YOUNG_THRESHOLD, frozen_heap
from dispatch.outbox.jobs import Completion, NewJob, claimed_job, new_job, sent_completion
from dispatch.outcome_completion import completion_for
from dispatch.states import State
from dispatch.transport import Envelope, Outcome, Verdict, new_envelope

ENVELOPE = (7, "k" * 64, "email", "a@b.test", "c@d.test", "<m@x>", b"payload")


def same(fast: object, slow: object) -> None:
    assert fast == slow
    assert hash(fast) == hash(slow)
    assert repr(fast) == repr(slow)
    assert dataclasses.asdict(fast) == dataclasses.asdict(slow)  # type: ignore[call-overload]


def test_new_envelope_is_the_dataclass_s_own() -> None:
    fast = new_envelope(*ENVELOPE)
    same(fast, Envelope(*ENVELOPE))
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.recipient = "x@y.test"  # type: ignore[misc]


def test_sent_completion_is_the_dataclass_s_own() -> None:
    fast = sent_completion((7, 3), 250, "ok")
    same(fast, Completion((7, 3), State.SENT, 250, "ok"))
    assert fast.transition is Completion((7, 3), State.SENT).transition
    assert fast.detail == "250 ok"
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.code = 550  # type: ignore[misc]


def test_completion_for_a_250_is_the_plain_completion() -> None:
    job = claimed_job((7, 3, "k", "c", "s", "email", "a@b", "c@d", "<m>", b"x", 1, 0, 5, None))
    done = completion_for(job, Outcome(Verdict.SENT, 250, "ok"), before_data=False, retry_base=1)
    same(done, Completion((7, 3), State.SENT, 250, "ok"))


def test_frozen_heap_while_any_worker_runs() -> None:
    before = gc.get_freeze_count()
    if before:
        pytest.fail(f"the heap was frozen before the test ({before} objects)")
    with frozen_heap():
        first = gc.get_freeze_count()
        assert first > 0
        with frozen_heap():  # a second worker in the same process
            assert gc.get_freeze_count() >= first
        assert gc.get_freeze_count() > 0, "the first worker still runs: still frozen"
    assert gc.get_freeze_count() == 0


def test_frozen_heap_keeps_a_heap_frozen_before_it_frozen() -> None:
    """herald's command line froze its start-up objects for the process's life: a worker's end
    does not undo that."""
    if gc.get_freeze_count():
        pytest.fail("the heap was frozen before the test")
    gc.freeze()
    try:
        with frozen_heap():
            assert gc.get_freeze_count() > 0
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_the_young_generation_is_collected_seldom_while_any_worker_runs() -> None:
    process = gc.get_threshold()
    assert process[0] < YOUNG_THRESHOLD, process  # else this test shows nothing
    with frozen_heap():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *process[1:])
        with frozen_heap():  # a second worker in the same process
            assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD, "the first worker still runs"
    assert gc.get_threshold() == process


@pytest.mark.parametrize("young", [0, YOUNG_THRESHOLD * 2])
def test_a_process_s_own_young_threshold_is_kept_when_it_is_off_or_higher(young: int) -> None:
    """0: the process turned automatic collection off (it stays off); a higher threshold is
    the process's choice already."""
    process = gc.get_threshold()
    gc.set_threshold(young, *process[1:])
    try:
        with frozen_heap():
            assert gc.get_threshold()[0] == young
        assert gc.get_threshold()[0] == young
    finally:
        gc.set_threshold(*process)


def test_new_job_takes_every_field_of_new_job_with_its_default() -> None:
    """A field added to NewJob must be added to new_job too, or this fails."""
    parameters = inspect.signature(new_job).parameters
    assert list(parameters) == [field.name for field in dataclasses.fields(NewJob)]
    for field in dataclasses.fields(NewJob):
        default = parameters[field.name].default
        assert default == (inspect.Parameter.empty if field.default is MISSING else field.default)


_text = st.text(max_size=20)
_when = st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=-5))]))


_REQUIRED = {
    "key": _text,
    "key_tuple": _text,
    "campaign": _text,
    "step": _text,
    "occurrence_at": _when,
    "channel": _text,
    "sender": _text,
    "recipient": _text,
    "message_id": _text,
    "payload": st.binary(max_size=50),
    "not_before": _when,
}
_OPTIONAL = {
    "max_send_attempts": st.integers(0, 9),
    "max_claims": st.integers(0, 9),
    "in_doubt_policy": _text,
    "mailbox": st.none() | _text,
    "send_window": st.none() | _text,
    "list_scope": st.none() | _text,
}


@given(st.fixed_dictionaries(_REQUIRED, optional=_OPTIONAL))
def test_new_job_is_the_dataclass_s_own(values: dict[str, Any]) -> None:
    fast = new_job(**values)
    same(fast, NewJob(**values))
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.key = "other"  # type: ignore[misc]
