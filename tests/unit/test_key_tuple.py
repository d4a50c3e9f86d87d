"""The idempotency key and its canonical tuple: pinned, so computing the canonical text once per
tuple (instead of once for the key and again for the job's ``key_tuple``) changes neither."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from dispatch.keys import KeyTuple

WHEN = datetime(2026, 1, 1, 1, tzinfo=timezone(timedelta(hours=1)))  # 00:00 UTC


def test_key_and_canonical_are_pinned() -> None:
    tuple_ = KeyTuple("c", "s", WHEN, "a@b.test")
    canonical = '["c","s","2026-01-01T00:00:00.000000+00:00","a@b.test"]'
    assert tuple_.canonical() == canonical
    assert tuple_.key() == hashlib.sha256(canonical.encode()).hexdigest()
    assert tuple_.canonical() == canonical  # asked again: the same text


def test_equal_tuples_stay_equal_after_use() -> None:
    used, fresh = KeyTuple("c", "s", WHEN, "é@b.test"), KeyTuple("c", "s", WHEN, "é@b.test")
    used.key()
    assert used == fresh
    assert hash(used) == hash(fresh)
    assert used != KeyTuple("c", "s", WHEN.astimezone(UTC) + timedelta(seconds=1), "é@b.test")
    assert '"é@b.test"' in used.canonical()  # not escaped: ensure_ascii=False


@settings(max_examples=300, deadline=None)
@given(
    campaign=st.text(),
    step=st.text(),
    recipient=st.text(),
    instant=st.datetimes(datetime(1900, 1, 1), datetime(2200, 1, 1), timezones=st.just(UTC)),
    offset_minutes=st.integers(min_value=-23 * 60, max_value=23 * 60),
)
def test_the_canonical_text_is_json_of_the_four_fields_at_any_offset(
    campaign: str, step: str, recipient: str, instant: datetime, offset_minutes: int
) -> None:
    """The encoder kept between calls and the occurrence formatted once per instant give the
    text json.dumps always gave: every key already in an outbox stays the same. An occurrence
    written at another offset is the same instant, so the same text (the cache is by instant)."""
    shifted = instant.astimezone(timezone(timedelta(minutes=offset_minutes)))
    expected = json.dumps(
        [campaign, step, instant.isoformat(timespec="microseconds"), recipient],
        ensure_ascii=False,
        separators=(",", ":"),
    )
    for occurrence in (shifted, instant, shifted):
        assert KeyTuple(campaign, step, occurrence, recipient).canonical() == expected
