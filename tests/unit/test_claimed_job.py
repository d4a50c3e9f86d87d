"""``claimed_job`` builds the same frozen ClaimedJob as the dataclass's own ``__init__``."""

from __future__ import annotations

import dataclasses

import pytest

from dispatch.outbox.jobs import ClaimedJob, claimed_job

VALUES = (7, 3, "k" * 64, "c", "s", "email", "a@b.test", "c@d.test", "<m@x>", b"x", 1, 0, 5, None)


def test_claimed_job_is_the_dataclass_s_own() -> None:
    fast, slow = claimed_job(VALUES), ClaimedJob(*VALUES)
    assert fast == slow
    assert hash(fast) == hash(slow)
    assert repr(fast) == repr(slow)
    assert fast.lease == (7, 3)
    assert dataclasses.replace(fast, token=4).lease == (7, 4)
    assert dataclasses.asdict(fast) == dataclasses.asdict(slow)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.token = 4  # type: ignore[misc]


def test_claimed_job_needs_every_field() -> None:
    with pytest.raises(ValueError, match="shorter"):
        claimed_job(VALUES[:-1])
