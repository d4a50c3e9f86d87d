"""The idempotency key and its canonical tuple: pinned, so computing the canonical text once per
tuple (instead of once for the key and again for the job's ``key_tuple``) changes neither."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta, timezone

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
