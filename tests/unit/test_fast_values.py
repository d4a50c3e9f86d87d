"""``new_envelope`` and ``sent_completion`` build the same frozen instances as the dataclasses'
own ``__init__`` (they skip it only because it costs a microsecond per field, per job), and
``frozen_heap`` freezes the heap while any worker runs and hands it back after the last."""

from __future__ import annotations

import dataclasses
import gc

import pytest

from dispatch.heap import frozen_heap
from dispatch.outbox.jobs import Completion, claimed_job, sent_completion
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
